/* test_redis_arena.c -- hiredis replies built in an arena
 * (store/redis_arena.h): the trees hiredis's reader makes with them, fed
 * whole or a byte at a time, replies bigger than a chunk, the arena reused
 * reply after reply, and the partial replies hiredis frees on an error or
 * with the reader (ASan checks the memory). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "store/redis_arena.h"

struct fixture {
    redisReader *r;
    struct redis_arena *a;
};

static int setup(void **state) {
    struct fixture *f = calloc(1, sizeof *f);
    f->a = redis_arena_new();
    f->r = redisReaderCreate();
    redis_arena_use(f->r, f->a);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    struct fixture *f = *state;
    redisReaderFree(f->r); /* frees a reply it was reading: the arena must be alive */
    redis_arena_free(f->a);
    free(f);
    return 0;
}

/* Feeds p (len bytes, or strlen) in pieces of step bytes; the reply once
 * complete (NULL if it never is). */
static redisReply *feed(redisReader *r, const char *p, size_t len, size_t step) {
    void *reply = NULL;
    for (size_t off = 0; off < len; off += step) {
        size_t n = len - off < step ? len - off : step;
        assert_int_equal(redisReaderFeed(r, p + off, n), REDIS_OK);
        assert_int_equal(redisReaderGetReply(r, &reply), REDIS_OK);
        if (reply) {
            assert_int_equal(off + n, len); /* not before its last byte */
            return reply;
        }
    }
    return NULL;
}

static const char NESTED[] = "*5\r\n$3\r\nabc\r\n:-7\r\n*2\r\n$-1\r\n+OK\r\n-ERR bad\r\n*0\r\n";

static void check_nested(const redisReply *t) {
    assert_int_equal(t->type, REDIS_REPLY_ARRAY);
    assert_int_equal(t->elements, 5);
    assert_int_equal(t->element[0]->type, REDIS_REPLY_STRING);
    assert_int_equal(t->element[0]->len, 3);
    assert_string_equal(t->element[0]->str, "abc"); /* NUL-terminated */
    assert_int_equal(t->element[1]->type, REDIS_REPLY_INTEGER);
    assert_int_equal(t->element[1]->integer, -7);
    const redisReply *in = t->element[2];
    assert_int_equal(in->type, REDIS_REPLY_ARRAY);
    assert_int_equal(in->elements, 2);
    assert_int_equal(in->element[0]->type, REDIS_REPLY_NIL);
    assert_int_equal(in->element[1]->type, REDIS_REPLY_STATUS);
    assert_string_equal(in->element[1]->str, "OK");
    assert_int_equal(t->element[3]->type, REDIS_REPLY_ERROR);
    assert_string_equal(t->element[3]->str, "ERR bad");
    assert_int_equal(t->element[4]->type, REDIS_REPLY_ARRAY);
    assert_int_equal(t->element[4]->elements, 0);
}

static void test_a_nested_reply_fed_whole_or_a_byte_at_a_time(void **state) {
    struct fixture *f = *state;
    for (size_t step = sizeof NESTED; step >= 1; step = step == 1 ? 0 : step / 2) {
        redisReply *t = feed(f->r, NESTED, sizeof NESTED - 1, step);
        assert_non_null(t);
        check_nested(t);
        f->r->fn->freeObject(t);
    }
}

static void test_null_and_empty_replies(void **state) {
    struct fixture *f = *state;
    const char *cases[] = {"*-1\r\n", "$-1\r\n", "*0\r\n", "$0\r\n\r\n", ":0\r\n"};
    const int types[] = {REDIS_REPLY_NIL, REDIS_REPLY_NIL, REDIS_REPLY_ARRAY,
                         REDIS_REPLY_STRING, REDIS_REPLY_INTEGER};
    for (size_t i = 0; i < 5; i++) {
        redisReply *t = feed(f->r, cases[i], strlen(cases[i]), 64);
        assert_non_null(t);
        assert_int_equal(t->type, types[i]);
        if (t->type == REDIS_REPLY_STRING) {
            assert_int_equal(t->len, 0);
            assert_string_equal(t->str, "");
        }
        if (t->type == REDIS_REPLY_ARRAY) assert_int_equal(t->elements, 0);
        f->r->fn->freeObject(t);
    }
}

/* Replies bigger than a chunk (32 KB): a 200 KB string among 20,000
 * elements, three times over (the arena emptied and reused in between),
 * each checked in full. */
static void test_replies_bigger_than_a_chunk_and_the_arena_reused(void **state) {
    struct fixture *f = *state;
    enum { N = 20000, BIG = 200 * 1024 };
    char *body = malloc(BIG);
    for (size_t i = 0; i < BIG; i++) body[i] = (char)('a' + i % 26);
    size_t cap = (size_t)N * 32 + BIG + 64, len = 0;
    char *wire = malloc(cap);
    len += (size_t)sprintf(wire + len, "*%d\r\n$%d\r\n", N + 1, BIG);
    memcpy(wire + len, body, BIG);
    len += BIG;
    len += (size_t)sprintf(wire + len, "\r\n");
    for (int i = 0; i < N; i++) {
        if (i % 2) {
            len += (size_t)sprintf(wire + len, ":%d\r\n", i);
        } else {
            int digits = snprintf(NULL, 0, "%d", i);
            len += (size_t)sprintf(wire + len, "$%d\r\n%d\r\n", digits, i);
        }
    }
    for (int round = 0; round < 3; round++) {
        redisReply *t = feed(f->r, wire, len, round == 1 ? 4096 : len);
        assert_non_null(t);
        assert_int_equal(t->elements, N + 1);
        assert_int_equal(t->element[0]->len, BIG);
        assert_memory_equal(t->element[0]->str, body, BIG);
        assert_int_equal(t->element[0]->str[BIG], '\0');
        for (int i = 0; i < N; i++) {
            const redisReply *e = t->element[i + 1];
            if (i % 2) {
                assert_int_equal(e->type, REDIS_REPLY_INTEGER);
                assert_int_equal(e->integer, i);
            } else {
                assert_int_equal(e->type, REDIS_REPLY_STRING);
                assert_int_equal(atoi(e->str), i);
            }
        }
        f->r->fn->freeObject(t);
    }
    free(wire);
    free(body);
}

/* Two replies in one feed come out one after the other, the first freed
 * before the second is read (as hiredis's async context does). */
static void test_replies_in_one_feed_one_after_the_other(void **state) {
    struct fixture *f = *state;
    char two[2 * sizeof NESTED];
    memcpy(two, NESTED, sizeof NESTED - 1);
    memcpy(two + sizeof NESTED - 1, NESTED, sizeof NESTED - 1);
    assert_int_equal(redisReaderFeed(f->r, two, 2 * (sizeof NESTED - 1)), REDIS_OK);
    for (int i = 0; i < 2; i++) {
        void *t = NULL;
        assert_int_equal(redisReaderGetReply(f->r, &t), REDIS_OK);
        assert_non_null(t);
        check_nested(t);
        f->r->fn->freeObject(t);
    }
    void *none = NULL;
    assert_int_equal(redisReaderGetReply(f->r, &none), REDIS_OK);
    assert_null(none);
}

/* A protocol error in the middle of a reply: hiredis frees what it built
 * (freeObject on the partial tree) and reports the error. */
static void test_a_protocol_error_mid_reply(void **state) {
    struct fixture *f = *state;
    const char bad[] = "*3\r\n$3\r\nabc\r\n:1\r\n!oops\r\n";
    assert_int_equal(redisReaderFeed(f->r, bad, sizeof bad - 1), REDIS_OK);
    void *t = NULL;
    assert_int_equal(redisReaderGetReply(f->r, &t), REDIS_ERR);
    assert_null(t);
    assert_true(f->r->err != 0);
}

/* A reply half read when the reader goes (teardown frees it). */
static void test_a_partial_reply_freed_with_the_reader(void **state) {
    struct fixture *f = *state;
    const char half[] = "*3\r\n$3\r\nabc\r\n*2\r\n:1\r\n";
    assert_null(feed(f->r, half, sizeof half - 1, 5));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_nested_reply_fed_whole_or_a_byte_at_a_time,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_null_and_empty_replies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replies_bigger_than_a_chunk_and_the_arena_reused,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_replies_in_one_feed_one_after_the_other, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_protocol_error_mid_reply, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_partial_reply_freed_with_the_reader, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
