"""GET /metrics (DESIGN §8): Prometheus text format 0.0.4 from the metrics table, checked by
`promtool check metrics` and scraped by a real Prometheus."""

import json
import os
import re
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from conftest import HttpConn, free_port, wait_blocked, wait_until

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def scrape(srv):
    h = HttpConn(srv.http_port)
    try:
        h.sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
        st, hdrs, body = h.read_response()
    finally:
        h.close()
    assert st == 200
    assert hdrs["content-type"].startswith("text/plain; version=0.0.4")
    return body.decode()


def samples(text):
    """{(name, labels-string): value} of every sample line."""
    out = {}
    for ln in text.splitlines():
        if ln.startswith("#") or not ln:
            continue
        m = SAMPLE.match(ln)
        assert m, "not a sample line: %r" % ln
        out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def test_names_values_and_promtool(server):
    c = server.raw()
    for i in range(5):
        c.call("ADD", "m", "j%d" % i, "x")
    c.call("ADD", "m", "later", "x", "DELAY", 600000)
    c.call("RESERVE", "TIMEOUT", 0, "COUNT", 3, "FROM", "m")
    c.call("ACK", "m", "j0")
    text = scrape(server)
    s = samples(text)
    assert s[("delayq_jobs", '{topic="m",state="ready"}')] == 2
    assert s[("delayq_jobs", '{topic="m",state="reserved"}')] == 2
    assert s[("delayq_jobs", '{topic="m",state="delayed"}')] == 1
    assert s[("delayq_jobs", '{topic="m",state="dead"}')] == 0
    assert s[("delayq_jobs_total", '{topic="m",event="added"}')] == 6
    assert s[("delayq_jobs_total", '{topic="m",event="reserved"}')] == 3
    assert s[("delayq_jobs_total", '{topic="m",event="acked"}')] == 1
    assert s[("delayq_fire_lag_seconds_count", '{topic="m"}')] == 3
    assert s[("delayq_fire_lag_seconds_bucket", '{topic="m",le="+Inf"}')] == 3
    assert s[("delayq_command_duration_seconds_count", '{command="add"}')] == 6
    assert s[("delayq_connected_clients", "")] >= 1
    assert s[("delayq_blocked_clients", "")] == 0
    assert s[("delayq_store_up", "")] == 1
    if server.store_url is None:
        assert s[("delayq_log_bytes", "")] > 0
    # the log's fsync durations come from the embedded store alone
    assert ("# TYPE delayq_fsync_duration_seconds histogram\n" in text) == \
        (server.store_url is None)
    for fam in ("delayq_jobs gauge", "delayq_jobs_total counter",
                "delayq_fire_lag_seconds histogram", "delayq_command_duration_seconds histogram",
                "delayq_connected_clients gauge", "delayq_blocked_clients gauge",
                "delayq_store_up gauge"):
        assert "# TYPE %s\n" % fam in text, fam
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(),
                       capture_output=True, timeout=30)
    assert p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(), p


@pytest.mark.stores("embedded")
def test_jobs_in_ram_and_on_disk(make_server):
    srv = make_server("--memory-horizon", "60000")
    c = srv.raw()
    for i in range(3):
        c.call("ADD", "near", "n%d" % i, "x", "DELAY", 1000)
    for i in range(4):
        c.call("ADD", "far", "f%d" % i, "x", "DELAY", 86400000 + i * 3600000)
    text = scrape(srv)
    s = samples(text)
    assert s[("delayq_jobs_in_ram", "")] == 3
    assert s[("delayq_jobs_on_disk", "")] == 4
    assert s[("delayq_far_segments", "")] >= 1
    assert s[("delayq_far_segment_bytes", "")] > 0
    assert s[("delayq_far_segments_loading", "")] == 0
    assert s[("delayq_far_damaged_places", "")] == 0
    assert "# TYPE delayq_far_records_loaded_total counter\n" in text
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(),
                       capture_output=True, timeout=30)
    assert p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(), p


def fsync_figures(srv):
    """(count, sum, cumulative buckets by le) of delayq_fsync_duration_seconds, and the text."""
    text = scrape(srv)
    s = samples(text)
    name = "delayq_fsync_duration_seconds"
    buckets = {re.search(r'le="([^"]+)"', k[1]).group(1): v
               for k, v in s.items() if k[0] == name + "_bucket"}
    return s[(name + "_count", "")], s[(name + "_sum", "")], buckets, text


def info_fields(conn):
    info = conn.call("INFO").decode()
    return dict(ln.split(":", 1) for ln in info.splitlines() if ":" in ln)


@pytest.mark.stores("embedded")
@pytest.mark.parametrize("mode", ["always", "everysec"])
def test_fsync_durations(make_server, mode):
    """Every sync that makes commits durable is timed: the group commit's under --fsync
    always (one per ADD sent one at a time), the sync thread's under everysec."""
    srv = make_server("--fsync", mode)
    c = srv.raw()
    c.call("ADD", "f", "first", "x")
    if mode == "everysec":
        assert wait_until(lambda: fsync_figures(srv)[0] >= 1, 5), "the sync thread never synced"
    n0, sum0, _, _ = fsync_figures(srv)
    n = 40
    for i in range(n):
        c.call("ADD", "f", "j%d" % i, "x")
    if mode == "always":
        n1, sum1, buckets, text = fsync_figures(srv)
        assert n1 - n0 >= n, (n0, n1)
    else:
        # the thread syncs about once a second whatever the number of commits
        assert wait_until(lambda: fsync_figures(srv)[0] > n0, 5), "no sync after the ADDs"
        n1, sum1, buckets, text = fsync_figures(srv)
        assert n1 - n0 < n
    assert sum1 >= sum0  # (syncs on tmpfs take less than the microsecond the clock counts)
    les = sorted((float(k), v) for k, v in buckets.items() if k != "+Inf")
    assert len(les) >= 10 and buckets["+Inf"] == n1
    assert all(a[1] <= b[1] for a, b in zip(les, les[1:])), les
    # INFO shows the same figures (no sync can happen in between under always)
    info = info_fields(c)
    if mode == "always":
        assert int(info["log_fsync_seconds_count"]) == n1
    assert int(info["log_fsync_seconds_count"]) >= n1
    assert float(info["log_fsync_seconds_sum"]) >= sum1 - 1e-6
    assert info["log_fsync_seconds_buckets"].endswith("+Inf=" + info["log_fsync_seconds_count"])
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(),
                       capture_output=True, timeout=30)
    assert p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(), p


def test_blocked_and_connected_clients(server):
    c = server.raw()
    w = HttpConn(server.http_port)
    w.send("RESERVE", "TIMEOUT", 10000, "FROM", "b")
    wait_blocked(c, 1)
    s = samples(scrape(server))
    assert s[("delayq_blocked_clients", "")] == 1
    assert s[("delayq_connected_clients", "")] >= 2  # the RESP client and the waiting HTTP one
    c.call("ADD", "b", "j", "x")
    assert w.read()[0][1] == b"j"


def test_topics_past_the_cap_are_summed_as_other(make_server):
    srv = make_server("--metrics-max-topics", "2")
    c = srv.raw()
    for t in ("t1", "t2", "t3", "t4"):
        c.call("ADD", t, "a", "x")
        c.call("ADD", t, "b", "x")
        c.call("RESERVE", "TIMEOUT", 0, "FROM", t)
    s = samples(scrape(srv))
    jobs = {k[1]: v for k, v in s.items() if k[0] == "delayq_jobs"}
    topics = {re.search(r'topic="([^"]+)"', k).group(1) for k in jobs}
    assert len(topics) == 3 and "_other" in topics, topics
    assert jobs['{topic="_other",state="ready"}'] == 2
    assert sum(v for k, v in jobs.items() if 'state="ready"' in k) == 4
    lag = {k[1]: v for k, v in s.items() if k[0] == "delayq_fire_lag_seconds_count"}
    assert lag['{topic="_other"}'] == 2 and sum(lag.values()) == 4


def test_bad_metrics_max_topics_is_refused(make_server):
    srv = make_server("--metrics-max-topics", "0", start=False)
    p = subprocess.run(srv.args, capture_output=True, timeout=30)
    assert p.returncode != 0 and b"metrics-max-topics" in p.stderr + p.stdout


def prom_query(port, q):
    url = "http://127.0.0.1:%d/api/v1/query?query=%s" % (port, urllib.parse.quote(q))
    with urllib.request.urlopen(url, timeout=5) as r:
        doc = json.load(r)
    assert doc["status"] == "success", doc
    return {json.dumps(x["metric"], sort_keys=True): float(x["value"][1])
            for x in doc["data"]["result"]}


@pytest.mark.stores("embedded")
def test_real_prometheus_scrapes_delayqd(server, tmp_path):
    c = server.raw()
    for i in range(7):
        c.call("ADD", "p", "j%d" % i, "x")
    assert len(c.call("RESERVE", "TIMEOUT", 0, "COUNT", 4, "FROM", "p")) == 4
    port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                   "scrape_configs:\n  - job_name: delayq\n    static_configs:\n"
                   "      - targets: ['127.0.0.1:%d']\n" % server.http_port)
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen([PROMETHEUS, "--config.file", str(cfg),
                             "--storage.tsdb.path", str(tmp_path / "tsdb"),
                             "--web.listen-address", "127.0.0.1:%d" % port],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        def ready():
            try:
                return prom_query(port, 'up{job="delayq"}')
            except OSError:
                return None
        up = wait_until(lambda: (ready() or {}).get(json.dumps(
            {"__name__": "up", "instance": "127.0.0.1:%d" % server.http_port,
             "job": "delayq"}, sort_keys=True)) == 1, 40, 0.2)
        assert up, (tmp_path / "prometheus.log").read_text()[-3000:]
        added = prom_query(port, 'delayq_jobs_total{topic="p",event="added"}')
        assert list(added.values()) == [7]
        lag = prom_query(port, 'delayq_fire_lag_seconds_count{topic="p"}')
        assert list(lag.values()) == [4]
        # a quantile of the fire-lag histogram is computable (and small: jobs were due)
        q = prom_query(port, 'histogram_quantile(0.99, delayq_fire_lag_seconds_bucket{topic="p"})')
        assert len(q) == 1 and 0 <= list(q.values())[0] <= 10
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
