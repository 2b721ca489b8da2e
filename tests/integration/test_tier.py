"""Jobs beyond RAM (issue 11, DESIGN §12): with --memory-horizon, jobs due later live in far
segments on disk with only their id in RAM; every command behaves as before for them, they are
loaded ahead of their window and delivered on time, a loaded segment is deleted, and they survive
restarts and kill -9."""

import glob
import os
import random
import signal
import time
import urllib.request

import pytest

from conftest import now_ms, pairs, wait_until

pytestmark = pytest.mark.stores("embedded")

HOUR = 3600 * 1000
DAY = 24 * HOUR


def info(c):
    text = c.call("INFO")
    out = {}
    for line in text.decode().splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v
    return out


def far_files(srv):
    return sorted(glob.glob(os.path.join(srv.data_dir, "far", "*.far")))


def get(c, topic, id_):
    rep = c.call("GET", topic, id_)
    return None if rep is None else pairs(rep)


def scan_all(c, topic, state, count=7):
    seen, cursor = [], 0
    while True:
        cur, ids = c.call("LIST", topic, state, "COUNT", count, "CURSOR", cursor)
        cursor = int(cur)
        if cursor:
            assert ids, "empty LIST page before the end"
        seen += [x.decode() for x in ids]
        if cursor == 0:
            return seen


def test_far_jobs_behave_like_any_other(make_server):
    srv = make_server("--memory-horizon", "1h")
    c = srv.raw()
    t0 = now_ms()
    body = b"far\x00body\r\n" * 3
    for k in range(50):
        assert c.call("ADD", "f", "j%d" % k, body, "AT", t0 + 30 * DAY + k, "TTR", 5000,
                      "RETRIES", 7, "BACKOFF", "FIXED", 250) == b"j%d" % k
    assert c.call("ADD", "f", "near", "n", "DELAY", 60000) == b"near"
    i = info(c)
    assert int(i["jobs_on_disk"]) == 50 and int(i["jobs_in_ram"]) == 1, i
    assert int(i["far_segments"]) == 1 and len(far_files(srv)) == 1
    # GET reads the whole job from disk
    g = get(c, "f", "j3")
    assert g["state"] == b"delayed" and g["body"] == body and g["due"] == t0 + 30 * DAY + 3
    assert (g["ttr"], g["retries"], g["attempts"]) == (5000, 7, 0)
    assert t0 <= g["created"] <= now_ms()
    # EXISTS, REPLACE (far -> far, far -> near), DEL, STATS, LIST
    assert c.call("ADD", "f", "j1", "x", "DELAY", 40 * DAY).code == "EXISTS"
    assert c.call("ADD", "f", "j1", "replaced", "DELAY", 40 * DAY, "REPLACE") == b"j1"
    assert get(c, "f", "j1")["body"] == b"replaced"
    assert c.call("ADD", "f", "j2", "now-near", "REPLACE") == b"j2"
    assert get(c, "f", "j2")["state"] == b"ready"
    assert c.call("DEL", "f", "j4", "j5", "nope") == 2
    assert get(c, "f", "j4") is None
    st = pairs(c.call("STATS", "f"))
    assert st["jobs_delayed"] == 48 and st["jobs_ready"] == 1, st
    assert st["added"] == 53 and st["deleted"] == 2
    ids = scan_all(c, "f", "delayed", 1)
    assert set(ids) == {"j%d" % k for k in range(50)} - {"j2", "j4", "j5"} | {"near"}
    assert c.call("NACK", "f", "j7").code == "NOTRESERVED"
    assert c.call("TOPICS") == [b"f"]
    # everything survives a restart, and a kill -9
    srv.restart()
    c = srv.raw()
    assert get(c, "f", "j3")["body"] == body
    assert get(c, "f", "j1")["body"] == b"replaced"
    assert get(c, "f", "j4") is None
    srv.stop(signal.SIGKILL)
    srv.start()
    c = srv.raw()
    assert pairs(c.call("STATS", "f"))["jobs_delayed"] == 48
    assert int(info(c)["jobs_on_disk"]) == 47
    # new far jobs after a restart go to a new segment; PURGE takes them all
    assert c.call("ADD", "f", "late", "l", "DELAY", 20 * DAY) == b"late"
    assert get(c, "f", "late")["body"] == b"l"
    assert c.call("PURGE", "f") == 50  # 48 delayed, j2 ready, late
    assert int(info(c)["jobs_on_disk"]) == 0
    assert get(c, "f", "j3") is None
    srv.restart()
    c = srv.raw()
    assert pairs(c.call("STATS", "f"))["jobs_delayed"] == 0


def test_far_jobs_load_ahead_and_arrive_on_time(make_server):
    """A tiny horizon: jobs go to disk, their windows open while the test runs, they are
    loaded into the wheel ahead of time and handed out on time; loaded segments are deleted."""
    srv = make_server("--memory-horizon", "300ms")
    c = srv.raw()
    t0 = now_ms()
    due = {}
    for k in range(300):
        d = t0 + 1500 + k * 7  # windows of 300 ms, opening 300 ms ahead
        due["d%d" % k] = d
        c.send("ADD", "w", "d%d" % k, "b%d" % k, "AT", d)
    for k in range(300):
        assert c.read() == b"d%d" % k
    assert int(info(c)["jobs_on_disk"]) >= 250
    assert len(far_files(srv)) >= 3
    w = srv.raw(timeout=10)
    got = {}
    while len(got) < 300:
        rep = w.call("RESERVE", "TIMEOUT", 5000, "COUNT", 100, "FROM", "w")
        assert isinstance(rep, list), rep
        t = now_ms()
        for job in rep:
            jid = job[1].decode()
            assert jid not in got, "delivered twice: " + jid
            assert job[2] == b"b" + jid[1:].encode()
            got[jid] = t
            w.call("ACK", "w", jid)
    for jid, t in got.items():
        assert t >= due[jid], (jid, t, due[jid])
    late = sorted(t - due[j] for j, t in got.items())
    assert late[len(late) // 2] < 50, late[-10:]
    assert wait_until(lambda: not far_files(srv), timeout=5), far_files(srv)
    i = info(c)
    assert int(i["jobs_on_disk"]) == 0 and int(i["far_segments"]) == 0, i
    assert int(i["far_records_loaded"]) == 300


def test_far_jobs_survive_kill_while_loading(make_server):
    """kill -9 at random moments while segments are written and loaded: every acknowledged
    job is still there (on disk or in RAM), once, with its body."""
    srv = make_server("--memory-horizon", "200ms")
    rng = random.Random(11)
    added = {}
    n = 0
    for rnd in range(4):
        c = srv.raw()
        t0 = now_ms()
        batch = []
        for k in range(400):
            n += 1
            jid = "k%d" % n
            batch.append((jid, t0 + 400 + rng.randrange(3000)))
            c.send("ADD", "k", jid, "body-" + jid, "AT", batch[-1][1])
        for jid, d in batch:
            assert c.read() == jid.encode()
            added[jid] = d
        time.sleep(rng.random() * 0.8)  # let some windows open and load
        srv.stop(signal.SIGKILL)
        srv.start()
    c = srv.raw()
    st = pairs(c.call("STATS", "k"))
    assert st["jobs_delayed"] + st["jobs_ready"] == len(added), st
    for jid in rng.sample(sorted(added), 100):
        g = get(c, "k", jid)
        assert g is not None and g["body"] == b"body-" + jid.encode(), (jid, g)
    # drain: every job exactly once
    w = srv.raw(timeout=10)
    seen = set()
    deadline = time.monotonic() + 30
    while len(seen) < len(added) and time.monotonic() < deadline:
        rep = w.call("RESERVE", "TIMEOUT", 2000, "COUNT", 500, "FROM", "k")
        if rep is None or not isinstance(rep, list):
            continue
        for job in rep:
            jid = job[1].decode()
            assert jid not in seen
            seen.add(jid)
        w.call("ACK", "k", *[job[1] for job in rep])
    assert seen == set(added)
    assert wait_until(lambda: not far_files(srv), timeout=5), far_files(srv)


def test_torn_far_segment_tail_is_ignored_with_a_warning(make_server):
    srv = make_server("--memory-horizon", "1h")
    c = srv.raw()
    t0 = now_ms()
    for k in range(20):
        c.call("ADD", "t", "j%d" % k, "b%d" % k, "AT", t0 + 10 * DAY)
    srv.stop()
    (seg,) = far_files(srv)
    with open(seg, "ab") as f:
        f.write(b"\x17\x00\x00\x00\xff\x00\x00\x00\x01partial")
    srv.extra = ["--memory-horizon", "0"]  # load everything now
    srv.start()
    c = srv.raw()
    assert wait_until(lambda: int(info(c)["jobs_on_disk"]) == 0, timeout=5)
    assert get(c, "t", "j7")["body"] == b"b7"
    assert "torn tail" in srv.log()
    assert wait_until(lambda: not far_files(srv), timeout=5)
    # the check in the background does not count it as damage either
    assert wait_until(lambda: "checked in the background" in srv.log(), timeout=10)
    assert int(info(c)["far_damaged_places"]) == 0
    assert not os.path.exists(os.path.join(srv.data_dir, "far", "DAMAGED"))


def test_bad_far_segment_header_stops_the_start(make_server):
    srv = make_server("--memory-horizon", "1h")
    c = srv.raw()
    c.call("ADD", "t", "a", "b", "DELAY", 10 * DAY)
    srv.stop()
    (seg,) = far_files(srv)
    with open(seg, "r+b") as f:
        f.write(b"garbage!")
    with pytest.raises(RuntimeError) as e:
        srv.start(timeout=5)
    assert os.path.basename(seg) in str(e.value) and "offset 0" in str(e.value)


def metrics(srv):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % srv.http_port, timeout=10) as r:
        return r.read().decode()


def far_jobs_with_a_damaged_segment(make_server, n=40):
    """n far jobs of equal-sized records in one segment; the server stopped."""
    srv = make_server("--memory-horizon", "1h")
    c = srv.raw()
    t0 = now_ms()
    for k in range(n):
        c.call("ADD", "t", "j%02d" % k, "body-%02d" % k, "AT", t0 + 10 * DAY + k)
    c.close()
    srv.stop()
    (seg,) = far_files(srv)
    size = os.path.getsize(seg)
    assert (size - 32) % n == 0, size
    return srv, seg, (size - 32) // n


def start_fails(srv):
    mark = len(srv.log())
    with pytest.raises(RuntimeError) as e:
        srv.start(timeout=10)
    return str(e.value) + srv.log()[mark:]


def test_corrupt_far_segment_middle_stops_the_start_and_repair_drops_only_its_job(make_server):
    srv, seg, rec = far_jobs_with_a_damaged_segment(make_server)
    at = 32 + 20 * rec  # the record of j20
    with open(seg, "r+b") as f:
        f.seek(at + rec // 2)
        b = f.read(1)
        f.seek(at + rec // 2)
        f.write(bytes([b[0] ^ 0x5A]))
    size = os.path.getsize(seg)
    # the start only reads what is cheap: it serves, and the check in the background finds it,
    # says where and what it means, and writes it down ...
    mark = len(srv.log())
    srv.start()
    c = srv.raw()
    assert wait_until(lambda: int(info(c)["far_damaged_places"]) == 1, timeout=10)
    log = srv.log()[mark:]
    assert os.path.basename(seg) in log and "corrupt record at offset %d" % at in log, log
    assert "--repair" in log
    assert get(c, "t", "j21")["body"] == b"body-21"  # the others are served meanwhile
    assert "\ndelayq_far_damaged_places 1\n" in metrics(srv)  # and /metrics shows it
    c.close()
    srv.stop()
    # ... so that the next start stops there
    msg = start_fails(srv)
    assert os.path.basename(seg) in msg and "offset %d" % at in msg, msg
    assert "corrupt record" in msg and "--repair" in msg, msg
    assert os.path.getsize(seg) == size  # untouched without --repair

    srv.extra = ["--memory-horizon", "1h", "--repair"]
    mark = len(srv.log())
    srv.start()
    log = srv.log()[mark:]
    assert "repair" in log and "dropped 1 far jobs" in log, log
    c = srv.raw()
    assert get(c, "t", "j20") is None
    for k in range(40):
        if k != 20:
            assert get(c, "t", "j%02d" % k)["body"] == b"body-%02d" % k, k
    assert int(info(c)["jobs_on_disk"]) == 39
    assert pairs(c.call("STATS", "t"))["jobs_delayed"] == 39
    c.close()
    srv.stop()

    # repaired for good: a plain start, then every far job loads and the segment goes
    srv.extra = ["--memory-horizon", "0"]
    mark = len(srv.log())
    srv.start()
    c = srv.raw()
    assert wait_until(lambda: int(info(c)["jobs_on_disk"]) == 0, timeout=5)
    assert sorted(scan_all(c, "t", "delayed")) == ["j%02d" % k for k in range(40) if k != 20]
    assert wait_until(lambda: not far_files(srv), timeout=5), far_files(srv)
    assert "damaged" not in srv.log()[mark:]


def test_far_segment_cut_inside_a_jobs_record_stops_the_start_then_repairs(make_server):
    srv, seg, rec = far_jobs_with_a_damaged_segment(make_server, n=10)
    with open(seg, "r+b") as f:
        f.truncate(32 + 9 * rec + rec // 3)  # j09's record cut short
    msg = start_fails(srv)
    assert os.path.basename(seg) in msg and "torn tail" in msg, msg
    assert "offset %d" % (32 + 9 * rec) in msg, msg
    srv.extra = ["--memory-horizon", "1h", "--repair"]
    srv.start()
    assert "dropped 1 far jobs" in srv.log()
    c = srv.raw()
    assert get(c, "t", "j09") is None
    assert [get(c, "t", "j%02d" % k)["body"] for k in range(9)] == [
        b"body-%02d" % k for k in range(9)]
    c.close()
    srv.kill()
    srv.extra = ["--memory-horizon", "1h"]
    srv.start()  # repaired for good (the cut was written down before the kill)
    assert get(srv.raw(), "t", "j08")["body"] == b"body-08"


def far_bytes(srv):
    return sum(os.path.getsize(p) for p in far_files(srv))


def test_mostly_deleted_segments_are_compacted_across_kills(make_server):
    """Big far jobs, most deleted, kill -9 at random moments: the segments are compacted (the
    far directory stays small), and the jobs left are all there with their bodies."""
    srv = make_server("--fsync", "everysec")
    far = now_ms() + 30 * DAY
    present = {}
    rng = random.Random(5)
    big = b"y" * 20000
    for rnd in range(4):
        c = srv.raw(timeout=30)
        ids = ["c%d-%d" % (rnd, k) for k in range(600)]
        for i in range(0, len(ids), 100):
            for jid in ids[i:i + 100]:
                c.send("ADD", "dur", jid, big + jid.encode(), "AT", far + rnd)
            for jid in ids[i:i + 100]:
                assert c.read() == jid.encode()
        for i in range(0, len(ids) - 5, 100):
            chunk = ids[i:min(i + 100, len(ids) - 5)]
            assert c.call("DEL", "dur", *chunk) == len(chunk)
        for jid in ids[-5:]:
            present[jid] = big + jid.encode()
        time.sleep(rng.uniform(0, 0.3))
        srv.kill()
        srv.start()
        c = srv.raw(timeout=30)
        assert pairs(c.call("STATS", "dur"))["jobs_delayed"] == len(present)
        for jid, body in present.items():
            assert get(c, "dur", jid)["body"] == body, jid
    assert "compacting far segment" in srv.log()
    c = srv.raw(timeout=30)
    assert wait_until(lambda: far_bytes(srv) < 4 << 20, timeout=10), far_bytes(srv)
    assert int(info(c)["far_compactions"]) >= 1 or "compacting far segment" in srv.log()
    for jid, body in present.items():
        assert get(c, "dur", jid)["body"] == body, jid
