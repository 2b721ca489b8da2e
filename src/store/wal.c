/* wal.c -- the embedded store's append-only log (see wal.h and
 * docs/log-format.md for the format).
 *
 * Layout of this file: fault seams, encoding, decoding and scanning, replay
 * into the engine, the data directory and recovery, the writer (group
 * commit, broken state and probes), the background sync thread, compaction,
 * housekeeping.
 */
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "lib/crc32c.h"

#include "engine/engine.h"
#include "lib/buf.h"
#include "lib/log.h"
#include "lib/xalloc.h"
#include "store/store.h"
#include "store/wal.h"

static const uint8_t MAGIC[8] = {0x89, 'D', 'Q', 'L', 'O', 'G', '\r', '\n'};

#define PROBE_MS 1000        /* broken log: time between probes */
#define SNAP_CHUNK (256u << 10) /* compaction: bytes per write */
#define FIND_BUDGET (256u << 20) /* bytes of CRC spent looking past damage */

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* --- fault seams ---------------------------------------------------------- */

static ssize_t real_pwrite(int fd, const void *p, size_t n, off_t off) {
    return pwrite(fd, p, n, off);
}
static int real_fdatasync(int fd) { return fdatasync(fd); }
static int real_ftruncate(int fd, off_t len) { return ftruncate(fd, len); }

const struct wal_io wal_io_default = {real_pwrite, real_fdatasync,
                                      real_ftruncate};
struct wal_io wal_io = {real_pwrite, real_fdatasync, real_ftruncate};

/* DELAYQ_FAULT_FILE: a test arms failures in the real binary by writing a
 * word into this file and disarms them by removing it. */
static char fault_path[4096];

enum fault { FAULT_NONE, FAULT_ENOSPC, FAULT_EIO, FAULT_FSYNC };

static enum fault fault_now(void) {
    int fd = open(fault_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return FAULT_NONE;
    char b[16] = {0};
    ssize_t n = read(fd, b, sizeof b - 1);
    close(fd);
    if (n <= 0) return FAULT_NONE;
    if (strncmp(b, "enospc", 6) == 0) return FAULT_ENOSPC;
    if (strncmp(b, "eio", 3) == 0) return FAULT_EIO;
    if (strncmp(b, "fsync", 5) == 0) return FAULT_FSYNC;
    return FAULT_NONE;
}

/* A full disk writes part of a request and then refuses the rest, which
 * leaves a torn record behind for the error path to cut off. */
static ssize_t fault_pwrite(int fd, const void *p, size_t n, off_t off) {
    switch (fault_now()) {
    case FAULT_ENOSPC:
        if (n > 1) return pwrite(fd, p, n / 2, off);
        errno = ENOSPC;
        return -1;
    case FAULT_EIO:
        errno = EIO;
        return -1;
    default:
        return pwrite(fd, p, n, off);
    }
}
static int fault_fdatasync(int fd) {
    enum fault f = fault_now();
    if (f == FAULT_EIO || f == FAULT_FSYNC) {
        errno = EIO;
        return -1;
    }
    return fdatasync(fd);
}

static void fault_arm_from_env(void) {
    const char *p = getenv("DELAYQ_FAULT_FILE");
    if (!p || !*p || strlen(p) >= sizeof fault_path) return;
    strcpy(fault_path, p);
    wal_io.pwrite = fault_pwrite;
    wal_io.fdatasync = fault_fdatasync;
    log_warn("fault injection armed by DELAYQ_FAULT_FILE=%s", fault_path);
}

/* Writes all of p at off through the seam; -1 with errno on failure. */
static int write_all(int fd, const void *p, size_t n, uint64_t off) {
    const char *c = p;
    while (n > 0) {
        ssize_t k = wal_io.pwrite(fd, c, n, (off_t)off);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (k == 0) {
            errno = ENOSPC;
            return -1;
        }
        c += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

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
static size_t rec_size(const struct wal_rec *r) {
    const struct dq_job *j = &r->job;
    switch (r->type) {
    case WAL_JOB:
    case WAL_LOAD: return 1 + JOB_FIXED + key_size(j) + 4 + j->body.len;
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

/* Encodes r at dst, which has room for WAL_REC_HEADER + rec_size(r). */
static size_t encode_at(uint8_t *dst, const struct wal_rec *r) {
    const struct dq_job *j = &r->job;
    size_t n = rec_size(r);
    uint8_t *p = dst + WAL_REC_HEADER;
    *p++ = (uint8_t)r->type;
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
    size_t n = WAL_REC_HEADER + rec_size(r);
    if (n == WAL_REC_HEADER) return 0;
    uint8_t *dst = (uint8_t *)buf_reserve(out, n);
    encode_at(dst, r);
    out->len += n;
    return n;
}

static void header_at(uint8_t *h, int kind, uint64_t seq) {
    memset(h, 0, WAL_HEADER_SIZE);
    memcpy(h, MAGIC, 8);
    put16(h + 8, WAL_VERSION);
    put16(h + 10, (uint16_t)kind);
    put64(h + 16, seq);
    put32(h + 28, crc32c(h, 28));
}

void wal_encode_header(struct buf *out, int kind, uint64_t seq) {
    header_at((uint8_t *)buf_reserve(out, WAL_HEADER_SIZE), kind, seq);
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
 * thread has already checked the CRCs of (see scan_big). */
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

static int scan_big(const void *data, size_t len,
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

/* --- replay into the engine ---------------------------------------------- */

#define FAR_AHEAD 32

struct replay {
    struct engine *e;
    int64_t now;
    bool snapshot;       /* reading a snapshot file */
    bool snapend;        /* its end record was seen */
    uint64_t snap_jobs;  /* job records in it */
    struct dq_stats cnt; /* counters so far */
    char *scratch;       /* a job's body while it is re-inserted */
    size_t scratch_cap;
    uint64_t records;
    const char *err;     /* why apply stopped */
    bool fatal;          /* out of memory: no repair can help */
    /* FAR and MOVE records wait here a little while their id-table buckets
     * are loaded, so that their cache misses overlap (a log of 100 million
     * far jobs is all such records); any other record empties it first */
    struct wal_rec far[FAR_AHEAD];
    size_t nfar;
};

/* Restores the far jobs waiting in rp->far, in order. */
static int far_flush(struct replay *rp) {
    for (size_t i = 0; i < rp->nfar; i++) {
        const struct wal_rec *r = &rp->far[i];
        if (engine_restore_far(rp->e, r->job.topic, r->job.id, r->ref) < 0) {
            rp->err = "out of memory restoring a far job";
            rp->fatal = true;
            rp->nfar = 0;
            return -1;
        }
    }
    rp->nfar = 0;
    return 0;
}

static int far_queue(struct replay *rp, const struct wal_rec *r) {
    if (rp->nfar == FAR_AHEAD && far_flush(rp) != 0) return -1;
    rp->far[rp->nfar++] = *r;
    /* the bucket of the newest, the first chain node of one half way */
    engine_prefetch_far(rp->e, r->job.topic, r->job.id, 0);
    if (rp->nfar > FAR_AHEAD / 2) {
        const struct wal_rec *m = &rp->far[rp->nfar - 1 - FAR_AHEAD / 2];
        engine_prefetch_far(rp->e, m->job.topic, m->job.id, 1);
    }
    return 0;
}

/* Puts a job back in the engine in the state *j says, replacing any job
 * with its topic and id. */
static int put_job(struct replay *rp, const struct dq_job *j) {
    struct dq_job tmp;
    if (j->state == DQ_READY) {
        /* through the wheel, so that ready jobs line up by due time again
         * when the engine first advances (the snapshot's order is the
         * engine's hash order) */
        tmp = *j;
        tmp.state = DQ_DELAYED;
        j = &tmp;
    }
    int rc = engine_restore(rp->e, rp->now, j);
    if (rc == ENGINE_EEXISTS) {
        engine_del(rp->e, j->topic, j->id);
        rc = engine_restore(rp->e, rp->now, j);
    }
    if (rc < 0) {
        rp->err = "out of memory restoring a job";
        rp->fatal = true;
        return -1;
    }
    return 0;
}

/* Loads the job named by r into *j (body copied to scratch) and takes it
 * out of the engine. Returns 0 if the job is absent (a record about a job
 * that an earlier repair dropped), 1 if loaded, -1 on allocation failure. */
static int take_job(struct replay *rp, const struct wal_rec *r,
                    struct dq_job *j) {
    if (!engine_get(rp->e, r->job.topic, r->job.id, j)) return 0;
    if (j->body.len > rp->scratch_cap) {
        char *p = dq_realloc(rp->scratch, j->body.len);
        if (!p) {
            rp->err = "out of memory";
            rp->fatal = true;
            return -1;
        }
        rp->scratch = p;
        rp->scratch_cap = j->body.len;
    }
    if (j->body.len) memcpy(rp->scratch, j->body.p, j->body.len);
    j->body.p = rp->scratch;
    j->topic = r->job.topic;
    j->id = r->job.id;
    engine_del(rp->e, r->job.topic, r->job.id);
    return 1;
}

static int apply(void *ud, const struct wal_rec *r, uint64_t off) {
    struct replay *rp = ud;
    struct engine *e = rp->e;
    struct dq_job j;
    int rc;
    (void)off;
    rp->records++;
    if (r->type != WAL_FAR && r->type != WAL_MOVE && rp->nfar &&
        far_flush(rp) != 0)
        return -1;
    if (rp->snapend) {
        rp->err = "record after the end of a snapshot";
        return -1;
    }
    /* The counters come from the records alone: the state a record meets
     * in replay may differ from the one it met (a snapshot taken while the
     * engine moved), the record's outcome does not. */
    switch (r->type) {
    case WAL_JOB:
    case WAL_FAR:
        if (rp->snapshot) rp->snap_jobs++;
        else rp->cnt.added++;
        break;
    case WAL_DEL: rp->cnt.deleted++; break;
    case WAL_ACK: rp->cnt.acked++; break;
    case WAL_RESERVE: rp->cnt.reserved++; break;
    case WAL_NACK:
        rp->cnt.nacked++;
        if (r->job.state == DQ_DEAD) rp->cnt.dead++;
        break;
    case WAL_EXPIRE:
        rp->cnt.expired++;
        if (r->job.state == DQ_DEAD) rp->cnt.dead++;
        break;
    case WAL_KICK: rp->cnt.kicked++; break;
    case WAL_KICKALL: rp->cnt.kicked += r->count; break;
    case WAL_PURGE: rp->cnt.deleted += r->count; break;
    }
    switch (r->type) {
    case WAL_JOB:
    case WAL_LOAD:
        return put_job(rp, &r->job);
    case WAL_FAR:
    case WAL_MOVE:
        return far_queue(rp, r); /* strings point into the mapped file */
    case WAL_DEL:
    case WAL_ACK:
        engine_del(e, r->job.topic, r->job.id);
        return 0;
    case WAL_KICKALL:
        engine_kick(e, r->job.due, r->job.topic, 0);
        return 0;
    case WAL_PURGE:
        engine_purge(e, r->job.topic);
        return 0;
    case WAL_COUNTERS:
        rp->cnt = r->counters;
        return 0;
    case WAL_SNAPEND:
        if (!rp->snapshot) {
            rp->err = "snapshot end record in a log segment";
            return -1;
        }
        if (r->count != rp->snap_jobs) {
            rp->err = "snapshot end record counts a different number of jobs";
            return -1;
        }
        rp->snapend = true;
        return 0;
    default:
        break;
    }
    /* the rest set the mutable state of one job */
    rc = take_job(rp, r, &j);
    if (rc <= 0) return rc;
    j.state = r->job.state;
    j.attempts = r->job.attempts;
    j.due = r->job.due;
    j.deadline = r->job.deadline;
    return put_job(rp, &j);
}

/* --- files ---------------------------------------------------------------- */

struct syncer {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool running, stop;
    int next_fd;              /* handed over by the loop, -1 if none */
    atomic_uint_fast64_t written; /* bumped by every commit */
    atomic_uint_fast64_t synced;  /* the value of `written` last synced */
    atomic_int err;           /* errno of a failed sync, 0 if none */
};

struct wal {
    struct wal_config cfg;
    char *dir;
    int dirfd, lockfd;
    /* the segment being written */
    int fd;
    uint64_t seg;
    uint64_t off;          /* end of the last good commit */
    /* the batch */
    uint8_t *out;
    size_t len, cap;
    bool nomem;
    /* broken state */
    bool broken;
    int64_t next_probe;    /* monotonic ms */
    int last_err;
    /* sizes, for compaction */
    uint64_t snap_seq;     /* the snapshot covers segments <= this */
    uint64_t snap_bytes;
    uint64_t log_bytes;    /* bytes of the segments after the snapshot */
    uint64_t job_bytes, job_recs; /* whole-job records appended: their mean
                                     size estimates the live jobs' size */
    uint64_t far_bytes, far_recs; /* the same for far jobs' records */
    /* compaction */
    struct snapper *snap;  /* the compaction running, or NULL */
    int64_t next_compact;  /* monotonic ms; after a failure */
    int64_t compact_backoff;
    uint64_t compactions;
    int64_t last_compact_ms;
    int64_t max_step_us;   /* longest compaction slice (or start) so far */
    struct event *snap_ev, *tick_ev;
    void (*on_writable)(void *ud);
    void *on_writable_ud;
    struct syncer sync;
};

static void seg_name(char *b, size_t n, uint64_t seq, const char *ext) {
    snprintf(b, n, "%08" PRIu64 ".%s", seq, ext);
}

/* Parses "<digits>.<ext>" exactly; 0 if not. */
static uint64_t parse_name(const char *name, const char *ext) {
    const char *dot = strchr(name, '.');
    if (!dot || dot == name || strcmp(dot + 1, ext) != 0) return 0;
    uint64_t v = 0;
    for (const char *c = name; c < dot; c++) {
        if (*c < '0' || *c > '9' || v > UINT64_MAX / 10 - 1) return 0;
        v = v * 10 + (uint64_t)(*c - '0');
    }
    return v;
}

struct dirlist {
    uint64_t *logs, *snaps;
    size_t nlogs, nsnaps;
};

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static bool push_u64(uint64_t **v, size_t *n, uint64_t x) {
    uint64_t *p = dq_realloc(*v, (*n + 1) * sizeof *p);
    if (!p) return false;
    p[(*n)++] = x;
    *v = p;
    return true;
}

/* Lists the segments and snapshots; deletes leftover *.tmp if rw. */
static int list_dir(struct wal *w, struct dirlist *dl, bool rw) {
    memset(dl, 0, sizeof *dl);
    int fd = dup(w->dirfd);
    if (fd < 0) return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    rewinddir(d);
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        uint64_t v;
        size_t nl = strlen(de->d_name);
        if ((v = parse_name(de->d_name, "log"))) {
            if (!push_u64(&dl->logs, &dl->nlogs, v)) rc = -1;
        } else if ((v = parse_name(de->d_name, "snap"))) {
            if (!push_u64(&dl->snaps, &dl->nsnaps, v)) rc = -1;
        } else if (rw && nl > 4 && strcmp(de->d_name + nl - 4, ".tmp") == 0) {
            log_info("removing %s/%s, left by an unfinished compaction",
                     w->dir, de->d_name);
            unlinkat(w->dirfd, de->d_name, 0);
        }
    }
    closedir(d);
    if (dl->nlogs) qsort(dl->logs, dl->nlogs, sizeof *dl->logs, cmp_u64);
    if (dl->nsnaps) qsort(dl->snaps, dl->nsnaps, sizeof *dl->snaps, cmp_u64);
    if (rc) errno = ENOMEM;
    return rc;
}

static void dirlist_free(struct dirlist *dl) {
    dq_free(dl->logs);
    dq_free(dl->snaps);
}

struct mapped {
    int fd;
    const uint8_t *p;
    size_t len;
};

static int map_file(struct wal *w, const char *name, struct mapped *m,
                    bool rw) {
    m->p = NULL;
    m->len = 0;
    m->fd = openat(w->dirfd, name, (rw ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (m->fd < 0) return -1;
    struct stat st;
    if (fstat(m->fd, &st) != 0) return -1;
    m->len = (size_t)st.st_size;
    if (m->len == 0) return 0;
    void *p = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE | MAP_POPULATE,
                   m->fd, 0);
    if (p == MAP_FAILED) return -1;
    madvise(p, m->len, MADV_SEQUENTIAL);
    m->p = p;
    return 0;
}

static void unmap_file(struct mapped *m) {
    if (m->p) munmap((void *)m->p, m->len);
    if (m->fd >= 0) close(m->fd);
    m->p = NULL;
    m->fd = -1;
}

static void fsync_dir(struct wal *w) {
    if (fsync(w->dirfd) != 0)
        log_warn("fsync of directory %s failed: %s", w->dir, strerror(errno));
}

static uint64_t file_size(struct wal *w, const char *name) {
    struct stat st;
    return fstatat(w->dirfd, name, &st, 0) == 0 ? (uint64_t)st.st_size : 0;
}

/* Cuts a file to len bytes and syncs it (rw recovery). */
static int cut_file(struct mapped *m, uint64_t len) {
    if (wal_io.ftruncate(m->fd, (off_t)len) != 0) return -1;
    return wal_io.fdatasync(m->fd);
}

/* Makes a file an empty segment: header only, synced. */
static int write_header(struct mapped *m, uint64_t seq) {
    uint8_t h[WAL_HEADER_SIZE];
    header_at(h, WAL_KIND_LOG, seq);
    if (wal_io.ftruncate(m->fd, 0) != 0 ||
        write_all(m->fd, h, sizeof h, 0) != 0)
        return -1;
    return wal_io.fdatasync(m->fd);
}

/* Counts the valid records of a file (for --repair's report). */
static uint64_t count_records(struct wal *w, const char *name) {
    struct mapped m;
    uint64_t n = 0;
    if (map_file(w, name, &m, false) == 0) {
        struct wal_scan sc;
        wal_scan(m.p, m.len, NULL, NULL, &sc);
        n = sc.nrec;
    }
    unmap_file(&m);
    return n;
}

/* --- recovery ------------------------------------------------------------- */

struct recov {
    struct wal *w;
    bool rw;              /* open: may truncate, repair, delete */
    struct replay rp;
    struct wal_recovery *info;
    char *err;
    size_t errlen;
};

/* Deletes the named logs from index i on (repair), reporting them. */
static void drop_later(struct recov *rc, const struct dirlist *dl, size_t i) {
    struct wal *w = rc->w;
    for (; i < dl->nlogs; i++) {
        char name[64];
        seg_name(name, sizeof name, dl->logs[i], "log");
        uint64_t sz = file_size(w, name);
        uint64_t n = count_records(w, name);
        log_warn("repair: dropping %s/%s (%" PRIu64 " bytes, %" PRIu64
                 " records)",
                 w->dir, name, sz, n);
        rc->info->dropped += sz;
        unlinkat(w->dirfd, name, 0);
    }
}

/* True if the file starts with a well-formed header that names another
 * kind or number than its file name says (checked before replaying it). */
static bool header_mismatch(const struct mapped *m, int kind, uint64_t seq) {
    struct wal_scan sc;
    if (m->len < WAL_HEADER_SIZE) return false;
    wal_scan(m->p, WAL_HEADER_SIZE, NULL, NULL, &sc);
    return sc.end == WAL_END_CLEAN && (sc.kind != kind || sc.seq != seq);
}

/* --repair of a damaged snapshot: cut it at `at` and end it there, so that
 * it holds the jobs before the damage and opens cleanly from now on. */
static int fix_snapshot(struct mapped *m, uint64_t seq, uint64_t at,
                        const struct replay *rp) {
    struct buf b = BUF_INIT;
    if (at < WAL_HEADER_SIZE) {
        at = 0;
        wal_encode_header(&b, WAL_KIND_SNAPSHOT, seq);
    }
    if (!rp->snapend) {
        struct wal_rec r = {.type = WAL_COUNTERS, .counters = rp->cnt};
        wal_encode(&b, &r);
        r = (struct wal_rec){.type = WAL_SNAPEND, .count = rp->snap_jobs};
        wal_encode(&b, &r);
    }
    int rc = 0;
    if (wal_io.ftruncate(m->fd, (off_t)at) != 0 ||
        (b.len && write_all(m->fd, b.p, b.len, at) != 0) ||
        wal_io.fdatasync(m->fd) != 0)
        rc = -1;
    buf_free(&b);
    return rc;
}

/* Loads the snapshot, or fails. */
/* A first, counting pass over a file about to be replayed: announces its
 * whole-job records to the engine, which sizes the id tables for them.
 * Errors are left to the real pass. */
static int count_job(void *ud, const struct wal_rec *r, uint64_t off) {
    if (r->type == WAL_JOB) engine_expect(ud, r->job.topic);
    else if (r->type == WAL_FAR) engine_expect_far(ud, r->job.topic);
    return 0;
}

static void presize(struct engine *e, const void *p, size_t len) {
    struct wal_scan sc;
    scan(p, len, 0, count_job, e, &sc, NULL);
    engine_expect_done(e);
}

/* Maps file seq.ext of the data dir; on failure sets rc->err. */
static int map_numbered(struct recov *rc, uint64_t seq, const char *ext,
                        char *name, size_t namelen, struct mapped *m) {
    seg_name(name, namelen, seq, ext);
    if (map_file(rc->w, name, m, rc->rw) == 0) return 0;
    snprintf(rc->err, rc->errlen, "%s/%s: %s", rc->w->dir, name,
             strerror(errno));
    unmap_file(m);
    return -1;
}

static int load_snapshot(struct recov *rc, uint64_t seq) {
    struct wal *w = rc->w;
    char name[64];
    struct mapped m;
    if (map_numbered(rc, seq, "snap", name, sizeof name, &m) != 0) return -1;
    struct wal_scan sc;
    const char *why = NULL;
    int stop = 0;
    rc->rp.snapend = false;
    rc->rp.snap_jobs = 0;
    rc->rp.err = NULL;
    if (header_mismatch(&m, WAL_KIND_SNAPSHOT, seq)) {
        why = "file header does not match the file name";
        sc.good = 0;
    } else {
        rc->rp.snapshot = true;
        presize(rc->rp.e, m.p, m.len);
        stop = scan_big(m.p, m.len, apply, &rc->rp, &sc);
        if (far_flush(&rc->rp) != 0 && !stop) stop = -1;
        rc->rp.snapshot = false;
        rc->info->bytes += m.len;
        if (stop) why = rc->rp.err;
        else if (sc.end != WAL_END_CLEAN) why = sc.why;
        else if (!rc->rp.snapend) why = "snapshot has no end record";
    }
    uint64_t at = sc.good;
    int ret = 0;
    if (!why) goto out;
    if (stop && rc->rp.fatal) {
        snprintf(rc->err, rc->errlen, "%s/%s: %s", w->dir, name, why);
        ret = -1;
    } else if (rc->rw && w->cfg.repair) {
        log_warn("repair: snapshot %s/%s is damaged at offset %" PRIu64
                 " (%s): keeping the %" PRIu64 " jobs before it, dropping "
                 "%zu bytes",
                 w->dir, name, at, why, rc->rp.snap_jobs,
                 m.len - (size_t)at);
        rc->info->dropped += m.len - at;
        if (fix_snapshot(&m, seq, at, &rc->rp) != 0) {
            snprintf(rc->err, rc->errlen, "%s/%s: cannot repair: %s", w->dir,
                     name, strerror(errno));
            ret = -1;
        }
    } else {
        snprintf(rc->err, rc->errlen,
                 "%s/%s: damaged at offset %" PRIu64 ": %s (start with "
                 "--repair to keep what precedes it)",
                 w->dir, name, at, why);
        ret = -1;
    }
out:
    unmap_file(&m);
    rc->rp.snapend = false; /* segments follow */
    return ret;
}

/* Replays one segment. last: it is the newest (a torn tail is expected
 * there). limit: in reload, read no further than this. Returns 0, 1 if the
 * replay stopped here by repair (drop the rest), -1 on error. Sets *good. */
static int replay_log(struct recov *rc, uint64_t seq, bool last,
                      uint64_t limit, uint64_t *good) {
    struct wal *w = rc->w;
    char name[64];
    struct mapped m;
    if (map_numbered(rc, seq, "log", name, sizeof name, &m) != 0) return -1;
    size_t len = m.len;
    if (limit && limit < len) len = (size_t)limit;
    struct wal_scan sc;
    int ret = 0, stop = 0;
    const char *why = NULL;
    if (header_mismatch(&m, WAL_KIND_LOG, seq)) {
        memset(&sc, 0, sizeof sc);
        sc.end = WAL_END_BADHEADER;
        snprintf(sc.why, sizeof sc.why,
                 "file header does not match the file name");
    } else {
        presize(rc->rp.e, m.p, len);
        stop = scan_big(m.p, len, apply, &rc->rp, &sc);
        if (far_flush(&rc->rp) != 0 && !stop) stop = -1;
    }
    rc->info->bytes += len;
    *good = sc.good;
    if (stop) {
        snprintf(rc->err, rc->errlen, "%s/%s: offset %" PRIu64 ": %s",
                 w->dir, name, sc.good, rc->rp.err);
        ret = -1;
        goto out;
    }
    if (sc.end == WAL_END_TORN && sc.good == 0 && last && rc->rw) {
        /* created, but its header never reached the disk */
        log_warn("%s/%s: incomplete file header: rewriting it", w->dir,
                 name);
        rc->info->truncated += m.len;
        if (write_header(&m, seq) != 0) goto ioerr;
        *good = WAL_HEADER_SIZE;
        goto out;
    } else if (sc.end == WAL_END_CLEAN) {
        if (rc->rw && sc.good < m.len && last) {
            log_info("%s/%s: removing %zu bytes of zeros after the last "
                     "record",
                     w->dir, name, m.len - (size_t)sc.good);
            if (cut_file(&m, sc.good) != 0) goto ioerr;
        }
        goto out;
    } else if (sc.end == WAL_END_TORN && (last || !rc->rw)) {
        if (!rc->rw) goto out; /* reload: we wrote it; stop at the tail */
        log_warn("%s/%s: torn tail at offset %" PRIu64 " (%s): truncating "
                 "%zu bytes (a write that never completed)",
                 w->dir, name, sc.good, sc.why, m.len - (size_t)sc.good);
        rc->info->truncated += m.len - sc.good;
        if (cut_file(&m, sc.good) != 0) goto ioerr;
        goto out;
    } else {
        why = sc.why;
    }
    /* damage in the middle of the history */
    if (rc->rw && w->cfg.repair) {
        log_warn("repair: %s/%s is damaged at offset %" PRIu64
                 " (%s): truncating there, dropping %zu bytes",
                 w->dir, name, sc.good, why, m.len - (size_t)sc.good);
        rc->info->dropped += m.len - sc.good;
        if (sc.good < WAL_HEADER_SIZE) {
            /* nothing usable: rewrite the header */
            if (write_header(&m, seq) != 0) goto ioerr;
            *good = WAL_HEADER_SIZE;
        } else if (cut_file(&m, sc.good) != 0) {
            goto ioerr;
        }
        ret = 1;
        goto out;
    }
    snprintf(rc->err, rc->errlen,
             "%s/%s: corrupt record at offset %" PRIu64 ": %s%s (start with "
             "--repair to truncate the log there)",
             w->dir, name, sc.good, why,
             sc.end == WAL_END_TORN ? " (and later files follow)" : "");
    ret = -1;
    goto out;
ioerr:
    snprintf(rc->err, rc->errlen, "%s/%s: cannot truncate: %s", w->dir, name,
             strerror(errno));
    ret = -1;
out:
    unmap_file(&m);
    return ret;
}

/* Creates segment seq with its header. */
static int create_segment(struct wal *w, uint64_t seq) {
    char name[64];
    seg_name(name, sizeof name, seq, "log");
    int fd = openat(w->dirfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC,
                    0644);
    if (fd < 0) return -1;
    uint8_t h[WAL_HEADER_SIZE];
    header_at(h, WAL_KIND_LOG, seq);
    if (write_all(fd, h, sizeof h, 0) != 0 ||
        (w->cfg.fsync_mode != DQ_FSYNC_NO && wal_io.fdatasync(fd) != 0)) {
        int e = errno;
        close(fd);
        unlinkat(w->dirfd, name, 0);
        errno = e;
        return -1;
    }
    if (w->cfg.fsync_mode != DQ_FSYNC_NO) fsync_dir(w);
    return fd;
}

/* The whole recovery. rw: at open (may cut and delete files); otherwise a
 * reload, which only reads, up to w->off in the current segment. */
static int recover(struct wal *w, struct engine *e, int64_t now, bool rw,
                   struct wal_recovery *info, char *err, size_t errlen) {
    struct recov rc = {
        .w = w, .rw = rw, .info = info, .err = err, .errlen = errlen,
        .rp = {.e = e, .now = now},
    };
    memset(info, 0, sizeof *info);
    int64_t t0 = mono_ms();
    struct dirlist dl;
    int ret = -1;
    if (list_dir(w, &dl, rw) != 0) {
        snprintf(err, errlen, "%s: cannot list: %s", w->dir, strerror(errno));
        return -1;
    }
    uint64_t snap = dl.nsnaps ? dl.snaps[dl.nsnaps - 1] : 0;
    if (snap && load_snapshot(&rc, snap) != 0) goto out;
    if (rw) {
        /* leftovers of a compaction that finished but did not clean up */
        char name[64];
        for (size_t i = 0; i + 1 < dl.nsnaps; i++) {
            seg_name(name, sizeof name, dl.snaps[i], "snap");
            unlinkat(w->dirfd, name, 0);
        }
        for (size_t i = 0; i < dl.nlogs && dl.logs[i] <= snap; i++) {
            seg_name(name, sizeof name, dl.logs[i], "log");
            log_info("removing %s/%s, covered by snapshot %08" PRIu64,
                     w->dir, name, snap);
            unlinkat(w->dirfd, name, 0);
        }
    }
    size_t first = 0;
    while (first < dl.nlogs && dl.logs[first] <= snap) first++;
    uint64_t expect = snap + 1, last_good = 0, seq = 0;
    w->log_bytes = 0;
    for (size_t i = first; i < dl.nlogs; i++) {
        seq = dl.logs[i];
        if (seq != expect) {
            if (rw && w->cfg.repair) {
                log_warn("repair: segment %08" PRIu64 ".log is missing",
                         expect);
                drop_later(&rc, &dl, i);
                seq = expect - 1;
                break;
            }
            snprintf(err, errlen,
                     "%s: segment %08" PRIu64 ".log is missing (found "
                     "%08" PRIu64 ".log); start with --repair to drop "
                     "everything after the gap",
                     w->dir, expect, seq);
            goto out;
        }
        bool last = i + 1 == dl.nlogs;
        uint64_t limit = (!rw && seq == w->seg) ? w->off : 0;
        int r = replay_log(&rc, seq, last, limit, &last_good);
        if (r < 0) goto out;
        w->log_bytes += last_good;
        expect = seq + 1;
        if (r == 1) {
            drop_later(&rc, &dl, i + 1);
            break;
        }
    }
    engine_set_counters(e, &rc.rp.cnt);
    if (rw) {
        w->snap_seq = snap;
        w->snap_bytes = 0;
        if (snap) {
            char name[64];
            seg_name(name, sizeof name, snap, "snap");
            w->snap_bytes = file_size(w, name);
        }
        if (seq && seq >= snap + 1) {
            char name[64];
            seg_name(name, sizeof name, seq, "log");
            w->fd = openat(w->dirfd, name, O_RDWR | O_CLOEXEC);
            if (w->fd < 0) {
                snprintf(err, errlen, "%s/%s: %s", w->dir, name,
                         strerror(errno));
                goto out;
            }
            w->seg = seq;
            w->off = last_good;
        } else {
            w->seg = snap + 1;
            w->fd = create_segment(w, w->seg);
            if (w->fd < 0) {
                snprintf(err, errlen, "%s: cannot create a segment: %s",
                         w->dir, strerror(errno));
                goto out;
            }
            w->off = WAL_HEADER_SIZE;
            w->log_bytes = WAL_HEADER_SIZE;
        }
    }
    info->jobs = engine_count(e);
    info->records = rc.rp.records;
    info->ms = mono_ms() - t0;
    ret = 0;
out:
    dq_free(rc.rp.scratch);
    dirlist_free(&dl);
    return ret;
}

/* --- the background sync thread (--fsync everysec) ---------------------- */

static void *sync_main(void *arg) {
    struct wal *w = arg;
    struct syncer *s = &w->sync;
    int cur = -1;
    uint64_t synced = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += 1;
        while (!s->stop && s->next_fd < 0) {
            if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) == ETIMEDOUT)
                break;
        }
        int nfd = s->next_fd;
        bool stop = s->stop;
        s->next_fd = -1;
        pthread_mutex_unlock(&s->mu);
        if (nfd >= 0) {
            if (cur >= 0) {
                if (wal_io.fdatasync(cur) != 0) atomic_store(&s->err, errno);
                close(cur);
            }
            cur = nfd;
        }
        uint64_t wr = atomic_load(&s->written);
        if (cur >= 0 && wr != synced) {
            if (wal_io.fdatasync(cur) != 0) {
                atomic_store(&s->err, errno);
            } else {
                synced = wr;
                atomic_store(&s->synced, wr);
            }
        }
        if (stop) break;
        pthread_mutex_lock(&s->mu);
    }
    if (cur >= 0) close(cur);
    return NULL;
}

/* Gives the thread the current segment (a dup it owns). */
static void sync_handover(struct wal *w) {
    struct syncer *s = &w->sync;
    if (!s->running) return;
    int fd = fcntl(w->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        log_warn("cannot hand the log to the sync thread: %s",
                 strerror(errno));
        return;
    }
    pthread_mutex_lock(&s->mu);
    if (s->next_fd >= 0) {
        /* the previous segment was never picked up: sync it here */
        fdatasync(s->next_fd);
        close(s->next_fd);
    }
    s->next_fd = fd;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static int sync_start(struct wal *w) {
    struct syncer *s = &w->sync;
    s->next_fd = -1;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&s->thread, NULL, sync_main, w) != 0) return -1;
    s->running = true;
    sync_handover(w);
    return 0;
}

static void sync_stop(struct wal *w) {
    struct syncer *s = &w->sync;
    if (!s->running) return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    if (s->next_fd >= 0) close(s->next_fd);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    s->running = false;
}

/* --- compaction ----------------------------------------------------------- */

/* A compaction writes a snapshot of the engine while the server goes on.
 * It starts right after a commit, when the engine holds exactly what the
 * log holds: the current segment N is closed, N+1 takes the new records,
 * and the snapshot "N.snap" is written from the loop in small slices (a few
 * thousand jobs per loop iteration), walking each topic's id table with a
 * SCAN cursor. A job that changes while the walk goes on may be captured
 * before or after the change, but the change itself is in segment N+1, and
 * every record there sets a job's state outright, so replaying N+1 over the
 * snapshot ends where the engine is. The counters are taken at the start.
 * Then a helper thread syncs the file, and the loop renames it into place
 * and deletes the files it covers. Nothing forks, nothing is copied
 * wholesale, and no step holds the loop for long. */

#define SNAP_SLICE 1024 /* jobs per step */
#define SNAP_SCAN 64    /* buckets per engine_scan call */

struct snapper {
    bool active;
    uint64_t seq;            /* the snapshot covers segments <= seq */
    int fd;
    uint8_t *b;              /* SNAP_CHUNK bytes being filled */
    size_t len;
    uint64_t off;
    uint64_t jobs;
    int err;                 /* errno of a failed write */
    const struct engine *e;
    struct dq_stats counters;
    char *names;             /* the topics at the start, NUL-separated */
    size_t names_len, at;    /* at: offset of the current topic */
    uint64_t cursor;
    bool far;                /* walking the topic's far jobs */
    int64_t start;
    /* the end, in a helper thread: sync, rename, delete what it replaces */
    bool syncing;
    pthread_t sync_thread;
    atomic_bool synced;
    atomic_int sync_err;      /* the sync or the rename failed */
    int dirfd;
    uint64_t old_snap;        /* the snapshot it replaces (0 if none) */
    uint64_t freed, freed_log;
};

static void snap_flush(struct wal *w) {
    struct snapper *sn = w->snap;
    if (sn->err || sn->len == 0) return;
    if (write_all(sn->fd, sn->b, sn->len, sn->off) != 0) sn->err = errno;
    sn->off += sn->len;
    sn->len = 0;
}

static void snap_rec(struct wal *w, const struct wal_rec *r) {
    struct snapper *sn = w->snap;
    size_t n = WAL_REC_HEADER + rec_size(r);
    if (sn->len + n > SNAP_CHUNK) snap_flush(w);
    if (n > SNAP_CHUNK) { /* a body bigger than the chunk: on its own */
        uint8_t *p = dq_malloc(n);
        if (!p) {
            sn->err = ENOMEM;
            return;
        }
        encode_at(p, r);
        if (!sn->err && write_all(sn->fd, p, n, sn->off) != 0) sn->err = errno;
        sn->off += n;
        dq_free(p);
        return;
    }
    sn->len += encode_at(sn->b + sn->len, r);
}

static void snap_name(void *ud, struct dq_str topic) {
    struct buf *b = ud;
    buf_append(b, topic.p, topic.len);
    buf_append(b, "", 1);
}

struct snap_step {
    struct wal *w;
    struct dq_str topic;
    uint64_t n;
};

static void snap_job(void *ud, const struct dq_job *j) {
    struct snap_step *st = ud;
    struct wal_rec r = {.type = WAL_JOB, .job = *j};
    snap_rec(st->w, &r);
    st->w->snap->jobs++;
    st->n++;
}

static void snap_far(void *ud, struct dq_str id, uint64_t ref) {
    struct snap_step *st = ud;
    struct wal_rec r = {.type = WAL_FAR, .ref = ref};
    r.job.topic = st->topic;
    r.job.id = id;
    snap_rec(st->w, &r);
    st->w->snap->jobs++;
    st->n++;
}

static void snap_free(struct wal *w) {
    struct snapper *sn = w->snap;
    if (!sn) return;
    if (sn->syncing) pthread_join(sn->sync_thread, NULL);
    if (sn->fd >= 0) close(sn->fd);
    dq_free(sn->b);
    dq_free(sn->names);
    dq_free(sn);
    w->snap = NULL;
}

static void snap_tmp_name(char *b, size_t n, uint64_t seq) {
    snprintf(b, n, "%08" PRIu64 ".snap.tmp", seq);
}

static void compact_failed(struct wal *w, int err, const char *what) {
    char tmp[64];
    log_warn("compaction failed (%s: %s); will retry", what, strerror(err));
    if (w->snap) {
        snap_tmp_name(tmp, sizeof tmp, w->snap->seq);
        snap_free(w);
        unlinkat(w->dirfd, tmp, 0);
    }
    w->compact_backoff = w->compact_backoff ? w->compact_backoff * 2 : 1000;
    if (w->compact_backoff > 60000) w->compact_backoff = 60000;
    w->next_compact = mono_ms() + w->compact_backoff;
}

/* Stops a compaction (the engine it reads is going away). */
static void compact_abort(struct wal *w) {
    char tmp[64];
    if (!w->snap) return;
    snap_tmp_name(tmp, sizeof tmp, w->snap->seq);
    snap_free(w);
    unlinkat(w->dirfd, tmp, 0);
}

/* The helper thread: makes the snapshot durable and current, then deletes
 * the files it covers. Every state on the way is one that recovery reads
 * correctly (the highest snapshot wins; segments it covers are ignored). */
static void *snap_sync_main(void *arg) {
    struct snapper *sn = arg;
    char tmp[64], name[64], old[64];
    struct stat st;
    snap_tmp_name(tmp, sizeof tmp, sn->seq);
    seg_name(name, sizeof name, sn->seq, "snap");
    if (wal_io.fdatasync(sn->fd) != 0 ||
        renameat(sn->dirfd, tmp, sn->dirfd, name) != 0) {
        atomic_store(&sn->sync_err, errno ? errno : EIO);
        atomic_store(&sn->synced, true);
        return NULL;
    }
    if (fsync(sn->dirfd) != 0)
        log_warn("compaction: fsync of the directory failed: %s",
                 strerror(errno));
    if (sn->old_snap) {
        seg_name(old, sizeof old, sn->old_snap, "snap");
        if (fstatat(sn->dirfd, old, &st, 0) == 0)
            sn->freed += (uint64_t)st.st_size;
        unlinkat(sn->dirfd, old, 0);
    }
    for (uint64_t q = sn->old_snap + 1; q <= sn->seq; q++) {
        seg_name(old, sizeof old, q, "log");
        if (fstatat(sn->dirfd, old, &st, 0) == 0) {
            sn->freed += (uint64_t)st.st_size;
            sn->freed_log += (uint64_t)st.st_size;
        }
        unlinkat(sn->dirfd, old, 0);
    }
    fsync(sn->dirfd);
    atomic_store(&sn->synced, true);
    return NULL;
}

/* The helper thread is done: the snapshot is in place. */
static void compact_installed(struct wal *w) {
    struct snapper *sn = w->snap;
    uint64_t seq = sn->seq, jobs = sn->jobs, freed = sn->freed;
    char name[64];
    seg_name(name, sizeof name, seq, "snap");
    w->log_bytes -= sn->freed_log < w->log_bytes ? sn->freed_log : w->log_bytes;
    w->snap_seq = seq;
    w->snap_bytes = sn->off;
    w->compactions++;
    w->compact_backoff = 0;
    w->next_compact = 0;
    w->last_compact_ms = mono_ms() - sn->start;
    snap_free(w);
    log_info("compaction done in %" PRId64 " ms: %s holds %" PRIu64
             " jobs in %" PRIu64 " bytes; %" PRIu64 " bytes freed",
             w->last_compact_ms, name, jobs, w->snap_bytes, freed);
}

/* One slice of work. Returns true while there is more. */
static bool compact_step(struct wal *w) {
    struct snapper *sn = w->snap;
    if (!sn) return false;
    if (sn->syncing) {
        if (!atomic_load(&sn->synced)) return true;
        pthread_join(sn->sync_thread, NULL);
        sn->syncing = false;
        int e = atomic_load(&sn->sync_err);
        if (e) compact_failed(w, e, "fdatasync or rename");
        else compact_installed(w);
        return false;
    }
    struct snap_step st = {.w = w};
    while (st.n < SNAP_SLICE && sn->at < sn->names_len && !sn->err) {
        const char *t = sn->names + sn->at;
        st.topic = (struct dq_str){t, strlen(t)};
        /* the jobs in RAM, then the far ones (jobs only move from far to
         * RAM, and every move is in the new segment anyway) */
        uint64_t next =
            sn->far ? engine_scan_far(sn->e, st.topic, SNAP_SCAN, sn->cursor,
                                      snap_far, &st)
                    : engine_scan(sn->e, st.topic, SNAP_SCAN, sn->cursor,
                                  snap_job, &st);
        sn->cursor = next;
        if (next == 0 && !sn->far) {
            sn->far = true;
        } else if (next == 0) {
            sn->far = false;
            sn->at += st.topic.len + 1;
        }
    }
    if (!sn->err && sn->at >= sn->names_len) {
        struct wal_rec r = {.type = WAL_COUNTERS, .counters = sn->counters};
        snap_rec(w, &r);
        r = (struct wal_rec){.type = WAL_SNAPEND, .count = sn->jobs};
        snap_rec(w, &r);
        snap_flush(w);
        if (!sn->err) {
            atomic_init(&sn->synced, false);
            atomic_init(&sn->sync_err, 0);
            sn->dirfd = w->dirfd;
            sn->old_snap = w->snap_seq;
            if (pthread_create(&sn->sync_thread, NULL, snap_sync_main, sn)) {
                compact_failed(w, EAGAIN, "thread");
                return false;
            }
            sn->syncing = true;
            return true;
        }
    }
    if (sn->err) {
        compact_failed(w, sn->err, "write");
        return false;
    }
    return true;
}

static int64_t mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void snap_cb(evutil_socket_t fd, short what, void *arg) {
    struct wal *w = arg;
    (void)fd;
    (void)what;
    int64_t t0 = mono_us();
    bool more = compact_step(w);
    int64_t took = mono_us() - t0;
    if (took > w->max_step_us) w->max_step_us = took;
    if (more) {
        /* after the I/O that the next poll finds */
        struct timeval tv = {0, w->snap && w->snap->syncing ? 1000 : 0};
        event_add(w->snap_ev, &tv);
    }
}

/* Closes the current segment and starts the next one. */
static int rotate(struct wal *w) {
    int fd = create_segment(w, w->seg + 1);
    if (fd < 0) return -1;
    int old = w->fd;
    w->fd = fd;
    w->seg++;
    w->off = WAL_HEADER_SIZE;
    w->log_bytes += WAL_HEADER_SIZE;
    sync_handover(w); /* the thread syncs and closes its copy of the old */
    close(old);
    return 0;
}

static int start_compaction(struct wal *w, const struct engine *e);

int wal_maybe_compact(struct wal *w, const struct engine *e, bool force) {
    if (!w || w->snap || w->broken || w->len > 0) return 0;
    int64_t now = mono_ms();
    if (!force) {
        uint64_t min = w->cfg.compact_min ? w->cfg.compact_min
                                          : WAL_COMPACT_MIN_DEFAULT;
        if (w->log_bytes < min || w->log_bytes < w->snap_bytes) return 0;
        /* Only when dead records dominate: a log that is mostly live jobs
         * (a stream of ADDs) would be rewritten for nothing. */
        uint64_t nfar = engine_far_count(e);
        uint64_t live =
            (w->job_recs ? (engine_count(e) - nfar) *
                               (w->job_bytes / w->job_recs)
                         : 0) +
            (w->far_recs ? nfar * (w->far_bytes / w->far_recs) : 0);
        if (w->snap_bytes + w->log_bytes < 2 * live) return 0;
        if (now < w->next_compact) return 0;
    }
    int64_t t0 = mono_us();
    int rc = start_compaction(w, e);
    int64_t took = mono_us() - t0;
    if (took > w->max_step_us) w->max_step_us = took;
    return rc;
}

static int start_compaction(struct wal *w, const struct engine *e) {
    int64_t now = mono_ms();
    struct snapper *sn = dq_calloc(1, sizeof *sn);
    struct buf names = BUF_INIT;
    char tmp[64];
    if (!sn || !(sn->b = dq_malloc(SNAP_CHUNK))) {
        dq_free(sn);
        compact_failed(w, ENOMEM, "start");
        return -1;
    }
    sn->fd = -1;
    w->snap = sn;
    uint64_t seq = w->seg;
    if (rotate(w) != 0) {
        compact_failed(w, errno, "new segment");
        return -1;
    }
    sn->seq = seq;
    sn->e = e;
    sn->start = now;
    snap_tmp_name(tmp, sizeof tmp, seq);
    sn->fd = openat(w->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                    0644);
    if (sn->fd < 0) {
        compact_failed(w, errno, tmp);
        return -1;
    }
    header_at(sn->b, WAL_KIND_SNAPSHOT, seq);
    sn->len = WAL_HEADER_SIZE;
    engine_stats(e, (struct dq_str){NULL, 0}, &sn->counters);
    engine_topics(e, snap_name, &names);
    sn->names = names.p; /* (a buf's memory is a dq_malloc block) */
    sn->names_len = names.len;
    sn->active = true;
    if (w->snap_ev) {
        struct timeval tv = {0, 0};
        event_add(w->snap_ev, &tv);
    }
    log_info("compaction started: snapshot %08" PRIu64 ".snap of %" PRIu64
             " jobs (%" PRIu64 " bytes of log since the last one)",
             seq, engine_count(e), w->log_bytes);
    return 1;
}

bool wal_compacting(const struct wal *w) { return w && w->snap; }

/* --- the writer ----------------------------------------------------------- */

static int64_t probe_ms(const struct wal *w) {
    return w->cfg.probe_ms ? w->cfg.probe_ms : PROBE_MS;
}

static void go_broken(struct wal *w, int err, const char *what) {
    w->last_err = err;
    if (!w->broken)
        log_error("log %s failed: %s; refusing changes until the disk "
                  "accepts writes again",
                  what, strerror(err));
    w->broken = true;
    w->next_probe = mono_ms() + probe_ms(w);
}

/* Takes back a failed commit: cuts the file to the last good end. */
static void cut_back(struct wal *w) {
    if (wal_io.ftruncate(w->fd, (off_t)w->off) != 0)
        log_error("cannot cut the log back to offset %" PRIu64 ": %s",
                  w->off, strerror(errno));
    else if (w->cfg.fsync_mode != DQ_FSYNC_NO)
        (void)wal_io.fdatasync(w->fd);
}

static void check_sync_thread(struct wal *w) {
    if (!w->sync.running) return;
    int e = atomic_exchange(&w->sync.err, 0);
    if (e) go_broken(w, e, "background fdatasync");
}

void wal_append(struct wal *w, const struct wal_rec *r) {
    size_t n = WAL_REC_HEADER + rec_size(r);
    if (w->nomem || n == WAL_REC_HEADER) return;
    if (w->cap - w->len < n) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap - w->len < n) cap *= 2;
        uint8_t *p = dq_realloc(w->out, cap);
        if (!p) {
            w->nomem = true;
            return;
        }
        w->out = p;
        w->cap = cap;
    }
    if (r->type == WAL_JOB || r->type == WAL_LOAD) {
        w->job_bytes += n;
        w->job_recs++;
    } else if (r->type == WAL_FAR || r->type == WAL_MOVE) {
        w->far_bytes += n;
        w->far_recs++;
    }
    w->len += encode_at(w->out + w->len, r);
}

bool wal_pending(const struct wal *w) { return w->len > 0 || w->nomem; }

static void drop_batch(struct wal *w) {
    w->len = 0;
    if (w->cap > (1u << 20)) {
        dq_free(w->out);
        w->out = NULL;
        w->cap = 0;
    }
}

int wal_commit(struct wal *w) {
    if (w->nomem) {
        w->nomem = false;
        w->last_err = ENOMEM;
        log_error("out of memory buffering log records: the batch fails");
        drop_batch(w);
        return -1;
    }
    if (w->len == 0 || w->broken) {
        check_sync_thread(w);
        return 0;
    }
    if (write_all(w->fd, w->out, w->len, w->off) != 0) {
        int e = errno;
        cut_back(w);
        drop_batch(w);
        go_broken(w, e, "write");
        return -1;
    }
    if (w->cfg.fsync_mode == DQ_FSYNC_ALWAYS && wal_io.fdatasync(w->fd) != 0) {
        int e = errno;
        cut_back(w);
        drop_batch(w);
        go_broken(w, e, "fdatasync");
        return -1;
    }
    w->off += w->len;
    w->log_bytes += w->len;
    atomic_fetch_add(&w->sync.written, 1);
    w->len = 0;
    if (w->cap > (4u << 20)) drop_batch(w);
    /* a failed background sync breaks the log for what comes next */
    check_sync_thread(w);
    return 0;
}

void wal_fail_batch(struct wal *w, int err) {
    w->nomem = false;
    drop_batch(w);
    go_broken(w, err, "far segment write");
}

uint64_t wal_commit_mark(const struct wal *w) {
    return atomic_load(&w->sync.written);
}

bool wal_durable(const struct wal *w, uint64_t mark) {
    if (w->cfg.fsync_mode != DQ_FSYNC_EVERYSEC || !w->sync.running)
        return true; /* always: synced by the commit; no: never promised */
    return atomic_load(&w->sync.synced) >= mark;
}

bool wal_writable(const struct wal *w) { return !w->broken; }

int wal_last_error(const struct wal *w) { return w->last_err; }

/* Tries the disk: writes what waits (or a block of zeros that it then cuts
 * off) and syncs. */
static bool probe(struct wal *w) {
    static const uint8_t zeros[4096];
    if (wal_io.ftruncate(w->fd, (off_t)w->off) != 0) goto fail;
    if (w->len > 0) {
        if (write_all(w->fd, w->out, w->len, w->off) != 0 ||
            wal_io.fdatasync(w->fd) != 0)
            goto fail;
        w->off += w->len;
        w->log_bytes += w->len;
        w->len = 0;
    } else {
        if (write_all(w->fd, zeros, sizeof zeros, w->off) != 0 ||
            wal_io.fdatasync(w->fd) != 0 ||
            wal_io.ftruncate(w->fd, (off_t)w->off) != 0 ||
            wal_io.fdatasync(w->fd) != 0)
            goto fail;
    }
    w->broken = false;
    w->last_err = 0;
    log_info("the log is writable again");
    return true;
fail:
    w->last_err = errno;
    (void)wal_io.ftruncate(w->fd, (off_t)w->off);
    w->next_probe = mono_ms() + probe_ms(w);
    return false;
}

bool wal_tick(struct wal *w) {
    if (!w) return false;
    if (!w->cfg.base) compact_step(w);
    check_sync_thread(w);
    if (w->broken && mono_ms() >= w->next_probe) return probe(w);
    return false;
}

void wal_on_writable(struct wal *w, void (*fn)(void *ud), void *ud) {
    w->on_writable = fn;
    w->on_writable_ud = ud;
}

static void tick_cb(evutil_socket_t fd, short what, void *arg) {
    struct wal *w = arg;
    (void)fd;
    (void)what;
    if (wal_tick(w) && w->on_writable) w->on_writable(w->on_writable_ud);
}

int wal_reload(struct wal *w, struct engine *e, int64_t now, char *err,
               size_t errlen) {
    struct wal_recovery info;
    uint64_t log_bytes = w->log_bytes;
    compact_abort(w); /* it reads the engine being replaced */
    int rc = recover(w, e, now, false, &info, err, errlen);
    w->log_bytes = log_bytes;
    if (rc == 0)
        log_info("engine reloaded from the log: %" PRIu64 " jobs in %" PRId64
                 " ms",
                 info.jobs, info.ms);
    return rc;
}

/* --- open and close ------------------------------------------------------- */

int wal_open(struct wal **out, const struct wal_config *cfg, struct engine *e,
             int64_t now, struct wal_recovery *rec, char *err,
             size_t errlen) {
    struct wal_recovery dummy;
    if (!rec) rec = &dummy;
    struct wal *w = dq_calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    w->cfg = *cfg;
    w->dirfd = w->lockfd = w->fd = -1;
    w->dir = dq_malloc(strlen(cfg->dir) + 1);
    if (!w->dir) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    strcpy(w->dir, cfg->dir);
    if (mkdir(w->dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create data directory %s: %s", w->dir,
                 strerror(errno));
        goto fail;
    }
    w->dirfd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (w->dirfd < 0) {
        snprintf(err, errlen, "cannot open data directory %s: %s", w->dir,
                 strerror(errno));
        goto fail;
    }
    w->lockfd = openat(w->dirfd, "LOCK", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (w->lockfd < 0 || flock(w->lockfd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(err, errlen,
                 errno == EWOULDBLOCK
                     ? "data directory %s is in use by another delayqd"
                     : "cannot lock data directory %s: %s",
                 w->dir, strerror(errno));
        goto fail;
    }
    fault_arm_from_env();
    if (recover(w, e, now, true, rec, err, errlen) != 0) goto fail;
    if (cfg->fsync_mode == DQ_FSYNC_EVERYSEC && sync_start(w) != 0) {
        snprintf(err, errlen, "cannot start the log sync thread");
        goto fail;
    }
    if (cfg->base) {
        w->tick_ev = event_new(cfg->base, -1, EV_PERSIST, tick_cb, w);
        w->snap_ev = evtimer_new(cfg->base, snap_cb, w);
        struct timeval tv = {1, 0};
        if (!w->tick_ev || !w->snap_ev || event_add(w->tick_ev, &tv) != 0) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
    }
    log_info("log %s: %" PRIu64 " jobs from %" PRIu64 " records (%" PRIu64
             " bytes) in %" PRId64 " ms",
             w->dir, rec->jobs, rec->records, rec->bytes, rec->ms);
    *out = w;
    return 0;
fail:
    wal_close(w);
    return -1;
}

void wal_close(struct wal *w) {
    if (!w) return;
    if (w->fd >= 0) {
        if (w->len > 0 && !w->broken) wal_commit(w);
        if (!w->broken && wal_io.fdatasync(w->fd) != 0)
            log_error("final fdatasync of the log failed: %s",
                      strerror(errno));
    }
    sync_stop(w);
    compact_abort(w);
    if (w->tick_ev) event_free(w->tick_ev);
    if (w->snap_ev) event_free(w->snap_ev);
    if (w->fd >= 0) close(w->fd);
    if (w->lockfd >= 0) close(w->lockfd);
    if (w->dirfd >= 0) close(w->dirfd);
    dq_free(w->out);
    dq_free(w->dir);
    dq_free(w);
}

void wal_info(const struct wal *w,
              void (*emit)(void *ud, const char *name, const char *value),
              void *ud) {
    static const char *const modes[] = {"always", "everysec", "no"};
    char v[64];
    int m = w->cfg.fsync_mode;
    emit(ud, "log_fsync", m >= 0 && m <= 2 ? modes[m] : "?");
    snprintf(v, sizeof v, "%08" PRIu64 ".log", w->seg);
    emit(ud, "log_segment", v);
    dq_info_int(emit, ud, "log_bytes", (int64_t)(w->log_bytes));
    dq_info_int(emit, ud, "log_snapshot_bytes", (int64_t)(w->snap_bytes));
    dq_info_int(emit, ud, "log_compactions", (int64_t)(w->compactions));
    emit(ud, "log_compacting", w->snap ? "1" : "0");
    dq_info_int(emit, ud, "log_last_compaction_ms", (int64_t)(w->last_compact_ms));
    dq_info_int(emit, ud, "log_compaction_max_step_us", (int64_t)(w->max_step_us));
    emit(ud, "log_writable", w->broken ? "0" : "1");
    emit(ud, "log_last_error", w->last_err ? strerror(w->last_err) : "");
}
