/* redis_rec.h -- the Redis store's job record (redis_rec.c).
 *
 * The pool hash's value: a header packed little-endian -- state (u8, enum
 * dq_state), attempts ttr retries (u32), backoff kind (u8), base max (u32),
 * due created deadline (doubles, ms) -- then ord (8 bytes big-endian; the
 * delay zset's member is ord then the id); for a push job (REC_PUSH set in
 * ord's first byte) the URL's length (u16 LE), the content type's length
 * (u8), the URL and the content type; then the body. Records of jobs
 * without a URL are as before push delivery. */
#ifndef DQ_REDIS_REC_H
#define DQ_REDIS_REC_H

#include <stddef.h>
#include <stdint.h>

#include "job.h"

#define REC_HDR 54                /* the header and ord */
#define REC_ORD 46                /* offset of ord */
#define REC_PUSH 0x80             /* in ord's first byte: a push job */
#define REC_PUSH_EXT 3            /* the two lengths */
#define REC_ORD_EPOCH 1704067200000LL /* ord counts ms from 2024 (the top
                                     bit stays free until 2093) */

/* Where a record's strings are (offsets in the record; lengths 0 = none). */
struct rec_view {
    size_t body, blen, url, ulen, ct, clen;
};

/* The ord of the seq-th add made in millisecond ms: adds due in the same
 * millisecond are carried in this order. Never has REC_PUSH set. */
uint64_t rs_rec_ord(int64_t ms, uint64_t seq);
/* The record's length for an ADD. */
size_t rs_rec_size(const struct dq_add *a);
/* Writes a's record (rs_rec_size bytes): ready if due by now, else delayed;
 * attempts 0, created now; ord with REC_PUSH if a has a URL. */
void rs_rec_write(unsigned char *out, const struct dq_add *a, int64_t now,
                  uint64_t ord);
/* Reads a record: its numbers into j (strings untouched), where its
 * strings are into v. Returns 0, or -1 if it is malformed. */
int rs_rec_read(const unsigned char *rec, size_t len, struct dq_job *j,
                struct rec_view *v);

#endif
