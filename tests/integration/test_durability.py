"""Durability of the embedded store (issue 3): kill -9 under pipelined load, torn tails,
a corrupt middle, injected disk-full / I/O / fsync failures, leases across a restart,
compaction that nothing pins.

Environment: DELAYQ_KILL_ROUNDS (default 8) rounds of kill -9 per fsync mode;
DELAYQ_PIN_JOBS (default 400000) add+ack pairs in the compaction test.
"""

import glob
import os
import random
import signal
import threading
import time

import pytest

from conftest import (ConnectionClosed, RespConn, RespError, encode_command, now_ms, pairs,
                      wait_until)

pytestmark = pytest.mark.stores("embedded")

ROUNDS = int(os.environ.get("DELAYQ_KILL_ROUNDS", "8"))
HOUR = 3600 * 1000
FAR = now_ms() + 30 * 24 * HOUR


def segments(srv):
    return sorted(glob.glob(os.path.join(srv.data_dir, "*.log")))


def dir_bytes(srv):
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(srv.data_dir, "*")))


def get(c, topic, id_):
    rep = c.call("GET", topic, id_)
    return None if rep is None else pairs(rep)


def log_since(srv, mark):
    return srv.log()[mark:]


class Pump(threading.Thread):
    """Pipelines batches of ADD / DEL / ACK / RESERVE at the server until the connection
    dies, recording which commands got a reply (the acknowledged ones)."""

    def __init__(self, port, prefix, seed, batch=64):
        super().__init__(daemon=True)
        self.conn = RespConn(port, timeout=10)
        self.prefix = prefix
        self.rng = random.Random(seed)
        self.batch = batch
        self.added = {}        # id -> (body, due): ADD acknowledged
        self.removed = set()   # ids whose DEL/ACK was acknowledged (and existed)
        self.touched = set()   # ids a DEL/ACK was sent for (outcome may be unknown)
        self.acked_work = set()
        self.stop_flag = False
        self.n = 0
        self.error = None

    def run(self):
        try:
            self._run()
        except (ConnectionClosed, OSError):
            pass
        except Exception as e:  # pragma: no cover - reported by the test
            self.error = e

    def _run(self):
        rng = self.rng
        while not self.stop_flag:
            cmds = []
            for _ in range(self.batch):
                r = rng.random()
                live = [i for i in self.added if i not in self.touched]
                if r < 0.65 or not live:
                    self.n += 1
                    id_ = "%s-%d" % (self.prefix, self.n)
                    body = ("%s:" % id_).encode() + os.urandom(rng.randrange(0, 300))
                    due = now_ms() + rng.randrange(HOUR, 24 * HOUR)
                    cmds.append(("add", id_, body, due))
                elif r < 0.9:
                    id_ = rng.choice(live)
                    self.touched.add(id_)
                    cmds.append((rng.choice(["del", "ack"]), id_, None, None))
                else:
                    self.n += 1
                    cmds.append(("work", "%s-w%d" % (self.prefix, self.n), b"w", None))
            out = []
            for op, id_, body, due in cmds:
                if op == "add":
                    out.append(encode_command("ADD", "dur", id_, body, "AT", due))
                elif op == "del":
                    out.append(encode_command("DEL", "dur", id_))
                elif op == "ack":
                    out.append(encode_command("ACK", "dur", id_))
                else:
                    out.append(encode_command("ADD", "work", id_, body))
                    out.append(encode_command("RESERVE", "TIMEOUT", 0, "FROM", "work"))
                    out.append(encode_command("ACK", "work", id_))
            self.conn.send_raw(b"".join(out))
            for op, id_, body, due in cmds:
                rep = self.conn.read()
                assert not isinstance(rep, RespError), (op, rep)
                if op == "add":
                    assert rep == id_.encode(), rep
                    self.added[id_] = (body, due)
                elif op in ("del", "ack"):
                    assert rep == 1, (op, id_, rep)
                    self.removed.add(id_)
                else:
                    self.conn.read()
                    rep = self.conn.read()
                    if rep == 1:
                        self.acked_work.add(id_)


def check_state(srv, expect_present, expect_gone, work_gone=()):
    c = RespConn(srv.port, timeout=30)
    try:
        for id_, (body, due) in expect_present.items():
            job = get(c, "dur", id_)
            assert job is not None, "acknowledged ADD %s lost" % id_
            assert job["body"] == body, id_
            assert job["due"] == due, id_
        for id_ in expect_gone:
            assert get(c, "dur", id_) is None, "acknowledged DEL/ACK %s came back" % id_
        for id_ in work_gone:
            assert get(c, "work", id_) is None, "acknowledged ACK of %s came back" % id_
    finally:
        c.close()


@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_kill9_under_load(make_server, fsync):
    """Many rounds: pipelined load, kill -9 at a random moment, restart, and every
    acknowledged ADD is there with its body and due time, every acknowledged DEL/ACK
    stays gone. (kill -9 keeps the page cache, so everysec must lose nothing either.)"""
    srv = make_server("--fsync", fsync)
    rng = random.Random(1234)
    present, gone, work_gone = {}, set(), set()
    for rnd in range(ROUNDS):
        pumps = [Pump(srv.port, "r%d-%d" % (rnd, k), rnd * 10 + k) for k in range(3)]
        for p in pumps:
            p.start()
        time.sleep(rng.uniform(0.05, 0.6))
        srv.kill()
        for p in pumps:
            p.join(10)
            assert not p.is_alive()
            assert p.error is None, p.error
            for id_, v in p.added.items():
                if id_ not in p.touched:
                    present[id_] = v
            gone |= p.removed
            work_gone |= p.acked_work
            p.conn.close()
        srv.start()
        check_state(srv, present, gone, work_gone)
    assert len(present) > 100 and len(gone) > 50


def test_kill9_during_compaction(make_server):
    """Big bodies make the log pass the compaction threshold several times while the
    server is killed at random moments; nothing acknowledged is lost either way. (Every job in
    RAM and the log: test_tier.py has the same test for far segments.)"""
    srv = make_server("--fsync", "everysec", "--memory-horizon", "0")
    present, gone = {}, set()
    big = b"x" * 20000
    rng = random.Random(7)
    for rnd in range(4):
        c = RespConn(srv.port, timeout=30)
        ids = []
        for i in range(0, 1200, 100):
            cmds = []
            for k in range(i, i + 100):
                ids.append("c%d-%d" % (rnd, k))
                cmds.append(encode_command("ADD", "dur", ids[-1], big, "AT", FAR))
            c.send_raw(b"".join(cmds))
            for k in range(100):
                assert c.read() == ids[i + k].encode()
        for id_ in ids[: len(ids) - 5]:
            assert c.call("DEL", "dur", id_) == 1
            gone.add(id_)
        for id_ in ids[len(ids) - 5:]:
            present[id_] = (big, FAR)
        time.sleep(rng.uniform(0, 0.05))
        srv.kill()
        c.close()
        srv.start()
        check_state(srv, present, gone)
    # Each kill may have hit a compaction in progress (likely on a loaded machine), and one is
    # only started by a write: keep writing until one has run to its end.
    c = srv.raw()

    def compacted():
        assert c.call("ADD", "dur", "tick", "x", "REPLACE") == b"tick"
        return "compaction done" in srv.log() and dir_bytes(srv) < 40 << 20
    assert wait_until(compacted, timeout=30, interval=0.05), "no compaction after the kills"
    check_state(srv, present, gone)


def test_leases_survive_restart(make_server):
    srv = make_server("--fsync", "always")
    c = srv.raw()
    assert c.call("ADD", "t", "j", "body", "TTR", 600000) == b"j"
    job = c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")[0]
    deadline = job[4]
    c.close()
    srv.kill()
    srv.start()
    c = srv.raw()
    g = get(c, "t", "j")
    assert g["state"] == b"reserved"
    assert g["attempts"] == 1
    assert g["deadline"] == deadline
    assert c.call("TOUCH", "t", "j") >= deadline
    assert c.call("ACK", "t", "j") == 1
    c.close()
    srv.kill()
    srv.start()
    c = srv.raw()
    assert get(c, "t", "j") is None
    c.close()


def test_sigterm_restart_keeps_everything(make_server):
    srv = make_server()
    c = srv.raw()
    for i in range(50):
        c.call("ADD", "a", "j%d" % i, "b%d" % i, "DELAY", 0 if i % 2 else 600000,
               "RETRIES", 0)
    got = c.call("RESERVE", "COUNT", 10, "TIMEOUT", 0, "FROM", "a")
    assert len(got) == 10
    assert c.call("NACK", "a", got[0][1]) == b"dead"
    assert c.call("KICK", "a") == 1
    assert c.call("DEL", "a", "j0") == 1
    before = {i: get(c, "a", "j%d" % i) for i in range(50)}
    stats = pairs(c.call("STATS"))
    c.close()
    assert srv.restart() == 0
    c = srv.raw()
    after = {i: get(c, "a", "j%d" % i) for i in range(50)}
    assert after == before
    stats2 = pairs(c.call("STATS"))
    for k in ("added", "reserved", "acked", "nacked", "dead", "deleted", "kicked",
              "jobs_delayed", "jobs_reserved", "jobs_dead"):
        assert stats2[k] == stats[k], k
    c.close()


def test_ready_order_survives_restart(make_server):
    """Ready jobs are handed out by due time after a restart too (the snapshot and the
    log hold them in other orders)."""
    srv = make_server()
    c = srv.raw()
    t = now_ms() + 300
    order = list(range(40))
    random.Random(3).shuffle(order)
    for i in order:
        c.call("ADD", "o", "j%02d" % i, "x", "AT", t + i * 10)
    time.sleep(0.8)
    assert pairs(c.call("STATS", "o"))["jobs_ready"] == 40
    c.close()
    srv.kill()
    srv.start()
    c = srv.raw()
    got = c.call("RESERVE", "COUNT", 40, "TIMEOUT", 0, "FROM", "o")
    assert [j[1] for j in got] == [b"j%02d" % i for i in range(40)]
    c.close()


def test_torn_tail_is_truncated(make_server):
    srv = make_server("--fsync", "always")
    c = srv.raw()
    for i in range(20):
        assert c.call("ADD", "t", "j%d" % i, "body", "DELAY", HOUR) == b"j%d" % i
    c.close()
    srv.kill()
    seg = segments(srv)[-1]
    size = os.path.getsize(seg)
    with open(seg, "ab") as f:
        f.write(b"\x11\x22\x33\x44\x99\x00\x00\x00\x01partial")  # a record cut short
    mark = len(srv.log())
    srv.start()
    assert "torn tail" in log_since(srv, mark)
    assert os.path.getsize(seg) == size
    c = srv.raw()
    for i in range(20):
        assert get(c, "t", "j%d" % i) is not None
    assert c.call("ADD", "t", "after", "x") == b"after"
    c.close()
    srv.kill()
    srv.start()
    c = srv.raw()
    assert get(c, "t", "after") is not None
    c.close()


def test_corrupt_middle_refuses_then_repairs(make_server):
    srv = make_server("--fsync", "always")
    c = srv.raw()
    for i in range(20):
        c.call("ADD", "t", "j%02d" % i, "body-%02d" % i, "DELAY", HOUR)
    c.close()
    srv.stop()
    seg = segments(srv)[-1]
    data = bytearray(open(seg, "rb").read())
    at = data.find(b"body-10")
    data[at] ^= 0xFF
    open(seg, "wb").write(bytes(data))
    mark = len(srv.log())
    with pytest.raises(RuntimeError):
        srv.start(timeout=5)
    msg = log_since(srv, mark)
    assert os.path.basename(seg) in msg and "offset" in msg and "--repair" in msg
    assert os.path.getsize(seg) == len(data)  # untouched without --repair
    srv.extra.append("--repair")
    mark = len(srv.log())
    srv.start()
    assert "repair" in log_since(srv, mark)
    c = srv.raw()
    for i in range(20):
        assert (get(c, "t", "j%02d" % i) is not None) == (i < 10), i
    c.close()
    srv.stop()
    srv.extra.remove("--repair")
    srv.start()  # repaired for good


def test_disk_full_then_space_returns(make_server, tmp_path, monkeypatch):
    fault = tmp_path / "fault"
    monkeypatch.setenv("DELAYQ_FAULT_FILE", str(fault))
    srv = make_server("--fsync", "always")
    c = srv.raw()
    assert c.call("ADD", "t", "kept", "body", "DELAY", HOUR) == b"kept"
    assert c.call("ADD", "t", "ready", "body") == b"ready"
    fault.write_text("enospc")
    # the failing write: a pipelined batch of changes all fail, nothing changes
    c.send_raw(encode_command("ADD", "t", "lost", "x") + encode_command("DEL", "t", "kept") +
               encode_command("GET", "t", "kept"))
    r1, r2, r3 = c.read(), c.read(), c.read()
    assert isinstance(r1, RespError) and r1.code == "IOERR", r1
    assert isinstance(r2, RespError) and r2.code == "IOERR", r2
    assert get(c, "t", "kept") is not None  # reads go on
    assert get(c, "t", "lost") is None
    rep = c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")
    assert isinstance(rep, RespError) and rep.code == "IOERR", rep
    stats = pairs(c.call("STATS"))
    assert stats["jobs_ready"] + stats["jobs_delayed"] == 2
    assert b"log_writable:0" in c.call("INFO")
    fault.unlink()
    assert wait_until(lambda: c.call("ADD", "t", "later", "x") == b"later", timeout=5)
    assert b"log_writable:1" in c.call("INFO")
    c.close()
    srv.kill()
    srv.start()
    c = srv.raw()
    assert get(c, "t", "kept") is not None
    assert get(c, "t", "later") is not None
    assert get(c, "t", "lost") is None
    c.close()


@pytest.mark.parametrize("fault_kind", ["eio", "fsync"])
def test_io_errors_fail_the_batch(make_server, tmp_path, monkeypatch, fault_kind):
    fault = tmp_path / "fault"
    monkeypatch.setenv("DELAYQ_FAULT_FILE", str(fault))
    srv = make_server("--fsync", "always")
    c = srv.raw()
    assert c.call("ADD", "t", "a", "x") == b"a"
    fault.write_text(fault_kind)
    rep = c.call("ADD", "t", "b", "x")
    assert isinstance(rep, RespError) and rep.code == "IOERR", rep
    assert get(c, "t", "b") is None
    fault.unlink()
    assert wait_until(lambda: c.call("ADD", "t", "c", "x") == b"c", timeout=5)
    c.close()
    srv.kill()
    srv.start()
    c = srv.raw()
    assert get(c, "t", "a") is not None and get(c, "t", "c") is not None
    assert get(c, "t", "b") is None
    c.close()


def test_expiries_while_disk_full(make_server, tmp_path, monkeypatch):
    """Leases end while the log cannot be written: the engine moves on, the records wait
    and are written when space returns."""
    fault = tmp_path / "fault"
    monkeypatch.setenv("DELAYQ_FAULT_FILE", str(fault))
    srv = make_server("--fsync", "always")
    c = srv.raw()
    c.call("ADD", "t", "j", "x", "TTR", 100, "RETRIES", 5)
    assert len(c.call("RESERVE", "TIMEOUT", 0, "FROM", "t")) == 1
    fault.write_text("enospc")
    assert wait_until(lambda: get(c, "t", "j")["state"] == b"ready", timeout=3)
    fault.unlink()
    assert wait_until(lambda: c.call("ADD", "t", "k", "x") == b"k", timeout=5)
    c.close()
    srv.kill()
    srv.start()
    c = srv.raw()
    g = get(c, "t", "j")
    assert g["state"] == b"ready" and g["attempts"] == 1
    assert pairs(c.call("STATS"))["expired"] == 1
    c.close()


def test_long_delayed_job_pins_nothing(make_server):
    """add+ack of 200-byte jobs with one job due in 30 days: the directory stays small
    (issue 3: 400k jobs, < 40 MB)."""
    n = int(os.environ.get("DELAYQ_PIN_JOBS", "400000"))
    srv = make_server("--fsync", "no")
    c = RespConn(srv.port, timeout=60)
    assert c.call("ADD", "far", "x", "30 days", "DELAY", 30 * 86400 * 1000) == b"x"
    body = b"b" * 200
    peak = 0
    for start in range(0, n, 500):
        cmds = []
        for i in range(start, min(n, start + 500)):
            cmds.append(encode_command("ADD", "q", "j%d" % i, body))
            cmds.append(encode_command("ACK", "q", "j%d" % i))
        c.send_raw(b"".join(cmds))
        for _ in range(len(cmds)):
            assert not isinstance(c.read(), RespError)
        if start % 20000 == 0:
            peak = max(peak, dir_bytes(srv))
    peak = max(peak, dir_bytes(srv))
    assert peak < 40 << 20, peak
    assert not os.path.exists(os.path.join(srv.data_dir, "00000001.log"))
    c.close()
    srv.kill()
    srv.start()
    c = srv.raw()
    assert get(c, "far", "x") is not None
    assert pairs(c.call("STATS"))["jobs_delayed"] == 1
    c.close()


def test_second_server_on_same_dir_refused(make_server):
    srv = make_server()
    from conftest import Server
    other = Server(os.path.dirname(srv.data_dir) + "-other", extra=())
    other.data_dir = srv.data_dir
    with pytest.raises(RuntimeError):
        other.start(timeout=3)
    assert "in use by another delayqd" in other.log()
