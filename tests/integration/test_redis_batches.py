"""The Redis store with batches far beyond what one script call carries (issue 12, point 2).

The planner puts at most MAX_CALL_REQS (128) requests and MAX_CALL_JOBS (2,000) jobs to reserve
in one script call; these tests send ten times that and more, through pipelines and through
single commands with thousands of ids, so every `unpack` of the script and every reply is chunked
(Lua's stack holds about 8,000 values: unchunked, they fail with "too many results to unpack").
"""

from conftest import RespError, encode_command
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
