"""Redis compatibility: redis-cli, inline commands, housekeeping commands, redis-py, pipelining."""

import shutil
import subprocess
import threading

import pytest
import redis

from conftest import RespError, Status, assert_err, encode_command, pairs

REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"


def cli(server, *args, stdin=None, timeout=10):
    p = subprocess.run([REDIS_CLI, "-p", str(server.port), *args], input=stdin,
                       capture_output=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


# ---------------------------------------------------------------- redis-cli

def test_redis_cli_command_line(server, c):
    rc, out, err = cli(server, "ADD", "orders", "o-1", "hello", "DELAY", "30000")
    assert rc == 0 and out.strip() == b"o-1", (out, err)
    assert pairs(c.call("GET", "orders", "o-1"))["state"] == b"delayed"
    rc, out, _ = cli(server, "PING")
    assert out.strip() == b"PONG"
    rc, out, _ = cli(server, "add", "orders", "o-1", "again")
    assert out.startswith(b"EXISTS") or b"EXISTS" in out, out
    rc, out, _ = cli(server, "GET", "orders", "o-1")
    lines = out.split(b"\n")
    assert lines[:4] == [b"topic", b"orders", b"id", b"o-1"], out


def test_redis_cli_piped(server, c):
    rc, out, err = cli(server, stdin=b"PING\r\nADD t a b\r\nADD t c \"two words\" DELAY 60000\r\nDEL t nope\r\n")
    assert rc == 0, err
    assert out.split(b"\n")[:4] == [b"PONG", b"a", b"c", b"0"], out
    assert pairs(c.call("GET", "t", "c"))["body"] == b"two words"


def test_redis_cli_pipe_mode(server, c):
    n = 2000
    data = b"".join(encode_command("ADD", "bulk", "j%d" % i, "x" * 50) for i in range(n))
    rc, out, err = cli(server, "--pipe", stdin=data, timeout=30)
    assert rc == 0, (out, err)
    assert b"errors: 0, replies: %d" % n in out + err, out + err
    assert pairs(c.call("STATS", "bulk"))["jobs_ready"] == n


def test_redis_cli_info_and_reserve(server, c):
    rc, out, _ = cli(server, "INFO")
    assert rc == 0 and out.strip()
    c.call("ADD", "t", "a", "body")
    rc, out, _ = cli(server, "RESERVE", "TIMEOUT", "0", "FROM", "t")
    assert out.split(b"\n")[:4] == [b"t", b"a", b"body", b"1"], out


# ---------------------------------------------------------------- inline commands

def test_inline_commands(c):
    assert c.inline("PING") == b"PONG"
    assert c.inline("ping hello") == b"hello"
    assert c.inline("ADD t a plain DELAY 60000") == b"a"
    assert c.inline('ADD t b "quoted \\"body\\"\\x41\\n"') == b"b"
    assert c.inline("ADD t c 'single quoted'") == b"c"
    assert c.inline("ADD\tt\td\ttabbed") == b"d"
    assert pairs(c.call("GET", "t", "a"))["state"] == b"delayed"
    assert pairs(c.call("GET", "t", "b"))["body"] == b'quoted "body"A\n'
    assert pairs(c.call("GET", "t", "c"))["body"] == b"single quoted"
    assert pairs(c.call("GET", "t", "d"))["body"] == b"tabbed"


def test_inline_lf_only_and_empty_lines(c):
    c.send_raw(b"PING\n\r\n\nPING a\n")
    assert c.read() == b"PONG"
    assert c.read() == b"a"
    assert not c.pending(0.05)


def test_inline_and_multibulk_mixed_in_one_write(c):
    c.send_raw(b"ADD t a x\r\n" + encode_command("ADD", "t", "b", "y") + b"DEL t a b\r\n"
               + encode_command("PING"))
    assert [c.read() for _ in range(4)] == [b"a", b"b", 2, b"PONG"]


def test_inline_errors_keep_connection(c):
    rep = c.inline("NOSUCH cmd")
    assert_err(rep, "ERR")
    assert c.inline("ADD t a x DELAY soon").code == "ERR"
    assert c.inline("PING") == b"PONG"


# ---------------------------------------------------------------- housekeeping commands

def test_ping_echo(c):
    rep = c.call("PING")
    assert rep == b"PONG" and isinstance(rep, Status)
    rep = c.call("PING", "hi there")
    assert rep == b"hi there" and not isinstance(rep, Status)
    assert c.call("ECHO", b"bin\x00\r\n") == b"bin\x00\r\n"
    assert c.call("echo", "x") == b"x"


def test_info(c):
    rep = c.call("INFO")
    assert type(rep) is bytes and len(rep) > 0
    rep = c.call("INFO", "server")
    assert type(rep) is bytes


def test_command(c):
    rep = c.call("COMMAND")
    assert isinstance(rep, list)
    rep = c.call("COMMAND", "DOCS")
    assert isinstance(rep, (list, RespError))  # redis-cli 7 asks for it; an error is tolerated by it


def test_select_zero_and_client_setname(c):
    assert c.call("SELECT", 0) == b"OK"
    assert c.call("CLIENT", "SETNAME", "worker-1") == b"OK"
    assert c.call("PING") == b"PONG"


def test_quit(c):
    c.send_raw(encode_command("QUIT") + encode_command("PING"))
    assert c.read() == b"OK"
    assert c.wait_closed(2.0)


def test_redis_py_client_name_and_ping(server):
    cl = redis.Redis(port=server.port, client_name="delayq-test", socket_timeout=5)
    assert cl.ping() is True
    assert cl.echo(b"x") == b"x"
    cl.close()


# ---------------------------------------------------------------- pipelining

def test_redis_py_pipeline_10000(r):
    n = 10000
    p = r.pipeline(transaction=False)
    for i in range(n):
        p.execute_command("ADD", "pipe", "j%d" % i, "body-%d" % i, "TTR", 60000)
    ids = p.execute()
    assert ids == [b"j%d" % i for i in range(n)]
    p = r.pipeline(transaction=False)
    for i in range(0, n, 2):
        p.execute_command("GET", "pipe", "j%d" % i)
        p.execute_command("DEL", "pipe", "j%d" % (i + 1))
    res = p.execute(raise_on_error=False)
    for k in range(0, n, 2):
        assert pairs(res[k])["body"] == b"body-%d" % k
        assert res[k + 1] == 1
    assert pairs(r.execute_command("STATS", "pipe"))["jobs_ready"] == n // 2


def test_redis_py_pipeline_reserve_ack(r):
    n = 3000
    p = r.pipeline(transaction=False)
    for i in range(n):
        p.execute_command("ADD", "ra", "j%d" % i, "x")
    p.execute()
    p = r.pipeline(transaction=False)
    for _ in range(n // 100):
        p.execute_command("RESERVE", "TIMEOUT", 0, "COUNT", 100, "FROM", "ra")
    batches = p.execute()
    ids = [j[1] for b in batches for j in b]
    assert ids == [b"j%d" % i for i in range(n)]
    p = r.pipeline(transaction=False)
    for jid in ids:
        p.execute_command("ACK", "ra", jid)
    assert p.execute() == [1] * n
    assert r.execute_command("TOPICS") == []


def test_raw_20000_adds_in_one_write(c):
    n = 20000
    data = b"".join(encode_command("ADD", "raw", "id-%d" % i, "b" * 20) for i in range(n))
    errors = []

    def sender():
        try:
            c.sock.sendall(data)
        except OSError as e:  # pragma: no cover - reported below
            errors.append(e)

    th = threading.Thread(target=sender)
    th.start()
    for i in range(n):
        rep = c.read(timeout=20)
        assert rep == b"id-%d" % i, (i, rep)
    th.join(10)
    assert not errors
    assert c.call("PING") == b"PONG"
    assert pairs(c.call("STATS", "raw"))["jobs_ready"] == n


def test_pipelined_errors_do_not_break_the_stream(c):
    cmds = []
    for i in range(500):
        cmds.append(encode_command("ADD", "t", "j%d" % i, "x"))
        cmds.append(encode_command("ADD", "t", "j%d" % i, "x"))  # EXISTS
        cmds.append(encode_command("BOGUS", i))
    c.send_raw(b"".join(cmds))
    for i in range(500):
        assert c.read() == b"j%d" % i
        assert c.read().code == "EXISTS"
        assert c.read().code == "ERR"


def test_long_mixed_pipeline_with_escaped_inline_requests(c):
    """Long pipelines are parsed ahead a slice at a time (conn.c); inline requests with escapes
    are unescaped in place, so every one of them must still be read exactly once, in order. And
    every store runs one connection's requests in order: a GET sees the ADDs sent before it and
    none sent after it."""
    parts, want = [], []
    for i in range(300):
        if i % 11 == 0:  # a GET sent before the ADD must not see it
            parts.append(encode_command("GET", "mx", "m%d" % i))
            want.append(None)
        parts.append(encode_command("ADD", "mx", "m%d" % i, "multi-%d" % i))
        want.append(b"m%d" % i)
        if i % 7 == 0:
            parts.append(b'ADD mx i%d "in\\"line\\x41-%d"\r\n' % (i, i))
            want.append(b"i%d" % i)
        if i % 5 == 0:
            parts.append(encode_command("GET", "mx", "m%d" % (i // 2)))
            want.append(("get", i // 2))
    c.send_raw(b"".join(parts))
    for w in want:
        rep = c.read()
        if isinstance(w, tuple):
            assert pairs(rep)["body"] == b"multi-%d" % w[1]
        else:
            assert rep == w
    for i in range(0, 300, 7):
        assert pairs(c.call("GET", "mx", "i%d" % i))["body"] == b'in"lineA-%d' % i
