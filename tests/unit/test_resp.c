/* test_resp.c -- the RESP request parser and reply writer (proto/resp.h).
 *
 * Every parse runs on an exactly sized heap copy of the input, so ASan
 * reports any read past the bytes received so far.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/resp.h"

#define MAXA 8

/* Small limits so that every one is easy to reach. */
static const struct resp_limits lim = {.max_args = 4, .max_bulk = 16, .max_inline = 64};
/* Roomier limits for the stream tests. */
static const struct resp_limits wide = {.max_args = MAXA, .max_bulk = 64, .max_inline = 128};

struct arg {
    const char *p;
    size_t len;
};
#define A(s) {s, sizeof(s) - 1}
#define S(s) s, sizeof(s) - 1

/* Parses in[0..n) once and checks the result: consumed bytes and arguments,
 * or (want == RESP_BAD) the message, or RESP_NEED. */
static void check(const char *in, size_t n, const struct resp_limits *l,
                  ssize_t want, const char *want_err, size_t want_argc,
                  const struct arg *want_argv) {
    char *buf = malloc(n ? n : 1);
    struct resp_arg argv[MAXA];
    size_t argc = 99;
    const char *err = NULL;
    assert_non_null(buf);
    memcpy(buf, in, n);
    assert_true(l->max_args <= MAXA);

    ssize_t r = resp_parse(buf, n, l, argv, &argc, &err);
    if (r != want) fail_msg("input '%.*s': got %zd want %zd (err %s)", (int)n, in, r, want,
                            err ? err : "-");
    if (want == RESP_BAD) {
        assert_non_null(err);
        assert_string_equal(err, want_err);
    } else if (want > 0) {
        assert_int_equal(argc, want_argc);
        for (size_t i = 0; i < argc; i++) {
            assert_true(argv[i].p >= buf && argv[i].p + argv[i].len <= buf + r);
            assert_int_equal(argv[i].len, want_argv[i].len);
            assert_memory_equal(argv[i].p, want_argv[i].p, argv[i].len);
        }
    }
    free(buf);
}

#define OK(in, l, ...)                                                            \
    do {                                                                          \
        const struct arg w_[] = {__VA_ARGS__};                                    \
        check(S(in), l, (ssize_t)(sizeof(in) - 1), NULL, sizeof w_ / sizeof *w_, w_); \
    } while (0)
#define OK_TAKES(in, taken, l, ...)                                               \
    do {                                                                          \
        const struct arg w_[] = {__VA_ARGS__};                                    \
        check(S(in), l, taken, NULL, sizeof w_ / sizeof *w_, w_);                 \
    } while (0)
#define EMPTY(in, l) check(S(in), l, (ssize_t)(sizeof(in) - 1), NULL, 0, NULL)
#define NEED(in, l) check(S(in), l, RESP_NEED, NULL, 0, NULL)
#define BAD(in, l, msg) check(S(in), l, RESP_BAD, msg, 0, NULL)

/* --- whole streams, at once and byte by byte ----------------------------- */

struct rec {
    ssize_t r;
    char err[96];
    size_t argc;
    char *argv[MAXA];
    size_t len[MAXA];
};

/* Parses one request from an exactly sized copy of in[0..n). */
static ssize_t parse_copy(const char *in, size_t n, const struct resp_limits *l,
                          struct rec *out) {
    char *buf = malloc(n ? n : 1);
    struct resp_arg argv[MAXA];
    const char *err = NULL;
    assert_non_null(buf);
    memcpy(buf, in, n);
    memset(out, 0, sizeof *out);
    out->r = resp_parse(buf, n, l, argv, &out->argc, &err);
    if (out->r == RESP_BAD) {
        assert_non_null(err);
        assert_true(strlen(err) > 0 && strlen(err) < sizeof out->err);
        strcpy(out->err, err);
    } else if (out->r > 0) {
        assert_true((size_t)out->r <= n);
        assert_true(out->argc <= l->max_args);
        for (size_t i = 0; i < out->argc; i++) {
            assert_true(argv[i].p >= buf && argv[i].p + argv[i].len <= buf + out->r);
            out->argv[i] = malloc(argv[i].len + 1);
            memcpy(out->argv[i], argv[i].p, argv[i].len);
            out->len[i] = argv[i].len;
        }
    } else {
        assert_int_equal(out->r, RESP_NEED);
    }
    free(buf);
    return out->r;
}

static void rec_free(struct rec *r) {
    for (size_t i = 0; i < r->argc; i++) free(r->argv[i]);
}

static void rec_same(const struct rec *a, const struct rec *b) {
    assert_int_equal(a->r, b->r);
    if (a->r == RESP_BAD) assert_string_equal(a->err, b->err);
    assert_int_equal(a->argc, b->argc);
    for (size_t i = 0; i < a->argc; i++) {
        assert_int_equal(a->len[i], b->len[i]);
        assert_memory_equal(a->argv[i], b->argv[i], a->len[i]);
    }
}

/* Parses stream[0..n) whole, request after request, then again as a
 * connection receiving it one byte at a time. Both must yield the same
 * requests, each complete exactly at its last byte, and end the same way
 * (a bad request may be detected before its last byte, with the same
 * message). Returns the number of requests; *bad_err gets the message if
 * the stream ended in RESP_BAD. */
static size_t check_stream(const char *stream, size_t n, const struct resp_limits *l,
                           char *bad_err) {
    enum { MAXREQ = 1024 };
    struct rec *whole = calloc(MAXREQ + 1, sizeof *whole);
    size_t nreq = 0, off = 0;
    assert_non_null(whole);
    bad_err[0] = '\0';

    for (;;) {
        assert_true(nreq <= MAXREQ);
        ssize_t r = parse_copy(stream + off, n - off, l, &whole[nreq]);
        if (r < 0) break;
        off += (size_t)r;
        nreq++;
    }
    ssize_t end = whole[nreq].r;
    if (end == RESP_BAD) strcpy(bad_err, whole[nreq].err);

    size_t got = 0;
    bool stopped = false;
    off = 0;
    for (size_t k = 1; k <= n && !stopped; k++) {
        for (;;) {
            struct rec cur;
            ssize_t r = parse_copy(stream + off, k - off, l, &cur);
            if (r == RESP_NEED) break;
            if (r == RESP_BAD) {
                assert_int_equal(got, nreq);
                rec_same(&cur, &whole[nreq]);
                stopped = true;
                break;
            }
            assert_true(got < nreq);
            rec_same(&cur, &whole[got]);
            rec_free(&cur);
            got++;
            off += (size_t)r;
            assert_int_equal(off, k); /* complete only at its last byte */
        }
    }
    assert_int_equal(got, nreq);
    assert_true(stopped == (end == RESP_BAD));

    for (size_t i = 0; i <= nreq; i++) rec_free(&whole[i]);
    free(whole);
    return nreq;
}

/* A stream that is one bad request (possibly after good ones). */
static void check_bad_stream(const char *s, size_t n, const struct resp_limits *l,
                             size_t good, const char *msg) {
    char err[96];
    assert_int_equal(check_stream(s, n, l, err), good);
    assert_string_equal(err, msg);
}

/* --- multibulk ----------------------------------------------------------- */

static void test_multibulk_good(void **state) {
    (void)state;
    OK("*1\r\n$4\r\nPING\r\n", &lim, A("PING"));
    OK("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n", &lim, A("SET"), A("k"), A(""));
    OK("*4\r\n$3\r\nADD\r\n$6\r\norders\r\n$3\r\no-1\r\n$5\r\nhello\r\n", &lim,
       A("ADD"), A("orders"), A("o-1"), A("hello"));
    /* Only the first request of a pipeline is taken. */
    OK_TAKES("*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPI", 14, &lim, A("PING"));
    /* Bulk lengths are exact: "0" alone is fine, 10 is two digits. */
    OK("*1\r\n$10\r\n0123456789\r\n", &lim, A("0123456789"));
}

static void test_multibulk_empty(void **state) {
    (void)state;
    EMPTY("*0\r\n", &lim);
    EMPTY("*-1\r\n", &lim);
    OK_TAKES("*0\r\n*1\r\n$1\r\nx\r\n", 4, &lim);
}

static void test_multibulk_binary(void **state) {
    (void)state;
    /* \0, \r, \n and "$" inside a bulk are data. */
    OK("*2\r\n$7\r\n\0a\r\nb\0$\r\n$2\r\n\r\n\r\n", &lim, A("\0a\r\nb\0$"), A("\r\n"));
    OK("*1\r\n$16\r\n\xff\xfe\0\0\r\n\r\n*1\r\n$4\r\n\r\n", &lim,
       A("\xff\xfe\0\0\r\n\r\n*1\r\n$4\r\n"));
}

static void test_multibulk_need(void **state) {
    (void)state;
    NEED("*", &lim);
    NEED("*1", &lim);
    NEED("*-", &lim);
    NEED("*-1", &lim);
    NEED("*-1\r", &lim);
    NEED("*1\r\n", &lim);
    NEED("*1\r\n$", &lim);
    NEED("*1\r\n$4\r\nPI", &lim);
    NEED("*1\r\n$4\r\nPING", &lim);
    NEED("*1\r\n$4\r\nPING\r", &lim);
    NEED("*1234567890123456789", &lim); /* 19 digits may still be a length */
}

static void test_multibulk_errors(void **state) {
    (void)state;
    const char *ml = "invalid multibulk length", *bl = "invalid bulk length";
    BAD("*x\r\n", &lim, ml);
    BAD("*1x", &lim, ml);
    BAD("*\r\n", &lim, ml);
    BAD("* 1\r\n", &lim, ml);
    BAD("*+1\r\n", &lim, ml);
    BAD("*-2\r\n", &lim, ml);
    BAD("*-\r\n", &lim, ml);
    BAD("*-1x", &lim, ml);
    BAD("*-10\r\n", &lim, ml);
    BAD("*01\r\n", &lim, ml);
    BAD("*1\rX", &lim, ml);
    BAD("*1\n", &lim, ml);
    /* 20 digits overflow: bad at once, without waiting for a CRLF. */
    BAD("*12345678901234567890", &lim, ml);
    BAD("*99999999999999999999\r\n", &lim, ml);
    BAD("*1234567890123456789\r\n", &lim, "too many arguments (max 4)");
    BAD("*9999999999999999999\r\n", &lim, "too many arguments (max 4)");

    BAD("*1\r\nx", &lim, "expected '$', got 'x'");
    BAD("*1\r\n\x01", &lim, "expected '$', got '\\x01'");
    BAD("*1\r\n\xff", &lim, "expected '$', got '\\xff'");
    BAD("*1\r\n\r\n", &lim, "expected '$', got '\\x0d'");
    BAD("*2\r\n$1\r\na\r\n*1\r\n", &lim, "expected '$', got '*'");

    BAD("*1\r\n$-1\r\n", &lim, bl);
    BAD("*1\r\n$-2\r\n", &lim, bl);
    BAD("*1\r\n$abc\r\n", &lim, bl);
    BAD("*1\r\n$\r\n", &lim, bl);
    BAD("*1\r\n$1\rx", &lim, bl);
    BAD("*1\r\n$01\r\n", &lim, bl);
    BAD("*1\r\n$12345678901234567890", &lim, bl);
    BAD("*1\r\n$1234567890123456789\r\n", &lim, "bulk argument too long (max 16 bytes)");

    const char *crlf = "missing CRLF after bulk argument";
    BAD("*1\r\n$3\r\nabcd", &lim, crlf);
    BAD("*1\r\n$3\r\nabc\rx", &lim, crlf);
    BAD("*1\r\n$3\r\nabc\n\r", &lim, crlf);
    BAD("*1\r\n$3\r\nab\r\n", &lim, crlf);
    BAD("*2\r\n$1\r\nab\r\n$1\r\nc\r\n", &lim, crlf);
}

/* --- inline -------------------------------------------------------------- */

static void test_inline_good(void **state) {
    (void)state;
    OK("PING\r\n", &lim, A("PING"));
    OK("PING\n", &lim, A("PING"));
    OK("SET  k\t v \r\n", &lim, A("SET"), A("k"), A("v"));
    OK("\tGET k\t\r\n", &lim, A("GET"), A("k"));
    OK("A\0B C\n", &lim, A("A\0B"), A("C"));
    /* Only one trailing \r is part of the line end. */
    OK("X\r\r\n", &lim, A("X\r"));
    OK_TAKES("PING\r\nPING\r\n", 6, &lim, A("PING"));
    OK_TAKES("PING\n*1\r\n", 5, &lim, A("PING"));
    /* Lines not starting with '*' are inline, even "$..." or ":..." */
    OK("$1 :2\r\n", &lim, A("$1"), A(":2"));
}

static void test_inline_empty(void **state) {
    (void)state;
    EMPTY("\r\n", &lim);
    EMPTY("\n", &lim);
    EMPTY("  \t \r\n", &lim);
    OK_TAKES("\nPING\n", 1, &lim);
}

static void test_inline_quotes(void **state) {
    (void)state;
    OK("ECHO \"a b\\n\\r\\t\\\\\\\"\\a\\b\\q\"\r\n", &lim,
       A("ECHO"), A("a b\n\r\t\\\"\a\bq"));
    OK("ECHO \"\\x41\\xfF\\x00\\x4g\\x4\"\n", &lim, A("ECHO"), A("A\xff\0x4gx4"));
    OK("SET 'it\\'s' 'a\"b\\n'\r\n", &lim, A("SET"), A("it's"), A("a\"b\\n"));
    OK("\"\" ''\r\n", &lim, A(""), A(""));
    OK("\"a\"\r\n", &lim, A("a"));
    OK("'a'\t\"b\"\n", &lim, A("a"), A("b"));
    /* A quote inside a word starts a quoted part, as sdssplitargs does. */
    OK("foo\"b c\" x\n", &lim, A("foob c"), A("x"));
    OK("it'\\'s'\n", &lim, A("it's"));
    /* Quoted spaces, tabs and a quoted \r at the line end are data. */
    OK("\"a \t\r\"\r\n", &lim, A("a \t\r"));
    /* Unescaped words are not longer than the raw text, so the limit
     * applies to the result: 16 bytes from 63 of escapes. */
    OK("\"\\x30\\x31\\x32\\x33\\x34\\x35\\x36\\x37\\x38\\x39\\x61\\x62\\x63\\x64\\x65f\"\n",
       &lim, A("0123456789abcdef"));
}

static void test_inline_errors(void **state) {
    (void)state;
    const char *uq = "unbalanced quotes in request";
    BAD("\"abc\n", &lim, uq);
    BAD("'abc\r\n", &lim, uq);
    BAD("\"abc\\\"\n", &lim, uq);
    BAD("'abc\\'\n", &lim, uq);
    BAD("\"a\"b\n", &lim, uq);
    BAD("'a'b\n", &lim, uq);
    BAD("x \"a\"\"b\"\n", &lim, uq);
    BAD("\"\n", &lim, uq);
    BAD("\"\\\n", &lim, uq);
    BAD("'\\\n", &lim, uq);
    BAD("\"\\x\n", &lim, uq);
    BAD("a b c d e\n", &lim, "too many arguments (max 4)");
    BAD("0123456789abcdefg\n", &lim, "bulk argument too long (max 16 bytes)");
    BAD("'0123456789abcdefg'\n", &lim, "bulk argument too long (max 16 bytes)");
    NEED("\"abc", &lim);
    NEED("PING", &lim);
    NEED("PING\r", &lim);
}

/* --- limits, exactly at and one past ------------------------------------- */

static void test_limits(void **state) {
    (void)state;
    /* max_args = 4 */
    OK("*4\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n", &lim, A("a"), A("b"), A("c"), A("d"));
    BAD("*5\r\n", &lim, "too many arguments (max 4)");
    OK("a b c d\n", &lim, A("a"), A("b"), A("c"), A("d"));
    OK("a b c d  \r\n", &lim, A("a"), A("b"), A("c"), A("d"));
    BAD("a b c d e\r\n", &lim, "too many arguments (max 4)");

    /* max_bulk = 16 */
    OK("*1\r\n$16\r\n0123456789abcdef\r\n", &lim, A("0123456789abcdef"));
    BAD("*1\r\n$17\r\n", &lim, "bulk argument too long (max 16 bytes)");
    OK("0123456789abcdef\n", &lim, A("0123456789abcdef"));
    BAD("0123456789abcdefg\n", &lim, "bulk argument too long (max 16 bytes)");

    /* max_inline = 64: the line without its "\r\n" or "\n". */
    char line[80];
    const char *msg = "too big inline request";
    memset(line, 'a', sizeof line);
    struct resp_limits l = lim;
    memset(line, 'a', sizeof line);
    line[0] = 'x';
    line[10] = ' ';
    l.max_args = 2;
    l.max_bulk = 64;
    memcpy(line + 64, "\r\n", 2);
    check(line, 66, &l, 66, NULL, 2, (struct arg[2]){{line, 10}, {line + 11, 53}});
    memcpy(line + 64, "\n", 1);
    check(line, 65, &l, 65, NULL, 2, (struct arg[2]){{line, 10}, {line + 11, 53}});
    memcpy(line + 64, "a\r\n", 3);
    check(line, 67, &l, RESP_BAD, msg, 0, NULL);
    memcpy(line + 64, "a\n", 2);
    check(line, 66, &l, RESP_BAD, msg, 0, NULL);
    /* Without a newline: 64 bytes and a "\r" may still be fine... */
    memcpy(line + 64, "\r", 1);
    check(line, 65, &l, RESP_NEED, NULL, 0, NULL);
    memset(line + 64, 'a', 2);
    check(line, 65, &l, RESP_NEED, NULL, 0, NULL);
    /* ...66 cannot be. */
    check(line, 66, &l, RESP_BAD, msg, 0, NULL);
    check(line, 80, &l, RESP_BAD, msg, 0, NULL);
    memcpy(line + 64, "\r\r", 2);
    check(line, 66, &l, RESP_BAD, msg, 0, NULL);

    /* No inline limit at all. */
    struct resp_limits huge = {4, SIZE_MAX, SIZE_MAX};
    OK("PING\r\n", &huge, A("PING"));
    NEED("PING", &huge);

    /* Zero limits refuse everything but empty requests. */
    struct resp_limits zero = {0, 0, 0};
    EMPTY("\n", &zero);
    EMPTY("\r\n", &zero);
    EMPTY("*0\r\n", &zero);
    BAD("x\n", &zero, "too big inline request");
    BAD("*1\r\n", &zero, "too many arguments (max 0)");
}

/* --- byte by byte, pipelines --------------------------------------------- */

static const char *const good_reqs[] = {
    "*1\r\n$4\r\nPING\r\n",
    "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n",
    "*2\r\n$4\r\nECHO\r\n$64\r\n0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\r\n",
    "*8\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n$1\r\n4\r\n$1\r\n5\r\n$1\r\n6\r\n$1\r\n7\r\n$2\r\n88\r\n",
    "*0\r\n",
    "*-1\r\n",
    "PING\r\n",
    "PING\n",
    "\r\n",
    "\n",
    "  \t  \r\n",
    "ADD orders o-1 \"hello world\\n\\x41\" DELAY '30 000'\r\n",
    "SET \"\" '' \"\\\"\" '\\''\n",
    "X\r\r\n",
};

/* Requests with binary payloads, given with their lengths. */
static const struct arg binary_reqs[] = {
    A("*2\r\n$7\r\n\0a\r\nb\0$\r\n$4\r\n*1\r\n\r\n"),
    A("*1\r\n$10\r\n\r\n\r\n\r\n\r\n\0\0\r\n"),
    A("A\0B \"\\x00\"\r\n"),
};

static void test_bytewise_single(void **state) {
    (void)state;
    char err[96];
    for (size_t i = 0; i < sizeof good_reqs / sizeof *good_reqs; i++) {
        assert_int_equal(check_stream(good_reqs[i], strlen(good_reqs[i]), &wide, err), 1);
        assert_string_equal(err, "");
    }
    for (size_t i = 0; i < sizeof binary_reqs / sizeof *binary_reqs; i++) {
        assert_int_equal(check_stream(binary_reqs[i].p, binary_reqs[i].len, &wide, err), 1);
        assert_string_equal(err, "");
    }
}

/* A pipeline of `count` requests cycling through all of the above. */
static char *pipeline(size_t count, size_t *n) {
    size_t cap = 64, len = 0, ng = sizeof good_reqs / sizeof *good_reqs;
    size_t nb = sizeof binary_reqs / sizeof *binary_reqs;
    char *p = malloc(cap);
    for (size_t i = 0; i < count; i++) {
        size_t j = i % (ng + nb);
        const char *s = j < ng ? good_reqs[j] : binary_reqs[j - ng].p;
        size_t sl = j < ng ? strlen(s) : binary_reqs[j - ng].len;
        while (len + sl > cap) p = realloc(p, cap *= 2);
        memcpy(p + len, s, sl);
        len += sl;
    }
    *n = len;
    return p;
}

static void test_bytewise_pipeline(void **state) {
    (void)state;
    char err[96];
    size_t n;
    char *p = pipeline(200, &n);
    assert_int_equal(check_stream(p, n, &wide, err), 200);
    assert_string_equal(err, "");

    /* A trailing partial request is simply not complete. */
    p = realloc(p, n + 10);
    memcpy(p + n, "*2\r\n$3\r\nGET", 10);
    assert_int_equal(check_stream(p, n + 10, &wide, err), 200);
    assert_string_equal(err, "");
    free(p);
}

/* Every error, alone and after a pipeline: the good requests come out, then
 * the same error, whether fed whole or byte by byte. */
static const struct {
    struct arg in;
    const char *err;
} bad_reqs[] = {
    {A("*x\r\n"), "invalid multibulk length"},
    {A("*-2\r\n"), "invalid multibulk length"},
    {A("*12345678901234567890123456789012345"), "invalid multibulk length"},
    {A("*9\r\n"), "too many arguments (max 8)"},
    {A("*1\r\n:1\r\n"), "expected '$', got ':'"},
    {A("*1\r\n$-1\r\n"), "invalid bulk length"},
    {A("*1\r\n$65\r\n"), "bulk argument too long (max 64 bytes)"},
    {A("*1\r\n$1\r\nab\r\n"), "missing CRLF after bulk argument"},
    {A("*1\r\n$1\r\na\n\n"), "missing CRLF after bulk argument"},
    {A("GET \"k\n"), "unbalanced quotes in request"},
    {A("GET 'k'x\r\n"), "unbalanced quotes in request"},
    {A("1 2 3 4 5 6 7 8 9\n"), "too many arguments (max 8)"},
    {A("x 01234567890123456789012345678901234567890123456789012345678901234\n"),
     "bulk argument too long (max 64 bytes)"},
};

static void test_bytewise_errors(void **state) {
    (void)state;
    size_t n;
    char *p = pipeline(40, &n);
    for (size_t i = 0; i < sizeof bad_reqs / sizeof *bad_reqs; i++) {
        check_bad_stream(bad_reqs[i].in.p, bad_reqs[i].in.len, &wide, 0, bad_reqs[i].err);
        char *s = malloc(n + bad_reqs[i].in.len + 20);
        memcpy(s, p, n);
        memcpy(s + n, bad_reqs[i].in.p, bad_reqs[i].in.len);
        memcpy(s + n + bad_reqs[i].in.len, "PING\r\n", 6); /* never reached */
        check_bad_stream(s, n + bad_reqs[i].in.len + 6, &wide, 40, bad_reqs[i].err);
        free(s);
    }
    /* Too big inline: 129 bytes without a newline. */
    char big[140];
    memset(big, 'a', sizeof big);
    check_bad_stream(big, sizeof big, &wide, 0, "too big inline request");
    free(p);
}

/* --- writer -------------------------------------------------------------- */

static void expect(struct buf *b, const char *want, size_t n) {
    if (buf_unread(b) != n || memcmp(b->p + b->off, want, n) != 0)
        fail_msg("wrote '%.*s', want '%.*s'", (int)buf_unread(b), b->p + b->off, (int)n, want);
    buf_reset(b, 0);
}
#define EXPECT(b, s) expect(b, S(s))

static void test_writer(void **state) {
    (void)state;
    struct buf b = BUF_INIT;

    resp_simple(&b, "OK");
    EXPECT(&b, "+OK\r\n");
    resp_simple(&b, "");
    EXPECT(&b, "+\r\n");

    resp_int(&b, 0);
    EXPECT(&b, ":0\r\n");
    resp_int(&b, -1);
    EXPECT(&b, ":-1\r\n");
    resp_int(&b, 1763800000000);
    EXPECT(&b, ":1763800000000\r\n");
    resp_int(&b, INT64_MAX);
    EXPECT(&b, ":9223372036854775807\r\n");
    resp_int(&b, INT64_MIN);
    EXPECT(&b, ":-9223372036854775808\r\n");

    resp_bulk(&b, "a\0\r\n", 4);
    EXPECT(&b, "$4\r\na\0\r\n\r\n");
    resp_bulk(&b, NULL, 0);
    EXPECT(&b, "$0\r\n\r\n");
    resp_bulk_str(&b, "hello");
    EXPECT(&b, "$5\r\nhello\r\n");
    resp_bulk_str(&b, "");
    EXPECT(&b, "$0\r\n\r\n");
    resp_bulk_str(&b, NULL);
    EXPECT(&b, "$-1\r\n");

    resp_bulk_int(&b, 0);
    EXPECT(&b, "$1\r\n0\r\n");
    resp_bulk_int(&b, 1763800000000);
    EXPECT(&b, "$13\r\n1763800000000\r\n");
    resp_bulk_int(&b, INT64_MIN);
    EXPECT(&b, "$20\r\n-9223372036854775808\r\n");
    resp_bulk_int(&b, INT64_MAX);
    EXPECT(&b, "$19\r\n9223372036854775807\r\n");

    resp_nil(&b);
    EXPECT(&b, "$-1\r\n");
    resp_nil_array(&b);
    EXPECT(&b, "*-1\r\n");
    resp_array(&b, 0);
    EXPECT(&b, "*0\r\n");
    resp_array(&b, 12);
    EXPECT(&b, "*12\r\n");

    /* Replies append after what is there, read or not. */
    buf_append(&b, "xx", 2);
    buf_consume(&b, 1);
    resp_array(&b, 5);
    resp_bulk_str(&b, "orders");
    resp_int(&b, 3);
    resp_nil(&b);
    EXPECT(&b, "x*5\r\n$6\r\norders\r\n:3\r\n$-1\r\n");
    buf_free(&b);
}

static void test_writer_error(void **state) {
    (void)state;
    struct buf b = BUF_INIT;

    resp_error(&b, "ERR", "invalid DELAY '%s': expected an integer of milliseconds", "x");
    EXPECT(&b, "-ERR invalid DELAY 'x': expected an integer of milliseconds\r\n");
    resp_error(&b, "NOTRESERVED", "job %d", 7);
    EXPECT(&b, "-NOTRESERVED job 7\r\n");
    /* CR and LF from user input become spaces. */
    resp_error(&b, "ERR", "unknown command '%s'", "a\r\n-ERR b\n\r");
    EXPECT(&b, "-ERR unknown command 'a  -ERR b  '\r\n");
    resp_error(&b, "ERR", "%s", "\r\n");
    EXPECT(&b, "-ERR   \r\n");
    /* No message: no trailing space. */
    resp_error(&b, "NOAUTH", "%s", "");
    EXPECT(&b, "-NOAUTH\r\n");

    /* A message longer than the first guess, on a buffer already in use. */
    char big[3001], want[3100];
    memset(big, 'm', 3000);
    big[3000] = '\0';
    big[1500] = '\n';
    resp_simple(&b, "OK");
    resp_error(&b, "TOOBIG", "%s!", big);
    big[1500] = ' ';
    int n = snprintf(want, sizeof want, "+OK\r\n-TOOBIG %s!\r\n", big);
    expect(&b, want, (size_t)n);
    buf_free(&b);
}

static void test_writer_large_bulk(void **state) {
    (void)state;
    struct buf b = BUF_INIT;
    size_t n = 1 << 20;
    char *data = malloc(n);
    for (size_t i = 0; i < n; i++) data[i] = (char)(i * 7);
    resp_int(&b, 1);
    resp_bulk(&b, data, n);
    assert_int_equal(buf_unread(&b), 4 + 10 + n + 2);
    assert_memory_equal(b.p, ":1\r\n$1048576\r\n", 14);
    assert_memory_equal(b.p + 14, data, n);
    assert_memory_equal(b.p + 14 + n, "\r\n", 2);
    free(data);
    buf_free(&b);
}

/* What the writer writes as an array of bulks is a request the parser reads. */
static void test_roundtrip(void **state) {
    (void)state;
    struct buf b = BUF_INIT;
    resp_array(&b, 4);
    resp_bulk_str(&b, "ADD");
    resp_bulk(&b, "\0\r\n", 3);
    resp_bulk_int(&b, -42);
    resp_bulk(&b, "", 0);
    check(b.p, b.len, &lim, (ssize_t)b.len, NULL, 4,
          (struct arg[4]){A("ADD"), A("\0\r\n"), A("-42"), A("")});
    char err[96];
    assert_int_equal(check_stream(b.p, b.len, &lim, err), 1);
    buf_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multibulk_good),
        cmocka_unit_test(test_multibulk_empty),
        cmocka_unit_test(test_multibulk_binary),
        cmocka_unit_test(test_multibulk_need),
        cmocka_unit_test(test_multibulk_errors),
        cmocka_unit_test(test_inline_good),
        cmocka_unit_test(test_inline_empty),
        cmocka_unit_test(test_inline_quotes),
        cmocka_unit_test(test_inline_errors),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_bytewise_single),
        cmocka_unit_test(test_bytewise_pipeline),
        cmocka_unit_test(test_bytewise_errors),
        cmocka_unit_test(test_writer),
        cmocka_unit_test(test_writer_error),
        cmocka_unit_test(test_writer_large_bulk),
        cmocka_unit_test(test_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
