/* test_push.c -- push delivery's pieces below the network (§9): push jobs
 * in the engine (their own ready FIFO, the URL in the job's tail), in the
 * log (PUSHJOB records; a log written before push existed still replays),
 * the signature against Standard Webhooks' published example, Retry-After,
 * URLs and the host allow-list. */
#include <dirent.h>
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

#include "engine/engine.h"
#include "lib/buf.h"
#include "lib/url.h"
#include "push/push.h"
#include "store/store.h"
#include "store/wal.h"

#define T0 INT64_C(1763800000000)

static struct dq_str S(const char *s) { return (struct dq_str){s, strlen(s)}; }

static bool str_is(struct dq_str a, const char *b) {
    return a.len == strlen(b) && memcmp(a.p, b, a.len) == 0;
}

/* --- the engine ------------------------------------------------------------ */

struct seen {
    int ready, push;
    uint64_t last_push;
};

static void on_ready(void *ud, struct dq_str t, uint64_t n) {
    ((struct seen *)ud)->ready++;
}

static void on_push_ready(void *ud, struct dq_str t, uint64_t n) {
    struct seen *s = ud;
    s->push++;
    s->last_push = n;
}

static struct dq_add add_req(const char *id, const char *url,
                             const char *ctype, int64_t due) {
    struct dq_add a = {
        .topic = S("t"), .id = S(id), .body = S("body-bytes"), .due = due,
        .ttr = 1000, .retries = 2, .backoff = {DQ_BACKOFF_EXP, 100, 1000},
    };
    if (url) a.url = S(url);
    if (ctype) a.content_type = S(ctype);
    return a;
}

static void test_engine_push_queue(void **state) {
    struct seen s = {0};
    struct engine_config ec = {
        .hooks = {.on_ready = on_ready, .on_push_ready = on_push_ready,
                  .ud = &s}};
    struct engine *e = engine_new(&ec, T0);
    struct dq_add a = add_req("p1", "http://h/x", "text/plain", T0);
    assert_int_equal(engine_add(e, T0, &a, NULL), DQ_READY);
    assert_int_equal(s.push, 1);
    assert_int_equal(s.ready, 0); /* waiters are not woken for it */
    a = add_req("plain", NULL, NULL, T0);
    assert_int_equal(engine_add(e, T0, &a, NULL), DQ_READY);
    assert_int_equal(s.ready, 1);

    /* GET shows the push fields; a plain job has none */
    struct dq_job v;
    assert_int_equal(engine_get(e, S("t"), S("p1"), &v), 1);
    assert_true(str_is(v.url, "http://h/x"));
    assert_true(str_is(v.content_type, "text/plain"));
    assert_true(str_is(v.body, "body-bytes"));
    assert_int_equal(engine_get(e, S("t"), S("plain"), &v), 1);
    assert_int_equal(v.url.len, 0);

    /* RESERVE never takes a push job, the pusher never a plain one */
    struct dq_job out[4];
    assert_int_equal(engine_reserve(e, T0, (struct dq_str[]){S("t")}, 1, 4, out), 1);
    assert_true(str_is(out[0].id, "plain"));
    assert_int_equal(engine_reserve(e, T0, (struct dq_str[]){S("t")}, 1, 4, out), 0);
    assert_int_equal(engine_reserve_push(e, T0, S("t"), 4, out), 1);
    assert_true(str_is(out[0].id, "p1"));
    assert_true(str_is(out[0].url, "http://h/x"));
    assert_int_equal(engine_reserve_push(e, T0, S("t"), 4, out), 0);

    /* released: back on the push FIFO, announced to the pusher */
    int pushes = s.push;
    assert_int_equal(engine_release(e, S("t"), S("p1")), 1);
    assert_int_equal(s.push, pushes + 1);
    assert_int_equal(engine_reserve(e, T0, (struct dq_str[]){S("t")}, 1, 4, out), 0);
    assert_int_equal(engine_reserve_push(e, T0, S("t"), 4, out), 1);

    /* a NACK with no delay and a lease end bring it back to the pusher too */
    assert_int_equal(engine_ack(e, S("t"), S("plain")), 1);
    assert_int_equal(engine_nack(e, T0, S("t"), S("p1"), 0), DQ_READY);
    assert_int_equal(engine_reserve_push(e, T0, S("t"), 4, out), 1);
    engine_advance(e, T0 + 1000, 100);
    struct dq_stats st;
    engine_stats(e, S("t"), &st);
    assert_int_equal(st.jobs[DQ_READY], 1);
    assert_int_equal(engine_reserve(e, T0 + 1000, (struct dq_str[]){S("t")}, 1, 4, out), 0);
    assert_int_equal(engine_reserve_push(e, T0 + 1000, S("t"), 4, out), 1);

    /* dead at once (410), whatever the retries left; KICK: pusher again */
    assert_int_equal(engine_nack(e, T0, S("t"), S("p1"), DQ_NACK_DEAD), DQ_DEAD);
    engine_stats(e, S("t"), &st);
    assert_int_equal(st.jobs[DQ_DEAD], 1);
    assert_int_equal(st.dead, 1);
    assert_int_equal(engine_kick(e, T0, S("t"), 0), 1);
    assert_int_equal(engine_reserve_push(e, T0, S("t"), 4, out), 1);
    assert_int_equal(out[0].attempts, 1);

    /* a delayed push job becomes the pusher's when due, in due order */
    int64_t t1 = T0 + 1000; /* the engine's time by now */
    assert_int_equal(engine_ack(e, S("t"), S("p1")), 1);
    a = add_req("p2", "https://h/2", NULL, t1 + 50);
    engine_add(e, t1, &a, NULL);
    a = add_req("p3", "https://h/3", NULL, t1 + 20);
    engine_add(e, t1, &a, NULL);
    engine_advance(e, t1 + 60, 100);
    assert_int_equal(s.last_push, 2);
    assert_int_equal(engine_reserve_push(e, t1 + 60, S("t"), 4, out), 2);
    assert_true(str_is(out[0].id, "p3"));
    assert_true(str_is(out[1].id, "p2"));
    assert_int_equal(out[1].content_type.len, 0);

    /* REPLACE turns a plain job into a push job and back */
    a = add_req("x", NULL, NULL, T0);
    engine_add(e, T0, &a, NULL);
    a = add_req("x", "http://h/x", NULL, T0);
    a.replace = true;
    engine_add(e, T0, &a, NULL);
    assert_int_equal(engine_reserve(e, T0, (struct dq_str[]){S("t")}, 1, 4, out), 0);
    a = add_req("x", NULL, NULL, T0);
    a.replace = true;
    engine_add(e, T0, &a, NULL);
    assert_int_equal(engine_reserve_push(e, T0, S("t"), 4, out), 0);
    assert_int_equal(engine_reserve(e, T0, (struct dq_str[]){S("t")}, 1, 4, out), 1);
    engine_free(e);
}

/* --- the log ---------------------------------------------------------------- */

static char dir[256];

static int setup(void **state) {
    snprintf(dir, sizeof dir, "/tmp/test_push.XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **state) {
    rm_rf(dir);
    return 0;
}

static struct wal *open_log(struct engine *e, int64_t now) {
    struct wal_config cfg = {.dir = dir, .fsync_mode = DQ_FSYNC_NO};
    struct wal *w = NULL;
    char err[512] = "";
    if (wal_open(&w, &cfg, e, now, NULL, err, sizeof err) != 0)
        fail_msg("wal_open: %s", err);
    return w;
}

/* A log written by delayqd before push delivery existed (commit 422dc94:
 * ADD t1 a hello DELAY 3600000 TTR 5000 RETRIES 7; ADD t1 b world; ADD t2
 * c "" BACKOFF FIXED 250; ADD t2 d body2; RESERVE TIMEOUT 0 FROM t2 (took
 * c); ACK t2 c; ADD t1 e x DELAY 1000000 BACKOFF EXP 10 20; DEL t1 e)
 * replays as it did. */
static void test_old_log_replays(void **state) {
    FILE *in = fopen("tests/unit/data/wal-v1/00000001.log", "rb");
    assert_non_null(in);
    char path[512];
    snprintf(path, sizeof path, "%s/00000001.log", dir);
    FILE *out = fopen(path, "wb");
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
    fclose(in);
    fclose(out);

    /* 9 s after the log was written */
    int64_t now = INT64_C(1795439030000);
    struct engine *e = engine_new(NULL, 0);
    struct wal *w = open_log(e, now);
    engine_advance(e, now, 100); /* ready jobs line up again */
    assert_int_equal(engine_count(e), 3);
    struct dq_job v;
    assert_int_equal(engine_get(e, S("t1"), S("a"), &v), 1);
    assert_int_equal(v.state, DQ_DELAYED);
    assert_int_equal(v.ttr, 5000);
    assert_int_equal(v.retries, 7);
    assert_true(str_is(v.body, "hello"));
    assert_int_equal(v.url.len, 0);
    assert_int_equal(engine_get(e, S("t1"), S("b"), &v), 1);
    assert_int_equal(v.state, DQ_READY);
    assert_true(str_is(v.body, "world"));
    assert_int_equal(engine_get(e, S("t2"), S("c"), &v), 0);
    assert_int_equal(engine_get(e, S("t1"), S("e"), &v), 0);
    assert_int_equal(engine_get(e, S("t2"), S("d"), &v), 1);
    assert_int_equal(v.state, DQ_READY);
    assert_int_equal(v.attempts, 0);
    struct dq_stats st;
    engine_stats(e, (struct dq_str){NULL, 0}, &st);
    assert_int_equal(st.added, 5);
    assert_int_equal(st.acked, 1);
    assert_int_equal(st.deleted, 1);
    assert_int_equal(st.reserved, 1);
    wal_close(w);
    engine_free(e);
}

static void append_job(struct wal *w, struct engine *e, const char *id) {
    struct dq_job v;
    assert_int_equal(engine_get(e, S("t"), S(id), &v), 1);
    struct wal_rec r = {.type = WAL_JOB, .job = v};
    wal_append(w, &r);
}

/* Push jobs survive a restart with their URL, and still go to the pusher
 * only; a plain job's record is a version 1 JOB record, unchanged. */
static void test_push_job_in_log(void **state) {
    struct engine *e = engine_new(NULL, 0);
    struct wal *w = open_log(e, T0);
    struct dq_add a = add_req("p", "https://example.com/hook?x=1", "application/json", T0);
    engine_add(e, T0, &a, NULL);
    append_job(w, e, "p");
    a = add_req("q", "http://h/", NULL, T0 + 5000);
    engine_add(e, T0, &a, NULL);
    append_job(w, e, "q");
    a = add_req("plain", NULL, NULL, T0);
    engine_add(e, T0, &a, NULL);
    append_job(w, e, "plain");
    /* a state record about a push job replays over it (take_job) */
    a = add_req("r", "http://r.example/", "text/x", T0);
    engine_add(e, T0, &a, NULL);
    append_job(w, e, "r");
    struct dq_job out[4];
    assert_int_equal(engine_reserve_push(e, T0, S("t"), 1, out), 1);
    assert_true(str_is(out[0].id, "p"));
    struct wal_rec rr = {.type = WAL_RESERVE, .job = out[0]};
    wal_append(w, &rr);
    assert_int_equal(wal_commit(w), 0);
    wal_close(w);
    engine_free(e);

    e = engine_new(NULL, 0);
    w = open_log(e, T0);
    engine_advance(e, T0, 100);
    struct dq_job v;
    assert_int_equal(engine_get(e, S("t"), S("p"), &v), 1);
    assert_int_equal(v.state, DQ_RESERVED);
    assert_true(str_is(v.url, "https://example.com/hook?x=1"));
    assert_true(str_is(v.content_type, "application/json"));
    assert_int_equal(engine_get(e, S("t"), S("q"), &v), 1);
    assert_true(str_is(v.url, "http://h/"));
    assert_int_equal(v.content_type.len, 0);
    assert_int_equal(v.state, DQ_DELAYED);
    assert_int_equal(engine_reserve(e, T0, (struct dq_str[]){S("t")}, 1, 4, out), 1);
    assert_true(str_is(out[0].id, "plain"));
    assert_int_equal(engine_reserve_push(e, T0, S("t"), 4, out), 1);
    assert_true(str_is(out[0].id, "r"));
    assert_true(str_is(out[0].url, "http://r.example/"));
    wal_close(w);
    engine_free(e);

    /* the records: types as documented in docs/log-format.md */
    struct buf b = {0};
    struct dq_job j = {.topic = S("t"), .id = S("i"), .body = S("b"),
                       .ttr = 1, .state = DQ_READY};
    struct wal_rec r = {.type = WAL_JOB, .job = j};
    size_t plain = wal_encode(&b, &r);
    assert_int_equal((uint8_t)b.p[WAL_REC_HEADER], WAL_JOB);
    r.job.url = S("http://h/");
    r.job.content_type = S("text/plain");
    size_t push = wal_encode(&b, &r);
    assert_int_equal((uint8_t)b.p[plain + WAL_REC_HEADER], WAL_JOB | WAL_PUSH);
    assert_int_equal(push, plain + 4 + strlen("http://h/") + strlen("text/plain"));
    buf_free(&b);
}

/* --- signatures, Retry-After, URLs ---------------------------------------------- */

/* The example of the Standard Webhooks specification (and its reference
 * libraries' tests). */
static void test_signature_vector(void **state) {
    /* whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, decoded */
    static const unsigned char key[] = {
        0x31, 0xf2, 0x90, 0xf6, 0xbf, 0x06, 0x29, 0x8a, 0xab, 0x4f, 0x08, 0xd4,
        0x3c, 0x3f, 0x08, 0x2c, 0xf6, 0x48, 0xa3, 0x62, 0xda, 0x2d, 0xa4, 0xb0};
    const char *id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const char *body = "{\"test\": 2432232314}";
    char sig[PUSH_SIG_MAX];
    assert_int_equal(push_sign(key, sizeof key, id, strlen(id), 1614265330,
                               body, strlen(body), sig),
                     0);
    assert_string_equal(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    /* one byte of the body changed: another signature */
    assert_int_equal(push_sign(key, sizeof key, id, strlen(id), 1614265330,
                               "{\"test\": 2432232315}", strlen(body), sig),
                     0);
    assert_string_not_equal(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}

static void test_retry_after(void **state) {
    assert_int_equal(push_retry_after("120", 0), 120);
    assert_int_equal(push_retry_after(" 0 ", 0), 0);
    assert_int_equal(push_retry_after("12abc", 0), -1);
    assert_int_equal(push_retry_after("soon", 0), -1);
    /* an HTTP date, 90 s after "now" */
    assert_int_equal(push_retry_after("Wed, 21 Oct 2015 07:28:00 GMT",
                                      1445412390),
                     90);
    assert_int_equal(push_retry_after("Wed, 21 Oct 2015 07:28:00 GMT",
                                      1445412490),
                     0);
}

static void test_urls(void **state) {
    struct url_parts u;
    assert_null(url_split("http://example.com", 18, &u));
    assert_false(u.https);
    assert_int_equal(u.host_len, 11);
    const char *s = "HTTPS://user:pw@Api.Example.com:8443/a/b?c=d#e";
    assert_null(url_split(s, strlen(s), &u));
    assert_true(u.https);
    assert_int_equal(u.host_len, strlen("Api.Example.com"));
    assert_memory_equal(u.host, "Api.Example.com", u.host_len);
    s = "http://[::1]:8080/x";
    assert_null(url_split(s, strlen(s), &u));
    assert_memory_equal(u.host, "::1", 3);
    const char *bad[] = {"ftp://h/", "http:/h", "http://", "http:///x",
                         "http://h:0/", "http://h:99999/", "http://h:/",
                         "http://h x/", "/relative", "h/x", "http://[::1/",
                         "http://h\n/"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (url_split(bad[i], strlen(bad[i]), &u) == NULL)
            fail_msg("accepted %s", bad[i]);

    assert_true(url_host_allowed(NULL, "a.b", 3));
    assert_true(url_host_allowed("", "a.b", 3));
    const char *allow = "*.example.com, 127.0.0.1,localhost";
    assert_true(url_host_allowed(allow, "API.example.com", 15));
    assert_true(url_host_allowed(allow, "127.0.0.1", 9));
    assert_true(url_host_allowed(allow, "localhost", 9));
    assert_false(url_host_allowed(allow, "example.com", 11));
    assert_false(url_host_allowed(allow, "evil.com", 8));
    assert_false(url_host_allowed(allow, "127.0.0.10", 10));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_push_queue),
        cmocka_unit_test_setup_teardown(test_old_log_replays, setup, teardown),
        cmocka_unit_test_setup_teardown(test_push_job_in_log, setup, teardown),
        cmocka_unit_test(test_signature_vector),
        cmocka_unit_test(test_retry_after),
        cmocka_unit_test(test_urls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
