"""Server flags that limit clients: --requirepass (AUTH/NOAUTH), --max-jobs (FULL),
--max-body (TOOBIG), --maxclients."""

import shutil
import subprocess
import time

import pytest
import redis

from conftest import ConnectionClosed, RespConn, RespError, assert_err, pairs


# ---------------------------------------------------------------- AUTH

@pytest.fixture
def secured(make_server):
    return make_server("--requirepass", "s3cret pass")


def test_noauth_before_auth(secured):
    c = RespConn(secured.port)
    for cmd in (["ADD", "t", "a", "x"], ["GET", "t", "a"], ["STATS"], ["TOPICS"],
                ["RESERVE", "TIMEOUT", 0, "FROM", "t"], ["DEL", "t", "a"]):
        assert_err(c.call(*cmd), "NOAUTH")
    assert_err(c.inline("ADD t a x"), "NOAUTH")
    c.close()
    c = RespConn(secured.port)
    assert c.call("AUTH", "s3cret pass") == b"OK"
    assert c.call("GET", "t", "a") is None  # nothing was added by the refused requests
    c.close()


def test_auth_wrong_then_right(secured):
    c = RespConn(secured.port)
    rep = c.call("AUTH", "wrong")
    assert isinstance(rep, RespError), rep
    assert_err(c.call("ADD", "t", "a", "x"), "NOAUTH")
    assert c.call("auth", "s3cret pass") == b"OK"
    assert c.call("ADD", "t", "a", "x") == b"a"
    assert c.call("PING") == b"PONG"
    c.close()


def test_auth_is_per_connection(secured):
    a, b = RespConn(secured.port), RespConn(secured.port)
    assert a.call("AUTH", "s3cret pass") == b"OK"
    assert a.call("ADD", "t", "a", "x") == b"a"
    assert_err(b.call("GET", "t", "a"), "NOAUTH")
    a.close()
    b.close()


def test_quit_allowed_without_auth(secured):
    c = RespConn(secured.port)
    assert c.call("QUIT") == b"OK"
    assert c.wait_closed()


def test_redis_py_with_password(secured):
    cl = redis.Redis(port=secured.port, password="s3cret pass", socket_timeout=5)
    assert cl.execute_command("ADD", "t", "a", "x") == b"a"
    cl.close()
    bad = redis.Redis(port=secured.port, password="nope", socket_timeout=5)
    with pytest.raises(redis.exceptions.RedisError):
        bad.execute_command("ADD", "t", "b", "x")
    bad.close()
    anon = redis.Redis(port=secured.port, socket_timeout=5)
    with pytest.raises(redis.exceptions.RedisError) as ei:
        anon.execute_command("TOPICS")
    assert "auth" in str(ei.value).lower()
    anon.close()



def test_redis_cli_with_password(secured):
    p = subprocess.run(["redis-cli", "-p", str(secured.port), "-a", "s3cret pass", "--no-auth-warning",
                        "ADD", "t", "a", "x"], capture_output=True, timeout=10)
    assert p.stdout.strip() == b"a", p


def test_auth_without_requirepass_is_error(c):
    assert isinstance(c.call("AUTH", "anything"), RespError)
    assert c.call("PING") == b"PONG"


# ---------------------------------------------------------------- FULL

def test_max_jobs(make_server):
    s = make_server("--max-jobs", "3")
    c = RespConn(s.port)
    assert c.call("ADD", "t", "a", "x") == b"a"
    assert c.call("ADD", "t", "b", "x", "DELAY", 60000) == b"b"
    assert c.call("ADD", "u", "c", "x") == b"c"
    assert_err(c.call("ADD", "t", "d", "x"), "FULL")
    assert_err(c.call("ADD", "t", "*", "x"), "FULL")
    assert c.call("GET", "t", "d") is None
    assert pairs(c.call("STATS"))["added"] == 3
    assert c.call("DEL", "t", "a") == 1
    assert c.call("ADD", "t", "d", "x") == b"d"
    assert_err(c.call("ADD", "t", "e", "x"), "FULL")
    # jobs that leave through ACK free their slot too
    c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")
    assert c.call("ACK", "t", "d") == 1
    assert c.call("ADD", "t", "e", "x") == b"e"
    c.close()


def test_max_jobs_zero_is_unlimited(make_server):
    s = make_server("--max-jobs", "0")
    c = RespConn(s.port)
    for i in range(200):
        c.send("ADD", "t", "j%d" % i, "x")
    assert [c.read() for _ in range(200)] == [b"j%d" % i for i in range(200)]
    c.close()


# ---------------------------------------------------------------- TOOBIG

def test_max_body(make_server):
    s = make_server("--max-body", "100")
    c = RespConn(s.port)
    assert c.call("ADD", "t", "ok", b"x" * 100) == b"ok"
    assert_err(c.call("ADD", "t", "big", b"x" * 101), "TOOBIG")
    assert c.call("GET", "t", "big") is None
    assert_err(c.call("ADD", "t", "big", b"x" * 5000, "REPLACE"), "TOOBIG")
    assert_err(c.call("ADD", "t", "ok", b"y" * 101, "REPLACE"), "TOOBIG")
    assert pairs(c.call("GET", "t", "ok"))["body"] == b"x" * 100
    assert c.call("PING") == b"PONG"  # the connection survives
    c.close()


def test_max_body_larger_than_default(make_server):
    s = make_server("--max-body", str(3 * 1024 * 1024))
    c = RespConn(s.port, timeout=20)
    body = bytes(range(256)) * (3 * 1024 * 4)  # 3 MiB
    assert c.call("ADD", "t", "big", body) == b"big"
    got = c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")
    assert got[0][2] == body
    c.close()


# ---------------------------------------------------------------- maxclients

def test_maxclients(make_server):
    s = make_server("--maxclients", "4")
    conns = [RespConn(s.port) for _ in range(4)]
    for k in conns:
        assert k.call("PING") == b"PONG"
    extra = RespConn(s.port)
    try:
        rep = extra.call("PING")
        assert isinstance(rep, RespError), "a client beyond --maxclients was served: %r" % rep
        assert extra.wait_closed(2.0)
    except (ConnectionClosed, ConnectionResetError, BrokenPipeError):
        pass  # closed without a message is fine too
    extra.close()
    for k in conns:
        assert k.call("PING") == b"PONG"
    conns.pop().close()

    def fresh_ping():
        try:
            k = RespConn(s.port)
            try:
                return k.call("PING") == b"PONG"
            finally:
                k.close()
        except (ConnectionClosed, OSError):
            return False
    ok = False
    for _ in range(100):
        if fresh_ping():
            ok = True
            break
        time.sleep(0.02)
    assert ok, "no slot freed after a client left"
    for k in conns:
        k.close()


def test_maxclients_flood(make_server):
    s = make_server("--maxclients", "10")
    keep = RespConn(s.port)
    assert keep.call("ADD", "t", "a", "x") == b"a"
    flood = []
    for _ in range(60):
        try:
            flood.append(RespConn(s.port, timeout=2))
        except OSError:
            pass
    served = 0
    for k in flood:
        try:
            k.send("PING")
            rep = k.read(timeout=2)
            if rep == b"PONG":
                served += 1
        except (ConnectionClosed, OSError):
            pass
    assert served <= 9
    for k in flood:
        k.close()
    assert keep.call("PING") == b"PONG"
    assert pairs(keep.call("GET", "t", "a"))["state"] == b"ready"
    keep.close()
