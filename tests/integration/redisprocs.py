"""Redis processes for the Redis store's tests: one redis-server, a Redis Cluster, a
replicated master with Sentinels; and the `procs` fixture that starts them and delayqd
instances on free loopback ports in tmp dirs and stops them all at teardown (delayqd with
SIGTERM, which must exit 0 without a sanitizer report).
"""

import os
import signal
import subprocess
import threading
import time
import uuid

import pytest
import redis

from conftest import (REDIS_SERVER, RespConn, RespError, Server, _wait_ping, encode_command,
                      free_port, stop_and_check, wait_until)

REDIS_CLI = os.environ.get("REDIS_CLI", "/usr/bin/redis-cli")
REDIS_SENTINEL = os.environ.get("REDIS_SENTINEL", "/usr/bin/redis-sentinel")


# --------------------------------------------------------------------------
# processes

class RedisProc:
    """One redis-server on a free loopback port; keeps its port and dir across restarts."""

    def __init__(self, workdir, args=(), port=None):
        self.workdir = str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.args = [str(a) for a in args]
        self.port = port or free_port()
        while "--cluster-enabled" in self.args and self.port > 55000:
            self.port = free_port()  # the cluster bus listens on port + 10000
        self.proc = None

    def start(self):
        if not os.path.exists(REDIS_SERVER):
            pytest.fail("redis-server not found at %s" % REDIS_SERVER)
        log = open(os.path.join(self.workdir, "redis.log"), "ab")
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.workdir, "--protected-mode", "no"] + self.args,
            stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        log.close()
        _wait_ping(self.port, self.proc, 10, "redis-server")
        return self

    def send_signal(self, sig):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def client(self):
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10)


class SentinelProc:
    """One redis-sentinel (Debian's redis-sentinel package; `redis-server CONF --sentinel`)
    watching master `name` at master_port, on a free loopback port."""

    def __init__(self, workdir, name, master_port, quorum=2, down_ms=1000):
        self.workdir = str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.port = free_port()
        self.conf = os.path.join(self.workdir, "sentinel.conf")
        with open(self.conf, "w") as f:  # Sentinel rewrites it: it must be its own, writable
            f.write("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"
                    "sentinel monitor %s 127.0.0.1 %d %d\n"
                    "sentinel down-after-milliseconds %s %d\n"
                    "sentinel failover-timeout %s 10000\n"
                    "sentinel parallel-syncs %s 1\n"
                    % (self.port, self.workdir, name, master_port, quorum, name, down_ms,
                       name, name))
        self.proc = None

    def start(self):
        if not os.path.exists(REDIS_SENTINEL):
            pytest.fail("redis-sentinel not found at %s (make test installs it)" % REDIS_SENTINEL)
        log = open(os.path.join(self.workdir, "sentinel.log"), "ab")
        self.proc = subprocess.Popen([REDIS_SENTINEL, self.conf], stdout=log,
                                     stderr=subprocess.STDOUT, cwd=self.workdir)
        log.close()
        _wait_ping(self.port, self.proc, 10, "redis-sentinel")
        return self

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def client(self):
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)


def replication_up(replica):
    info = replica.client().info("replication")
    return info.get("role") == "slave" and info.get("master_link_status") == "up"


@pytest.fixture
def procs(tmp_path):
    """procs.redis(*args), procs.cluster(n), procs.delayqd(url, *flags); all stopped at teardown."""

    class Procs:
        def __init__(self):
            self.redises = []
            self.servers = []
            self.sentinel_procs = []

        def redis(self, *args, name=None):
            r = RedisProc(tmp_path / (name or "redis%d" % len(self.redises)), args)
            self.redises.append(r)
            return r.start()

        def cluster_nodes(self, n=3, *args, timeout_ms=5000):
            """n cluster-enabled nodes that know nothing of each other (no slots)."""
            first = len(self.redises)
            return [self.redis("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                               "--cluster-node-timeout", str(timeout_ms), *args,
                               name="node%d" % (first + i))
                    for i in range(n)]

        def cluster(self, n=3, replicas=0, *args, timeout_ms=5000):
            nodes = self.cluster_nodes(n * (1 + replicas), *args, timeout_ms=timeout_ms)
            addrs = ["127.0.0.1:%d" % r.port for r in nodes]
            p = subprocess.run([REDIS_CLI, "--cluster", "create"] + addrs +
                               ["--cluster-replicas", str(replicas), "--cluster-yes"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
            assert p.returncode == 0, p.stdout.decode(errors="replace")

            def ok():
                for r in nodes:
                    info = r.client().execute_command("CLUSTER", "INFO").decode()
                    if "cluster_state:ok" not in info:
                        return False
                return True

            assert wait_until(ok, 20, 0.1), "cluster never became ok"
            return nodes

        def sentinels(self, name="mymaster", replicas=1, n=3, *args):
            """A master with `replicas` replicas and n Sentinels that all know each other.
            Returns (master, [replica...], [sentinel...])."""
            args = ("--repl-diskless-sync-delay", "0") + args  # a replica syncs at once
            master = self.redis(*args, name="master")
            reps = [self.redis("--replicaof", "127.0.0.1", master.port, *args,
                               name="replica%d" % i) for i in range(replicas)]
            for r in reps:
                assert wait_until(lambda: replication_up(r), 20, 0.05), "replica never synced"
            sents = []
            for i in range(n):
                sp = SentinelProc(tmp_path / ("sentinel%d" % i), name, master.port)
                self.sentinel_procs.append(sp)
                sents.append(sp.start())

            def known():
                for sp in sents:
                    c = sp.client()
                    if len(c.execute_command("SENTINEL", "REPLICAS", name)) < replicas:
                        return False
                    if len(c.execute_command("SENTINEL", "SENTINELS", name)) < n - 1:
                        return False
                return True

            assert wait_until(known, 30, 0.1), "the Sentinels never found each other"
            return master, reps, sents

        def delayqd(self, url, *flags, ready=True):
            s = Server(tmp_path / ("srv%d" % len(self.servers)), store_url=url, extra=flags)
            self.servers.append(s)
            s.start()
            if not ready:
                return s
            # the store answers once it has read its configuration from Redis
            c = s.raw()
            assert wait_until(lambda: not isinstance(c.call("STATS"), RespError), 5, 0.02)
            c.close()
            return s

    p = Procs()
    yield p
    problems = stop_and_check(p.servers, 10.0)
    for r in p.redises + p.sentinel_procs:
        r.stop(signal.SIGKILL)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def url_of(r, **params):
    params.setdefault("prefix", "t-" + uuid.uuid4().hex[:10])
    q = "&".join("%s=%s" % kv for kv in params.items())
    return "redis://127.0.0.1:%d/0?%s" % (r.port, q)


def sentinel_url(sentinels, name="mymaster", **params):
    params.setdefault("prefix", "s-" + uuid.uuid4().hex[:10])
    q = "&".join("%s=%s" % kv for kv in params.items())
    return "redis-sentinel://%s/%s?%s" % (",".join("127.0.0.1:%d" % s.port for s in sentinels),
                                          name, q)


def cluster_url(nodes, **params):
    params.setdefault("prefix", "c-" + uuid.uuid4().hex[:10])
    q = "&".join("%s=%s" % kv for kv in params.items())
    return "redis-cluster://%s?%s" % (",".join("127.0.0.1:%d" % r.port for r in nodes[:2]), q)




class AddLoad(threading.Thread):
    """Adds jobs one after the other on one connection until stopped, and records which were
    acknowledged, which failed (with which code) and when: the load of the failover tests."""

    def __init__(self, port, topic="load", body="x"):
        super().__init__(daemon=True)
        self.conn = RespConn(port, timeout=10)
        self.topic = topic
        self.body = body
        self.acked = []        # ids answered with the id
        self.ok_times = []     # monotonic times of those answers
        self.failed = []       # (monotonic time, error code)
        self.unexpected = []   # replies that are neither the id nor UNAVAILABLE/TIMEOUT
        self.slowest = 0.0     # the longest wait for an answer (s)
        self._halt = threading.Event()

    def run(self):
        i = 0
        while not self._halt.is_set():
            jid = "j%d" % i
            i += 1
            t0 = time.monotonic()
            try:
                rep = self.conn.call("ADD", self.topic, jid, self.body)
            except Exception as e:  # the test fails on it below
                self.unexpected.append(repr(e))
                return
            t = time.monotonic()
            self.slowest = max(self.slowest, t - t0)
            if rep == jid.encode():
                self.acked.append(jid)
                self.ok_times.append(t)
            elif isinstance(rep, RespError) and rep.code in ("UNAVAILABLE", "TIMEOUT"):
                self.failed.append((t, rep.code))
                time.sleep(0.01)
            else:
                self.unexpected.append(rep)

    def first_ok_after(self, t):
        return next((x for x in list(self.ok_times) if x > t), None)

    def back_after(self, t):
        """When service came back after an outage that began after t: the first success
        after the first failure after t (t itself if nothing failed)."""
        f = next((x for x, _ in list(self.failed) if x > t), None)
        return t if f is None else self.first_ok_after(f)

    def stop(self):
        self._halt.set()
        self.join(15)
        assert not self.is_alive(), "the load thread is stuck"
        self.conn.close()
        assert self.unexpected == [], self.unexpected[:5]
        # every request answers within 2 s (the store's deadline is 1.8 s; the rest is slack
        # for a loaded machine)
        assert self.slowest <= 2.5, "an ADD waited %.2f s for its answer" % self.slowest

    def lost(self, conn):
        """Acknowledged ids that the store no longer has (checked with pipelined GETs)."""
        ids = list(self.acked)
        conn.send_raw(b"".join(encode_command("GET", self.topic, i) for i in ids))
        reps = [conn.read(timeout=30) for _ in ids]
        return [i for i, rep in zip(ids, reps) if not isinstance(rep, list)]
