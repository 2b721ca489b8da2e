"""Redis processes for the Redis store's tests: one redis-server, a Redis Cluster, a
replicated master with Sentinels; and the `procs` fixture that starts them and delayqd
instances on free loopback ports in tmp dirs and stops them all at teardown (delayqd with
SIGTERM, which must exit 0 without a sanitizer report).
"""

import os
import signal
import subprocess
import uuid

import pytest
import redis

from conftest import REDIS_SERVER, RespError, Server, _wait_ping, stop_and_check, free_port, wait_until

REDIS_CLI = os.environ.get("REDIS_CLI", "/usr/bin/redis-cli")


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


@pytest.fixture
def procs(tmp_path):
    """procs.redis(*args), procs.cluster(n), procs.delayqd(url, *flags); all stopped at teardown."""

    class Procs:
        def __init__(self):
            self.redises = []
            self.servers = []

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
    for r in p.redises:
        r.stop(signal.SIGKILL)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def url_of(r, **params):
    params.setdefault("prefix", "t-" + uuid.uuid4().hex[:10])
    q = "&".join("%s=%s" % kv for kv in params.items())
    return "redis://127.0.0.1:%d/0?%s" % (r.port, q)


def cluster_url(nodes, **params):
    params.setdefault("prefix", "c-" + uuid.uuid4().hex[:10])
    q = "&".join("%s=%s" % kv for kv in params.items())
    return "redis-cluster://%s?%s" % (",".join("127.0.0.1:%d" % r.port for r in nodes[:2]), q)


