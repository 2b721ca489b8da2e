/* resp.h -- RESP2 requests in, replies out (DESIGN §3).
 *
 * The request parser is incremental, zero-copy and socket-free: it is handed
 * the bytes received so far, fills a caller-supplied array with pointers into
 * them and says how many bytes one whole request took. It allocates nothing
 * and keeps no state between calls, so a request that is not complete yet is
 * simply parsed again from its start when more bytes arrive.
 *
 * Both request forms are accepted: multibulk ("*2\r\n$4\r\nPING\r\n...") and
 * inline ("PING hello\r\n", words separated by spaces or tabs, double quotes
 * with \-escapes and single quotes as redis-cli sends them).
 *
 * The writer appends replies to a struct buf.
 */
#ifndef DQ_RESP_H
#define DQ_RESP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lib/buf.h"

struct resp_arg {
    const char *p;
    size_t len;
};

struct resp_limits {
    size_t max_args;    /* most arguments in one request (and argv's size) */
    size_t max_bulk;    /* longest single argument */
    size_t max_inline;  /* longest inline request line */
};

#define RESP_NEED ((ssize_t)-2) /* incomplete: call again with more bytes */
#define RESP_BAD  ((ssize_t)-1) /* the stream cannot be resynchronised */

/* Parses one request at buf[0..len).
 * Returns the bytes it took (> 0) and sets *argc (0 for an empty inline line
 * or "*0", which the caller skips), RESP_NEED, or RESP_BAD with *err set to a
 * message naming what was wrong, valid until the next resp_parse() call on
 * this thread ("invalid bulk length", ...). argv must
 * hold lim->max_args entries; a request with more is RESP_BAD. The argv
 * pointers point into buf. Inline arguments that contained quotes or escapes
 * are unescaped in place, so buf must be writable. */
ssize_t resp_parse(char *buf, size_t len, const struct resp_limits *lim,
                   struct resp_arg *argv, size_t *argc, const char **err);

/* Replies. */
void resp_simple(struct buf *b, const char *s);          /* +s */
void resp_error(struct buf *b, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));               /* -CODE msg */
void resp_int(struct buf *b, int64_t v);                  /* :v */
void resp_bulk(struct buf *b, const void *p, size_t len); /* $len p */
void resp_bulk_str(struct buf *b, const char *s);
void resp_bulk_int(struct buf *b, int64_t v);             /* v as a bulk */
void resp_nil(struct buf *b);                              /* $-1 */
void resp_nil_array(struct buf *b);                        /* *-1 */
void resp_array(struct buf *b, size_t n);                  /* *n */

/* RESP3 (a client that said HELLO 3): */
void resp3_null(struct buf *b);                            /* _ */
void resp3_map(struct buf *b, size_t npairs);              /* %n */
/* Protocol-aware shortcuts: the RESP3 form when proto is 3. */
void resp_nil_v(struct buf *b, int proto);       /* $-1 or _ */
void resp_nil_array_v(struct buf *b, int proto); /* *-1 or _ */
void resp_map_v(struct buf *b, int proto, size_t npairs); /* *2n or %n */

#endif
