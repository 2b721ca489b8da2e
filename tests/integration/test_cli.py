"""bin/delayq, the command-line client (DESIGN §4), run as a process against a real delayqd.

DELAYQ gives the client binary (default build/asan/delayq); the server comes from conftest.py.
"""

import calendar
import json
import os
import re
import subprocess
import time

import pytest

from conftest import GET_KEYS, REPO, STATS_KEYS, free_port, now_ms, pairs

DELAYQ = os.environ.get("DELAYQ") or os.path.join(REPO, "build", "asan", "delayq")
SANITIZER = (b"AddressSanitizer", b"LeakSanitizer", b"runtime error:")
COMMANDS = ["add", "get", "del", "reserve", "ack", "nack", "touch", "kick", "list", "purge",
            "stats", "topics", "ping", "info", "bench", "help"]


@pytest.fixture(autouse=True)
def _client_built():
    if not os.path.exists(DELAYQ):
        pytest.fail("client binary not built: %s (set DELAYQ)" % DELAYQ)


def cli(*args, port=None, input=b"", env=None, timeout=30):
    """Runs delayq [-p port] args...; returns CompletedProcess (bytes stdout/stderr)."""
    argv = [DELAYQ] + (["-p", str(port)] if port else []) + [str(a) for a in args]
    e = dict(os.environ)
    e.pop("DELAYQ_PASSWORD", None)
    e.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    e.update(env or {})
    p = subprocess.run(argv, input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=e, timeout=timeout)
    for m in SANITIZER:
        assert m not in p.stderr, p.stderr.decode("utf-8", "replace")
    return p


def ok(*args, **kw):
    p = cli(*args, **kw)
    assert p.returncode == 0, (args, p.returncode, p.stderr)
    return p.stdout.decode()


def js(*args, port, **kw):
    p = cli("--json", *args, port=port, **kw)
    assert p.returncode == 0, (args, p.returncode, p.stderr)
    return json.loads(p.stdout)


def get(c, topic, jid):
    g = c.call("GET", topic, jid)
    return None if g is None else pairs(g)


def lines(s):
    return [x for x in s.splitlines() if x.strip()]


# ---------------------------------------------------------------- no server needed

def test_help_lists_every_command():
    for argv in (["--help"], ["help"]):
        out = ok(*argv)
        assert out.startswith("usage: delayq")
        for name in COMMANDS:
            assert re.search(r"^  %s\s+\S" % name, out, re.M), (name, out)
        for opt in ("-h HOST", "-p PORT", "-a PASSWORD", "--json"):
            assert opt in out


@pytest.mark.parametrize("name", [n for n in COMMANDS if n != "bench"])
def test_subcommand_help(name):
    out = ok(name, "--help")
    assert out.startswith("usage: delayq %s" % name)
    assert ok("help", name) == out


def test_add_help_documents_options():
    out = ok("add", "--help")
    for opt in ("--delay D", "--at TIME", "--ttr D", "--retries N", "--backoff", "--replace"):
        assert opt in out


@pytest.mark.parametrize("argv,words", [
    ([], ["missing COMMAND"]),
    (["frobnicate"], ["unknown command 'frobnicate'"]),
    (["add", "orders"], ["missing ID", "usage: delayq add"]),
    (["get", "a", "b", "c"], ["too many arguments"]),
    (["reserve"], ["missing TOPIC"]),
    (["add", "t", "i", "b", "--delay", "5x"], ["invalid --delay '5x'", "unknown unit"]),
    (["add", "t", "i", "b", "--delay", "1.5ms"], ["invalid --delay", "millisecond"]),
    (["add", "t", "i", "b", "--delay"], ["--delay needs a value"]),
    (["add", "t", "i", "b", "--at", "2026-02-30T00:00:00Z"], ["invalid --at", "day out of range"]),
    (["add", "t", "i", "b", "--at", "tomorrow"], ["invalid --at 'tomorrow'", "RFC 3339"]),
    (["add", "t", "i", "b", "--delay", "1s", "--at", "0"], ["--delay or --at"]),
    (["add", "t", "i", "b", "--retries", "-1"], ["invalid --retries '-1'"]),
    (["add", "t", "i", "b", "--retries", "x"], ["invalid --retries 'x'"]),
    (["add", "t", "i", "b", "--backoff", "linear"], ["invalid --backoff", "exp:BASE:MAX"]),
    (["add", "t", "i", "b", "--backoff", "fixed"], ["fixed:30s"]),
    (["add", "t", "i", "b", "--replace=yes"], ["takes no value"]),
    (["reserve", "q", "--delay", "1s"], ["unknown option '--delay'"]),
    (["list", "q", "ready", "--all", "--cursor", "5"], ["--all or --cursor"]),
    (["-p", "0", "ping"], ["invalid port '0'"]),
    (["-p", "70000", "ping"], ["invalid port"]),
    (["-h"], ["-h needs a HOST", "--help"]),
    (["-x", "ping"], ["unknown option '-x'"]),
])
def test_usage_errors_exit_2_with_hint(argv, words):
    p = cli(*argv)
    assert p.returncode == 2, (argv, p.returncode, p.stdout, p.stderr)
    err = p.stderr.decode()
    assert err.startswith("delayq")
    for w in words:
        assert w in err, (w, err)
    assert "Try 'delayq" in err
    assert p.stdout == b""


def test_connection_refused_names_host_and_port():
    port = free_port()
    p = cli("ping", port=port)
    assert p.returncode == 1
    err = p.stderr.decode()
    assert "127.0.0.1:%d" % port in err and "refused" in err.lower(), err


# ---------------------------------------------------------------- ADD / GET

def test_add_with_human_delay(server, c):
    t0 = now_ms()
    assert ok("add", "orders", "o-1", "--delay", "30m", "cancel me", port=server.port) == "o-1\n"
    t1 = now_ms()
    d = get(c, "orders", "o-1")
    assert d["body"] == b"cancel me" and d["state"] == b"delayed"
    assert t0 + 1800000 - 5 <= d["due"] <= t1 + 1800000 + 5


def test_add_compound_and_fractional_durations(server, c):
    t0 = now_ms()
    ok("add", "t", "a", "x", "--delay", "1h30m", "--ttr", "1.5s", port=server.port)
    ok("add", "t", "b", "x", "--delay=2d", "--ttr=90000", port=server.port)
    t1 = now_ms()
    a, b = get(c, "t", "a"), get(c, "t", "b")
    assert t0 + 5400000 - 5 <= a["due"] <= t1 + 5400000 + 5 and a["ttr"] == 1500
    assert t0 + 172800000 - 5 <= b["due"] <= t1 + 172800000 + 5 and b["ttr"] == 90000


def test_add_at_rfc3339_with_offset_and_fraction(server, c):
    year = time.gmtime().tm_year + 2  # in the future, within the 10-year limit
    base = calendar.timegm((year, 1, 1, 0, 0, 0)) * 1000
    ok("add", "t", "a", "x", "--at", "%d-01-01T08:00:00.250+08:00" % year, port=server.port)
    ok("add", "t", "b", "x", "--at", "%d-01-01T00:00:00Z" % year, port=server.port)
    ok("add", "t", "c", "x", "--at", "%d-12-31T19:00:00-05:00" % (year - 1), port=server.port)
    ok("add", "t", "d", "x", "--at", str(base), port=server.port)  # unix ms
    assert get(c, "t", "a")["due"] == base + 250
    assert get(c, "t", "b")["due"] == base
    assert get(c, "t", "c")["due"] == base
    assert get(c, "t", "d")["due"] == base


def test_add_options_are_sent(server, c):
    ok("add", "t", "a", "x", "--ttr", "1m", "--retries", "5", "--backoff", "fixed:10s",
       port=server.port)
    ok("add", "t", "b", "x", "--backoff", "exp:500ms:1h", port=server.port)
    d = get(c, "t", "a")
    assert d["ttr"] == 60000 and d["retries"] == 5
    # a fixed 10 s backoff shows after a NACK
    c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")
    t0 = now_ms()
    assert c.call("NACK", "t", "a") == b"delayed"
    t1 = now_ms()
    assert t0 + 10000 - 5 <= get(c, "t", "a")["due"] <= t1 + 10000 + 5


def test_add_body_from_stdin_is_binary_safe(server, c):
    body = bytes(range(256)) * 3 + b"\r\n\x00end"
    assert ok("add", "t", "bin", port=server.port, input=body) == "bin\n"
    assert ok("add", "t", "bin2", "-", port=server.port, input=body) == "bin2\n"
    assert get(c, "t", "bin")["body"] == body
    assert get(c, "t", "bin2")["body"] == body
    ok("add", "t", "empty", port=server.port, input=b"")
    assert get(c, "t", "empty")["body"] == b""


def test_add_star_generates_time_ordered_id(server, c):
    out = ok("add", "t", "*", "x", port=server.port).strip()
    assert re.fullmatch(r"\d{13}-\d+", out), out
    assert get(c, "t", out) is not None
    j = js("add", "t", "*", "y", port=server.port)
    assert j["topic"] == "t" and re.fullmatch(r"\d{13}-\d+", j["id"])


def test_add_existing_id_is_a_server_error(server, c):
    ok("add", "t", "a", "x", port=server.port)
    p = cli("add", "t", "a", "y", port=server.port)
    assert p.returncode == 1 and p.stdout == b""
    assert p.stderr.decode().startswith("delayq: EXISTS"), p.stderr
    assert ok("add", "t", "a", "y", "--replace", port=server.port) == "a\n"
    assert get(c, "t", "a")["body"] == b"y"


def test_server_validation_error_is_passed_on(server):
    p = cli("add", "t", "a", "x", "--retries", "5000", port=server.port)
    assert p.returncode == 1
    err = p.stderr.decode()
    assert err.startswith("delayq: ERR") and "RETRIES" in err.upper(), err


def test_get_readable_table(server, c):
    ok("add", "orders", "o-1", "hello\tworld", "--delay", "30m", "--ttr", "45s",
       port=server.port)
    out = ok("get", "orders", "o-1", port=server.port)
    rows = dict(re.split(r"\s{2,}", l, maxsplit=1) for l in lines(out))
    assert list(rows) == GET_KEYS
    assert rows["topic"] == "orders" and rows["id"] == "o-1" and rows["state"] == "delayed"
    assert rows["body"] == "hello\\tworld"  # control characters escaped
    assert rows["ttr"] == "45s" and rows["retries"] == "3" and rows["attempts"] == "0"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z \(in (29m5\d|30m)s?\)",
                        rows["due"]), rows["due"]
    assert re.fullmatch(r"\S+Z \((\d+ms|[\d.]+s) ago\)|\S+Z \(now\)", rows["created"]), \
        rows["created"]
    # the value column is aligned
    starts = {len(l) - len(l[len(k):].lstrip()) for l, k in zip(lines(out), rows)}
    assert len(starts) == 1, out


def test_get_shows_deadline_while_reserved(server, c):
    ok("add", "t", "a", "x", "--ttr", "2m", port=server.port)
    c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")
    out = ok("get", "t", "a", port=server.port)
    assert re.search(r"^deadline\s+\S+Z \(in (1m5\d|2m)s?\)$", out, re.M), out
    j = js("get", "t", "a", port=server.port)
    assert list(j) == GET_KEYS + ["deadline"]
    assert j["state"] == "reserved" and isinstance(j["deadline"], int)


def test_get_json(server, c):
    ok("add", "t", "a", "héllo", "--delay", "1m", port=server.port)
    j = js("get", "t", "a", port=server.port)
    assert list(j) == GET_KEYS
    d = get(c, "t", "a")
    assert j["body"] == "héllo" and j["due"] == d["due"] and j["ttr"] == 30000
    assert j["created"] == d["created"] and j["state"] == "delayed"


def test_get_json_binary_body_is_base64(server, c):
    c.call("ADD", "t", "a", b"\xff\x00\xfe")
    j = js("get", "t", "a", port=server.port)
    assert "body" not in j and j["body_base64"] == "/wD+"
    out = ok("get", "t", "a", port=server.port)
    assert re.search(r"^body\s+\\xff\\x00\\xfe$", out, re.M), out


def test_get_missing_exits_1(server):
    p = cli("get", "t", "nope", port=server.port)
    assert p.returncode == 1 and p.stdout == b""
    assert b"no job 'nope' in topic 't'" in p.stderr
    p = cli("--json", "get", "t", "nope", port=server.port)
    assert p.returncode == 1 and json.loads(p.stdout) is None


# ---------------------------------------------------------------- RESERVE / ACK / NACK / TOUCH

def test_reserve_table_and_ack(server, c):
    c.call("ADD", "q", "j1", "first")
    c.call("ADD", "q", "j2", "second job")
    out = ok("reserve", "q", "--timeout", "0", "--count", "5", port=server.port)
    ls = lines(out)
    assert re.split(r"\s{2,}", ls[0]) == ["TOPIC", "ID", "ATTEMPTS", "DEADLINE", "BODY"]
    rows = [re.split(r"\s{2,}", l) for l in ls[1:]]
    assert [(r[0], r[1], r[2], r[4]) for r in rows] == [("q", "j1", "1", "first"),
                                                       ("q", "j2", "1", "second job")]
    assert all(re.fullmatch(r"\S+Z \(in (2\d|30)(\.\d+)?s\)", r[3]) for r in rows), rows
    assert get(c, "q", "j1")["state"] == b"reserved"
    assert ok("ack", "q", "j1", "j2", "nope", port=server.port) == "2 acked\n"
    assert get(c, "q", "j1") is None


def test_reserve_json_several_topics(server, c):
    c.call("ADD", "b", "x", b"\x80binary")
    c.call("ADD", "a", "y", "text")
    got = js("reserve", "a", "b", "--timeout", "1s", "--count", "2", port=server.port)
    assert sorted(j["id"] for j in got) == ["x", "y"]
    for j in got:
        assert set(j) >= {"topic", "id", "attempts", "deadline"}
        assert j["attempts"] == 1
    by_id = {j["id"]: j for j in got}
    assert by_id["y"]["body"] == "text" and by_id["x"]["body_base64"] == "gGJpbmFyeQ=="
    assert js("ack", "a", "y", port=server.port) == {"acked": 1}


def test_reserve_timeout_exits_1(server):
    t0 = time.monotonic()
    p = cli("reserve", "empty", "--timeout", "200ms", port=server.port)
    took = time.monotonic() - t0
    assert p.returncode == 1 and p.stdout == b""
    assert b"no job ready within 200ms" in p.stderr
    assert took >= 0.19
    p = cli("--json", "reserve", "empty", "--timeout", "0", port=server.port)
    assert p.returncode == 1 and json.loads(p.stdout) == []


def test_reserve_without_timeout_waits_past_the_connect_timeout(server, c):
    """No read timeout on the client: RESERVE without --timeout waits as long as it takes."""
    p = subprocess.Popen([DELAYQ, "-p", str(server.port), "--json", "reserve", "later"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(5.5)  # longer than the client's 5 s connect timeout
        assert p.poll() is None, p.stderr.read()
        c.call("ADD", "later", "j", "at last")
        out, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    assert [j["id"] for j in json.loads(out)] == ["j"]


def test_touch_and_nack(server, c):
    c.call("ADD", "q", "j", "x", "TTR", 10000)
    c.call("RESERVE", "TIMEOUT", 0, "FROM", "q")
    t0 = now_ms()
    out = ok("touch", "q", "j", "--ttr", "2m", port=server.port)
    t1 = now_ms()
    assert re.fullmatch(r"deadline \S+Z \(in (1m5\d|2m)s?\)\n", out), out
    assert t0 + 120000 - 5 <= get(c, "q", "j")["deadline"] <= t1 + 120000 + 5
    j = js("touch", "q", "j", port=server.port)
    assert j["deadline"] == get(c, "q", "j")["deadline"]
    t0 = now_ms()
    assert ok("nack", "q", "j", "--delay", "1h", port=server.port) == "delayed\n"
    t1 = now_ms()
    d = get(c, "q", "j")
    assert d["state"] == b"delayed" and t0 + 3600000 - 5 <= d["due"] <= t1 + 3600000 + 5


def test_nack_not_reserved_is_an_error(server, c):
    c.call("ADD", "q", "j", "x")
    p = cli("nack", "q", "j", port=server.port)
    assert p.returncode == 1 and p.stderr.startswith(b"delayq: NOTRESERVED")
    p = cli("touch", "q", "j", port=server.port)
    assert p.returncode == 1 and p.stderr.startswith(b"delayq: NOTRESERVED")


def test_nack_to_dead_and_kick(server, c):
    c.call("ADD", "q", "j", "x", "RETRIES", 0)
    c.call("RESERVE", "TIMEOUT", 0, "FROM", "q")
    assert js("nack", "q", "j", port=server.port) == {"state": "dead"}
    assert ok("list", "q", "dead", port=server.port) == "j\n"
    assert ok("kick", "q", "--count", "10", port=server.port) == "1 kicked\n"
    assert get(c, "q", "j")["state"] == b"ready"
    assert js("kick", "q", port=server.port) == {"kicked": 0}


# ---------------------------------------------------------------- DEL / LIST / PURGE

def test_del(server, c):
    for i in range(3):
        c.call("ADD", "t", "j%d" % i, "x")
    assert ok("del", "t", "j0", "j1", "nope", port=server.port) == "2 deleted\n"
    assert js("del", "t", "j2", port=server.port) == {"deleted": 1}
    assert ok("del", "t", "j2", port=server.port) == "0 deleted\n"


def test_list_pages_and_all(server, c):
    ids = {"id-%03d" % i for i in range(57)}
    for i in sorted(ids):
        c.call("ADD", "t", i, "x", "DELAY", 600000)
    c.call("ADD", "t", "ready-one", "x")
    p = cli("list", "t", "delayed", "--count", "10", port=server.port)
    assert p.returncode == 0
    page = set(lines(p.stdout.decode()))
    assert page and page <= ids
    m = re.search(rb"more ids follow: use --cursor (\S+), or --all", p.stderr)
    assert m, p.stderr
    # continuing from the cursor by hand reaches the end
    seen, cursor = set(page), m.group(1).decode()
    for _ in range(100):
        p = cli("list", "t", "delayed", "--count", "10", "--cursor", cursor, port=server.port)
        assert p.returncode == 0
        seen |= set(lines(p.stdout.decode()))
        m = re.search(rb"--cursor (\S+),", p.stderr)
        if not m:
            break
        cursor = m.group(1).decode()
    assert seen == ids
    # --all follows the cursor itself
    out = ok("list", "t", "delayed", "--all", "--count", "7", port=server.port)
    assert sorted(lines(out)) == sorted(ids) and len(lines(out)) == len(ids)
    j = js("list", "t", "delayed", "--all", port=server.port)
    assert j["cursor"] == "0" and sorted(j["ids"]) == sorted(ids)
    assert ok("list", "t", "ready", port=server.port) == "ready-one\n"
    p = cli("list", "t", "bogus", port=server.port)
    assert p.returncode == 1 and p.stderr.startswith(b"delayq: ERR")


def test_purge_topics_and_stats(server, c):
    c.call("ADD", "a", "1", "x")
    c.call("ADD", "a", "2", "x", "DELAY", 60000)
    c.call("ADD", "b", "1", "x")
    assert sorted(lines(ok("topics", port=server.port))) == ["a", "b"]
    assert sorted(js("topics", port=server.port)) == ["a", "b"]
    st = js("stats", "a", port=server.port)
    assert list(st) == STATS_KEYS
    assert st["jobs_ready"] == 1 and st["jobs_delayed"] == 1 and st["added"] == 2
    out = ok("stats", port=server.port)
    rows = [re.split(r"\s+", l) for l in lines(out)]
    assert [r[0] for r in rows] == STATS_KEYS
    assert dict((r[0], int(r[1])) for r in rows)["added"] == 3
    assert ok("purge", "a", port=server.port) == "2 purged\n"
    assert js("purge", "a", port=server.port) == {"purged": 0}
    assert lines(ok("topics", port=server.port)) == ["b"]


# ---------------------------------------------------------------- PING / INFO / global options

def test_ping_and_info(server):
    out = ok("ping", port=server.port)
    assert re.fullmatch(r"PONG \(\d+\.\d{3} ms\)\n", out), out
    j = js("ping", port=server.port)
    assert j["reply"] == "PONG" and j["latency_ms"] >= 0
    assert ok("ping", "hello there", port=server.port).startswith("hello there (")
    out = ok("info", port=server.port)
    assert "\r" not in out and out.strip()
    assert isinstance(js("info", port=server.port), dict)


def test_global_options_after_the_command(server):
    p = cli("stats", "--json", "-p", str(server.port), "-h", "127.0.0.1")
    assert p.returncode == 0, p.stderr
    assert list(json.loads(p.stdout)) == STATS_KEYS
    p = cli("--host=127.0.0.1", "--port=%d" % server.port, "ping")
    assert p.returncode == 0, p.stderr


def test_double_dash_ends_options(server, c):
    assert ok("add", "t", "a", "--", "--not-an-option", port=server.port) == "a\n"
    assert get(c, "t", "a")["body"] == b"--not-an-option"


def test_password(make_server):
    s = make_server("--requirepass", "s3cret")
    p = cli("stats", port=s.port)
    assert p.returncode == 1
    err = p.stderr.decode()
    assert err.startswith("delayq: NOAUTH") and "-a PASSWORD" in err, err
    assert ok("-a", "s3cret", "ping", port=s.port).startswith("PONG")
    assert ok("ping", port=s.port, env={"DELAYQ_PASSWORD": "s3cret"}).startswith("PONG")
    p = cli("-a", "wrong", "ping", port=s.port)
    assert p.returncode == 1 and p.stderr.startswith(b"delayq: AUTH failed"), p.stderr


# ---------------------------------------------------------------- delayq bench

def test_bench_add_reports_what_the_server_holds(server, c):
    r = js("bench", "--mode", "add", "-n", 3000, "-P", 32, "-d", 50, "-t", "bb",
           "--delay", "1h", port=server.port)
    assert r["ops"] == 3000 and r["ops_per_sec"] > 0
    assert r["latency_ms"]["ADD"]["count"] == 3000
    assert set(r["latency_ms"]["ADD"]) >= {"p50", "p99", "max"}
    st = pairs(c.call("STATS", "bb"))
    assert st["jobs_delayed"] == 3000 and st["added"] == 3000
    # a LIST page may be empty while more ids follow (SCAN semantics): follow the cursor
    cursor, ids = b"0", []
    while not ids:
        cursor, ids = c.call("LIST", "bb", "DELAYED", "COUNT", 1, "CURSOR", cursor)
        assert ids or cursor not in (b"0", 0)
    g = get(c, "bb", ids[0])
    assert len(g["body"]) == 50


def test_bench_reserve_consumes_every_job(server, c):
    r = js("bench", "--mode", "reserve", "-n", 2000, "-c", 2, "-t", "br", port=server.port)
    assert r["preload"]["ops"] == 2000 and r["ops"] == 2000
    st = pairs(c.call("STATS", "br"))
    assert (st["reserved"], st["acked"], st["jobs_ready"], st["jobs_reserved"]) == (2000, 2000, 0, 0)


def test_bench_lateness_delivers_each_job_once_and_not_early(server, c):
    r = js("bench", "--mode", "lateness", "--rate", 2000, "-n", 1000, "--delay", "300ms",
           "-c", 2, "-t", "bl", port=server.port)
    assert (r["delivered"], r["missing"], r["early"], r["duplicates"]) == (1000, 0, 0, 0)
    for key in ("lateness_ms", "lateness_handled_ms"):
        l = r[key]
        assert 0 <= l["min"] <= l["p50"] <= l["p99"] <= l["max"], (key, l)
    # arrival at the socket comes before the client handles the reply
    assert r["lateness_ms"]["max"] <= r["lateness_handled_ms"]["max"]
    assert pairs(c.call("STATS", "bl"))["acked"] == 1000
