"""LIST pages (DESIGN §3, issue 8 point 7): a page holds COUNT ids while that many remain, so a page
is empty only at the end, and the cursor keeps its SCAN guarantee."""

import pytest


def add_many(c, topic, ids, *opts):
    for i in ids:
        c.send("ADD", topic, i, "x", *opts)
    for i in ids:
        assert c.read() == i.encode()


def scan(c, topic, state, count):
    """Every page of a whole scan, as lists of ids."""
    pages, cursor = [], 0
    while True:
        rep = c.call("LIST", topic, state, "COUNT", count, "CURSOR", cursor)
        assert isinstance(rep, list) and len(rep) == 2, rep
        cursor = int(rep[0])
        pages.append(rep[1])
        if cursor == 0:
            return pages


@pytest.mark.parametrize("count", [1, 10])
def test_list_pages_are_full_until_the_end(c, store, count):
    # the embedded store fills every page; the Redis store's are never empty
    need = count if store.name == "embedded" else 1
    ids = ["j%d" % k for k in range(3000)]
    add_many(c, "lp", ids, "DELAY", 3600000)
    pages = scan(c, "lp", "delayed", count)
    for p in pages[:-1]:
        assert len(p) >= need, "short page before the end: %r of %d pages" % (p, len(pages))
    assert set(x.decode() for p in pages for x in p) == set(ids)
    # the first page of a fresh scan is never empty
    rep = c.call("LIST", "lp", "delayed", "COUNT", 1)
    assert len(rep[1]) >= 1


def test_list_pages_skip_other_states(c):
    """Jobs of other states between the ones asked for do not make empty pages."""
    add_many(c, "lm", ["r%d" % k for k in range(2000)])
    add_many(c, "lm", ["d%d" % k for k in range(50)], "DELAY", 3600000)
    pages = scan(c, "lm", "delayed", 1)
    for p in pages[:-1]:
        assert len(p) >= 1, "empty page before the end"
    assert set(x.decode() for p in pages for x in p) == set("d%d" % k for k in range(50))
    assert c.call("LIST", "lm", "dead", "COUNT", 1) == [b"0", []]
