/* test_redis_rec.c -- the Redis store's job record (store/redis_rec.c):
 * written for an ADD and read back, with and without a push URL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/redis_rec.h"

static struct dq_add plain_add(void) {
    struct dq_add a = {
        .topic = {"t", 1}, .id = {"j", 1}, .body = {"body\0bytes", 10},
        .due = 1763800000123, .ttr = 30000, .retries = 3,
        .backoff = {DQ_BACKOFF_FIXED, 250, 0},
    };
    return a;
}

static void test_plain_record_is_as_before_push(void **state) {
    struct dq_add a = plain_add();
    size_t n = rs_rec_size(&a);
    assert_int_equal(n, REC_HDR + 10);
    unsigned char *rec = malloc(n);
    uint64_t ord = rs_rec_ord(1763800000000, 5);
    rs_rec_write(rec, &a, 1763800000000, ord);
    assert_int_equal(rec[0], DQ_DELAYED);
    assert_false(rec[REC_ORD] & REC_PUSH);
    for (int i = 0; i < 8; i++)
        assert_int_equal(rec[REC_ORD + i], (unsigned char)(ord >> (56 - 8 * i)));
    struct dq_job j;
    struct rec_view v;
    assert_int_equal(rs_rec_read(rec, n, &j, &v), 0);
    assert_int_equal(j.due, a.due);
    assert_int_equal(j.created, 1763800000000);
    assert_int_equal(j.ttr, 30000);
    assert_int_equal(j.retries, 3);
    assert_int_equal(j.backoff.kind, DQ_BACKOFF_FIXED);
    assert_int_equal(j.backoff.base, 250);
    assert_int_equal(v.ulen, 0);
    assert_int_equal(v.body, REC_HDR);
    assert_int_equal(v.blen, 10);
    assert_memory_equal(rec + v.body, "body\0bytes", 10);
    free(rec);
}

static void test_push_record_carries_url_and_content_type(void **state) {
    struct dq_add a = plain_add();
    a.url = (struct dq_str){"https://shop.example/x", 22};
    a.content_type = (struct dq_str){"application/json", 16};
    size_t n = rs_rec_size(&a);
    assert_int_equal(n, REC_HDR + REC_PUSH_EXT + 22 + 16 + 10);
    unsigned char *rec = malloc(n);
    rs_rec_write(rec, &a, a.due, rs_rec_ord(a.due, 0));
    assert_int_equal(rec[0], DQ_READY);
    assert_true(rec[REC_ORD] & REC_PUSH);
    struct dq_job j;
    struct rec_view v;
    assert_int_equal(rs_rec_read(rec, n, &j, &v), 0);
    assert_int_equal(v.ulen, 22);
    assert_memory_equal(rec + v.url, "https://shop.example/x", 22);
    assert_int_equal(v.clen, 16);
    assert_memory_equal(rec + v.ct, "application/json", 16);
    assert_int_equal(v.blen, 10);
    assert_memory_equal(rec + v.body, "body\0bytes", 10);
    /* a record cut short is refused, never read past its end */
    for (size_t cut = REC_HDR - 1; cut < n - 10; cut++) {
        unsigned char *part = malloc(cut);
        memcpy(part, rec, cut);
        assert_int_equal(rs_rec_read(part, cut, &j, &v), -1);
        free(part);
    }
    /* no content type: the default is the reader's business */
    a.content_type = (struct dq_str){NULL, 0};
    n = rs_rec_size(&a);
    rs_rec_write(rec, &a, a.due, 0);
    assert_int_equal(rs_rec_read(rec, n, &j, &v), 0);
    assert_int_equal(v.clen, 0);
    assert_int_equal(v.blen, 10);
    free(rec);
}

static void test_ord_orders_adds_and_leaves_the_push_bit_free(void **state) {
    int64_t ms = 1763800000000;
    assert_true(rs_rec_ord(ms, 1) > rs_rec_ord(ms, 0));
    assert_true(rs_rec_ord(ms + 1, 0) > rs_rec_ord(ms, 4000000));
    /* until 2093 the top bit is not needed for the time */
    int64_t later = REC_ORD_EPOCH + ((int64_t)1 << 41) - 1;
    assert_false(rs_rec_ord(later, 0x3fffff) >> 63);
    assert_false(rs_rec_ord(0, 0) >> 63); /* a clock before 2024 counts from 0 */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_record_is_as_before_push),
        cmocka_unit_test(test_push_record_carries_url_and_content_type),
        cmocka_unit_test(test_ord_orders_adds_and_leaves_the_push_bit_free),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
