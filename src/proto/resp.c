/* resp.c -- RESP2 request parser and reply writer (see resp.h).
 *
 * The parser keeps no state: an incomplete request is parsed again from its
 * start when more bytes arrive. That is cheap because bulk payloads are never
 * scanned (their length is skipped) and an inline line is found with one
 * memchr. It never reads past buf[len) and writes into buf only to unescape a
 * complete inline line.
 *
 * Fed byte by byte, a stream gives the same requests as fed whole: a request
 * is complete only at its last byte, and a bad one may be refused before its
 * last byte (e.g. "*1x" at once), a good one never.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "proto/resp.h"

/* Longest length line after '*' or '$': at most 19 digits (anything longer
 * overflows), so a runaway "*123..." is refused long before 32 bytes. */
#define LEN_DIGITS_MAX 19

/* Messages that name a limit or a byte cannot be string literals. They are
 * built here on the error path only, and stay valid until the next
 * resp_parse() on the same thread. */
static _Thread_local char errbuf[64];

static ssize_t bad(const char **err, const char *msg) {
    *err = msg;
    return RESP_BAD;
}

static ssize_t bad_too_many(const char **err, size_t max) {
    snprintf(errbuf, sizeof errbuf, "too many arguments (max %zu)", max);
    return bad(err, errbuf);
}

static ssize_t bad_too_long(const char **err, size_t max) {
    snprintf(errbuf, sizeof errbuf, "bulk argument too long (max %zu bytes)", max);
    return bad(err, errbuf);
}

static ssize_t bad_dollar(const char **err, unsigned char c) {
    if (c >= 0x20 && c < 0x7f)
        snprintf(errbuf, sizeof errbuf, "expected '$', got '%c'", c);
    else
        snprintf(errbuf, sizeof errbuf, "expected '$', got '\\x%02x'", c);
    return bad(err, errbuf);
}

/* --- multibulk ---------------------------------------------------------- */

enum { LEN_OK, LEN_NEED, LEN_BAD };

/* Reads the "<n>\r\n" that follows '*' or '$' at p[0..n): either "-1" or
 * decimal digits without a sign or leading zero (as Redis's string2ll).
 * On LEN_OK sets *v (-1 for "-1") and *used (bytes including CRLF). */
static int read_len(const char *p, size_t n, int64_t *v, size_t *used) {
    size_t i = 0;
    uint64_t x = 0;

    if (n == 0) return LEN_NEED;
    if (p[0] == '-') {
        if (n < 2) return LEN_NEED;
        if (p[1] != '1') return LEN_BAD;
        i = 2;
    } else if (p[0] == '0') {
        i = 1;
    } else {
        while (i < n && (unsigned char)(p[i] - '0') < 10) {
            if (i == LEN_DIGITS_MAX) return LEN_BAD;
            x = x * 10 + (uint64_t)(p[i] - '0');
            i++;
        }
        if (i == 0) return LEN_BAD; /* no digit at all */
    }
    if (i == n) return LEN_NEED;
    if (p[i] != '\r') return LEN_BAD;
    if (i + 1 == n) return LEN_NEED;
    if (p[i + 1] != '\n') return LEN_BAD;
    /* 19 digits fit in uint64_t; clamp so the caller sees a huge length. */
    *v = p[0] == '-' ? -1 : (x > INT64_MAX ? INT64_MAX : (int64_t)x);
    *used = i + 2;
    return LEN_OK;
}

static ssize_t parse_multibulk(char *buf, size_t len,
                               const struct resp_limits *lim,
                               struct resp_arg *argv, size_t *argc,
                               const char **err) {
    size_t pos = 1, used;
    int64_t n, bl;

    switch (read_len(buf + 1, len - 1, &n, &used)) {
    case LEN_NEED: return RESP_NEED;
    case LEN_BAD: return bad(err, "invalid multibulk length");
    }
    pos += used;
    if (n <= 0) return (ssize_t)pos; /* "*0" or "*-1": nothing to run */
    if ((uint64_t)n > lim->max_args) return bad_too_many(err, lim->max_args);

    for (size_t i = 0; i < (size_t)n; i++) {
        if (pos == len) return RESP_NEED;
        if (buf[pos] != '$') return bad_dollar(err, (unsigned char)buf[pos]);
        pos++;
        switch (read_len(buf + pos, len - pos, &bl, &used)) {
        case LEN_NEED: return RESP_NEED;
        case LEN_BAD: return bad(err, "invalid bulk length");
        }
        if (bl < 0) return bad(err, "invalid bulk length");
        if ((uint64_t)bl > lim->max_bulk) return bad_too_long(err, lim->max_bulk);
        pos += used;

        size_t blen = (size_t)bl, avail = len - pos;
        if (avail < blen + 2) {
            if (avail > blen && buf[pos + blen] != '\r')
                return bad(err, "missing CRLF after bulk argument");
            return RESP_NEED;
        }
        if (buf[pos + blen] != '\r' || buf[pos + blen + 1] != '\n')
            return bad(err, "missing CRLF after bulk argument");
        argv[i].p = buf + pos;
        argv[i].len = blen;
        pos += blen + 2;
    }
    *argc = (size_t)n;
    return (ssize_t)pos;
}

/* --- inline ------------------------------------------------------------- */

static bool is_blank(char c) { return c == ' ' || c == '\t'; }

static int hex_val(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Splits p[0..n) into words as redis-cli's sdssplitargs does, unescaping in
 * place (a word's output never outgrows its input, so it is written over
 * itself). Returns the word count, or RESP_BAD with *err set. */
static ssize_t split_inline(char *p, size_t n, const struct resp_limits *lim,
                            struct resp_arg *argv, const char **err) {
    size_t r = 0, count = 0;

    for (;;) {
        while (r < n && is_blank(p[r])) r++;
        if (r == n) break;
        if (count == lim->max_args) return bad_too_many(err, lim->max_args);

        size_t start = r, w = r;
        while (r < n && !is_blank(p[r])) {
            char c = p[r];
            if (c == '"') {
                /* "...": \n \r \t \b \a \xHH, any other \c is c. */
                r++;
                for (;;) {
                    if (r == n) return bad(err, "unbalanced quotes in request");
                    c = p[r];
                    if (c == '"') break;
                    if (c == '\\' && r + 1 < n) {
                        int hi, lo;
                        c = p[r + 1];
                        if (c == 'x' && r + 3 < n && (hi = hex_val(p[r + 2])) >= 0 &&
                            (lo = hex_val(p[r + 3])) >= 0) {
                            p[w++] = (char)(hi << 4 | lo);
                            r += 4;
                            continue;
                        }
                        switch (c) {
                        case 'n': c = '\n'; break;
                        case 'r': c = '\r'; break;
                        case 't': c = '\t'; break;
                        case 'b': c = '\b'; break;
                        case 'a': c = '\a'; break;
                        }
                        p[w++] = c;
                        r += 2;
                        continue;
                    }
                    p[w++] = c;
                    r++;
                }
            } else if (c == '\'') {
                /* '...': only \' is an escape. */
                r++;
                for (;;) {
                    if (r == n) return bad(err, "unbalanced quotes in request");
                    c = p[r];
                    if (c == '\'') break;
                    if (c == '\\' && r + 1 < n && p[r + 1] == '\'') {
                        p[w++] = '\'';
                        r += 2;
                        continue;
                    }
                    p[w++] = c;
                    r++;
                }
            } else {
                p[w++] = c;
                r++;
                continue;
            }
            /* A closing quote ends the word and must be followed by a blank. */
            r++;
            if (r < n && !is_blank(p[r]))
                return bad(err, "unbalanced quotes in request");
            break;
        }
        if (w - start > lim->max_bulk) return bad_too_long(err, lim->max_bulk);
        argv[count].p = p + start;
        argv[count].len = w - start;
        count++;
    }
    return (ssize_t)count;
}

static ssize_t parse_inline(char *buf, size_t len, const struct resp_limits *lim,
                            struct resp_arg *argv, size_t *argc,
                            const char **err) {
    /* The line may be max_inline bytes plus "\r\n". */
    size_t window = lim->max_inline < SIZE_MAX - 2 ? lim->max_inline + 2 : SIZE_MAX;
    char *nl = memchr(buf, '\n', len < window ? len : window);
    if (nl == NULL) {
        if (len >= window) return bad(err, "too big inline request");
        return RESP_NEED;
    }
    size_t end = (size_t)(nl - buf);
    if (end > 0 && buf[end - 1] == '\r') end--;
    if (end > lim->max_inline) return bad(err, "too big inline request");

    ssize_t n = split_inline(buf, end, lim, argv, err);
    if (n < 0) return n;
    *argc = (size_t)n;
    return nl - buf + 1;
}

ssize_t resp_parse(char *buf, size_t len, const struct resp_limits *lim,
                   struct resp_arg *argv, size_t *argc, const char **err) {
    *argc = 0;
    if (len == 0) return RESP_NEED;
    if (buf[0] == '*') return parse_multibulk(buf, len, lim, argv, argc, err);
    return parse_inline(buf, len, lim, argv, argc, err);
}

/* --- replies ------------------------------------------------------------ */

/* Longest "<type><int64>\r\n". */
#define LINE_MAX_LEN (1 + 20 + 2)

static char *put_u64(char *p, uint64_t v) {
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) *p++ = tmp[--n];
    return p;
}

static char *put_i64(char *p, int64_t v) {
    if (v < 0) {
        *p++ = '-';
        return put_u64(p, -(uint64_t)v);
    }
    return put_u64(p, (uint64_t)v);
}

static char *put_crlf(char *p) {
    p[0] = '\r';
    p[1] = '\n';
    return p + 2;
}

/* Appends "<type><v>\r\n". */
static void put_line(struct buf *b, char type, int64_t v) {
    char *s = buf_reserve(b, LINE_MAX_LEN), *p = s;
    *p++ = type;
    p = put_crlf(put_i64(p, v));
    b->len += (size_t)(p - s);
}

/* s must not contain "\r" or "\n"; replies use fixed words such as "OK". */
void resp_simple(struct buf *b, const char *s) {
    size_t n = strlen(s);
    char *p = buf_reserve(b, n + 3);
    p[0] = '+';
    memcpy(p + 1, s, n);
    put_crlf(p + 1 + n);
    b->len += n + 3;
}

/* Writes "-CODE message\r\n" ("-CODE\r\n" if the message is empty). Any CR
 * or LF in code or message becomes a space, so a message may quote user
 * input without breaking the stream. */
void resp_error(struct buf *b, const char *code, const char *fmt, ...) {
    size_t start = b->len;
    buf_append(b, "-", 1);
    buf_append(b, code, strlen(code));
    buf_append(b, " ", 1);

    size_t msg = b->len;
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    char *p = buf_reserve(b, 128);
    int n = vsnprintf(p, b->cap - b->len, fmt, ap);
    if (n > 0 && (size_t)n >= b->cap - b->len) {
        p = buf_reserve(b, (size_t)n + 1);
        vsnprintf(p, (size_t)n + 1, fmt, ap2);
    }
    va_end(ap2);
    va_end(ap);
    if (n > 0)
        b->len += (size_t)n;
    else
        b->len = msg - 1; /* no message: drop the space */

    for (char *q = b->p + start + 1, *e = b->p + b->len; q < e; q++)
        if (*q == '\r' || *q == '\n') *q = ' ';
    buf_append(b, "\r\n", 2);
}

void resp_int(struct buf *b, int64_t v) { put_line(b, ':', v); }

void resp_bulk(struct buf *b, const void *data, size_t len) {
    char *s = buf_reserve(b, LINE_MAX_LEN + len + 2), *p = s;
    *p++ = '$';
    p = put_crlf(put_u64(p, len));
    if (len) memcpy(p, data, len);
    p = put_crlf(p + len);
    b->len += (size_t)(p - s);
}

/* A NULL s is written as the nil bulk. */
void resp_bulk_str(struct buf *b, const char *s) {
    if (s == NULL)
        resp_nil(b);
    else
        resp_bulk(b, s, strlen(s));
}

void resp_bulk_int(struct buf *b, int64_t v) {
    char digits[21];
    size_t n = (size_t)(put_i64(digits, v) - digits);
    resp_bulk(b, digits, n);
}

void resp_nil(struct buf *b) { buf_append(b, "$-1\r\n", 5); }

void resp_nil_array(struct buf *b) { buf_append(b, "*-1\r\n", 5); }

void resp_array(struct buf *b, size_t n) {
    char *s = buf_reserve(b, LINE_MAX_LEN), *p = s;
    *p++ = '*';
    p = put_crlf(put_u64(p, n));
    b->len += (size_t)(p - s);
}

void resp3_null(struct buf *b) { buf_append(b, "_\r\n", 3); }

void resp3_map(struct buf *b, size_t npairs) {
    char *s = buf_reserve(b, LINE_MAX_LEN), *p = s;
    *p++ = '%';
    p = put_crlf(put_u64(p, npairs));
    b->len += (size_t)(p - s);
}

void resp_nil_v(struct buf *b, int proto) {
    if (proto == 3) resp3_null(b);
    else resp_nil(b);
}

void resp_nil_array_v(struct buf *b, int proto) {
    if (proto == 3) resp3_null(b);
    else resp_nil_array(b);
}

void resp_map_v(struct buf *b, int proto, size_t npairs) {
    if (proto == 3) resp3_map(b, npairs);
    else resp_array(b, 2 * npairs);
}
