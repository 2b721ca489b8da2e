/* wal_replay.c -- recovery of the log: lists the data directory, loads the
 * newest snapshot and replays the segments after it into an engine
 * (records set state outright, so replay never re-runs engine logic),
 * cuts a torn tail off the newest segment, and with --repair truncates at
 * damage and drops what follows. Used by wal_open (read-write) and
 * wal_reload (read-only, up to the last good commit). The records are read
 * through the codec (wal_codec.c) from mapped files.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "lib/xalloc.h"
#include "store/wal_int.h"

/* --- replay into the engine ---------------------------------------------- */

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
    /* FAR and MOVE records are queued in the engine (engine_far_queue),
     * which restores them sorted by id-table bucket (a log of 100 million
     * far jobs is all such records); any other record empties it first */
    uint64_t nfar;
};

/* Restores the far jobs queued in the engine; end: the file's end (the
 * bulk load announced by presize is over). */
static int far_flush(struct replay *rp, bool end) {
    bool some = rp->nfar;
    rp->nfar = 0;
    if ((end ? engine_expect_end(rp->e)
             : some ? engine_far_flush(rp->e) : 0) < 0) {
        rp->err = "out of memory restoring a far job";
        rp->fatal = true;
        return -1;
    }
    return 0;
}

static int far_queue(struct replay *rp, const struct wal_rec *r) {
    rp->nfar++;
    if (engine_far_queue(rp->e, r->job.topic, r->job.id, r->ref) < 0) {
        rp->err = "out of memory restoring a far job";
        rp->fatal = true;
        return -1;
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
    /* the body and a push job's url and content type, in that order */
    size_t need = j->body.len + j->url.len + j->content_type.len;
    if (need > rp->scratch_cap) {
        char *p = dq_realloc(rp->scratch, need);
        if (!p) {
            rp->err = "out of memory";
            rp->fatal = true;
            return -1;
        }
        rp->scratch = p;
        rp->scratch_cap = need;
    }
    struct dq_str *parts[] = {&j->body, &j->url, &j->content_type};
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        if (parts[i]->len) memcpy(rp->scratch + off, parts[i]->p, parts[i]->len);
        parts[i]->p = rp->scratch + off;
        off += parts[i]->len;
    }
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
        far_flush(rp, false) != 0)
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
        return far_queue(rp, r);
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
    wl_header_at(h, WAL_KIND_LOG, seq);
    if (wal_io.ftruncate(m->fd, 0) != 0 ||
        wl_write_all(m->fd, h, sizeof h, 0) != 0)
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
        wl_seg_name(name, sizeof name, dl->logs[i], "log");
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
        (b.len && wl_write_all(m->fd, b.p, b.len, at) != 0) ||
        wal_io.fdatasync(m->fd) != 0)
        rc = -1;
    buf_free(&b);
    return rc;
}

/* A first, counting pass over a file about to be replayed: announces its
 * whole-job and far records to the engine, which sizes the id tables for
 * them. A hint: it walks the record headers and keys only (no CRC, no
 * fields: 100 million far records cost a few seconds less), and leaves
 * every error to the real pass. */
#define JOB_KEY_AT 47 /* type, state, backoff kind, 3 times, 5 u32 */
#define FAR_KEY_AT 9  /* type, ref */

static uint32_t le(const uint8_t *p, int n) {
    uint32_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* The str16 at *q (before end) of 1..max bytes, or false. */
static bool key_str(const uint8_t **q, const uint8_t *end, size_t max,
                    struct dq_str *out) {
    if (end - *q < 2) return false;
    size_t n = le(*q, 2);
    if (n < 1 || n > max || (size_t)(end - *q - 2) < n) return false;
    *out = (struct dq_str){(const char *)*q + 2, n};
    *q += 2 + n;
    return true;
}

static void presize(struct engine *e, const void *data, size_t len) {
    const uint8_t *p = data;
    for (size_t off = WAL_HEADER_SIZE;
         off < len && len - off > WAL_REC_HEADER;) {
        size_t rl = le(p + off + 4, 4);
        if (rl == 0 || rl > len - off - WAL_REC_HEADER) break;
        const uint8_t *q = p + off + WAL_REC_HEADER, *end = q + rl;
        bool job = (q[0] & ~WAL_PUSH) == WAL_JOB, far = q[0] == WAL_FAR;
        size_t at = job ? JOB_KEY_AT : FAR_KEY_AT;
        struct dq_str topic, id;
        q += at;
        if ((job || far) && rl > at &&
            key_str(&q, end, DQ_TOPIC_MAX, &topic) &&
            key_str(&q, end, DQ_ID_MAX, &id)) {
            if (job) engine_expect(e, topic);
            else engine_expect_far(e, topic, id);
        }
        off += WAL_REC_HEADER + rl;
    }
    engine_expect_done(e);
}

/* Maps file seq.ext of the data dir; on failure sets rc->err. */
static int map_numbered(struct recov *rc, uint64_t seq, const char *ext,
                        char *name, size_t namelen, struct mapped *m) {
    wl_seg_name(name, namelen, seq, ext);
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
        stop = wl_scan_big(m.p, m.len, apply, &rc->rp, &sc);
        if (far_flush(&rc->rp, true) != 0 && !stop) stop = -1;
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
        stop = wl_scan_big(m.p, len, apply, &rc->rp, &sc);
        if (far_flush(&rc->rp, true) != 0 && !stop) stop = -1;
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

/* The whole recovery. rw: at open (may cut and delete files); otherwise a
 * reload, which only reads, up to w->off in the current segment. */
int wl_recover(struct wal *w, struct engine *e, int64_t now, bool rw,
               struct wal_recovery *info, char *err, size_t errlen) {
    struct recov rc = {
        .w = w, .rw = rw, .info = info, .err = err, .errlen = errlen,
        .rp = {.e = e, .now = now},
    };
    memset(info, 0, sizeof *info);
    int64_t t0 = clock_mono_ms();
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
            wl_seg_name(name, sizeof name, dl.snaps[i], "snap");
            unlinkat(w->dirfd, name, 0);
        }
        for (size_t i = 0; i < dl.nlogs && dl.logs[i] <= snap; i++) {
            wl_seg_name(name, sizeof name, dl.logs[i], "log");
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
            wl_seg_name(name, sizeof name, snap, "snap");
            w->snap_bytes = file_size(w, name);
        }
        if (seq && seq >= snap + 1) {
            char name[64];
            wl_seg_name(name, sizeof name, seq, "log");
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
            w->fd = wl_create_segment(w, w->seg);
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
    info->ms = clock_mono_ms() - t0;
    ret = 0;
out:
    dq_free(rc.rp.scratch);
    dirlist_free(&dl);
    return ret;
}
