/* tier.h -- far segments: the disk tier of the embedded store (DESIGN §12,
 * docs/log-format.md "Far segments").
 *
 * A job due beyond the memory horizon is written whole into a segment file
 * of its time window (`<data-dir>/far/NNNNN.far`, NNNNN a slot number) and
 * kept in the engine only as its id and a 48-bit ref (slot << 32 | offset of
 * its record). The log holds a small FAR record naming the ref, so the log
 * alone says which far jobs exist; a segment only holds their bodies.
 *
 * A window [start, start + horizon) opens when start <= now + horizon: from
 * then on its jobs are added to RAM, and its segments are loaded into the
 * engine in bounded steps (tier_load_step), each loaded job logged as a LOAD
 * record. Once a segment is read to its end and those records are durable,
 * its file is deleted (tier_unlink_loaded). A segment is written by one run
 * of delayqd only: after a restart new far jobs go to new segments, so a
 * tail torn by a crash is never written after.
 *
 * Error convention: int functions return 0 (or a count) on success and -1
 * on failure with errno set or a message in err. Destructors accept NULL.
 */
#ifndef DQ_TIER_H
#define DQ_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job.h"

struct buf;

#define TIER_DIR "far"

struct tier_config {
    const char *dir;      /* the data directory; segments go in dir/far */
    int64_t horizon_ms;   /* 0: no job goes far; existing segments load now */
    int fsync_mode;       /* enum dq_fsync */
};

struct tier;

/* Opens the far directory (creating it when horizon_ms > 0) and reads the
 * header of every segment in it. Returns 0 and *out (NULL when there is no
 * directory and nothing may go far), or -1 with a message naming the file. */
int tier_open(struct tier **out, const struct tier_config *cfg, char *err,
              size_t errlen);

/* Writes nothing that is pending (the store commits first); frees. */
void tier_close(struct tier *t);

/* True if a job due at `due`, added at `now`, goes to disk. */
bool tier_far(const struct tier *t, int64_t now, int64_t due);

/* Buffers the whole job *j for its window's segment and gives its ref.
 * Returns 0, or -1 if it cannot go far (no free slot): keep it in RAM. */
int tier_place(struct tier *t, const struct dq_job *j, uint64_t *ref);

/* Takes back the last tier_place (the engine refused the job). */
void tier_unplace(struct tier *t);

/* Group commit: writes the buffered records (one pwrite per segment) and,
 * with --fsync always, syncs them. Returns 0, or -1 (errno): the segments
 * are cut back to what they held, and the caller fails the batch. */
int tier_write(struct tier *t);

/* Drops what is buffered (the log write failed) and rewinds the segments
 * being loaded to their start (the engine is being rebuilt from the log). */
void tier_rewind(struct tier *t);

/* A far job is gone (engine hook on_far_drop). */
void tier_drop(struct tier *t, uint64_t ref);

/* GET of a far job: reads its record at ref into *out (body in *scratch,
 * topic and id as given). Returns 1, or 0 if it cannot be read (logged). */
int tier_read(struct tier *t, uint64_t ref, struct dq_str topic,
              struct dq_str id, struct buf *scratch, struct dq_job *out);

/* Loading. The time (unix ms) when tier_load_step has work next: <= now if
 * it has now, INT64_MAX if never. */
int64_t tier_load_at(const struct tier *t, int64_t now);

/* Reads up to `budget` records of the segments whose window is open,
 * calling load(ud, job, ref) for each (the store puts it in the engine and
 * logs it; it returns 1 if the job was still far there, else 0). With no
 * loading to do, compacts a mostly dead segment (fewer than a quarter of
 * its records live): move(ud, job, from) for each of its records, which
 * places the job anew (tier_place), points the engine and the log at the new
 * place and returns 1 if the job was still far at `from`. Returns true if
 * more work is waiting now. */
bool tier_load_step(struct tier *t, int64_t now, uint32_t budget,
                    int (*load)(void *ud, const struct dq_job *j,
                                uint64_t ref),
                    int (*move)(void *ud, const struct dq_job *j,
                                uint64_t from),
                    void *ud);

/* Live counts (after a restart or a reload): begin, one tier_recount per
 * far job's ref, end. */
void tier_recount_begin(struct tier *t);
void tier_recount(struct tier *t, uint64_t ref);
void tier_recount_end(struct tier *t);

/* Checking segments. Reading every far segment through takes as long as
 * reading them from disk (18 GB for 100 million far jobs), so the start
 * only checks what is cheap and then has a helper thread read the rest in
 * the background.
 *
 * tier_check, after the replay (tier_recount has seen every far job): reads
 * through the segments named in far/DAMAGED (damage an earlier check found)
 * and those whose last record a far job points to is not whole and valid (a
 * lost or cut write); returns the number of damaged places found there: a
 * bad record with valid ones after it, or a torn tail that a far job's
 * record lies in (a tail none does is what a crash leaves: ignored).
 * tier_damage describes place i (file, offset, what is wrong) into msg.
 *
 * tier_check_background, once the store serves: a thread at the lowest CPU
 * and I/O priority reads every segment through, dropping from the page
 * cache what it alone brought in; damage it finds is logged, counted in
 * INFO (far_damaged_places) and written to far/DAMAGED, so that the next
 * start stops there. tier_close stops it. */
size_t tier_check(struct tier *t);
void tier_damage(const struct tier *t, size_t i, char *msg, size_t len);
void tier_check_background(struct tier *t);

/* True if a far job's record at ref lies in a damaged place. */
bool tier_damaged(const struct tier *t, uint64_t ref);

/* --repair, once the store has dropped every far job tier_damaged names:
 * writes each damaged place over with dead records (or cuts a torn tail
 * off), syncs, and removes far/DAMAGED, so that the segments read clean.
 * Returns 0, or -1 with a message naming the file. */
int tier_repair(struct tier *t, char *err, size_t errlen);

/* True (once) if a segment was created since the last call: its window's
 * opening is a new time for tier_load_at. */
bool tier_created(struct tier *t);

/* True if loaded segments wait for their LOAD records to be durable. */
bool tier_unlink_waiting(const struct tier *t);

/* Deleting loaded segments: once their LOAD (or MOVE) records are committed,
 * tier_unlink_mark picks the segments waiting; once those records are
 * durable (wal_durable) and tier_unlink_ready says the segments written up
 * to then are synced too, tier_unlink_loaded deletes the picked ones. */
void tier_unlink_mark(struct tier *t);
bool tier_unlink_ready(const struct tier *t);
void tier_unlink_loaded(struct tier *t);

/* INFO lines: far segments, their bytes, loading progress. */
void tier_info(const struct tier *t,
               void (*emit)(void *ud, const char *name, const char *value),
               void *ud);

#endif
