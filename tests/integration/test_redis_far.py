"""The Redis store's far tier (docs/redis.md, "Far jobs"): jobs added due beyond the horizon are
kept compact (a list per bucket of due time and an id index) until the carry takes their bucket
into the pool and the delay set. Every way of reaching a job by id, LIST, STATS and PURGE must
see them as if they were near, and the carry must bring each live one back on time, once.

The URL's far=1 makes buckets of 1 s carried 1 s before they start, so a job delayed 3 s or more
is far (its bucket starts more than a second from now).
"""

import signal
import time

from conftest import NIL_ARRAY, RespError, encode_command, now_ms, pairs, wait_until
from pushrecv import recv  # noqa: F401 (recv: fixture)
from redisprocs import procs, url_of  # noqa: F401 (procs: fixture)


def far_keys(rc, prefix, kind):
    return sorted(rc.scan_iter(match="{%s:*}:%s*" % (prefix, kind), count=1000))


def start(procs, far=1, n=1):
    r = procs.redis()
    url = url_of(r, far=far)
    prefix = url.split("prefix=")[1].split("&")[0]
    return r, prefix, [procs.delayqd(url) for _ in range(n)]


def pipeline(c, cmds):
    c.send_raw(b"".join(encode_command(*cmd) for cmd in cmds))
    return [c.read() for _ in cmds]


def consume(w, want, prefix=b"b-"):
    """Reserves and acks until every id of want came out: each once, with body prefix + id."""
    got = set()
    while len(got) < len(want):
        jobs = w.call("RESERVE", "TIMEOUT", 10000, "COUNT", 500, "FROM", "t")
        assert jobs is not NIL_ARRAY, len(got)
        for j in jobs:
            assert j[1] not in got and j[2] == prefix + j[1]
            got.add(j[1])
        assert w.call("ACK", "t", *[j[1] for j in jobs]) == len(jobs)
    assert got == {j.encode() for j in want}


def test_far_job_kept_compact_and_read_back_whole(procs):
    r, prefix, (a,) = start(procs)
    c = a.raw()
    rc = r.client()
    t0 = now_ms()
    assert c.call("ADD", "t", "f1", "far body", "DELAY", 4000, "TTR", 7000, "RETRIES", 5,
                  "BACKOFF", "FIXED", 250) == b"f1"
    assert c.call("ADD", "t", "n1", "near body", "DELAY", 300) == b"n1"
    # f1 is in a far list, not in the pool; n1 is in the pool
    pool = "{%s:t:0}:pool" % prefix
    assert rc.hexists(pool, "n1") and not rc.hexists(pool, "f1")
    assert len(far_keys(rc, prefix, "f:")) == 1
    job = pairs(c.call("GET", "t", "f1"))
    assert job["state"] == b"delayed" and job["body"] == b"far body"
    assert job["ttr"] == 7000 and job["retries"] == 5 and job["attempts"] == 0
    assert t0 + 4000 <= job["due"] <= now_ms() + 4000
    assert t0 <= job["created"] <= now_ms()
    assert c.call("GET", "t", "nope") in (None, NIL_ARRAY)
    st = pairs(c.call("STATS", "t"))
    assert st["jobs_delayed"] == 2
    # it comes out once, on time, with what it was added with
    w = a.raw(timeout=10)
    got = w.call("RESERVE", "TIMEOUT", 8000, "FROM", "t")
    assert got[0][1] == b"n1"
    assert w.call("ACK", "t", "n1") == 1
    got = w.call("RESERVE", "TIMEOUT", 8000, "FROM", "t")
    late = now_ms() - job["due"]
    assert got[0][1] == b"f1" and got[0][2] == b"far body"
    assert 0 <= late <= 900, late
    # its backoff came along (fixed 250 ms), and its attempts count on
    t1 = now_ms()
    assert w.call("NACK", "t", "f1") == b"delayed"
    got = w.call("RESERVE", "TIMEOUT", 3000, "FROM", "t")
    assert got[0][1] == b"f1" and now_ms() - t1 >= 250
    assert pairs(w.call("GET", "t", "f1"))["attempts"] == 2
    assert w.call("ACK", "t", "f1") == 1
    # the bucket, its index and the carry's bookmark are gone
    assert far_keys(rc, prefix, "f") == []
    assert rc.hget("{%s:t:0}:stats" % prefix, "fn") == b"0"


def test_far_ids_exist_delete_and_replace(procs):
    r, prefix, (a,) = start(procs)
    c = a.raw()
    rc = r.client()
    for i in range(5):
        assert c.call("ADD", "t", "j%d" % i, "b%d" % i, "DELAY", 4000) == b"j%d" % i
    # an id taken by a far job is taken
    e = c.call("ADD", "t", "j0", "again", "DELAY", 4000)
    assert isinstance(e, RespError) and e.code == "EXISTS"
    e = c.call("ADD", "t", "j1", "again", "DELAY", 100)
    assert isinstance(e, RespError) and e.code == "EXISTS"
    assert pairs(c.call("GET", "t", "j0"))["body"] == b"b0"  # untouched by the refused add
    # DEL forgets it: gone for GET, never handed out, its id free again
    assert c.call("DEL", "t", "j0", "j1") == 2
    assert c.call("DEL", "t", "j0") == 0
    assert c.call("GET", "t", "j0") in (None, NIL_ARRAY)
    assert c.call("ADD", "t", "j1", "new j1", "DELAY", 200) == b"j1"
    # REPLACE of a far job: far again (later), or near
    assert c.call("ADD", "t", "j2", "replaced far", "DELAY", 5000, "REPLACE") == b"j2"
    assert c.call("ADD", "t", "j3", "replaced near", "DELAY", 100, "REPLACE") == b"j3"
    assert pairs(c.call("GET", "t", "j2"))["body"] == b"replaced far"
    assert pairs(c.call("GET", "t", "j3"))["body"] == b"replaced near"
    # a near job replaced by a far one leaves nothing in the pool
    assert c.call("ADD", "t", "j5", "near first", "DELAY", 500) == b"j5"
    assert c.call("ADD", "t", "j5", "then far", "DELAY", 5000, "REPLACE") == b"j5"
    assert not rc.hexists("{%s:t:0}:pool" % prefix, "j5")
    st = pairs(c.call("STATS", "t"))
    assert st["jobs_delayed"] == 5  # j1 j2 j3 j4 j5
    got = {}
    w = a.raw(timeout=10)
    while len(got) < 5:
        jobs = w.call("RESERVE", "TIMEOUT", 8000, "COUNT", 10, "FROM", "t")
        assert jobs is not NIL_ARRAY, got
        for j in jobs:
            assert j[1] not in got
            got[j[1]] = j[2]
            assert w.call("ACK", "t", j[1]) == 1
    assert got == {b"j1": b"new j1", b"j2": b"replaced far", b"j3": b"replaced near",
                   b"j4": b"b4", b"j5": b"then far"}
    assert w.call("RESERVE", "TIMEOUT", 1500, "FROM", "t") is NIL_ARRAY
    assert far_keys(rc, prefix, "f") == []


def test_far_list_stats_and_purge(procs):
    r, prefix, (a,) = start(procs, far=60)
    c = a.raw()
    rc = r.client()
    far = ["f%03d" % i for i in range(150)]  # in two buckets of a minute, 5 and 6 minutes out
    near = ["n%03d" % i for i in range(20)]
    cmds = [("ADD", "t", j, "x", "DELAY", 300000 + 60000 * (i % 2)) for i, j in enumerate(far)]
    cmds += [("ADD", "t", j, "x", "DELAY", 30000) for j in near]
    assert all(not isinstance(x, RespError) for x in pipeline(c, cmds))
    assert c.call("DEL", "t", *far[:10]) == 10
    assert len(far_keys(rc, prefix, "f:")) == 2
    st = pairs(c.call("STATS", "t"))
    assert st["jobs_delayed"] == 160
    # LIST pages through far then near; every live one is listed, no deleted one
    for count in (1, 7, 1000):
        seen, cur = [], b"0"
        for _ in range(1000):
            cur, ids = c.call("LIST", "t", "delayed", "COUNT", count, "CURSOR", cur)
            seen += ids
            if cur == b"0":
                break
        assert cur == b"0"
        assert set(seen) == {j.encode() for j in far[10:] + near}, count
    assert c.call("PURGE", "t") == 160
    assert far_keys(rc, prefix, "f") == []
    assert pairs(c.call("STATS", "t"))["jobs_delayed"] == 0
    assert c.call("GET", "t", far[20]) in (None, NIL_ARRAY)


def test_far_index_splits_and_big_bucket_carried_whole(procs):
    """12,000 far jobs in one bucket: the index grows to hashes that stay listpacks, the carry
    takes the bucket in many calls (100 entries a call), and every live job comes out once,
    through another instance than the one that added them."""
    r, prefix, (a, b) = start(procs, n=2)
    c = a.raw(timeout=30)
    rc = r.client()
    n = 12000
    due = now_ms() + 4000
    ids = ["k%05d" % i for i in range(n)]
    for i in range(0, n, 1000):
        pipeline(c, [("ADD", "t", j, "body-" + j, "AT", due) for j in ids[i:i + 1000]])
    idx = far_keys(rc, prefix, "fi:")
    assert len(idx) >= n // 64
    assert all(rc.object("encoding", k) == b"listpack" for k in idx)
    gone = set(ids[::3])
    for i in range(0, n, 3000):
        part = [j for j in ids[i:i + 3000] if j in gone]
        assert c.call("DEL", "t", *part) == len(part)
    assert pairs(c.call("GET", "t", "k00001"))["body"] == b"body-k00001"
    w = b.raw(timeout=30)
    consume(w, [j for j in ids if j not in gone], b"body-")
    assert wait_until(lambda: far_keys(rc, prefix, "f") == [], 5, 0.05)
    assert rc.hget("{%s:t:0}:stats" % prefix, "fn") == b"0"


def test_far_zero_keeps_every_job_near(procs):
    r, prefix, (a,) = start(procs, far=0)
    c = a.raw()
    rc = r.client()
    assert c.call("ADD", "t", "x", "b", "DELAY", 3600000) == b"x"
    assert rc.hexists("{%s:t:0}:pool" % prefix, "x")
    assert far_keys(rc, prefix, "f") == []


def test_far_push_job_carried_and_delivered(procs, recv):
    """A push job (URL, content type) added far keeps them through the far list and the carry,
    and is delivered once, on time, by the pusher."""
    rcv = recv()
    r, prefix, (a,) = start(procs)
    c = a.raw()
    rc = r.client()
    due = now_ms() + 4000
    assert c.call("ADD", "t", "p1", "push body", "AT", due, "URL", rcv.url("/far"),
                  "CONTENT-TYPE", "application/json") == b"p1"
    assert not rc.hexists("{%s:t:0}:pool" % prefix, "p1")
    assert len(far_keys(rc, prefix, "f:")) == 1
    job = pairs(c.call("GET", "t", "p1"))
    assert job["url"] == rcv.url("/far").encode() and job["body"] == b"push body"
    rcv.wait(lambda rs: len(rs) >= 1, timeout=10)
    got = rcv.requests[0]
    assert got.path == "/far" and got.body == b"push body"
    assert got.headers["content-type"] == "application/json"
    assert 0 <= int(got.headers["delayq-due"]) - due <= 1  # the job's own due time
    assert wait_until(lambda: pairs(c.call("STATS", "t"))["acked"] == 1, 5)
    time.sleep(0.3)  # a second delivery would show now
    assert len(rcv.requests) == 1


def test_far_carry_cut_by_redis_kill9_loses_nothing(procs):
    """Redis killed (-9, AOF always) while the carry takes a bucket of 25,000 far jobs, 100
    entries a call: after its restart every job is there, far or near, and comes out once."""
    r = procs.redis("--appendonly", "yes", "--appendfsync", "always")
    url = url_of(r, far=1)
    prefix = url.split("prefix=")[1].split("&")[0]
    s = procs.delayqd(url)
    c = s.raw(timeout=60)
    rc = r.client()
    n = 25000
    due = now_ms() + 3000
    ids = ["k%05d" % i for i in range(n)]
    for i in range(0, n, 1000):
        assert all(not isinstance(x, RespError)
                   for x in pipeline(c, [("ADD", "t", j, "b-" + j, "AT", due) for j in ids[i:i + 1000]]))
    pool = "{%s:t:0}:pool" % prefix
    # the carry is under way (or done) once the pool holds some of them
    assert wait_until(lambda: rc.hlen(pool) > 0, 10, 0.001)
    r.stop(signal.SIGKILL)
    r.start()
    w = s.raw(timeout=30)
    assert wait_until(lambda: isinstance(w.call("STATS", "t"), list), 10, 0.05)
    st = pairs(w.call("STATS", "t"))
    assert st["jobs_delayed"] + st["jobs_ready"] == n
    consume(w, ids)
    assert w.call("RESERVE", "TIMEOUT", 1500, "FROM", "t") is NIL_ARRAY


def _wrongtype_errors(rc):
    v = rc.info("errorstats").get("errorstat_WRONGTYPE", "count=0")  # redis-py: "count=N"
    return int(v["count"]) if isinstance(v, dict) else int(v.split("=")[1])


def test_far_carry_stopped_halfway_writes_nothing(procs):
    """A carry that fails on one of the index hashes it reads (here the hash is made a string,
    as a hash that has moved to another node fails during resharding) has written nothing: no
    job is in the pool and the other hashes still hold theirs. Once the hash is back, every job
    comes out once."""
    r, prefix, (a,) = start(procs)
    c = a.raw(timeout=30)
    rc = r.client()
    n = 200
    due = now_ms() + 4000
    ids = ["s%03d" % i for i in range(n)]
    assert all(not isinstance(x, RespError)
               for x in pipeline(c, [("ADD", "t", j, "b-" + j, "AT", due) for j in ids]))
    idx = far_keys(rc, prefix, "fi:")
    assert len(idx) >= 2
    victim = idx[len(idx) // 2]
    saved = rc.hgetall(victim)
    held = {k: rc.hlen(k) for k in idx if k != victim}
    errors0 = _wrongtype_errors(rc)
    rc.delete(victim)
    rc.set(victim, "not a hash")
    # the carry's time comes (a second before the bucket starts) and it fails
    assert wait_until(lambda: _wrongtype_errors(rc) > errors0, 10, 0.01)
    assert rc.hlen("{%s:t:0}:pool" % prefix) == 0
    assert {k: rc.hlen(k) for k in idx if k != victim} == held
    rc.delete(victim)
    rc.hset(victim, mapping=saved)
    w = a.raw(timeout=30)
    consume(w, ids)
