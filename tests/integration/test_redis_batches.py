"""The Redis store with batches far beyond what one script call carries (issue 12, point 2).

The planner puts at most MAX_CALL_REQS (128) requests and MAX_CALL_JOBS (2,000) jobs to reserve
in one script call; these tests send ten times that and more, through pipelines and through
single commands with thousands of ids, so every `unpack` of the script and every reply is chunked
(Lua's stack holds about 8,000 values: unchunked, they fail with "too many results to unpack").
"""

import random

import pytest

from conftest import NIL_ARRAY, RespError, encode_command, pairs, wait_until
from redisprocs import procs, url_of  # noqa: F401 (procs: fixture)

N = 20000


def _pipeline(c, cmds, timeout=60):
    c.send_raw(b"".join(encode_command(*cmd) for cmd in cmds))
    return [c.read(timeout=timeout) for _ in cmds]


def test_20000_adds_then_200_reserves_of_100(procs):
    r = procs.redis()
    s = procs.delayqd(url_of(r))
    c = s.raw(timeout=60)
    reps = _pipeline(c, [("ADD", "t", "j%d" % i, "x" * 100) for i in range(N)])
    assert [x for x in reps if isinstance(x, RespError)] == []
    reps = _pipeline(c, [("RESERVE", "TIMEOUT", 0, "COUNT", 100, "FROM", "t")] * (N // 100))
    errors = [x for x in reps if isinstance(x, RespError)]
    assert errors == [], errors[:3]
    ids = [job[1] for rep in reps for job in rep]
    assert len(ids) == N and len(set(ids)) == N
    # first added, first handed out
    assert ids[:3] == [b"j0", b"j1", b"j2"]
    # one ACK of all of them, then the topic is empty
    assert c.call("ACK", "t", *ids) == N
    stats = c.call("STATS", "t")
    assert stats[1:8:2] == [0, 0, 0, 0], stats


def test_reserve_count_1000_pipelined_and_del_of_20000_ids(procs):
    r = procs.redis()
    s = procs.delayqd(url_of(r))
    c = s.raw(timeout=60)
    _pipeline(c, [("ADD", "t", "j%d" % i, "b") for i in range(N)])
    reps = _pipeline(c, [("RESERVE", "TIMEOUT", 0, "COUNT", 1000, "FROM", "t")] * 20)
    assert [len(x) for x in reps] == [1000] * 20, [x for x in reps if isinstance(x, RespError)][:1]
    # DEL of reserved and of absent ids in one command
    ids = ["j%d" % i for i in range(N)] + ["nope%d" % i for i in range(5000)]
    assert c.call("DEL", "t", *ids) == N
    assert c.call("STATS", "t")[1:8:2] == [0, 0, 0, 0]


def test_kick_and_expiry_of_20000_jobs(procs):
    r = procs.redis()
    s = procs.delayqd(url_of(r))
    c = s.raw(timeout=60)
    # 20,000 jobs whose leases all end in the same millisecond, none may retry: all go dead
    # in one carry, then one KICK brings all of them back
    _pipeline(c, [("ADD", "t", "j%d" % i, "b", "RETRIES", 0, "TTR", 1) for i in range(N)])
    reps = _pipeline(c, [("RESERVE", "TIMEOUT", 0, "COUNT", 1000, "FROM", "t")] * 20)
    assert sum(len(x) for x in reps if isinstance(x, list)) == N
    from conftest import wait_until
    assert wait_until(lambda: c.call("STATS", "t")[7] == N, 20, 0.1), c.call("STATS", "t")
    assert c.call("KICK", "t") == N
    reps = _pipeline(c, [("RESERVE", "TIMEOUT", 0, "COUNT", 1000, "FROM", "t")] * 20)
    assert sum(len(x) for x in reps if isinstance(x, list)) == N


def test_pipelined_acks_and_dels_each_get_their_own_count(procs):
    # one packet: the store merges the ACKs (and the DELs) of one shard into one script request;
    # each must still be told how many of its ids existed
    r = procs.redis()
    s = procs.delayqd(url_of(r))
    c = s.raw(timeout=10)
    for jid in ("a", "b"):
        assert c.call("ADD", "t", jid, "x") == jid.encode()
    for jid in ("x", "y"):
        assert c.call("ADD", "t", jid, "x", "DELAY", 3600000) == jid.encode()
    assert len(c.call("RESERVE", "TIMEOUT", 0, "COUNT", 2, "FROM", "t")) == 2
    reps = _pipeline(c, [("ACK", "t", "a"), ("ACK", "t", "nope"), ("ACK", "t", "b", "nope2"),
                         ("ACK", "t", "a"), ("DEL", "t", "x"), ("DEL", "t", "y", "nope3"),
                         ("RESERVE", "TIMEOUT", 0, "COUNT", 1, "FROM", "t"),
                         ("RESERVE", "TIMEOUT", 0, "COUNT", 1, "FROM", "t")])
    assert reps[:6] == [1, 0, 1, 0, 1, 1], reps
    assert not reps[6] and not reps[7], reps[6:]
    assert c.call("STATS", "t")[1:8:2] == [0, 0, 0, 0]


def test_pipelined_adds_each_get_their_own_answer(procs):
    # one packet of ADDs to one shard: merged into one script request, each answered on its own
    r = procs.redis()
    s = procs.delayqd(url_of(r))
    c = s.raw(timeout=10)
    reps = _pipeline(c, [("ADD", "t", "a", "1"), ("ADD", "t", "a", "2"), ("ADD", "t", "b", "3"),
                         ("ADD", "t", "*", "4"), ("ADD", "t", "a", "5", "REPLACE"),
                         ("ADD", "t", "c", "6", "DELAY", 3600000), ("ADD", "t", "c", "7")])
    assert reps[0] == b"a" and reps[2] == b"b" and reps[4] == b"a" and reps[5] == b"c"
    assert isinstance(reps[1], RespError) and reps[1].code == "EXISTS", reps[1]
    assert isinstance(reps[6], RespError) and reps[6].code == "EXISTS", reps[6]
    gen = reps[3]
    assert isinstance(gen, bytes) and gen not in (b"a", b"b", b"c")
    jobs = c.call("RESERVE", "TIMEOUT", 0, "COUNT", 10, "FROM", "t")
    assert [(j[1], j[2]) for j in jobs] == [(b"b", b"3"), (gen, b"4"), (b"a", b"5")]
    assert c.call("STATS", "t")[1:8:2] == [1, 0, 3, 0]


def test_merged_requests_each_get_their_own_answer(procs):
    """Pipelined ADDs, and ACKs/DELs, of one shard become one script request each; every
    command still gets its own answer (the script answers one byte per ADD, one digit
    per ACK when all counts are below 10, else each count)."""
    r = procs.redis()
    s = procs.delayqd(url_of(r))
    c = s.raw(timeout=60)
    reps = _pipeline(c, [("ADD", "t", "a", "x"), ("ADD", "t", "a", "y"), ("ADD", "t", "b", "x"),
                         ("ADD", "t", "a", "z", "REPLACE")] +
                        [("ADD", "t", "j%d" % i, "x") for i in range(30)])
    assert [reps[0], reps[2], reps[3]] == [b"a", b"b", b"a"]
    assert isinstance(reps[1], RespError) and reps[1].code == "EXISTS", reps[1]
    assert pairs(c.call("GET", "t", "a"))["body"] == b"z"
    got = c.call("RESERVE", "TIMEOUT", 0, "COUNT", 40, "FROM", "t")
    assert len(got) == 32
    # counts of 10 and more: each count; all below 10: a digit each
    assert _pipeline(c, [("ACK", "t", *["j%d" % i for i in range(12)]), ("ACK", "t", "j12"),
                         ("ACK", "t", "j12"), ("DEL", "t", "j13", "j14", "nope"),
                         ("ACK", "t", "nope")]) == [12, 1, 0, 2, 0]
    assert _pipeline(c, [("ACK", "t", "j15"), ("ACK", "t", "j16"), ("ACK", "t", "j16"),
                         ("DEL", "t", "a")]) == [1, 1, 0, 1]


@pytest.mark.parametrize("shards", [1, 3])
def test_pipelined_gets_see_exactly_the_requests_before_them(procs, shards):
    """Pipelined GETs of one shard become one script request (one HMGET of the pool, the far
    index for the misses); each must still answer what the requests before it in the pipeline
    made of its job, and nothing of those after it. A seeded mix of runs of GETs with ADDs
    (ready, or far: DELAY 60000 with far=1), ADD REPLACEs and DELs of the same few ids, checked
    against a model of what each GET must see."""
    r = procs.redis()
    url = url_of(r, far=1, shards=shards)
    prefix = url.split("prefix=")[1].split("&")[0]
    s = procs.delayqd(url)
    c = s.raw(timeout=30)
    rnd = random.Random(8 + shards)
    ids = ["g%d" % i for i in range(12)]
    model = {}  # id -> (body, state)
    cmds, want = [], []
    for step in range(1500):
        jid = rnd.choice(ids)
        k = rnd.random()
        if k < 0.55:  # a run of GETs, mostly of one shard when shards=1
            for _ in range(rnd.randint(1, 20)):
                g = rnd.choice(ids)
                cmds.append(("GET", "t", g))
                want.append(("get", model.get(g)))
            continue
        delay, state = ((60000, b"delayed") if rnd.random() < 0.5 else (0, b"ready"))
        body = "b%d" % step
        if k < 0.75:
            cmds.append(("ADD", "t", jid, body, "DELAY", delay))
            if jid in model:
                want.append(("err", "EXISTS"))
            else:
                model[jid] = (body.encode(), state)
                want.append(("val", jid.encode()))
        elif k < 0.85:
            cmds.append(("ADD", "t", jid, body, "DELAY", delay, "REPLACE"))
            model[jid] = (body.encode(), state)
            want.append(("val", jid.encode()))
        else:
            other = rnd.choice(ids)
            both = {jid, other}
            cmds.append(("DEL", "t", *both))
            want.append(("val", sum(1 for x in both if model.pop(x, None))))
    # in packets of 300 commands: each is read at once and goes out as calls of many requests
    reps = []
    for i in range(0, len(cmds), 300):
        reps += _pipeline(c, cmds[i:i + 300])
    ngets = 0
    for i, (cmd, (kind, w), rep) in enumerate(zip(cmds, want, reps)):
        if kind == "get":
            ngets += 1
            if w is None:
                assert rep in (None, NIL_ARRAY), (i, cmd, rep)
            else:
                job = pairs(rep)
                assert (job["body"], job["state"]) == w, (i, cmd, job)
        elif kind == "err":
            assert isinstance(rep, RespError) and rep.code == w, (i, cmd, rep)
        else:
            assert rep == w, (i, cmd, rep)
    assert ngets > 3000
    # far jobs were read back inside runs of GETs, and the delayed ones left are all far
    assert sum(1 for kind, w in want if kind == "get" and w and w[1] == b"delayed") > 300
    rc = r.client()
    far = sum(int(rc.hget("{%s:t:%d}:stats" % (prefix, k), "fn") or 0) for k in range(shards))
    assert far == sum(1 for _, st in model.values() if st == b"delayed") > 0


@pytest.mark.parametrize("order", ["acks_first", "dels_first"])
def test_merged_acks_of_reserved_jobs_and_dels_of_ready_ones(procs, order):
    """A reserve leaves the record as it was (ready), so in a merged run of ACKs and DELs that
    are not all of reserved jobs the script cannot tell a reserved job from a ready one by its
    record: the ready ones must still leave the ready list, and only they."""
    r = procs.redis()
    s = procs.delayqd(url_of(r))
    c = s.raw(timeout=10)
    for jid in "abcdefg":
        assert c.call("ADD", "t", jid, "x") == jid.encode()
    assert [j[1] for j in c.call("RESERVE", "TIMEOUT", 0, "COUNT", 3, "FROM", "t")] == \
        [b"a", b"b", b"c"]
    acks = [("ACK", "t", "a"), ("ACK", "t", "b", "nope"), ("ACK", "t", "c")]
    dels = [("DEL", "t", "d"), ("DEL", "t", "e", "e")]
    cmds = acks + dels if order == "acks_first" else dels + acks
    reps = _pipeline(c, cmds)
    want = [1, 1, 1] + [1, 1] if order == "acks_first" else [1, 1] + [1, 1, 1]
    assert reps == want, reps
    assert c.call("LIST", "t", "ready") == [b"0", [b"f", b"g"]]
    assert c.call("STATS", "t")[1:8:2] == [0, 2, 0, 0]
    assert [j[1] for j in c.call("RESERVE", "TIMEOUT", 0, "COUNT", 10, "FROM", "t")] == \
        [b"f", b"g"]
    # and the reverse: a ready job's DEL among ACKs of reserved jobs that were delayed
    # (their records still say delayed: the carry does not rewrite them)
    assert c.call("ADD", "t", "h", "x", "DELAY", 1) == b"h"
    assert wait_until(lambda: c.call("STATS", "t")[3] == 1, 5)
    assert [j[1] for j in c.call("RESERVE", "TIMEOUT", 0, "COUNT", 1, "FROM", "t")] == [b"h"]
    assert c.call("ADD", "t", "i", "x") == b"i"
    assert _pipeline(c, [("ACK", "t", "f", "h"), ("DEL", "t", "i"), ("ACK", "t", "g")]) == \
        [2, 1, 1]
    assert c.call("STATS", "t")[1:8:2] == [0, 0, 0, 0]
