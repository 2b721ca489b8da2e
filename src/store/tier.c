/* tier.c -- far segments (see tier.h).
 *
 * A segment is a log file of kind 3 (WAL_KIND_FAR, header sequence = the
 * start of its window in unix ms) holding JOB records back to back. Its
 * slot number (the file name) is the top 16 bits of the refs that point
 * into it, so a slot is reused only after its file is gone.
 *
 * States: FAR (jobs only reach it by tier_place, while its window is not
 * open, and only in the run that created it), LOADING (its window opened:
 * its records are being read into the engine), LOADED (read to the end:
 * deleted once the log is durable), KEPT (loaded, but records that jobs
 * point to could not be read: kept for inspection, never written again).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/htab.h"
#include "lib/log.h"
#include "lib/xalloc.h"
#include "store/store.h"
#include "store/tier.h"
#include "store/wal.h"
#include "store/tier_int.h"

static int64_t window_ms(const struct tier *t) {
    return t->cfg.horizon_ms > 0 ? t->cfg.horizon_ms : 3600000;
}

static int64_t window_of(const struct tier *t, int64_t due) {
    int64_t w = window_ms(t);
    return due / w * w;
}

static uint64_t start_hash(int64_t start) {
    return htab_hash_bytes(&start, sizeof start);
}

static uint64_t seg_rehash(const struct hnode *n) {
    const struct seg *s = (const struct seg *)n;
    return start_hash(s->start);
}

static void seg_name(char *b, size_t n, uint32_t slot) {
    snprintf(b, n, "%05" PRIu32 ".far", slot);
}

/* --- the sync thread (everysec) ------------------------------------------ */

static void *sync_main(void *arg) {
    struct syncq *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->n == 0 && !q->stop) pthread_cond_wait(&q->cv, &q->mu);
        if (q->n == 0) break; /* stopping, nothing left */
        int *fds = q->fds;
        size_t n = q->n;
        uint64_t round = q->queued;
        q->fds = NULL;
        q->n = q->cap = 0;
        pthread_mutex_unlock(&q->mu);
        for (size_t i = 0; i < n; i++) {
            if (fdatasync(fds[i]) != 0)
                log_error("fdatasync of a far segment failed: %s",
                          strerror(errno));
            close(fds[i]);
        }
        dq_free(fds);
        atomic_store(&q->done, round);
        pthread_mutex_lock(&q->mu);
        if (!q->stop) { /* at most one round of syncs a second */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += SYNC_MS / 1000;
            pthread_cond_timedwait(&q->cv, &q->mu, &ts);
        }
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static void sync_later(struct tier *t, int fd) {
    struct syncq *q = &t->sync;
    int d = dup(fd);
    if (d < 0) return;
    pthread_mutex_lock(&q->mu);
    for (size_t i = 0; i < q->n; i++) {
        struct stat a, b;
        if (fstat(q->fds[i], &a) == 0 && fstat(d, &b) == 0 &&
            a.st_ino == b.st_ino) { /* already queued */
            q->queued++;
            pthread_mutex_unlock(&q->mu);
            close(d);
            return;
        }
    }
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 16;
        int *p = dq_realloc(q->fds, cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&q->mu);
            close(d);
            return;
        }
        q->fds = p;
        q->cap = cap;
    }
    q->fds[q->n++] = d;
    q->queued++;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

/* --- segments -------------------------------------------------------------- */

static void seg_unmap(struct seg *s) {
    if (s->map) munmap((void *)s->map, s->maplen);
    s->map = NULL;
    s->maplen = 0;
}

static void seg_forget(struct tier *t, struct seg *s) {
    if (s->writable) htab_remove(&t->open, &s->hnode, start_hash(s->start));
    seg_unmap(s);
    if (s->fd >= 0) close(s->fd);
    buf_free(&s->pend);
    t->slot[s->slot] = NULL;
    t->segs[s->idx] = t->segs[--t->nsegs];
    t->segs[s->idx]->idx = s->idx;
    if (t->last == s) t->last = NULL;
    dq_free(s);
}

static struct seg *seg_add(struct tier *t, uint32_t slot, int64_t start,
                           int fd, uint64_t size) {
    if (t->nsegs == t->segs_cap) {
        size_t cap = t->segs_cap ? t->segs_cap * 2 : 64;
        struct seg **p = dq_realloc(t->segs, cap * sizeof *p);
        if (!p) return NULL;
        t->segs = p;
        t->segs_cap = cap;
    }
    struct seg *s = dq_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->slot = slot;
    s->start = start;
    s->fd = fd;
    s->size = size;
    s->idx = t->nsegs;
    t->segs[t->nsegs++] = s;
    t->slot[slot] = s;
    t->bytes += size;
    return s;
}

/* A new writable segment for the window at `start`, or NULL. */
static struct seg *seg_create(struct tier *t, int64_t start) {
    uint32_t slot = SLOTS;
    for (uint32_t k = 0; k < SLOTS; k++) {
        uint32_t c = (t->next_slot + k) % SLOTS;
        if (!t->slot[c]) {
            slot = c;
            break;
        }
    }
    if (slot == SLOTS) return NULL;
    char name[32];
    seg_name(name, sizeof name, slot);
    int fd = openat(t->dirfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC,
                    0644);
    if (fd < 0) {
        log_error("cannot create far segment %s/%s: %s", t->path, name,
                  strerror(errno));
        return NULL;
    }
    struct seg *s = seg_add(t, slot, start, fd, 0);
    if (!s) {
        close(fd);
        unlinkat(t->dirfd, name, 0);
        return NULL;
    }
    /* the header goes out with the first records */
    wal_encode_header(&s->pend, WAL_KIND_FAR, (uint64_t)start);
    s->writable = true;
    t->created = true;
    htab_insert(&t->open, &s->hnode, start_hash(start));
    t->next_slot = (slot + 1) % SLOTS;
    return s;
}

static struct seg *seg_for(struct tier *t, int64_t start) {
    uint64_t h = start_hash(start);
    for (struct hnode *n = htab_bucket(&t->open, h); n; n = n->next) {
        struct seg *s = (struct seg *)n;
        if (s->start == start) return s;
    }
    return NULL;
}

/* The segment stops taking records (its window opened, or it is full). */
static void seg_close_window(struct tier *t, struct seg *s) {
    if (!s->writable) return;
    htab_remove(&t->open, &s->hnode, start_hash(s->start));
    s->writable = false;
}

/* --- open and close -------------------------------------------------------- */

static int read_header(struct tier *t, const char *name, uint32_t slot,
                       char *err, size_t errlen) {
    int fd = openat(t->dirfd, name, O_RDWR | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "cannot open far segment %s/%s: %s", t->path,
                 name, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    uint8_t h[WAL_HEADER_SIZE];
    ssize_t n = pread(fd, h, sizeof h, 0);
    struct wal_scan sc;
    wal_scan(h, n > 0 ? (size_t)n : 0, NULL, NULL, &sc);
    if (n != WAL_HEADER_SIZE || sc.end == WAL_END_BADHEADER ||
        sc.kind != WAL_KIND_FAR) {
        if (n >= 0 && (size_t)n < sizeof h &&
            (n == 0 || sc.end == WAL_END_TORN)) {
            /* created, header never written: it holds no job (its slot is
             * free: the file is overwritten when the slot is used again) */
            log_warn("far segment %s/%s has no complete header (a crash "
                     "while creating it): ignored",
                     t->path, name);
            close(fd);
            return 0;
        }
        snprintf(err, errlen,
                 "far segment %s/%s at offset 0: %s", t->path, name,
                 sc.end == WAL_END_BADHEADER ? sc.why : "not a far segment");
        close(fd);
        return -1;
    }
    struct seg *s = seg_add(t, slot, (int64_t)sc.seq, fd, (uint64_t)st.st_size);
    if (!s) {
        close(fd);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* records: estimated from the size of the first one */
    uint8_t rh[WAL_REC_HEADER];
    if (s->size > WAL_HEADER_SIZE + WAL_REC_HEADER &&
        pread(fd, rh, sizeof rh, WAL_HEADER_SIZE) == (ssize_t)sizeof rh) {
        uint64_t rl = (uint64_t)rh[4] | (uint64_t)rh[5] << 8 |
                      (uint64_t)rh[6] << 16 | (uint64_t)rh[7] << 24;
        if (rl > 0 && rl <= WAL_REC_MAX)
            s->recs = (s->size - WAL_HEADER_SIZE) / (WAL_REC_HEADER + rl);
    }
    return 0;
}

uint32_t tr_parse_slot(const char *name) {
    size_t n = strlen(name);
    if (n != 9 || strcmp(name + 5, ".far") != 0) return SLOTS;
    uint32_t v = 0;
    for (int i = 0; i < 5; i++) {
        if (name[i] < '0' || name[i] > '9') return SLOTS;
        v = v * 10 + (uint32_t)(name[i] - '0');
    }
    return v < SLOTS ? v : SLOTS;
}

int tier_open(struct tier **out, const struct tier_config *cfg, char *err,
              size_t errlen) {
    *out = NULL;
    size_t pl = strlen(cfg->dir) + sizeof "/" TIER_DIR;
    char *path = dq_malloc(pl);
    if (!path) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(path, pl, "%s/%s", cfg->dir, TIER_DIR);
    if (cfg->horizon_ms > 0 && mkdir(cfg->dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create %s: %s", cfg->dir,
                 strerror(errno));
        dq_free(path);
        return -1;
    }
    if (cfg->horizon_ms > 0 && mkdir(path, 0755) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
        dq_free(path);
        return -1;
    }
    int dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        if (errno == ENOENT && cfg->horizon_ms == 0) {
            dq_free(path);
            return 0; /* nothing far, and nothing will be */
        }
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        dq_free(path);
        return -1;
    }
    struct tier *t = dq_calloc(1, sizeof *t);
    if (!t || !(t->slot = dq_calloc(SLOTS, sizeof *t->slot)) ||
        htab_init(&t->open, 16, seg_rehash) != 0) {
        if (t) dq_free(t->slot);
        dq_free(t);
        dq_free(path);
        close(dirfd);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    t->cfg = *cfg;
    t->path = path;
    t->dirfd = dirfd;
    t->opened = INT64_MIN;
    int dfd = dup(dirfd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        if (dfd >= 0) close(dfd);
        snprintf(err, errlen, "cannot list %s: %s", path, strerror(errno));
        tier_close(t);
        return -1;
    }
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(d))) {
        uint32_t slot = tr_parse_slot(de->d_name);
        if (slot < SLOTS) rc = read_header(t, de->d_name, slot, err, errlen);
    }
    closedir(d);
    if (rc != 0) {
        tier_close(t);
        return -1;
    }
    pthread_mutex_init(&t->sync.mu, NULL);
    pthread_cond_init(&t->sync.cv, NULL);
    if (cfg->fsync_mode == DQ_FSYNC_EVERYSEC) {
        if (pthread_create(&t->sync.thread, NULL, sync_main, &t->sync) != 0) {
            snprintf(err, errlen, "cannot start the far segment sync thread");
            tier_close(t);
            return -1;
        }
        t->sync.running = true;
    }
    if (t->nsegs)
        log_info("far segments: %zu in %s (%" PRIu64 " bytes)", t->nsegs,
                 path, t->bytes);
    *out = t;
    return 0;
}

void tier_close(struct tier *t) {
    if (!t) return;
    tr_check_stop(t);
    dq_free(t->check.d);
    if (t->sync.running) {
        pthread_mutex_lock(&t->sync.mu);
        t->sync.stop = true;
        pthread_cond_signal(&t->sync.cv);
        pthread_mutex_unlock(&t->sync.mu);
        pthread_join(t->sync.thread, NULL);
        pthread_mutex_destroy(&t->sync.mu);
        pthread_cond_destroy(&t->sync.cv);
    }
    for (size_t i = 0; i < t->nsegs; i++) {
        struct seg *s = t->segs[i];
        if (s->dirty && s->fd >= 0) fdatasync(s->fd);
        seg_unmap(s);
        if (s->fd >= 0) close(s->fd);
        buf_free(&s->pend);
        dq_free(s);
    }
    dq_free(t->segs);
    dq_free(t->slot);
    htab_destroy(&t->open);
    if (t->dirfd >= 0) close(t->dirfd);
    dq_free(t->path);
    dq_free(t);
}

/* --- writing --------------------------------------------------------------- */

bool tier_far(const struct tier *t, int64_t now, int64_t due) {
    if (!t || t->cfg.horizon_ms <= 0) return false;
    int64_t start = window_of(t, due);
    return start > now + t->cfg.horizon_ms && start > t->opened;
}

int tier_place(struct tier *t, const struct dq_job *j, uint64_t *ref) {
    struct wal_rec r = {.type = WAL_JOB, .job = *j};
    r.job.state = DQ_DELAYED;
    r.job.deadline = 0;
    int64_t start = window_of(t, j->due);
    struct seg *s = seg_for(t, start);
    struct buf tmp = BUF_INIT;
    size_t n = wal_encode(&tmp, &r);
    if (s && s->size + s->pend.len + n > SEG_MAX) {
        seg_close_window(t, s);
        s = NULL;
    }
    if (!s && !(s = seg_create(t, start))) {
        buf_free(&tmp);
        return -1;
    }
    if (s->size + s->pend.len + n > SEG_MAX) { /* one job alone too big */
        buf_free(&tmp);
        return -1;
    }
    *ref = (uint64_t)s->slot << 32 | (s->size + s->pend.len);
    t->last = s;
    t->last_len = s->pend.len;
    buf_append(&s->pend, tmp.p, n);
    buf_free(&tmp);
    s->live++;
    s->recs++;
    s->dirty = true;
    return 0;
}

void tier_unplace(struct tier *t) {
    struct seg *s = t->last;
    if (!s) return;
    s->pend.len = t->last_len;
    s->live--;
    s->recs--;
    t->last = NULL;
}

int tr_write_all(int fd, const void *p, size_t n, uint64_t off) {
    const char *c = p;
    while (n) {
        ssize_t w = wal_io.pwrite(fd, c, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        c += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

int tier_write(struct tier *t) {
    if (!t) return 0;
    t->last = NULL;
    int rc = 0, err = 0;
    for (size_t i = 0; i < t->nsegs; i++) {
        struct seg *s = t->segs[i];
        if (s->pend.len == 0) continue;
        if (rc == 0 && tr_write_all(s->fd, s->pend.p, s->pend.len, s->size) == 0 &&
            (t->cfg.fsync_mode != DQ_FSYNC_ALWAYS ||
             wal_io.fdatasync(s->fd) == 0)) {
            s->size += s->pend.len;
            t->bytes += s->pend.len;
            if (t->cfg.fsync_mode == DQ_FSYNC_EVERYSEC) sync_later(t, s->fd);
        } else {
            if (rc == 0) err = errno;
            rc = -1;
            /* cut back: what was written of this batch is no job's */
            if (wal_io.ftruncate(s->fd, (off_t)s->size) != 0)
                log_error("cannot cut far segment %05" PRIu32
                          " back: %s", s->slot, strerror(errno));
        }
        buf_reset(&s->pend, 1 << 16);
    }
    if (rc) errno = err; /* the store recounts (tier_recount) */
    return rc;
}

static void compact_abort(struct tier *t);
static bool compact_step(struct tier *t, int64_t now, uint32_t budget,
                         int (*move)(void *ud, const struct dq_job *j,
                                     uint64_t from),
                         void *ud);

void tier_rewind(struct tier *t) {
    if (!t) return;
    t->last = NULL;
    compact_abort(t);
    for (size_t i = 0; i < t->nsegs; i++) {
        struct seg *s = t->segs[i];
        buf_reset(&s->pend, 1 << 16);
        if (s->size == 0 && s->writable) /* header not written yet */
            wal_encode_header(&s->pend, WAL_KIND_FAR, (uint64_t)s->start);
        if (s->state == SEG_LOADING) s->at = WAL_HEADER_SIZE;
        if (s->state == SEG_LOADED || s->state == SEG_SYNCING) {
            s->state = SEG_LOADING; /* its LOAD records may be lost */
            s->at = WAL_HEADER_SIZE;
        }
    }
}

void tier_drop(struct tier *t, uint64_t ref) {
    if (!t) return;
    struct seg *s = t->slot[ref >> 32 & (SLOTS - 1)];
    if (s && s->live) s->live--;
    if (s && s->state == SEG_FAR && s->size >= COMPACT_MIN &&
        s->live * COMPACT_LIVE < s->recs)
        t->compact_check = true;
}

void tier_recount_begin(struct tier *t) {
    for (size_t i = 0; t && i < t->nsegs; i++)
        t->segs[i]->live = t->segs[i]->last_ref = 0;
}

void tier_recount(struct tier *t, uint64_t ref) {
    struct seg *s = t ? t->slot[ref >> 32 & (SLOTS - 1)] : NULL;
    if (!s) return;
    s->live++;
    if ((ref & UINT32_MAX) > s->last_ref) s->last_ref = ref & UINT32_MAX;
}

void tier_recount_end(struct tier *t) {
    for (size_t i = 0; t && i < t->nsegs; i++) {
        struct seg *s = t->segs[i];
        if (s->recs < s->live) s->recs = s->live;
        if (s->state == SEG_FAR && s->size >= COMPACT_MIN &&
            s->live * COMPACT_LIVE < s->recs)
            t->compact_check = true;
    }
}

/* --- reading --------------------------------------------------------------- */

int tier_read(struct tier *t, uint64_t ref, struct dq_str topic,
              struct dq_str id, struct buf *scratch, struct dq_job *out) {
    struct seg *s = t ? t->slot[ref >> 32 & (SLOTS - 1)] : NULL;
    uint64_t off = ref & UINT32_MAX;
    if (!s) {
        log_error("far job %.*s/%.*s: its segment %05" PRIu64 " is gone",
                  (int)topic.len, topic.p, (int)id.len, id.p, ref >> 32);
        return 0;
    }
    uint8_t h[WAL_REC_HEADER];
    const uint8_t *rec = NULL;
    size_t len = 0;
    if (off + WAL_REC_HEADER <= s->size) {
        if (pread(s->fd, h, sizeof h, (off_t)off) == (ssize_t)sizeof h) {
            uint32_t rl = (uint32_t)h[4] | (uint32_t)h[5] << 8 |
                          (uint32_t)h[6] << 16 | (uint32_t)h[7] << 24;
            len = WAL_REC_HEADER + (size_t)rl;
            if (rl <= WAL_REC_MAX && off + len <= s->size) {
                buf_reset(scratch, 1 << 20);
                char *p = buf_reserve(scratch, len);
                if (pread(s->fd, p, len, (off_t)off) == (ssize_t)len)
                    rec = (const uint8_t *)p;
            }
        }
    } else if (off >= s->size && off - s->size + WAL_REC_HEADER <=
                                     s->pend.len) {
        /* placed in this loop turn, not yet written */
        rec = (const uint8_t *)s->pend.p + (off - s->size);
        len = s->pend.len - (off - s->size);
    }
    struct wal_rec r;
    if (!rec || wal_decode(rec, len, &r) == 0 || r.type != WAL_JOB ||
        r.job.topic.len != topic.len || r.job.id.len != id.len ||
        memcmp(r.job.topic.p, topic.p, topic.len) != 0 ||
        memcmp(r.job.id.p, id.p, id.len) != 0) {
        log_error("far job %.*s/%.*s: no valid record at %s/%05" PRIu64
                  ".far offset %" PRIu64,
                  (int)topic.len, topic.p, (int)id.len, id.p, t->path,
                  ref >> 32, off);
        return 0;
    }
    *out = r.job;
    out->topic = topic;
    out->id = id;
    return 1;
}

/* --- loading --------------------------------------------------------------- */

int64_t tier_load_at(const struct tier *t, int64_t now) {
    if (!t) return INT64_MAX;
    if (t->compacting || t->compact_check) return now;
    int64_t at = INT64_MAX;
    for (size_t i = 0; i < t->nsegs; i++) {
        const struct seg *s = t->segs[i];
        int64_t when;
        if (s->state == SEG_LOADING) return now;
        if (s->state != SEG_FAR) continue;
        if (t->cfg.horizon_ms <= 0) return now; /* tiering off: load all */
        when = s->start - t->cfg.horizon_ms;
        if (s->pend.len && when <= now) when = now + 1; /* after its write */
        if (when < at) at = when;
    }
    return at;
}

struct load_ctx {
    struct tier *t;
    struct seg *s;
    uint32_t budget, n;
    int (*load)(void *ud, const struct dq_job *j, uint64_t ref);
    void *ud;
};

static int load_rec(void *ud, const struct wal_rec *r, uint64_t off) {
    struct load_ctx *c = ud;
    if (c->n == c->budget) return 1;
    c->n++;
    if (r->type != WAL_JOB) return 0;
    if (c->load(c->ud, &r->job, (uint64_t)c->s->slot << 32 | off) == 1 &&
        c->s->live)
        c->s->live--;
    c->t->load_records++;
    return 0;
}

static bool seg_start_loading(struct tier *t, struct seg *s) {
    seg_close_window(t, s);
    if (s->start > t->opened) t->opened = s->start;
    s->state = SEG_LOADING;
    s->at = WAL_HEADER_SIZE;
    if (s->size <= WAL_HEADER_SIZE) return true;
    void *m = mmap(NULL, s->size, PROT_READ, MAP_PRIVATE, s->fd, 0);
    if (m == MAP_FAILED) {
        log_error("cannot map far segment %s/%05" PRIu32 ".far: %s (will "
                  "retry)",
                  t->path, s->slot, strerror(errno));
        s->state = SEG_FAR;
        return false;
    }
    madvise(m, s->size, MADV_SEQUENTIAL);
    s->map = m;
    s->maplen = s->size;
    return true;
}

/* One segment's step. Returns true when it is read to its end. */
static bool seg_load(struct tier *t, struct seg *s, struct load_ctx *c) {
    if (!s->map) return true;
    struct wal_scan sc;
    c->s = s;
    if (wal_scan_at(s->map, s->maplen, s->at, load_rec, c, &sc) != 0) {
        s->at = sc.good; /* the budget ran out before this record */
        return false;
    }
    switch (sc.end) {
    case WAL_END_CLEAN:
        break;
    case WAL_END_TORN:
        log_warn("far segment %s/%05" PRIu32 ".far: torn tail at offset "
                 "%" PRIu64 " (%" PRIu64 " bytes, %s): ignored",
                 t->path, s->slot, sc.good, (uint64_t)s->maplen - sc.good,
                 sc.why);
        break;
    default:
        log_error("far segment %s/%05" PRIu32 ".far is damaged at offset "
                  "%" PRIu64 ": %s",
                  t->path, s->slot, sc.good, sc.why);
        if (sc.end == WAL_END_CORRUPT && sc.next_valid > sc.good) {
            s->at = sc.next_valid; /* read on after the damage */
            return false;
        }
        break;
    }
    s->at = s->maplen;
    return true;
}

bool tier_load_step(struct tier *t, int64_t now, uint32_t budget,
                    int (*load)(void *ud, const struct dq_job *j,
                                uint64_t ref),
                    int (*move)(void *ud, const struct dq_job *j,
                                uint64_t from),
                    void *ud) {
    if (!t) return false;
    struct load_ctx c = {t, NULL, budget, 0, load, ud};
    if (t->compacting && t->compacting->start - t->cfg.horizon_ms <= now &&
        t->cfg.horizon_ms > 0)
        compact_abort(t); /* its window opened: load it instead */
    for (;;) {
        struct seg *best = NULL;
        for (size_t i = 0; i < t->nsegs; i++) {
            struct seg *s = t->segs[i];
            bool open = s->state == SEG_LOADING ||
                        (s->state == SEG_FAR && s->pend.len == 0 &&
                         (t->cfg.horizon_ms <= 0 ||
                          s->start - t->cfg.horizon_ms <= now));
            if (open && (!best || s->start < best->start)) best = s;
        }
        if (!best && move)
            return compact_step(t, now, budget - c.n, move, ud);
        if (!best || c.n >= budget) return best != NULL;
        if (best->state == SEG_FAR && !seg_start_loading(t, best))
            return false;
        if (!seg_load(t, best, &c)) {
            if (c.n < budget) continue; /* read on after damage */
            return true;
        }
        seg_unmap(best);
        best->state = SEG_LOADED;
        t->loads_done++;
    }
}

/* --- compaction of mostly dead segments ------------------------------------ */

static void compact_abort(struct tier *t) {
    struct seg *s = t->compacting;
    if (!s) return;
    seg_unmap(s);
    s->state = SEG_FAR;
    t->compacting = NULL;
}

struct move_ctx {
    struct tier *t;
    struct seg *s;
    uint32_t budget, n;
    int (*move)(void *ud, const struct dq_job *j, uint64_t from);
    void *ud;
};

static int move_rec(void *ud, const struct wal_rec *r, uint64_t off) {
    struct move_ctx *c = ud;
    if (c->n == c->budget) return 1;
    c->n++;
    if (r->type != WAL_JOB) return 0;
    if (c->move(c->ud, &r->job, (uint64_t)c->s->slot << 32 | off) == 1) {
        if (c->s->live) c->s->live--;
        c->t->moved++;
    }
    return 0;
}

static struct seg *compact_pick(struct tier *t, int64_t now) {
    t->compact_check = false;
    struct seg *best = NULL;
    for (size_t i = 0; i < t->nsegs; i++) {
        struct seg *s = t->segs[i];
        if (s->state != SEG_FAR || s->pend.len || s->size < COMPACT_MIN ||
            s->live * COMPACT_LIVE >= s->recs)
            continue;
        if (t->cfg.horizon_ms <= 0 || s->start - t->cfg.horizon_ms <= now)
            continue; /* about to be loaded anyway */
        if (!best || s->size - s->live * (s->size / (s->recs + 1)) >
                         best->size - best->live * (best->size /
                                                    (best->recs + 1)))
            best = s;
    }
    return best;
}

/* Copies the live records of the most wasteful mostly dead segment into a
 * new segment of its window, `budget` records per call, calling move(ud,
 * job, from) for each record (the store places it anew and points the
 * engine and the log at the new place; it returns 1 if the job was still far
 * at `from`). The old file then waits to be deleted like a loaded one. */
static bool compact_step(struct tier *t, int64_t now, uint32_t budget,
                         int (*move)(void *ud, const struct dq_job *j,
                                     uint64_t from),
                         void *ud) {
    struct seg *s = t->compacting;
    if (!s) {
        if (!t->compact_check || !(s = compact_pick(t, now))) return false;
        seg_close_window(t, s); /* new records of its window: a new file */
        s->state = SEG_COMPACTING;
        s->at = WAL_HEADER_SIZE;
        void *m = mmap(NULL, s->size, PROT_READ, MAP_PRIVATE, s->fd, 0);
        if (m == MAP_FAILED) {
            log_error("cannot map far segment %s/%05" PRIu32 ".far to "
                      "compact it: %s",
                      t->path, s->slot, strerror(errno));
            s->state = SEG_FAR;
            return false;
        }
        s->map = m;
        s->maplen = s->size;
        t->compacting = s;
        log_info("compacting far segment %s/%05" PRIu32 ".far (%" PRIu64
                 " bytes, %" PRIu64 " of about %" PRIu64 " jobs live)",
                 t->path, s->slot, s->size, s->live, s->recs);
    }
    struct move_ctx c = {t, s, budget, 0, move, ud};
    struct wal_scan sc;
    if (wal_scan_at(s->map, s->maplen, s->at, move_rec, &c, &sc) != 0) {
        s->at = sc.good;
        return true;
    }
    if (sc.end != WAL_END_CLEAN) {
        /* leave damage to the loading, which reports it */
        log_warn("far segment %s/%05" PRIu32 ".far: %s at offset %" PRIu64
                 "; not compacted",
                 t->path, s->slot, sc.why, sc.good);
        compact_abort(t);
        s->recs = s->live; /* do not pick it again */
        return false;
    }
    seg_unmap(s);
    t->compacting = NULL;
    t->compactions++;
    s->state = SEG_LOADED; /* deleted once the moves are durable */
    t->compact_check = true; /* another may be waiting */
    return true;
}

bool tier_created(struct tier *t) {
    bool c = t && t->created;
    if (t) t->created = false;
    return c;
}

bool tier_unlink_waiting(const struct tier *t) {
    if (!t) return false;
    for (size_t i = 0; i < t->nsegs; i++)
        if (t->segs[i]->state == SEG_LOADED) return true;
    return false;
}

void tier_unlink_mark(struct tier *t) {
    if (!t) return;
    for (size_t i = 0; i < t->nsegs; i++)
        if (t->segs[i]->state == SEG_LOADED) t->segs[i]->state = SEG_SYNCING;
    pthread_mutex_lock(&t->sync.mu);
    t->unlink_round = t->sync.queued;
    pthread_mutex_unlock(&t->sync.mu);
}

bool tier_unlink_ready(const struct tier *t) {
    /* new segments a compaction copied into are synced too (everysec) */
    return !t || !t->sync.running || atomic_load(&t->sync.done) >= t->unlink_round;
}

void tier_unlink_loaded(struct tier *t) {
    if (!t) return;
    bool any = false;
    for (size_t i = 0; i < t->nsegs;) {
        struct seg *s = t->segs[i];
        if (s->state != SEG_SYNCING) {
            i++;
            continue;
        }
        char name[32];
        seg_name(name, sizeof name, s->slot);
        if (s->live) {
            /* jobs still point here: records that could not be read */
            log_error("far segment %s/%s: %" PRIu64 " jobs could not be "
                      "loaded from it; kept",
                      t->path, name, s->live);
            s->state = SEG_KEPT;
            i++;
            continue;
        }
        if (unlinkat(t->dirfd, name, 0) != 0) {
            log_error("cannot remove loaded far segment %s/%s: %s", t->path,
                      name, strerror(errno));
            s->state = SEG_KEPT;
            i++;
            continue;
        }
        t->bytes -= s->size;
        t->unlinked++;
        any = true;
        seg_forget(t, s); /* moves another segment to index i */
    }
    if (any && t->cfg.fsync_mode != DQ_FSYNC_NO) fsync(t->dirfd);
}

void tier_info(const struct tier *t,
               void (*emit)(void *ud, const char *name, const char *value),
               void *ud) {
    char v[32];
    uint64_t loading = 0, left = 0;
    for (size_t i = 0; t && i < t->nsegs; i++) {
        const struct seg *s = t->segs[i];
        if (s->state == SEG_LOADING) {
            loading++;
            left += s->maplen > s->at ? s->maplen - s->at : 0;
        }
    }
#define EMIT(name, val)                                                      \
    do {                                                                     \
        snprintf(v, sizeof v, "%" PRId64, (int64_t)(val));                   \
        emit(ud, name, v);                                                   \
    } while (0)
    EMIT("memory_horizon_ms", t ? t->cfg.horizon_ms : 0);
    EMIT("far_segments", t ? t->nsegs : 0);
    EMIT("far_segment_bytes", t ? t->bytes : 0);
    EMIT("far_segments_loading", loading);
    EMIT("far_loading_bytes_left", left);
    EMIT("far_segments_loaded", t ? t->loads_done : 0);
    EMIT("far_records_loaded", t ? t->load_records : 0);
    EMIT("far_compactions", t ? t->compactions : 0);
    EMIT("far_records_moved", t ? t->moved : 0);
    EMIT("far_damaged_places", t ? atomic_load(&t->check.found) : 0);
#undef EMIT
}
