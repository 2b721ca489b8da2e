"""Push delivery (DESIGN §9): delayqd POSTs due jobs with a URL to a real
receiver on loopback (pushrecv.Receiver) and settles them by the answer.

Every wait is on a condition (the receiver's requests, the job's state) with a
deadline; TTRs, backoffs and timeouts are short so the tests stay fast."""

import json
import os
import socket
import subprocess
import threading
import time
import urllib.request

import pytest

from conftest import NIL_ARRAY, assert_err, now_ms, pairs, wait_until
from pushrecv import recv, verify  # noqa: F401 (recv: fixture)

SECRETS = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "old-secret-being-rotated-out"]


def state_of(c, topic, jid):
    g = c.call("GET", topic, jid)
    return None if g is None else pairs(g)


def wait_state(c, topic, jid, state, timeout=10.0):
    ok = wait_until(lambda: (state_of(c, topic, jid) or {}).get("state") == state, timeout)
    assert ok, "job %s/%s never %s: %r" % (topic, jid, state, state_of(c, topic, jid))


def wait_gone(c, topic, jid, timeout=10.0):
    assert wait_until(lambda: c.call("GET", topic, jid) is None, timeout), \
        "job %s/%s still there: %r" % (topic, jid, state_of(c, topic, jid))


def stats(c, topic=None):
    return pairs(c.call("STATS", topic) if topic else c.call("STATS"))


def info(c):
    text = c.call("INFO").decode()
    return dict(l.split(":", 1) for l in text.split("\r\n") if ":" in l and not l.startswith("#"))


# --- ADD --------------------------------------------------------------------

def test_add_url_is_checked_and_shown(make_server):
    s = make_server("--push-allow", "127.0.0.1,*.example.com")
    c = s.raw()
    for bad, word in [("ftp://x/", "http"), ("/relative", "http"), ("http://", "host"),
                      ("http://h:99999/", "port"), ("https://evil.org/x", "push-allow"),
                      ("http://a b/", "url"), ("x" * 3000, "url")]:
        assert_err(c.call("ADD", "t", "j", "b", "URL", bad), "ERR", "url")
        assert_err(c.call("ADD", "t", "j", "b", "URL", bad), "ERR", word)
    assert_err(c.call("ADD", "t", "j", "b", "CONTENT-TYPE", "text/plain"), "ERR",
               "content-type", "url")
    assert_err(c.call("ADD", "t", "j", "b", "URL", "http://127.0.0.1/", "CONTENT-TYPE", "a\x01b"),
               "ERR", "content-type")
    assert c.call("GET", "t", "j") is None
    assert c.call("ADD", "t", "j", "b", "DELAY", 600000, "URL", "https://API.example.com/a?b=c",
                  "CONTENT-TYPE", "application/json") == b"j"
    d = state_of(c, "t", "j")
    assert d["url"] == b"https://API.example.com/a?b=c"
    assert d["content_type"] == b"application/json"
    assert c.call("ADD", "t", "k", "b", "DELAY", 600000, "URL", "http://127.0.0.1:1/") == b"k"
    assert state_of(c, "t", "k")["content_type"] == b"application/octet-stream"
    assert c.call("ADD", "t", "plain", "b") == b"plain"
    assert "url" not in state_of(c, "t", "plain")
    # kept across a restart
    s.restart()
    c = s.raw()
    assert state_of(c, "t", "j")["url"] == b"https://API.example.com/a?b=c"
    assert state_of(c, "t", "k")["url"] == b"http://127.0.0.1:1/"


# --- outcomes -----------------------------------------------------------------

def test_2xx_is_acked_with_signed_headers(make_server, recv):
    rc = recv(secrets=[SECRETS[1]])  # the receiver knows only the old secret
    s = make_server("--push-secret", SECRETS[0], "--push-secret", SECRETS[1])
    c = s.raw()
    # a client waiting on the topic never gets a push job
    waiter = s.raw()
    waiter.send("RESERVE", "TIMEOUT", 1000, "FROM", "orders")
    due = now_ms() + 150
    body = b'{"order": 42, "bin": "\x00\xff"}'
    assert c.call("ADD", "orders", "o-42", body, "AT", due, "URL", rc.url("/cancel?x=1"),
                  "CONTENT-TYPE", "application/json") == b"o-42"
    rc.wait(lambda rs: len(rs) >= 1)
    wait_gone(c, "orders", "o-42")
    (r,) = rc.of("orders/o-42")
    assert r.path == "/cancel?x=1"
    assert r.body == body
    h = r.headers
    assert h["content-type"] == "application/json"
    assert h["webhook-id"] == "orders/o-42"
    assert abs(int(h["webhook-timestamp"]) - time.time()) < 5
    assert h["delayq-topic"] == "orders"
    assert h["delayq-attempt"] == "1"
    assert int(h["delayq-due"]) == due
    assert r.at * 1000 >= due - 5
    # two signatures (rotation); each verifies with its own secret only
    sigs = h["webhook-signature"].split()
    assert len(sigs) == 2 and all(x.startswith("v1,") for x in sigs)
    assert verify([SECRETS[0]], h, body) and verify([SECRETS[1]], h, body)
    assert not verify(["another"], h, body)
    # a tampered body, id or timestamp is rejected
    assert not verify(SECRETS, h, body + b" ")
    assert not verify(SECRETS, dict(h, **{"webhook-id": "orders/o-43"}), body)
    assert not verify(SECRETS, dict(h, **{"webhook-timestamp": "1"}), body)
    assert waiter.read(timeout=5) is NIL_ARRAY  # its wait ended with nothing
    st = stats(c, "orders")
    assert (st["pushed"], st["push_failed"], st["acked"]) == (1, 0, 1)
    i = info(c)
    assert i["pushed"] == "1" and i["push_inflight"] == "0"
    assert float(i["push_duration_p99_ms"]) > 0


def http_job(s, topic, jid):
    with urllib.request.urlopen("http://127.0.0.1:%d/v1/topics/%s/jobs/%s"
                                % (s.http_port, topic, jid), timeout=5) as f:
        return json.load(f)


def test_500_backs_off_then_dead_then_kick(make_server, recv):
    rc = recv()
    rc.script = lambda path, req: (500, {})
    s = make_server()
    c = s.raw()
    c.call("ADD", "t", "j", "x", "RETRIES", 2, "BACKOFF", "FIXED", 100, "URL", rc.url())
    rc.wait(lambda rs: len(rs) >= 3)
    wait_state(c, "t", "j", b"dead")
    reqs = rc.of("t/j")
    assert [r.headers["delayq-attempt"] for r in reqs] == ["1", "2", "3"]
    for a, b in zip(reqs, reqs[1:]):
        assert b.at - a.at >= 0.09, "retried before its backoff"
    assert all(r.headers["webhook-id"] == "t/j" for r in reqs)  # the idempotency key
    st = stats(c, "t")
    assert (st["push_failed"], st["pushed"], st["dead"]) == (1, 0, 1)
    # the final failure is logged once, naming the host and the status
    assert wait_until(lambda: "failed for good" in s.log(), 2)
    lines = [l for l in s.log().splitlines() if "failed for good" in l]
    assert len(lines) == 1 and "127.0.0.1" in lines[0] and "HTTP 500" in lines[0], lines
    # the job shows its last attempt (HTTP, and so the dashboard)
    lp = http_job(s, "t", "j")["last_push"]
    assert lp["status"] == 500 and lp["attempt"] == 3 and "500" in lp["error"]
    assert abs(lp["at"] - reqs[-1].at * 1000) < 5000
    # no more attempts while dead; KICK delivers it again
    time.sleep(0.3)
    assert len(rc.of("t/j")) == 3
    rc.script = lambda path, req: None
    assert c.call("KICK", "t") == 1
    rc.wait(lambda rs: len(rs) >= 4)
    wait_gone(c, "t", "j")
    assert rc.of("t/j")[-1].headers["delayq-attempt"] == "1"
    assert stats(c, "t")["pushed"] == 1
    # delivered: the note is forgotten (a new job of the same id starts clean)
    c.call("ADD", "t", "j", "x", "DELAY", 60000, "URL", rc.url())
    assert "last_push" not in http_job(s, "t", "j")


def test_timeout_is_retried_and_capped_by_ttr(make_server, recv):
    rc = recv()
    slow = threading.Event()

    def script(path, req):
        if req.headers["delayq-attempt"] == "1":
            slow.wait(5)  # longer than the job's TTR
        return None

    rc.script = script
    s = make_server("--push-timeout", 30000)
    c = s.raw()
    t0 = time.time()
    c.call("ADD", "t", "j", "x", "TTR", 400, "BACKOFF", "FIXED", 10, "URL", rc.url())
    rc.wait(lambda rs: len(rs) >= 2, timeout=10)
    wait_gone(c, "t", "j")
    slow.set()
    first, second = rc.of("t/j")[:2]
    assert second.headers["delayq-attempt"] == "2"
    # timed out at the TTR (400 ms), not at --push-timeout (30 s). The lease began after t0;
    # the first request's arrival may lag its sending on a loaded machine, so the lower bound
    # is taken from t0.
    assert second.at - t0 >= 0.4 - 0.01, second.at - t0
    assert second.at - first.at < 3.0, second.at - first.at
    assert time.time() - t0 < 5
    # the timeout (at the TTR) and the lease's end race: either brought it back
    st = stats(c, "t")
    assert st["nacked"] + st["expired"] >= 1, st


def test_push_timeout_flag(make_server, recv):
    rc = recv()
    hold = threading.Event()

    def script(path, req):
        if req.headers["delayq-attempt"] == "1":
            hold.wait(5)

    rc.script = script
    s = make_server("--push-timeout", 200)
    c = s.raw()
    c.call("ADD", "t", "j", "x", "TTR", 60000, "BACKOFF", "FIXED", 10, "URL", rc.url())
    rc.wait(lambda rs: len(rs) >= 2, timeout=10)
    hold.set()
    first, second = rc.of("t/j")[:2]
    assert 0.15 <= second.at - first.at < 3.0, second.at - first.at
    wait_gone(c, "t", "j")


def test_connection_refused_retries_then_dead(make_server):
    s = make_server()
    c = s.raw()
    sk = socket.socket()
    sk.bind(("127.0.0.1", 0))
    port = sk.getsockname()[1]  # bound, not listening: connections are refused
    try:
        c.call("ADD", "t", "j", "x", "RETRIES", 2, "BACKOFF", "FIXED", 20,
               "URL", "http://127.0.0.1:%d/x" % port)
        wait_state(c, "t", "j", b"dead")
        assert state_of(c, "t", "j")["attempts"] == 3
        assert wait_until(lambda: "failed for good" in s.log(), 2)
        line = [l for l in s.log().splitlines() if "failed for good" in l][0]
        assert "127.0.0.1" in line and "connect" in line.lower(), line
        lp = http_job(s, "t", "j")["last_push"]
        assert lp["status"] == 0 and "connect" in lp["error"].lower(), lp
        assert c.call("DEL", "t", "j") == 1  # DEL forgets the note too
        c.call("ADD", "t", "j", "x", "DELAY", 60000, "URL", "http://127.0.0.1:%d/x" % port)
        assert "last_push" not in http_job(s, "t", "j")
        assert stats(c, "t")["push_failed"] == 1
    finally:
        sk.close()


def test_retry_after_sets_the_next_attempt(make_server, recv):
    rc = recv()

    def script(path, req):
        a = req.headers["delayq-attempt"]
        if path == "/429" and a == "1":
            return (429, {"Retry-After": "1"})
        if path == "/503" and a == "1":
            return (503, {"Retry-After": "3600"})  # capped by the backoff max (400 ms)
        if path == "/503-no-header" and a == "1":
            return (503, {})
        return None

    rc.script = script
    s = make_server()
    c = s.raw()
    c.call("ADD", "t", "a", "x", "BACKOFF", "FIXED", 10, "URL", rc.url("/429"))
    c.call("ADD", "t", "b", "x", "BACKOFF", "EXP", 400, 400, "URL", rc.url("/503"))
    c.call("ADD", "t", "c", "x", "BACKOFF", "FIXED", 10, "URL", rc.url("/503-no-header"))
    rc.wait(lambda rs: len(rs) >= 6, timeout=10)
    for jid in "abc":
        wait_gone(c, "t", jid)
    a1, a2 = rc.of("t/a")
    assert 0.95 <= a2.at - a1.at < 3.0, a2.at - a1.at    # Retry-After: 1 (not 10 ms)
    b1, b2 = rc.of("t/b")
    assert 0.35 <= b2.at - b1.at < 3.0, b2.at - b1.at    # 3600 s capped at 400 ms
    c1, c2 = rc.of("t/c")
    assert c2.at - c1.at < 0.9                          # no header: the backoff (10 ms)


def test_410_is_dead_at_once(make_server, recv):
    rc = recv()
    rc.script = lambda path, req: (410, {})
    s = make_server()
    c = s.raw()
    c.call("ADD", "t", "j", "x", "RETRIES", 5, "URL", rc.url())
    wait_state(c, "t", "j", b"dead")
    time.sleep(0.2)
    assert len(rc.of("t/j")) == 1
    assert stats(c, "t")["push_failed"] == 1
    assert "HTTP 410" in s.log()


def test_redirects_are_not_followed(make_server, recv):
    rc = recv()
    rc.script = lambda path, req: (302, {"Location": "/elsewhere"}) if path == "/r" else None
    s = make_server()
    c = s.raw()
    c.call("ADD", "t", "j", "x", "RETRIES", 0, "URL", rc.url("/r"))
    wait_state(c, "t", "j", b"dead")
    assert [r.path for r in rc.requests] == ["/r"]


def test_push_allow_checked_again_at_delivery(make_server, recv):
    rc = recv()
    s = make_server()
    c = s.raw()
    c.call("ADD", "t", "j", "x", "DELAY", 300, "URL", rc.url())
    s.stop()
    s.extra += ["--push-allow", "*.example.com"]
    s.start()
    c = s.raw()
    wait_state(c, "t", "j", b"dead")
    assert rc.requests == []
    assert "push-allow" in s.log()


# --- HTTPS ------------------------------------------------------------------------

def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def certs(tmp_path):
    d = str(tmp_path)
    ext = os.path.join(d, "san.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test CA",
            "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
            "-keyout", "good.key", "-out", "good.csr", cwd=d)
    openssl("x509", "-req", "-in", "good.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", "good.pem", cwd=d)
    # same name, but signed by nobody the server trusts
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout", "bad.key", "-out", "bad.pem", cwd=d)
    return d


def test_https_with_a_test_ca(make_server, recv, certs):
    good = recv(certfile=os.path.join(certs, "good.pem"), keyfile=os.path.join(certs, "good.key"))
    bad = recv(certfile=os.path.join(certs, "bad.pem"), keyfile=os.path.join(certs, "bad.key"))
    s = make_server("--push-ca", os.path.join(certs, "ca.pem"))
    c = s.raw()
    c.call("ADD", "t", "good", "x", "URL", good.url(scheme="https", host="localhost"))
    c.call("ADD", "t", "bad", "x", "RETRIES", 2, "BACKOFF", "FIXED", 50,
           "URL", bad.url(scheme="https", host="localhost"))
    good.wait(lambda rs: len(rs) >= 1)
    wait_gone(c, "t", "good")
    assert good.of("t/good")[0].body == b"x"
    # the certificate the CA did not sign: retried, then dead, never delivered
    wait_state(c, "t", "bad", b"dead")
    assert state_of(c, "t", "bad")["attempts"] == 3
    assert bad.requests == []
    line = [l for l in s.log().splitlines() if "failed for good" in l][0]
    assert "localhost" in line and ("certificate" in line.lower() or "ssl" in line.lower()), line


# --- flow control -------------------------------------------------------------------

def test_concurrency_per_topic_and_isolation(make_server, recv):
    dead_end = recv()
    dead_end.hang = threading.Event()   # accepts, never answers
    fine = recv()
    s = make_server("--push-concurrency", 4, "--push-timeout", 60000)
    c = s.raw()
    # 2,000 jobs to a receiver that never answers
    for i in range(0, 2000, 200):
        for k in range(i, i + 200):
            c.send("ADD", "slow", "s%d" % k, "x", "TTR", 60000, "URL", dead_end.url())
        for k in range(i, i + 200):
            assert c.read() == b"s%d" % k
    dead_end.wait(lambda rs: len(rs) >= 4)
    # another topic is delivered meanwhile, and RESP answers
    c.call("ADD", "fast", "f1", "x", "URL", fine.url())
    fine.wait(lambda rs: len(rs) >= 1, timeout=5)
    wait_gone(c, "fast", "f1")
    assert c.call("PING") == b"PONG"
    time.sleep(0.3)
    assert len(dead_end.requests) == 4 and dead_end.max_active == 4
    st = stats(c, "slow")
    assert st["jobs_reserved"] == 4 and st["jobs_ready"] == 1996
    assert info(c)["push_inflight"] == "4"


def test_waiting_push_jobs_are_listed_deleted_and_never_reserved(make_server, recv):
    """Push jobs waiting for the pusher (its one slot is taken) are ready jobs for LIST,
    STATS and DEL, and a client's RESERVE takes only the jobs without a URL."""
    rc = recv()
    rc.hang = threading.Event()
    s = make_server("--push-concurrency", 1)
    c = s.raw()
    push_ids = ["p%d" % i for i in range(600)]
    for i in range(0, 600, 200):
        for j in push_ids[i:i + 200]:
            c.send("ADD", "t", j, "x", "URL", rc.url())
        for j in push_ids[i:i + 200]:
            assert c.read() == j.encode()
    for i in range(5):
        c.call("ADD", "t", "plain%d" % i, "x")
    rc.wait(lambda rs: len(rs) >= 1)
    held = rc.requests[0].job.split("/")[1]
    listed, cur = [], b"0"
    while True:
        cur, ids = c.call("LIST", "t", "ready", "COUNT", 100, "CURSOR", cur)
        listed += ids
        if cur == b"0":
            break
    want = {j.encode() for j in push_ids if j != held} | {b"plain%d" % i for i in range(5)}
    assert set(listed) == want
    st = stats(c, "t")
    assert (st["jobs_ready"], st["jobs_reserved"]) == (604, 1)
    assert c.call("DEL", "t", "p599" if held != "p599" else "p598") == 1
    got = c.call("RESERVE", "COUNT", 100, "TIMEOUT", 0, "FROM", "t")
    assert sorted(j[1] for j in got) == [b"plain%d" % i for i in range(5)]
    assert stats(c, "t")["jobs_ready"] == 598


def test_at_most_256_transfers_per_receiver_the_rest_wait_their_timeout(make_server, recv):
    """A receiver holds at most 256 requests of delayqd at once, whatever the topics; a
    delivery waiting for one of them fails when its timeout (its TTR here) runs out,
    without being sent."""
    rc = recv()
    rc.hang = threading.Event()
    s = make_server("--push-concurrency", 128, "--push-timeout", 60000)
    c = s.raw()
    for t in ("a", "b"):
        for i in range(128):
            c.send("ADD", t, "j%d" % i, "x", "TTR", 60000, "URL", rc.url())
        for i in range(128):
            assert c.read() == b"j%d" % i
    rc.wait(lambda rs: len(rs) >= 256, timeout=20)
    c.call("ADD", "late", "j", "x", "TTR", 500, "RETRIES", 0, "URL", rc.url())
    wait_state(c, "late", "j", b"dead")
    # (the lease may end first: the note comes when the pusher gives up)
    assert wait_until(lambda: "last_push" in http_job(s, "late", "j"), 5)
    lp = http_job(s, "late", "j")["last_push"]
    assert "256 connections" in lp["error"] and lp["status"] == 0, lp
    assert rc.of("late/j") == []
    assert len(rc.requests) == 256 and rc.max_active == 256
    assert info(c)["push_inflight"] == "256"


def test_jobs_added_while_deliveries_hang_fill_the_room_left(make_server, recv):
    """--push-concurrency is what a topic may have in flight: with 120 deliveries hanging, 8
    jobs added later go out at once, though the room left (8) is less than the batch a topic
    waits for after a delivery ends (an eighth of 128). Before, they waited for 16
    deliveries to end, up to --push-timeout; a pusher that reserved while ADDs still
    arrived left the same few jobs behind."""
    rc = recv()
    rc.hang = threading.Event()
    try:
        s = make_server("--push-concurrency", 128, "--push-timeout", 60000)
        c = s.raw()
        for i in range(120):
            c.send("ADD", "t", "j%d" % i, "x", "TTR", 60000, "URL", rc.url())
        for i in range(120):
            assert c.read() == b"j%d" % i
        rc.wait(lambda rs: len(rs) >= 120)
        for i in range(120, 128):
            assert c.call("ADD", "t", "j%d" % i, "x", "TTR", 60000, "URL", rc.url()) == b"j%d" % i
        rc.wait(lambda rs: len(rs) >= 128)
        assert info(c)["push_inflight"] == "128"
    finally:
        rc.hang.set()


def test_connections_are_reused(make_server, recv):
    rc = recv()
    s = make_server("--push-concurrency", 1)
    c = s.raw()
    for i in range(30):
        c.call("ADD", "t", "j%d" % i, "x", "URL", rc.url())
    rc.wait(lambda rs: len(rs) >= 30)
    assert len({r.peer for r in rc.requests}) == 1, {r.peer for r in rc.requests}
    assert rc.max_active == 1


# --- crashes --------------------------------------------------------------------------

def test_kill9_in_flight_then_restart(make_server, recv):
    rc = recv()
    s = make_server("--push-concurrency", 16)
    c = s.raw()
    for i in range(20):
        c.call("ADD", "t", "a%d" % i, "x", "URL", rc.url("/a"))
    rc.wait(lambda rs: len(rs) >= 20)
    for i in range(20):
        wait_gone(c, "t", "a%d" % i)
    # the B jobs are in flight (the receiver holds them) when delayqd dies
    rc.hang = threading.Event()
    for i in range(30):
        c.call("ADD", "t", "b%d" % i, "x", "TTR", 1000, "URL", rc.url("/b"))
    rc.wait(lambda rs: len([r for r in rs if r.path == "/b"]) >= 16)
    s.kill()
    rc.hang.set()
    rc.hang = None
    s.start()
    c = s.raw()
    for i in range(30):
        wait_gone(c, "t", "b%d" % i, timeout=15)
    for i in range(30):
        assert len(rc.of("t/b%d" % i)) >= 1
    # acked before the crash: never delivered again
    for i in range(20):
        assert len(rc.of("t/a%d" % i)) == 1


# --- the HTTP front door ----------------------------------------------------------------

def test_http_add_with_url(make_server, recv):
    rc = recv()
    s = make_server()
    h = s.http()
    assert_err(h.call("ADD", "t", "j", "b", "URL", "mailto:x@y"), "ERR", "url")
    assert h.call("ADD", "t", "j", '{"a":1}', "DELAY", 200, "URL", rc.url("/h"),
                  "CONTENT-TYPE", "application/json") == b"j"
    d = pairs(h.call("GET", "t", "j"))
    assert d["url"] == rc.url("/h").encode() and d["content_type"] == b"application/json"
    rc.wait(lambda rs: len(rs) >= 1)
    r = rc.of("t/j")[0]
    assert r.body == b'{"a":1}' and r.headers["content-type"] == "application/json"
    c = s.raw()
    wait_gone(c, "t", "j")
    assert pairs(h.call("STATS", "t"))["pushed"] == 1


@pytest.mark.stores("embedded")
def test_far_push_job_keeps_its_url(make_server, recv):
    """A push job due beyond --memory-horizon waits in a far segment (the tiered
    store) and comes back with its URL and content type."""
    rc = recv()
    s = make_server("--memory-horizon", "1s")
    c = s.raw()
    due = now_ms() + 4000
    c.call("ADD", "t", "far", "far body", "AT", due, "URL", rc.url("/far"),
           "CONTENT-TYPE", "text/x-far")
    info_text = c.call("INFO").decode()
    assert "far" in info_text
    assert state_of(c, "t", "far")["url"] == rc.url("/far").encode()
    s.restart()  # the far job's URL is on disk, not only in memory
    c = s.raw()
    assert state_of(c, "t", "far")["content_type"] == b"text/x-far"
    rc.wait(lambda rs: len(rs) >= 1, timeout=15)
    r = rc.of("t/far")[0]
    assert r.path == "/far" and r.body == b"far body" and r.headers["content-type"] == "text/x-far"
    assert int(r.headers["delayq-due"]) == due
    wait_gone(c, "t", "far")
