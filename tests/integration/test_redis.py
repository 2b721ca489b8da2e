"""The Redis store beyond the shared suite: a fleet of delayqd instances over one Redis,
outages, AOF durability, Redis Cluster spread and redirections.

Every test starts its own redis-server(s) (Debian's /usr/bin/redis-server, or $REDIS_SERVER)
on free loopback ports in tmp dirs, and its own delayqd instances; all are stopped at teardown
(delayqd with SIGTERM, which must exit 0 without a sanitizer report).
"""

import os
import signal
import struct
import subprocess
import threading
import time

from conftest import NIL_ARRAY, RespError, encode_command, now_ms, pairs, wait_until
from redisprocs import REDIS_CLI, cluster_url, procs, url_of  # noqa: F401 (procs: fixture)


def info_fields(conn):
    out = {}
    for line in conn.call("INFO").decode().splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            out[k] = v.strip()
    return out


# --------------------------------------------------------------------------
# a fleet over one Redis

def test_fleet_one_consumer_at_a_time(procs):
    r = procs.redis()
    url = url_of(r)
    fleet = [procs.delayqd(url) for _ in range(3)]
    n = 300
    a = fleet[0].raw()
    a.send_raw(b"".join(encode_command("ADD", "t", "j%d" % i, "x") for i in range(n)))
    for _ in range(n):
        assert not isinstance(a.read(), RespError)
    seen = []
    lock = threading.Lock()
    errors = []

    def consume(srv):
        try:
            c = srv.raw(timeout=10)
            while True:
                got = c.call("RESERVE", "TIMEOUT", 300, "COUNT", 7, "FROM", "t")
                if got is NIL_ARRAY:
                    return
                for job in got:
                    with lock:
                        seen.append((job[1], job[3]))
                    assert c.call("ACK", "t", job[1]) == 1
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=consume, args=(s,)) for s in fleet for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    ids = [j for j, _ in seen]
    assert len(ids) == n and len(set(ids)) == n, "a job was delivered twice or lost"
    assert all(att == 1 for _, att in seen)
    st = pairs(a.call("STATS", "t"))
    assert (st["acked"], st["reserved"], st["jobs_ready"], st["jobs_reserved"]) == (n, n, 0, 0)


def test_fleet_leases_of_a_killed_instance_are_redelivered_after_ttr(procs):
    r = procs.redis()
    url = url_of(r)
    a, b = procs.delayqd(url), procs.delayqd(url)
    cb = b.raw(timeout=10)
    for i in range(5):
        cb.call("ADD", "t", "j%d" % i, "x", "TTR", 1000)
    ca = a.raw()
    got = ca.call("RESERVE", "TIMEOUT", 0, "COUNT", 5, "FROM", "t")
    t_reserved = time.monotonic()
    assert len(got) == 5
    a.kill()
    w = b.raw(timeout=10)
    again = []
    while len(again) < 5:
        rep = w.call("RESERVE", "TIMEOUT", 5000, "COUNT", 5, "FROM", "t")
        assert rep is not NIL_ARRAY, "leases of the dead instance were never redelivered"
        again += rep
    elapsed = time.monotonic() - t_reserved
    assert 0.95 <= elapsed <= 1.5, "redelivered %.3f s after reserve (TTR 1 s)" % elapsed
    assert sorted(j[1] for j in again) == [b"j%d" % i for i in range(5)]
    assert all(j[3] == 2 for j in again)


def test_fleet_delayed_jobs_of_a_killed_instance_are_delivered_on_time(procs):
    r = procs.redis()
    url = url_of(r)
    a, b = procs.delayqd(url), procs.delayqd(url)
    w = b.raw(timeout=10)
    w.send("RESERVE", "TIMEOUT", 5000, "FROM", "t")
    time.sleep(0.1)
    ca = a.raw()
    due = now_ms() + 800
    assert ca.call("ADD", "t", "j", "x", "AT", due) == b"j"
    a.kill()  # the only instance that added it is gone before it is due
    got = w.read()
    late = now_ms() - due
    assert got[0][1] == b"j"
    assert -2 <= late <= 100, "delivered %d ms after due" % late


def test_fleet_blocked_reserve_wakes_when_another_instance_adds(procs):
    r = procs.redis()
    url = url_of(r)
    a, b = procs.delayqd(url), procs.delayqd(url)
    w = b.raw(timeout=10)
    w.send("RESERVE", "TIMEOUT", 5000, "FROM", "t")
    time.sleep(0.1)
    ca = a.raw()
    for i in range(3):
        t0 = time.monotonic()
        assert ca.call("ADD", "t", "j%d" % i, "x") == b"j%d" % i
        got = w.read()
        assert got[0][1] == b"j%d" % i
        assert time.monotonic() - t0 < 0.1
        w.send("RESERVE", "TIMEOUT", 5000, "FROM", "t")
    # and a nacked job made ready on A wakes B too
    ca.call("ADD", "u", "n", "x")
    assert ca.call("RESERVE", "TIMEOUT", 0, "FROM", "u")[0][1] == b"n"
    w2 = b.raw(timeout=10)
    w2.send("RESERVE", "TIMEOUT", 5000, "FROM", "u")
    time.sleep(0.1)
    assert ca.call("NACK", "u", "n", "DELAY", 0) == b"ready"
    assert w2.read()[0][1] == b"n"


def test_fleet_sweep_moves_jobs_no_instance_was_told_about(procs):
    """A job whose due time no live instance heard of (its publication was lost) is
    still delivered within the sweep period."""
    r = procs.redis()
    url = url_of(r)
    a = procs.delayqd(url)
    ca = a.raw()
    ca.call("ADD", "t", "warmup", "x")  # registers the topic
    # add a delayed job behind the instance's back, as a lost message would leave it:
    # through the script with another channel, so no instance hears of it
    rc = r.client()
    prefix = url.split("prefix=")[1]
    keys = ["{%s:t:0}:%s" % (prefix, k)
            for k in ("pool", "ready", "delay", "lease", "dead", "stats", "pready", "fz", "fo")]
    script = _script_source()
    due = now_ms() + 300
    now = now_ms()
    ord8 = struct.pack(">Q", now << 22)
    record = struct.pack("<BIIIBIIddd", 0, 0, 30000, 3, 0, 1000, 3600000, due, now, 0) + ord8 + b"b"
    rc.eval(script, 9, *keys, now, "other", "nowhere", 60000, 1, "t", 0, 0, 1,
            "adds", 1, 1, 6, 1, "ghost", record, "-", due, ord8 + b"ghost")
    w = a.raw(timeout=10)
    got = w.call("RESERVE", "TIMEOUT", 5000, "FROM", "t")
    assert got[0][1] == b"warmup"
    got = w.call("RESERVE", "TIMEOUT", 5000, "FROM", "t")
    assert got[0][1] == b"ghost"
    assert now_ms() - due <= 1100


def test_leases_an_older_build_recorded_keep_their_attempts(procs):
    """A reserve leaves the job's record alone (lua/delayq.lua, "leases"); builds before
    2026-11-25 rewrote it as reserved, attempts counting the lease. Jobs such a build reserved
    keep their count across an upgrade: not counted twice in GET, NACK or at the lease's
    end, and they are acknowledged as before."""
    r = procs.redis()
    url = url_of(r)
    c = procs.delayqd(url).raw(timeout=10)
    rc = r.client()
    prefix = url.split("prefix=")[1]
    pool, lease = "{%s:t:0}:pool" % prefix, "{%s:t:0}:lease" % prefix
    for jid in ("n", "r", "e"):
        c.call("ADD", "t", jid, "b-" + jid, "TTR", 60000, "RETRIES", 1)
    got = c.call("RESERVE", "TIMEOUT", 0, "COUNT", 3, "FROM", "t")
    assert [j[1] for j in got] == [b"n", b"r", b"e"]
    for jid in ("n", "r", "e"):
        rec = rc.hget(pool, jid)
        assert struct.unpack_from("<BI", rec) == (1, 0)  # ready, 0: the reserve left it alone
        dl = rc.zscore(lease, jid)
        rc.hset(pool, jid, struct.pack("<BI", 2, 1) + rec[5:38] + struct.pack("<d", dl) + rec[46:])
        d = pairs(c.call("GET", "t", jid))
        assert (d["state"], d["attempts"], d["deadline"], d["body"]) == \
            (b"reserved", 1, int(dl), b"b-" + jid.encode())
    assert c.call("NACK", "t", "n", "DELAY", 0) == b"ready"  # attempts 1 <= retries 1
    assert pairs(c.call("GET", "t", "n"))["attempts"] == 1
    assert c.call("ACK", "t", "r") == 1 and c.call("GET", "t", "r") is None
    # e's lease ends: back to ready with its one attempt (dead if it were counted twice)
    assert c.call("TOUCH", "t", "e", "TTR", 50) > 0
    assert wait_until(lambda: pairs(c.call("GET", "t", "e"))["state"] == b"ready", 5)
    assert pairs(c.call("GET", "t", "e"))["attempts"] == 1
    got = c.call("RESERVE", "TIMEOUT", 0, "COUNT", 3, "FROM", "t")
    att = {j[1]: pairs(c.call("GET", "t", j[1]))["attempts"] for j in got}
    assert att == {b"n": 2, b"e": 2}, att


def test_calls_larger_than_the_socket_buffer_leave_whole(procs):
    """delayqd writes a loop turn's calls at its end (redis_ev.c), and what the socket does
    not take waits for it to be writable. 48 pipelined ADDs of 512 KB (24 MiB in calls of up
    to 1 MiB, far more than a loopback socket holds) must all land with their bodies intact.
    (A write left waiting for no event would be picked up by the next call, at the latest the
    sweep's, so this guards the bytes, not the promptness.)"""
    r = procs.redis()
    c = procs.delayqd(url_of(r)).raw(timeout=30)
    bodies = [os.urandom(512 * 1024) for _ in range(4)]
    n = 48
    c.send_raw(b"".join(encode_command("ADD", "t", "j%d" % i, bodies[i % 4]) for i in range(n)))
    assert [c.read(timeout=30) for _ in range(n)] == [b"j%d" % i for i in range(n)]
    for i in (0, 17, n - 1):
        assert pairs(c.call("GET", "t", "j%d" % i))["body"] == bodies[i % 4]
    got = c.call("RESERVE", "TIMEOUT", 0, "COUNT", n, "FROM", "t")
    assert [(j[1], j[2]) for j in got] == [(b"j%d" % i, bodies[i % 4]) for i in range(n)]


def _script_source():
    """The script as delayqd sends it with EVAL (redis_client.c: script_forms): delayq.lua
    and far.lua, joined as the build joins them (Makefile, LUA_SCRIPT)."""
    lua = os.path.join(os.path.dirname(__file__), "..", "..", "src", "store", "lua")
    src = "".join(open(os.path.join(lua, f)).read() for f in ("delayq.lua", "far.lua"))
    body = src.split("\n", 1)[1]
    return "#!lua\nlocal EK, EA = KEYS, ARGV\n%s\nreturn main(EK, EA)\n" % body


# --------------------------------------------------------------------------
# outages

def _unavailable_within(conn, seconds, *cmd):
    t0 = time.monotonic()
    rep = conn.call(*cmd)
    took = time.monotonic() - t0
    assert isinstance(rep, RespError) and rep.code == "UNAVAILABLE", rep
    assert took <= seconds, "%s answered after %.2f s" % (cmd[0], took)
    return took


def test_outage_redis_down_then_back(procs):
    r = procs.redis()
    s = procs.delayqd(url_of(r))
    c = s.raw(timeout=10)
    assert c.call("ADD", "t", "before", "x") == b"before"
    waiter = s.raw(timeout=30)
    r.stop(signal.SIGKILL)
    time.sleep(0.2)
    for cmd in (("ADD", "t", "during", "x"), ("GET", "t", "before"), ("ACK", "t", "x"),
                ("STATS",), ("TOPICS",), ("RESERVE", "TIMEOUT", 0, "FROM", "t")):
        _unavailable_within(c, 2.0, *cmd)
    assert c.call("PING") == b"PONG"
    # a client that blocks during the outage keeps waiting, and is served afterwards
    waiter.send("RESERVE", "TIMEOUT", 20000, "FROM", "w")
    time.sleep(1.0)
    assert not waiter.pending(0.05)
    r.start()  # same port, empty (no persistence)
    assert wait_until(lambda: c.call("ADD", "w", "after", "x") == b"after", 5, 0.05), \
        "delayqd did not reconnect"
    got = waiter.read(timeout=5)
    assert got[0][1] == b"after"
    assert s.running


def test_outage_redis_hangs(procs):
    r = procs.redis()
    s = procs.delayqd(url_of(r))
    c = s.raw(timeout=10)
    assert c.call("ADD", "t", "a", "x") == b"a"
    r.send_signal(signal.SIGSTOP)
    try:
        # sent, no answer: the outcome is unknown, and the error says so (not UNAVAILABLE,
        # which promises that nothing was changed)
        t0 = time.monotonic()
        rep = c.call("ADD", "t", "b", "x")
        assert isinstance(rep, RespError) and rep.code == "TIMEOUT", rep
        assert "may or may not" in rep.msg, rep
        assert time.monotonic() - t0 <= 2.2
        # reads change nothing: UNAVAILABLE
        _unavailable_within(c, 2.2, "GET", "t", "a")
        # pipelined requests all answer too
        c.send_raw(b"".join(b"*3\r\n$3\r\nGET\r\n$1\r\nt\r\n$1\r\na\r\n" for _ in range(50)))
        t0 = time.monotonic()
        for _ in range(50):
            rep = c.read(timeout=5)
            assert isinstance(rep, RespError) and rep.code == "UNAVAILABLE"
        assert time.monotonic() - t0 <= 2.2
        assert c.call("PING") == b"PONG"
    finally:
        r.send_signal(signal.SIGCONT)
    assert wait_until(lambda: isinstance(c.call("GET", "t", "a"), list), 8, 0.1)
    assert pairs(c.call("GET", "t", "a"))["body"] == b"x"
    # the ADD that timed out did land, as docs/protocol.md says may happen: adding it again
    # with the same id tells (EXISTS)
    assert isinstance(c.call("GET", "t", "b"), list)
    rep = c.call("ADD", "t", "b", "x")
    assert isinstance(rep, RespError) and rep.code == "EXISTS", rep


def test_outage_never_sent_is_unavailable_and_changes_nothing(procs):
    # Redis is gone: the ADD cannot be sent, the answer is UNAVAILABLE, and once Redis is
    # back (same data: AOF) the job does not exist
    r = procs.redis("--appendonly", "yes", "--appendfsync", "always")
    s = procs.delayqd(url_of(r))
    c = s.raw(timeout=10)
    assert c.call("ADD", "t", "a", "x") == b"a"
    r.stop(signal.SIGKILL)
    _unavailable_within(c, 2.0, "ADD", "t", "b", "x")
    _unavailable_within(c, 2.0, "DEL", "t", "a")
    r.start()
    assert wait_until(lambda: isinstance(c.call("GET", "t", "a"), list), 8, 0.05)
    assert c.call("GET", "t", "b") is None


def test_aof_always_keeps_every_acknowledged_add_across_kill9(procs):
    r = procs.redis("--appendonly", "yes", "--appendfsync", "always")
    s = procs.delayqd(url_of(r))
    c = s.raw(timeout=20)
    n = 3000
    c.send_raw(b"".join(encode_command("ADD", "t", "j%d" % i, "x", "DELAY", 3600000)
                        for i in range(n)))
    acked = 0
    for _ in range(n):
        rep = c.read()
        assert not isinstance(rep, RespError), rep
        acked += 1
    r.stop(signal.SIGKILL)
    r.start()
    assert wait_until(lambda: isinstance(c.call("STATS", "t"), list), 8, 0.1)
    st = pairs(c.call("STATS", "t"))
    assert st["jobs_delayed"] == acked == n
    for i in (0, n // 2, n - 1):
        assert pairs(c.call("GET", "t", "j%d" % i))["state"] == b"delayed"


def test_requirepass(procs):
    r = procs.redis("--requirepass", "s3cret")
    s = procs.delayqd("redis://:s3cret@127.0.0.1:%d?prefix=pw" % r.port)
    c = s.raw()
    assert c.call("ADD", "t", "a", "x") == b"a"
    assert pairs(c.call("GET", "t", "a"))["state"] == b"ready"


def _calls(r, cmd):
    return r.client().info("commandstats").get("cmdstat_" + cmd, {}).get("calls", 0)


def test_script_calls_by_fcall_and_again_after_function_flush(procs):
    """The script is a function library (FUNCTION LOAD at connect, then FCALL); a Redis
    that lost it (FUNCTION FLUSH) gets the call as EVAL and the library again."""
    r = procs.redis()
    c = procs.delayqd(url_of(r)).raw()
    assert c.call("ADD", "t", "a", "x") == b"a"
    assert _calls(r, "fcall") >= 1 and _calls(r, "evalsha") == 0
    r.client().execute_command("FUNCTION", "FLUSH")
    assert c.call("ADD", "t", "b", "x") == b"b"
    assert _calls(r, "eval") >= 1
    before = _calls(r, "fcall")
    assert c.call("ADD", "t", "c", "x") == b"c"
    assert _calls(r, "fcall") > before
    got = c.call("RESERVE", "TIMEOUT", 0, "COUNT", 10, "FROM", "t")
    assert sorted(j[1] for j in got) == [b"a", b"b", b"c"]


def test_script_calls_by_evalsha_where_functions_are_refused(procs):
    r = procs.redis("--rename-command", "FUNCTION", "")
    c = procs.delayqd(url_of(r)).raw()
    assert c.call("ADD", "t", "a", "x") == b"a"
    got = c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")
    assert c.call("ACK", "t", got[0][1]) == 1
    assert _calls(r, "evalsha") >= 2 and _calls(r, "fcall") == 0


def test_shards_are_fixed_at_first_use(procs):
    r = procs.redis()
    url = url_of(r, shards=4)
    a = procs.delayqd(url)
    b = procs.delayqd(url.replace("shards=4", "shards=2"))  # adopts 4
    assert info_fields(b.raw())["store_redis_shards"] == "4"
    ca, cb = a.raw(), b.raw()
    for i in range(40):
        ca.call("ADD", "t", "j%d" % i, "x")
    for i in range(40):
        assert pairs(cb.call("GET", "t", "j%d" % i))["id"] == b"j%d" % i
    # reserve takes from every shard
    got = cb.call("RESERVE", "TIMEOUT", 0, "COUNT", 1000, "FROM", "t")
    assert len(got) == 40
    assert cb.call("ACK", "t", *["j%d" % i for i in range(40)]) == 40
    assert cb.call("LIST", "t", "ready") == [b"0", []]
    for i in range(40):
        ca.call("ADD", "t", "k%d" % i, "x", "DELAY", 3600000)
    listed, cursor = [], b"0"
    while True:
        cursor, ids = cb.call("LIST", "t", "delayed", "COUNT", 7, "CURSOR", cursor)
        listed += ids
        if cursor == b"0":
            break
    assert sorted(listed) == sorted(b"k%d" % i for i in range(40))


# --------------------------------------------------------------------------
# Redis Cluster

def _commandstats(node):
    out = {}
    for k, v in node.client().info("commandstats").items():
        out[k] = v["calls"]
    return out


def _within(values, pct):
    mean = sum(values) / len(values)
    return all(abs(v - mean) <= mean * pct / 100.0 for v in values), mean


def test_cluster_spreads_keys_and_commands_over_masters(procs):
    nodes = procs.cluster(3)
    url = cluster_url(nodes)
    prefix = url.split("prefix=")[1]
    s = procs.delayqd(url)
    c = s.raw(timeout=30)
    f = info_fields(c)
    assert (f["store_redis_masters"], f["store_redis_shards"]) == ("3", "3")
    before = [_commandstats(n).get("cmdstat_evalsha", 0) for n in nodes]
    # one hot topic and a few ordinary ones
    cmds = []
    for i in range(3000):
        cmds.append(("ADD", "hot", "h%d" % i, "x"))
    for t in range(12):
        for i in range(50):
            cmds.append(("ADD", "t%d" % t, "j%d" % i, "x", "DELAY", 3600000))
    c.send_raw(b"".join(encode_command(*cmd) for cmd in cmds))
    for _ in cmds:
        assert not isinstance(c.read(), RespError)
    # jobs held per master: in the pools, and far (the stats hash's fn)
    held = []
    for n in nodes:
        cl = n.client()
        total = 0
        for key in cl.scan_iter(match="{%s:*}:pool" % prefix, count=1000):
            total += cl.hlen(key)
        for key in cl.scan_iter(match="{%s:*}:stats" % prefix, count=1000):
            total += int(cl.hget(key, "fn") or 0)
        held.append(total)
    assert sum(held) == len(cmds)
    ok, mean = _within(held, 20)
    assert ok, "jobs per master %r (mean %.0f)" % (held, mean)
    # consume the hot topic through the same instance
    left = 3000
    while left:
        got = c.call("RESERVE", "TIMEOUT", 1000, "COUNT", 100, "FROM", "hot")
        assert got is not NIL_ARRAY
        assert c.call("ACK", "hot", *[j[1] for j in got]) == len(got)
        left -= len(got)
    after = [_commandstats(n).get("cmdstat_evalsha", 0) for n in nodes]
    calls = [a - b for a, b in zip(after, before)]
    ok, mean = _within(calls, 20)
    assert ok, "script calls per master %r (mean %.0f)" % (calls, mean)


def test_cluster_semantics_and_redirections(procs):
    nodes = procs.cluster(3)
    s = procs.delayqd(cluster_url(nodes))
    c = s.raw(timeout=30)
    for i in range(200):
        assert c.call("ADD", "t", "j%d" % i, "body%d" % i, "DELAY", 3600000) == b"j%d" % i
    c.call("ADD", "r", "ready", "x")
    # move a third of the slots to another master while the jobs sit there
    ids = {}
    for n in nodes:
        ids[n.port] = n.client().execute_command("CLUSTER", "MYID").decode()
    p = subprocess.run([REDIS_CLI, "--cluster", "reshard", "127.0.0.1:%d" % nodes[0].port,
                        "--cluster-from", ids[nodes[0].port], "--cluster-to", ids[nodes[1].port],
                        "--cluster-slots", "3000", "--cluster-yes"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    assert p.returncode == 0, p.stdout.decode(errors="replace")[-2000:]
    for i in range(200):
        g = c.call("GET", "t", "j%d" % i)
        assert isinstance(g, list), (i, g)
        assert pairs(g)["body"] == b"body%d" % i
    st = pairs(c.call("STATS", "t"))
    assert st["jobs_delayed"] == 200
    got = c.call("RESERVE", "TIMEOUT", 1000, "FROM", "r")
    assert got[0][1] == b"ready"
    assert c.call("DEL", "t", *["j%d" % i for i in range(200)]) == 200
    assert sorted(c.call("TOPICS")) == [b"r"]


def test_cluster_fleet_wakeups(procs):
    nodes = procs.cluster(3)
    url = cluster_url(nodes)
    a, b = procs.delayqd(url), procs.delayqd(url)
    w = b.raw(timeout=10)
    w.send("RESERVE", "TIMEOUT", 5000, "FROM", "t")
    time.sleep(0.1)
    ca = a.raw()
    due = now_ms() + 500
    ca.call("ADD", "t", "later", "x", "AT", due)
    a.kill()
    got = w.read()
    assert got[0][1] == b"later"
    assert now_ms() - due <= 100
