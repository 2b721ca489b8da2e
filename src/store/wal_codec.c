/* wal_codec.c -- the log's record format (docs/log-format.md): encoding
 * records and file headers, decoding them, and scanning a file image record
 * by record, telling a torn tail from damage in the middle. Nothing here
 * touches a file: the callers map or read the bytes. On big files a helper
 * thread checks the CRCs ahead of the scan (wl_scan_big), so that the loop
 * thread only decodes and applies during recovery. Used by the replay, the
 * writer and compaction, and by far segments (store/tier.c) through wal.h.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/crc32c.h"
#include "store/wal_int.h"

static const uint8_t MAGIC[8] = {0x89, 'D', 'Q', 'L', 'O', 'G', '\r', '\n'};

#define FIND_BUDGET (256u << 20) /* bytes of CRC spent looking past damage */

/* --- encoding --------------------------------------------------------------- */

static uint8_t *put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    return p + 2;
}
static uint8_t *put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
    return p + 4;
}
static uint8_t *put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
    return p + 8;
}
static uint8_t *putstr16(uint8_t *p, struct dq_str s) {
    p = put16(p, (uint16_t)s.len);
    if (s.len) memcpy(p, s.p, s.len);
    return p + s.len;
}
static uint16_t get16(const uint8_t *p) {
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}
static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) {
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

#define JOB_FIXED 46   /* state, kind, due, created, deadline, 5 x u32 */
#define STATE_FIXED 21 /* state, attempts, due, deadline */

static size_t key_size(const struct dq_job *j) {
    return 4 + j->topic.len + j->id.len;
}

/* Size of type + payload. */
size_t wl_rec_size(const struct wal_rec *r) {
    const struct dq_job *j = &r->job;
    switch (r->type) {
    case WAL_JOB:
    case WAL_LOAD:
        return 1 + JOB_FIXED + key_size(j) + 4 + j->body.len +
               (j->url.len ? 4 + j->url.len + j->content_type.len : 0);
    case WAL_FAR:
    case WAL_MOVE: return 1 + 8 + key_size(j);
    case WAL_DEL:
    case WAL_ACK: return 1 + key_size(j);
    case WAL_RESERVE:
    case WAL_NACK:
    case WAL_TOUCH:
    case WAL_RELEASE:
    case WAL_EXPIRE:
    case WAL_KICK: return 1 + STATE_FIXED + key_size(j);
    case WAL_KICKALL: return 1 + 16 + 2 + j->topic.len;
    case WAL_PURGE: return 1 + 8 + 2 + j->topic.len;
    case WAL_COUNTERS: return 1 + 64;
    case WAL_SNAPEND: return 1 + 8;
    default: return 0;
    }
}

/* Encodes r at dst, which has room for WAL_REC_HEADER + wl_rec_size(r). */
size_t wl_encode_at(uint8_t *dst, const struct wal_rec *r) {
    const struct dq_job *j = &r->job;
    size_t n = wl_rec_size(r);
    uint8_t *p = dst + WAL_REC_HEADER;
    /* a JOB or LOAD of a job with a URL: WAL_PUSH, and its push fields */
    bool push = (r->type == WAL_JOB || r->type == WAL_LOAD) && j->url.len;
    *p++ = (uint8_t)(r->type | (push ? WAL_PUSH : 0));
    switch (r->type) {
    case WAL_FAR:
    case WAL_MOVE:
        p = put64(p, r->ref);
        p = putstr16(p, j->topic);
        p = putstr16(p, j->id);
        break;
    case WAL_JOB:
    case WAL_LOAD:
        *p++ = (uint8_t)j->state;
        *p++ = j->backoff.kind;
        p = put64(p, (uint64_t)j->due);
        p = put64(p, (uint64_t)j->created);
        p = put64(p, (uint64_t)j->deadline);
        p = put32(p, j->ttr);
        p = put32(p, j->retries);
        p = put32(p, j->attempts);
        p = put32(p, j->backoff.base);
        p = put32(p, j->backoff.max);
        p = putstr16(p, j->topic);
        p = putstr16(p, j->id);
        p = put32(p, (uint32_t)j->body.len);
        if (j->body.len) memcpy(p, j->body.p, j->body.len);
        p += j->body.len;
        if (j->url.len) {
            p = putstr16(p, j->url);
            p = putstr16(p, j->content_type);
        }
        break;
    case WAL_RESERVE:
    case WAL_NACK:
    case WAL_TOUCH:
    case WAL_RELEASE:
    case WAL_EXPIRE:
    case WAL_KICK:
        *p++ = (uint8_t)j->state;
        p = put32(p, j->attempts);
        p = put64(p, (uint64_t)j->due);
        p = put64(p, (uint64_t)(j->state == DQ_RESERVED ? j->deadline : 0));
        /* fall through */
    case WAL_DEL:
    case WAL_ACK:
        p = putstr16(p, j->topic);
        p = putstr16(p, j->id);
        break;
    case WAL_KICKALL:
        p = put64(p, (uint64_t)j->due);
        p = put64(p, r->count);
        p = putstr16(p, j->topic);
        break;
    case WAL_PURGE:
        p = put64(p, r->count);
        p = putstr16(p, j->topic);
        break;
    case WAL_COUNTERS: {
        const struct dq_stats *c = &r->counters;
        const uint64_t v[8] = {c->added,   c->reserved, c->acked, c->nacked,
                               c->expired, c->dead,     c->deleted,
                               c->kicked};
        for (int i = 0; i < 8; i++) p = put64(p, v[i]);
        break;
    }
    case WAL_SNAPEND:
        p = put64(p, r->count);
        break;
    }
    put32(dst + 4, (uint32_t)n);
    put32(dst, crc32c(dst + 4, 4 + n));
    return WAL_REC_HEADER + n;
}

size_t wal_encode(struct buf *out, const struct wal_rec *r) {
    size_t n = WAL_REC_HEADER + wl_rec_size(r);
    if (n == WAL_REC_HEADER) return 0;
    uint8_t *dst = (uint8_t *)buf_reserve(out, n);
    wl_encode_at(dst, r);
    out->len += n;
    return n;
}

void wl_header_at(uint8_t *h, int kind, uint64_t seq) {
    memset(h, 0, WAL_HEADER_SIZE);
    memcpy(h, MAGIC, 8);
    put16(h + 8, WAL_VERSION);
    put16(h + 10, (uint16_t)kind);
    put64(h + 16, seq);
    put32(h + 28, crc32c(h, 28));
}

void wal_encode_header(struct buf *out, int kind, uint64_t seq) {
    wl_header_at((uint8_t *)buf_reserve(out, WAL_HEADER_SIZE), kind, seq);
    out->len += WAL_HEADER_SIZE;
}

const char *wal_type_name(int type) {
    static const char *const names[] = {
        "?",      "job",    "del",    "ack",     "reserve",  "nack",
        "touch",  "release", "expire", "kick",   "kickall",  "purge",
        "counters", "snapend", "far", "load", "move"};
    if (type < 1 || type > WAL_MOVE) return "?";
    return names[type];
}

/* --- decoding and scanning ---------------------------------------------- */

struct rd {
    const uint8_t *p, *end;
    bool bad;
};

static bool rd_need(struct rd *r, size_t n) {
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = true;
        return false;
    }
    return true;
}
static uint8_t rd8(struct rd *r) { return rd_need(r, 1) ? *r->p++ : 0; }
static uint32_t rd32(struct rd *r) {
    if (!rd_need(r, 4)) return 0;
    uint32_t v = get32(r->p);
    r->p += 4;
    return v;
}
static uint64_t rd64(struct rd *r) {
    if (!rd_need(r, 8)) return 0;
    uint64_t v = get64(r->p);
    r->p += 8;
    return v;
}
static struct dq_str rdstr16(struct rd *r, size_t min, size_t max) {
    struct dq_str s = {NULL, 0};
    if (!rd_need(r, 2)) return s;
    size_t n = get16(r->p);
    r->p += 2;
    if (n < min || n > max || !rd_need(r, n)) {
        r->bad = true;
        return s;
    }
    s.p = (const char *)r->p;
    s.len = n;
    r->p += n;
    return s;
}

static void rd_key(struct rd *r, struct dq_job *j) {
    j->topic = rdstr16(r, 1, DQ_TOPIC_MAX);
    j->id = rdstr16(r, 1, DQ_ID_MAX);
}

static bool valid_time(int64_t t) { return t >= 0 && t < (INT64_C(1) << 53); }

/* Decodes type + payload p[0..n). Returns NULL, or what is wrong. */
static const char *decode(const uint8_t *p, size_t n, struct wal_rec *out) {
    struct rd r = {p, p + n, false};
    memset(out, 0, sizeof *out);
    struct dq_job *j = &out->job;
    out->type = rd8(&r);
    bool push = (out->type & WAL_PUSH) &&
                ((out->type & ~WAL_PUSH) == WAL_JOB ||
                 (out->type & ~WAL_PUSH) == WAL_LOAD);
    if (push) out->type &= ~WAL_PUSH;
    switch (out->type) {
    case WAL_FAR:
    case WAL_MOVE:
        out->ref = rd64(&r);
        rd_key(&r, j);
        if (!r.bad && out->ref >= (UINT64_C(1) << 48))
            return "far reference out of range";
        break;
    case WAL_JOB:
    case WAL_LOAD: {
        j->state = rd8(&r);
        j->backoff.kind = rd8(&r);
        j->due = (int64_t)rd64(&r);
        j->created = (int64_t)rd64(&r);
        j->deadline = (int64_t)rd64(&r);
        j->ttr = rd32(&r);
        j->retries = rd32(&r);
        j->attempts = rd32(&r);
        j->backoff.base = rd32(&r);
        j->backoff.max = rd32(&r);
        rd_key(&r, j);
        uint32_t blen = rd32(&r);
        if (rd_need(&r, blen)) {
            j->body.p = (const char *)r.p;
            j->body.len = blen;
            r.p += blen;
        }
        if (push) {
            j->url = rdstr16(&r, 1, DQ_URL_MAX);
            j->content_type = rdstr16(&r, 0, DQ_CTYPE_MAX);
        }
        if (r.bad) break;
        if ((unsigned)j->state >= DQ_NSTATES) return "bad job state";
        if (j->backoff.kind > DQ_BACKOFF_FIXED) return "bad backoff kind";
        if (!valid_time(j->due) || !valid_time(j->created) ||
            !valid_time(j->deadline))
            return "time out of range";
        if (j->ttr < 1 || j->ttr > DQ_TTR_MAX) return "ttr out of range";
        if (j->retries > DQ_RETRIES_MAX) return "retries out of range";
        if (j->backoff.base > DQ_BACKOFF_LIMIT ||
            j->backoff.max > DQ_BACKOFF_LIMIT)
            return "backoff out of range";
        if (j->state != DQ_RESERVED) j->deadline = 0;
        break;
    }
    case WAL_RESERVE:
    case WAL_NACK:
    case WAL_TOUCH:
    case WAL_RELEASE:
    case WAL_EXPIRE:
    case WAL_KICK:
        j->state = rd8(&r);
        j->attempts = rd32(&r);
        j->due = (int64_t)rd64(&r);
        j->deadline = (int64_t)rd64(&r);
        rd_key(&r, j);
        if (r.bad) break;
        if ((unsigned)j->state >= DQ_NSTATES) return "bad job state";
        if (!valid_time(j->due) || !valid_time(j->deadline))
            return "time out of range";
        if ((j->state == DQ_RESERVED) != (j->deadline != 0))
            return "deadline without reservation";
        break;
    case WAL_DEL:
    case WAL_ACK:
        rd_key(&r, j);
        break;
    case WAL_KICKALL:
        j->due = (int64_t)rd64(&r);
        out->count = rd64(&r);
        j->topic = rdstr16(&r, 1, DQ_TOPIC_MAX);
        if (!r.bad && !valid_time(j->due)) return "time out of range";
        break;
    case WAL_PURGE:
        out->count = rd64(&r);
        j->topic = rdstr16(&r, 1, DQ_TOPIC_MAX);
        break;
    case WAL_COUNTERS: {
        struct dq_stats *c = &out->counters;
        uint64_t *f[8] = {&c->added,   &c->reserved, &c->acked,   &c->nacked,
                          &c->expired, &c->dead,     &c->deleted, &c->kicked};
        for (int i = 0; i < 8; i++) *f[i] = rd64(&r);
        break;
    }
    case WAL_SNAPEND:
        out->count = rd64(&r);
        break;
    default:
        return "unknown record type (written by a newer delayqd?)";
    }
    if (r.bad) return "record too short or a field out of range";
    if (r.p != r.end) return "record longer than its fields";
    return NULL;
}

static bool all_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

/* Is there a record at off that passes its CRC and decodes? */
static bool valid_at(const uint8_t *p, size_t len, size_t off,
                     uint64_t *budget) {
    if (len - off < WAL_REC_HEADER + 1) return false;
    uint32_t rl = get32(p + off + 4);
    if (rl == 0 || rl > WAL_REC_MAX || rl > len - off - WAL_REC_HEADER)
        return false;
    if (*budget < rl) {
        *budget = 0;
        return false;
    }
    *budget -= rl;
    if (crc32c(p + off + 4, 4 + (size_t)rl) != get32(p + off))
        return false;
    struct wal_rec tmp;
    return decode(p + off + WAL_REC_HEADER, rl, &tmp) == NULL;
}

/* The offset of the first valid record after `from`, or 0. When the search
 * budget runs out, answers as if one was found (the cautious reading). */
static uint64_t find_valid(const uint8_t *p, size_t len, size_t from) {
    uint64_t budget = FIND_BUDGET;
    for (size_t q = from; q + WAL_REC_HEADER < len; q++) {
        if (valid_at(p, len, q, &budget)) return q;
        if (budget == 0) return q;
    }
    return 0;
}

/* wal_scan; `verified`, if not NULL, is the end of the records a helper
 * thread has already checked the CRCs of (see wl_scan_big). */
static int scan(const void *data, size_t len, uint64_t start,
                int (*fn)(void *ud, const struct wal_rec *r, uint64_t off),
                void *ud, struct wal_scan *res,
                const atomic_size_t *verified) {
    const uint8_t *p = data;
    size_t checked = 0;
    memset(res, 0, sizeof *res);
    if (len < WAL_HEADER_SIZE ||
        (all_zero(p, WAL_HEADER_SIZE) && all_zero(p, len))) {
        /* a file whose creation did not finish */
        if (all_zero(p, len) || memcmp(p, MAGIC, len < 8 ? len : 8) == 0) {
            res->end = WAL_END_TORN;
            snprintf(res->why, sizeof res->why, "incomplete file header");
        } else {
            res->end = WAL_END_BADHEADER;
            snprintf(res->why, sizeof res->why, "not a delayq log file");
        }
        return 0;
    }
    if (memcmp(p, MAGIC, 8) != 0) {
        res->end = WAL_END_BADHEADER;
        snprintf(res->why, sizeof res->why, "not a delayq log file");
        return 0;
    }
    if (crc32c(p, 28) != get32(p + 28)) {
        res->end = WAL_END_BADHEADER;
        snprintf(res->why, sizeof res->why, "file header checksum mismatch");
        return 0;
    }
    unsigned version = get16(p + 8);
    if (version != WAL_VERSION) {
        res->end = WAL_END_BADHEADER;
        snprintf(res->why, sizeof res->why,
                 "format version %u, this delayqd reads version %d", version,
                 WAL_VERSION);
        return 0;
    }
    res->kind = get16(p + 10);
    res->seq = get64(p + 16);
    if (res->kind != WAL_KIND_LOG && res->kind != WAL_KIND_SNAPSHOT &&
        res->kind != WAL_KIND_FAR) {
        res->end = WAL_END_BADHEADER;
        snprintf(res->why, sizeof res->why, "unknown file kind %d",
                 res->kind);
        return 0;
    }

    size_t off = start > WAL_HEADER_SIZE ? start : WAL_HEADER_SIZE;
    while (off < len) {
        size_t rem = len - off;
        const char *why = NULL;
        if (rem < WAL_REC_HEADER) {
            if (all_zero(p + off, rem)) break;
            why = "incomplete record header";
        } else {
            uint32_t crc = get32(p + off), rl = get32(p + off + 4);
            if (crc == 0 && rl == 0 && all_zero(p + off, rem)) break;
            if (rl == 0 || rl > WAL_REC_MAX) {
                why = "bad record length";
            } else if (rl > rem - WAL_REC_HEADER) {
                why = "record runs past the end of the file";
            } else if (off + WAL_REC_HEADER + rl > checked &&
                       (!verified ||
                        off + WAL_REC_HEADER + rl >
                            (checked = atomic_load_explicit(
                                 verified, memory_order_acquire))) &&
                       crc32c(p + off + 4, 4 + (size_t)rl) !=
                           crc) {
                why = "checksum mismatch";
            } else {
                struct wal_rec rec;
                const char *dwhy = decode(p + off + WAL_REC_HEADER, rl, &rec);
                if (dwhy) {
                    /* The CRC holds, so this was written like this: no torn
                     * write explains it. */
                    res->good = off;
                    res->end = WAL_END_CORRUPT;
                    snprintf(res->why, sizeof res->why, "%s record: %s",
                             wal_type_name(p[off + WAL_REC_HEADER]), dwhy);
                    return 0;
                }
                if (fn) {
                    int rc = fn(ud, &rec, off);
                    if (rc) {
                        res->good = off;
                        return rc;
                    }
                }
                res->nrec++;
                off += WAL_REC_HEADER + rl;
                continue;
            }
        }
        res->good = off;
        snprintf(res->why, sizeof res->why, "%s", why);
        res->next_valid = find_valid(p, len, off + 1);
        res->end = res->next_valid ? WAL_END_CORRUPT : WAL_END_TORN;
        return 0;
    }
    res->good = off;
    res->end = WAL_END_CLEAN;
    return 0;
}

int wal_scan(const void *data, size_t len,
             int (*fn)(void *ud, const struct wal_rec *r, uint64_t off),
             void *ud, struct wal_scan *res) {
    return scan(data, len, 0, fn, ud, res, NULL);
}

int wal_scan_at(const void *data, size_t len, uint64_t start,
                int (*fn)(void *ud, const struct wal_rec *r, uint64_t off),
                void *ud, struct wal_scan *res) {
    return scan(data, len, start, fn, ud, res, NULL);
}

size_t wal_decode(const void *data, size_t len, struct wal_rec *out) {
    const uint8_t *p = data;
    if (len < WAL_REC_HEADER + 1) return 0;
    uint32_t rl = get32(p + 4);
    if (rl == 0 || rl > WAL_REC_MAX || rl > len - WAL_REC_HEADER) return 0;
    if (crc32c(p + 4, 4 + (size_t)rl) != get32(p)) return 0;
    if (decode(p + WAL_REC_HEADER, rl, out) != NULL) return 0;
    return WAL_REC_HEADER + rl;
}

/* Recovery of a large file: a helper thread checks the CRCs ahead of the
 * replay, so that the loop thread only decodes and applies. The helper
 * walks the same chain of records and publishes how far every record is
 * known good; it stops at the first doubt, and the replay checks the rest
 * itself. */
#define SCAN_HELPER_MIN (8u << 20)

struct verifier {
    const uint8_t *p;
    size_t len;
    atomic_size_t done;
    atomic_bool stop;
};

static void *verify_main(void *arg) {
    struct verifier *v = arg;
    size_t off = WAL_HEADER_SIZE;
    unsigned n = 0;
    while (!atomic_load_explicit(&v->stop, memory_order_relaxed)) {
        if (v->len - off < WAL_REC_HEADER) break;
        uint32_t rl = get32(v->p + off + 4);
        if (rl == 0 || rl > WAL_REC_MAX || rl > v->len - off - WAL_REC_HEADER)
            break;
        if (crc32c(v->p + off + 4, 4 + (size_t)rl) !=
            get32(v->p + off))
            break;
        off += WAL_REC_HEADER + rl;
        if ((++n & 255) == 0)
            atomic_store_explicit(&v->done, off, memory_order_release);
    }
    atomic_store_explicit(&v->done, off, memory_order_release);
    return NULL;
}

int wl_scan_big(const void *data, size_t len,
                int (*fn)(void *ud, const struct wal_rec *r, uint64_t off),
                void *ud, struct wal_scan *res) {
    struct verifier v = {.p = data, .len = len};
    atomic_init(&v.done, 0);
    atomic_init(&v.stop, false);
    pthread_t t;
    if (len < SCAN_HELPER_MIN || pthread_create(&t, NULL, verify_main, &v))
        return scan(data, len, 0, fn, ud, res, NULL);
    int rc = scan(data, len, 0, fn, ud, res, &v.done);
    atomic_store(&v.stop, true);
    pthread_join(t, NULL);
    return rc;
}
