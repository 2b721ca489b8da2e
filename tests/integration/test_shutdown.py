"""Graceful stop (DESIGN §4): SIGTERM/SIGINT stop accepting, finish what is in flight, exit 0."""

import signal
import time

import pytest

from conftest import ConnectionClosed, RespConn, RespError, encode_command, pairs


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_with_clients_connected(server, sig):
    idle = [RespConn(server.port) for _ in range(5)]
    for k in idle:
        assert k.call("PING") == b"PONG"
    blocked = RespConn(server.port)
    blocked.send("RESERVE", "FROM", "t")  # waits forever
    half = RespConn(server.port)
    half.send_raw(b"*3\r\n$3\r\nADD\r\n")  # an unfinished request
    time.sleep(0.05)
    t0 = time.monotonic()
    rc = server.stop(sig, timeout=5)
    assert rc == 0, "exit code %s\n%s" % (rc, server.log()[-2000:])
    assert time.monotonic() - t0 < 5
    # the blocked client is released: closed (or told nil)
    try:
        rep = blocked.read(timeout=1)
        assert not rep or isinstance(rep, RespError), rep
    except (ConnectionClosed, OSError):
        pass
    for k in idle + [blocked, half]:
        k.close()


def test_pipelined_burst_before_sigterm_gets_replies(server):
    n = 2000
    c = RespConn(server.port, timeout=10)
    c.send_raw(b"".join(encode_command("ADD", "burst", "j%d" % i, "x" * 32) for i in range(n)))
    time.sleep(0.02)  # the burst is on the wire / being processed
    server.proc.send_signal(signal.SIGTERM)
    got = []
    try:
        for _ in range(n):
            got.append(c.read(timeout=5))
    except ConnectionClosed:
        pass
    assert got == [b"j%d" % i for i in range(n)], "only %d of %d replies before close" % (len(got), n)
    assert c.wait_closed(5)
    rc = server.proc.wait(5)
    assert rc == 0
    c.close()
    # what was acknowledged survives the restart
    server.start()
    c = RespConn(server.port)
    s = pairs(c.call("STATS", "burst"))
    assert s["jobs_ready"] == n, s
    assert pairs(c.call("GET", "burst", "j%d" % (n - 1)))["body"] == b"x" * 32
    c.close()


def test_restart_keeps_jobs_in_every_state(server):
    c = RespConn(server.port)
    c.call("ADD", "t", "reserved", "v", "TTR", 3600000)
    assert c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")[0][1] == b"reserved"
    c.call("ADD", "t", "ready", "r")
    c.call("ADD", "t", "delayed", "d", "DELAY", 3600000)
    c.call("ADD", "d", "dead", "x", "RETRIES", 0)
    c.call("RESERVE", "TIMEOUT", 0, "FROM", "d")
    assert c.call("NACK", "d", "dead") == b"dead"
    c.close()
    assert server.restart() == 0
    c = RespConn(server.port)
    got = {j: pairs(c.call("GET", "t", j)) for j in ("reserved", "ready", "delayed")}
    assert {j: d["state"] for j, d in got.items()} == {
        "reserved": b"reserved", "ready": b"ready", "delayed": b"delayed"}
    assert got["reserved"]["attempts"] == 1 and got["ready"]["body"] == b"r"
    assert pairs(c.call("GET", "d", "dead"))["state"] == b"dead"
    c.close()


def test_stop_while_jobs_come_due(server):
    c = RespConn(server.port)
    for i in range(200):
        c.send("ADD", "t", "j%d" % i, "x", "DELAY", i % 50)
    for _ in range(200):
        c.read()
    w = RespConn(server.port)
    w.send("RESERVE", "COUNT", 10, "FROM", "t")
    assert server.stop(signal.SIGTERM, timeout=5) == 0
    c.close()
    w.close()


def test_stop_refuses_new_connections_afterwards(server):
    port = server.port
    assert server.stop() == 0
    with pytest.raises(OSError):
        RespConn(port, timeout=1).call("PING")
