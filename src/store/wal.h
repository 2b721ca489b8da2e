/* wal.h -- the embedded store's append-only log (docs/log-format.md).
 *
 * The data directory holds numbered files: segments "00000007.log" with the
 * records of engine changes in the order they happened, and at most one
 * snapshot "00000006.snap", the full state after every segment numbered
 * <= 6. Recovery loads the snapshot and replays the later segments into an
 * engine. Records are state-based ("job X is now reserved, attempts 2,
 * deadline T"), so replay never re-runs engine logic such as backoff.
 *
 * Writing: the store applies an operation to the engine, appends the
 * records describing the change (wal_append), and once per loop iteration
 * calls wal_commit, which writes every buffered record with one pwrite and,
 * with --fsync always, one fdatasync: the group commit. Replies go out only
 * after wal_commit returned 0.
 *
 * When a commit fails (disk full, I/O error, out of memory), the file is cut
 * back to the end of the last good commit and the log turns "broken": the
 * engine is then ahead of the log, so the store must reload it from the log
 * (wal_reload), fail the batch's changes with DQ_IOERR and refuse changes
 * while wal_writable() is false. The log probes the disk at most once per
 * second (wal_tick, or its own timer when given an event base) and becomes
 * writable again when a write and sync succeed. Records appended while
 * broken (lease expiries, which the engine makes on its own) are kept and
 * written first when it recovers.
 *
 * Compaction: when the segments written since the last snapshot outgrow
 * both the snapshot and cfg->compact_min bytes, wal_maybe_compact rotates to
 * a new segment and starts writing a snapshot of the engine from the loop,
 * a few thousand jobs per loop iteration, while new records go to the new
 * segment (records set state outright, so the new segment replayed over a
 * snapshot taken while the engine moved ends where the engine is). A helper
 * thread syncs the snapshot; then it is renamed into place and the files it
 * covers are deleted. Nothing old is kept alive by a long-lived job: each
 * snapshot holds a copy of every live job.
 *
 * Error convention: functions returning int return 0 on success and -1 on
 * failure, with a message in err (open, reload) or errno-style detail in
 * wal_last_error(). Destructors accept NULL.
 */
#ifndef DQ_WAL_H
#define DQ_WAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "job.h"

struct engine;
struct event_base;
struct buf;

#define WAL_VERSION 1
#define WAL_HEADER_SIZE 32
#define WAL_REC_HEADER 8             /* crc32 + length */
#define WAL_REC_MAX (64u << 20)      /* largest type+payload accepted */
#define WAL_COMPACT_MIN_DEFAULT (16u << 20)

enum wal_kind { WAL_KIND_LOG = 1, WAL_KIND_SNAPSHOT = 2, WAL_KIND_FAR = 3 };

/* Record types; the numbers are part of the format. */
enum wal_type {
    WAL_JOB = 1,      /* a whole job (ADD, ADD REPLACE, snapshot) */
    WAL_DEL = 2,      /* topic, id: removed by DEL */
    WAL_ACK = 3,      /* topic, id: removed by ACK */
    /* 4..9 carry the job's new state, attempts, due and deadline */
    WAL_RESERVE = 4,  /* reserved by RESERVE */
    WAL_NACK = 5,     /* NACKed to delayed, ready or dead */
    WAL_TOUCH = 6,    /* lease extended */
    WAL_RELEASE = 7,  /* a reservation given back */
    WAL_EXPIRE = 8,   /* lease ended -> ready or dead */
    WAL_KICK = 9,     /* dead -> ready by KICK */
    WAL_KICKALL = 10, /* topic, due, count: every dead job -> ready */
    WAL_PURGE = 11,   /* topic, count: every job removed */
    WAL_COUNTERS = 12,/* the STATS counters (snapshots) */
    WAL_SNAPEND = 13, /* last record of a snapshot: number of jobs */
    WAL_FAR = 14,     /* topic, id, ref: a far job, kept in a far segment */
    WAL_LOAD = 15,    /* a whole job loaded from a far segment (not an ADD) */
    WAL_MOVE = 16,    /* topic, id, ref: a far job's record moved (compaction) */
};

/* One decoded record. Which fields of `job` mean something depends on the
 * type (see enum wal_type); the others are zero. Strings point into the
 * buffer that was decoded. */
struct wal_rec {
    int type;
    struct dq_job job;
    struct dq_stats counters; /* WAL_COUNTERS (jobs[] unused) */
    uint64_t count;           /* WAL_SNAPEND, WAL_KICKALL, WAL_PURGE */
    uint64_t ref;             /* WAL_FAR, WAL_MOVE: where the job's record is */
};

/* The name of a record type ("job", "reserve", ...), "?" if unknown. */
const char *wal_type_name(int type);

/* Appends the encoded record (header included) to out. Aborts only if
 * memory runs out (lib/buf.h). Returns the encoded size. */
size_t wal_encode(struct buf *out, const struct wal_rec *r);

/* Appends a file header of the given kind and number to out. */
void wal_encode_header(struct buf *out, int kind, uint64_t seq);

/* --- reading -------------------------------------------------------------- */

enum wal_end {
    WAL_END_CLEAN,     /* every byte was a valid record (or trailing zeros) */
    WAL_END_TORN,      /* an incomplete or damaged tail, nothing valid after */
    WAL_END_CORRUPT,   /* a damaged record with valid data after it, or a
                          record that decodes badly although its CRC holds */
    WAL_END_BADHEADER, /* not a delayq log, or a version we cannot read */
};

struct wal_scan {
    int kind;          /* from the header */
    uint64_t seq;
    int end;           /* enum wal_end */
    uint64_t good;     /* offset just past the last valid record */
    uint64_t nrec;     /* valid records */
    uint64_t next_valid; /* WAL_END_CORRUPT: a valid record found there (0 if
                            the bad record itself passed its CRC) */
    char why[128];     /* what is wrong at `good`, for messages */
};

/* Scans a file image: header, then records. Calls fn(ud, rec, offset) for
 * every valid record in order (rec valid only during the call); a nonzero
 * return from fn stops the scan and is returned. Returns 0 otherwise, with
 * the outcome in *res. Never reads outside data[0..len). */
int wal_scan(const void *data, size_t len,
             int (*fn)(void *ud, const struct wal_rec *r, uint64_t off),
             void *ud, struct wal_scan *res);

/* wal_scan from the record at `start` (>= WAL_HEADER_SIZE, a record
 * boundary) on, after checking the header. When fn stops the scan, res->good
 * is the offset of the record it was given: a caller that has not used that
 * record resumes there. */
int wal_scan_at(const void *data, size_t len, uint64_t start,
                int (*fn)(void *ud, const struct wal_rec *r, uint64_t off),
                void *ud, struct wal_scan *res);

/* Decodes the one record at p[0..len) (header included). Returns its whole
 * size, or 0 if it is incomplete, fails its CRC or does not decode. */
size_t wal_decode(const void *p, size_t len, struct wal_rec *out);

/* --- fault seams ---------------------------------------------------------- */

/* Every write, sync and truncation of the log goes through this table, so
 * tests can fail them on purpose. Replace entries; NULL restores nothing, so
 * keep the originals (wal_io_default). Also armed in the real binary by the
 * environment variable DELAYQ_FAULT_FILE=path: while that file exists and
 * holds "enospc", "eio" or "fsync" (fdatasync fails with EIO), the matching
 * calls fail; remove it and they succeed again. */
struct wal_io {
    ssize_t (*pwrite)(int fd, const void *p, size_t n, off_t off);
    int (*fdatasync)(int fd);
    int (*ftruncate)(int fd, off_t len);
};
extern struct wal_io wal_io;
extern const struct wal_io wal_io_default;

/* --- the log -------------------------------------------------------------- */

struct wal;

struct wal_config {
    const char *dir;          /* created if missing (one level) */
    int fsync_mode;           /* enum dq_fsync (store/store.h) */
    bool repair;              /* truncate at a corrupt record, report */
    struct event_base *base;  /* NULL: the caller calls wal_tick */
    uint64_t compact_min;     /* 0 = WAL_COMPACT_MIN_DEFAULT */
    uint32_t probe_ms;        /* broken log: ms between probes; 0 = 1000 */
};

/* What recovery found, for the log and INFO. */
struct wal_recovery {
    uint64_t jobs;            /* jobs in the engine afterwards */
    uint64_t records;         /* records replayed (snapshot + segments) */
    uint64_t bytes;           /* bytes read */
    uint64_t truncated;       /* bytes of torn tail cut off */
    uint64_t dropped;         /* bytes dropped by --repair */
    int64_t ms;               /* how long it took */
};

/* Opens (creating if needed) the data directory, locks it against a second
 * delayqd, and recovers its contents into `e`, which must be empty and
 * whose hooks must not log (they may fire). Torn tails are truncated with a
 * warning; a corrupt record fails the open with the file and offset in
 * err, unless cfg->repair, which truncates there (and drops later files)
 * and says so. On success *out owns a writable log; on failure nothing is
 * left open. `now` is unix ms, used for restored jobs. */
int wal_open(struct wal **out, const struct wal_config *cfg, struct engine *e,
             int64_t now, struct wal_recovery *rec, char *err, size_t errlen);

/* Writes what is buffered, syncs the current segment whatever the fsync
 * mode, stops the sync thread and any compaction, and frees the log.
 * Accepts NULL. */
void wal_close(struct wal *w);

/* Buffers one record for the next commit. Cannot fail: an allocation
 * failure is remembered and makes the next wal_commit fail. */
void wal_append(struct wal *w, const struct wal_rec *r);

/* True if records are buffered. */
bool wal_pending(const struct wal *w);

/* Group commit: writes every buffered record in one pwrite and, with
 * --fsync always, one fdatasync. Returns 0 when they are written (and
 * synced as the mode promises). Returns -1 when the batch was lost: the
 * records are dropped, the file is cut back to the last good commit, and
 * the log is broken until a probe succeeds; the caller must reload its
 * engine (wal_reload) and fail the batch's changes. While broken, a commit
 * keeps the records for later and returns 0 (callers append only lease
 * expiries then, which replay would redo anyway). */
int wal_commit(struct wal *w);

/* Fails the buffered batch from outside (a far segment that goes with it
 * could not be written): drops its records and breaks the log, as a failed
 * wal_commit does; the caller reloads its engine. */
void wal_fail_batch(struct wal *w, int err);

/* A mark for everything committed so far, and whether it is durable as the
 * fsync mode promises (always: at once; everysec: once the sync thread has
 * synced it, within about a second; no: at once, nothing being promised). */
uint64_t wal_commit_mark(const struct wal *w);
bool wal_durable(const struct wal *w, uint64_t mark);

/* False while the log is broken: the store must refuse changes. */
bool wal_writable(const struct wal *w);

/* errno of the last failure (0 if none). */
int wal_last_error(const struct wal *w);

/* Replays the data directory into a fresh engine `e`, as at open (without
 * repairing anything): after a failed commit, the engine is rebuilt to what
 * the log holds. Returns 0, or -1 with a message. */
int wal_reload(struct wal *w, struct engine *e, int64_t now, char *err,
               size_t errlen);

/* Starts a compaction if one is due (or, with force, if none is running):
 * a snapshot of `e`, written in slices from the log's own events (or from
 * wal_tick without an event base). Call right after a successful
 * wal_commit, when the engine holds exactly what the log holds; does
 * nothing if records are buffered or the log is broken. `e` must stay the
 * engine until the compaction ends: wal_reload and wal_close stop it.
 * Returns 1 if a compaction started, 0 if not, -1 if it could not start
 * (logged; retried later). */
int wal_maybe_compact(struct wal *w, const struct engine *e, bool force);

/* True while a compaction runs. */
bool wal_compacting(const struct wal *w);

/* Housekeeping, about once a second (done by the log's own timer when it
 * has an event base; tests call it): advances a compaction (without an
 * event base), probes a broken log, notices a failed background sync. Returns
 * true if the log just became writable again. */
bool wal_tick(struct wal *w);

/* Sets a callback run when wal_tick turns the log writable again from its
 * own timer (so the store can tell the server). */
void wal_on_writable(struct wal *w, void (*fn)(void *ud), void *ud);

/* Appends "name:value" lines about the log (INFO). */
void wal_info(const struct wal *w,
              void (*emit)(void *ud, const char *name, const char *value),
              void *ud);

#endif
