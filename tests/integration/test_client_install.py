"""`make install PREFIX=...` installs libdelayq (header, .a, .so, delayq.pc); a program
compiled against the installed copy with pkg-config runs against a real delayqd."""

import os
import subprocess

import pytest

from conftest import REPO, pairs, wait_until


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("prefix"))
    r = subprocess.run(["make", "-s", "install", "PREFIX=" + p], cwd=REPO,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    assert r.returncode == 0, r.stdout.decode()
    return p


def pkg_config(prefix, *args):
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    r = subprocess.run(["pkg-config"] + list(args) + ["delayq"], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.decode().split()


def test_installed_files(prefix):
    for f in ("include/delayq.h", "lib/libdelayq.a", "lib/libdelayq.so", "lib/libdelayq.so.0",
              "lib/pkgconfig/delayq.pc", "bin/delayq", "bin/delayqd"):
        assert os.path.exists(os.path.join(prefix, f)), f
    assert "-I%s/include" % prefix in pkg_config(prefix, "--cflags")
    assert "-ldelayq" in pkg_config(prefix, "--libs")
    assert "-lhiredis" in pkg_config(prefix, "--static", "--libs")
    syms = subprocess.run(["nm", "-g", "--defined-only", os.path.join(prefix, "lib/libdelayq.so")],
                          stdout=subprocess.PIPE, check=True).stdout.decode()
    assert " T delayq_connect" in syms and " T delayq_worker_run" in syms


def test_example_built_with_pkg_config_runs(prefix, server, c, tmp_path):
    exe = str(tmp_path / "cancel_unpaid")
    src = os.path.join(REPO, "examples", "cancel_unpaid.c")
    r = subprocess.run(["cc", "-Wall", "-Werror", "-o", exe, src] +
                       pkg_config(prefix, "--cflags", "--libs"),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    assert r.returncode == 0, r.stdout.decode()
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(prefix, "lib"))
    ldd = subprocess.run(["ldd", exe], env=env, stdout=subprocess.PIPE, check=True).stdout
    assert os.path.join(prefix, "lib", "libdelayq.so.0").encode() in ldd

    def run(*args, timeout=30):
        return subprocess.run([exe, "-p", str(server.port)] + list(args), env=env,
                              cwd=str(tmp_path), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout)

    assert run("-d", "100", "place", "o-1").returncode == 0
    assert run("-d", "100", "place", "o-2").returncode == 0
    p = run("-d", "100", "place", "o-2")  # the same order again: one job
    assert p.returncode == 1 and b"EXISTS" in p.stderr
    assert pairs(c.call("GET", "orders.unpaid", "o-1"))["state"] == b"delayed"
    os.makedirs(str(tmp_path / "paid"))
    open(str(tmp_path / "paid" / "o-2"), "w").close()
    p = run("-n", "2", "work")
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode().splitlines()
    assert sorted(out) == ["order o-1: not paid, cancelled (attempt 1)",
                           "order o-2: paid, nothing to do"], out
    assert pairs(c.call("STATS", "orders.unpaid"))["acked"] == 2
