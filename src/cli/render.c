/* render.c -- bin/delayq's output: terminal-safe text, relative times,
 * aligned tables and JSON (render.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/render.h"
#include "lib/base64.h"
#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/duration.h"
#include "lib/xalloc.h"

/* Length of the valid UTF-8 sequence at p (n bytes left), or 0. */
static size_t utf8_seq(const unsigned char *p, size_t n) {
    size_t len;
    unsigned cp;
    if (p[0] >= 0xc2 && p[0] <= 0xdf) len = 2, cp = p[0] & 0x1f;
    else if (p[0] >= 0xe0 && p[0] <= 0xef) len = 3, cp = p[0] & 0x0f;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4) len = 4, cp = p[0] & 0x07;
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return len;
}

/* Appends bytes made safe for a terminal: control characters and invalid
 * UTF-8 become \n, \t, \r or \xNN; valid UTF-8 is kept. */
static void put_escaped(struct buf *o, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char ch = p[i];
        size_t k;
        if (ch >= 0x20 && ch < 0x7f) {
            buf_append(o, &p[i++], 1);
        } else if (ch == '\n') {
            buf_append(o, "\\n", 2), i++;
        } else if (ch == '\t') {
            buf_append(o, "\\t", 2), i++;
        } else if (ch == '\r') {
            buf_append(o, "\\r", 2), i++;
        } else if (ch >= 0x80 && (k = utf8_seq(p + i, n - i)) > 0) {
            buf_append(o, p + i, k), i += k;
        } else {
            buf_appendf(o, "\\x%02x", ch), i++;
        }
    }
}

/* A string cell: the buf's contents, NUL-terminated, now owned by caller. */
static char *buf_take(struct buf *b) {
    buf_append(b, "", 1);
    char *s = b->p;
    memset(b, 0, sizeof *b);
    return s;
}

char *escaped(const char *s, size_t n) {
    struct buf b = BUF_INIT;
    put_escaped(&b, s, n);
    return buf_take(&b);
}

/* "2026-11-22T10:00:00Z (in 29m59s)" */
char *when(int64_t ms) {
    char t[TIMESTAMP_FMT_MAX], d[DURATION_FMT_MAX];
    int64_t delta = ms - clock_ms();
    int64_t mag = delta < 0 ? -delta : delta;
    if (mag >= 60000) mag = (mag + 500) / 1000 * 1000; /* whole seconds */
    struct buf b = BUF_INIT;
    buf_appendf(&b, "%s", duration_format_time(ms, t, sizeof t));
    if (delta == 0)
        buf_appendf(&b, " (now)");
    else
        buf_appendf(&b, delta > 0 ? " (in %s)" : " (%s ago)",
                    duration_format(mag, d, sizeof d));
    return buf_take(&b);
}


void table_row(struct table *t, ...) {
    if (t->nrows == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 16;
        t->cells = xrealloc(t->cells, t->cap * (size_t)t->ncols * sizeof *t->cells);
    }
    va_list ap;
    va_start(ap, t);
    for (int i = 0; i < t->ncols; i++)
        t->cells[t->nrows * (size_t)t->ncols + (size_t)i] = va_arg(ap, char *);
    va_end(ap);
    t->nrows++;
}

static size_t display_width(const char *s) {
    size_t w = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xc0) != 0x80) w++;
    return w;
}

void table_print(const struct table *t) {
    size_t width[16] = {0};
    for (size_t r = 0; r < t->nrows; r++)
        for (int i = 0; i < t->ncols; i++) {
            size_t w = display_width(t->cells[r * (size_t)t->ncols + (size_t)i]);
            if (w > width[i]) width[i] = w;
        }
    for (size_t r = 0; r < t->nrows; r++) {
        for (int i = 0; i < t->ncols; i++) {
            const char *cell = t->cells[r * (size_t)t->ncols + (size_t)i];
            fputs(cell, stdout);
            if (i + 1 < t->ncols)
                printf("%*s", (int)(width[i] - display_width(cell) + 2), "");
        }
        putchar('\n');
    }
}

void table_free(struct table *t) {
    for (size_t k = 0; k < t->nrows * (size_t)t->ncols; k++) free(t->cells[k]);
    free(t->cells);
}

char *xstr(const char *s) { return xstrndup(s, strlen(s)); }

char *fmt_ll(long long v) {
    char tmp[24];
    snprintf(tmp, sizeof tmp, "%lld", v);
    return xstr(tmp);
}

void emit_json(json_t *j) {
    size_t flags = JSON_ENCODE_ANY | (isatty(STDOUT_FILENO) ? JSON_INDENT(2) : 0);
    json_dumpf(j, stdout, flags);
    putchar('\n');
    json_decref(j);
}

static json_t *json_base64(const char *s, size_t n) {
    char *out = xmalloc(BASE64_ENCODED_LEN(n) + 1);
    size_t len = base64_encode(s, n, out);
    json_t *j = json_stringn(out, len);
    free(out);
    return j;
}

/* Sets "body" (valid UTF-8) or "body_base64" (anything else) on obj. */
void json_set_body(json_t *obj, const char *s, size_t n) {
    json_t *str = json_stringn(s ? s : "", n);
    if (str)
        json_object_set_new(obj, "body", str);
    else
        json_object_set_new(obj, "body_base64", json_base64(s, n));
}

/* A string from the server (topic, id, cursor): UTF-8 as is, else base64. */
json_t *json_str(const char *s) {
    json_t *j = json_string(s);
    return j ? j : json_base64(s, strlen(s));
}
