"""Graceful stop (DESIGN §4): SIGTERM/SIGINT stop accepting, finish what is in flight, exit 0."""

import signal
import threading
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


def burst_then_sigterm(server, n, wait_first_reply):
    c = RespConn(server.port, timeout=10)
    data = b"".join(encode_command("ADD", "burst", "j%d" % i, "x" * 32) for i in range(n))
    th = threading.Thread(target=_sendall_quiet, args=(c.sock, data))
    th.start()
    got = []
    if wait_first_reply:
        got.append(c.read(timeout=5))  # the server is in the middle of the burst
    else:
        time.sleep(0.02)  # the burst is on the wire
    server.proc.send_signal(signal.SIGTERM)
    try:
        for _ in range(n - len(got)):
            got.append(c.read(timeout=5))
    except (ConnectionClosed, OSError):
        pass
    assert c.wait_closed(5)
    th.join(5)
    assert server.proc.wait(5) == 0
    c.close()
    # every reply is whole and in order: the ones received are a prefix of the requests
    assert got == [b"j%d" % i for i in range(len(got))], got[:5]
    return got


def _sendall_quiet(sock, data):
    try:
        sock.sendall(data)
    except OSError:
        pass


def test_pipelined_burst_before_sigterm_gets_replies(server):
    n = 2000
    got = burst_then_sigterm(server, n, wait_first_reply=False)
    assert len(got) == n, "only %d of %d replies before close" % (len(got), n)


def test_sigterm_in_the_middle_of_a_burst(server):
    got = burst_then_sigterm(server, 30000, wait_first_reply=True)
    assert len(got) >= 1


def test_graceful_stop_keeps_acknowledged_jobs(server):
    n = 2000
    got = burst_then_sigterm(server, n, wait_first_reply=False)
    server.start()
    c = RespConn(server.port)
    s = pairs(c.call("STATS", "burst"))
    assert s["jobs_ready"] == len(got), s
    assert pairs(c.call("GET", "burst", "j%d" % (len(got) - 1)))["body"] == b"x" * 32
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
