/* test_tier.c -- far segments (store/tier.c) on their own: placing, writing,
 * reading back, loading by window, torn tails, deletion. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/buf.h"
#include "lib/log.h"
#include "store/store.h"
#include "store/tier.h"
#include "store/wal.h"

#define H 1000 /* horizon, ms */
#define T0 1700000000000LL

static char dir[64];

static struct dq_str S(const char *s) { return (struct dq_str){s, strlen(s)}; }

static int count_far_files(void) {
    char p[128];
    snprintf(p, sizeof p, "%s/" TIER_DIR, dir);
    DIR *d = opendir(p);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strstr(de->d_name, ".far")) n++;
    if (d) closedir(d);
    return n;
}

static int setup(void **state) {
    snprintf(dir, sizeof dir, "/tmp/test_tier.XXXXXX");
    assert_non_null(mkdtemp(dir));
    log_set_level(LOG_ERROR);
    return 0;
}

static int teardown(void **state) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static struct tier *open_tier(int64_t horizon) {
    struct tier_config tc = {.dir = dir, .horizon_ms = horizon,
                             .fsync_mode = DQ_FSYNC_NO};
    struct tier *t = NULL;
    char err[256] = "";
    assert_int_equal(tier_open(&t, &tc, err, sizeof err), 0);
    return t;
}

static struct dq_job job(const char *id, const char *body, int64_t due) {
    return (struct dq_job){.topic = S("t"), .id = S(id), .body = S(body),
                           .due = due, .created = T0, .ttr = 1000,
                           .retries = 2, .state = DQ_DELAYED};
}

struct loaded {
    int n;
    char ids[16][16];
    uint64_t refs[16];
};

static int on_load(void *ud, const struct dq_job *j, uint64_t ref) {
    struct loaded *l = ud;
    assert_true(l->n < 16 && j->id.len < 16);
    memcpy(l->ids[l->n], j->id.p, j->id.len);
    l->ids[l->n][j->id.len] = 0;
    l->refs[l->n++] = ref;
    return 1;
}

static void test_place_read_load(void **state) {
    struct tier *t = open_tier(H);
    /* the window [k*H, (k+1)*H) is far while it starts after now + H */
    assert_false(tier_far(t, T0, T0 + 10));
    assert_false(tier_far(t, T0, T0 + H + 1)); /* its window starts by T0+H */
    assert_true(tier_far(t, T0, T0 + 3 * H));
    uint64_t r1, r2, r3;
    struct dq_job a = job("a", "body-a", T0 + 3 * H), b = job("b", "", T0 + 3 * H + 5),
                  c = job("c", "body-c", T0 + 6 * H);
    assert_int_equal(tier_place(t, &a, &r1), 0);
    assert_int_equal(tier_place(t, &b, &r2), 0);
    assert_int_equal(tier_place(t, &c, &r3), 0);
    assert_true(r1 >> 32 == r2 >> 32 && r1 >> 32 != r3 >> 32); /* two windows */
    /* readable before and after the write */
    struct buf scratch = BUF_INIT;
    struct dq_job v;
    assert_int_equal(tier_read(t, r1, S("t"), S("a"), &scratch, &v), 1);
    assert_int_equal(v.body.len, 6);
    assert_int_equal(tier_write(t), 0);
    assert_int_equal(count_far_files(), 2);
    assert_int_equal(tier_read(t, r3, S("t"), S("c"), &scratch, &v), 1);
    assert_memory_equal(v.body.p, "body-c", 6);
    assert_true(v.due == T0 + 6 * H && v.created == T0 && v.retries == 2);
    /* a ref and a key that do not match: not read */
    assert_int_equal(tier_read(t, r1, S("t"), S("b"), &scratch, &v), 0);
    /* nothing to load until the first window opens */
    assert_true(tier_load_at(t, T0) == (T0 + 3 * H) / H * H - H);
    struct loaded l = {0};
    assert_false(tier_load_step(t, T0, 100, on_load, NULL, &l));
    assert_int_equal(l.n, 0);
    /* it opens: a and b come back, one per step with a budget of 1 */
    int64_t now = (T0 + 3 * H) / H * H - H;
    assert_true(tier_load_step(t, now, 1, on_load, NULL, &l));
    while (tier_load_step(t, now, 1, on_load, NULL, &l)) {}
    assert_int_equal(l.n, 2);
    assert_string_equal(l.ids[0], "a");
    assert_string_equal(l.ids[1], "b");
    assert_true(l.refs[0] == r1 && l.refs[1] == r2);
    /* new jobs of that window now stay in RAM */
    assert_false(tier_far(t, now, T0 + 3 * H + 7));
    /* the loaded segment goes once marked and synced */
    assert_true(tier_unlink_waiting(t));
    tier_unlink_mark(t);
    assert_true(tier_unlink_ready(t));
    tier_unlink_loaded(t);
    assert_int_equal(count_far_files(), 1);
    buf_free(&scratch);
    tier_close(t);
    /* after a restart the other segment is still there, and loads */
    t = open_tier(H);
    memset(&l, 0, sizeof l);
    while (tier_load_step(t, T0 + 6 * H, 100, on_load, NULL, &l)) {}
    assert_int_equal(l.n, 1);
    assert_string_equal(l.ids[0], "c");
    assert_true(l.refs[0] == r3);
    tier_close(t);
}

static void test_torn_tail_and_bad_header(void **state) {
    struct tier *t = open_tier(H);
    uint64_t r;
    struct dq_job a = job("a", "x", T0 + 5 * H);
    assert_int_equal(tier_place(t, &a, &r), 0);
    assert_int_equal(tier_write(t), 0);
    tier_close(t);
    char p[160];
    snprintf(p, sizeof p, "%s/" TIER_DIR "/%05u.far", dir, (unsigned)(r >> 32));
    FILE *f = fopen(p, "ab");
    assert_non_null(f);
    fwrite("\x11\x22\x33\x44\x40\x00\x00\x00\x01", 1, 9, f); /* cut short */
    fclose(f);
    /* horizon 0: everything loads at once; the torn tail is passed over */
    t = open_tier(0);
    struct loaded l = {0};
    while (tier_load_step(t, T0, 100, on_load, NULL, &l)) {}
    assert_int_equal(l.n, 1);
    tier_close(t);
    /* a damaged header stops the open, naming the file */
    f = fopen(p, "r+b");
    assert_non_null(f);
    fwrite("garbage!", 1, 8, f);
    fclose(f);
    struct tier_config tc = {.dir = dir, .horizon_ms = H,
                             .fsync_mode = DQ_FSYNC_NO};
    char err[256] = "";
    assert_int_equal(tier_open(&t, &tc, err, sizeof err), -1);
    assert_non_null(strstr(err, ".far at offset 0"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_place_read_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_tail_and_bad_header, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
