"""Clients nobody here wrote (issue 8 point 7): ioredis and node-redis (which opens with HELLO 3
and gets RESP3 maps for GET and STATS) beside redis-py, and redis-benchmark.

The Node packages are installed by the test itself from tests/node/package.json into
build/node (npm, once; again when package.json changes)."""

import json
import os
import shutil
import subprocess

import pytest

from conftest import REPO, pairs

NODE_DIR = os.path.join(REPO, "build", "node")
PACKAGE = os.path.join(REPO, "tests", "node", "package.json")
SCRIPT = os.path.join(REPO, "tests", "node", "clients.js")


@pytest.fixture(scope="session")
def node_modules():
    for tool in ("node", "npm"):
        assert shutil.which(tool), "%s is not installed (scripts/deps.sh test installs it)" % tool
    os.makedirs(NODE_DIR, exist_ok=True)
    want = open(PACKAGE, "rb").read()
    have_path = os.path.join(NODE_DIR, "package.json")
    have = open(have_path, "rb").read() if os.path.exists(have_path) else None
    if have != want or not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "ioredis")) \
            or not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "redis")):
        with open(have_path, "wb") as f:
            f.write(want)
        p = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
                           cwd=NODE_DIR, capture_output=True, timeout=300)
        assert p.returncode == 0, "npm install failed:\n%s" % (p.stdout + p.stderr).decode()[-3000:]
    return os.path.join(NODE_DIR, "node_modules")


def run_node(node_modules, which, port):
    env = dict(os.environ, NODE_PATH=node_modules)
    p = subprocess.run(["node", SCRIPT, which, str(port)], capture_output=True, env=env,
                       timeout=60)
    assert p.returncode == 0, "%s failed:\n%s" % (which, (p.stdout + p.stderr).decode()[-3000:])
    return json.loads(p.stdout)


GET_READY = {"topic": "orders", "id": "o-1", "state": "ready", "body": "hello", "ttr": 5000,
             "retries": 3, "attempts": 0}


def check_common(out):
    assert out["ping"] == "PONG" and out["add"] == "o-1"
    (job,) = out["reserve"]
    assert job[:4] == ["orders", "o-1", "hello", 1] and isinstance(job[4], int)
    assert out["ack"] == 1
    assert out["get_missing"] is None and out["reserve_empty"] is None
    assert out["exists"].startswith("EXISTS")
    assert out["topics"] == ["orders"] and out["list"] == ["0", ["o-2"]]
    assert out["info"] is True


@pytest.mark.parametrize("which", ["node-redis", "node-redis-resp3"])
def test_node_redis_speaks_resp3(server, node_modules, which):
    out = run_node(node_modules, which, server.port)
    check_common(out)
    # HELLO 3: GET and STATS are maps
    assert isinstance(out["get"], dict), out["get"]
    assert {k: out["get"][k] for k in GET_READY} == GET_READY
    assert out["get_reserved"]["state"] == "reserved" and "deadline" in out["get_reserved"]
    assert "deadline" not in out["get"]
    assert out["stats"]["jobs_ready"] == 1 and out["stats"]["added"] == 2


def test_ioredis(server, node_modules):
    out = run_node(node_modules, "ioredis", server.port)
    check_common(out)
    flat = out["get"]  # RESP2: a flat field/value array
    assert isinstance(flat, list)
    d = dict(zip(flat[0::2], flat[1::2]))
    assert {k: d[k] for k in GET_READY} == GET_READY
    stats = dict(zip(out["stats"][0::2], out["stats"][1::2]))
    assert stats["jobs_ready"] == 1 and stats["added"] == 2


def test_same_job_through_node_and_redis_py(server, node_modules, r):
    """What node-redis (RESP3) and redis-py (RESP2) see of the same job agrees."""
    out = run_node(node_modules, "node-redis", server.port)
    g = pairs(r.execute_command("GET", "orders", "o-2"))
    assert g["state"] == b"ready" and g["body"] == b"x"
    st = pairs(r.execute_command("STATS", "orders"))
    assert st["added"] == out["stats"]["added"] and st["acked"] == out["stats"]["acked"]


@pytest.mark.stores("embedded")
def test_redis_benchmark_add_without_warnings(server):
    p = subprocess.run(["redis-benchmark", "-q", "-p", str(server.port), "-n", "2000",
                        "ADD", "bench", "__rand_int__", "x", "REPLACE"],
                       capture_output=True, timeout=120)
    text = (p.stdout + p.stderr).decode()
    assert p.returncode == 0, text
    final = text.replace("\r", "\n").strip().splitlines()[-1]
    assert "requests per second" in final, text[-2000:]
    for bad in ("WARNING", "ERROR", "Error", "error"):
        assert bad not in text, text[-2000:]
    assert pairs(server.raw().call("STATS", "bench"))["added"] == 2000
