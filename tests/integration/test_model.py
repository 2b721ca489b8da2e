"""Random command sequences checked against a reference model of DESIGN §2 (no timing: delays
are 0 or one hour, leases 30 s), and timer precision across the levels of the timing wheel."""

import random
import time

import pytest

from conftest import NIL_ARRAY, RespError, encode_command, now_ms, pairs

TOPICS = ["ta", "tb"]
IDS = ["j%d" % i for i in range(10)]
HOUR = 3600000


class Model:
    def __init__(self):
        self.jobs = {}  # (topic, id) -> dict(state, attempts, retries, body, due)

    def in_topic(self, topic, state=None):
        return {k: v for k, v in self.jobs.items() if k[0] == topic and (state is None or v["state"] == state)}


def refresh_due(c, m, key):
    m.jobs[key]["due"] = pairs(c.call("GET", *key))["due"]


def step(c, m, rnd, log):
    op = rnd.choice(["add", "add", "add", "del", "reserve", "reserve", "ack", "nack", "nack",
                     "touch", "kick", "list", "stats", "get", "topics", "purge"])
    topic = rnd.choice(TOPICS)
    jid = rnd.choice(IDS)
    key = (topic, jid)
    log.append((op, topic, jid))
    if op == "add":
        delayed = rnd.random() < 0.3
        retries = rnd.randrange(3)
        replace = rnd.random() < 0.3
        body = b"b%d" % rnd.randrange(1000)
        args = ["ADD", topic, jid, body, "RETRIES", retries] + (["DELAY", HOUR] if delayed else [])
        if replace:
            args.append("REPLACE")
        rep = c.call(*args)
        old = m.jobs.get(key)
        if old and not replace:
            assert isinstance(rep, RespError) and rep.code == "EXISTS", rep
        elif old and old["state"] == "reserved":
            assert isinstance(rep, RespError) and rep.code == "BUSY", rep
        else:
            assert rep == jid.encode(), rep
            m.jobs[key] = dict(state="delayed" if delayed else "ready", attempts=0, retries=retries, body=body)
            refresh_due(c, m, key)
    elif op == "del" or op == "ack":
        ids = rnd.sample(IDS, rnd.randrange(1, 4))
        rep = c.call(op.upper(), topic, *ids)
        assert rep == sum((topic, j) in m.jobs for j in ids), (rep, ids)
        for j in ids:
            m.jobs.pop((topic, j), None)
    elif op == "reserve":
        topics = rnd.sample(TOPICS, rnd.randrange(1, 3))
        count = rnd.randrange(1, 4)
        rep = c.call("RESERVE", "TIMEOUT", 0, "COUNT", count, "FROM", *topics)
        ready = {k: v for t in topics for k, v in m.in_topic(t, "ready").items()}
        if not ready:
            assert rep is NIL_ARRAY, rep
            return
        assert isinstance(rep, list) and len(rep) == min(count, len(ready)), (rep, ready)
        got = [(j[0].decode(), j[1].decode()) for j in rep]
        assert len(set(got)) == len(got)
        for (t, j), job in zip(got, rep):
            assert (t, j) in ready, ((t, j), ready)
            mj = m.jobs[(t, j)]
            assert job[2] == mj["body"] and job[3] == mj["attempts"] + 1, (job, mj)
        for t in topics:
            # kicked jobs are left out here: their order is checked (and reported) by
            # test_transitions.py::test_kicked_job_order_matches_its_due
            mine = [m.jobs[k]["due"] for k in got if k[0] == t and not m.jobs[k].get("kicked")]
            rest = [v["due"] for k, v in ready.items() if k[0] == t and k not in got and not v.get("kicked")]
            if mine and rest:
                assert max(mine) <= min(rest), "oldest due first violated in %s" % t
        for k in got:
            m.jobs[k].pop("kicked", None)
            m.jobs[k]["state"] = "reserved"
            m.jobs[k]["attempts"] += 1
    elif op == "nack":
        later = rnd.random() < 0.5
        rep = c.call("NACK", topic, jid, "DELAY", HOUR if later else 0)
        mj = m.jobs.get(key)
        if mj is None or mj["state"] != "reserved":
            assert isinstance(rep, RespError), rep
            if mj is not None:
                assert rep.code == "NOTRESERVED", rep
            return
        if mj["attempts"] > mj["retries"]:
            want = "dead"
        else:
            want = "delayed" if later else "ready"
        assert rep == want.encode(), (rep, mj)
        mj["state"] = want
        refresh_due(c, m, key)
    elif op == "touch":
        rep = c.call("TOUCH", topic, jid)
        mj = m.jobs.get(key)
        if mj is None or mj["state"] != "reserved":
            assert isinstance(rep, RespError), rep
        else:
            assert isinstance(rep, int) and rep > now_ms() + 20000, rep
    elif op == "kick":
        rep = c.call("KICK", topic)
        dead = m.in_topic(topic, "dead")
        assert rep == len(dead), (rep, dead)
        for k in dead:
            m.jobs[k].update(state="ready", attempts=0, kicked=True)
            refresh_due(c, m, k)
    elif op == "list":
        st = rnd.choice(["ready", "delayed", "reserved", "dead"])
        seen, cursor = set(), None
        for _ in range(100):
            args = ["LIST", topic, st, "COUNT", rnd.randrange(1, 5)] + (["CURSOR", cursor] if cursor else [])
            cursor, ids = c.call(*args)
            seen |= {x.decode() for x in ids}
            if cursor == b"0":
                break
        assert seen == {k[1] for k in m.in_topic(topic, st)}, (st, seen)
    elif op == "stats":
        d = pairs(c.call("STATS", topic))
        for st in ("delayed", "ready", "reserved", "dead"):
            assert d["jobs_" + st] == len(m.in_topic(topic, st)), (st, d)
    elif op == "get":
        g = c.call("GET", topic, jid)
        mj = m.jobs.get(key)
        if mj is None:
            assert g is None, g
        else:
            d = pairs(g)
            assert (d["state"].decode(), d["attempts"], d["body"], d["retries"]) == \
                (mj["state"], mj["attempts"], mj["body"], mj["retries"]), (d, mj)
            assert ("deadline" in d) == (mj["state"] == "reserved")
    elif op == "topics":
        assert sorted(x.decode() for x in c.call("TOPICS")) == sorted({k[0] for k in m.jobs})
    elif op == "purge":
        if rnd.random() < 0.3:
            rep = c.call("PURGE", topic)
            assert rep == len(m.in_topic(topic)), rep
            for k in list(m.in_topic(topic)):
                del m.jobs[k]


@pytest.mark.parametrize("seed", range(4))
def test_random_against_model(c, seed):
    rnd = random.Random(seed)
    m = Model()
    log = []
    try:
        for _ in range(500):
            step(c, m, rnd, log)
    except AssertionError as e:
        raise AssertionError("%s\nlast ops: %r" % (e, log[-8:])) from None
    d = pairs(c.call("STATS"))
    for st in ("delayed", "ready", "reserved", "dead"):
        assert d["jobs_" + st] == sum(v["state"] == st for v in m.jobs.values())


# ---------------------------------------------------------------- timer precision

def test_timers_across_wheel_levels(c, raw):
    """Due times spread over the boundaries of 64 ms and 4096 ms wheel levels; every job must
    reach a waiting consumer at its due time: never early, and not a sweep or polling interval
    late. Precision itself (p99 under a millisecond) is a benchmark (docs/benchmarks.md): a
    bound of a few ms here would fail whenever a loaded CI machine stalls the process."""
    delays = [1, 5, 63, 64, 65, 100, 127, 128, 129, 250, 255, 256, 257, 511, 512, 700, 1023,
              1024, 1025, 1500, 2047, 2048, 2049, 3000, 4095, 4096, 4097, 4300]
    dues = {}
    cmds = [encode_command("ADD", "w", "d%d" % d, "x", "DELAY", d) for d in delays]
    c.send_raw(b"".join(cmds))
    for _ in cmds:
        c.read()
    for d in delays:
        dues[b"d%d" % d] = pairs(c.call("GET", "w", "d%d" % d))["due"]
    w = raw(timeout=10)
    lateness = {}
    order = []
    while len(order) < len(delays):
        got = w.call("RESERVE", "TIMEOUT", 6000, "COUNT", 10, "FROM", "w")
        t = now_ms()
        assert got is not NIL_ARRAY, "jobs never came due: %r" % sorted(set(dues) - set(order))
        for j in got:
            order.append(j[1])
            lateness[j[1]] = t - dues[j[1]]
    early = {k: v for k, v in lateness.items() if v < -1}
    late = {k: v for k, v in lateness.items() if v >= 250}
    assert not early, "delivered early (ms): %r" % early
    assert not late, "delivered late (ms): %r" % late
    assert order == sorted(order, key=lambda k: dues[k])


def test_many_jobs_due_in_the_same_millisecond(c, raw):
    n = 5000
    at = now_ms() + 3000  # adding 5000 takes ~100 ms; the margin is for a loaded machine
    cmds = b"".join(encode_command("ADD", "same", "s%05d" % i, "x", "AT", at) for i in range(n))
    c.send_raw(cmds)
    for _ in range(n):
        c.read(timeout=20)
    assert at > now_ms(), "adding took too long for this test's margin"
    w = raw(timeout=20)
    got = []
    first = None
    while len(got) < n:
        rep = w.call("RESERVE", "TIMEOUT", 5000, "COUNT", 1000, "FROM", "same")
        assert rep is not NIL_ARRAY
        if first is None:
            first = now_ms()
        got += [j[1] for j in rep]
    done = now_ms()
    assert got == [b"s%05d" % i for i in range(n)]
    # Prompt, not on a polling interval (the Redis store's sweep runs every 900 ms); the 1 ms
    # figure is a benchmark (scripts/burst-bench), and moving 5000 jobs through Redis takes
    # tens of ms, more on a busy machine.
    assert -1 <= first - at < 500, first - at
    assert done - at < 3000


def test_far_future_jobs(c):
    far = now_ms() + 9 * 365 * 24 * 3600 * 1000
    c.call("ADD", "f", "far", "x", "AT", far)
    c.call("ADD", "f", "week", "x", "DELAY", 7 * 24 * 3600 * 1000)
    assert pairs(c.call("GET", "f", "far"))["due"] == far
    assert c.call("RESERVE", "TIMEOUT", 50, "FROM", "f") is NIL_ARRAY
    assert c.call("DEL", "f", "far", "week") == 2
    c.call("ADD", "f", "soon", "x", "DELAY", 30)
    assert c.call("RESERVE", "TIMEOUT", 1000, "FROM", "f")[0][1] == b"soon"
    time.sleep(0.01)
