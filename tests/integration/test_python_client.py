"""clients/python/delayq: the typed Client and the Worker against a real delayqd (both stores).

Waits are on conditions with deadlines; no sleep races a timer."""

import datetime as dt
import os
import sys
import threading
import time

import pytest

from conftest import REPO, now_ms, wait_until

sys.path.insert(0, os.path.join(REPO, "clients", "python"))

import delayq  # noqa: E402
from delayq import Backoff, Client, Retry, Worker  # noqa: E402


@pytest.fixture
def q(server):
    cl = Client(port=server.port)
    yield cl
    cl.close()


# ---------------------------------------------------------------- Client

def test_add_get_with_timedelta_and_datetime(q):
    t0 = now_ms()
    assert q.add("orders", "o-1", b"body", delay=dt.timedelta(minutes=30),
                 ttr=dt.timedelta(seconds=45), retries=2,
                 backoff=Backoff.exp(dt.timedelta(seconds=1), dt.timedelta(minutes=5))) == "o-1"
    j = q.get("orders", "o-1")
    assert isinstance(j, delayq.Job)
    assert j.topic == "orders" and j.id == "o-1" and j.body == b"body" and j.state == "delayed"
    assert t0 + 1800000 - 5 <= j.due_ms <= now_ms() + 1800000 + 5
    assert j.ttr == dt.timedelta(seconds=45) and j.retries == 2 and j.attempts == 0
    assert j.due.tzinfo is not None and j.deadline is None
    at = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=2)
    q.add("orders", "o-2", "text", at=at)
    assert abs(q.get("orders", "o-2").due_ms - round(at.timestamp() * 1000)) <= 1
    assert q.get("orders", "missing") is None
    sid = q.add("orders", "*", b"")
    assert sid != "*" and q.get("orders", sid) is not None


def test_errors_are_typed(q):
    q.add("t", "a", b"x")
    with pytest.raises(delayq.ExistsError) as e:
        q.add("t", "a", b"y")
    assert e.value.code == "EXISTS" and "EXISTS" in str(e.value)
    assert q.add("t", "a", b"y", replace=True) == "a"
    with pytest.raises(delayq.NotReservedError):
        q.nack("t", "a")
    with pytest.raises(delayq.NotReservedError):
        q.touch("t", "a")
    with pytest.raises(delayq.DelayqError) as e:
        q.add("t", "b", b"", retries=5000)
    assert e.value.code == "ERR" and "RETRIES" in str(e.value).upper()
    with pytest.raises(ValueError):
        q.add("t", "c", b"", delay=1, at=2)
    with pytest.raises(TypeError):
        q.add("t", "c", b"", delay=1.5)
    with pytest.raises(ValueError):
        q.list("t", "sleeping")


def test_reserve_touch_nack_ack_kick(q):
    q.add("t", "a", b"1", retries=1)
    q.add("t", "b", b"2")
    jobs = q.reserve("other", "t", timeout=0, count=5)
    assert [(j.topic, j.id, j.body, j.attempts) for j in jobs] == [("t", "a", b"1", 1),
                                                                  ("t", "b", b"2", 1)]
    assert jobs[0].deadline > dt.datetime.now(dt.timezone.utc)
    d = q.touch("t", "a", ttr=dt.timedelta(minutes=2))
    assert d > dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=100)
    assert q.nack("t", "a", delay=0) == "ready"
    assert q.ack("t", "b", "ghost") == 1
    assert q.reserve("t", timeout=0)[0].attempts == 2
    assert q.nack("t", "a") == "dead"
    assert q.kick("t") == 1
    assert q.reserve("empty", timeout=0) == []
    t0 = time.monotonic()
    assert q.reserve("empty", timeout=dt.timedelta(milliseconds=150)) == []
    assert time.monotonic() - t0 >= 0.14


def test_list_stats_topics_delete_purge(q):
    for i in range(25):
        q.add("l", "i%02d" % i, b"")
    cursor, ids = q.list("l", "ready", count=10)
    assert ids and cursor != "0"
    assert sorted(q.iter_ids("l", "ready", page=7)) == ["i%02d" % i for i in range(25)]
    s = q.stats("l")
    assert isinstance(s, delayq.Stats) and s.jobs_ready == 25 and s.added == 25
    assert "l" in q.topics()
    assert q.delete("l", "i00", "i01", "nope") == 2
    assert q.purge("l") == 23
    assert q.stats("l").jobs_ready == 0
    assert q.ping()
    info = q.info()
    assert isinstance(info, dict) and info


def test_auth(make_server):
    s = make_server("--requirepass", "s3cret")
    with pytest.raises(delayq.AuthError):
        Client(port=s.port).stats()
    with pytest.raises(delayq.AuthError):
        Client(port=s.port, password="wrong").stats()
    assert Client(port=s.port, password="s3cret").ping()


def test_connection_refused_is_typed():
    from conftest import free_port
    with pytest.raises(delayq.ConnectionFailed):
        Client(port=free_port()).ping()


# ---------------------------------------------------------------- Worker

class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.events = []

    def __call__(self, kind):
        def hook(job, *exc):
            with self.lock:
                self.events.append((kind, job.topic, job.id))
        return hook

    def count(self, kind):
        with self.lock:
            return sum(1 for e in self.events if e[0] == kind)


def start(worker):
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    return t


def finish(worker, thread):
    worker.stop()
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_worker_topics_hooks_and_free_slots(q):
    rec = Recorder()
    q.add("sms", "s-fail", b"fail", retries=0)
    q.add("sms", "s-retry", b"retry", retries=1, backoff=Backoff.fixed(50))
    for i in range(8):
        q.add("mail", "m%d" % i, b"ok")
    gate = threading.Event()
    running = []
    lock = threading.Lock()
    w = Worker(q, concurrency=3, poll=100, on_success=rec("success"), on_retry=rec("retry"),
               on_dead=rec("dead"))

    @w.handler("sms")
    def sms(job):
        if job.body == b"fail":
            raise RuntimeError("boom")
        if job.attempts == 1:
            raise Retry(delay=dt.timedelta(milliseconds=10))

    @w.handler("mail")
    def mail(job):
        with lock:
            running.append(job.id)
        gate.wait(20)

    th = start(w)
    # the sms jobs (first in line) fail quickly; then three mail handlers hold all three slots
    assert wait_until(lambda: len(running) == 3 and rec.count("dead") == 1
                      and rec.count("retry") == 1, timeout=20), rec.events
    s_mail = q.stats("mail")
    assert s_mail.jobs_reserved == 3 and s_mail.jobs_ready == 5  # no more than the free slots
    gate.set()
    assert wait_until(lambda: rec.count("success") == 9, timeout=20), rec.events
    finish(w, th)
    assert rec.count("retry") == 1 and rec.count("dead") == 1
    assert q.stats("mail").acked == 8 and q.stats("sms").acked == 1
    assert ("dead", "sms", "s-fail") in rec.events


def test_worker_heartbeat_keeps_a_long_job(q):
    q.add("hb", "long", b"", ttr=dt.timedelta(seconds=2))  # TOUCHed every ~0.67 s
    runs = []
    w = Worker(q, concurrency=2, poll=100)

    @w.handler("hb")
    def slow(job):
        runs.append(job.attempts)
        time.sleep(4.5)  # the work itself: longer than the lease, on purpose

    th = start(w)
    assert wait_until(lambda: q.stats("hb").acked == 1, timeout=20)
    finish(w, th)
    assert runs == [1]
    s = q.stats("hb")
    assert s.reserved == 1 and s.expired == 0


def test_worker_timeout_cancels_and_retries(q):
    q.add("to", "slow", b"", backoff=Backoff.fixed(dt.timedelta(hours=1)))
    rec = Recorder()
    w = Worker(q, timeout=200, poll=100, on_success=rec("success"), on_retry=rec("retry"))

    @w.handler("to")
    def slow(job, task):
        task.cancelled.wait(20)  # returns normally, but too late

    th = start(w)
    assert wait_until(lambda: rec.count("retry") == 1, timeout=20)
    finish(w, th)
    assert rec.count("success") == 0
    j = q.get("to", "slow")
    assert j.state == "delayed" and j.attempts == 1


def test_worker_graceful_stop_hands_back_after_grace(q):
    for i in range(3):
        q.add("gs", "g%d" % i, b"", ttr=dt.timedelta(minutes=10))
    rec = Recorder()
    started = []
    w = Worker(q, concurrency=2, grace=200, poll=100, on_success=rec("success"),
               on_retry=rec("retry"), on_dead=rec("dead"))

    @w.handler("gs")
    def hold(job, task):
        started.append(job.id)
        task.cancelled.wait(20)

    th = start(w)
    assert wait_until(lambda: len(started) == 2, timeout=20)
    finish(w, th)
    assert rec.events == []  # handed back without hooks
    s = q.stats("gs")
    assert s.jobs_ready == 3 and s.reserved == 2 and s.nacked == 2  # back at once


def test_worker_graceful_stop_lets_running_jobs_finish(q):
    for i in range(4):
        q.add("gf", "f%d" % i, b"")
    release = threading.Event()
    started = []
    w = Worker(q, concurrency=4, grace=dt.timedelta(seconds=60), poll=100)

    @w.handler("gf")
    def work(job):
        started.append(job.id)
        release.wait(20)

    th = start(w)
    assert wait_until(lambda: len(started) == 4, timeout=20)
    q.add("gf", "late", b"")
    w.stop()
    release.set()
    th.join(timeout=30)
    assert not th.is_alive()
    assert sorted(started) == ["f0", "f1", "f2", "f3"]
    s = q.stats("gf")
    assert s.acked == 4 and s.jobs_ready == 1 and s.nacked == 0
