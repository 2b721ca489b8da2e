/* wal_compact.c -- compaction of the log: when the segments written since
 * the last snapshot outgrow it and are mostly dead records, the writer's
 * segment is rotated and a snapshot of the engine is written from the loop
 * in slices; a helper thread syncs it and renames it into place, and the
 * files it covers are deleted (see the comment below for why this is
 * correct while the engine moves on). Driven by the log's own event (or
 * wal_tick without an event base); stopped by wal_reload and wal_close.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "lib/xalloc.h"
#include "store/wal_int.h"

#define SNAP_CHUNK (256u << 10) /* compaction: bytes per write */

/* A compaction writes a snapshot of the engine while the server goes on.
 * It starts right after a commit, when the engine holds exactly what the
 * log holds: the current segment N is closed, N+1 takes the new records,
 * and the snapshot "N.snap" is written from the loop in small slices (a few
 * thousand jobs per loop iteration), walking each topic's id table with a
 * SCAN cursor. A job that changes while the walk goes on may be captured
 * before or after the change, but the change itself is in segment N+1, and
 * every record there sets a job's state outright, so replaying N+1 over the
 * snapshot ends where the engine is. The counters are taken at the start.
 * Then a helper thread syncs the file, renames it into place and deletes
 * the files it covers; the loop notices. Nothing forks, nothing is copied
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
    if (wl_write_all(sn->fd, sn->b, sn->len, sn->off) != 0) sn->err = errno;
    sn->off += sn->len;
    sn->len = 0;
}

static void snap_rec(struct wal *w, const struct wal_rec *r) {
    struct snapper *sn = w->snap;
    size_t n = WAL_REC_HEADER + wl_rec_size(r);
    if (sn->len + n > SNAP_CHUNK) snap_flush(w);
    if (n > SNAP_CHUNK) { /* a body bigger than the chunk: on its own */
        uint8_t *p = dq_malloc(n);
        if (!p) {
            sn->err = ENOMEM;
            return;
        }
        wl_encode_at(p, r);
        if (!sn->err && wl_write_all(sn->fd, p, n, sn->off) != 0)
            sn->err = errno;
        sn->off += n;
        dq_free(p);
        return;
    }
    sn->len += wl_encode_at(sn->b + sn->len, r);
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
    w->next_compact = clock_mono_ms() + w->compact_backoff;
}

/* Stops a compaction (the engine it reads is going away). */
void wl_compact_abort(struct wal *w) {
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
    wl_seg_name(name, sizeof name, sn->seq, "snap");
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
        wl_seg_name(old, sizeof old, sn->old_snap, "snap");
        if (fstatat(sn->dirfd, old, &st, 0) == 0)
            sn->freed += (uint64_t)st.st_size;
        unlinkat(sn->dirfd, old, 0);
    }
    for (uint64_t q = sn->old_snap + 1; q <= sn->seq; q++) {
        wl_seg_name(old, sizeof old, q, "log");
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
    wl_seg_name(name, sizeof name, seq, "snap");
    w->log_bytes -= sn->freed_log < w->log_bytes ? sn->freed_log : w->log_bytes;
    w->snap_seq = seq;
    w->snap_bytes = sn->off;
    w->compactions++;
    w->compact_backoff = 0;
    w->next_compact = 0;
    w->last_compact_ms = clock_mono_ms() - sn->start;
    snap_free(w);
    log_info("compaction done in %" PRId64 " ms: %s holds %" PRIu64
             " jobs in %" PRIu64 " bytes; %" PRIu64 " bytes freed",
             w->last_compact_ms, name, jobs, w->snap_bytes, freed);
}

/* One slice of work. Returns true while there is more. */
bool wl_compact_step(struct wal *w) {
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

void wl_compact_cb(evutil_socket_t fd, short what, void *arg) {
    struct wal *w = arg;
    (void)fd;
    (void)what;
    int64_t t0 = clock_mono_us();
    bool more = wl_compact_step(w);
    int64_t took = clock_mono_us() - t0;
    if (took > w->max_step_us) w->max_step_us = took;
    if (more) {
        /* after the I/O that the next poll finds */
        struct timeval tv = {0, w->snap && w->snap->syncing ? 1000 : 0};
        event_add(w->snap_ev, &tv);
    }
}

/* Closes the current segment and starts the next one. */
static int rotate(struct wal *w) {
    int fd = wl_create_segment(w, w->seg + 1);
    if (fd < 0) return -1;
    int old = w->fd;
    w->fd = fd;
    w->seg++;
    w->off = WAL_HEADER_SIZE;
    w->log_bytes += WAL_HEADER_SIZE;
    wl_sync_handover(w); /* the thread syncs and closes its copy of the old */
    close(old);
    return 0;
}

static int start_compaction(struct wal *w, const struct engine *e);

int wal_maybe_compact(struct wal *w, const struct engine *e, bool force) {
    if (!w || w->snap || w->broken || w->len > 0) return 0;
    int64_t now = clock_mono_ms();
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
    int64_t t0 = clock_mono_us();
    int rc = start_compaction(w, e);
    int64_t took = clock_mono_us() - t0;
    if (took > w->max_step_us) w->max_step_us = took;
    return rc;
}

static int start_compaction(struct wal *w, const struct engine *e) {
    int64_t now = clock_mono_ms();
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
    wl_header_at(sn->b, WAL_KIND_SNAPSHOT, seq);
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
