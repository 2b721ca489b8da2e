"""Redis Cluster in the states a real one goes through (issue 12, points 1 and 6): not created
yet, slots partly assigned, forming, and a master killed under load with its replica promoted.
"""

import re
import signal
import time

from conftest import RespError, wait_until
from redisprocs import AddLoad, cluster_url, procs  # noqa: F401 (procs: fixture)


def _answer_within(c, seconds, *cmd):
    t0 = time.monotonic()
    rep = c.call(*cmd)
    took = time.monotonic() - t0
    assert took <= seconds, "%s answered after %.2f s: %r" % (cmd[0], took, rep)
    return rep


def _unavailable_within(c, seconds, *cmd):
    rep = _answer_within(c, seconds, *cmd)
    assert isinstance(rep, RespError) and rep.code == "UNAVAILABLE", rep
    return rep


def test_cluster_not_formed_answers_unavailable_then_serves_once_formed(procs):
    nodes = procs.cluster_nodes(3)
    s = procs.delayqd(cluster_url(nodes), ready=False)
    c = s.raw(timeout=10)
    # no slots assigned: every command answers, within 2 s, and says why
    rep = _unavailable_within(c, 2.2, "ADD", "t", "a", "x")
    assert "slot" in rep.msg.lower(), rep
    for cmd in (("GET", "t", "a"), ("RESERVE", "TIMEOUT", 0, "FROM", "t"), ("STATS",),
                ("ACK", "t", "a"), ("LIST", "t", "ready")):
        _unavailable_within(c, 2.2, *cmd)
    # slots partly assigned (two of three masters): still answered in time
    cl = [n.client() for n in nodes]
    for i in (1, 2):
        cl[0].execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[i].port)
    cl[0].execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 5460)
    cl[1].execute_command("CLUSTER", "ADDSLOTSRANGE", 5461, 10922)
    t_end = time.monotonic() + 3
    while time.monotonic() < t_end:
        rep = _answer_within(c, 2.2, "ADD", "t", "b", "x")
        assert isinstance(rep, RespError) and rep.code in ("UNAVAILABLE", "TIMEOUT"), rep
    # the cluster forms: service starts by itself
    cl[2].execute_command("CLUSTER", "ADDSLOTSRANGE", 10923, 16383)
    t0 = time.monotonic()
    while True:
        rep = _answer_within(c, 2.2, "ADD", "t", "c", "x")
        if rep == b"c":
            break
        assert time.monotonic() - t0 < 20, "not serving 20 s after the cluster formed: %r" % rep
        time.sleep(0.1)
    # (a blocked RESERVE that met CLUSTERDOWN on a node still forming is retried by the sweep)
    assert c.call("RESERVE", "TIMEOUT", 5000, "FROM", "t")[0][1] == b"c"
    # warnings were rate-limited: one line per state, not one per refresh
    log = s.log()
    lines = [x for x in log.splitlines() if re.search(r" W .*(slots|CLUSTER SLOTS)", x)]
    assert 1 <= len(lines) <= 8, "\n".join(lines[:20])


def _role(node):
    try:
        return node.client().execute_command("ROLE")[0]
    except Exception:
        return None


def test_cluster_failover_kill9_master_under_load_loses_nothing(procs):
    # 3 masters + 3 replicas, every write fsynced (appendfsync always) and confirmed by a
    # replica (replicas=1); a master is killed (-9) under load, its replica is promoted
    nodes = procs.cluster(3, 1, "--appendonly", "yes", "--appendfsync", "always",
                          "--repl-diskless-sync-delay", "0", timeout_ms=1000)
    s = procs.delayqd(cluster_url(nodes, replicas=1))
    c = s.raw(timeout=10)
    waiter = s.raw(timeout=60)
    waiter.send("RESERVE", "TIMEOUT", 50000, "FROM", "w")
    victim = next(n for n in nodes if _role(n) == b"master")
    vid = victim.client().execute_command("CLUSTER", "MYID").decode()
    replica = next(n for n in nodes if _role(n) == b"slave" and
                   n.client().info("replication").get("master_port") == victim.port)
    load = AddLoad(s.port)
    load.start()
    try:
        assert wait_until(lambda: len(load.acked) >= 300, 20, 0.02), "no load: %r" % load.failed[-3:]
        t_kill = time.monotonic()
        victim.stop(signal.SIGKILL)
        assert wait_until(lambda: _role(replica) == b"master", 30, 0.02), "no promotion"
        t_switch = time.monotonic()
        victim.start()  # comes back (with its AOF) as the new master's replica
        assert wait_until(lambda: _role(victim) == b"slave" and
                          victim.client().info("replication").get("master_link_status") == "up",
                          30, 0.05), "the old master never rejoined"
        t_rejoin = time.monotonic()
        assert wait_until(lambda: load.first_ok_after(t_rejoin), 10, 0.02), \
            "not serving after the failover: %r" % load.failed[-3:]
        back = load.back_after(t_kill)
        # the blocked RESERVE resumes
        assert wait_until(lambda: c.call("ADD", "w", "after", "x") == b"after", 10, 0.05)
        assert waiter.read(timeout=10)[0][1] == b"after"
    finally:
        load.stop()
    lost = load.lost(c)
    after_switch = [k for t, k in load.failed if t > t_switch]
    # the other masters' shards kept working: the outage is the span of the failures
    last_fail = max([t for t, _ in load.failed] or [t_kill])
    assert last_fail <= t_rejoin + 2.0, "commands still failed %.2f s after the old master " \
        "rejoined" % (last_fail - t_rejoin)
    print("\ncluster failover (node %s): promotion %.2f s after the kill, last failed command "
          "%.2f s after the kill (first success after a failure: %.2f s); %d commands failed "
          "(%d UNAVAILABLE, %d TIMEOUT; %d after the promotion); %d of %d acknowledged jobs "
          "lost" % (
              vid[:8], t_switch - t_kill, last_fail - t_kill, back - t_kill, len(load.failed),
              sum(1 for _, k in load.failed if k == "UNAVAILABLE"),
              sum(1 for _, k in load.failed if k == "TIMEOUT"), len(after_switch),
              len(lost), len(load.acked)))
    assert lost == [], lost[:10]
