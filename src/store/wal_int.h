/* wal_int.h -- what the files of the append-only log share (not an API:
 * only src/store/wal*.c include it; the log's API is wal.h).
 *
 * The log is split by job:
 *   wal.c          the writer and the API of wal.h: fault seams, segment
 *                  files, group commit, the broken state and its probes,
 *                  housekeeping, open, close, INFO;
 *   wal_codec.c    the record format: encoding, decoding, scanning a file
 *                  image (with a helper thread checking CRCs ahead on big
 *                  files);
 *   wal_replay.c   recovery: listing the data directory, replaying the
 *                  snapshot and the segments into an engine, cutting torn
 *                  tails, --repair;
 *   wal_sync.c     the background sync thread of --fsync everysec;
 *   wal_compact.c  compaction: a snapshot written from the loop in slices,
 *                  synced and installed by a helper thread.
 * Far segments (store/tier.c) use the codec through wal.h.
 *
 * Conventions: functions shared between the files are prefixed wl_; they
 * follow wal.h's error convention (0 or -1 with errno, unless stated).
 * Everything here runs on the loop thread except where a comment says a
 * helper thread touches it (struct syncer's atomics, the snapshot's end).
 */
#ifndef DQ_WAL_INT_H
#define DQ_WAL_INT_H

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "store/store.h"
#include "store/wal.h"

struct snapper; /* a compaction running (wal_compact.c) */

/* The sync thread of --fsync everysec (wal_sync.c). */
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

/* How long the log's fdatasyncs took (wal_sync.c): the syncs that make
 * commits durable, made by the loop under --fsync always and by the sync
 * thread under everysec. Written by whichever thread synced, read by the
 * loop (INFO, /metrics): counters that only grow, updated with relaxed
 * atomics, so neither side ever waits and no value is torn; a sync that
 * ends while the loop reads may show in the buckets and not yet in the sum
 * (or the reverse). The count is the sum of the buckets. */
#define WL_FSYNC_BOUNDS 15
struct fsync_stats {
    atomic_uint_fast64_t bucket[WL_FSYNC_BOUNDS + 1]; /* the last: +Inf */
    atomic_uint_fast64_t sum_us;
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
    struct fsync_stats fsyncs;
};

/* --- wal.c --------------------------------------------------------------- */

/* Writes all of p at off through the seam (wal_io); -1 with errno. */
int wl_write_all(int fd, const void *p, size_t n, uint64_t off);

/* "<seq as 8 digits>.<ext>" into b. */
void wl_seg_name(char *b, size_t n, uint64_t seq, const char *ext);

/* Creates segment seq with its header (synced unless --fsync no). Returns
 * the open fd, or -1 with errno (nothing left behind). */
int wl_create_segment(struct wal *w, uint64_t seq);

/* --- wal_codec.c --------------------------------------------------------- */

/* Size of a record's type + payload (WAL_REC_HEADER not included); 0 for a
 * type that has no encoding. */
size_t wl_rec_size(const struct wal_rec *r);

/* Encodes r at dst, which has room for WAL_REC_HEADER + wl_rec_size(r).
 * Returns the bytes written. */
size_t wl_encode_at(uint8_t *dst, const struct wal_rec *r);

/* Writes a file header of the given kind and number at h
 * (WAL_HEADER_SIZE bytes). */
void wl_header_at(uint8_t *h, int kind, uint64_t seq);

/* wal_scan of a whole file, with a helper thread checking CRCs ahead of
 * the replay when the file is big (the same result as wal_scan). */
int wl_scan_big(const void *data, size_t len,
                int (*fn)(void *ud, const struct wal_rec *r, uint64_t off),
                void *ud, struct wal_scan *res);

/* --- wal_replay.c -------------------------------------------------------- */

/* The whole recovery into the empty engine e. rw: at open (may cut and
 * delete files, sets the segment being written and the sizes); otherwise a
 * reload, which only reads, up to w->off in the current segment. Returns
 * 0, or -1 with a message in err. */
int wl_recover(struct wal *w, struct engine *e, int64_t now, bool rw,
               struct wal_recovery *info, char *err, size_t errlen);

/* --- wal_sync.c ---------------------------------------------------------- */

/* Starts the sync thread and gives it the current segment; -1 if the
 * thread cannot start. */
int wl_sync_start(struct wal *w);

/* Gives the thread the current segment (a dup it owns: it syncs and closes
 * the previous one). Does nothing if the thread is not running. */
void wl_sync_handover(struct wal *w);

/* Stops the thread after a last sync. Does nothing if it is not running. */
void wl_sync_stop(struct wal *w);

/* wal_io.fdatasync(fd), its duration counted in w->fsyncs. Any thread;
 * returns what the sync returned (errno kept). */
int wl_fdatasync_timed(struct wal *w, int fd);

/* The fsync figures as INFO lines: log_fsync_seconds_count, _sum and
 * _buckets ("le=count" pairs, cumulative, the last le "+Inf"), which the
 * core turns into delayq_fsync_duration_seconds. Loop thread. */
void wl_fsync_info(const struct wal *w, dq_info_emit *emit, void *ud);

/* --- wal_compact.c ------------------------------------------------------- */

/* One slice of a compaction (or noticing that its helper thread is done).
 * Returns true while there is more to do. */
bool wl_compact_step(struct wal *w);

/* Stops a compaction and removes its file (the engine it reads is going
 * away). Does nothing if none runs. */
void wl_compact_abort(struct wal *w);

/* The compaction's event callback (w->snap_ev): one slice, then re-armed
 * while there is more. */
void wl_compact_cb(evutil_socket_t fd, short what, void *arg);

#endif
