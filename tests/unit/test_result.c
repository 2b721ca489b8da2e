/* test_result.c -- the stores' result builder (src/store/result.c): results
 * of every kind built side by side in one set, through the growth of its
 * memory, reach the callback intact; a cleared result tells only its
 * status; a reset set builds again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "store/result.h"

static struct dq_str S(const char *p) { return (struct dq_str){p, strlen(p)}; }

static void assert_str(struct dq_str v, const char *want) {
    assert_int_equal(v.len, strlen(want));
    assert_memory_equal(v.p, want, v.len);
}

/* What a callback saw, checked inside it (the result dies with it). */
struct seen {
    int calls;
    void (*check)(const struct dq_result *r, int i);
    int i;
};

static void cb(void *pd, const struct dq_result *r) {
    struct seen *s = pd;
    s->calls++;
    s->check(r, s->i);
}

#define NJOBS 300 /* enough to move the set's memory several times */

static void job_n(struct dq_job *j, int i, char *id, char *body) {
    sprintf(id, "id-%d", i);
    sprintf(body, "body %d %0*d", i, i % 50, 0);
    *j = (struct dq_job){
        .topic = S("topic"), .id = S(id), .body = S(body),
        .state = DQ_RESERVED, .due = 1000 + i, .attempts = (uint32_t)i,
        .url = i % 3 ? S("") : S("http://x/y"),
    };
}

static void check_jobs(const struct dq_result *r, int unused) {
    assert_int_equal(r->status, DQ_OK);
    assert_int_equal(r->njobs, NJOBS);
    for (int i = 0; i < NJOBS; i++) {
        char id[32], body[128];
        struct dq_job want;
        job_n(&want, i, id, body);
        const struct dq_job *j = &r->jobs[i];
        assert_str(j->topic, "topic");
        assert_str(j->id, id);
        assert_str(j->body, body);
        assert_str(j->url, i % 3 ? "" : "http://x/y");
        assert_int_equal(j->content_type.len, 0);
        assert_int_equal(j->state, DQ_RESERVED);
        assert_int_equal(j->due, 1000 + i);
        assert_int_equal(j->attempts, i);
    }
}

static void check_id(const struct dq_result *r, int unused) {
    assert_int_equal(r->status, DQ_OK);
    assert_str(r->id, "1700000000000-7");
    assert_null(r->jobs);
}

static void check_strs(const struct dq_result *r, int unused) {
    assert_int_equal(r->nstrs, NJOBS);
    assert_int_equal(r->cursor, 42);
    for (int i = 0; i < NJOBS; i++) {
        char want[32];
        sprintf(want, "s%d", i);
        assert_str(r->strs[i], want);
    }
}

static void check_stats(const struct dq_result *r, int unused) {
    assert_non_null(r->stats);
    assert_int_equal(r->stats->added, 5);
    assert_int_equal(r->stats->jobs[DQ_DEAD], 3);
}

static void check_none(const struct dq_result *r, int unused) {
    assert_int_equal(r->status, DQ_OK);
    assert_int_equal(r->n, 17);
    assert_int_equal(r->njobs, 0);
    assert_int_equal(r->nstrs, 0);
    assert_null(r->stats);
}

static void check_empty_jobs(const struct dq_result *r, int unused) {
    assert_int_equal(r->status, DQ_OK);
    assert_int_equal(r->njobs, 0);
}

static void check_failed(const struct dq_result *r, int unused) {
    assert_int_equal(r->status, DQ_IOERR);
    assert_string_equal(r->errmsg, "disk full");
    assert_int_equal(r->njobs, 0);
    assert_int_equal(r->n, 0);
}

/* The embedded store's way: many results in one set, each built whole
 * before the next starts, fired together. */
static void test_results_side_by_side_in_one_set(void **state) {
    struct res_set set = {0};
    for (int round = 0; round < 2; round++) { /* the second after a reset */
        struct res r[7];
        res_start(&r[0], DQ_OK);
        res_id(&set, &r[0], S("1700000000000-7"));
        res_start(&r[1], DQ_OK);
        res_jobs(&set, &r[1]);
        for (int i = 0; i < NJOBS; i++) {
            char id[32], body[128];
            struct dq_job j;
            job_n(&j, i, id, body);
            res_job(&set, &r[1], &j);
        }
        res_start(&r[2], DQ_OK);
        res_strs(&set, &r[2]);
        for (int i = 0; i < NJOBS; i++) {
            char v[32];
            sprintf(v, "s%d", i);
            res_str(&set, &r[2], S(v));
        }
        r[2].cursor = 42;
        res_start(&r[3], DQ_OK);
        struct dq_stats st = {.added = 5};
        st.jobs[DQ_DEAD] = 3;
        res_stats(&set, &r[3], &st);
        res_start(&r[4], DQ_OK);
        r[4].n = 17;
        res_start(&r[5], DQ_OK);
        res_jobs(&set, &r[5]);
        res_start(&r[6], DQ_OK); /* a change the log write failed */
        res_id(&set, &r[6], S("lost"));
        res_clear(&r[6]);
        r[6].status = DQ_IOERR;
        r[6].errmsg = "disk full";

        void (*checks[7])(const struct dq_result *, int) = {
            check_id, check_jobs, check_strs, check_stats, check_none,
            check_empty_jobs, check_failed,
        };
        for (int i = 0; i < 7; i++) {
            struct seen s = {.check = checks[i]};
            res_fire(&set, &r[i], cb, &s);
            assert_int_equal(s.calls, 1);
        }
        res_reset(&set, 1 << 10);
    }
    res_free(&set);
    res_free(&set); /* a freed set is a zeroed one */
}

/* The Redis store's way: a result whose jobs arrive over several replies,
 * the first of them a job with no strings at all in an empty set. */
static void check_empty_strings(const struct dq_result *r, int unused) {
    assert_int_equal(r->njobs, 2);
    assert_int_equal(r->jobs[0].body.len, 0);
    assert_non_null(r->jobs[0].body.p);
    assert_str(r->jobs[1].id, "b");
}

static void test_jobs_arriving_one_by_one(void **state) {
    struct res_set set = {0};
    struct res r;
    res_start(&r, DQ_OK);
    struct dq_job j = {.state = DQ_READY};
    res_job(&set, &r, &j);
    j.id = S("b");
    res_jobs(&set, &r); /* already a list: keeps what it has */
    res_job(&set, &r, &j);
    struct seen s = {.check = check_empty_strings};
    res_fire(&set, &r, cb, &s);
    assert_int_equal(s.calls, 1);
    res_free(&set);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_results_side_by_side_in_one_set),
        cmocka_unit_test(test_jobs_arriving_one_by_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
