/* wal.c -- the embedded store's append-only log (see wal.h and
 * docs/log-format.md for the format): the writer and the API of wal.h.
 *
 * Layout of this file: fault seams, segment files, the writer (group
 * commit, broken state and probes), housekeeping, open and close, INFO.
 * The record format is wal_codec.c, recovery wal_replay.c, the sync thread
 * of --fsync everysec wal_sync.c, compaction wal_compact.c; what they share
 * is in wal_int.h.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/xalloc.h"
#include "store/store.h"
#include "store/wal_int.h"

#define PROBE_MS 1000        /* broken log: time between probes */

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
int wl_write_all(int fd, const void *p, size_t n, uint64_t off) {
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

/* --- segment files -------------------------------------------------------- */

void wl_seg_name(char *b, size_t n, uint64_t seq, const char *ext) {
    snprintf(b, n, "%08" PRIu64 ".%s", seq, ext);
}

static void fsync_dir(struct wal *w) {
    if (fsync(w->dirfd) != 0)
        log_warn("fsync of directory %s failed: %s", w->dir, strerror(errno));
}

/* Creates segment seq with its header. */
int wl_create_segment(struct wal *w, uint64_t seq) {
    char name[64];
    wl_seg_name(name, sizeof name, seq, "log");
    int fd = openat(w->dirfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC,
                    0644);
    if (fd < 0) return -1;
    uint8_t h[WAL_HEADER_SIZE];
    wl_header_at(h, WAL_KIND_LOG, seq);
    if (wl_write_all(fd, h, sizeof h, 0) != 0 ||
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
    w->next_probe = clock_mono_ms() + probe_ms(w);
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
    size_t n = WAL_REC_HEADER + wl_rec_size(r);
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
    w->len += wl_encode_at(w->out + w->len, r);
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
    if (wl_write_all(w->fd, w->out, w->len, w->off) != 0) {
        int e = errno;
        cut_back(w);
        drop_batch(w);
        go_broken(w, e, "write");
        return -1;
    }
    if (w->cfg.fsync_mode == DQ_FSYNC_ALWAYS &&
        wl_fdatasync_timed(w, w->fd) != 0) {
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
        if (wl_write_all(w->fd, w->out, w->len, w->off) != 0 ||
            wal_io.fdatasync(w->fd) != 0)
            goto fail;
        w->off += w->len;
        w->log_bytes += w->len;
        w->len = 0;
    } else {
        if (wl_write_all(w->fd, zeros, sizeof zeros, w->off) != 0 ||
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
    w->next_probe = clock_mono_ms() + probe_ms(w);
    return false;
}

bool wal_tick(struct wal *w) {
    if (!w) return false;
    if (!w->cfg.base) wl_compact_step(w);
    check_sync_thread(w);
    if (w->broken && clock_mono_ms() >= w->next_probe) return probe(w);
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
    wl_compact_abort(w); /* it reads the engine being replaced */
    int rc = wl_recover(w, e, now, false, &info, err, errlen);
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
    if (wl_recover(w, e, now, true, rec, err, errlen) != 0) goto fail;
    if (cfg->fsync_mode == DQ_FSYNC_EVERYSEC && wl_sync_start(w) != 0) {
        snprintf(err, errlen, "cannot start the log sync thread");
        goto fail;
    }
    if (cfg->base) {
        w->tick_ev = event_new(cfg->base, -1, EV_PERSIST, tick_cb, w);
        w->snap_ev = evtimer_new(cfg->base, wl_compact_cb, w);
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
    wl_sync_stop(w);
    wl_compact_abort(w);
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
    wl_fsync_info(w, emit, ud);
    emit(ud, "log_writable", w->broken ? "0" : "1");
    emit(ud, "log_last_error", w->last_err ? strerror(w->last_err) : "");
}
