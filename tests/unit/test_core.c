/* test_core.c -- the protocol-free core (src/core), called as a front end
 * would, with no socket: validation and its messages, the ADD defaults,
 * RESERVEs that wait, are woken, time out or are cancelled (their jobs
 * given back), graceful stop, and the metrics table they feed. The store
 * is the real embedded one in a temporary directory; the loop runs until
 * each callback has been seen. */
#include <dirent.h>
#include <event2/event.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tmpdir.h"

#include "core/core.h"
#include "core/metrics.h"
#include "lib/clock.h"

static struct dq_str S(const char *s) { return (struct dq_str){s, strlen(s)}; }

/* --- a core on a temporary directory ---------------------------------------- */

struct fixture {
    char dir[64];
    struct event_base *base;
    struct core *core;
};

static int setup(void **state) {
    struct fixture *fx = calloc(1, sizeof *fx);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/test_core.XXXXXX");
    assert_non_null(mkdtemp(fx->dir));
    /* as the server's: timers on the precise clock, not the coarse one
     * that lets a 20 ms timer fire after 17 */
    struct event_config *ec = event_config_new();
    event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
    fx->base = event_base_new_with_config(ec);
    event_config_free(ec);
    struct core_config cc = {
        .base = fx->base,
        .ops = &dq_store_embedded,
        .store = {.data_dir = fx->dir, .fsync_mode = DQ_FSYNC_NO},
        .max_body = 16,
        .metrics_max_topics = 2,
    };
    char err[256];
    assert_int_equal(core_open(&fx->core, &cc, err, sizeof err), 0);
    *state = fx;
    return 0;
}

static int teardown(void **state) {
    struct fixture *fx = *state;
    core_close(fx->core);
    event_base_free(fx->base);
    rm_rf(fx->dir);
    free(fx);
    return 0;
}

/* What a callback saw: a copy of the parts of the result the tests read. */
struct seen {
    int calls;
    int status;
    char msg[512];
    int64_t n;
    size_t njobs;
    char id[64];
    struct dq_job job; /* strings not kept */
};

static void record(void *pd, const struct dq_result *res) {
    struct seen *s = pd;
    s->calls++;
    s->status = res->status;
    snprintf(s->msg, sizeof s->msg, "%s", res->errmsg ? res->errmsg : "");
    s->n = res->n;
    s->njobs = res->njobs;
    snprintf(s->id, sizeof s->id, "%.*s", (int)res->id.len, res->id.p ? res->id.p : "");
    if (res->njobs) s->job = res->jobs[0];
}

/* Runs the loop until s has been called (or 10 s pass: a failure). */
static void wait_for(struct fixture *fx, struct seen *s) {
    int64_t end = clock_mono_ms() + 10000;
    while (s->calls == 0 && clock_mono_ms() < end)
        event_base_loop(fx->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    assert_int_equal(s->calls, 1);
}

static void add_ok(struct fixture *fx, const char *topic, const char *id) {
    struct core_add a = CORE_ADD_INIT;
    a.topic = S(topic);
    a.id = S(id);
    a.body = S("b");
    struct seen s = {0};
    core_add(fx->core, &a, record, &s);
    wait_for(fx, &s);
    assert_int_equal(s.status, DQ_OK);
}

/* --- validation --------------------------------------------------------------- */

/* Each bad field completes at once with INVALID (or TOOBIG) and a message
 * naming the field; nothing reaches the store. */
static void test_add_validation_names_the_field(void **state) {
    struct fixture *fx = *state;
    struct {
        const char *topic, *id, *body;
        int64_t delay, at, ttr, retries;
        int bk;
        int64_t bb, bm;
        int status;
        const char *word;
    } cases[] = {
        {"bad topic", "a", "", CORE_UNSET, CORE_UNSET, CORE_UNSET, CORE_UNSET, -1, 0, 0, DQ_INVALID, "topic"},
        {"", "a", "", CORE_UNSET, CORE_UNSET, CORE_UNSET, CORE_UNSET, -1, 0, 0, DQ_INVALID, "topic"},
        {"t", "a b", "", CORE_UNSET, CORE_UNSET, CORE_UNSET, CORE_UNSET, -1, 0, 0, DQ_INVALID, "id"},
        {"t", "a", "seventeen bytes!!", CORE_UNSET, CORE_UNSET, CORE_UNSET, CORE_UNSET, -1, 0, 0, DQ_TOOBIG, "max-body"},
        {"t", "a", "", -1, CORE_UNSET, CORE_UNSET, CORE_UNSET, -1, 0, 0, DQ_INVALID, "delay"},
        {"t", "a", "", 5, 5, CORE_UNSET, CORE_UNSET, -1, 0, 0, DQ_INVALID, "at"},
        {"t", "a", "", CORE_UNSET, CORE_UNSET, 0, CORE_UNSET, -1, 0, 0, DQ_INVALID, "ttr"},
        {"t", "a", "", CORE_UNSET, CORE_UNSET, CORE_UNSET, 1001, -1, 0, 0, DQ_INVALID, "retries"},
        {"t", "a", "", CORE_UNSET, CORE_UNSET, CORE_UNSET, CORE_UNSET, DQ_BACKOFF_EXP, 100, 50, DQ_INVALID, "backoff exp max"},
        {"t", "a", "", CORE_UNSET, CORE_UNSET, CORE_UNSET, CORE_UNSET, DQ_BACKOFF_EXP, 100, CORE_UNSET, DQ_INVALID, "backoff"},
        {"t", "a", "", CORE_UNSET, CORE_UNSET, CORE_UNSET, CORE_UNSET, 7, 1, 1, DQ_INVALID, "backoff"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct core_add a = CORE_ADD_INIT;
        a.topic = S(cases[i].topic);
        a.id = S(cases[i].id);
        a.body = S(cases[i].body);
        a.delay = cases[i].delay;
        a.at = cases[i].at;
        a.ttr = cases[i].ttr;
        a.retries = cases[i].retries;
        a.backoff_kind = cases[i].bk;
        a.backoff_base = cases[i].bb;
        a.backoff_max = cases[i].bm;
        struct seen s = {0};
        core_add(fx->core, &a, record, &s);
        assert_int_equal(s.calls, 1); /* at once, before any loop turn */
        assert_int_equal(s.status, cases[i].status);
        if (!strstr(s.msg, cases[i].word))
            fail_msg("case %zu: '%s' does not name '%s'", i, s.msg, cases[i].word);
    }
    struct seen s = {0};
    core_stats(fx->core, S(""), record, &s);
    wait_for(fx, &s);
    assert_int_equal(s.status, DQ_OK);
    struct seen t = {0};
    core_get(fx->core, S("t"), S("a"), record, &t);
    wait_for(fx, &t);
    assert_int_equal(t.njobs, 0);
}

static void test_other_requests_validate(void **state) {
    struct fixture *fx = *state;
    struct seen s = {0};
    core_nack(fx->core, S("t"), S("a"), -5, record, &s);
    assert_true(s.calls == 1 && s.status == DQ_INVALID && strstr(s.msg, "delay"));
    memset(&s, 0, sizeof s);
    core_touch(fx->core, S("t"), S("a"), 0, record, &s);
    assert_true(s.calls == 1 && s.status == DQ_INVALID && strstr(s.msg, "ttr"));
    memset(&s, 0, sizeof s);
    core_list(fx->core, S("t"), S("done"), CORE_UNSET, 0, record, &s);
    assert_true(s.calls == 1 && s.status == DQ_INVALID && strstr(s.msg, "state"));
    memset(&s, 0, sizeof s);
    core_kick(fx->core, S("t!"), CORE_UNSET, record, &s);
    assert_true(s.calls == 1 && s.status == DQ_INVALID && strstr(s.msg, "topic"));
    memset(&s, 0, sizeof s);
    struct dq_str topics[] = {S("t")};
    assert_null(core_reserve(fx->core, topics, 1, 0, 0, record, &s));
    assert_true(s.calls == 1 && s.status == DQ_INVALID && strstr(s.msg, "count"));
    memset(&s, 0, sizeof s);
    assert_null(core_reserve(fx->core, topics, 0, CORE_UNSET, 0, record, &s));
    assert_true(s.calls == 1 && s.status == DQ_INVALID && strstr(s.msg, "topic"));
}

/* --- defaults ------------------------------------------------------------------- */

static void test_add_fills_defaults_and_reads_the_clock_once(void **state) {
    struct fixture *fx = *state;
    struct core_add a = CORE_ADD_INIT;
    a.topic = S("t");
    a.id = S("a");
    a.body = S("x");
    a.delay = 60000;
    int64_t before = clock_ms();
    struct seen s = {0};
    core_add(fx->core, &a, record, &s);
    wait_for(fx, &s);
    int64_t after = clock_ms();
    assert_string_equal(s.id, "a");
    struct seen g = {0};
    core_get(fx->core, S("t"), S("a"), record, &g);
    wait_for(fx, &g);
    assert_int_equal(g.njobs, 1);
    assert_int_equal(g.job.ttr, DQ_TTR_DEFAULT);
    assert_int_equal(g.job.retries, DQ_RETRIES_DEFAULT);
    assert_int_equal(g.job.backoff.kind, DQ_BACKOFF_EXP);
    assert_int_equal(g.job.backoff.base, DQ_BACKOFF_BASE_DEFAULT);
    assert_int_equal(g.job.state, DQ_DELAYED);
    /* due and created come from the same clock read */
    assert_int_equal(g.job.due - g.job.created, 60000);
    assert_true(g.job.created >= before && g.job.created <= after);
}

/* --- waiting RESERVEs ---------------------------------------------------------------- */

static void test_reserve_no_wait_answers_at_once_with_nothing(void **state) {
    struct fixture *fx = *state;
    struct dq_str topics[] = {S("empty")};
    struct seen s = {0};
    struct core_wait *w = core_reserve(fx->core, topics, 1, CORE_UNSET, 0, record, &s);
    if (w) wait_for(fx, &s); /* a store may answer later; the embedded one at once */
    assert_int_equal(s.calls, 1);
    assert_int_equal(s.status, DQ_OK);
    assert_int_equal(s.njobs, 0);
}

static void test_waiting_reserve_is_woken_by_an_add_and_lag_recorded(void **state) {
    struct fixture *fx = *state;
    struct dq_str topics[] = {S("q")};
    struct seen s = {0};
    struct core_wait *w = core_reserve(fx->core, topics, 1, CORE_UNSET, CORE_UNSET, record, &s);
    assert_non_null(w);
    assert_int_equal(core_blocked(fx->core), 1);
    event_base_loop(fx->base, EVLOOP_NONBLOCK);
    assert_int_equal(s.calls, 0);
    add_ok(fx, "q", "j1");
    wait_for(fx, &s);
    assert_int_equal(s.njobs, 1);
    assert_int_equal(s.job.attempts, 1);
    assert_int_equal(core_blocked(fx->core), 0);
    const struct hist *lag = metrics_fire_lag_all(core_metrics(fx->core));
    assert_int_equal(lag->count, 1);
}

static void test_waiting_reserve_times_out_empty(void **state) {
    struct fixture *fx = *state;
    struct dq_str topics[] = {S("q")};
    struct seen s = {0};
    assert_non_null(core_reserve(fx->core, topics, 1, CORE_UNSET, 20, record, &s));
    int64_t t0 = clock_mono_ms();
    wait_for(fx, &s);
    int64_t took = clock_mono_ms() - t0;
    if (took < 19) fail_msg("answered after %lld ms, the timeout is 20", (long long)took);
    assert_int_equal(s.status, DQ_OK);
    assert_int_equal(s.njobs, 0);
}

/* The job is ready and was never handed out (or was given back). */
static void assert_ready_unattempted(struct fixture *fx, const char *topic,
                                     const char *id) {
    struct seen g = {0};
    core_get(fx->core, S(topic), S(id), record, &g);
    wait_for(fx, &g);
    assert_int_equal(g.job.state, DQ_READY);
    assert_int_equal(g.job.attempts, 0);
}

/* A cancelled wait never calls back, and a job that turns ready after it
 * stays ready for the next client. */
static void test_cancelled_wait_leaves_the_job_ready(void **state) {
    struct fixture *fx = *state;
    struct dq_str topics[] = {S("q")};
    struct seen s = {0};
    struct core_wait *w = core_reserve(fx->core, topics, 1, CORE_UNSET, CORE_UNSET, record, &s);
    assert_non_null(w);
    core_reserve_cancel(w);
    assert_int_equal(core_blocked(fx->core), 0);
    add_ok(fx, "q", "j1");
    for (int i = 0; i < 10; i++) event_base_loop(fx->base, EVLOOP_NONBLOCK);
    assert_int_equal(s.calls, 0);
    assert_ready_unattempted(fx, "q", "j1");
}

/* A RESERVE that does not wait borrows the caller's topics for its one
 * attempt only (the caller's buffer is scribbled on at once here), and it
 * can still be cancelled while that attempt is in flight: the job it got
 * goes back to ready. Waiters are reused: many in a row, under ASan. */
static void test_no_wait_reserve_borrows_topics_and_can_be_cancelled(void **state) {
    struct fixture *fx = *state;
    add_ok(fx, "q", "j1");
    char name[8];
    struct dq_str topics[1];
    for (int i = 0; i < 100; i++) {
        strcpy(name, "q");
        topics[0] = (struct dq_str){name, 1};
        struct seen s = {0};
        struct core_wait *w = core_reserve(fx->core, topics, 1, CORE_UNSET, 0, record, &s);
        assert_non_null(w); /* the embedded store answers after its commit */
        memset(name, 'x', sizeof name);
        assert_int_equal(core_blocked(fx->core), 0);
        core_reserve_cancel(w);
        for (int k = 0; k < 3; k++) event_base_loop(fx->base, EVLOOP_NONBLOCK);
        assert_int_equal(s.calls, 0);
    }
    assert_ready_unattempted(fx, "q", "j1");
    /* and not cancelled: the job, with fire lag recorded */
    strcpy(name, "q");
    struct seen s = {0};
    if (core_reserve(fx->core, topics, 1, CORE_UNSET, 0, record, &s)) {
        memset(name, 'x', sizeof name);
        wait_for(fx, &s);
    }
    assert_int_equal(s.njobs, 1);
    assert_int_equal(s.job.attempts, 1);
    assert_int_equal(metrics_fire_lag_all(core_metrics(fx->core))->count, 1);
}

static void test_stop_answers_waiters_and_does_not_block_new_ones(void **state) {
    struct fixture *fx = *state;
    struct dq_str topics[] = {S("q")};
    struct seen a = {0}, b = {0};
    assert_non_null(core_reserve(fx->core, topics, 1, CORE_UNSET, CORE_UNSET, record, &a));
    core_stop(fx->core); /* answered as soon as its first attempt is back */
    wait_for(fx, &a);
    assert_int_equal(a.njobs, 0);
    assert_int_equal(core_blocked(fx->core), 0);
    struct core_wait *w = core_reserve(fx->core, topics, 1, CORE_UNSET, CORE_UNSET, record, &b);
    if (w) wait_for(fx, &b);
    assert_int_equal(b.calls, 1);
    assert_int_equal(b.njobs, 0);
}

/* --- metrics ---------------------------------------------------------------------------- */

struct visit {
    int hists, add_count, other_topic;
};

static void v_family(void *ud, const char *name, const char *type, const char *help) {}
static void v_value(void *ud, const char *name, const char *labels, double v) {}
static void v_hist(void *ud, const char *name, const char *labels, const struct hist *h) {
    struct visit *vi = ud;
    vi->hists++;
    if (!strcmp(name, "delayq_command_duration_seconds") && !strcmp(labels, "command=\"add\""))
        vi->add_count = (int)h->count;
    if (!strcmp(name, "delayq_fire_lag_seconds") && !strcmp(labels, "topic=\"_other\""))
        vi->other_topic = (int)h->count;
}

/* Commands are counted; past metrics_max_topics (2 here) topics share
 * the "_other" series. */
static void test_metrics_table(void **state) {
    struct fixture *fx = *state;
    const char *names[] = {"t1", "t2", "t3", "t4"};
    for (int i = 0; i < 4; i++) {
        add_ok(fx, names[i], "j");
        struct dq_str topics[] = {S(names[i])};
        struct seen s = {0};
        if (core_reserve(fx->core, topics, 1, CORE_UNSET, 0, record, &s)) wait_for(fx, &s);
        assert_int_equal(s.njobs, 1);
    }
    struct visit vi = {0};
    struct metrics_visitor v = {v_family, v_value, v_hist, &vi};
    metrics_visit(core_metrics(fx->core), &v);
    assert_int_equal(vi.add_count, 4);
    assert_int_equal(vi.other_topic, 2);
}

/* A store's histogram reaches /metrics through its INFO lines: the sum and
 * the cumulative buckets; a malformed buckets line is not reported. */
static void test_store_hist_lines(void **state) {
    const struct store_gauge *g = &metrics_store_hists[0];
    struct hist h;
    double bounds[HIST_MAX_BOUNDS];
    char prefix[64], sum[80], buckets[80];
    snprintf(prefix, sizeof prefix, "%s", g->info);
    snprintf(sum, sizeof sum, "%s_sum", prefix);
    snprintf(buckets, sizeof buckets, "%s_buckets", prefix);
    memset(&h, 0, sizeof h);
    metrics_store_hist_line(g, "other_sum", "9", &h, bounds);
    assert_true(h.sum == 0);
    metrics_store_hist_line(g, sum, "0.25", &h, bounds);
    metrics_store_hist_line(g, buckets, "0.001=1,0.01=3,1=3,+Inf=5", &h, bounds);
    assert_int_equal(h.nbounds, 3);
    assert_true(h.bounds == bounds && bounds[1] == 0.01);
    assert_int_equal(h.count, 5);
    assert_int_equal(hist_le(&h, 0), 1);
    assert_int_equal(hist_le(&h, 1), 3);
    assert_int_equal(hist_le(&h, 2), 3);
    assert_int_equal(h.counts[3], 2);
    assert_true(h.sum == 0.25);
    const char *bad[] = {
        "", "+Inf", "0.001=1", "0.001=1,", "0.01=1,0.001=2,+Inf=2",
        "0.001=3,0.01=2,+Inf=3", "0.001=1,+Inf=0", "x=1,+Inf=1",
        "0.001=-1,+Inf=1", "0.001=1,+Inf=1,0.1=1", "0.001=1;+Inf=1",
        "0.001=1,+Inf=1x", "nan=1,+Inf=1", "inf=1,+Inf=1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        metrics_store_hist_line(g, buckets, bad[i], &h, bounds);
        if (h.nbounds != 0) fail_msg("accepted \"%s\"", bad[i]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_add_validation_names_the_field, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_requests_validate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_add_fills_defaults_and_reads_the_clock_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserve_no_wait_answers_at_once_with_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_waiting_reserve_is_woken_by_an_add_and_lag_recorded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_waiting_reserve_times_out_empty, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancelled_wait_leaves_the_job_ready, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_wait_reserve_borrows_topics_and_can_be_cancelled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_answers_waiters_and_does_not_block_new_ones, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_table, setup, teardown),
        cmocka_unit_test(test_store_hist_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
