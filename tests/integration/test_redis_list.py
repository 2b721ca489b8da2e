"""LIST on the Redis store (issue 8, point 7): pages hold COUNT ids whenever that many remain,
a page is empty only at the end, and every job that stays in the state for the whole scan is
listed, also while other jobs come and go."""

import pytest

from conftest import encode_command
from redisprocs import procs, url_of  # noqa: F401 (procs: fixture)


def _pipeline(c, cmds):
    c.send_raw(b"".join(encode_command(*cmd) for cmd in cmds))
    return [c.read(timeout=60) for _ in cmds]


def _scan(c, topic, state, count, between=None):
    """All pages of a scan: [(cursor, ids)]; between(i) runs after page i."""
    pages, cur = [], b"0"
    while True:
        cur, ids = c.call("LIST", topic, state, "COUNT", count, "CURSOR", cur)
        pages.append((cur, ids))
        if cur == b"0":
            return pages
        if between:
            between(len(pages))
        assert len(pages) < 100000, "the scan does not end"


@pytest.mark.parametrize("shards", [1, 3])
def test_list_3000_delayed_count_1_never_an_empty_page(procs, shards):
    r = procs.redis()
    s = procs.delayqd(url_of(r, shards=shards))
    c = s.raw(timeout=60)
    n = 3000
    _pipeline(c, [("ADD", "t", "j%d" % i, "x", "DELAY", 3600000) for i in range(n)])
    pages = _scan(c, "t", "delayed", 1)
    for cur, ids in pages[:-1]:
        assert len(ids) == 1, "page with %d ids and cursor %r" % (len(ids), cur)
    assert len(pages[-1][1]) <= 1
    seen = [i for _, ids in pages for i in ids]
    assert sorted(set(seen)) == sorted(b"j%d" % i for i in range(n))
    # and with COUNT 7: full pages until the end
    pages = _scan(c, "t", "delayed", 7)
    assert all(len(ids) == 7 for _, ids in pages[:-1])
    assert {i for _, ids in pages for i in ids} == {b"j%d" % i for i in range(n)}


def test_list_ready_reserved_dead_large_sets(procs):
    r = procs.redis()
    s = procs.delayqd(url_of(r))
    c = s.raw(timeout=60)
    n = 2000
    _pipeline(c, [("ADD", "t", "j%d" % i, "x", "RETRIES", 0, "TTR", 3600000) for i in range(n)])
    want = {b"j%d" % i for i in range(n)}
    pages = _scan(c, "t", "ready", 3)
    assert all(len(ids) == 3 for _, ids in pages[:-1])
    assert {i for _, ids in pages for i in ids} == want
    _pipeline(c, [("RESERVE", "TIMEOUT", 0, "COUNT", 1000, "FROM", "t")] * 2)
    pages = _scan(c, "t", "reserved", 5)
    assert all(len(ids) == 5 for _, ids in pages[:-1])
    assert {i for _, ids in pages for i in ids} == want
    _pipeline(c, [("NACK", "t", "j%d" % i) for i in range(n)])  # RETRIES 0: dead
    pages = _scan(c, "t", "dead", 11)
    assert all(len(ids) == 11 for _, ids in pages[:-1])
    assert {i for _, ids in pages for i in ids} == want


def test_list_keeps_its_guarantee_while_jobs_come_and_go(procs):
    r = procs.redis()
    s = procs.delayqd(url_of(r))
    c = s.raw(timeout=60)
    other = s.raw(timeout=60)
    n = 3000
    _pipeline(c, [("ADD", "t", "j%d" % i, "x", "DELAY", 3600000 + i) for i in range(n)])
    _pipeline(c, [("ADD", "q", "j%d" % i, "x") for i in range(n)])
    # between pages: delete jobs ahead of and behind the cursor, add earlier and later ones
    k = iter(range(0, n, 3))

    def churn_delayed(page):
        i = next(k, None)
        if i is None:
            return
        assert other.call("DEL", "t", "j%d" % i) == 1
        other.call("ADD", "t", "new%d" % page, "x", "DELAY", 1000000 + page * 7919 % 5000000)

    pages = _scan(c, "t", "delayed", 5, churn_delayed)
    seen = {i for _, ids in pages for i in ids}
    stayed = {b"j%d" % i for i in range(n) if i % 3 != 0 or i // 3 >= len(pages) - 1}
    assert stayed <= seen, sorted(stayed - seen)[:5]
    assert all(ids for _, ids in pages[:-1]), "an empty page before the end"

    # ready: jobs reserved from the head and added at the tail while the scan runs
    def churn_ready(page):
        other.call("RESERVE", "TIMEOUT", 0, "COUNT", 2, "FROM", "q")
        other.call("ADD", "q", "more%d" % page, "x")

    before = set(b"j%d" % i for i in range(n))
    pages = _scan(c, "q", "ready", 4, churn_ready)
    seen = {i for _, ids in pages for i in ids}
    reserved = set()  # the ones that left the ready state during the scan
    cur = b"0"
    while True:
        cur, ids = other.call("LIST", "q", "reserved", "COUNT", 1000, "CURSOR", cur)
        reserved |= set(ids)
        if cur == b"0":
            break
    assert (before - reserved) <= seen, sorted((before - reserved) - seen)[:5]
    assert all(ids for _, ids in pages[:-1]), "an empty page before the end"
