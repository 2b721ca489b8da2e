"""The HTTP/JSON front door of DESIGN §8: routes, shapes, statuses, auth, long-poll RESERVE,
bodies both ways, and jobs crossing between the two doors. (The semantic tests of
test_commands/test_transitions/test_blocking also run through this door: see conftest.)"""

import base64
import email.utils
import json
import socket
import time

import pytest

from conftest import (HttpConn, NIL_ARRAY, RespConn, assert_between, now_ms, pairs,
                      wait_blocked, wait_until)


def req(srv, method, path, doc=None, token=None, raw_body=None, headers=None):
    """One request on a fresh connection: (status, parsed JSON or text, headers)."""
    h = HttpConn(srv.http_port, token=token)
    try:
        body = raw_body if raw_body is not None else (b"" if doc is None else json.dumps(doc).encode())
        head = "%s %s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n" % (method, path, len(body))
        if token:
            head += "Authorization: Bearer %s\r\n" % token
        for k, v in (headers or {}).items():
            head += "%s: %s\r\n" % (k, v)
        h.sock.sendall(head.encode() + b"\r\n" + body)
        status, hdrs, data = h.read_response()
    finally:
        h.close()
    ctype = hdrs.get("content-type", "")
    return status, (json.loads(data) if data and ctype.startswith("application/json") else data), hdrs


@pytest.fixture
def h(server):
    conn = server.http()
    yield conn
    conn.close()


# ---------------------------------------------------------------- every route

def test_add_and_get_job_object(server):
    t0 = now_ms()
    st, doc, hdrs = req(server, "POST", "/v1/topics/orders/jobs",
                        {"id": "o-1", "body": "hello", "delay": "30m", "ttr": 5000, "retries": 2})
    t1 = now_ms()
    assert st == 201 and doc == {"topic": "orders", "id": "o-1"}
    assert hdrs["content-type"] == "application/json"
    st, job, _ = req(server, "GET", "/v1/topics/orders/jobs/o-1")
    assert st == 200
    assert set(job) == {"topic", "id", "state", "body", "due", "ttr", "retries", "attempts",
                        "created"}
    assert job["state"] == "delayed" and job["body"] == "hello"
    assert (job["ttr"], job["retries"], job["attempts"]) == (5000, 2, 0)
    assert_between(job["due"], t0 + 1800000, t1 + 1800000)
    assert_between(job["created"], t0, t1)


def test_add_without_id_gets_a_server_id(server):
    st, doc, _ = req(server, "POST", "/v1/topics/t/jobs", {"body": "x"})
    assert st == 201 and doc["topic"] == "t"
    ms, _, seq = doc["id"].partition("-")
    assert ms.isdigit() and seq.isdigit()


def test_at_as_unix_ms_and_rfc3339(server):
    at = (now_ms() // 1000 + 3600) * 1000
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at // 1000))
    assert req(server, "POST", "/v1/topics/t/jobs", {"id": "a", "body": "", "at": at})[0] == 201
    assert req(server, "POST", "/v1/topics/t/jobs", {"id": "b", "body": "", "at": iso})[0] == 201
    assert req(server, "GET", "/v1/topics/t/jobs/a")[1]["due"] == at
    assert req(server, "GET", "/v1/topics/t/jobs/b")[1]["due"] == at


def test_binary_body_travels_as_body_base64_both_ways(server):
    raw = bytes(range(256))
    st, _, _ = req(server, "POST", "/v1/topics/t/jobs",
                   {"id": "bin", "body_base64": base64.b64encode(raw).decode()})
    assert st == 201
    job = req(server, "GET", "/v1/topics/t/jobs/bin")[1]
    assert "body" not in job and base64.b64decode(job["body_base64"]) == raw
    # valid UTF-8 (with a NUL) comes back as body
    req(server, "POST", "/v1/topics/t/jobs", {"id": "u", "body": "h\u00e9llo\u0000 \u2603"})
    assert req(server, "GET", "/v1/topics/t/jobs/u")[1]["body"] == "h\u00e9llo\u0000 \u2603"
    # and RESP sees the same bytes
    c = server.raw()
    assert pairs(c.call("GET", "t", "bin"))["body"] == raw
    assert pairs(c.call("GET", "t", "u"))["body"] == "h\u00e9llo\u0000 \u2603".encode()
    c.close()
    got = req(server, "POST", "/v1/reserve", {"topics": ["t"], "count": 2, "timeout": 0})[1]
    by_id = {j["id"]: j for j in got["jobs"]}
    assert base64.b64decode(by_id["bin"]["body_base64"]) == raw
    assert by_id["u"]["body"] == "h\u00e9llo\u0000 \u2603"


def test_reserve_ack_nack_touch_kick_purge(server):
    for i in range(3):
        req(server, "POST", "/v1/topics/w/jobs", {"id": "j%d" % i, "body": "b", "ttr": "10s",
                                                   "retries": 0})
    t0 = now_ms()
    st, got, _ = req(server, "POST", "/v1/reserve", {"topics": ["w"], "count": 3, "timeout": 0})
    t1 = now_ms()
    assert st == 200 and [j["id"] for j in got["jobs"]] == ["j0", "j1", "j2"]
    j = got["jobs"][0]
    assert set(j) == {"topic", "id", "body", "attempts", "deadline"} and j["attempts"] == 1
    assert_between(j["deadline"], t0 + 10000, t1 + 10000)
    st, doc, _ = req(server, "POST", "/v1/topics/w/jobs/j1/touch", {"ttr": 60000})
    assert st == 200 and doc["deadline"] >= t1 + 60000 - 5
    assert req(server, "POST", "/v1/topics/w/jobs/j0/ack") [1] == {"acked": 1}
    assert req(server, "POST", "/v1/topics/w/jobs/j0/ack")[1] == {"acked": 0}  # idempotent
    assert req(server, "POST", "/v1/topics/w/jobs/j2/nack", {})[1] == {"state": "dead"}
    st, doc, _ = req(server, "GET", "/v1/topics/w/jobs?state=dead")
    assert st == 200 and doc == {"cursor": "0", "ids": ["j2"]}
    assert req(server, "POST", "/v1/topics/w/kick", {"count": 5})[1] == {"kicked": 1}
    assert req(server, "GET", "/v1/topics/w/jobs/j2")[1]["state"] == "ready"
    assert req(server, "DELETE", "/v1/topics/w/jobs/j2")[1] == {"deleted": 1}
    assert req(server, "DELETE", "/v1/topics/w/jobs/j2")[1] == {"deleted": 0}
    assert req(server, "GET", "/v1/topics")[1] == {"topics": ["w"]}
    st, stats, _ = req(server, "GET", "/v1/stats?topic=w")
    assert st == 200 and stats["jobs_reserved"] == 1 and stats["added"] == 3
    assert list(stats) == ["jobs_delayed", "jobs_ready", "jobs_reserved", "jobs_dead",
                           "added", "reserved", "acked", "nacked", "expired", "dead",
                           "deleted", "kicked", "pushed", "push_failed"]
    assert stats["acked"] == 1 and stats["kicked"] == 1 and stats["dead"] == 1
    assert req(server, "GET", "/v1/stats")[1]["added"] == 3
    assert req(server, "DELETE", "/v1/topics/w")[1] == {"removed": 1}
    assert req(server, "GET", "/v1/topics")[1] == {"topics": []}


def test_list_pages_with_string_cursor(server):
    for i in range(25):
        req(server, "POST", "/v1/topics/l/jobs", {"id": "j%02d" % i, "body": "", "delay": 60000})
    seen, cursor = [], "0"
    while True:
        st, doc, _ = req(server, "GET", "/v1/topics/l/jobs?state=delayed&count=10&cursor=" + cursor)
        assert st == 200 and isinstance(doc["cursor"], str)
        seen += doc["ids"]
        cursor = doc["cursor"]
        if cursor == "0":
            break
    assert sorted(set(seen)) == ["j%02d" % i for i in range(25)]


def test_ids_with_reserved_url_characters(server):
    jid = "a/b?c#d%e"
    st, doc, _ = req(server, "POST", "/v1/topics/t/jobs", {"id": jid, "body": "x"})
    assert st == 201 and doc["id"] == jid
    import urllib.parse
    st, job, _ = req(server, "GET", "/v1/topics/t/jobs/" + urllib.parse.quote(jid, safe=""))
    assert st == 200 and job["id"] == jid


def test_healthz_and_head(server):
    st, doc, _ = req(server, "GET", "/healthz")
    assert st == 200 and doc["status"] == "ok" and doc["store"] in ("embedded", "redis")
    st, data, hdrs = req(server, "HEAD", "/healthz")
    assert st == 200


# ---------------------------------------------------------------- statuses

@pytest.mark.parametrize("method,path,doc,status,code,word", [
    ("POST", "/v1/topics/t/jobs", {"body": "x", "ttr": 0}, 400, "ERR", "ttr"),
    ("POST", "/v1/topics/t/jobs", {"body": "x", "delay": "soon"}, 400, "ERR", "delay"),
    ("POST", "/v1/topics/t/jobs", {"body": "x", "delay": 1.5}, 400, "ERR", "delay"),
    ("POST", "/v1/topics/t/jobs", {"body": "x", "at": "tomorrow"}, 400, "ERR", "at"),
    ("POST", "/v1/topics/t/jobs", {"body": 5}, 400, "ERR", "body"),
    ("POST", "/v1/topics/t/jobs", {"body_base64": "!!!"}, 400, "ERR", "body_base64"),
    ("POST", "/v1/topics/t/jobs", {"body": "x", "body_base64": ""}, 400, "ERR", "body_base64"),
    ("POST", "/v1/topics/t/jobs", {"id": "a"}, 400, "ERR", "body"),
    ("POST", "/v1/topics/t/jobs", {"body": "x", "id": 7}, 400, "ERR", "id"),
    ("POST", "/v1/topics/t/jobs", {"body": "x", "id": "a b"}, 400, "ERR", "id"),
    ("POST", "/v1/topics/t/jobs", {"body": "x", "replace": "yes"}, 400, "ERR", "replace"),
    ("POST", "/v1/topics/t/jobs", {"body": "x", "retries": "3"}, 400, "ERR", "retries"),
    ("POST", "/v1/topics/t/jobs", {"body": "x", "backoff": {"linear": 5}}, 400, "ERR", "backoff"),
    ("POST", "/v1/topics/t/jobs", {"body": "x", "backoff": {"exp": [5]}}, 400, "ERR", "backoff"),
    ("POST", "/v1/topics/t/jobs", {"body": "x", "priority": 1}, 400, "ERR", "priority"),
    ("POST", "/v1/topics/bad%20topic/jobs", {"body": "x"}, 400, "ERR", "topic"),
    ("POST", "/v1/topics/t/jobs", [1, 2], 400, "ERR", "object"),
    ("POST", "/v1/reserve", {"timeout": 0}, 400, "ERR", "topics"),
    ("POST", "/v1/reserve", {"topics": []}, 400, "ERR", "topics"),
    ("POST", "/v1/reserve", {"topics": "t"}, 400, "ERR", "topics"),
    ("POST", "/v1/reserve", {"topics": ["t"], "count": 0}, 400, "ERR", "count"),
    ("POST", "/v1/reserve", {"topics": ["t"], "timeout": -1}, 400, "ERR", "timeout"),
    ("POST", "/v1/reserve", {"topics": ["t"], "wait": 1}, 400, "ERR", "wait"),
    ("POST", "/v1/topics/t/jobs/a/ack", {"force": True}, 400, "ERR", "force"),
    ("POST", "/v1/topics/t/kick", {"count": "all"}, 400, "ERR", "count"),
    ("GET", "/v1/topics/t/jobs?state=done", None, 400, "ERR", "state"),
    ("GET", "/v1/topics/t/jobs", None, 400, "ERR", "state"),
    ("GET", "/v1/topics/t/jobs?state=ready&count=x", None, 400, "ERR", "count"),
    ("GET", "/v1/topics/t/jobs?state=ready&sort=1", None, 400, "ERR", "sort"),
    ("GET", "/v1/topics?x=1", None, 400, "ERR", "x"),
    ("GET", "/v1/topics/t/jobs/nope", None, 404, "NOTFOUND", "job"),
    ("GET", "/v1/nothing", None, 404, "NOTFOUND", "route"),
    ("POST", "/v1/topics/t/jobs/nope/nack", None, 409, "NOTRESERVED", "reserved"),
    ("POST", "/v1/topics/t/jobs/nope/touch", None, 409, "NOTRESERVED", "reserved"),
    ("DELETE", "/v1/reserve", None, 405, "ERR", "POST"),
])
def test_errors_have_status_code_and_name_the_field(server, method, path, doc, status, code, word):
    st, body, _ = req(server, method, path, doc)
    assert st == status, (st, body)
    assert body["error"] == code, body
    assert word.lower() in body["message"].lower(), body
    assert req(server, "GET", "/v1/topics")[1] == {"topics": []}  # nothing was created


def test_malformed_json_names_the_place(server):
    st, body, _ = req(server, "POST", "/v1/topics/t/jobs", raw_body=b'{"body": "x",')
    assert st == 400 and body["error"] == "ERR" and "malformed JSON" in body["message"]
    st, body, _ = req(server, "POST", "/v1/topics/t/jobs", raw_body=b'{"body": "\xff"}')
    assert st == 400 and "malformed JSON" in body["message"]
    st, body, _ = req(server, "POST", "/v1/topics/t/jobs", raw_body=b'{"body": "x", "body": "y"}')
    assert st == 400 and "body" in body["message"]


def test_exists_busy_conflicts(server):
    assert req(server, "POST", "/v1/topics/t/jobs", {"id": "a", "body": "x"})[0] == 201
    st, body, _ = req(server, "POST", "/v1/topics/t/jobs", {"id": "a", "body": "y"})
    assert (st, body["error"]) == (409, "EXISTS")
    assert req(server, "POST", "/v1/topics/t/jobs", {"id": "a", "body": "y", "replace": True})[0] == 201
    assert req(server, "GET", "/v1/topics/t/jobs/a")[1]["body"] == "y"
    req(server, "POST", "/v1/reserve", {"topics": ["t"], "timeout": 0})
    st, body, _ = req(server, "POST", "/v1/topics/t/jobs", {"id": "a", "body": "z", "replace": True})
    assert (st, body["error"]) == (409, "BUSY")


def test_toobig_is_413(make_server):
    srv = make_server("--max-body", "100")
    st, body, _ = req(srv, "POST", "/v1/topics/t/jobs", {"id": "a", "body": "x" * 101})
    assert (st, body["error"]) == (413, "TOOBIG") and "max-body" in body["message"]
    assert req(srv, "POST", "/v1/topics/t/jobs", {"id": "a", "body": "x" * 100})[0] == 201
    # a request far past any body limit is refused by the HTTP layer itself
    st, _, _ = req(srv, "POST", "/v1/topics/t/jobs", raw_body=b"{" + b" " * 300000 + b"}")
    assert st == 413
    assert srv.raw().call("PING") == b"PONG"


def test_full_is_507(make_server):
    srv = make_server("--max-jobs", "1")
    assert req(srv, "POST", "/v1/topics/t/jobs", {"body": "x"})[0] == 201
    st, body, _ = req(srv, "POST", "/v1/topics/t/jobs", {"body": "x"})
    assert (st, body["error"]) == (507, "FULL")


# ---------------------------------------------------------------- auth

def test_bearer_auth(make_server):
    srv = make_server("--requirepass", "s3cret")
    st, body, hdrs = req(srv, "GET", "/v1/topics")
    assert (st, body["error"]) == (401, "NOAUTH") and hdrs.get("www-authenticate") == "Bearer"
    assert req(srv, "GET", "/v1/topics", token="wrong")[0] == 401
    assert req(srv, "GET", "/metrics")[0] == 401
    assert req(srv, "POST", "/v1/topics/t/jobs", {"body": "x"})[0] == 401
    assert req(srv, "GET", "/healthz")[0] == 200  # open, for load balancers
    assert req(srv, "POST", "/v1/topics/t/jobs", {"id": "a", "body": "x"}, token="s3cret")[0] == 201
    assert req(srv, "GET", "/v1/topics", token="s3cret")[1] == {"topics": ["t"]}


# ---------------------------------------------------------------- long-poll RESERVE

def test_reserve_without_timeout_long_polls(server):
    w = HttpConn(server.http_port)  # by hand: the adapter always sends a timeout
    body = b'{"topics": ["lp"]}'
    w.sock.sendall(b"POST /v1/reserve HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s"
                   % (len(body), body))
    c = server.raw()
    wait_blocked(c, 1)
    assert not w.pending(0.2)  # absent timeout = 30 s, not "do not wait"
    c.call("ADD", "lp", "j", "x")
    st, _, data = w.read_response(5)
    assert st == 200 and json.loads(data)["jobs"][0]["id"] == "j"
    w.close()


def test_long_poll_timeout_returns_empty_in_time(server):
    t0 = time.monotonic()
    st, doc, _ = req(server, "POST", "/v1/reserve", {"topics": ["t"], "timeout": 200})
    dt = time.monotonic() - t0
    assert st == 200 and doc == {"jobs": []}
    assert 0.19 <= dt < 2.0


@pytest.mark.parametrize("how", ["close", "reset"])
def test_client_gone_from_long_poll_releases_its_wait(server, how):
    c = server.raw()
    w = HttpConn(server.http_port)
    body = b'{"topics": ["lp"], "timeout": 20000}'
    w.sock.sendall(b"POST /v1/reserve HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s"
                   % (len(body), body))
    wait_blocked(c, 1)
    w.close() if how == "close" else w.reset()
    wait_blocked(c, 0)
    c.call("ADD", "lp", "j", "x")
    time.sleep(0.05)
    assert pairs(c.call("GET", "lp", "j"))["state"] == b"ready"
    assert c.call("RESERVE", "TIMEOUT", 0, "FROM", "lp")[0][1] == b"j"


def test_shutdown_answers_long_polls(make_server):
    srv = make_server()
    w = HttpConn(srv.http_port)
    body = b'{"topics": ["lp"], "timeout": 60000}'
    w.sock.sendall(b"POST /v1/reserve HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s"
                   % (len(body), body))
    wait_blocked(srv.raw(), 1)
    t0 = time.monotonic()
    assert srv.stop() == 0
    assert time.monotonic() - t0 < 3


# ---------------------------------------------------------------- two doors, one queue

def test_added_over_http_reserved_and_acked_over_resp(server):
    h = server.http()
    c = server.raw()
    assert h.call("ADD", "x", "a", b"\x00\xffbin") == b"a"
    got = c.call("RESERVE", "TIMEOUT", 0, "FROM", "x")
    assert got[0][1:3] == [b"a", b"\x00\xffbin"]
    assert h.call("GET", "x", "a")[5] == b"reserved"
    assert c.call("ACK", "x", "a") == 1
    assert h.call("GET", "x", "a") is None


def test_added_over_resp_reserved_and_acked_over_http(server):
    h = server.http()
    c = server.raw()
    c.call("ADD", "x", "a", "hello", "TTR", 5000)
    got = h.call("RESERVE", "TIMEOUT", 0, "FROM", "x")
    assert got[0][:4] == [b"x", b"a", b"hello", 1]
    assert c.call("TOUCH", "x", "a") >= got[0][4]
    assert h.call("ACK", "x", "a") == 1
    assert c.call("GET", "x", "a") is None


def test_waiting_http_reserve_woken_by_resp_add(server):
    h = server.http()
    c = server.raw()
    h.send("RESERVE", "TIMEOUT", 5000, "FROM", "x")
    wait_blocked(c, 1)
    c.call("ADD", "x", "a", "b")
    assert h.read()[0][1] == b"a"


# ---------------------------------------------------------------- clients

def test_http_clients_count_toward_maxclients(make_server):
    srv = make_server("--maxclients", "2")
    c = srv.raw()
    h1 = srv.http()
    assert h1.call("TOPICS") == []
    info = c.call("INFO")
    assert b"connected_clients:2" in info
    h2 = HttpConn(srv.http_port)
    h2.sock.sendall(b"GET /v1/topics HTTP/1.1\r\nHost: t\r\n\r\n")
    st, _, data = h2.read_response()
    assert st == 503 and b"max number of clients" in data
    assert h2.wait_closed()
    h1.close()
    assert wait_until(lambda: b"connected_clients:1" in c.call("INFO"))
    h3 = srv.http()
    assert h3.call("TOPICS") == []


def test_server_at_a_glance_for_the_dashboard(make_server):
    """GET /v1/server and /v1/overview tell what the dashboard shows; the
    GET /v1/info that repeated them is gone."""
    srv = make_server("--dashboard", "readonly")
    c = srv.raw()
    for i in range(3):
        c.call("ADD", "a", "j%d" % i, "x")
    c.call("ADD", "b", "d", "x", "DELAY", 60000)
    c.call("RESERVE", "TIMEOUT", 0, "COUNT", 2, "FROM", "a")
    st, info, _ = req(srv, "GET", "/v1/server")
    assert st == 200
    assert info["store"]["name"] in ("embedded", "redis") and info["store"]["up"] is True
    assert info["dashboard"] == "readonly"
    assert info["clients"] >= 1 and info["blocked"] == 0
    assert info["fire_lag"]["count"] == 2
    assert info["jobs"] == {"delayed": 1, "ready": 1, "reserved": 2, "dead": 0, "total": 4}
    assert info["totals"]["added"] == 4 and info["totals"]["reserved"] == 2
    assert set(info["totals"]) == {"added", "reserved", "acked", "nacked", "expired", "dead",
                                   "deleted", "kicked", "pushed", "push_failed"}
    if srv.store_url is None:
        assert int(info["store"]["info"]["log_bytes"]) > 0
    st, ov, _ = req(srv, "GET", "/v1/overview")
    assert st == 200
    by = {t["topic"]: t for t in ov["topics"]}
    assert set(by) == {"a", "b"}
    assert by["a"]["jobs"] == {"delayed": 0, "ready": 1, "reserved": 2, "dead": 0, "total": 3}
    assert by["a"]["counters"]["added"] == 3 and by["a"]["counters"]["reserved"] == 2
    assert by["b"]["jobs"]["delayed"] == 1
    st, doc, _ = req(srv, "GET", "/v1/info")
    assert st == 404 and doc["error"] == "NOTFOUND"

def test_replies_carry_one_date_header(server):
    """The Date header (formatted once a second by the server, not by evhttp
    per reply) is there once, in RFC 7231 form, and current."""
    s = socket.create_connection(("127.0.0.1", server.http_port))
    try:
        for path in (b"/v1/topics", b"/nope"):
            s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: t\r\n\r\n")
            data = b""
            while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
                chunk = s.recv(4096)
                assert chunk
                data += chunk
            head = data.split(b"\r\n\r\n")[0].decode().split("\r\n")
            dates = [l.split(":", 1)[1].strip() for l in head if l.lower().startswith("date:")]
            assert len(dates) == 1, head
            when = email.utils.parsedate_to_datetime(dates[0])
            assert dates[0].endswith(" GMT") and abs(when.timestamp() - time.time()) < 5
    finally:
        s.close()
