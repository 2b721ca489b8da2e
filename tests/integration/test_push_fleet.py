"""Push delivery by a fleet of delayqd over one Redis (or one Redis Cluster):
each job is in flight from one instance at a time, and a job whose instance
was killed mid-delivery is delivered through another after its lease.

Every test starts its own redis-server(s) and delayqd instances (the `procs`
fixture) and a real receiver on loopback (pushrecv.Receiver) that counts the
deliveries of every job. Waits are on conditions with deadlines."""

import threading
import time
from collections import Counter

import pytest

from conftest import encode_command, pairs, wait_until, RespError
from pushrecv import recv  # noqa: F401 (recv: fixture)
from redisprocs import cluster_url, procs, url_of  # noqa: F401 (procs: fixture)


def info(conn):
    text = conn.call("INFO").decode()
    return dict(l.split(":", 1) for l in text.split("\r\n") if ":" in l and not l.startswith("#"))


def add_all(conn, cmds):
    """Pipelines the ADDs and checks every answer."""
    conn.send_raw(b"".join(encode_command(*c) for c in cmds))
    for c in cmds:
        got = conn.read()
        assert not isinstance(got, RespError), (c, got)


def deliveries(rc):
    with rc.lock:
        return Counter(r.job for r in rc.requests)


def fleet_delivers_each_once(fleet, rc, topic, n):
    """n jobs (half due now, half within a second; added through every instance in
    turn) are each delivered exactly once, and every instance delivers some."""
    cmds = {s: [] for s in fleet}
    for i in range(n):
        s = fleet[i % len(fleet)]
        extra = ("DELAY", 200 + (i * 7) % 800) if i % 2 else ()
        cmds[s].append(("ADD", topic, "j%d" % i, "body %d" % i) + extra + ("URL", rc.url("/f")))
    for s, cs in cmds.items():
        add_all(s.raw(), cs)
    rc.wait(lambda rs: len({r.job for r in rs}) >= n, timeout=30)
    c = fleet[0].raw()
    assert wait_until(lambda: pairs(c.call("STATS", topic))["acked"] == n, 10), \
        pairs(c.call("STATS", topic))
    time.sleep(0.3)  # a second delivery would show now
    seen = deliveries(rc)
    assert set(seen) == {"%s/j%d" % (topic, i) for i in range(n)}
    twice = {j: k for j, k in seen.items() if k != 1}
    assert not twice, "delivered more than once: %r" % twice
    for r in rc.requests:
        assert r.headers["delayq-attempt"] == "1"
        assert r.body == b"body %s" % r.job.split("/j")[1].encode()
    st = pairs(c.call("STATS", topic))
    assert (st["jobs_ready"], st["jobs_reserved"], st["jobs_delayed"]) == (0, 0, 0)
    pushed = [int(info(s.raw())["pushed"]) for s in fleet]
    assert sum(pushed) == n and all(p > 0 for p in pushed), pushed


def slow_receiver(recv, seconds):
    rc = recv()

    def script(path, req):
        time.sleep(seconds)

    rc.script = script
    return rc


def test_fleet_delivers_each_push_job_once(procs, recv):
    r = procs.redis()
    url = url_of(r)
    # a little concurrency and a slow receiver, so that no instance can take all
    fleet = [procs.delayqd(url, "--push-concurrency", 4) for _ in range(2)]
    rc = slow_receiver(recv, 0.01)
    fleet_delivers_each_once(fleet, rc, "t", 400)


def test_fleet_kill9_mid_delivery_is_delivered_by_another_after_its_lease(procs, recv):
    r = procs.redis()
    url = url_of(r)
    a, b = procs.delayqd(url), procs.delayqd(url)
    rc = recv()
    held = threading.Event()

    def script(path, req):
        if req.headers["delayq-attempt"] == "1":
            held.wait(10)  # the first delivery never gets an answer in time

    rc.script = script
    ttr = 1500
    c = b.raw()
    c.call("ADD", "t", "j", "x", "TTR", ttr, "URL", rc.url())
    rc.wait(lambda rs: len(rs) >= 1)
    first = rc.of("t/j")[0]
    # the instance holding it dies; the other has nothing in flight
    inflight = {s: info(s.raw())["push_inflight"] for s in (a, b)}
    assert sorted(inflight.values()) == ["0", "1"], inflight
    holder = a if inflight[a] == "1" else b
    other = b if holder is a else a
    holder.kill()
    held.set()
    rc.wait(lambda rs: len(rs) >= 2, timeout=10)
    second = rc.of("t/j")[1]
    assert second.headers["delayq-attempt"] == "2"
    assert second.headers["webhook-id"] == "t/j"
    # not before the lease ended, and within the sweep period after it
    assert ttr / 1000 - 0.05 <= second.at - first.at <= ttr / 1000 + 1.5, second.at - first.at
    c = other.raw()
    assert wait_until(lambda: c.call("GET", "t", "j") is None, 5)
    assert info(c)["pushed"] == "1"
    time.sleep(0.3)
    assert len(rc.of("t/j")) == 2


def test_fleet_push_jobs_of_a_killed_instance_are_delivered_on_time(procs, recv):
    """Delayed push jobs added through an instance that dies are delivered by the
    other, which learnt their due time from the added job's message."""
    r = procs.redis()
    url = url_of(r)
    a, b = procs.delayqd(url), procs.delayqd(url)
    rc = recv()
    c = a.raw()
    due = int(time.time() * 1000) + 600
    c.call("ADD", "t", "later", "x", "AT", due, "URL", rc.url())
    a.kill()
    rc.wait(lambda rs: len(rs) >= 1, timeout=5)
    (got,) = rc.of("t/later")
    assert got.at * 1000 - due <= 150, got.at * 1000 - due
    assert wait_until(lambda: b.raw().call("GET", "t", "later") is None, 5)


def test_cluster_fleet_delivers_each_push_job_once(procs, recv):
    nodes = procs.cluster(3)
    url = cluster_url(nodes)
    fleet = [procs.delayqd(url, "--push-concurrency", 4) for _ in range(2)]
    rc = slow_receiver(recv, 0.01)
    fleet_delivers_each_once(fleet, rc, "t", 300)

