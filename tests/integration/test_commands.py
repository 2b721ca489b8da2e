"""Every command of DESIGN §3: reply shapes, errors, case-insensitivity, option order, arity."""

import pytest

from conftest import (GET_KEYS, NIL_ARRAY, STATS_KEYS, RespError, assert_between,
                      assert_err, keys_of, now_ms, pairs)

# RESP syntax (a missing value, an unknown option word, a number RESP cannot parse but
# JSON spells otherwise) is not something the HTTP front door has: those cases are RESP's.
R = pytest.mark.resp_only


def resp(*args):
    return pytest.param(*args, marks=R)


def get(c, topic, jid):
    g = c.call("GET", topic, jid)
    return None if g is None else pairs(g)


# ---------------------------------------------------------------- ADD / GET

def test_add_returns_id_as_bulk(c):
    rep = c.call("ADD", "orders", "o-1", "hello", "DELAY", 30000)
    assert rep == b"o-1"
    assert type(rep) is bytes  # a bulk string, not +o-1


def test_get_shape_and_defaults(c):
    t0 = now_ms()
    c.call("ADD", "orders", "o-1", "hello")
    t1 = now_ms()
    g = c.call("GET", "orders", "o-1")
    assert isinstance(g, list) and len(g) == 18
    assert keys_of(g) == GET_KEYS
    assert all(type(g[i]) is bytes for i in range(0, 18, 2))
    d = pairs(g)
    assert d["topic"] == b"orders" and d["id"] == b"o-1"
    assert d["state"] == b"ready" and d["body"] == b"hello"
    for k in ("due", "ttr", "retries", "attempts", "created"):
        assert type(d[k]) is int, (k, d[k])
    assert d["ttr"] == 30000 and d["retries"] == 3 and d["attempts"] == 0
    assert_between(d["created"], t0, t1)
    assert_between(d["due"], t0, t1)


def test_get_missing_is_nil_bulk(c):
    assert c.call("GET", "orders", "nope") is None
    c.call("ADD", "orders", "o-1", "x")
    assert c.call("GET", "orders", "nope") is None
    assert c.call("GET", "other", "o-1") is None


def test_get_reserved_has_deadline(c):
    c.call("ADD", "t", "a", "x", "TTR", 5000)
    t0 = now_ms()
    c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")
    t1 = now_ms()
    g = c.call("GET", "t", "a")
    assert keys_of(g) == GET_KEYS + ["deadline"]
    d = pairs(g)
    assert d["state"] == b"reserved" and d["attempts"] == 1
    assert_between(d["deadline"], t0 + 5000, t1 + 5000)


def test_add_delay_sets_due_and_state(c):
    t0 = now_ms()
    c.call("ADD", "t", "a", "x", "DELAY", 60000)
    t1 = now_ms()
    d = get(c, "t", "a")
    assert d["state"] == b"delayed"
    assert_between(d["due"], t0 + 60000, t1 + 60000)


def test_add_at_sets_exact_due(c):
    at = now_ms() + 120000
    c.call("ADD", "t", "a", "x", "AT", at)
    d = get(c, "t", "a")
    assert d["state"] == b"delayed" and d["due"] == at


def test_add_at_in_the_past_is_ready_now(c):
    t0 = now_ms()
    c.call("ADD", "t", "a", "x", "AT", 1000)
    t1 = now_ms()
    d = get(c, "t", "a")
    assert d["state"] == b"ready"
    assert_between(d["due"], t0, t1)  # "past = now"
    got = c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")
    assert got[0][1] == b"a"


def test_add_delay_zero_is_ready(c):
    c.call("ADD", "t", "a", "x", "DELAY", 0)
    assert get(c, "t", "a")["state"] == b"ready"


@pytest.mark.parametrize("opts", [
    ["DELAY", 5000, "TTR", 1234, "RETRIES", 7, "BACKOFF", "FIXED", 250],
    ["BACKOFF", "FIXED", 250, "RETRIES", 7, "TTR", 1234, "DELAY", 5000],
    ["RETRIES", 7, "BACKOFF", "FIXED", 250, "DELAY", 5000, "TTR", 1234],
    ["delay", 5000, "ttr", 1234, "retries", 7, "backoff", "fixed", 250],
    ["Ttr", 1234, "DeLaY", 5000, "bAcKoFf", "FiXeD", 250, "Retries", 7],
])
def test_add_options_any_order_any_case(c, opts):
    t0 = now_ms()
    assert c.call("ADD", "t", "a", "x", *opts) == b"a"
    t1 = now_ms()
    d = get(c, "t", "a")
    assert d["ttr"] == 1234 and d["retries"] == 7 and d["state"] == b"delayed"
    assert_between(d["due"], t0 + 5000, t1 + 5000)


@pytest.mark.parametrize("cmd", ["add", "Add", "aDD"])
def test_commands_case_insensitive(c, cmd):
    assert c.call(cmd, "t", "a", "x") == b"a"
    assert pairs(c.call("get", "t", "a"))["body"] == b"x"
    assert c.call("Del", "t", "a") == 1
    assert c.call("gEt", "t", "a") is None


def test_add_backoff_exp_option_accepted(c):
    assert c.call("ADD", "t", "a", "x", "BACKOFF", "EXP", 100, 5000) == b"a"
    assert c.call("ADD", "t", "b", "x", "backoff", "exp", 100, 5000, "DELAY", 10) == b"b"


def test_add_binary_body_roundtrip(c):
    body = bytes(range(256)) + b"\r\n\x00*1\r\n$3\r\n"
    c.call("ADD", "t", "bin", body)
    c.call("ADD", "t", "empty", b"")
    assert get(c, "t", "bin")["body"] == body
    assert get(c, "t", "empty")["body"] == b""
    got = c.call("RESERVE", "TIMEOUT", 0, "COUNT", 2, "FROM", "t")
    assert [j[2] for j in got] == [body, b""]


def test_add_max_sized_topic_and_id(c):
    topic = ("Az09._:-" * 25)[:200]
    jid = "".join(chr(33 + i % 94) for i in range(256))
    assert c.call("ADD", topic, jid, "x") == jid.encode()
    d = get(c, topic, jid)
    assert d["topic"] == topic.encode() and d["id"] == jid.encode()


def test_add_body_of_default_max_size(c):
    body = b"\xab" * (1024 * 1024)
    assert c.call("ADD", "t", "big", body) == b"big"
    assert get(c, "t", "big")["body"] == body
    assert_err(c.call("ADD", "t", "big2", body + b"x"), "TOOBIG")
    assert c.call("GET", "t", "big2") is None


def test_add_exists(c):
    c.call("ADD", "t", "a", "first", "TTR", 1000)
    rep = c.call("ADD", "t", "a", "second", "TTR", 2000)
    assert_err(rep, "EXISTS")
    d = get(c, "t", "a")
    assert d["body"] == b"first" and d["ttr"] == 1000
    # the same id in another topic is a different job
    assert c.call("ADD", "t2", "a", "other") == b"a"


def test_add_star_generates_id(c):
    jid = c.call("ADD", "t", "*", "x")
    assert type(jid) is bytes and jid != b"*"
    ms, _, seq = jid.partition(b"-")
    assert ms.isdigit() and seq.isdigit()
    assert get(c, "t", jid)["body"] == b"x"


TOO_FAR = 11 * 365 * 24 * 3600 * 1000


@pytest.mark.parametrize("args,word", [
    (["bad topic", "a", "x"], "topic"),
    (["bad/topic", "a", "x"], "topic"),
    (["", "a", "x"], "topic"),
    (["t" * 201, "a", "x"], "topic"),
    (["t", "", "x"], "id"),
    (["t", "a b", "x"], "id"),
    (["t", "a\x01", "x"], "id"),
    (["t", "a\xff", "x"], "id"),
    (["t", "i" * 257, "x"], "id"),
    (["t", "a", "x", "DELAY", "soon"], "DELAY"),
    (["t", "a", "x", "DELAY", "1.5"], "DELAY"),
    resp(["t", "a", "x", "DELAY", "10s"], "DELAY"),
    (["t", "a", "x", "DELAY", "-1"], "DELAY"),
    (["t", "a", "x", "DELAY", str(TOO_FAR)], "DELAY"),
    resp(["t", "a", "x", "DELAY", "99999999999999999999999"], "DELAY"),
    resp(["t", "a", "x", "DELAY"], "DELAY"),
    (["t", "a", "x", "AT", "tomorrow"], "AT"),
    (["t", "a", "x", "AT", "NOW+TOO_FAR"], "AT"),
    (["t", "a", "x", "TTR", "0"], "TTR"),
    (["t", "a", "x", "TTR", "x"], "TTR"),
    (["t", "a", "x", "TTR", str(7 * 24 * 3600 * 1000 + 1)], "TTR"),
    resp(["t", "a", "x", "TTR"], "TTR"),
    (["t", "a", "x", "RETRIES", "1001"], "RETRIES"),
    (["t", "a", "x", "RETRIES", "-1"], "RETRIES"),
    (["t", "a", "x", "RETRIES", "many"], "RETRIES"),
    resp(["t", "a", "x", "BACKOFF", "LINEAR", "5"], "BACKOFF"),
    resp(["t", "a", "x", "BACKOFF", "EXP", "100"], "BACKOFF"),
    (["t", "a", "x", "BACKOFF", "EXP", "x", "100"], "BACKOFF"),
    (["t", "a", "x", "BACKOFF", "FIXED", "x"], "BACKOFF"),
    resp(["t", "a", "x", "BACKOFF"], "BACKOFF"),
    resp(["t", "a", "x", "PRIORITY", "5"], "PRIORITY"),
])
def test_add_bad_values_name_the_argument(c, args, word):
    args = [str(now_ms() + TOO_FAR) if a == "NOW+TOO_FAR" else a for a in args]
    rep = c.call("ADD", *args)
    assert_err(rep, "ERR", word)
    # nothing was created, the connection still works
    assert c.call("TOPICS") == [] and c.call("GET", "t", "a") is None
    assert c.call("PING") == b"PONG"


def test_add_delay_and_at_together_rejected(c):
    # DELAY and AT are alternatives ([DELAY ms | AT unix-ms]); giving both is a syntax error
    rep = c.call("ADD", "t", "a", "x", "DELAY", 100, "AT", now_ms() + 5000)
    assert isinstance(rep, RespError) and rep.code == "ERR", rep
    assert c.call("GET", "t", "a") is None


@pytest.mark.parametrize("args", [
    ["ADD"], ["ADD", "t"], ["ADD", "t", "id"],
    ["DEL"], ["DEL", "t"],
    ["GET"], ["GET", "t"], ["GET", "t", "a", "b"],
    ["RESERVE"], ["ACK"], ["ACK", "t"],
    ["NACK"], ["NACK", "t"], ["TOUCH", "t"],
    ["KICK"], ["LIST", "t"], ["LIST"], ["PURGE"], ["PURGE", "a", "b"],
    ["STATS", "a", "b"], ["TOPICS", "x"],
    ["AUTH"], ["ECHO"],
])
@R
def test_arity_errors(c, args):
    assert_err(c.call(*args), "ERR")
    assert c.call("PING") == b"PONG"


@R
def test_unknown_command(c):
    rep = c.call("FROBNICATE", "a", "b")
    assert_err(rep, "ERR", "frobnicate")
    assert c.call("PING") == b"PONG"


# ---------------------------------------------------------------- DEL

def test_del_counts_existing(c):
    c.call("ADD", "t", "a", "x")
    c.call("ADD", "t", "b", "x", "DELAY", 60000)
    c.call("ADD", "t", "c", "x")
    c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")  # a reserved
    assert c.call("DEL", "t", "a", "b", "nope", "b") == 2
    assert c.call("GET", "t", "a") is None and c.call("GET", "t", "b") is None
    assert get(c, "t", "c")["state"] == b"ready"
    assert c.call("DEL", "t", "a") == 0


def test_del_reserved_job_then_ack_is_zero(c):
    c.call("ADD", "t", "a", "x")
    c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")
    assert c.call("DEL", "t", "a") == 1
    assert c.call("ACK", "t", "a") == 0
    assert c.call("RESERVE", "TIMEOUT", 0, "FROM", "t") is NIL_ARRAY


# ---------------------------------------------------------------- RESERVE

def test_reserve_shape(c):
    c.call("ADD", "t", "a", b"body\x00", "TTR", 4000)
    t0 = now_ms()
    got = c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")
    t1 = now_ms()
    assert isinstance(got, list) and len(got) == 1
    job = got[0]
    assert isinstance(job, list) and len(job) == 5
    topic, jid, body, attempts, deadline = job
    assert (topic, jid, body) == (b"t", b"a", b"body\x00")
    assert all(type(x) is bytes for x in (topic, jid, body))
    assert attempts == 1 and type(attempts) is int
    assert_between(deadline, t0 + 4000, t1 + 4000)


def test_reserve_timeout_zero_empty_is_nil_array(c):
    assert c.call("RESERVE", "TIMEOUT", 0, "FROM", "t") is NIL_ARRAY
    c.call("ADD", "t", "a", "x", "DELAY", 60000)
    assert c.call("RESERVE", "TIMEOUT", 0, "FROM", "t") is NIL_ARRAY


def test_reserve_count(c):
    for i in range(5):
        c.call("ADD", "t", "j%d" % i, "b%d" % i)
    got = c.call("RESERVE", "COUNT", 3, "TIMEOUT", 0, "FROM", "t")
    assert [j[1] for j in got] == [b"j0", b"j1", b"j2"]
    got = c.call("RESERVE", "TIMEOUT", 0, "COUNT", 10, "FROM", "t")
    assert [j[1] for j in got] == [b"j3", b"j4"]
    assert c.call("RESERVE", "TIMEOUT", 0, "COUNT", 10, "FROM", "t") is NIL_ARRAY


def test_reserve_several_topics(c):
    c.call("ADD", "b", "1", "x")
    c.call("ADD", "c", "2", "y")
    got = c.call("RESERVE", "TIMEOUT", 0, "COUNT", 5, "FROM", "a", "b", "c")
    assert sorted((j[0], j[1]) for j in got) == [(b"b", b"1"), (b"c", b"2")]


def test_reserve_lowercase(c):
    c.call("ADD", "t", "a", "x")
    got = c.call("reserve", "count", 1, "timeout", 0, "from", "t")
    assert got[0][1] == b"a"


@pytest.mark.parametrize("args,word", [
    resp(["TIMEOUT", 0], "FROM"),
    (["TIMEOUT", 0, "FROM"], ("topic", "FROM", "argument")),
    (["TIMEOUT", -1, "FROM", "t"], "TIMEOUT"),
    (["TIMEOUT", "x", "FROM", "t"], "TIMEOUT"),
    (["COUNT", "x", "TIMEOUT", 0, "FROM", "t"], "COUNT"),
    (["COUNT", -3, "TIMEOUT", 0, "FROM", "t"], "COUNT"),
    (["TIMEOUT", 0, "FROM", "bad topic"], "topic"),
    resp(["WAIT", 5, "FROM", "t"], "WAIT"),
])
def test_reserve_errors(c, args, word):
    c.call("ADD", "t", "a", "x")
    rep = c.call("RESERVE", *args)
    assert_err(rep, "ERR")
    words = word if isinstance(word, tuple) else (word,)
    assert any(w.lower() in rep.msg.lower() for w in words), rep
    assert get(c, "t", "a")["state"] == b"ready"


# ---------------------------------------------------------------- ACK

def test_ack(c):
    c.call("ADD", "t", "a", "x")
    c.call("ADD", "t", "b", "x")
    c.call("RESERVE", "TIMEOUT", 0, "COUNT", 2, "FROM", "t")
    assert c.call("ACK", "t", "a") == 1
    assert c.call("ACK", "t", "a") == 0  # idempotent
    assert c.call("ACK", "t", "b", "a", "zz") == 1
    assert c.call("GET", "t", "a") is None and c.call("GET", "t", "b") is None


def test_ack_accepted_in_any_state(c):
    c.call("ADD", "t", "ready", "x")
    c.call("ADD", "t", "delayed", "x", "DELAY", 60000)
    assert c.call("ACK", "t", "ready", "delayed") == 2
    assert c.call("TOPICS") == []


# ---------------------------------------------------------------- NACK

def test_nack_returns_state_as_bulk(c):
    c.call("ADD", "t", "a", "x")
    c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")
    rep = c.call("NACK", "t", "a", "DELAY", 60000)
    assert rep == b"delayed" and type(rep) is bytes


def test_nack_delay_zero_is_ready(c):
    c.call("ADD", "t", "a", "x")
    c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")
    assert c.call("NACK", "t", "a", "DELAY", 0) == b"ready"
    got = c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")
    assert got[0][1] == b"a" and got[0][3] == 2


def test_nack_not_reserved(c):
    c.call("ADD", "t", "a", "x")
    assert_err(c.call("NACK", "t", "a"), "NOTRESERVED")
    c.call("ADD", "t", "d", "x", "DELAY", 60000)
    assert_err(c.call("NACK", "t", "d"), "NOTRESERVED")
    rep = c.call("NACK", "t", "missing")
    assert isinstance(rep, RespError), rep
    assert get(c, "t", "a")["state"] == b"ready"


@pytest.mark.parametrize("args,word", [
    (["DELAY", "x"], "DELAY"), (["DELAY", -5], "DELAY"), resp(["DELAY"], "DELAY"), resp(["SOON", 1], "SOON"),
])
def test_nack_bad_values(c, args, word):
    c.call("ADD", "t", "a", "x")
    c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")
    assert_err(c.call("NACK", "t", "a", *args), "ERR", word)
    assert get(c, "t", "a")["state"] == b"reserved"


# ---------------------------------------------------------------- TOUCH

def test_touch_returns_new_deadline(c):
    c.call("ADD", "t", "a", "x", "TTR", 3000)
    c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")
    t0 = now_ms()
    dl = c.call("TOUCH", "t", "a")
    t1 = now_ms()
    assert type(dl) is int
    assert_between(dl, t0 + 3000, t1 + 3000)
    t0 = now_ms()
    dl = c.call("touch", "t", "a", "ttr", 20000)
    t1 = now_ms()
    assert_between(dl, t0 + 20000, t1 + 20000)
    assert get(c, "t", "a")["deadline"] == dl


def test_touch_not_reserved(c):
    c.call("ADD", "t", "a", "x")
    assert_err(c.call("TOUCH", "t", "a"), "NOTRESERVED")
    assert isinstance(c.call("TOUCH", "t", "missing"), RespError)


@pytest.mark.parametrize("args,word", [
    (["TTR", 0], "TTR"), (["TTR", "x"], "TTR"), (["TTR", 7 * 24 * 3600 * 1000 + 1], "TTR"), resp(["TTR"], "TTR"),
])
def test_touch_bad_values(c, args, word):
    c.call("ADD", "t", "a", "x")
    c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")
    assert_err(c.call("TOUCH", "t", "a", *args), "ERR", word)


# ---------------------------------------------------------------- KICK

def test_kick_returns_count(c):
    assert c.call("KICK", "t") == 0
    c.call("ADD", "t", "a", "x", "RETRIES", 0)
    c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")
    assert c.call("NACK", "t", "a") == b"dead"
    rep = c.call("KICK", "t")
    assert rep == 1 and type(rep) is int
    assert get(c, "t", "a")["state"] == b"ready"


@pytest.mark.parametrize("args,word", [(["COUNT", "x"], "COUNT"), (["COUNT", -1], "COUNT"), resp(["COUNT"], "COUNT")])
def test_kick_bad_values(c, args, word):
    assert_err(c.call("KICK", "t", *args), "ERR", word)


# ---------------------------------------------------------------- LIST

def test_list_shape(c):
    c.call("ADD", "t", "a", "x")
    c.call("ADD", "t", "b", "x")
    c.call("ADD", "t", "d", "x", "DELAY", 60000)
    rep = c.call("LIST", "t", "ready")
    assert isinstance(rep, list) and len(rep) == 2
    cursor, ids = rep
    assert type(cursor) is bytes and cursor == b"0"
    assert sorted(ids) == [b"a", b"b"]
    assert c.call("LIST", "t", "DELAYED") == [b"0", [b"d"]]
    assert c.call("LIST", "t", "reserved") == [b"0", []]
    assert c.call("LIST", "t", "dead", "COUNT", 10) == [b"0", []]
    assert c.call("LIST", "nope", "ready") == [b"0", []]


def test_list_cursor_zero_starts(c):
    for i in range(5):
        c.call("ADD", "t", "j%d" % i, "x")
    rep = c.call("LIST", "t", "ready", "CURSOR", 0, "COUNT", 100)
    assert rep[0] == b"0" and sorted(rep[1]) == [b"j%d" % i for i in range(5)]


@pytest.mark.parametrize("args,word", [
    (["done"], "state"), (["ready", "COUNT", -1], "COUNT"), (["ready", "COUNT", "x"], "COUNT"),
    (["ready", "CURSOR", "not-a-cursor"], "CURSOR"), resp(["ready", "COUNT"], "COUNT"),
])
def test_list_bad_values(c, args, word):
    assert_err(c.call("LIST", "t", *args), "ERR", word)


# ---------------------------------------------------------------- PURGE / STATS / TOPICS

def test_purge(c):
    c.call("ADD", "t", "a", "x")
    c.call("ADD", "t", "b", "x", "DELAY", 60000)
    c.call("ADD", "t", "c", "x")
    c.call("ADD", "t", "d", "x", "RETRIES", 0)
    c.call("ADD", "u", "keep", "x")
    c.call("RESERVE", "TIMEOUT", 0, "COUNT", 3, "FROM", "t")  # a c d reserved
    assert c.call("NACK", "t", "d") == b"dead"
    rep = c.call("PURGE", "t")
    assert rep == 4 and type(rep) is int
    for j in "abcd":
        assert c.call("GET", "t", j) is None
    assert c.call("TOPICS") == [b"u"]
    assert c.call("PURGE", "t") == 0
    assert c.call("ACK", "t", "a") == 0
    assert get(c, "u", "keep")["state"] == b"ready"


def test_stats_shape(c):
    rep = c.call("STATS")
    assert isinstance(rep, list) and len(rep) == 24
    assert keys_of(rep) == STATS_KEYS
    assert all(type(rep[i]) is int and rep[i] == 0 for i in range(1, 24, 2)), rep
    c.call("ADD", "t", "a", "x")
    rep = c.call("stats", "t")
    assert keys_of(rep) == STATS_KEYS
    d = pairs(rep)
    assert d["jobs_ready"] == 1 and d["added"] == 1


def test_topics(c):
    assert c.call("TOPICS") == []
    c.call("ADD", "a", "1", "x")
    c.call("ADD", "b", "1", "x", "DELAY", 60000)
    c.call("ADD", "b", "2", "x")
    assert sorted(c.call("TOPICS")) == [b"a", b"b"]
    c.call("DEL", "a", "1")
    assert c.call("TOPICS") == [b"b"]
    c.call("DEL", "b", "1", "2")
    assert c.call("TOPICS") == []


# ---------------------------------------------------------------- redis-py view of the same

def test_redis_py_execute_command(r):
    assert r.execute_command("ADD", "orders", "o-1", "body", "DELAY", 1000) == b"o-1"
    g = r.execute_command("GET", "orders", "o-1")
    assert pairs(g)["state"] == b"delayed"
    assert r.execute_command("RESERVE", "TIMEOUT", 0, "FROM", "orders") is None
    assert r.execute_command("DEL", "orders", "o-1") == 1
    with pytest.raises(Exception) as ei:
        r.execute_command("ADD", "orders", "o-2", "x", "DELAY", "nope")
    assert "DELAY" in str(ei.value)
    r.execute_command("ADD", "orders", "o-3", "x")
    with pytest.raises(Exception) as ei:
        r.execute_command("ADD", "orders", "o-3", "x")
    assert str(ei.value).startswith("EXISTS")


@pytest.mark.parametrize("args", [
    ["GET", "bad topic", "a"], ["DEL", "bad topic", "a"], ["ACK", "bad/topic", "a"],
    ["NACK", "bad topic", "a"], ["TOUCH", "bad topic", "a"], ["KICK", "bad topic"],
    ["LIST", "bad topic", "ready"], ["PURGE", "bad topic"], ["STATS", "bad topic"],
    ["RESERVE", "TIMEOUT", 0, "FROM", "ok", "bad topic"],
])
def test_invalid_topic_rejected_by_every_command(c, args):
    assert_err(c.call(*args), "ERR", "topic")


@pytest.mark.parametrize("cmd", ["GET", "DEL", "ACK", "NACK", "TOUCH"])
def test_invalid_id_rejected(c, cmd):
    assert_err(c.call(cmd, "t", "bad id"), "ERR", "id")


def test_stats_of_unknown_topic_is_zeros(c):
    rep = c.call("STATS", "never-used")
    assert keys_of(rep) == STATS_KEYS and all(v == 0 for v in rep[1::2])
