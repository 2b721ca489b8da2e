"""The job state machine of DESIGN §2, ordering, generated ids, LIST cursors, PURGE, STATS, TOPICS."""

import time

import pytest

from conftest import (NIL_ARRAY, STATS_KEYS, assert_between, assert_err, encode_command, now_ms, pairs,
                      wait_until)


def get(c, topic, jid):
    g = c.call("GET", topic, jid)
    return None if g is None else pairs(g)


def state(c, topic, jid):
    d = get(c, topic, jid)
    return None if d is None else d["state"]


def reserve(c, *topics, timeout=0, count=None):
    args = ["RESERVE", "TIMEOUT", timeout]
    if count:
        args += ["COUNT", count]
    rep = c.call(*args, "FROM", *topics)
    return [] if rep is NIL_ARRAY else rep


def wait_state(c, topic, jid, want, timeout=2.0):
    got = wait_until(lambda: state(c, topic, jid) == want, timeout, 0.003)
    assert got, "job %s/%s never became %r (now %r)" % (topic, jid, want, state(c, topic, jid))


# ---------------------------------------------------------------- delayed -> ready

def test_delayed_becomes_ready_on_time(c):
    c.call("ADD", "t", "a", "x", "DELAY", 150)
    due = get(c, "t", "a")["due"]
    assert state(c, "t", "a") == b"delayed"
    assert reserve(c, "t") == []
    wait_state(c, "t", "a", b"ready")
    assert now_ms() >= due - 1
    assert now_ms() - due < 200
    got = reserve(c, "t")
    assert got[0][1] == b"a" and got[0][3] == 1


def test_delayed_not_ready_early(c):
    c.call("ADD", "t", "a", "x", "DELAY", 300)
    due = get(c, "t", "a")["due"]
    while now_ms() < due - 30:
        assert state(c, "t", "a") == b"delayed"
        time.sleep(0.02)
    wait_state(c, "t", "a", b"ready")


def test_deleted_delayed_job_never_fires(c):
    c.call("ADD", "t", "a", "x", "DELAY", 50)
    assert c.call("DEL", "t", "a") == 1
    time.sleep(0.12)
    assert reserve(c, "t") == [] and c.call("TOPICS") == []


# ---------------------------------------------------------------- lease expiry

def test_ttr_expiry_redelivers_and_counts_attempts(c):
    c.call("ADD", "t", "a", "x", "TTR", 100)
    first = reserve(c, "t")[0]
    assert first[3] == 1
    assert state(c, "t", "a") == b"reserved"
    wait_state(c, "t", "a", b"ready", timeout=1.0)
    assert now_ms() >= first[4] - 1
    d = get(c, "t", "a")
    assert d["attempts"] == 1 and "deadline" not in d
    t0 = now_ms()
    second = reserve(c, "t")[0]
    assert second[1] == b"a" and second[3] == 2
    assert_between(second[4], t0 + 100, now_ms() + 100)


def test_blocking_reserve_gets_expired_job(c, raw):
    c.call("ADD", "t", "a", "x", "TTR", 80)
    first = reserve(c, "t")[0]
    c2 = raw()
    t0 = time.monotonic()
    got = reserve(c2, "t", timeout=2000)
    waited = time.monotonic() - t0
    assert got[0][1] == b"a" and got[0][3] == 2
    assert waited < 1.0
    assert now_ms() >= first[4] - 1


def test_retries_exhausted_by_expiry_goes_dead(c):
    c.call("ADD", "t", "a", "x", "TTR", 50, "RETRIES", 1)
    assert reserve(c, "t")[0][3] == 1
    wait_state(c, "t", "a", b"ready")  # attempts 1 <= retries 1
    assert reserve(c, "t")[0][3] == 2
    wait_state(c, "t", "a", b"dead")  # attempts 2 > retries 1
    d = get(c, "t", "a")
    assert d["attempts"] == 2
    assert reserve(c, "t") == []
    assert c.call("LIST", "t", "dead") == [b"0", [b"a"]]


def test_retries_zero_dies_on_first_expiry(c):
    c.call("ADD", "t", "a", "x", "TTR", 50, "RETRIES", 0)
    reserve(c, "t")
    wait_state(c, "t", "a", b"dead")
    assert reserve(c, "t") == []


def test_touch_extends_lease(c):
    # Deadlines are read from the replies, so a slow machine cannot make the lease end between
    # the steps: only a stall of over a second between RESERVE and TOUCH could.
    c.call("ADD", "t", "a", "x", "TTR", 2000)
    first = reserve(c, "t")[0][4]
    time.sleep(1.0)
    before = now_ms()
    deadline = c.call("TOUCH", "t", "a")   # now + the job's ttr
    assert_between(deadline, before + 2000, now_ms() + 2000)
    assert wait_until(lambda: now_ms() > first + 100, 5.0)  # past the original deadline
    assert state(c, "t", "a") == b"reserved"
    assert get(c, "t", "a")["deadline"] == deadline
    c.call("TOUCH", "t", "a", "TTR", 60)
    wait_state(c, "t", "a", b"ready", timeout=5.0)
    assert get(c, "t", "a")["ttr"] == 2000  # TOUCH TTR does not change the job's ttr


def test_touch_after_expiry_is_notreserved(c):
    c.call("ADD", "t", "a", "x", "TTR", 40)
    reserve(c, "t")
    wait_state(c, "t", "a", b"ready")
    assert_err(c.call("TOUCH", "t", "a"), "NOTRESERVED")
    assert_err(c.call("NACK", "t", "a"), "NOTRESERVED")


def test_ack_after_expiry_still_removes(c, raw):
    # ACK is idempotent and accepted in any state: the work was done
    c.call("ADD", "t", "a", "x", "TTR", 50)
    reserve(c, "t")
    c2 = raw()
    assert reserve(c2, "t", timeout=2000)[0][3] == 2
    assert c.call("ACK", "t", "a") == 1
    assert c2.call("ACK", "t", "a") == 0
    assert c.call("GET", "t", "a") is None


def test_deleted_reserved_job_is_not_redelivered(c):
    c.call("ADD", "t", "a", "x", "TTR", 50)
    reserve(c, "t")
    assert c.call("DEL", "t", "a") == 1
    time.sleep(0.12)
    assert reserve(c, "t") == [] and c.call("TOPICS") == []


def test_acked_job_is_not_redelivered(c):
    c.call("ADD", "t", "a", "x", "TTR", 50)
    reserve(c, "t")
    assert c.call("ACK", "t", "a") == 1
    time.sleep(0.12)
    assert reserve(c, "t") == [] and c.call("STATS", "t")[17] == 0  # expired == 0


# ---------------------------------------------------------------- NACK and backoff

def nack_due(c, topic, jid, *opts):
    t0 = now_ms()
    st = c.call("NACK", topic, jid, *opts)
    t1 = now_ms()
    return st, t0, t1, get(c, topic, jid)


def test_nack_with_delay(c):
    c.call("ADD", "t", "a", "x")
    reserve(c, "t")
    st, t0, t1, d = nack_due(c, "t", "a", "DELAY", 150)
    assert st == b"delayed" and d["state"] == b"delayed"
    assert_between(d["due"], t0 + 150, t1 + 150)
    assert d["attempts"] == 1 and "deadline" not in d
    got = reserve(c, "t", timeout=2000)
    assert got[0][3] == 2
    assert now_ms() >= d["due"] - 1


def test_nack_default_backoff_is_exp_1000(c):
    c.call("ADD", "t", "a", "x")
    reserve(c, "t")
    st, t0, t1, d = nack_due(c, "t", "a")
    assert st == b"delayed"
    assert_between(d["due"], t0 + 1000, t1 + 1000)


def run_backoff(c, opts, expected, retries=10):
    c.call("ADD", "t", "a", "x", "RETRIES", retries, "BACKOFF", *opts)
    for n, want in enumerate(expected, start=1):
        got = reserve(c, "t", timeout=3000)
        assert got and got[0][3] == n, got
        st, t0, t1, d = nack_due(c, "t", "a")
        assert st == b"delayed", (n, st)
        assert_between(d["due"], t0 + want, t1 + want)


def test_nack_backoff_exp_doubles(c):
    run_backoff(c, ["EXP", 60, 10000], [60, 120, 240])


def test_nack_backoff_exp_capped(c):
    run_backoff(c, ["exp", 40, 100], [40, 80, 100, 100])


def test_nack_backoff_fixed(c):
    run_backoff(c, ["FIXED", 70], [70, 70, 70])


def test_nack_explicit_delay_overrides_backoff(c):
    c.call("ADD", "t", "a", "x", "BACKOFF", "FIXED", 600000)
    reserve(c, "t")
    st, t0, t1, d = nack_due(c, "t", "a", "DELAY", 50)
    assert_between(d["due"], t0 + 50, t1 + 50)


def test_nack_retries_exhausted_goes_dead(c):
    c.call("ADD", "t", "a", "x", "RETRIES", 1)
    reserve(c, "t")
    assert c.call("NACK", "t", "a", "DELAY", 0) == b"ready"  # attempts 1 <= 1
    assert reserve(c, "t")[0][3] == 2
    assert c.call("NACK", "t", "a", "DELAY", 0) == b"dead"   # attempts 2 > 1
    d = get(c, "t", "a")
    assert d["state"] == b"dead" and d["attempts"] == 2
    assert reserve(c, "t") == []


def test_nacked_job_goes_behind_older_ready_jobs(c):
    c.call("ADD", "t", "a", "x")
    c.call("ADD", "t", "b", "x")
    assert reserve(c, "t")[0][1] == b"a"
    time.sleep(0.005)
    c.call("NACK", "t", "a", "DELAY", 0)   # due = now > due of b
    assert [j[1] for j in reserve(c, "t", count=2)] == [b"b", b"a"]


# ---------------------------------------------------------------- KICK

def make_dead(c, topic, jid):
    c.call("ADD", topic, jid, "x", "RETRIES", 0)
    got = c.call("RESERVE", "TIMEOUT", 0, "FROM", topic)
    assert got[0][1] == jid.encode()
    assert c.call("NACK", topic, jid) == b"dead"


def test_kick_moves_dead_to_ready_and_resets_attempts(c):
    for j in ("d1", "d2", "d3"):
        make_dead(c, "t", j)
    make_dead(c, "other", "o1")
    assert c.call("KICK", "t", "COUNT", 2) == 2
    assert len(c.call("LIST", "t", "dead")[1]) == 1
    assert c.call("KICK", "t") == 1
    assert c.call("KICK", "t") == 0
    for j in ("d1", "d2", "d3"):
        d = get(c, "t", j)
        assert d["state"] == b"ready" and d["attempts"] == 0
    assert state(c, "other", "o1") == b"dead"
    got = reserve(c, "t", count=5)
    assert len(got) == 3 and all(j[3] == 1 for j in got)


def test_kickjob_moves_one_dead_job(c):
    for j in ("d1", "d2"):
        make_dead(c, "t", j)
    c.call("ADD", "t", "r", "x")
    c.call("ADD", "t", "later", "x", "DELAY", 60000)
    assert c.call("KICKJOB", "t", "d2") == 1
    d = get(c, "t", "d2")
    assert d["state"] == b"ready" and d["attempts"] == 0
    assert state(c, "t", "d1") == b"dead"
    # only a dead job moves; absent ones count 0
    assert [c.call("KICKJOB", "t", j) for j in ("d2", "r", "later", "nope")] == [0, 0, 0, 0]
    assert c.call("KICKJOB", "nope", "x") == 0
    assert [state(c, "t", j) for j in ("r", "later", "d1")] == [b"ready", b"delayed", b"dead"]
    st = pairs(c.call("STATS", "t"))
    assert st["kicked"] == 1 and st["jobs_dead"] == 1 and st["jobs_ready"] == 2
    got = [j[1] for j in reserve(c, "t", count=5)]
    assert sorted(got) == [b"d2", b"r"]


def test_kicked_job_order_matches_its_due(c):
    # "oldest due first": whatever due a kicked job gets, RESERVE must agree with GET
    make_dead(c, "t", "a")
    time.sleep(0.01)
    c.call("ADD", "t", "b", "x")
    time.sleep(0.01)
    assert c.call("KICK", "t") == 1
    dues = {j: get(c, "t", j)["due"] for j in ("a", "b")}
    got = [j[1].decode() for j in reserve(c, "t", count=2)]
    assert got == sorted(got, key=dues.get), "handed out %r but GET says due %r" % (got, dues)


def test_expired_job_order_matches_its_due(c):
    c.call("ADD", "t", "a", "x", "TTR", 30)
    reserve(c, "t")
    time.sleep(0.005)
    c.call("ADD", "t", "b", "x")
    wait_state(c, "t", "a", b"ready")
    dues = {j: get(c, "t", j)["due"] for j in ("a", "b")}
    got = [j[1].decode() for j in reserve(c, "t", count=2)]
    assert got == sorted(got, key=dues.get), "handed out %r but GET says due %r" % (got, dues)


def test_kick_does_not_touch_other_states(c):
    c.call("ADD", "t", "r", "x")
    c.call("ADD", "t", "d", "x", "DELAY", 60000)
    c.call("ADD", "t", "s", "x")
    reserve(c, "t")  # r
    assert c.call("KICK", "t") == 0
    assert [state(c, "t", j) for j in "rds"] == [b"reserved", b"delayed", b"ready"]


# ---------------------------------------------------------------- REPLACE

def test_replace_ready_job_resets_attempts(c):
    c.call("ADD", "t", "a", "old", "TTR", 50, "RETRIES", 5)
    reserve(c, "t")
    wait_state(c, "t", "a", b"ready")
    assert get(c, "t", "a")["attempts"] == 1
    t0 = now_ms()
    assert c.call("ADD", "t", "a", "new", "DELAY", 60000, "REPLACE") == b"a"
    t1 = now_ms()
    d = get(c, "t", "a")
    assert d["body"] == b"new" and d["state"] == b"delayed" and d["attempts"] == 0
    assert d["ttr"] == 30000 and d["retries"] == 3  # the new ADD's options, not the old job's
    assert_between(d["due"], t0 + 60000, t1 + 60000)


def test_replace_reserved_is_busy(c):
    c.call("ADD", "t", "a", "old")
    reserve(c, "t")
    assert_err(c.call("ADD", "t", "a", "new", "REPLACE"), "BUSY")
    d = get(c, "t", "a")
    assert d["body"] == b"old" and d["state"] == b"reserved" and d["attempts"] == 1
    c.call("ACK", "t", "a")
    assert c.call("ADD", "t", "a", "new", "replace") == b"a"
    assert get(c, "t", "a")["body"] == b"new"


def test_replace_missing_creates(c):
    assert c.call("ADD", "t", "a", "x", "REPLACE") == b"a"
    assert state(c, "t", "a") == b"ready"


def test_replace_delayed_reschedules(c):
    c.call("ADD", "t", "a", "x", "DELAY", 50)
    c.call("ADD", "t", "a", "y", "DELAY", 60000, "REPLACE")
    time.sleep(0.12)
    assert state(c, "t", "a") == b"delayed"  # the old timer must not fire
    c.call("ADD", "t", "a", "z", "REPLACE")
    assert state(c, "t", "a") == b"ready"
    got = reserve(c, "t", count=5)
    assert [(j[1], j[2]) for j in got] == [(b"a", b"z")]


def test_replace_dead_job(c):
    make_dead(c, "t", "a")
    c.call("ADD", "t", "a", "again", "REPLACE")
    d = get(c, "t", "a")
    assert d["state"] == b"ready" and d["attempts"] == 0 and d["body"] == b"again"
    assert c.call("LIST", "t", "dead") == [b"0", []]


# ---------------------------------------------------------------- generated ids

def test_star_ids_unique_and_time_ordered(c):
    n = 3000
    t0 = now_ms()
    c.send_raw(b"".join(encode_command("ADD", "t", "*", "x") for _ in range(n)))
    ids = [c.read() for _ in range(n)]
    t1 = now_ms()
    assert len(set(ids)) == n
    keys = []
    for jid in ids:
        ms, sep, seq = jid.partition(b"-")
        assert sep and ms.isdigit() and seq.isdigit(), jid
        keys.append((int(ms), int(seq)))
    assert keys == sorted(keys) and len(set(keys)) == n
    assert t0 - 5 <= keys[0][0] and keys[-1][0] <= t1 + 5
    # they are real jobs, in add order
    got = reserve(c, "t", count=5)
    assert [j[1] for j in got] == ids[:5]


def test_star_ids_unique_across_clients(raw):
    conns = [raw() for _ in range(4)]
    for k in conns:
        k.send_raw(b"".join(encode_command("ADD", "t", "*", "x") for _ in range(500)))
    ids = [k.read() for k in conns for _ in range(500)]
    assert len(set(ids)) == 2000


# ---------------------------------------------------------------- ordering

def test_order_oldest_due_first(c):
    base = now_ms()
    c.call("ADD", "t", "A", "x", "AT", base + 150)
    c.call("ADD", "t", "B", "x", "AT", base + 100)
    c.call("ADD", "t", "C", "x", "AT", base + 50)
    c.call("ADD", "t", "D", "x")
    time.sleep(0.2)
    assert [j[1] for j in reserve(c, "t", count=10)] == [b"D", b"C", b"B", b"A"]


def test_order_ties_in_add_order(c):
    at = now_ms() + 100
    names = ["k%02d" % i for i in (7, 3, 9, 1, 0, 5, 2, 8, 6, 4, 11, 10)]
    for n in names:
        c.call("ADD", "t", n, "x", "AT", at)
    time.sleep(0.15)
    got = reserve(c, "t", count=20)
    assert [j[1].decode() for j in got] == names


def test_order_ready_fifo(c):
    names = ["z%03d" % ((i * 37) % 101) for i in range(101)]
    c.send_raw(b"".join(encode_command("ADD", "t", n, "x") for n in names))
    assert [c.read() for _ in names] == [n.encode() for n in names]
    got = []
    while True:
        batch = reserve(c, "t", count=7)
        if not batch:
            break
        got += [j[1].decode() for j in batch]
    assert got == names


def test_order_mixed_delays(c):
    # delayed jobs that become ready join the ready queue in due order
    c.call("ADD", "t", "late", "x", "DELAY", 120)
    c.call("ADD", "t", "now1", "x")
    c.call("ADD", "t", "early", "x", "DELAY", 60)
    c.call("ADD", "t", "now2", "x")
    time.sleep(0.17)
    assert [j[1] for j in reserve(c, "t", count=10)] == [b"now1", b"now2", b"early", b"late"]


# ---------------------------------------------------------------- LIST cursors

def list_all(c, topic, st, count=10, between=None, max_pages=2000):
    seen = []
    cursor = None
    for _ in range(max_pages):
        args = ["LIST", topic, st, "COUNT", count]
        if cursor is not None:
            args += ["CURSOR", cursor]
        rep = c.call(*args)
        assert isinstance(rep, list) and len(rep) == 2, rep
        cursor, ids = rep
        seen += ids
        if between:
            between()
        if cursor == b"0":
            return seen
    raise AssertionError("LIST did not finish in %d pages" % max_pages)


def test_list_iterates_everything(c):
    names = ["j%d" % i for i in range(437)]
    c.send_raw(b"".join(encode_command("ADD", "t", n, "x") for n in names))
    for _ in names:
        c.read()
    seen = list_all(c, "t", "ready", count=13)
    assert set(seen) == {n.encode() for n in names}
    assert len(seen) < 2 * len(names)


@pytest.mark.parametrize("st", ["ready", "delayed"])
def test_list_cursor_under_concurrent_changes(c, raw, st):
    opts = [] if st == "ready" else ["DELAY", 3600000]
    stable, volatile = [], []
    cmds = []
    for i in range(300):
        stable.append("s%d" % i)
        cmds.append(encode_command("ADD", "t", stable[-1], "x", *opts))
        if i % 3 == 0:
            volatile.append("v%d" % i)
            cmds.append(encode_command("ADD", "t", volatile[-1], "x", *opts))
    c.send_raw(b"".join(cmds))
    for _ in cmds:
        assert not hasattr(c.read(), "code")
    other = raw()
    ever = set(stable) | set(volatile)
    to_delete = list(volatile)
    counter = [0]

    def churn():
        for _ in range(5):
            n = "n%d" % counter[0]
            counter[0] += 1
            ever.add(n)
            other.call("ADD", "t", n, "x", *opts)
        for _ in range(3):
            if to_delete:
                assert other.call("DEL", "t", to_delete.pop(0)) == 1

    seen = {x.decode() for x in list_all(c, "t", st, count=10, between=churn)}
    missing = set(stable) - seen
    assert not missing, "jobs present throughout but never listed: %s" % sorted(missing)[:20]
    assert seen <= ever


def test_list_filters_by_state(c):
    make_dead(c, "t", "x1")
    c.call("ADD", "t", "r1", "x")
    c.call("ADD", "t", "r2", "x")
    c.call("ADD", "t", "d1", "x", "DELAY", 60000)
    reserve(c, "t")  # r1
    assert sorted(list_all(c, "t", "ready")) == [b"r2"]
    assert sorted(list_all(c, "t", "reserved")) == [b"r1"]
    assert sorted(list_all(c, "t", "delayed")) == [b"d1"]
    assert sorted(list_all(c, "t", "dead")) == [b"x1"]


# ---------------------------------------------------------------- PURGE / STATS / TOPICS

def test_purge_then_reuse_ids(c):
    for i in range(50):
        c.call("ADD", "t", "j%d" % i, "x", "DELAY", 50 if i % 2 else 0)
    reserve(c, "t", count=5)
    assert c.call("PURGE", "t") == 50
    time.sleep(0.1)  # timers of purged jobs must not fire
    assert reserve(c, "t") == []
    assert c.call("TOPICS") == []
    assert c.call("ADD", "t", "j1", "again") == b"j1"
    assert get(c, "t", "j1")["attempts"] == 0


def test_purge_wakes_nothing_and_blocked_reserver_still_works(c, raw):
    waiter = raw()
    waiter.send("RESERVE", "TIMEOUT", 3000, "FROM", "t")
    time.sleep(0.05)
    c.call("ADD", "t", "d", "x", "DELAY", 60000)
    assert c.call("PURGE", "t") == 1
    assert not waiter.pending(0.05)
    c.call("ADD", "t", "a", "x")
    got = waiter.read()
    assert got[0][1] == b"a"


def test_stats_counters(c):
    def stats(topic=None):
        return pairs(c.call("STATS", topic) if topic else c.call("STATS"))

    c.call("ADD", "sa", "a", "x")
    assert reserve(c, "sa")[0][1] == b"a"
    assert c.call("ACK", "sa", "a") == 1

    c.call("ADD", "sb", "b", "x")
    reserve(c, "sb")
    assert c.call("NACK", "sb", "b", "DELAY", 0) == b"ready"

    c.call("ADD", "sc", "c", "x")
    assert c.call("DEL", "sc", "c") == 1

    c.call("ADD", "se", "e", "x", "TTR", 50, "RETRIES", 1)
    reserve(c, "se")
    wait_state(c, "se", "e", b"ready")

    make_dead(c, "sd", "d")
    assert c.call("KICK", "sd") == 1

    c.call("ADD", "sr", "r", "x")
    reserve(c, "sr")
    c.call("ADD", "sy", "y", "x", "DELAY", 60000)
    make_dead(c, "sz", "z")

    z = dict.fromkeys(STATS_KEYS, 0)
    assert stats("sb") == dict(z, jobs_ready=1, added=1, reserved=1, nacked=1)
    assert stats("se") == dict(z, jobs_ready=1, added=1, reserved=1, expired=1)
    assert stats("sd") == dict(z, jobs_ready=1, added=1, reserved=1, nacked=1, dead=1, kicked=1)
    assert stats("sr") == dict(z, jobs_reserved=1, added=1, reserved=1)
    assert stats("sy") == dict(z, jobs_delayed=1, added=1)
    assert stats("sz") == dict(z, jobs_dead=1, added=1, reserved=1, nacked=1, dead=1)
    assert stats() == dict(jobs_delayed=1, jobs_ready=3, jobs_reserved=1, jobs_dead=1, added=8,
                           reserved=6, acked=1, nacked=3, expired=1, dead=2, deleted=1, kicked=1,
                           pushed=0, push_failed=0)


def test_topic_counters_survive_the_topic_draining(c):
    # monitoring polls STATS of queues that are usually empty: the per-topic totals must not
    # vanish when the last job leaves
    c.call("ADD", "sa", "a", "x")
    reserve(c, "sa")
    assert c.call("ACK", "sa", "a") == 1
    c.call("ADD", "sc", "c", "x")
    assert c.call("DEL", "sc", "c") == 1
    z = dict.fromkeys(STATS_KEYS, 0)
    assert pairs(c.call("STATS", "sa")) == dict(z, added=1, reserved=1, acked=1)
    assert pairs(c.call("STATS", "sc")) == dict(z, added=1, deleted=1)
    assert pairs(c.call("STATS"))["acked"] == 1


def test_stats_expiry_to_dead_counts(c):
    c.call("ADD", "t", "a", "x", "TTR", 40, "RETRIES", 0)
    reserve(c, "t")
    wait_state(c, "t", "a", b"dead")
    s = pairs(c.call("STATS", "t"))
    assert s["jobs_dead"] == 1 and s["dead"] == 1 and s["expired"] == 1


def test_topics_include_every_state(c):
    c.call("ADD", "delayed", "a", "x", "DELAY", 60000)
    c.call("ADD", "reserved", "a", "x")
    reserve(c, "reserved")
    make_dead(c, "dead", "a")
    c.call("ADD", "ready", "a", "x")
    assert sorted(c.call("TOPICS")) == [b"dead", b"delayed", b"ready", b"reserved"]
    c.call("ACK", "reserved", "a")
    c.call("PURGE", "dead")
    assert sorted(c.call("TOPICS")) == [b"delayed", b"ready"]
