"""`delayq work -- cmd` (DESIGN §10): real shell commands as consumers, against a real delayqd.

Every wait is on a condition with a deadline (wait_until); no test sleeps to race a timer.
"""

import os
import signal
import subprocess
import time

import pytest

from conftest import REPO, now_ms, pairs, wait_until

DELAYQ = os.environ.get("DELAYQ") or os.path.join(REPO, "build", "asan", "delayq")
SANITIZER = (b"AddressSanitizer", b"LeakSanitizer", b"runtime error:")


class Work:
    """A running `delayq work`, its stdout and stderr in files."""

    def __init__(self, port, tmp, args, cmd, env=None):
        self.out_path = os.path.join(tmp, "work.out")
        self.err_path = os.path.join(tmp, "work.err")
        e = dict(os.environ)
        e.setdefault("ASAN_OPTIONS", "detect_leaks=1")
        e.update(env or {})
        argv = [DELAYQ, "-p", str(port), "work"] + list(args) + ["--"] + list(cmd)
        with open(self.out_path, "wb") as o, open(self.err_path, "wb") as er:
            self.proc = subprocess.Popen(argv, stdout=o, stderr=er, env=e)

    def out(self):
        with open(self.out_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def err(self):
        with open(self.err_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)

    def check_clean(self):
        err = self.err().encode()
        for m in SANITIZER:
            assert m not in err, err.decode("utf-8", "replace")


@pytest.fixture
def work(server, tmp_path):
    started = []

    def factory(*args, cmd, env=None):
        w = Work(server.port, str(tmp_path), args, cmd, env)
        started.append(w)
        return w

    yield factory
    for w in started:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()
        w.check_clean()


def job(c, topic, jid):
    g = c.call("GET", topic, jid)
    return None if g is None else pairs(g)


def stats(c, topic):
    return pairs(c.call("STATS", topic))


def sh(script):
    return ["sh", "-c", script]


def lines_of(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().splitlines()


def test_usage_errors():
    for argv, words in [([], "missing --topic"), (["--topic", "t"], "missing the command"),
                        (["--topic", "t", "-c", "0", "--", "true"], "invalid -c"),
                        (["--topic", "t", "--timeout", "5x", "--", "true"], "invalid --timeout"),
                        (["--bogus", "1"], "unknown option")]:
        p = subprocess.run([DELAYQ, "work"] + argv, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=10)
        assert p.returncode == 2, (argv, p.stderr)
        assert words in p.stderr.decode(), (argv, p.stderr)
    p = subprocess.run([DELAYQ, "work", "--help"], stdout=subprocess.PIPE, timeout=10)
    assert p.returncode == 0 and b"DELAYQ_DEADLINE" in p.stdout


def test_exit_0_acks_and_output_lines_carry_topic_and_id(server, c, work, tmp_path):
    d = str(tmp_path)
    c.call("ADD", "mail", "m-1", "body one")
    c.call("ADD", "sms", "s-1", b"body\x00two")
    w = work("--topic", "mail", "--topic", "sms", "-c", "2",
             cmd=sh('cat > "$DIR/$DELAYQ_ID"; echo "out $DELAYQ_TOPIC $DELAYQ_ATTEMPT"; '
                    'echo "err line" >&2; echo "$DELAYQ_DEADLINE" > "$DIR/$DELAYQ_ID.deadline"'),
             env={"DIR": d})
    assert wait_until(lambda: stats(c, "mail")["acked"] == 1 and stats(c, "sms")["acked"] == 1,
                      timeout=20), w.err()
    assert job(c, "mail", "m-1") is None and job(c, "sms", "s-1") is None
    with open(os.path.join(d, "m-1"), "rb") as f:
        assert f.read() == b"body one"
    with open(os.path.join(d, "s-1"), "rb") as f:
        assert f.read() == b"body\x00two"  # the body on stdin, binary-safe
    assert int(lines_of(os.path.join(d, "m-1.deadline"))[0]) > now_ms() - 60000
    assert wait_until(lambda: "[sms/s-1] acked" in w.err(), timeout=10)
    out, err = w.out(), w.err()
    assert "[mail/m-1] out mail 1" in out.splitlines(), out
    assert "[sms/s-1] out sms 1" in out.splitlines(), out
    assert "[mail/m-1] err line" in err and "[sms/s-1] err line" in err, err
    assert "[mail/m-1] exit 0" in err
    assert w.stop() == 0


def test_failures_retry_with_backoff_then_dead(server, c, work, tmp_path):
    d = str(tmp_path)
    for jid, code in (("tempfail", "75"), ("other", "3")):
        c.call("ADD", "q", jid, code, "RETRIES", 2, "BACKOFF", "FIXED", 300)
    w = work("--topic", "q", "-c", "2",
             cmd=sh('read code; date +%s%3N >> "$DIR/$DELAYQ_ID"; exit "$code"'),
             env={"DIR": d})
    assert wait_until(lambda: all((job(c, "q", j) or {}).get("state") == b"dead"
                                  for j in ("tempfail", "other")), timeout=30), w.err()
    for jid in ("tempfail", "other"):
        times = [int(x) for x in lines_of(os.path.join(d, jid))]
        assert len(times) == 3, (jid, times)  # the first run and 2 retries, no more
        for a, b in zip(times, times[1:]):
            assert b - a >= 290, (jid, times)  # not before the backoff
        assert job(c, "q", jid)["attempts"] == 3
    # the hooks' lines follow the server's answer
    assert wait_until(lambda: "[q/tempfail] dead" in w.err() and "[q/other] dead" in w.err(),
                      timeout=10), w.err()
    err = w.err()
    assert "[q/tempfail] exit 75" in err and "[q/other] exit 3" in err
    assert err.count("[q/tempfail] retry") == 2 and err.count("[q/other] retry") == 2, err
    assert stats(c, "q")["acked"] == 0
    assert w.stop() == 0


def test_hanging_command_is_killed_at_the_timeout_and_retried(server, c, work, tmp_path):
    d = str(tmp_path)
    c.call("ADD", "q", "hang", "x", "RETRIES", 1, "BACKOFF", "FIXED", 10)
    w = work("--topic", "q", "--timeout", "400ms",
             cmd=sh('date +%s%3N >> "$DIR/start"; sleep 1000; echo never >> "$DIR/end"'),
             env={"DIR": d})
    assert wait_until(lambda: (job(c, "q", "hang") or {}).get("state") == b"dead",
                      timeout=30), w.err()
    assert len(lines_of(os.path.join(d, "start"))) == 2  # ran, was killed, ran again
    assert not os.path.exists(os.path.join(d, "end"))
    err = w.err()
    assert err.count("[q/hang] cancelled (timeout or stop): SIGTERM") == 2, err
    assert "[q/hang] killed by signal 15" in err
    # killed and handed back, not left to the 30 s lease
    assert stats(c, "q")["expired"] == 0 and stats(c, "q")["nacked"] == 2
    assert w.stop() == 0


def test_command_ignoring_sigterm_is_killed(server, c, work, tmp_path):
    d = str(tmp_path)
    c.call("ADD", "q", "stubborn", "x", "RETRIES", 0)
    w = work("--topic", "q", "--timeout", "300ms", "--kill-after", "300ms",
             cmd=sh('trap "" TERM; echo started >> "$DIR/start"; '
                    'while :; do sleep 0.05; done'), env={"DIR": d})
    assert wait_until(lambda: (job(c, "q", "stubborn") or {}).get("state") == b"dead",
                      timeout=30), w.err()
    assert wait_until(lambda: "[q/stubborn] dead" in w.err(), timeout=10), w.err()
    err = w.err()
    assert "[q/stubborn] cancelled (timeout or stop): SIGTERM" in err
    assert "[q/stubborn] still running: SIGKILL" in err
    assert "[q/stubborn] killed by signal 9" in err, err
    assert lines_of(os.path.join(d, "start")) == ["started"]
    assert w.stop() == 0


def test_command_longer_than_ttr_is_not_delivered_twice(server, c, work, tmp_path):
    d = str(tmp_path)
    c.call("ADD", "q", "long", "x", "TTR", 2000)  # TOUCHed every ~0.67 s: 1.3 s of slack
    # two slots: a redelivery would have somewhere to run
    w = work("--topic", "q", "-c", "2",
             cmd=sh('echo "$DELAYQ_ATTEMPT" >> "$DIR/runs"; sleep 4.5'), env={"DIR": d})
    assert wait_until(lambda: stats(c, "q")["acked"] == 1, timeout=30), w.err()
    assert lines_of(os.path.join(d, "runs")) == ["1"]
    s = stats(c, "q")
    assert s["reserved"] == 1 and s["expired"] == 0, s
    assert w.stop() == 0


def test_sigterm_lets_four_running_jobs_finish(server, c, work, tmp_path):
    d = str(tmp_path)
    for i in range(4):
        c.call("ADD", "q", "run-%d" % i, "x")
    w = work("--topic", "q", "-c", "4", "--grace", "60s",
             cmd=sh('echo "$DELAYQ_ATTEMPT" >> "$DIR/$DELAYQ_ID.start"; '
                    'while [ ! -e "$DIR/go" ]; do sleep 0.05; done; '
                    'echo done >> "$DIR/$DELAYQ_ID.done"'),
             env={"DIR": d})
    assert wait_until(lambda: all(os.path.exists(os.path.join(d, "run-%d.start" % i))
                                  for i in range(4)), timeout=20), w.err()
    for i in range(4):  # waiting behind four busy slots: never reserved
        c.call("ADD", "q", "wait-%d" % i, "x")
    w.proc.send_signal(signal.SIGTERM)
    assert wait_until(lambda: "stopping" in w.err(), timeout=10), w.err()
    assert w.proc.poll() is None  # still waiting for the four
    open(os.path.join(d, "go"), "w").close()
    assert w.proc.wait(timeout=30) == 0
    for i in range(4):
        assert lines_of(os.path.join(d, "run-%d.start" % i)) == ["1"]
        assert lines_of(os.path.join(d, "run-%d.done" % i)) == ["done"]
        assert job(c, "q", "run-%d" % i) is None
        j = job(c, "q", "wait-%d" % i)
        assert j["state"] == b"ready" and j["attempts"] == 0
    s = stats(c, "q")
    assert s["acked"] == 4 and s["reserved"] == 4 and s["nacked"] == 0, s


def test_sigterm_past_the_grace_hands_jobs_back_at_once(server, c, work, tmp_path):
    d = str(tmp_path)
    c.call("ADD", "q", "slow", "x", "TTR", 600000)  # a 10-minute lease
    w = work("--topic", "q", "--grace", "200ms",
             cmd=sh('echo "$$" > "$DIR/pid"; sleep 1000'), env={"DIR": d})
    assert wait_until(lambda: os.path.exists(os.path.join(d, "pid")), timeout=20), w.err()
    w.proc.send_signal(signal.SIGTERM)
    assert w.proc.wait(timeout=30) == 0
    j = job(c, "q", "slow")
    assert j["state"] == b"ready" and j["attempts"] == 1  # back now, not in 10 minutes
    assert "[q/slow] cancelled (timeout or stop): SIGTERM" in w.err()


def test_kill_9_jobs_come_back_after_their_lease(server, c, work, tmp_path):
    d = str(tmp_path)
    for i in range(2):
        c.call("ADD", "q", "j%d" % i, "x", "TTR", 1500)
    w = work("--topic", "q", "-c", "2",
             cmd=sh('echo "$$" >> "$DIR/pids"; exec sleep 1000'), env={"DIR": d})
    try:
        assert wait_until(lambda: len(lines_of(os.path.join(d, "pids"))) == 2, timeout=20)
        w.proc.kill()
        w.proc.wait()
        deadlines = [job(c, "q", "j%d" % i)["deadline"] for i in range(2)]
        assert wait_until(lambda: all(job(c, "q", "j%d" % i)["state"] == b"ready"
                                      for i in range(2)), timeout=20)
        assert now_ms() >= min(deadlines)  # not before the lease ended
        assert stats(c, "q")["expired"] == 2
    finally:
        for pid in lines_of(os.path.join(d, "pids")):
            try:
                os.killpg(int(pid), signal.SIGKILL)  # the orphaned commands
            except ProcessLookupError:
                pass
    w2 = work("--topic", "q", "-c", "2", cmd=["true"])
    assert wait_until(lambda: stats(c, "q")["acked"] == 2, timeout=20), w2.err()
    assert w2.stop() == 0
