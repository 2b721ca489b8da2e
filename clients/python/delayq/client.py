"""delayq.client -- a typed client for delayqd on redis-py (docs/protocol.md).

Durations are `datetime.timedelta` or an int of milliseconds; times are `datetime.datetime`
(naive ones are local time, as `datetime.timestamp` reads them) or an int of unix milliseconds.
Server errors are raised as `DelayqError` subclasses carrying the protocol's code.
"""

import datetime as _dt
from dataclasses import dataclass
from typing import Iterator, List, Optional, Tuple, Union

import redis

Duration = Union[_dt.timedelta, int]
Time = Union[_dt.datetime, int]

STATES = ("delayed", "ready", "reserved", "dead")


# ---------------------------------------------------------------- errors

class DelayqError(Exception):
    """A failed call: `code` is the protocol's error code (EXISTS, NOTRESERVED, ...) or
    IO / TIMEOUT for connection trouble; `message` is the text after it."""

    code = "ERR"

    def __init__(self, message, code=None):
        super().__init__(message)
        if code:
            self.code = code
        self.message = message

    def __str__(self):
        return "%s %s" % (self.code, self.message)


class ExistsError(DelayqError):
    code = "EXISTS"


class BusyError(DelayqError):
    code = "BUSY"


class NotReservedError(DelayqError):
    code = "NOTRESERVED"


class FullError(DelayqError):
    code = "FULL"


class TooBigError(DelayqError):
    code = "TOOBIG"


class AuthError(DelayqError):
    code = "NOAUTH"


class UnavailableError(DelayqError):
    code = "UNAVAILABLE"


class StoreIOError(DelayqError):
    code = "IOERR"


class ConnectionFailed(DelayqError):
    code = "IO"


class Timeout(DelayqError):
    """No reply in time, or the server's TIMEOUT: a change may or may not have been made."""
    code = "TIMEOUT"


_BY_CODE = {c.code: c for c in (ExistsError, BusyError, NotReservedError, FullError, TooBigError,
                                 AuthError, UnavailableError, StoreIOError)}
_BY_CODE["WRONGPASS"] = AuthError
_BY_CODE["TIMEOUT"] = Timeout  # sent to the store, not confirmed: may or may not have been made


def _error(e):
    """A redis-py exception as a DelayqError."""
    if isinstance(e, redis.TimeoutError):
        return Timeout(str(e))
    if isinstance(e, redis.AuthenticationError):
        msg = str(e)
        code = "WRONGPASS" if "invalid" in msg.lower() or "WRONGPASS" in msg else "NOAUTH"
        return AuthError(msg, code)
    if isinstance(e, redis.ConnectionError):
        return ConnectionFailed(str(e))
    text = str(e)
    word, _, rest = text.partition(" ")
    if word in _BY_CODE:
        return _BY_CODE[word](rest, word)
    return DelayqError(text, "ERR")  # redis-py strips "ERR " itself


# ---------------------------------------------------------------- values

def duration_ms(d: Duration, name="duration") -> int:
    """A timedelta or int milliseconds as int milliseconds (>= 0)."""
    if isinstance(d, _dt.timedelta):
        ms = round(d.total_seconds() * 1000)
    elif isinstance(d, int) and not isinstance(d, bool):
        ms = d
    else:
        raise TypeError("%s: expected a timedelta or int milliseconds, got %r" % (name, d))
    if ms < 0:
        raise ValueError("%s must not be negative: %r" % (name, d))
    return ms


def time_ms(t: Time, name="time") -> int:
    """A datetime or int unix milliseconds as int unix milliseconds."""
    if isinstance(t, _dt.datetime):
        return round(t.timestamp() * 1000)
    if isinstance(t, int) and not isinstance(t, bool):
        return t
    raise TypeError("%s: expected a datetime or int unix milliseconds, got %r" % (name, t))


def _utc(ms):
    return None if ms is None else _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc)


def _s(b):
    return b.decode() if isinstance(b, bytes) else b


@dataclass
class Backoff:
    """A retry backoff: Backoff.exp(base, max) doubles from base up to max; Backoff.fixed(d)."""

    kind: str
    base_ms: int
    max_ms: int = 0

    @classmethod
    def exp(cls, base: Duration = 1000, max: Duration = 3600000):
        return cls("EXP", duration_ms(base, "backoff base"), duration_ms(max, "backoff max"))

    @classmethod
    def fixed(cls, delay: Duration):
        return cls("FIXED", duration_ms(delay, "backoff delay"))

    def args(self):
        return ["BACKOFF", self.kind, self.base_ms] + ([self.max_ms] if self.kind == "EXP" else [])


@dataclass
class Job:
    """A job as GET or RESERVE returns it; fields a reply does not carry are None."""

    topic: str
    id: str
    body: bytes
    attempts: int
    state: Optional[str] = None
    due_ms: Optional[int] = None
    ttr_ms: Optional[int] = None
    retries: Optional[int] = None
    created_ms: Optional[int] = None
    deadline_ms: Optional[int] = None

    @property
    def due(self):
        return _utc(self.due_ms)

    @property
    def created(self):
        return _utc(self.created_ms)

    @property
    def deadline(self):
        return _utc(self.deadline_ms)

    @property
    def ttr(self):
        return None if self.ttr_ms is None else _dt.timedelta(milliseconds=self.ttr_ms)

    @property
    def text(self):
        """The body as UTF-8 text."""
        return self.body.decode()


@dataclass
class Stats:
    jobs_delayed: int = 0
    jobs_ready: int = 0
    jobs_reserved: int = 0
    jobs_dead: int = 0
    added: int = 0
    reserved: int = 0
    acked: int = 0
    nacked: int = 0
    expired: int = 0
    dead: int = 0
    deleted: int = 0
    kicked: int = 0


# ---------------------------------------------------------------- the client

class Client:
    """One method per command. Thread-safe: redis-py's pool gives each concurrent call its
    own connection, and reconnects a lost one on the next call.

    socket_timeout (seconds, None = none) bounds every reply; a RESERVE that waits longer
    than it needs socket_timeout=None (the default)."""

    def __init__(self, host="127.0.0.1", port=7700, password=None, socket_timeout=None,
                 socket_connect_timeout=5.0, redis_client=None):
        self.redis = redis_client or redis.Redis(
            host=host, port=port, password=password, socket_timeout=socket_timeout,
            socket_connect_timeout=socket_connect_timeout, decode_responses=False)

    def close(self):
        self.redis.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, *args):
        try:
            return self.redis.execute_command(*args)
        except redis.RedisError as e:
            raise _error(e) from None

    # --- jobs

    def add(self, topic: str, id: str, body: Union[bytes, str] = b"", *,
            delay: Optional[Duration] = None, at: Optional[Time] = None,
            ttr: Optional[Duration] = None, retries: Optional[int] = None,
            backoff: Optional[Backoff] = None, replace: bool = False,
            url: Optional[str] = None, content_type: Optional[str] = None) -> str:
        """ADD; returns the job's id (the server's own for id "*"). ExistsError if the id is taken."""
        if delay is not None and at is not None:
            raise ValueError("give delay or at, not both")
        args = ["ADD", topic, id, body]
        if delay is not None:
            args += ["DELAY", duration_ms(delay, "delay")]
        if at is not None:
            args += ["AT", time_ms(at, "at")]
        if ttr is not None:
            args += ["TTR", duration_ms(ttr, "ttr")]
        if retries is not None:
            args += ["RETRIES", int(retries)]
        if backoff is not None:
            args += backoff.args()
        if replace:
            args.append("REPLACE")
        if url is not None:
            args += ["URL", url] + (["CONTENT-TYPE", content_type] if content_type else [])
        return _s(self._call(*args))

    def get(self, topic: str, id: str) -> Optional[Job]:
        """GET; None if there is no such job."""
        r = self._call("GET", topic, id)
        if r is None:
            return None
        f = {_s(r[i]): r[i + 1] for i in range(0, len(r), 2)}
        return Job(topic=_s(f["topic"]), id=_s(f["id"]), body=f["body"],
                   attempts=f.get("attempts"), state=_s(f.get("state")), due_ms=f.get("due"),
                   ttr_ms=f.get("ttr"), retries=f.get("retries"),
                   created_ms=f.get("created"), deadline_ms=f.get("deadline"))

    def delete(self, topic: str, *ids: str) -> int:
        """DEL; how many of the ids existed."""
        return self._call("DEL", topic, *ids)

    def reserve(self, *topics: str, timeout: Optional[Duration] = None,
                count: int = 1) -> List[Job]:
        """RESERVE up to count jobs; timeout None waits for ever, 0 does not wait.
        Returns [] if none became ready in time."""
        args = ["RESERVE"]
        if timeout is not None:
            args += ["TIMEOUT", duration_ms(timeout, "timeout")]
        if count != 1:
            args += ["COUNT", int(count)]
        r = self._call(*args, "FROM", *topics)
        return [Job(topic=_s(t), id=_s(i), body=b, attempts=a, state="reserved", deadline_ms=d)
                for t, i, b, a, d in (r or [])]

    def ack(self, topic: str, *ids: str) -> int:
        """ACK; how many of the ids existed (idempotent)."""
        return self._call("ACK", topic, *ids)

    def nack(self, topic: str, id: str, delay: Optional[Duration] = None) -> str:
        """NACK; the new state: "delayed", "ready" or "dead". NotReservedError."""
        args = ["NACK", topic, id]
        if delay is not None:
            args += ["DELAY", duration_ms(delay, "delay")]
        return _s(self._call(*args))

    def touch(self, topic: str, id: str, ttr: Optional[Duration] = None) -> _dt.datetime:
        """TOUCH; the new lease end. NotReservedError."""
        args = ["TOUCH", topic, id]
        if ttr is not None:
            args += ["TTR", duration_ms(ttr, "ttr")]
        return _utc(self._call(*args))

    def kick(self, topic: str, count: Optional[int] = None) -> int:
        """KICK dead jobs back to ready; how many."""
        return self._call("KICK", topic, *(["COUNT", int(count)] if count is not None else []))

    def list(self, topic: str, state: str, count: Optional[int] = None,
             cursor: Optional[str] = None) -> Tuple[str, List[str]]:
        """One LIST page: (next cursor, ids); cursor "0" = done."""
        if state not in STATES:
            raise ValueError("state must be one of %s, got %r" % (", ".join(STATES), state))
        args = ["LIST", topic, state]
        if count is not None:
            args += ["COUNT", int(count)]
        if cursor is not None:
            args += ["CURSOR", cursor]
        cur, ids = self._call(*args)
        return str(_s(cur)), [_s(i) for i in ids]

    def iter_ids(self, topic: str, state: str, page: int = 1000) -> Iterator[str]:
        """Every id in a state, following the cursor."""
        cursor = None
        while True:
            cursor, ids = self.list(topic, state, count=page, cursor=cursor)
            yield from ids
            if cursor == "0":
                return

    def purge(self, topic: str) -> int:
        """PURGE; how many jobs were removed."""
        return self._call("PURGE", topic)

    def stats(self, topic: Optional[str] = None) -> Stats:
        r = self._call("STATS", *([topic] if topic else []))
        known = set(Stats.__dataclass_fields__)
        return Stats(**{k: r[i + 1] for i in range(0, len(r), 2)
                        for k in [_s(r[i])] if k in known})

    def topics(self) -> List[str]:
        return sorted(_s(t) for t in self._call("TOPICS"))

    def ping(self) -> bool:
        return bool(self._call("PING"))

    def info(self, section: Optional[str] = None) -> dict:
        """INFO as a dict of its "key:value" lines; whole numbers become ints."""
        pool = self.redis.connection_pool
        conn = pool.get_connection("INFO")
        try:  # past redis-py's INFO parser, which expects Redis's own fields
            conn.send_command("INFO", *([section] if section else []))
            text = _s(conn.read_response())
        except redis.RedisError as e:
            if isinstance(e, (redis.ConnectionError, redis.TimeoutError)):
                conn.disconnect()
            raise _error(e) from None
        finally:
            pool.release(conn)
        out = {}
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep and key and not key.startswith("#"):
                out[key] = int(value) if value.lstrip("-").isdigit() else value
        return out
