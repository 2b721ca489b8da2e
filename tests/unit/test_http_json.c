/* test_http_json.c -- the HTTP front end's JSON request decoding and
 * base64: known answers, every field kind, and errors that name the field;
 * the stats document in each of its shapes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <stdlib.h>

#include "front/http/http_json.h"
#include "lib/base64.h"

static void test_base64_known_answers(void **state) {
    /* RFC 4648 §10 */
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const enc[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=",
                                      "Zm9vYmFy"};
    for (int i = 0; i < 7; i++) {
        char out[16], back[16];
        size_t n = base64_encode(plain[i], strlen(plain[i]), out);
        assert_int_equal(n, strlen(enc[i]));
        assert_memory_equal(out, enc[i], n);
        assert_int_equal(base64_decode(enc[i], n, back), (long)strlen(plain[i]));
        assert_memory_equal(back, plain[i], strlen(plain[i]));
    }
    char b[8];
    assert_int_equal(base64_decode("Zm9", 3, b), -1);      /* not padded */
    assert_int_equal(base64_decode("Zm=v", 4, b), -1);     /* data after '=' */
    assert_int_equal(base64_decode("Zg==Zg==", 8, b), -1); /* '=' not at the end */
    assert_int_equal(base64_decode("Z!==", 4, b), -1);
    assert_int_equal(base64_decode("AAEC/w==", 8, b), 4);
    assert_memory_equal(b, "\x00\x01\x02\xff", 4);
}

static int decode(int kind, const char *json, struct hj_req *r, char *err) {
    return hj_decode(kind, json, strlen(json), r, err, 300);
}

static void test_add_every_field(void **state) {
    struct hj_req r;
    char err[300] = "";
    assert_int_equal(decode(HJ_ADD,
                            "{\"id\":\"o-1\",\"body\":\"h\\u00e9\\u0000\",\"delay\":\"1h30m\","
                            "\"ttr\":5000,\"retries\":2,\"backoff\":{\"exp\":[100,\"2s\"]},"
                            "\"replace\":true}",
                            &r, err),
                     0);
    assert_int_equal(r.add.id.len, 3);
    assert_memory_equal(r.add.id.p, "o-1", 3);
    assert_int_equal(r.add.body.len, 4);
    assert_memory_equal(r.add.body.p, "h\xc3\xa9\0", 4);
    assert_int_equal(r.add.delay, 5400000);
    assert_int_equal(r.add.at, CORE_UNSET);
    assert_int_equal(r.add.ttr, 5000);
    assert_int_equal(r.add.retries, 2);
    assert_int_equal(r.add.backoff_kind, DQ_BACKOFF_EXP);
    assert_int_equal(r.add.backoff_base, 100);
    assert_int_equal(r.add.backoff_max, 2000);
    assert_true(r.add.replace);
    hj_free(&r);

    assert_int_equal(decode(HJ_ADD, "{\"body_base64\":\"AAEC/w==\",\"at\":"
                                    "\"2026-11-22T10:00:00.250Z\",\"backoff\":{\"fixed\":7}}",
                            &r, err), 0);
    assert_int_equal(r.add.id.len, 1);
    assert_int_equal(r.add.id.p[0], '*'); /* no id: the server makes one */
    assert_int_equal(r.add.body.len, 4);
    assert_int_equal(r.add.at, 1795341600250LL);
    assert_int_equal(r.add.backoff_kind, DQ_BACKOFF_FIXED);
    assert_int_equal(r.add.backoff_base, 7);
    hj_free(&r);
}

static void test_other_kinds(void **state) {
    struct hj_req r;
    char err[300] = "";
    assert_int_equal(decode(HJ_RESERVE, "{\"topics\":[\"a\",\"b\"],\"timeout\":\"2s\",\"count\":3}",
                            &r, err), 0);
    assert_int_equal(r.ntopics, 2);
    assert_memory_equal(r.topics[1].p, "b", 1);
    assert_int_equal(r.timeout, 2000);
    assert_int_equal(r.count, 3);
    hj_free(&r);
    assert_int_equal(decode(HJ_NACK, "{\"delay\":0}", &r, err), 0);
    assert_int_equal(r.delay, 0);
    hj_free(&r);
    assert_int_equal(hj_decode(HJ_TOUCH, "", 0, &r, err, sizeof err), 0); /* no body */
    assert_int_equal(r.ttr, CORE_UNSET);
    hj_free(&r);
    assert_int_equal(decode(HJ_NONE, "{}", &r, err), 0);
    hj_free(&r);
}

static void test_errors_name_the_field(void **state) {
    static const struct { int kind; const char *json, *word; } cases[] = {
        {HJ_ADD, "{\"body\":\"x\",", "malformed JSON at line 1"},
        {HJ_ADD, "[1]", "expected a JSON object"},
        {HJ_ADD, "{\"body\":1}", "invalid body"},
        {HJ_ADD, "{\"id\":\"a\"}", "missing body"},
        {HJ_ADD, "{\"body\":\"x\",\"body_base64\":\"\"}", "cannot be used together"},
        {HJ_ADD, "{\"body_base64\":\"***\"}", "invalid body_base64"},
        {HJ_ADD, "{\"body\":\"x\",\"delay\":1.5}", "invalid delay"},
        {HJ_ADD, "{\"body\":\"x\",\"delay\":\"5x\"}", "invalid delay '5x'"},
        {HJ_ADD, "{\"body\":\"x\",\"at\":\"tomorrow\"}", "invalid at"},
        {HJ_ADD, "{\"body\":\"x\",\"retries\":\"3\"}", "invalid retries"},
        {HJ_ADD, "{\"body\":\"x\",\"replace\":1}", "invalid replace"},
        {HJ_ADD, "{\"body\":\"x\",\"backoff\":{\"exp\":[1]}}", "invalid backoff"},
        {HJ_ADD, "{\"body\":\"x\",\"backoff\":{\"exp\":[1,2],\"fixed\":3}}", "invalid backoff"},
        {HJ_ADD, "{\"body\":\"x\",\"prio\":1}", "unknown field 'prio'"},
        {HJ_ADD, "{\"body\":\"x\",\"uri\":\"http://h/\"}", "unknown field 'uri'"},
        {HJ_ADD, "{\"body\":\"x\",\"url\":5}", "invalid url: expected a string"},
        {HJ_ADD, "{\"body\":\"x\",\"body\":\"y\"}", "body"},
        {HJ_ADD, "", "a JSON object is required"},
        {HJ_RESERVE, "{}", "missing topics"},
        {HJ_RESERVE, "{\"topics\":[]}", "invalid topics"},
        {HJ_RESERVE, "{\"topics\":[1]}", "invalid topics"},
        {HJ_RESERVE, "{\"topics\":[\"a\"],\"timeout\":null}", "invalid timeout"},
        {HJ_NACK, "{\"ttr\":1}", "unknown field 'ttr' (expected: delay)"},
        {HJ_NONE, "{\"x\":1}", "this request takes no fields"},
        {HJ_KICK, "{\"count\":true}", "invalid count"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct hj_req r;
        char err[300] = "";
        int rc = decode(cases[i].kind, cases[i].json, &r, err);
        hj_free(&r);
        if (rc != -1 || !strstr(err, cases[i].word))
            fail_msg("%s: rc %d, error '%s' does not say '%s'", cases[i].json, rc, err,
                     cases[i].word);
    }
}

/* Every field, in order, each value distinct so a wrong offset shows. */
static void test_stats_shapes(void **state) {
    struct dq_stats st = {
        .jobs = {1, 2, 3, 4}, .added = 10, .reserved = 11, .acked = 12,
        .nacked = 13, .expired = 14, .dead = 15, .deleted = 16, .kicked = 17,
        .oldest_ready = 99, .pushed = 18, .push_failed = 19,
    };
    static const char *const want[] = {
        "{\"jobs_delayed\":1,\"jobs_ready\":2,\"jobs_reserved\":3,"
        "\"jobs_dead\":4,\"added\":10,\"reserved\":11,\"acked\":12,"
        "\"nacked\":13,\"expired\":14,\"dead\":15,\"deleted\":16,"
        "\"kicked\":17,\"pushed\":18,\"push_failed\":19}",
        "{\"delayed\":1,\"ready\":2,\"reserved\":3,\"dead\":4,\"total\":10}",
        "{\"added\":10,\"reserved\":11,\"acked\":12,\"nacked\":13,"
        "\"expired\":14,\"dead\":15,\"deleted\":16,\"kicked\":17,"
        "\"pushed\":18,\"push_failed\":19}",
    };
    int shapes[] = {HJ_STATS_FLAT, HJ_STATS_JOBS, HJ_STATS_COUNTERS};
    for (int i = 0; i < 3; i++) {
        json_t *o = hj_stats(&st, shapes[i]);
        assert_non_null(o);
        char *text = json_dumps(o, JSON_COMPACT);
        assert_string_equal(text, want[i]);
        free(text);
        json_decref(o);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base64_known_answers),
        cmocka_unit_test(test_add_every_field),
        cmocka_unit_test(test_other_kinds),
        cmocka_unit_test(test_errors_name_the_field),
        cmocka_unit_test(test_stats_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
