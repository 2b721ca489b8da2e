/* tier_check.c -- checking far segments and repairing them (tier.h:
 * tier_check, tier_check_background, tier_damage(d), tier_repair).
 *
 * A start checks what is cheap; a background thread at idle priority reads
 * every segment through and writes what it finds to far/DAMAGED, so the
 * next start stops there until --repair (docs/log-format.md).
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
#include "store/tier_int.h"

/* --- checking segments ------------------------------------------------------ */


#define DAMAGED_FILE "DAMAGED"     /* far/DAMAGED: what a check found */
#define CHECK_CHUNK (64u << 20)    /* the background check's eviction step */

static void damage_add(struct check *c, uint32_t slot, uint64_t from,
                       uint64_t to, bool tail, const char *why) {
    if (c->nd == c->dcap) {
        size_t cap = c->dcap ? 2 * c->dcap : 8;
        struct damage *d = dq_realloc(c->d, cap * sizeof *d);
        if (!d) {
            c->nomem = true;
            return;
        }
        c->d = d;
        c->dcap = cap;
    }
    struct damage *d = &c->d[c->nd++];
    d->slot = slot;
    d->from = from;
    d->to = to;
    d->tail = tail;
    snprintf(d->why, sizeof d->why, "%s", why);
}

/* The background check drops from the page cache what it alone brought in:
 * a chunk mostly absent before it was read. */
struct evict {
    const atomic_bool *stop;
    int fd;
    const uint8_t *map;
    uint64_t size;
    uint64_t cur, next;   /* the chunk being read */
    bool drop;            /* it was mostly not cached before */
};

/* Called as reading reaches `upto`: drops the chunks read (if they were
 * not cached before) and looks at the next one. */
static void evict_chunk(struct evict *v, uint64_t upto) {
    while (upto >= v->next && v->cur < v->size) {
        if (v->drop && v->next > v->cur)
            posix_fadvise(v->fd, (off_t)v->cur, (off_t)(v->next - v->cur),
                          POSIX_FADV_DONTNEED);
        v->cur = v->next;
        if (v->cur >= v->size) break;
        uint64_t len = v->size - v->cur < CHECK_CHUNK ? v->size - v->cur
                                                      : CHECK_CHUNK;
        unsigned char vec[CHECK_CHUNK / 4096];
        size_t pages = (size_t)((len + 4095) / 4096), in = 0;
        v->drop = false;
        if (mincore((void *)(v->map + v->cur), (size_t)len, vec) == 0) {
            for (size_t k = 0; k < pages; k++) in += vec[k] & 1;
            v->drop = in * 2 < pages;
        }
        v->next = v->cur + len;
    }
}

static int evict_rec(void *ud, const struct wal_rec *r, uint64_t off) {
    (void)r;
    struct evict *v = ud;
    if (off < v->next) return 0;
    evict_chunk(v, off);
    return atomic_load_explicit(v->stop, memory_order_relaxed); /* closing */
}

/* Reads one segment through (CRC and fields of every record), noting every
 * damaged place in c; background: dropping behind it what it brought into
 * the page cache. */
static void check_seg(struct check *c, uint32_t slot, int fd, uint64_t size,
                      bool background) {
    if (size <= WAL_HEADER_SIZE) return;
    const uint8_t *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
        damage_add(c, slot, WAL_HEADER_SIZE, size, false, strerror(errno));
        return;
    }
    madvise((void *)m, size, MADV_SEQUENTIAL);
    struct evict v = {&c->stop, fd, m, size, 0, 0, false};
    if (background) evict_chunk(&v, 0);
    uint64_t at = WAL_HEADER_SIZE;
    while (at < size &&
           !atomic_load_explicit(&c->stop, memory_order_relaxed)) {
        struct wal_scan sc;
        if (wal_scan_at(m, size, at, background ? evict_rec : NULL, &v, &sc))
            break; /* stopped */
        if (sc.end == WAL_END_CLEAN) break;
        if (sc.end != WAL_END_CORRUPT) { /* torn: nothing valid after it */
            damage_add(c, slot, sc.good, size, true, sc.why);
            break;
        }
        uint64_t to = sc.next_valid;
        if (to <= sc.good) { /* its CRC holds, its fields do not */
            const uint8_t *h = m + sc.good + 4;
            to = sc.good + WAL_REC_HEADER +
                 ((uint64_t)h[0] | (uint64_t)h[1] << 8 |
                  (uint64_t)h[2] << 16 | (uint64_t)h[3] << 24);
            if (to > size) to = size;
        }
        damage_add(c, slot, sc.good, to, false, sc.why);
        at = to;
    }
    if (background && !atomic_load(&c->stop)) evict_chunk(&v, size);
    c->bytes += size;
    munmap((void *)m, size);
}

static void describe(const char *path, const struct damage *d, char *msg,
                     size_t len) {
    snprintf(msg, len,
             "far segment %s/%05" PRIu32 ".far: %s at offset %" PRIu64
             " (%" PRIu64 " bytes%s): %s",
             path, d->slot, d->tail ? "torn tail" : "corrupt record",
             d->from, d->to - d->from,
             d->tail ? " holding far jobs' records" : "", d->why);
}

/* The background check's thread: every segment found at start, one after
 * the other, at the lowest CPU and I/O priority. What it finds is logged
 * and written down in far/DAMAGED, so that the next start stops there. */
static void *check_main(void *arg) {
    struct tier *t = arg;
    struct check *c = &t->check;
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
    syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, 0,
            3 << 13 /* IOPRIO_CLASS_IDLE */);
    int64_t t0 = clock_mono_ms();
    for (size_t i = 0; i < c->nsegs; i++) {
        size_t before = c->nd;
        check_seg(c, c->segs[i].slot, c->segs[i].fd, c->segs[i].size, true);
        close(c->segs[i].fd);
        c->segs[i].fd = -1;
        for (size_t k = before; k < c->nd; k++) {
            /* a torn tail: the start saw that no far job's record is in it
             * (its last live record is whole): what a crash leaves */
            if (c->d[k].tail) continue;
            char msg[512];
            describe(t->path, &c->d[k], msg, sizeof msg);
            log_error("%s: the far jobs whose records lie there cannot be "
                      "delivered; the next start stops here (restart with "
                      "--repair to drop them)", msg);
            char line[600];
            int n = snprintf(line, sizeof line, "%05" PRIu32 ".far %s\n",
                             c->d[k].slot, msg);
            int fd = openat(t->dirfd, DAMAGED_FILE,
                            O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
            if (fd < 0 || write(fd, line, (size_t)n) != n || fsync(fd) != 0)
                log_error("cannot write %s/%s: %s", t->path, DAMAGED_FILE,
                          strerror(errno));
            if (fd >= 0) close(fd);
            atomic_fetch_add(&c->found, 1);
        }
        if (atomic_load(&c->stop)) break;
    }
    uint64_t found = atomic_load(&c->found);
    if (!atomic_load(&c->stop))
        log_at(found ? LOG_WARN : LOG_INFO,
               "far segments checked in the background: %" PRIu64
               " bytes in %" PRId64 " ms, %s",
               c->bytes, clock_mono_ms() - t0,
               found ? "damage found (see above)" : "all sound");
    return NULL;
}

void tier_check_background(struct tier *t) {
    if (!t || !t->nsegs || t->check.running) return;
    struct check *c = &t->check;
    c->nd = 0;
    c->bytes = 0;
    if (!(c->segs = dq_calloc(t->nsegs, sizeof *c->segs))) return;
    for (size_t i = 0; i < t->nsegs; i++) {
        const struct seg *s = t->segs[i];
        int fd = s->size > WAL_HEADER_SIZE ? dup(s->fd) : -1;
        if (fd >= 0) /* dup: the loop may close its own meanwhile */
            c->segs[c->nsegs++] = (struct check_seg){s->slot, fd, s->size};
    }
    atomic_store(&c->stop, false);
    c->running = pthread_create(&c->thread, NULL, check_main, t) == 0;
    if (!c->running) tr_check_stop(t);
}

void tr_check_stop(struct tier *t) {
    struct check *c = &t->check;
    atomic_store(&c->stop, true);
    if (c->running) pthread_join(c->thread, NULL);
    c->running = false;
    for (size_t i = 0; i < c->nsegs; i++)
        if (c->segs[i].fd >= 0) close(c->segs[i].fd);
    dq_free(c->segs);
    c->segs = NULL;
    c->nsegs = 0;
}

/* Slots named in far/DAMAGED (a check of an earlier run found damage). */
static void read_damaged(struct tier *t, bool *named) {
    int fd = openat(t->dirfd, DAMAGED_FILE, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char b[65536];
    ssize_t n = read(fd, b, sizeof b - 1);
    close(fd);
    if (n <= 0) return;
    b[n] = 0;
    for (char *p = b; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        char name[10] = "";
        if (strnlen(p, 9) == 9) memcpy(name, p, 9);
        uint32_t slot = tr_parse_slot(name);
        if (slot < SLOTS) named[slot] = true;
    }
}

/* The record at offset off of s is whole and valid. */
static bool record_ok(const struct seg *s, uint64_t off) {
    uint8_t h[WAL_REC_HEADER];
    if (off < WAL_HEADER_SIZE || off + WAL_REC_HEADER > s->size ||
        pread(s->fd, h, sizeof h, (off_t)off) != (ssize_t)sizeof h)
        return false;
    uint64_t len = WAL_REC_HEADER + ((uint64_t)h[4] | (uint64_t)h[5] << 8 |
                                     (uint64_t)h[6] << 16 |
                                     (uint64_t)h[7] << 24);
    if (len > WAL_REC_HEADER + WAL_REC_MAX || off + len > s->size) return false;
    uint8_t *p = dq_malloc(len);
    struct wal_rec r;
    bool ok = p && pread(s->fd, p, len, (off_t)off) == (ssize_t)len &&
              wal_decode(p, len, &r) == len && r.type == WAL_JOB;
    dq_free(p);
    return ok;
}

size_t tier_check(struct tier *t) {
    if (!t) return 0;
    struct check *c = &t->check;
    c->nd = 0;
    bool *named = dq_calloc(SLOTS, sizeof *named);
    if (!named) return 0;
    read_damaged(t, named);
    for (size_t i = 0; i < t->nsegs; i++) {
        const struct seg *s = t->segs[i];
        /* a segment written down as damaged, or whose last record that a
         * far job points to is not whole (a lost or cut write): read it
         * through to find every damaged place */
        if (!named[s->slot] && (!s->live || record_ok(s, s->last_ref)))
            continue;
        size_t before = c->nd;
        check_seg(c, s->slot, s->fd, s->size, false);
        size_t n = before; /* a torn tail counts if a job's record is in it */
        for (size_t k = before; k < c->nd; k++)
            if (!c->d[k].tail || (s->live && s->last_ref >= c->d[k].from))
                c->d[n++] = c->d[k];
        c->nd = n;
    }
    dq_free(named);
    if (c->nd == 0) unlinkat(t->dirfd, DAMAGED_FILE, 0); /* none left */
    return c->nd;
}

void tier_damage(const struct tier *t, size_t i, char *msg, size_t len) {
    describe(t->path, &t->check.d[i], msg, len);
}

bool tier_damaged(const struct tier *t, uint64_t ref) {
    uint32_t slot = (uint32_t)(ref >> 32);
    uint64_t off = ref & UINT32_MAX;
    for (size_t i = 0; t && i < t->check.nd; i++) {
        const struct damage *d = &t->check.d[i];
        if (d->slot == slot && off >= d->from && off < d->to) return true;
    }
    return false;
}

/* Writes [from, to) of fd over with valid JOB records no far job points to
 * (dead: they load as nothing), so that the segment reads clean. */
static int fill_dead(int fd, uint64_t from, uint64_t to) {
    static const char dash[] = "-";
    struct wal_rec r = {.type = WAL_JOB};
    r.job.topic = r.job.id = (struct dq_str){dash, 1};
    r.job.ttr = 1;
    struct buf b = BUF_INIT;
    size_t min = wal_encode(&b, &r); /* with an empty body */
    int rc = 0;
    while (rc == 0 && from < to) {
        uint64_t n = to - from, cap = WAL_REC_MAX / 2;
        if (n < min) {
            errno = ERANGE; /* cannot happen: a record is never that short */
            rc = -1;
            break;
        }
        if (n > cap) n = to - from - cap < min ? cap - min : cap;
        buf_reset(&b, 1 << 20);
        char *body = buf_reserve(&b, (size_t)(n - min)); /* any bytes */
        memset(body, 0, (size_t)(n - min));
        r.job.body = (struct dq_str){body, (size_t)(n - min)};
        struct buf out = BUF_INIT;
        wal_encode(&out, &r);
        rc = tr_write_all(fd, out.p, out.len, from);
        buf_free(&out);
        from += n;
    }
    buf_free(&b);
    return rc;
}

int tier_repair(struct tier *t, char *err, size_t errlen) {
    for (size_t i = 0; t && i < t->check.nd; i++) {
        const struct damage *d = &t->check.d[i];
        struct seg *s = t->slot[d->slot];
        if (!s) continue;
        int rc;
        if (d->tail) {
            rc = wal_io.ftruncate(s->fd, (off_t)d->from);
            if (rc == 0) {
                t->bytes -= s->size - d->from;
                s->size = d->from;
            }
        } else {
            rc = fill_dead(s->fd, d->from, d->to);
        }
        if (rc != 0 || wal_io.fdatasync(s->fd) != 0) {
            snprintf(err, errlen,
                     "far segment %s/%05" PRIu32 ".far: cannot repair: %s",
                     t->path, d->slot, strerror(errno));
            return -1;
        }
    }
    if (t) {
        t->check.nd = 0;
        unlinkat(t->dirfd, DAMAGED_FILE, 0);
        if (t->cfg.fsync_mode != DQ_FSYNC_NO) fsync(t->dirfd);
    }
    return 0;
}
