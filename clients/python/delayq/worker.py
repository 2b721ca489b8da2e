"""delayq.worker -- consume jobs with handlers in threads (docs/workers.md).

The same semantics as libdelayq's worker:

- up to `concurrency` handlers run at once, each in its own thread; the worker RESERVEs only as
  many jobs as it has free slots;
- while a handler runs, its job's lease is renewed (TOUCH) every `heartbeat` fraction of the lease,
  so a long job is not delivered to anyone else; the heartbeat stops when the handler returns;
- a handler that returns ACKs the job (then on_success); one that raises NACKs it, with the
  job's backoff or with `Retry(delay)`'s delay (then on_retry, or on_dead if no retries were left);
- past `timeout`, the task's `cancelled` event is set and its heartbeat stops; whatever the handler
  then does, the job is NACKed. Python cannot kill a thread: a handler should watch the event;
- stop() (or SIGTERM/SIGINT with run(install_signals=True)) reserves nothing more, lets running
  handlers finish for up to `grace`, then hands every unfinished job back at once (NACK DELAY 0,
  no hook) and returns once those handlers have returned (their results are ignored).
"""

import datetime as _dt
import signal
import threading
import time

from .client import Client, DelayqError, NotReservedError, duration_ms


class Retry(Exception):
    """Raise from a handler to retry the job after `delay` (timedelta or ms) instead of its backoff."""

    def __init__(self, delay=None):
        super().__init__("retry requested")
        self.delay_ms = None if delay is None else duration_ms(delay, "retry delay")


class Task:
    """A job being handled: `job`, and `cancelled`, a threading.Event set at the timeout or
    when a stop's grace ends."""

    def __init__(self, job, next_touch):
        self.job = job
        self.cancelled = threading.Event()
        self.started = time.monotonic()
        self.state = "queued"  # queued, running, finishing, abandoned
        self.timed_out = False
        self.next_touch = next_touch  # monotonic seconds


def _seconds(d):
    if d is None:
        return None
    if isinstance(d, _dt.timedelta):
        return d.total_seconds()
    return duration_ms(d) / 1000.0


class Worker:
    """Worker(client, concurrency=1, timeout=None, grace=30 s, heartbeat=1/3, poll=0.5 s).

    Register handlers per topic with the decorator:

        w = Worker(Client(port=7700), concurrency=8)

        @w.handler("orders")
        def cancel_if_unpaid(job): ...

        w.run()            # until w.stop(), SIGTERM or SIGINT

    Durations are timedelta or int milliseconds. Hooks: on_success(job), on_retry(job, exc),
    on_dead(job, exc), where exc is what the handler raised (None after a timeout)."""

    def __init__(self, client=None, concurrency=1, timeout=None, grace=30000, heartbeat=1 / 3,
                 poll=500, on_success=None, on_retry=None, on_dead=None, log=None):
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not 0 < heartbeat < 1:
            raise ValueError("heartbeat must be a fraction of the lease, between 0 and 1")
        self.client = client or Client()
        self.concurrency = concurrency
        self.timeout = _seconds(timeout)
        self.grace = _seconds(grace)
        self.heartbeat = heartbeat
        self.poll_ms = duration_ms(poll, "poll")
        self.on_success = on_success
        self.on_retry = on_retry
        self.on_dead = on_dead
        self.log = log or (lambda msg: None)
        self._handlers = {}
        self._cv = threading.Condition()
        self._tasks = []
        self._stopping = False
        self._exiting = False

    # --- registration

    def handler(self, topic):
        """Decorator: fn(job) handles the jobs of `topic` (fn(job, task) if it takes two
        arguments, to watch task.cancelled)."""
        def register(fn):
            self._handlers[topic] = fn
            return fn
        return register

    # --- control

    def stop(self):
        """Asks run() to stop gracefully. Thread-safe; callable from a signal handler."""
        self._stopping = True
        threading.Thread(target=self._wake, daemon=True).start()

    def _wake(self):
        with self._cv:
            self._cv.notify_all()

    def run(self, install_signals=False):
        """Consumes until stop(); then stops gracefully and returns."""
        if not self._handlers:
            raise ValueError("no handler registered")
        old = {}
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                old[sig] = signal.signal(sig, lambda s, f: self.stop())
        self._stopping = False
        self._exiting = False
        threads = [threading.Thread(target=self._heartbeat, name="delayq-heartbeat", daemon=True)]
        for i in range(self.concurrency):
            threads.append(threading.Thread(target=self._slot, name="delayq-slot-%d" % i,
                                            daemon=True))
        for t in threads:
            t.start()
        try:
            self._dispatch()
            self._stop_phase()
        finally:
            with self._cv:
                self._exiting = True
                self._cv.notify_all()
            for t in threads:
                t.join()
            for sig, h in old.items():
                signal.signal(sig, h)

    # --- the dispatcher

    def _dispatch(self):
        topics = list(self._handlers)
        pause = 0.0
        while True:
            with self._cv:
                while not self._stopping and len(self._tasks) >= self.concurrency:
                    self._cv.wait()
                if self._stopping:
                    return
                free = self.concurrency - len(self._tasks)
            try:
                jobs = self.client.reserve(*topics, timeout=self.poll_ms, count=free)
                pause = 0.0
            except DelayqError as e:
                self.log("RESERVE: %s" % e)
                pause = min(2.0, pause * 2 or 0.1)
                with self._cv:
                    self._cv.wait_for(lambda: self._stopping, timeout=pause)
                continue
            with self._cv:
                if self._stopping:
                    for j in jobs:
                        self._hand_back(j)
                    return
                now = time.monotonic()
                for j in jobs:
                    self._tasks.append(Task(j, now + self._touch_every(j.deadline_ms)))
                self._cv.notify_all()

    def _touch_every(self, deadline_ms):
        lease = deadline_ms / 1000.0 - time.time()
        return max(0.01, lease * self.heartbeat)

    def _hand_back(self, job):
        try:
            self.client.nack(job.topic, job.id, delay=0)
        except NotReservedError:
            pass
        except DelayqError as e:
            self.log("handing %s/%s back: %s" % (job.topic, job.id, e))

    def _stop_phase(self):
        until = time.monotonic() + (self.grace or 0)
        with self._cv:
            while self._tasks and time.monotonic() < until:
                self._cv.wait(timeout=until - time.monotonic())
            back = []
            for t in self._tasks:
                if t.state in ("queued", "running"):
                    t.state = "abandoned"
                    t.cancelled.set()
                    back.append(t.job)
        for j in back:
            self._hand_back(j)
        with self._cv:
            while self._tasks:
                self._cv.wait()

    # --- the slots

    def _slot(self):
        while True:
            with self._cv:
                task = None
                while not self._exiting:
                    task = next((t for t in self._tasks if t.state == "queued"), None)
                    if task:
                        break
                    self._cv.wait()
                if not task:
                    return
                task.state = "running"
                task.started = time.monotonic()  # the timeout counts from here
                self._cv.notify_all()  # the heartbeat times it
            self._run_task(task)
            with self._cv:
                self._tasks.remove(task)
                self._cv.notify_all()

    def _run_task(self, task):
        job = task.job
        fn = self._handlers.get(job.topic)
        exc = None
        try:
            if fn.__code__.co_argcount >= 2:
                fn(job, task)
            else:
                fn(job)
        except Exception as e:  # the handler failed: retry
            exc = e
        with self._cv:
            if task.state == "abandoned":
                return  # handed back at the end of the grace
            task.state = "finishing"
            timed_out = task.timed_out
        try:
            if exc is None and not timed_out:
                self.client.ack(job.topic, job.id)
                if self.on_success:
                    self.on_success(job)
                return
            delay = exc.delay_ms if isinstance(exc, Retry) else None
            state = self.client.nack(job.topic, job.id, delay=delay)
            hook = self.on_dead if state == "dead" else self.on_retry
        except DelayqError as e:
            self.log("answering %s/%s: %s" % (job.topic, job.id, e))
            exc, hook = e, self.on_retry
        if hook:
            hook(job, exc)

    # --- the heartbeat

    def _heartbeat(self):
        while True:
            with self._cv:
                if self._exiting:
                    return
                now = time.monotonic()
                todo, wake = [], now + 1.0
                for t in self._tasks:
                    if t.state not in ("queued", "running") or t.timed_out:
                        continue
                    timed = self.timeout is not None and t.state == "running"
                    if timed and now >= t.started + self.timeout:
                        t.timed_out = True
                        t.cancelled.set()
                        continue
                    if now >= t.next_touch:
                        todo.append(t)
                        t.next_touch = now + 0.1  # until the reply says
                    wake = min(wake, t.next_touch)
                    if timed:
                        wake = min(wake, t.started + self.timeout)
                if not todo:
                    self._cv.wait(timeout=max(0.0, wake - now))
                    continue
            for t in todo:
                try:
                    deadline = self.client.touch(t.job.topic, t.job.id)
                except NotReservedError:
                    continue
                except DelayqError as e:
                    self.log("TOUCH %s/%s: %s" % (t.job.topic, t.job.id, e))
                    continue
                with self._cv:
                    t.next_touch = time.monotonic() + self._touch_every(
                        deadline.timestamp() * 1000)
