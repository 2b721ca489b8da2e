"""Redis Cluster in the states a real one goes through (issue 12, points 1 and 6): not created
yet, slots partly assigned, forming, and a master killed under load with its replica promoted.
"""

import re
import time

from conftest import RespError
from redisprocs import cluster_url, procs  # noqa: F401 (procs: fixture)


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
    rep = _unavailable_within(c, 2.0, "ADD", "t", "a", "x")
    assert "slot" in rep.msg.lower(), rep
    for cmd in (("GET", "t", "a"), ("RESERVE", "TIMEOUT", 0, "FROM", "t"), ("STATS",),
                ("ACK", "t", "a"), ("LIST", "t", "ready")):
        _unavailable_within(c, 2.0, *cmd)
    # slots partly assigned (two of three masters): still answered in time
    cl = [n.client() for n in nodes]
    for i in (1, 2):
        cl[0].execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[i].port)
    cl[0].execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 5460)
    cl[1].execute_command("CLUSTER", "ADDSLOTSRANGE", 5461, 10922)
    t_end = time.monotonic() + 3
    while time.monotonic() < t_end:
        rep = _answer_within(c, 2.0, "ADD", "t", "b", "x")
        assert isinstance(rep, RespError) and rep.code in ("UNAVAILABLE", "TIMEOUT"), rep
    # the cluster forms: service starts by itself
    cl[2].execute_command("CLUSTER", "ADDSLOTSRANGE", 10923, 16383)
    t0 = time.monotonic()
    while True:
        rep = _answer_within(c, 2.0, "ADD", "t", "c", "x")
        if rep == b"c":
            break
        assert time.monotonic() - t0 < 20, "not serving 20 s after the cluster formed: %r" % rep
        time.sleep(0.1)
    assert c.call("RESERVE", "TIMEOUT", 1000, "FROM", "t")[0][1] == b"c"
    # warnings were rate-limited: one line per state, not one per refresh
    log = s.log()
    lines = [x for x in log.splitlines() if re.search(r" W .*(slots|CLUSTER SLOTS)", x)]
    assert 1 <= len(lines) <= 8, "\n".join(lines[:20])
