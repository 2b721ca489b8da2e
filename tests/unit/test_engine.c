/* test_engine.c -- the in-memory job engine (src/engine/engine.c), with a
 * fake clock: every call is given `now`. */
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "engine/engine.h"
#include "lib/htab.h"
#include "lib/xalloc.h"

#define T0 INT64_C(1763800000000)

static struct dq_str S(const char *s) { return (struct dq_str){s, strlen(s)}; }

static struct dq_add mk(const char *topic, const char *id, const char *body,
                        int64_t due) {
    struct dq_add a = {
        .topic = S(topic), .id = S(id), .body = S(body), .due = due,
        .ttr = 1000, .retries = 2,
        .backoff = {DQ_BACKOFF_EXP, 100, 1000},
    };
    return a;
}

/* --- hook recorder ----------------------------------------------------------- */

struct rec {
    int nready;
    char ready_topic[16][32];
    uint64_t ready_count[16];
    int nexpire;
    char expire_id[64][32];
    bool expire_dead[64];
};

static void on_ready(void *ud, struct dq_str topic, uint64_t ready) {
    struct rec *r = ud;
    if (r->nready < 16) {
        snprintf(r->ready_topic[r->nready], 32, "%.*s", (int)topic.len, topic.p);
        r->ready_count[r->nready] = ready;
    }
    r->nready++;
}

static void on_expire(void *ud, const struct dq_job *j, bool dead) {
    struct rec *r = ud;
    assert_int_equal(j->state, dead ? DQ_DEAD : DQ_READY);
    if (r->nexpire < 64) {
        snprintf(r->expire_id[r->nexpire], 32, "%.*s", (int)j->id.len, j->id.p);
        r->expire_dead[r->nexpire] = dead;
    }
    r->nexpire++;
}

static struct engine *new_engine(struct rec *r, uint64_t max_jobs) {
    struct engine_config c = {.max_jobs = max_jobs};
    if (r) {
        memset(r, 0, sizeof *r);
        c.hooks.on_ready = on_ready;
        c.hooks.on_expire = on_expire;
        c.hooks.ud = r;
    }
    struct engine *e = engine_new(&c, T0);
    assert_non_null(e);
    return e;
}

static int state_of(struct engine *e, const char *topic, const char *id) {
    struct dq_job j;
    if (!engine_get(e, S(topic), S(id), &j)) return -1;
    return (int)j.state;
}

static struct dq_job get(struct engine *e, const char *topic, const char *id) {
    struct dq_job j;
    assert_int_equal(engine_get(e, S(topic), S(id), &j), 1);
    return j;
}

static void assert_str(struct dq_str s, const char *want) {
    assert_int_equal(s.len, strlen(want));
    assert_memory_equal(s.p, want, s.len);
}

/* Reserves one job of `topic` and checks its id (NULL = none expected). */
static void reserve1(struct engine *e, int64_t now, const char *topic,
                     const char *want) {
    struct dq_str t = S(topic);
    struct dq_job out[1];
    int n = engine_reserve(e, now, &t, 1, 1, out);
    if (!want) {
        assert_int_equal(n, 0);
        return;
    }
    assert_int_equal(n, 1);
    assert_str(out[0].id, want);
    assert_str(out[0].topic, topic);
}

static struct dq_stats stats(struct engine *e, const char *topic) {
    struct dq_stats s;
    engine_stats(e, S(topic), &s);
    return s;
}

/* --- tests -------------------------------------------------------------------- */

static void test_new_free(void **state) {
    struct engine *e = engine_new(NULL, T0);
    assert_non_null(e);
    assert_int_equal(engine_count(e), 0);
    assert_int_equal(engine_next_expiry(e), INT64_MAX);
    assert_false(engine_advance(e, T0 + 1000000, 100));
    engine_free(e);
    engine_free(NULL);
}

static void test_add_get(void **state) {
    struct rec r;
    struct engine *e = new_engine(&r, 0);
    struct dq_add a = mk("orders", "o-1", "hello", T0 + 500);
    a.backoff = (struct dq_backoff){DQ_BACKOFF_FIXED, 250, 0};
    struct dq_job v;
    assert_int_equal(engine_add(e, T0, &a, &v), DQ_DELAYED);
    assert_str(v.id, "o-1");
    assert_int_equal(r.nready, 0);
    struct dq_job j = get(e, "orders", "o-1");
    assert_str(j.topic, "orders");
    assert_str(j.body, "hello");
    assert_int_equal(j.state, DQ_DELAYED);
    assert_int_equal(j.due, T0 + 500);
    assert_int_equal(j.created, T0);
    assert_int_equal(j.deadline, 0);
    assert_int_equal(j.ttr, 1000);
    assert_int_equal(j.retries, 2);
    assert_int_equal(j.attempts, 0);
    assert_int_equal(j.backoff.kind, DQ_BACKOFF_FIXED);
    assert_int_equal(j.backoff.base, 250);
    /* due <= now: ready at once, on_ready fires. */
    a = mk("orders", "o-2", "", T0);
    assert_int_equal(engine_add(e, T0, &a, NULL), DQ_READY);
    a = mk("orders", "o-3", "x", T0 - 5000);
    assert_int_equal(engine_add(e, T0, &a, NULL), DQ_READY);
    assert_int_equal(r.nready, 2);
    assert_string_equal(r.ready_topic[1], "orders");
    assert_int_equal(r.ready_count[1], 2);
    assert_int_equal(get(e, "orders", "o-2").body.len, 0);
    /* Binary-safe body and ids that differ by length only. */
    a = mk("orders", "o-33", "", T0);
    a.body = (struct dq_str){"a\0b", 3};
    assert_int_equal(engine_add(e, T0, &a, NULL), DQ_READY);
    j = get(e, "orders", "o-33");
    assert_int_equal(j.body.len, 3);
    assert_memory_equal(j.body.p, "a\0b", 3);
    assert_int_equal(state_of(e, "orders", "o"), -1);
    assert_int_equal(state_of(e, "other", "o-1"), -1);
    assert_int_equal(engine_count(e), 4);
    engine_free(e);
}

static void test_exists_replace_busy(void **state) {
    struct engine *e = new_engine(NULL, 0);
    struct dq_add a = mk("t", "a", "one", T0 + 100);
    assert_int_equal(engine_add(e, T0, &a, NULL), DQ_DELAYED);
    assert_int_equal(engine_add(e, T0, &a, NULL), ENGINE_EEXISTS);
    /* REPLACE a delayed job: new body, due and options. */
    struct dq_add b = mk("t", "a", "two-longer-body", T0);
    b.replace = true;
    b.ttr = 7000;
    assert_int_equal(engine_add(e, T0 + 1, &b, NULL), DQ_READY);
    struct dq_job j = get(e, "t", "a");
    assert_str(j.body, "two-longer-body");
    assert_int_equal(j.ttr, 7000);
    assert_int_equal(j.created, T0 + 1);
    assert_int_equal(engine_next_expiry(e), INT64_MAX); /* old timer gone */
    assert_int_equal(engine_count(e), 1);
    /* Reserved: BUSY, unchanged. */
    reserve1(e, T0 + 2, "t", "a");
    assert_int_equal(engine_add(e, T0 + 2, &b, NULL), ENGINE_EBUSY);
    assert_int_equal(get(e, "t", "a").state, DQ_RESERVED);
    /* Dead: replace resets attempts. */
    assert_int_equal(engine_nack(e, T0 + 3, S("t"), S("a"), 0), DQ_READY);
    reserve1(e, T0 + 3, "t", "a");
    reserve1(e, T0 + 3, "t", NULL);
    assert_int_equal(engine_nack(e, T0 + 3, S("t"), S("a"), 0), DQ_READY);
    reserve1(e, T0 + 3, "t", "a");
    assert_int_equal(get(e, "t", "a").attempts, 3);
    assert_int_equal(engine_nack(e, T0 + 4, S("t"), S("a"), 0), DQ_DEAD);
    b.due = T0 + 1000;
    assert_int_equal(engine_add(e, T0 + 5, &b, NULL), DQ_DELAYED);
    j = get(e, "t", "a");
    assert_int_equal(j.attempts, 0);
    assert_int_equal(j.state, DQ_DELAYED);
    assert_int_equal(j.due, T0 + 1000);
    struct dq_stats s = stats(e, "");
    assert_int_equal(s.added, 3);
    assert_int_equal(s.jobs[DQ_DELAYED], 1);
    assert_int_equal(s.jobs[DQ_DEAD], 0);
    assert_int_equal(s.jobs[DQ_READY] + s.jobs[DQ_RESERVED], 0);
    /* REPLACE of an absent id is a plain ADD. */
    b.id = S("new");
    assert_int_equal(engine_add(e, T0 + 5, &b, NULL), DQ_DELAYED);
    assert_int_equal(engine_count(e), 2);
    engine_free(e);
}

static void test_max_jobs(void **state) {
    struct engine *e = new_engine(NULL, 2);
    struct dq_add a = mk("t", "a", "", T0);
    assert_int_equal(engine_add(e, T0, &a, NULL), DQ_READY);
    a.id = S("b");
    assert_int_equal(engine_add(e, T0, &a, NULL), DQ_READY);
    a.id = S("c");
    assert_int_equal(engine_add(e, T0, &a, NULL), ENGINE_EFULL);
    a.topic = S("u");
    assert_int_equal(engine_add(e, T0, &a, NULL), ENGINE_EFULL);
    /* No trace of the refused topic. */
    struct dq_stats s = stats(e, "u");
    assert_int_equal(s.added, 0);
    /* EEXISTS wins over FULL; a replace of an existing job is allowed. */
    a = mk("t", "a", "", T0);
    assert_int_equal(engine_add(e, T0, &a, NULL), ENGINE_EEXISTS);
    a.replace = true;
    assert_int_equal(engine_add(e, T0, &a, NULL), DQ_READY);
    assert_int_equal(engine_del(e, S("t"), S("b")), 1);
    a.id = S("c");
    assert_int_equal(engine_add(e, T0, &a, NULL), DQ_READY);
    assert_int_equal(engine_count(e), 2);
    engine_free(e);
}

static void test_delayed_to_ready(void **state) {
    struct rec r;
    struct engine *e = new_engine(&r, 0);
    struct dq_add a = mk("t", "late", "", T0 + 250);
    engine_add(e, T0, &a, NULL);
    a = mk("t", "early", "", T0 + 100);
    engine_add(e, T0, &a, NULL);
    a = mk("u", "x", "", T0 + 100);
    engine_add(e, T0, &a, NULL);
    assert_int_equal(engine_next_expiry(e), T0 + 100);
    assert_false(engine_advance(e, T0 + 99, 100));
    assert_int_equal(state_of(e, "t", "early"), DQ_DELAYED);
    assert_int_equal(r.nready, 0);
    assert_false(engine_advance(e, T0 + 100, 100));
    assert_int_equal(state_of(e, "t", "early"), DQ_READY);
    assert_int_equal(state_of(e, "t", "late"), DQ_DELAYED);
    assert_int_equal(r.nready, 2); /* once per topic, after the batch */
    assert_int_equal(engine_next_expiry(e), T0 + 250);
    assert_false(engine_advance(e, T0 + 1000, 100));
    assert_int_equal(r.nready, 3);
    assert_string_equal(r.ready_topic[2], "t");
    assert_int_equal(r.ready_count[2], 2);
    assert_int_equal(engine_next_expiry(e), INT64_MAX);
    reserve1(e, T0 + 1000, "t", "early");
    reserve1(e, T0 + 1000, "t", "late");
    engine_free(e);
}

/* Ready order: time the job became ready, ties in the order added. */
static void test_order(void **state) {
    struct engine *e = new_engine(NULL, 0);
    static const struct { const char *id; int64_t due; } in[] = {
        {"d300a", 300}, {"d100a", 100}, {"d200", 200}, {"d100b", 100},
        {"d300b", 300}, {"d100c", 100}, {"far", 200000}, {"d300c", 300},
    };
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        struct dq_add a = mk("t", in[i].id, "", T0 + in[i].due);
        engine_add(e, T0, &a, NULL);
    }
    struct dq_add a = mk("t", "now0", "", T0);
    engine_add(e, T0, &a, NULL); /* ready first: it became ready first */
    assert_false(engine_advance(e, T0 + 300000, 1000));
    a = mk("t", "now1", "", T0);
    engine_add(e, T0 + 300000, &a, NULL);
    const char *want[] = {"now0", "d100a", "d100b", "d100c", "d200", "d300a",
                          "d300b", "d300c", "far", "now1"};
    struct dq_str t = S("t");
    struct dq_job out[16];
    int n = engine_reserve(e, T0 + 300000, &t, 1, 16, out);
    assert_int_equal(n, 10);
    for (int i = 0; i < n; i++) assert_str(out[i].id, want[i]);
    engine_free(e);
}

static void test_reserve_multi_topic(void **state) {
    struct engine *e = new_engine(NULL, 0);
    const char *ids[] = {"1", "2", "3"};
    for (int i = 0; i < 3; i++) {
        struct dq_add a = mk("a", ids[i], "", T0);
        engine_add(e, T0, &a, NULL);
        a.topic = S("b");
        engine_add(e, T0, &a, NULL);
    }
    struct dq_str ts[3] = {S("missing"), S("b"), S("a")};
    struct dq_job out[8];
    assert_int_equal(engine_reserve(e, T0, ts, 3, 0, out), 0);
    int n = engine_reserve(e, T0 + 10, ts, 3, 4, out);
    assert_int_equal(n, 4);
    assert_str(out[0].topic, "b");
    assert_str(out[2].topic, "b");
    assert_str(out[2].id, "3");
    assert_str(out[3].topic, "a");
    assert_str(out[3].id, "1");
    assert_int_equal(out[3].attempts, 1);
    assert_int_equal(out[3].deadline, T0 + 10 + 1000);
    assert_int_equal(out[3].state, DQ_RESERVED);
    n = engine_reserve(e, T0 + 10, ts, 3, 8, out);
    assert_int_equal(n, 2);
    assert_int_equal(engine_reserve(e, T0 + 10, ts, 3, 8, out), 0);
    struct dq_stats s = stats(e, "");
    assert_int_equal(s.reserved, 6);
    assert_int_equal(s.jobs[DQ_RESERVED], 6);
    assert_int_equal(stats(e, "a").reserved, 3);
    engine_free(e);
}

/* Lease end: redelivery while attempts <= retries, then dead. */
static void test_ttr_expiry(void **state) {
    struct rec r;
    struct engine *e = new_engine(&r, 0);
    struct dq_add a = mk("t", "j", "", T0); /* ttr 1000, retries 2 */
    engine_add(e, T0, &a, NULL);
    int64_t now = T0;
    for (int attempt = 1; attempt <= 3; attempt++) {
        reserve1(e, now, "t", "j");
        struct dq_job j = get(e, "t", "j");
        assert_int_equal(j.attempts, attempt);
        assert_int_equal(j.deadline, now + 1000);
        assert_int_equal(engine_next_expiry(e), now + 1000);
        assert_false(engine_advance(e, now + 999, 10));
        assert_int_equal(j.state, DQ_RESERVED);
        assert_int_equal(state_of(e, "t", "j"), DQ_RESERVED);
        assert_false(engine_advance(e, now + 1000, 10));
        assert_int_equal(r.nexpire, attempt);
        assert_string_equal(r.expire_id[attempt - 1], "j");
        now += 1000;
        if (attempt < 3) {
            assert_false(r.expire_dead[attempt - 1]);
            assert_int_equal(state_of(e, "t", "j"), DQ_READY);
        } else {
            assert_true(r.expire_dead[attempt - 1]);
            assert_int_equal(state_of(e, "t", "j"), DQ_DEAD);
        }
    }
    struct dq_job j = get(e, "t", "j");
    assert_int_equal(j.attempts, 3);
    assert_int_equal(j.deadline, 0);
    /* a lease end makes the job ready again, due at that lease end; the
     * last one made it dead, which keeps the due of the ready it left */
    assert_int_equal(j.due, T0 + 2000);
    struct dq_stats s = stats(e, "t");
    assert_int_equal(s.expired, 3);
    assert_int_equal(s.dead, 1);
    assert_int_equal(s.reserved, 3);
    assert_int_equal(s.jobs[DQ_DEAD], 1);
    reserve1(e, now, "t", NULL);
    assert_int_equal(engine_next_expiry(e), INT64_MAX);
    engine_free(e);
}

/* STATS of a topic names the due time of the ready job handed out next. */
static void test_oldest_ready(void **state) {
    struct engine *e = new_engine(NULL, 0);
    struct dq_add a = mk("t", "late", "", T0 + 300);
    struct dq_job v;
    engine_add(e, T0, &a, &v);
    assert_int_equal(stats(e, "t").oldest_ready, 0); /* none ready yet */
    a = mk("t", "early", "", T0 + 100);
    engine_add(e, T0, &a, &v);
    engine_advance(e, T0 + 1000, 100);
    assert_int_equal(stats(e, "t").oldest_ready, T0 + 100);
    reserve1(e, T0 + 1000, "t", "early");
    assert_int_equal(stats(e, "t").oldest_ready, T0 + 300);
    reserve1(e, T0 + 1000, "t", "late");
    assert_int_equal(stats(e, "t").oldest_ready, 0);
    assert_int_equal(stats(e, "nosuch").oldest_ready, 0);
    engine_free(e);
}

static void test_touch(void **state) {
    struct engine *e = new_engine(NULL, 0);
    struct dq_add a = mk("t", "j", "", T0);
    engine_add(e, T0, &a, NULL);
    int64_t dl = 0;
    assert_int_equal(engine_touch(e, T0, S("t"), S("j"), 0, &dl),
                     ENGINE_ENOTRESERVED);
    assert_int_equal(engine_touch(e, T0, S("t"), S("nope"), 0, &dl),
                     ENGINE_ENOTRESERVED);
    reserve1(e, T0, "t", "j");
    assert_int_equal(engine_touch(e, T0 + 900, S("t"), S("j"), 0, &dl), 0);
    assert_int_equal(dl, T0 + 1900);
    assert_int_equal(get(e, "t", "j").deadline, T0 + 1900);
    assert_false(engine_advance(e, T0 + 1899, 10));
    assert_int_equal(state_of(e, "t", "j"), DQ_RESERVED);
    assert_int_equal(engine_touch(e, T0 + 1899, S("t"), S("j"), 50, &dl), 0);
    assert_int_equal(dl, T0 + 1949);
    assert_int_equal(engine_next_expiry(e), T0 + 1949);
    assert_false(engine_advance(e, T0 + 1949, 10));
    assert_int_equal(state_of(e, "t", "j"), DQ_READY);
    engine_free(e);
}

static void test_nack(void **state) {
    struct rec r;
    struct engine *e = new_engine(&r, 0);
    struct dq_add a = mk("t", "j", "", T0);
    a.retries = 10;
    a.backoff = (struct dq_backoff){DQ_BACKOFF_EXP, 100, 1000};
    engine_add(e, T0, &a, NULL);
    /* Not reserved: absent, ready, delayed, dead. */
    assert_int_equal(engine_nack(e, T0, S("t"), S("x"), -1), ENGINE_ENOTRESERVED);
    assert_int_equal(engine_nack(e, T0, S("x"), S("j"), -1), ENGINE_ENOTRESERVED);
    assert_int_equal(engine_nack(e, T0, S("t"), S("j"), -1), ENGINE_ENOTRESERVED);
    /* EXP backoff: 100, 200, 400, 800, 1000, 1000 (capped). */
    int64_t now = T0;
    const int64_t want[] = {100, 200, 400, 800, 1000, 1000};
    for (int i = 0; i < 6; i++) {
        reserve1(e, now, "t", "j");
        assert_int_equal(engine_nack(e, now, S("t"), S("j"), -1), DQ_DELAYED);
        struct dq_job j = get(e, "t", "j");
        assert_int_equal(j.state, DQ_DELAYED);
        assert_int_equal(j.due, now + want[i]);
        assert_int_equal(j.attempts, i + 1);
        assert_int_equal(engine_next_expiry(e), now + want[i]);
        assert_int_equal(engine_nack(e, now, S("t"), S("j"), -1),
                         ENGINE_ENOTRESERVED);
        now += want[i];
        assert_false(engine_advance(e, now, 10));
        assert_int_equal(state_of(e, "t", "j"), DQ_READY);
    }
    /* Explicit delay overrides the backoff; delay 0 = straight to ready. */
    reserve1(e, now, "t", "j");
    assert_int_equal(engine_nack(e, now, S("t"), S("j"), 12345), DQ_DELAYED);
    assert_int_equal(get(e, "t", "j").due, now + 12345);
    now += 12345;
    engine_advance(e, now, 10);
    reserve1(e, now, "t", "j");
    int before = r.nready;
    assert_int_equal(engine_nack(e, now, S("t"), S("j"), 0), DQ_READY);
    assert_int_equal(r.nready, before + 1);
    assert_int_equal(get(e, "t", "j").due, now);
    assert_int_equal(stats(e, "t").nacked, 8);

    /* FIXED backoff. */
    a = mk("f", "j", "", T0);
    a.backoff = (struct dq_backoff){DQ_BACKOFF_FIXED, 777, 0};
    engine_add(e, now, &a, NULL);
    for (int i = 0; i < 2; i++) {
        reserve1(e, now, "f", "j");
        assert_int_equal(engine_nack(e, now, S("f"), S("j"), -1), DQ_DELAYED);
        assert_int_equal(get(e, "f", "j").due, now + 777);
        now += 777;
        engine_advance(e, now, 10);
    }
    /* retries = 2: the third attempt's NACK kills it. */
    reserve1(e, now, "f", "j");
    assert_int_equal(get(e, "f", "j").attempts, 3);
    assert_int_equal(engine_nack(e, now, S("f"), S("j"), -1), DQ_DEAD);
    struct dq_job j = get(e, "f", "j");
    assert_int_equal(j.state, DQ_DEAD);
    assert_int_equal(j.deadline, 0);
    struct dq_stats s = stats(e, "f");
    assert_int_equal(s.dead, 1);
    assert_int_equal(s.nacked, 3);
    assert_int_equal(s.jobs[DQ_DEAD], 1);
    /* retries = 0: first NACK kills. */
    a = mk("z", "j", "", T0);
    a.retries = 0;
    engine_add(e, now, &a, NULL);
    reserve1(e, now, "z", "j");
    assert_int_equal(engine_nack(e, now, S("z"), S("j"), 5), DQ_DEAD);
    engine_free(e);
}

static void test_kick(void **state) {
    struct rec r;
    struct engine *e = new_engine(&r, 0);
    const char *ids[] = {"a", "b", "c", "d"};
    for (int i = 0; i < 4; i++) {
        struct dq_add a = mk("t", ids[i], "", T0);
        a.retries = 0;
        engine_add(e, T0, &a, NULL);
    }
    struct dq_str t = S("t");
    struct dq_job out[4];
    assert_int_equal(engine_reserve(e, T0, &t, 1, 4, out), 4);
    /* Die in the order c, a, d, b. */
    assert_int_equal(engine_nack(e, T0, t, S("c"), -1), DQ_DEAD);
    assert_int_equal(engine_nack(e, T0, t, S("a"), -1), DQ_DEAD);
    assert_int_equal(engine_nack(e, T0, t, S("d"), -1), DQ_DEAD);
    assert_int_equal(engine_nack(e, T0, t, S("b"), -1), DQ_DEAD);
    assert_int_equal(engine_kick(e, 0, S("missing"), 0), 0);
    int before = r.nready;
    assert_int_equal(engine_kick(e, 0, t, 2), 2);
    assert_int_equal(r.nready, before + 1);
    assert_int_equal(get(e, "t", "c").attempts, 0);
    assert_int_equal(get(e, "t", "c").state, DQ_READY);
    assert_int_equal(state_of(e, "t", "d"), DQ_DEAD);
    assert_int_equal(engine_kick(e, 0, t, 0), 2);
    assert_int_equal(engine_kick(e, 0, t, 0), 0);
    assert_int_equal(r.nready, before + 2);
    const char *want[] = {"c", "a", "d", "b"};
    for (int i = 0; i < 4; i++) reserve1(e, T0 + 1, "t", want[i]);
    struct dq_stats s = stats(e, "");
    assert_int_equal(s.kicked, 4);
    assert_int_equal(s.dead, 4);
    engine_free(e);
}

static void test_release(void **state) {
    struct rec r;
    struct engine *e = new_engine(&r, 0);
    const char *ids[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        struct dq_add a = mk("t", ids[i], "", T0);
        engine_add(e, T0, &a, NULL);
    }
    reserve1(e, T0, "t", "a");
    assert_int_equal(engine_release(e, S("t"), S("b")), 0); /* ready */
    assert_int_equal(engine_release(e, S("t"), S("zz")), 0);
    int before = r.nready;
    assert_int_equal(engine_release(e, S("t"), S("a")), 1);
    assert_int_equal(r.nready, before + 1);
    struct dq_job j = get(e, "t", "a");
    assert_int_equal(j.state, DQ_READY);
    assert_int_equal(j.attempts, 0);
    assert_int_equal(j.deadline, 0);
    assert_int_equal(engine_next_expiry(e), INT64_MAX);
    reserve1(e, T0, "t", "a"); /* back at the head */
    reserve1(e, T0, "t", "b");
    assert_int_equal(engine_release(e, S("t"), S("a")), 1);
    reserve1(e, T0, "t", "a");
    assert_int_equal(get(e, "t", "a").attempts, 1);
    assert_int_equal(stats(e, "t").jobs[DQ_RESERVED], 2);
    assert_int_equal(stats(e, "t").jobs[DQ_READY], 1);
    engine_free(e);
}

/* Puts a job of topic "t" in `st` (fresh engine time T0). */
static void make_state(struct engine *e, const char *id, int st) {
    struct dq_add a = mk("t", id, "", st == DQ_DELAYED ? T0 + 5000 : T0);
    a.retries = 0;
    engine_add(e, T0, &a, NULL);
    if (st == DQ_RESERVED || st == DQ_DEAD) {
        struct dq_str t = S("t");
        struct dq_job out[1];
        while (engine_reserve(e, T0, &t, 1, 1, out) == 1 &&
               (out[0].id.len != strlen(id) ||
                memcmp(out[0].id.p, id, out[0].id.len)))
            ;
        if (st == DQ_DEAD) engine_nack(e, T0, t, S(id), -1);
    }
    assert_int_equal(state_of(e, "t", id), st);
}

static void test_del_ack_every_state(void **state) {
    for (int op = 0; op < 2; op++) {
        for (int st = 0; st < DQ_NSTATES; st++) {
            struct engine *e = new_engine(NULL, 0);
            make_state(e, "j", st);
            struct dq_str t = S("t"), id = S("j");
            int (*fn)(struct engine *, struct dq_str, struct dq_str) =
                op ? engine_ack : engine_del;
            assert_int_equal(fn(e, t, id), 1);
            assert_int_equal(fn(e, t, id), 0);
            assert_int_equal(fn(e, S("nope"), id), 0);
            assert_int_equal(state_of(e, "t", "j"), -1);
            assert_int_equal(engine_count(e), 0);
            assert_int_equal(engine_next_expiry(e), INT64_MAX);
            struct dq_stats s = stats(e, "");
            assert_int_equal(op ? s.acked : s.deleted, 1);
            assert_int_equal(op ? s.deleted : s.acked, 0);
            for (int k = 0; k < DQ_NSTATES; k++) assert_int_equal(s.jobs[k], 0);
            /* The emptied topic keeps its counters. */
            s = stats(e, "t");
            assert_int_equal(s.added, 1);
            assert_int_equal(op ? s.acked : s.deleted, 1);
            assert_false(engine_advance(e, T0 + 1000000, 10));
            engine_free(e);
        }
    }
}

static int count_cb_n;
static void count_topic_cb(void *ud, struct dq_str topic) {
    char *buf = ud;
    strncat(buf, topic.p, topic.len);
    strcat(buf, ",");
    count_cb_n++;
}

/* engine_expect announces a bulk load: nothing visible changes, and the
 * jobs restored afterwards are all there (their topic's table was sized
 * for them; see htab_reserve). */
static void test_expect_bulk_load(void **state) {
    struct engine *e = new_engine(NULL, 0);
    enum { N = 5000 };
    for (int k = 0; k < N; k++) engine_expect(e, S("bulk"));
    engine_expect_done(e);
    char buf[256] = "";
    count_cb_n = 0;
    engine_topics(e, count_topic_cb, buf);
    assert_int_equal(count_cb_n, 0); /* an announced topic holds no job */
    assert_int_equal(engine_count(e), 0);
    char id[16];
    for (int k = 0; k < N; k++) {
        snprintf(id, sizeof id, "b%d", k);
        struct dq_job j = {.topic = S("bulk"), .id = {id, strlen(id)},
                           .body = S("x"), .state = DQ_DELAYED,
                           .due = T0 + 1000 + k, .created = T0, .ttr = 1000,
                           .retries = 1};
        assert_int_equal(engine_restore(e, T0, &j), 0);
    }
    assert_int_equal(engine_count(e), N);
    for (int k = 0; k < N; k += 97) {
        snprintf(id, sizeof id, "b%d", k);
        assert_int_equal(state_of(e, "bulk", id), DQ_DELAYED);
    }
    engine_free(e);
}

static void test_purge_topics(void **state) {
    struct engine *e = new_engine(NULL, 0);
    const char *ids[] = {"d", "r", "s", "x"};
    for (int st = 0; st < DQ_NSTATES; st++) make_state(e, ids[st], st);
    struct dq_add a = mk("other", "o", "", T0);
    engine_add(e, T0, &a, NULL);
    char buf[256] = "";
    count_cb_n = 0;
    engine_topics(e, count_topic_cb, buf);
    assert_int_equal(count_cb_n, 2);
    assert_non_null(strstr(buf, "t,"));
    assert_non_null(strstr(buf, "other,"));
    assert_int_equal(engine_purge(e, S("nope")), 0);
    assert_int_equal(engine_purge(e, S("t")), 4);
    assert_int_equal(engine_purge(e, S("t")), 0);
    assert_int_equal(engine_count(e), 1);
    assert_int_equal(engine_next_expiry(e), INT64_MAX);
    struct dq_stats s = stats(e, "");
    assert_int_equal(s.deleted, 4);
    assert_int_equal(s.jobs[DQ_READY], 1);
    assert_int_equal(s.jobs[DQ_DELAYED] + s.jobs[DQ_RESERVED] + s.jobs[DQ_DEAD], 0);
    buf[0] = 0;
    count_cb_n = 0;
    engine_topics(e, count_topic_cb, buf);
    assert_string_equal(buf, "other,");
    assert_false(engine_advance(e, T0 + 100000, 10));
    engine_free(e);
}

static void test_stats(void **state) {
    struct engine *e = new_engine(NULL, 0);
    struct dq_add a = mk("a", "1", "", T0);
    engine_add(e, T0, &a, NULL);
    a.id = S("2");
    a.due = T0 + 10;
    engine_add(e, T0, &a, NULL);
    a = mk("b", "1", "", T0);
    engine_add(e, T0, &a, NULL);
    reserve1(e, T0, "b", "1");
    struct dq_stats sa = stats(e, "a"), sb = stats(e, "b"), g = stats(e, "");
    assert_int_equal(sa.added, 2);
    assert_int_equal(sa.jobs[DQ_READY], 1);
    assert_int_equal(sa.jobs[DQ_DELAYED], 1);
    assert_int_equal(sa.reserved, 0);
    assert_int_equal(sb.added, 1);
    assert_int_equal(sb.reserved, 1);
    assert_int_equal(sb.jobs[DQ_RESERVED], 1);
    assert_int_equal(g.added, 3);
    assert_int_equal(g.reserved, 1);
    assert_int_equal(g.jobs[DQ_READY] + g.jobs[DQ_DELAYED] + g.jobs[DQ_RESERVED], 3);
    struct dq_stats z = stats(e, "nope");
    struct dq_stats zero;
    memset(&zero, 0, sizeof zero);
    assert_memory_equal(&z, &zero, sizeof z);
    assert_int_equal(engine_ack(e, S("b"), S("1")), 1);
    g = stats(e, "");
    assert_int_equal(g.acked, 1);
    /* set_counters replaces the totals, not the jobs per state. */
    struct dq_stats tot = {.added = 100, .reserved = 90, .acked = 80, .nacked = 7,
                           .expired = 6, .dead = 5, .deleted = 4, .kicked = 3};
    tot.jobs[DQ_READY] = 999;
    engine_set_counters(e, &tot);
    g = stats(e, "");
    assert_int_equal(g.added, 100);
    assert_int_equal(g.kicked, 3);
    assert_int_equal(g.jobs[DQ_READY], 1);
    assert_int_equal(g.jobs[DQ_DELAYED], 1);
    engine_free(e);
}

/* --- LIST --------------------------------------------------------------------- */

struct seen {
    uint8_t *mark; /* per job number */
    int n;
};

static void list_cb(void *ud, struct dq_str id) {
    struct seen *s = ud;
    char buf[32];
    assert_true(id.len < sizeof buf);
    memcpy(buf, id.p, id.len);
    buf[id.len] = 0;
    int k = atoi(buf + 1);
    s->mark[k] = 1;
    s->n++;
}

static void add_n(struct engine *e, int k, int64_t due) {
    char id[32];
    snprintf(id, sizeof id, "j%d", k);
    struct dq_add a = mk("t", id, "", due);
    assert_true(engine_add(e, T0, &a, NULL) >= 0);
}

static void del_n(struct engine *e, int k) {
    char id[32];
    snprintf(id, sizeof id, "j%d", k);
    assert_int_equal(engine_del(e, S("t"), S(id)), 1);
}

static void test_list_state_filter(void **state) {
    struct engine *e = new_engine(NULL, 0);
    for (int k = 0; k < 50; k++) add_n(e, k, k % 2 ? T0 + 100 : T0);
    uint8_t mark[64] = {0};
    struct seen s = {mark, 0};
    uint64_t c = 0;
    int calls = 0;
    do {
        c = engine_list(e, S("t"), DQ_DELAYED, 3, c, list_cb, &s);
        calls++;
    } while (c != 0);
    assert_true(calls > 1);
    assert_int_equal(s.n, 25);
    for (int k = 0; k < 50; k++) assert_int_equal(mark[k], k % 2);
    assert_int_equal(engine_list(e, S("nope"), DQ_READY, 10, 0, list_cb, &s), 0);
    engine_free(e);
}

/* LIST COUNT n returns n ids per page while that many remain (the table's
 * empty buckets and jobs of other states do not make short pages), and a
 * page is empty only at the end (a page may end with a few more: the rest
 * of its last bucket). */
static void test_list_full_pages(void **state) {
    enum { N = 3000 };
    struct engine *e = new_engine(NULL, 0);
    for (int k = 0; k < N; k++) add_n(e, k, k % 3 ? T0 + 100 : T0);
    int want = 0;
    for (int k = 0; k < N; k++) want += k % 3 != 0;
    for (uint32_t count = 1; count <= 7; count += 3) {
        uint8_t *mark = calloc(N, 1);
        struct seen s = {mark, 0};
        uint64_t c = 0;
        do {
            int before = s.n;
            c = engine_list(e, S("t"), DQ_DELAYED, count, c, list_cb, &s);
            int got = s.n - before;
            if (c != 0) assert_true(got >= (int)count && got <= (int)count + 8);
            if (got == 0) assert_true(c == 0);
        } while (c != 0);
        for (int k = 0; k < N; k++) assert_int_equal(mark[k], k % 3 != 0);
        assert_true(s.n >= want);
        free(mark);
    }
    /* a state with no job ends at once */
    struct seen none = {NULL, 0};
    assert_int_equal(engine_list(e, S("t"), DQ_DEAD, 1, 0, list_cb, &none), 0);
    engine_free(e);
}

/* Jobs present for the whole scan are all seen, while the table grows and
 * then shrinks between calls. */
static void test_list_concurrent(void **state) {
    enum { N = 20000 };
    struct engine *e = new_engine(NULL, 0);
    uint8_t *present = calloc(N, 1), *mark = calloc(N, 1);
    for (int k = 0; k < 1000; k++) {
        add_n(e, k, T0);
        present[k] = 1;
    }
    /* Jobs 0..499 stay throughout; 500..999 are deleted mid-scan; 1000..
     * are added mid-scan and later deleted again. */
    struct seen s = {mark, 0};
    uint64_t c = 0;
    int step = 0, next = 1000, delp = 500;
    do {
        c = engine_list(e, S("t"), DQ_READY, 4, c, list_cb, &s);
        step++;
        if (step < 40) { /* grow through several resizes */
            for (int i = 0; i < 400 && next < N; i++) {
                add_n(e, next, T0);
                present[next++] = 1;
            }
        } else if (step < 80) { /* shrink back */
            for (int i = 0; i < 600 && delp < next; i++) {
                del_n(e, delp);
                present[delp++] = 0;
            }
        }
    } while (c != 0);
    for (int k = 0; k < 500; k++)
        if (!mark[k]) fail_msg("job j%d present throughout but not listed", k);
    assert_true(engine_count(e) == 500);
    free(present);
    free(mark);
    engine_free(e);
}

/* --- far jobs ----------------------------------------------------------------- */

static uint64_t dropped[16];
static int ndropped;

static void on_far_drop(void *ud, uint64_t ref) {
    if (ndropped < 16) dropped[ndropped] = ref;
    ndropped++;
}

static struct engine *far_engine(uint64_t max_jobs) {
    struct engine_config c = {.max_jobs = max_jobs};
    c.hooks.on_far_drop = on_far_drop;
    ndropped = 0;
    struct engine *e = engine_new(&c, T0);
    assert_non_null(e);
    return e;
}

static void count_id(void *ud, struct dq_str id) { (*(int *)ud)++; }

/* A far job counts as delayed everywhere, is seen by ADD's EXISTS check, DEL
 * and PURGE remove it (telling the store), LIST pages over it, and loading
 * turns it into a whole job that becomes ready at its due time. */
static void test_far_jobs(void **state) {
    struct engine *e = far_engine(3);
    struct dq_add a = mk("t", "f1", "body-1", T0 + 5000);
    assert_int_equal(engine_add_far(e, T0, &a, 0x10000002a), DQ_DELAYED);
    assert_int_equal(engine_add_far(e, T0, &a, 7), ENGINE_EEXISTS);
    assert_int_equal(engine_add(e, T0, &a, NULL), ENGINE_EEXISTS);
    struct dq_add b = mk("t", "f2", "body-2", T0 + 6000);
    assert_int_equal(engine_add_far(e, T0, &b, 99), DQ_DELAYED);
    assert_int_equal(engine_count(e), 2);
    assert_int_equal(engine_far_count(e), 2);
    struct dq_stats st = stats(e, "t");
    assert_int_equal(st.jobs[DQ_DELAYED], 2);
    assert_int_equal(st.added, 2);
    uint64_t ref = 0;
    assert_int_equal(engine_far_ref(e, S("t"), S("f1"), &ref), 1);
    assert_true(ref == 0x10000002a);
    assert_int_equal(engine_get(e, S("t"), S("f1"), NULL), 0);
    /* LIST delayed sees both far jobs and one in RAM, pages full */
    struct dq_add c = mk("t", "n1", "", T0 + 100);
    assert_true(engine_add(e, T0, &c, NULL) == DQ_DELAYED);
    assert_int_equal(engine_add(e, T0, &(struct dq_add){.topic = S("t"),
                     .id = S("x"), .due = T0}, NULL), ENGINE_EFULL);
    int n = 0;
    uint64_t cur = 0;
    do {
        int before = n;
        cur = engine_list(e, S("t"), DQ_DELAYED, 1, cur, count_id, &n);
        if (cur) assert_true(n > before);
    } while (cur);
    assert_int_equal(n, 3);
    /* nothing in other states */
    n = 0;
    assert_int_equal(engine_list(e, S("t"), DQ_READY, 10, 0, count_id, &n), 0);
    assert_int_equal(n, 0);
    /* NACK/TOUCH do not see it (it is not reserved) */
    assert_int_equal(engine_nack(e, T0, S("t"), S("f1"), 0),
                     ENGINE_ENOTRESERVED);
    /* loading at a stale ref does nothing; at the right one, a whole job */
    struct dq_job v = {.topic = S("t"), .id = S("f1"), .body = S("body-1"),
                       .due = T0 + 5000, .created = T0, .ttr = 1000,
                       .retries = 2, .backoff = {DQ_BACKOFF_EXP, 100, 1000}};
    assert_int_equal(engine_load(e, T0 + 10, &v, 5), 0);
    assert_int_equal(engine_load(e, T0 + 10, &v, 0x10000002a), 1);
    assert_int_equal(engine_far_count(e), 1);
    assert_int_equal(stats(e, "t").jobs[DQ_DELAYED], 3);
    assert_int_equal(stats(e, "t").added, 3); /* loading is not an ADD */
    struct dq_job g;
    assert_int_equal(engine_get(e, S("t"), S("f1"), &g), 1);
    assert_int_equal(g.body.len, 6);
    engine_advance(e, T0 + 5000, 100);
    assert_int_equal(stats(e, "t").jobs[DQ_READY], 2) /* f1 and n1 */;
    /* DEL of a far job tells the store; REPLACE too */
    struct dq_add r = mk("t", "f2", "new", T0 + 7000);
    r.replace = true;
    assert_int_equal(engine_add_far(e, T0, &r, 100), DQ_DELAYED);
    assert_int_equal(ndropped, 1);
    assert_true(dropped[0] == 99);
    assert_int_equal(engine_del(e, S("t"), S("f2")), 1);
    assert_int_equal(ndropped, 2);
    assert_true(dropped[1] == 100);
    assert_int_equal(stats(e, "t").deleted, 1);
    /* restore (recovery) replaces a job in RAM and counts nothing */
    assert_int_equal(engine_restore_far(e, S("t"), S("n1"), 200), 0);
    assert_int_equal(engine_far_count(e), 1);
    assert_int_equal(engine_get(e, S("t"), S("n1"), NULL), 0);
    assert_int_equal(stats(e, "t").added, 4);
    /* PURGE takes far jobs too */
    assert_int_equal(engine_purge(e, S("t")), 2);
    assert_int_equal(ndropped, 3);
    assert_int_equal(engine_count(e), 0);
    assert_int_equal(engine_far_count(e), 0);
    assert_int_equal(stats(e, "").jobs[DQ_DELAYED], 0);
    engine_free(e);
}

/* engine_far_queue restores like engine_restore_far, batch after batch
 * sorted by bucket: the later record of an id wins (in one batch or across
 * batches), a job in RAM is replaced, a new topic is made on the way. */
static void test_far_queue(void **state) {
    enum { N = (1 << 20) + 5000 };
    struct engine *e = far_engine(0);
    struct dq_add a = mk("t", "in-ram", "b", T0 + 60);
    assert_true(engine_add(e, T0, &a, NULL) >= 0);
    char id[32];
    for (int k = 0; k < 1000; k++) {
        snprintf(id, sizeof id, "j%d", k);
        engine_expect_far(e, S("t"), (struct dq_str){id, strlen(id)});
    }
    engine_expect_done(e);
    assert_int_equal(engine_far_queue(e, S("t"), S("x"), 1), 0);
    assert_int_equal(engine_far_queue(e, S("t"), S("in-ram"), 5), 0);
    assert_int_equal(engine_far_queue(e, S("t"), S("x"), 2), 0);
    for (int k = 0; k < N; k++) {
        snprintf(id, sizeof id, "j%d", k);
        const char *topic = k % 3 ? "t" : "u"; /* u: new at k = 0 */
        assert_int_equal(engine_far_queue(e, (struct dq_str){topic, 1},
                                          (struct dq_str){id, strlen(id)},
                                          (uint64_t)k + 10),
                         0);
    }
    assert_int_equal(engine_far_queue(e, S("t"), S("x"), 3), 0); /* later */
    assert_int_equal(engine_expect_end(e), 0);
    assert_int_equal(engine_far_count(e), N + 2);
    assert_int_equal(engine_count(e), N + 2);
    uint64_t ref;
    assert_int_equal(engine_far_ref(e, S("t"), S("x"), &ref), 1);
    assert_true(ref == 3);
    assert_int_equal(ndropped, 2); /* x at 1, then at 2 */
    assert_int_equal(engine_far_ref(e, S("t"), S("in-ram"), &ref), 1);
    assert_true(ref == 5);
    assert_int_equal(engine_get(e, S("t"), S("in-ram"), NULL), 0);
    for (int k = 0; k < N; k += 997) {
        snprintf(id, sizeof id, "j%d", k);
        const char *topic = k % 3 ? "t" : "u";
        assert_int_equal(engine_far_ref(e, (struct dq_str){topic, 1},
                                        (struct dq_str){id, strlen(id)}, &ref),
                         1);
        assert_true(ref == (uint64_t)k + 10);
    }
    assert_int_equal(stats(e, "u").jobs[DQ_DELAYED], (N + 2) / 3);
    assert_int_equal(stats(e, "").added, 1); /* restores count nothing */
    engine_free(e);
}

/* A PURGE of many jobs: gone at once for every call (counts, lookups, ADD
 * of the same ids), their memory freed by engine_reap slice by slice, and
 * jobs of the purged topic that the wheel hands out meanwhile go nowhere. */
static void test_big_purge_reaped_later(void **state) {
    enum { N = 20000 };
    struct engine *e = far_engine(0);
    char id[32];
    for (int k = 0; k < N; k++) {
        snprintf(id, sizeof id, "j%d", k);
        struct dq_add a = mk("t", id, "body", k % 3 == 0 ? T0 : T0 + 50 + k % 7);
        if (k % 5 == 0)
            assert_int_equal(engine_add_far(e, T0, &a, (uint64_t)k), DQ_DELAYED);
        else
            assert_true(engine_add(e, T0, &a, NULL) >= 0);
    }
    struct dq_add o = mk("other", "x", "", T0 + 60);
    assert_true(engine_add(e, T0, &o, NULL) >= 0);
    struct dq_job out[8];
    struct dq_str t = S("t");
    assert_int_equal(engine_reserve(e, T0, &t, 1, 8, out), 8);
    ndropped = 0;
    assert_int_equal(engine_purge(e, S("t")), N);
    assert_int_equal(engine_count(e), 1);
    assert_int_equal(engine_far_count(e), 0);
    struct dq_stats st = stats(e, "t");
    for (int k = 0; k < DQ_NSTATES; k++) assert_int_equal(st.jobs[k], 0);
    assert_int_equal(st.deleted, N);
    assert_int_equal(st.added, N);
    assert_int_equal(stats(e, "").jobs[DQ_DELAYED], 1);
    assert_int_equal(engine_get(e, S("t"), S("j1"), NULL), 0);
    assert_int_equal(engine_far_ref(e, S("t"), S("j5"), NULL), 0);
    int n = 0;
    assert_int_equal(engine_list(e, S("t"), DQ_DELAYED, 10, 0, count_id, &n), 0);
    assert_int_equal(n, 0);
    /* the ids are free again */
    struct dq_add again = mk("t", "j1", "new", T0 + 10);
    assert_int_equal(engine_add(e, T0, &again, NULL), DQ_DELAYED);
    /* time passes before the reaping: the purged delayed and reserved jobs
     * leave the wheel without becoming ready anywhere */
    engine_advance(e, T0 + 100000, 1000000);
    assert_int_equal(stats(e, "t").jobs[DQ_READY], 1); /* the new j1 */
    assert_int_equal(stats(e, "").jobs[DQ_READY], 2);  /* and other/x */
    int steps = 0;
    while (engine_reap(e, 1000)) steps++;
    assert_true(steps >= 5);
    assert_int_equal(ndropped, N / 5); /* every far job's record let go */
    assert_int_equal(engine_count(e), 2);
    engine_free(e); /* ASan: nothing left behind */
    /* a grave not reaped yet is freed with the engine */
    e = far_engine(0);
    for (int k = 0; k < N; k++) {
        snprintf(id, sizeof id, "j%d", k);
        struct dq_add a = mk("t", id, "b", T0 + 5);
        assert_true(engine_add(e, T0, &a, NULL) >= 0);
    }
    assert_int_equal(engine_purge(e, S("t")), N);
    engine_reap(e, 100);
    engine_free(e);
}

/* --- restore / foreach ---------------------------------------------------------- */

struct fe {
    int n;
    int per_state[DQ_NSTATES];
};

static void foreach_cb(void *ud, const struct dq_job *j) {
    struct fe *f = ud;
    f->n++;
    f->per_state[j->state]++;
}

static void test_restore_foreach(void **state) {
    struct rec r;
    struct engine *e = new_engine(&r, 0);
    struct dq_job j = {
        .topic = S("t"), .body = S("bb"), .due = T0 + 100, .created = T0 - 5,
        .ttr = 1000, .retries = 1, .attempts = 0,
        .backoff = {DQ_BACKOFF_EXP, 10, 20},
    };
    j.id = S("d");
    j.state = DQ_DELAYED;
    assert_int_equal(engine_restore(e, T0, &j), 0);
    j.id = S("r");
    j.state = DQ_READY;
    assert_int_equal(engine_restore(e, T0, &j), 0);
    j.id = S("s");
    j.state = DQ_RESERVED;
    j.attempts = 2; /* > retries: dies at lease end */
    j.deadline = T0 + 50;
    assert_int_equal(engine_restore(e, T0, &j), 0);
    j.id = S("x");
    j.state = DQ_DEAD;
    j.attempts = 2;
    assert_int_equal(engine_restore(e, T0, &j), 0);
    assert_int_equal(engine_restore(e, T0, &j), ENGINE_EEXISTS);
    assert_int_equal(r.nready, 0);
    struct dq_stats s = stats(e, "");
    assert_int_equal(s.added, 0);
    assert_int_equal(s.jobs[DQ_DELAYED], 1);
    assert_int_equal(s.jobs[DQ_READY], 1);
    assert_int_equal(s.jobs[DQ_RESERVED], 1);
    assert_int_equal(s.jobs[DQ_DEAD], 1);
    struct dq_job g = get(e, "t", "s");
    assert_int_equal(g.deadline, T0 + 50);
    assert_int_equal(g.attempts, 2);
    assert_int_equal(g.created, T0 - 5);
    assert_str(g.body, "bb");
    struct fe f = {0};
    engine_foreach(e, foreach_cb, &f);
    assert_int_equal(f.n, 4);
    for (int k = 0; k < DQ_NSTATES; k++) assert_int_equal(f.per_state[k], 1);
    assert_int_equal(engine_next_expiry(e), T0 + 50);
    assert_false(engine_advance(e, T0 + 50, 10));
    assert_int_equal(r.nexpire, 1);
    assert_true(r.expire_dead[0]);
    assert_int_equal(state_of(e, "t", "s"), DQ_DEAD);
    assert_false(engine_advance(e, T0 + 100, 10));
    assert_int_equal(state_of(e, "t", "d"), DQ_READY);
    reserve1(e, T0 + 100, "t", "r");
    reserve1(e, T0 + 100, "t", "d");
    assert_int_equal(engine_kick(e, 0, S("t"), 0), 2);
    engine_free(e);
}

/* --- allocation failure --------------------------------------------------------- */

static void test_alloc_failure(void **state) {
    xalloc_fail_after(0);
    assert_null(engine_new(NULL, T0));
    xalloc_fail_after(1);
    assert_null(engine_new(NULL, T0));
    xalloc_fail_after(-1);

    struct engine *e = new_engine(NULL, 0);
    struct dq_add a = mk("t", "a", "body", T0 + 10);
    /* A new topic needs several allocations; each failing point leaves
     * nothing behind. */
    int fails = 0;
    for (long k = 0;; k++) {
        xalloc_fail_after(k);
        int rc = engine_add(e, T0, &a, NULL);
        xalloc_fail_after(-1);
        if (rc >= 0) break;
        assert_int_equal(rc, ENGINE_ENOMEM);
        fails++;
        assert_int_equal(engine_count(e), 0);
        assert_int_equal(stats(e, "").added, 0);
        count_cb_n = 0;
        char buf[64] = "";
        engine_topics(e, count_topic_cb, buf);
        assert_int_equal(count_cb_n, 0);
        assert_int_equal(engine_next_expiry(e), INT64_MAX);
    }
    assert_true(fails >= 2);
    /* Existing topic: the job allocation fails. */
    a.id = S("b");
    xalloc_fail_after(0);
    assert_int_equal(engine_add(e, T0, &a, NULL), ENGINE_ENOMEM);
    xalloc_fail_after(-1);
    assert_int_equal(engine_count(e), 1);
    /* Failed REPLACE keeps the old job. */
    struct dq_add b = mk("t", "a", "new", T0);
    b.replace = true;
    xalloc_fail_after(0);
    assert_int_equal(engine_add(e, T0, &b, NULL), ENGINE_ENOMEM);
    xalloc_fail_after(-1);
    struct dq_job j = get(e, "t", "a");
    assert_str(j.body, "body");
    assert_int_equal(j.state, DQ_DELAYED);
    /* Restore. */
    struct dq_job r = j;
    r.id = S("c");
    xalloc_fail_after(0);
    assert_int_equal(engine_restore(e, T0, &r), ENGINE_ENOMEM);
    xalloc_fail_after(-1);
    assert_int_equal(state_of(e, "t", "c"), -1);
    /* Failing table growth does not fail ADDs: each ADD below may make
     * its job allocation, and any growth after it fails. */
    for (int k = 0; k < 1000; k++) {
        char id[16];
        snprintf(id, sizeof id, "g%d", k);
        struct dq_add g = mk("t", id, "", T0);
        xalloc_fail_after(1);
        assert_int_equal(engine_add(e, T0, &g, NULL), DQ_READY);
        xalloc_fail_after(-1);
    }
    for (int k = 0; k < 1000; k++) {
        char id[16];
        snprintf(id, sizeof id, "g%d", k);
        assert_int_equal(state_of(e, "t", id), DQ_READY);
    }
    for (int k = 0; k < 1000; k += 2) {
        char id[16];
        snprintf(id, sizeof id, "g%d", k);
        assert_int_equal(engine_del(e, S("t"), S(id)), 1);
    }
    for (int k = 1; k < 1000; k += 2) {
        char id[16];
        snprintf(id, sizeof id, "g%d", k);
        assert_int_equal(state_of(e, "t", id), DQ_READY);
    }
    engine_free(e);
}

/* --- a million jobs in one millisecond -------------------------------------------- */

static void on_ready_count(void *ud, struct dq_str topic, uint64_t ready) {
    (*(int *)ud)++;
}

static double ms_since(const struct timespec *a) {
    struct timespec b;
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)(b.tv_sec - a->tv_sec) * 1e3 +
           (double)(b.tv_nsec - a->tv_nsec) / 1e6;
}

static void test_million_same_ms(void **state) {
    enum { N = 1000000, BUDGET = 10000 };
    int ready_calls = 0;
    struct engine_config c = {.hooks = {.on_ready = on_ready_count,
                                        .ud = &ready_calls}};
    struct engine *e = engine_new(&c, T0);
    assert_non_null(e);
    int64_t due = T0 + 3600 * 1000; /* an hour ahead: a high wheel level */
    char id[16];
    for (int k = 0; k < N; k++) {
        snprintf(id, sizeof id, "%07d", k);
        struct dq_add a = mk("t", id, "", due);
        assert_int_equal(engine_add(e, T0, &a, NULL), DQ_DELAYED);
    }
    assert_true(engine_next_expiry(e) <= due);
    /* Before due, nothing becomes ready (the slot of one time is spliced
     * down the wheel at once, not cascaded job by job). */
    int early = 0;
    while (engine_advance(e, due - 1, BUDGET)) assert_true(++early < 1000);
    assert_int_equal(stats(e, "t").jobs[DQ_READY], 0);
    int calls = 0;
    double worst = 0;
    struct dq_stats s;
    bool more;
    do {
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        engine_stats(e, S("t"), &s);
        uint64_t before = s.jobs[DQ_READY];
        more = engine_advance(e, due, BUDGET);
        double ms = ms_since(&t0);
        if (ms > worst) worst = ms;
        engine_stats(e, S("t"), &s);
        assert_true(s.jobs[DQ_READY] - before <= BUDGET);
        assert_true(++calls < 1000);
    } while (more);
    engine_stats(e, S("t"), &s);
    assert_int_equal(s.jobs[DQ_READY], N);
    /* once per batch that moved jobs */
    assert_true(ready_calls >= N / BUDGET && ready_calls <= N / BUDGET + 2);
    printf("    1M jobs due in one ms: %d advance calls of budget %d, "
           "slowest %.1f ms (this build)\n", calls, BUDGET, worst);
    /* Handed out in the order added. */
    struct dq_str t = S("t");
    struct dq_job *out = malloc(sizeof *out * 4096);
    int k = 0;
    for (;;) {
        int n = engine_reserve(e, due, &t, 1, 4096, out);
        if (n == 0) break;
        for (int i = 0; i < n; i++, k++) {
            snprintf(id, sizeof id, "%07d", k);
            assert_true(out[i].id.len == 7 && memcmp(out[i].id.p, id, 7) == 0);
        }
    }
    assert_int_equal(k, N);
    free(out);
    engine_free(e);
}

/* --- memory per job --------------------------------------------------------------- */

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    if (!f) return 0;
    if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
    fclose(f);
    return res * 4;
}

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

static void test_memory_per_job(void **state) {
#ifdef UNDER_ASAN
    enum { N = 100000 };
#else
    enum { N = 1000000 };
#endif
    char body[100];
    memset(body, 'b', sizeof body);
    malloc_trim(0); /* count only what the engine takes from here */
    long before = rss_kb();
    struct engine *e = new_engine(NULL, 0);
    char id[16];
    for (int k = 0; k < N; k++) {
        snprintf(id, sizeof id, "id%06d", k); /* 8 bytes */
        struct dq_add a = mk("bench", id, "", T0 + 1000 + k % 100000);
        a.body = (struct dq_str){body, sizeof body};
        assert_int_equal(engine_add(e, T0, &a, NULL), DQ_DELAYED);
    }
    long after = rss_kb();
    struct dq_job j = get(e, "bench", "id000000");
    /* One allocation per job: a 73-byte header, the id, the body. */
    size_t req = 73 + 8 + sizeof body;
    void *p = malloc(req);
    size_t usable = malloc_usable_size(p);
    free(p);
    (void)j;
#ifdef UNDER_ASAN
    printf("    job allocation %zu bytes (usable %zu in this build); "
           "RSS per job not meaningful under ASan\n", req, usable);
#else
    printf("    job allocation %zu bytes, malloc_usable_size %zu; RSS per "
           "pending job (%d, 8-byte id, 100-byte body): %.1f bytes\n",
           req, usable, N, (double)(after - before) * 1024.0 / N);
    assert_true((double)(after - before) * 1024.0 / N <= 200.0);
#endif
    (void)before;
    (void)after;
    engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory_per_job), /* first: a clean heap */
        cmocka_unit_test(test_new_free),
        cmocka_unit_test(test_add_get),
        cmocka_unit_test(test_exists_replace_busy),
        cmocka_unit_test(test_max_jobs),
        cmocka_unit_test(test_delayed_to_ready),
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_reserve_multi_topic),
        cmocka_unit_test(test_ttr_expiry),
        cmocka_unit_test(test_touch),
        cmocka_unit_test(test_nack),
        cmocka_unit_test(test_kick),
        cmocka_unit_test(test_release),
        cmocka_unit_test(test_del_ack_every_state),
        cmocka_unit_test(test_purge_topics),
        cmocka_unit_test(test_expect_bulk_load),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_list_state_filter),
        cmocka_unit_test(test_list_concurrent),
        cmocka_unit_test(test_list_full_pages),
        cmocka_unit_test(test_far_jobs),
        cmocka_unit_test(test_far_queue),
        cmocka_unit_test(test_big_purge_reaped_later),
        cmocka_unit_test(test_restore_foreach),
        cmocka_unit_test(test_alloc_failure),
        cmocka_unit_test(test_million_same_ms),
        cmocka_unit_test(test_oldest_ready),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
