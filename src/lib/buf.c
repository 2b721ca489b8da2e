/* buf.c -- a growable byte buffer (see buf.h). */
#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "xalloc.h"

char *buf_reserve(struct buf *b, size_t n) {
    if (b->cap - b->len >= n) return b->p + b->len;
    if (b->off > 0 && b->cap - buf_unread(b) >= n && b->off >= b->cap / 2) {
        buf_compact(b);
        return b->p + b->len;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n) cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
    return b->p + b->len;
}

void buf_append(struct buf *b, const void *data, size_t n) {
    if (n == 0) return;
    memcpy(buf_reserve(b, n), data, n);
    b->len += n;
}

void buf_appendf(struct buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= b->cap - b->len) {
        buf_reserve(b, (size_t)n + 1);
        va_start(ap, fmt);
        vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

void buf_consume(struct buf *b, size_t n) {
    b->off += n;
    if (b->off >= b->len) b->off = b->len = 0;
}

void buf_compact(struct buf *b) {
    if (b->off == 0) return;
    size_t n = buf_unread(b);
    memmove(b->p, b->p + b->off, n);
    b->off = 0;
    b->len = n;
}

void buf_reset(struct buf *b, size_t keep) {
    b->off = b->len = 0;
    if (b->cap > keep) {
        dq_free(b->p);
        b->p = NULL;
        b->cap = 0;
    }
}

void buf_free(struct buf *b) {
    dq_free(b->p);
    b->p = NULL;
    b->len = b->cap = b->off = 0;
}
