/* buf.h -- a growable byte buffer.
 *
 * Invariants: p is NULL only while cap is 0; bytes [off, len) are the unread
 * contents; off <= len <= cap. Growth failure aborts the process (allocation
 * failure of a few KB is not recoverable in a server that must answer), via
 * the allocation seam of lib/xalloc.h.
 */
#ifndef DQ_BUF_H
#define DQ_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct buf {
    char *p;
    size_t len;  /* end of data */
    size_t cap;
    size_t off;  /* start of unread data */
};

#define BUF_INIT {NULL, 0, 0, 0}

/* Makes room for at least n more bytes after len; returns p + len. */
char *buf_reserve(struct buf *b, size_t n);
void buf_append(struct buf *b, const void *data, size_t n);
void buf_appendf(struct buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Unread bytes. */
static inline size_t buf_unread(const struct buf *b) { return b->len - b->off; }
/* Marks n unread bytes as read; resets to empty when all is read. */
void buf_consume(struct buf *b, size_t n);
/* Moves unread data to the front, keeping capacity. */
void buf_compact(struct buf *b);
/* Drops everything; frees memory above `keep` bytes of capacity. */
void buf_reset(struct buf *b, size_t keep);
/* Frees the memory. Accepts a zeroed buf. */
void buf_free(struct buf *b);

#endif
