"""Integration test harness: starts the real delayqd and talks RESP to it.

Environment:
  DELAYQD         the server binary (default build/asan/delayqd, relative to the repo root)
  DELAYQ_STORES   comma-separated stores to run every server-using test against:
                  "embedded" (default) and/or "redis" (a private redis-server is started
                  once per session, every delayqd gets its own key prefix)
  REDIS_SERVER    redis-server binary for the "redis" store (default /usr/bin/redis-server)
  DELAYQ_TEST_TIMEOUT  per-test watchdog in seconds (default 60)
  DELAYQ_FRONTS   comma-separated front doors the semantic test files run through:
                  "resp" and/or "http" (default both; see SEMANTIC_FILES)

Fixtures:
  store        the store under test (parametrized); StoreSpec with .name and .url()
  make_server  factory: make_server(*extra_flags, start=True) -> Server (stopped at teardown)
  server       a running Server with default flags
  r            redis.Redis on `server` (decode_responses=False)
  clients      factory: clients(port=None, **kw) -> extra redis.Redis
  raw          factory: raw(port=None, timeout=5) -> RespConn (a raw socket with a RESP reader)
  c            one RespConn on `server` -- or, for the "http" front door, an HttpConn that
               takes the same commands and answers in the same shapes
  front        the front door under test ("resp" or "http"): parametrized in SEMANTIC_FILES,
               "resp" elsewhere; `raw` and `c` follow it. Mark a test about RESP itself
               @pytest.mark.resp_only
  canary       jobs added before a hostile action; canary.check() asserts they are intact

Helpers importable with `from conftest import ...`: RespConn, RespError, Status, NIL_ARRAY,
now_ms, wait_until, pairs, keys_of, encode_command, free_port, ConnectionClosed,
assert_err, assert_between, wait_blocked, GET_KEYS, STATS_KEYS.

Every Server started here is stopped with SIGTERM at teardown; the test then fails (as a
teardown error) unless delayqd exited 0 within 5 s and printed no sanitizer report.
"""

import json
import os
import signal
import socket
import subprocess
import threading
import time
import uuid

import pytest
import redis

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DELAYQD = os.environ.get("DELAYQD") or os.path.join(REPO, "build", "asan", "delayqd")
REDIS_SERVER = os.environ.get("REDIS_SERVER", "/usr/bin/redis-server")
STORES = [s.strip() for s in os.environ.get("DELAYQ_STORES", "embedded").split(",") if s.strip()]
FRONTS = [s.strip() for s in os.environ.get("DELAYQ_FRONTS", "resp,http").split(",") if s.strip()]
# The files whose tests run through every front door: they test what a command does, not
# how RESP frames it, so RESP and HTTP cannot drift.
SEMANTIC_FILES = ("test_commands.py", "test_transitions.py", "test_blocking.py")
TEST_TIMEOUT = int(os.environ.get("DELAYQ_TEST_TIMEOUT", "60"))

SANITIZER_MARKERS = (
    b"ERROR: AddressSanitizer",
    b"ERROR: LeakSanitizer",
    b"runtime error:",
    b"ERROR: UndefinedBehaviorSanitizer",
)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "stores(*names): run this test only against the named stores")
    config.addinivalue_line(
        "markers", "resp_only: a test about RESP framing; not run through the HTTP front door")


# --------------------------------------------------------------------------
# small helpers

def now_ms():
    return int(time.time() * 1000)


def wait_until(pred, timeout=2.0, interval=0.005):
    """Polls pred() until it returns a truthy value (returned) or timeout (returns it falsy)."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _b(x):
    if isinstance(x, bytes):
        return x
    if isinstance(x, (bytearray, memoryview)):
        return bytes(x)
    if isinstance(x, str):
        return x.encode()
    if isinstance(x, (int, float)):
        return str(x).encode()
    raise TypeError(type(x))


def encode_command(*args):
    """A RESP multibulk request."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = _b(a)
        out.append(b"$%d\r\n" % len(a))
        out.append(a)
        out.append(b"\r\n")
    return b"".join(out)


def pairs(flat):
    """[k1, v1, k2, v2, ...] -> dict with str keys (order kept)."""
    assert isinstance(flat, list) and len(flat) % 2 == 0, flat
    d = {}
    for i in range(0, len(flat), 2):
        k = flat[i]
        d[k.decode() if isinstance(k, bytes) else k] = flat[i + 1]
    return d


def keys_of(flat):
    return [flat[i].decode() for i in range(0, len(flat), 2)]


# GET and STATS field orders (notes/common.md)
GET_KEYS = ["topic", "id", "state", "body", "due", "ttr", "retries", "attempts", "created"]
STATS_KEYS = ["jobs_delayed", "jobs_ready", "jobs_reserved", "jobs_dead", "added", "reserved",
              "acked", "nacked", "expired", "dead", "deleted", "kicked", "pushed", "push_failed"]


def assert_err(rep, code, *words):
    """rep is an error reply with this code whose message mentions every word (case-insensitive)."""
    assert isinstance(rep, RespError), "expected -%s, got %r" % (code, rep)
    assert rep.code == code, "expected -%s, got %r" % (code, rep)
    for w in words:
        assert w.lower() in rep.msg.lower(), "error %r does not name %r" % (rep.line, w)


def assert_between(v, lo, hi, slack=5):
    assert isinstance(v, int), v
    assert lo - slack <= v <= hi + slack, "%d not in [%d, %d] (+-%d)" % (v, lo, hi, slack)


# --------------------------------------------------------------------------
# raw RESP connection

class Status(bytes):
    """A RESP simple string (+OK): bytes, but distinguishable from a bulk string."""

    def __repr__(self):
        return "Status(%s)" % bytes.__repr__(self)


class RespError:
    """A RESP error reply. .line is the whole line, .code its first word, .msg the rest."""

    def __init__(self, line):
        self.line = line
        code, _, msg = line.partition(" ")
        self.code = code
        self.msg = msg

    def __repr__(self):
        return "RespError(%r)" % self.line

    def __eq__(self, other):
        return isinstance(other, RespError) and other.line == self.line

    __hash__ = None


class _NilArray:
    def __repr__(self):
        return "NIL_ARRAY"

    def __bool__(self):
        return False


NIL_ARRAY = _NilArray()  # *-1 (a nil bulk $-1 is None)


class ConnectionClosed(Exception):
    pass


class _SocketConn:
    """What both test connections share: the socket, reading into buf, closing."""

    def __init__(self, port, host, timeout):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = bytearray()
        self.pos = 0  # what the reader has consumed of buf
        self.closed = False

    def _fill(self, timeout=None):
        if self.pos > 65536 and self.pos > len(self.buf) // 2:
            del self.buf[: self.pos]
            self.pos = 0
        self.sock.settimeout(self.timeout if timeout is None else timeout)
        try:
            chunk = self.sock.recv(1 << 20)
        except ConnectionResetError:
            self.closed = True
            raise ConnectionClosed("connection reset")
        if not chunk:
            self.closed = True
            raise ConnectionClosed("connection closed by server")
        self.buf += chunk

    def wait_closed(self, timeout=2.0):
        """Reads and discards until the server closes the connection; True if it did."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                self._fill(left)
            except ConnectionClosed:
                return True
            except socket.timeout:
                return False
            except OSError:
                return True

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
        self.closed = True

    def reset(self):
        """Closes abruptly with a TCP RST."""
        import struct
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close()


class RespConn(_SocketConn):
    """A raw TCP connection that sends bytes and parses RESP replies exactly.

    Replies: Status for +, RespError for -, int for :, bytes for $, None for $-1,
    list for *, NIL_ARRAY for *-1. Errors are returned, not raised.
    """

    def __init__(self, port, host="127.0.0.1", timeout=5.0):
        super().__init__(port, host, timeout)

    # sending
    def send_raw(self, data):
        self.sock.sendall(_b(data))

    def send(self, *args):
        self.sock.sendall(encode_command(*args))

    def call(self, *args):
        self.send(*args)
        return self.read()

    def inline(self, line):
        """Sends an inline command (line without terminator) and reads one reply."""
        self.send_raw(_b(line) + b"\r\n")
        return self.read()

    # receiving
    def _line(self, timeout):
        while True:
            i = self.buf.find(b"\r\n", self.pos)
            if i >= 0:
                line = bytes(self.buf[self.pos: i])
                self.pos = i + 2
                return line
            self._fill(timeout)

    def _exact(self, n, timeout):
        while len(self.buf) - self.pos < n + 2:
            self._fill(timeout)
        data = bytes(self.buf[self.pos: self.pos + n])
        assert self.buf[self.pos + n: self.pos + n + 2] == b"\r\n", "bulk not followed by CRLF"
        self.pos += n + 2
        return data

    def read(self, timeout=None):
        line = self._line(timeout)
        t, rest = line[:1], line[1:]
        if t == b"+":
            return Status(rest)
        if t == b"-":
            return RespError(rest.decode("utf-8", "replace"))
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            return self._exact(n, timeout)
        if t == b"*":
            n = int(rest)
            if n < 0:
                return NIL_ARRAY
            return [self.read(timeout) for _ in range(n)]
        raise AssertionError("not a RESP reply: %r" % line)

    def pending(self, wait=0.05):
        """True if reply bytes arrive within `wait` seconds (without consuming them)."""
        if len(self.buf) > self.pos:
            return True
        try:
            self._fill(wait)
        except (socket.timeout, BlockingIOError):
            return False
        except ConnectionClosed:
            return True
        return True

    def read_all_until_closed(self, timeout=2.0):
        """Replies received before the server closed; raises AssertionError if it did not close."""
        out = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("server did not close the connection; got %r" % out)
            try:
                out.append(self.read(left))
            except ConnectionClosed:
                return out
            except socket.timeout:
                raise AssertionError("server did not close the connection; got %r" % out)



# --------------------------------------------------------------------------
# the HTTP front door, in the shape of RespConn

def decode_resp_commands(data):
    """A pipeline of RESP multibulk requests -> [[arg bytes, ...], ...]."""
    out, i = [], 0
    while i < len(data):
        assert data[i:i + 1] == b"*", data[i:i + 20]
        j = data.index(b"\r\n", i)
        n, i, args = int(data[i + 1:j]), j + 2, []
        for _ in range(n):
            j = data.index(b"\r\n", i)
            ln = int(data[i + 1:j])
            args.append(bytes(data[j + 2:j + 2 + ln]))
            i = j + 2 + ln + 2
        out.append(args)
    return out


class HttpConn(_SocketConn):
    """A keep-alive HTTP/1.1 connection to the JSON API that takes RESP-style commands
    (call/send/read, as RespConn) and answers in RESP's shapes: bulk strings as bytes,
    integers as int, GET/STATS as flat field lists, nil for a missing job, NIL_ARRAY for an
    empty RESERVE, RespError("CODE message") for {"error", "message"}. Each command becomes
    the request of DESIGN §8; requests are pipelined, replies come back in order."""

    def __init__(self, port, host="127.0.0.1", timeout=5.0, token=None):
        super().__init__(port, host, timeout)  # buf is consumed from its start: pos stays 0
        self.token = token
        self.expect = []  # the command of each request sent, oldest first

    # --- commands -> requests
    @staticmethod
    def _s(x):
        return _b(x).decode("utf-8", "surrogateescape")

    @staticmethod
    def _num(x):
        """An option value: an int when it is one, else the text (the server names it)."""
        t = HttpConn._s(x)
        try:
            return int(t)
        except ValueError:
            return t

    @staticmethod
    def _q(x):
        import urllib.parse
        return urllib.parse.quote(_b(x), safe="")

    def _request(self, args):
        """-> (method, path, json-or-None)."""
        import base64
        cmd = self._s(args[0]).upper()
        a = list(args[1:])
        q = self._q
        if cmd == "ADD":
            topic, jid, body = a[0], a[1], _b(a[2])
            doc = {}
            if _b(jid) != b"*":
                doc["id"] = self._s(jid)
            try:
                doc["body"] = body.decode("utf-8")
            except UnicodeDecodeError:
                doc["body_base64"] = base64.b64encode(body).decode()
            i = 3
            while i < len(a):
                o = self._s(a[i]).upper()
                if o in ("DELAY", "AT", "TTR", "RETRIES"):
                    doc[o.lower()] = self._num(a[i + 1])
                    i += 2
                elif o == "BACKOFF" and self._s(a[i + 1]).upper() == "FIXED":
                    doc["backoff"] = {"fixed": self._num(a[i + 2])}
                    i += 3
                elif o == "BACKOFF" and self._s(a[i + 1]).upper() == "EXP":
                    doc["backoff"] = {"exp": [self._num(a[i + 2]), self._num(a[i + 3])]}
                    i += 4
                elif o == "REPLACE":
                    doc["replace"] = True
                    i += 1
                elif o in ("URL", "CONTENT-TYPE"):
                    doc[o.lower().replace("-", "_")] = self._s(a[i + 1])
                    i += 2
                else:
                    raise ValueError("HttpConn: no JSON for ADD option %r" % o)
            return "POST", "/v1/topics/%s/jobs" % q(topic), doc
        if cmd == "GET":
            return "GET", "/v1/topics/%s/jobs/%s" % (q(a[0]), q(a[1])), None
        if cmd in ("DEL", "ACK"):  # one id a request; send_args sends one per id
            if cmd == "DEL":
                return "DELETE", "/v1/topics/%s/jobs/%s" % (q(a[0]), q(a[1])), None
            return "POST", "/v1/topics/%s/jobs/%s/ack" % (q(a[0]), q(a[1])), None
        if cmd in ("NACK", "TOUCH"):
            doc = {}
            if len(a) == 4:
                doc[self._s(a[2]).lower()] = self._num(a[3])
            return "POST", "/v1/topics/%s/jobs/%s/%s" % (q(a[0]), q(a[1]), cmd.lower()), doc
        if cmd == "RESERVE":
            doc, i = {"timeout": 10 * 365 * 86400 * 1000}, 0  # none = wait forever
            while self._s(a[i]).upper() != "FROM":
                doc[self._s(a[i]).lower()] = self._num(a[i + 1])
                i += 2
            doc["topics"] = [self._s(t) for t in a[i + 1:]]
            return "POST", "/v1/reserve", doc
        if cmd == "KICKJOB":
            return "POST", "/v1/topics/%s/jobs/%s/kick" % (q(a[0]), q(a[1])), {}
        if cmd == "KICK":
            doc = {"count": self._num(a[2])} if len(a) == 3 else {}
            return "POST", "/v1/topics/%s/kick" % q(a[0]), doc
        if cmd == "LIST":
            qs = "state=" + q(a[1])
            for i in range(2, len(a), 2):
                qs += "&%s=%s" % (self._s(a[i]).lower(), q(a[i + 1]))
            return "GET", "/v1/topics/%s/jobs?%s" % (q(a[0]), qs), None
        if cmd == "PURGE":
            return "DELETE", "/v1/topics/%s" % q(a[0]), None
        if cmd == "STATS":
            return "GET", "/v1/stats" + ("?topic=" + q(a[0]) if a else ""), None
        if cmd == "TOPICS":
            return "GET", "/v1/topics", None
        if cmd == "PING":
            return "GET", "/healthz", None
        if cmd == "INFO":
            return "GET", "/metrics", None
        raise ValueError("HttpConn: no route for %s (mark the test resp_only)" % cmd)

    def send_args(self, args):
        cmd = self._s(args[0]).upper()
        if cmd in ("DEL", "ACK") and len(args) > 3:  # several ids: a request each, summed
            for jid in args[2:]:
                self.send_args([args[0], args[1], jid])
            self.expect[-(len(args) - 2):] = [(cmd, len(args) - 2)]
            return
        method, path, doc = self._request(args)
        body = b"" if doc is None else json.dumps(doc).encode()
        head = "%s %s HTTP/1.1\r\nHost: delayq\r\nContent-Length: %d\r\n" % (
            method, path, len(body))
        if doc is not None:
            head += "Content-Type: application/json\r\n"
        if self.token:
            head += "Authorization: Bearer %s\r\n" % self.token
        self.expect.append((cmd, 1))
        self.sock.sendall(head.encode() + b"\r\n" + body)

    def send(self, *args):
        self.send_args(args)

    def send_raw(self, data):
        """RESP-encoded commands (encode_command) go out as pipelined HTTP requests."""
        for args in decode_resp_commands(_b(data)):
            self.send_args(args)

    def call(self, *args):
        self.send(*args)
        return self.read()

    # --- responses -> RESP shapes
    def read_response(self, timeout=None):
        """-> (status, headers dict with lower-case names, body bytes)."""
        while b"\r\n\r\n" not in self.buf:
            self._fill(timeout)
        i = self.buf.index(b"\r\n\r\n")
        lines = bytes(self.buf[:i]).decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        while len(self.buf) < i + 4 + n:
            self._fill(timeout)
        body = bytes(self.buf[i + 4:i + 4 + n])
        del self.buf[:i + 4 + n]
        return status, headers, body

    def read(self, timeout=None):
        import base64
        cmd, n = self.expect.pop(0)
        if n > 1:
            reps = []
            for _ in range(n):
                self.expect.insert(0, (cmd, 1))
                reps.append(self.read(timeout))
            errs = [r for r in reps if isinstance(r, RespError)]
            return errs[0] if errs else sum(reps)
        status, headers, body = self.read_response(timeout)
        if cmd == "INFO":  # the few INFO fields tests read, from /metrics
            m = {}
            for ln in body.decode().splitlines():
                if ln and not ln.startswith("#") and "{" not in ln:
                    k, v = ln.split()
                    m[k] = v
            return ("blocked_clients:%s\r\nconnected_clients:%s\r\n" % (
                m["delayq_blocked_clients"], m["delayq_connected_clients"])).encode()
        doc = json.loads(body)
        if "error" in doc:
            if cmd == "GET" and status == 404:
                return None
            assert status >= 400, (status, doc)
            return RespError("%s %s" % (doc["error"], doc["message"]))

        def job_body(j):
            if "body_base64" in j:
                return base64.b64decode(j["body_base64"])
            return j["body"].encode("utf-8")

        if cmd == "ADD":
            assert status == 201, (status, doc)
            return doc["id"].encode()
        assert status == 200, (status, doc)
        if cmd == "GET":
            out = []
            for k in GET_KEYS + ["deadline", "url", "content_type"]:
                if k == "body":
                    out += [b"body", job_body(doc)]
                elif k in doc:
                    v = doc[k]
                    out += [k.encode(), v.encode() if isinstance(v, str) else v]
            return out
        if cmd == "RESERVE":
            if not doc["jobs"]:
                return NIL_ARRAY
            return [[j["topic"].encode(), j["id"].encode(), job_body(j), j["attempts"],
                     j["deadline"]] for j in doc["jobs"]]
        if cmd == "STATS":
            return [x for k in STATS_KEYS for x in (k.encode(), doc[k])]
        if cmd == "LIST":
            return [doc["cursor"].encode(), [x.encode() for x in doc["ids"]]]
        if cmd == "TOPICS":
            return [x.encode() for x in doc["topics"]]
        if cmd == "NACK":
            return doc["state"].encode()
        if cmd == "PING":
            return Status(b"PONG")
        key = {"DEL": "deleted", "ACK": "acked", "TOUCH": "deadline", "KICK": "kicked",
               "KICKJOB": "kicked", "PURGE": "removed"}[cmd]
        return doc[key]

    def pending(self, wait=0.05):
        if self.buf:
            return True
        try:
            self._fill(wait)
        except (socket.timeout, BlockingIOError):
            return False
        except ConnectionClosed:
            return True
        return True



def wait_blocked(conn, n, timeout=2.0):
    """Waits until n clients are blocked in RESERVE: through INFO's blocked_clients field when
    the server reports it, else by a short sleep (requests on other sockets are not ordered)."""
    def count():
        info = conn.call("INFO")
        if not isinstance(info, bytes):
            return None
        for line in info.split(b"\n"):
            if line.startswith(b"blocked_clients:"):
                return int(line.split(b":", 1)[1].strip())
        return None

    if count() is None:
        time.sleep(0.06)
        return
    assert wait_until(lambda: count() == n, timeout), "blocked_clients never reached %d" % n


# --------------------------------------------------------------------------
# processes

def _wait_ping(port, proc, timeout, what):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %s during startup" % (what, proc.returncode))
        try:
            c = RespConn(port, timeout=1.0)
            try:
                rep = c.call("PING")
            finally:
                c.close()
            if isinstance(rep, (Status, RespError, bytes)):
                return
        except (OSError, ConnectionClosed) as e:
            last = e
        time.sleep(0.01)
    raise RuntimeError("%s did not answer PING on port %d within %.0fs (%s)" % (what, port, timeout, last))


class RedisBackend:
    """A private redis-server on a free loopback port (no persistence)."""

    def __init__(self, workdir):
        self.workdir = str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.port = None
        self.proc = None

    def start(self):
        if not os.path.exists(REDIS_SERVER):
            pytest.fail("redis-server not found at %s (make test installs it)" % REDIS_SERVER)
        for _ in range(5):
            self.port = free_port()
            log = open(os.path.join(self.workdir, "redis.log"), "ab")
            self.proc = subprocess.Popen(
                [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", self.workdir,
                 "--protected-mode", "no"],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
            log.close()
            try:
                _wait_ping(self.port, self.proc, 10, "redis-server")
                return self
            except RuntimeError:
                self.stop()
        raise RuntimeError("could not start redis-server")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class StoreSpec:
    def __init__(self, name, backend=None):
        self.name = name
        self.backend = backend

    def url(self):
        """--store value for a new, independent server (None = embedded)."""
        if self.name == "embedded":
            return None
        if self.name == "redis":
            return "redis://127.0.0.1:%d/0?prefix=test-%s" % (self.backend.port, uuid.uuid4().hex[:12])
        raise ValueError(self.name)

    def __repr__(self):
        return self.name


class Server:
    """One delayqd process. start()/stop(sig)/restart() keep port, data dir and flags."""

    def __init__(self, workdir, store_url=None, extra=(), port=None):
        self.workdir = str(workdir)
        self.data_dir = os.path.join(self.workdir, "data")
        os.makedirs(self.data_dir, exist_ok=True)
        self.store_url = store_url
        self.extra = [str(x) for x in extra]
        self.port = port or free_port()
        self.http_port = free_port()
        self.proc = None
        self.log_path = os.path.join(self.workdir, "delayqd.log")
        self.exit_codes = []

    @property
    def args(self):
        a = [DELAYQD, "--bind", "127.0.0.1", "--port", str(self.port), "--data-dir", self.data_dir]
        if "--http-port" not in self.extra:
            a += ["--http-port", str(self.http_port)]
        if self.store_url:
            a += ["--store", self.store_url]
        return a + self.extra

    def start(self, timeout=15):
        if not os.path.exists(DELAYQD):
            pytest.fail("server binary not built: %s (set DELAYQD)" % DELAYQD)
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:halt_on_error=1")
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        deadline = time.monotonic() + timeout
        first_start = not self.exit_codes and self.proc is None
        while True:
            log = open(self.log_path, "ab")
            mark = log.tell()
            log.write(b"=== start %s\n" % " ".join(self.args).encode())
            log.flush()
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.workdir, env=env)
            log.close()
            try:
                _wait_ping(self.port, self.proc, max(1.0, deadline - time.monotonic()), "delayqd")
                # The PING may have been answered by another process that took the port
                # between free_port() and our bind: ours logs that it listens there first.
                def ours():
                    with open(self.log_path, "rb") as f:
                        f.seek(mark)
                        run = f.read()
                    return b"listening on" in run and (b":%d " % self.port) in run
                wait_until(lambda: ours() or self.proc.poll() is not None, 10)
                if not ours():
                    raise RuntimeError("port %d answered, but not by this delayqd" % self.port)
                return self
            except RuntimeError as e:
                if self.proc.poll() is None:
                    self.proc.kill()
                    self.proc.wait()
                with open(self.log_path, "rb") as f:
                    f.seek(mark)
                    this_run = f.read()
                # only a port clash is worth retrying (TIME_WAIT without SO_REUSEADDR, or
                # another process took the free port we picked); anything else fails at once
                if b"in use" not in this_run or time.monotonic() >= deadline:
                    raise RuntimeError("%s\n--- log:\n%s" % (e, self.log()[-5000:]))
                if first_start:
                    self.port = free_port()
                    self.http_port = free_port()
                time.sleep(0.1)

    def stop(self, sig=signal.SIGTERM, timeout=5.0):
        """Sends sig and waits; returns the exit code (negative = killed by a signal).
        Raises AssertionError if it did not exit in `timeout` (the process is then killed)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("delayqd did not exit within %.1fs of signal %d" % (timeout, sig))
        self.exit_codes.append(rc)
        return rc

    def kill(self):
        return self.stop(signal.SIGKILL)

    def restart(self, sig=signal.SIGTERM):
        rc = self.stop(sig)
        self.start()
        return rc

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def sanitizer_report(self):
        try:
            with open(self.log_path, "rb") as f:
                data = f.read()
        except OSError:
            return None
        for m in SANITIZER_MARKERS:
            i = data.find(m)
            if i >= 0:
                return data[max(0, i - 200): i + 3000].decode("utf-8", "replace")
        return None

    def client(self, **kw):
        kw.setdefault("socket_timeout", 10)
        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=False, **kw)

    def raw(self, timeout=5.0):
        return RespConn(self.port, timeout=timeout)

    def http(self, timeout=5.0, token=None):
        return HttpConn(self.http_port, timeout=timeout, token=token)


# --------------------------------------------------------------------------
# fixtures

@pytest.fixture(autouse=True)
def _watchdog():
    """Fails a test that hangs (no pytest-timeout here)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum, frame):
        raise TimeoutError("test exceeded %d s (DELAYQ_TEST_TIMEOUT)" % TEST_TIMEOUT)

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(TEST_TIMEOUT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="session")
def redis_backend(tmp_path_factory):
    b = RedisBackend(tmp_path_factory.mktemp("redis-backend")).start()
    yield b
    b.stop()


def pytest_collection_modifyitems(config, items):
    """A test marked @pytest.mark.stores(...) is not generated for the other
    stores at all (deselected, not skipped)."""
    keep, drop = [], []
    for item in items:
        m = item.get_closest_marker("stores")
        cs = getattr(item, "callspec", None)
        st = cs.params.get("store") if cs else None
        fr = cs.params.get("front") if cs else None
        if (m is not None and st is not None and st not in m.args) or \
                (fr == "http" and item.get_closest_marker("resp_only") is not None):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_generate_tests(metafunc):
    if "front" in metafunc.fixturenames and \
            os.path.basename(metafunc.definition.fspath.strpath) in SEMANTIC_FILES:
        metafunc.parametrize("front", FRONTS, indirect=True)


@pytest.fixture
def front(request):
    """"resp" or "http" (see SEMANTIC_FILES)."""
    return getattr(request, "param", "resp")


@pytest.fixture(params=STORES)
def store(request):
    if request.param == "redis":
        return StoreSpec("redis", request.getfixturevalue("redis_backend"))
    return StoreSpec(request.param)


def stop_and_check(servers, timeout):
    """SIGTERM every running server; return the problems: a server that did
    not exit 0 in time, or whose log holds a sanitizer report."""
    problems = []
    for s in servers:
        if s.running:
            try:
                rc = s.stop(signal.SIGTERM, timeout)
                if rc != 0:
                    problems.append("delayqd (port %d) exited %s on SIGTERM" % (s.port, rc))
            except AssertionError as e:
                problems.append(str(e))
        rep = s.sanitizer_report()
        if rep:
            problems.append("sanitizer report from delayqd (port %d):\n%s" % (s.port, rep))
    return problems


@pytest.fixture
def make_server(store, tmp_path):
    """make_server(*extra_flags, start=True, store_url=<default: fresh>) -> Server."""
    started = []

    def factory(*extra, start=True, **kw):
        url = kw.pop("store_url", store.url())
        assert not kw, kw
        s = Server(tmp_path / ("srv%d" % len(started)), store_url=url, extra=extra)
        started.append(s)
        if start:
            s.start()
        return s

    yield factory
    problems = stop_and_check(started, 5.0)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture
def server(make_server):
    return make_server()


@pytest.fixture
def r(server):
    c = server.client()
    yield c
    c.close()


@pytest.fixture
def clients(server):
    made = []

    def factory(port=None, **kw):
        kw.setdefault("socket_timeout", 10)
        c = redis.Redis(host="127.0.0.1", port=port or server.port, decode_responses=False, **kw)
        made.append(c)
        return c

    yield factory
    for c in made:
        try:
            c.close()
        except Exception:
            pass


@pytest.fixture
def raw(server, front):
    """raw(port=None, timeout=5) -> a RespConn, or an HttpConn for the http front door
    (port then names the RESP port of another server, whose HTTP port is not known: RESP)."""
    made = []

    def factory(port=None, timeout=5.0):
        if front == "http" and port is None:
            c = HttpConn(server.http_port, timeout=timeout)
        else:
            c = RespConn(port or server.port, timeout=timeout)
        made.append(c)
        return c

    yield factory
    for c in made:
        c.close()


@pytest.fixture
def c(raw):
    """A raw RESP connection to `server` (exact reply types, errors returned not raised),
    or its HTTP twin for the http front door."""
    return raw()


class Canary:
    """Jobs in every live state, added before something hostile; check() asserts they are intact."""

    def __init__(self, server):
        self.server = server
        c = server.raw()
        self.ready = c.call("ADD", "canary", "c-ready", b"ready\x00body\r\n")
        self.delayed = c.call("ADD", "canary", "c-delayed", b"delayed body", "DELAY", 3600000)
        c.call("ADD", "canary-r", "c-reserved", b"reserved body", "TTR", 600000)
        got = c.call("RESERVE", "TIMEOUT", 0, "FROM", "canary-r")
        assert isinstance(got, list) and got[0][1] == b"c-reserved", got
        self.expected = {
            ("canary", "c-ready"): (b"ready", b"ready\x00body\r\n"),
            ("canary", "c-delayed"): (b"delayed", b"delayed body"),
            ("canary-r", "c-reserved"): (b"reserved", b"reserved body"),
        }
        c.close()

    def check(self):
        assert self.server.running, "delayqd died:\n" + self.server.log()[-3000:]
        c = self.server.raw()
        try:
            assert c.call("PING") == b"PONG"
            for (topic, jid), (state, body) in self.expected.items():
                g = c.call("GET", topic, jid)
                assert isinstance(g, list), (topic, jid, g)
                d = pairs(g)
                assert (d["state"], d["body"]) == (state, body), (topic, jid, d)
        finally:
            c.close()


@pytest.fixture
def canary(server):
    return Canary(server)
