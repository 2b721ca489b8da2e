/* engine.h -- the in-memory job engine (DESIGN §2, §5).
 *
 * Pure and single-threaded: every call takes "now" (unix ms) as an argument;
 * the engine never reads a clock, never does I/O and never calls back into
 * the caller except through the hooks below. All transitions of DESIGN §2
 * happen here and nowhere else.
 *
 * Jobs are one allocation each, linked intrusively into a hierarchical
 * timing wheel (delayed jobs by due time, reserved jobs by lease end), a
 * per-topic ready FIFO, a per-topic dead list and a per-topic id table.
 * Topics are interned and freed when they hold no job.
 *
 * Far jobs (the tiered store, DESIGN §12): a delayed job whose store keeps
 * it on disk is held here only as its id and an opaque 48-bit `ref` (where
 * the store finds it), in a second per-topic table. It counts as a delayed
 * job everywhere (STATS, LIST, EXISTS on ADD, max_jobs), DEL and PURGE
 * remove it, and engine_load turns it into a whole job. engine_get does not
 * see it: the store reads it with engine_far_ref.
 *
 * Error convention: functions returning int return >= 0 on success and a
 * negative enum engine_err on failure; on failure nothing changed.
 * Pointers to jobs (struct dq_job views filled by the engine) point into
 * engine memory and are valid until the next engine call that changes state.
 */
#ifndef DQ_ENGINE_H
#define DQ_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job.h"

enum engine_err {
    ENGINE_EEXISTS = -1,
    ENGINE_EBUSY = -2,
    ENGINE_ENOTRESERVED = -3,
    ENGINE_EFULL = -4,
    ENGINE_ENOMEM = -5,
    ENGINE_ENOTFOUND = -6,
};

struct engine;

struct engine_hooks {
    /* A topic gained ready jobs (ready = how many it now holds). Called
     * from engine_advance (after the batch), engine_add, engine_nack,
     * engine_kick, engine_release. Must not call back into the engine. */
    void (*on_ready)(void *ud, struct dq_str topic, uint64_t ready);
    /* The same for push jobs (§9, a URL): ready = how many ready push jobs
     * the topic holds. Push jobs wait on their own FIFO per topic: only
     * engine_reserve_push takes them, never engine_reserve. May be NULL. */
    void (*on_push_ready)(void *ud, struct dq_str topic, uint64_t ready);
    /* A reserved job's lease ended in engine_advance: it went back to ready
     * (dead = false) or to dead. Lets a durable store log the change. */
    void (*on_expire)(void *ud, const struct dq_job *job, bool dead);
    /* A far job (engine_add_far) is gone: deleted, purged or replaced (not
     * loaded). `ref` is where its store keeps it. May be NULL. */
    void (*on_far_drop)(void *ud, uint64_t ref);
    /* engine_restore_far put back a far job kept at `ref` (recovery). */
    void (*on_far_restore)(void *ud, uint64_t ref);
    void *ud;
};

struct engine_config {
    uint64_t max_jobs;   /* 0 = no limit */
    struct engine_hooks hooks;
};

/* NULL on allocation failure. */
struct engine *engine_new(const struct engine_config *cfg, int64_t now);
/* Frees every job and topic. Accepts NULL. */
void engine_free(struct engine *e);

/* ADD (§2). `a->id` must not be "*": the caller generates ids. Returns the
 * new state (DQ_DELAYED or DQ_READY) or ENGINE_EEXISTS / EBUSY / EFULL /
 * ENOMEM. If out is non-NULL it receives a view of the job. */
int engine_add(struct engine *e, int64_t now, const struct dq_add *a,
               struct dq_job *out);

/* ADD of a far job: the same checks and counters as engine_add (EXISTS,
 * BUSY, FULL, REPLACE), but only the id and `ref` (< 2^48) are kept.
 * Returns DQ_DELAYED or a negative engine_err. The job's due time is the
 * store's business: it must load the job (engine_load) before then. */
int engine_add_far(struct engine *e, int64_t now, const struct dq_add *a,
                   uint64_t ref);

/* Recovery: puts back a far job, replacing any job with its topic and id
 * (a far one through on_far_drop), without counting it; calls
 * on_far_restore. Returns 0 or ENGINE_ENOMEM. */
int engine_restore_far(struct engine *e, struct dq_str topic,
                       struct dq_str id, uint64_t ref);

/* Recovery of many far jobs: engine_restore_far, later. Queues topic/id/ref
 * (copying the id) and restores the queue, sorted by id-table bucket, when
 * it is full or at engine_far_flush (or engine_expect_end); jobs of one id
 * keep their order. Until the flush, make no other engine call (none sees
 * the queued jobs). Both return 0 or ENGINE_ENOMEM (queued jobs may then be
 * lost: the recovery has failed). */
int engine_far_queue(struct engine *e, struct dq_str topic, struct dq_str id,
                     uint64_t ref);
int engine_far_flush(struct engine *e);

/* 1 and *ref if topic/id is a far job, else 0. */
int engine_far_ref(const struct engine *e, struct dq_str topic,
                   struct dq_str id, uint64_t *ref);

/* Turns the far job src->topic/src->id kept at `ref` into a whole job (the
 * fields of *src, which must be the job as added), delayed in the timing
 * wheel at its due time (even a past one: the next engine_advance makes it
 * ready, in due-time order; among equal due times it counts as scheduled
 * now); not counted as an ADD. Returns 1, 0 if there is no
 * such far job at that ref (deleted or replaced since: nothing to do), or
 * ENGINE_ENOMEM. */
int engine_load(struct engine *e, int64_t now, const struct dq_job *src,
                uint64_t ref);

/* The store moved a far job's record from `from` to `to` (compaction).
 * Returns 1, or 0 if topic/id is not a far job at `from`. */
int engine_far_move(struct engine *e, struct dq_str topic, struct dq_str id,
                    uint64_t from, uint64_t to);

/* Number of far jobs. */
uint64_t engine_far_count(const struct engine *e);

/* The far jobs of a topic, SCAN-style as engine_scan. */
uint64_t engine_scan_far(const struct engine *e, struct dq_str topic,
                         uint32_t buckets, uint64_t cursor,
                         void (*fn)(void *ud, struct dq_str id, uint64_t ref),
                         void *ud);

/* Removes a job in any state. Returns 1 if it existed, else 0. */
int engine_del(struct engine *e, struct dq_str topic, struct dq_str id);

/* Fills *out and returns 1 if the job exists, else 0. */
/* Starts loading what calls about these jobs will touch (their id-table
 * chains): keys[2i] is a topic, keys[2i+1] an id; n pairs. A hint for a
 * caller that has several requests in hand: their cache misses then overlap
 * instead of coming one after the other. */
void engine_prefetch(const struct engine *e, const struct dq_str *keys,
                     size_t n);

int engine_get(const struct engine *e, struct dq_str topic, struct dq_str id,
               struct dq_job *out);

/* Takes up to `count` ready jobs from the topics, in order (all of the first
 * topic's before the next), ready order within a topic: attempts += 1,
 * deadline = now + ttr. Fills out[0..n) and returns n (may be 0). The views
 * stay valid until the next state-changing engine call. */
int engine_reserve(struct engine *e, int64_t now, const struct dq_str *topics,
                   size_t ntopics, uint32_t count, struct dq_job *out);

/* RESERVE for the pusher: the same, from the topic's FIFO of ready push
 * jobs (those with a URL), which engine_reserve never takes from. */
int engine_reserve_push(struct engine *e, int64_t now, struct dq_str topic,
                        uint32_t count, struct dq_job *out);

/* ACK: removes the job in any state. Returns 1 if it existed, else 0. */
int engine_ack(struct engine *e, struct dq_str topic, struct dq_str id);

/* NACK: delay < 0 = the job's backoff; DQ_NACK_DEAD = dead at once. Returns the new state or
 * ENGINE_ENOTRESERVED. */
int engine_nack(struct engine *e, int64_t now, struct dq_str topic,
                struct dq_str id, int64_t delay);

/* TOUCH: ttr 0 = the job's own. Stores the new deadline in *deadline and
 * returns 0, or ENGINE_ENOTRESERVED. */
int engine_touch(struct engine *e, int64_t now, struct dq_str topic,
                 struct dq_str id, uint32_t ttr, int64_t *deadline);

/* reserved -> ready at the head of the ready FIFO, attempts -= 1 (a
 * delivery that never reached its client). Returns 1, or 0 if the job is
 * absent or not reserved. */
int engine_release(struct engine *e, struct dq_str topic, struct dq_str id);

/* KICK: up to count (0 = all) dead jobs -> ready, attempts = 0, due = now,
 * oldest dead first. Returns how many moved. */
int64_t engine_kick(struct engine *e, int64_t now, struct dq_str topic,
                    uint64_t count);

/* KICK of one job: dead -> ready, attempts = 0, due = now. Returns 1, or 0
 * if the job is absent or not dead. */
int engine_kick_job(struct engine *e, int64_t now, struct dq_str topic,
                    struct dq_str id);

/* PURGE: removes every job of the topic (its counters stay, see
 * engine_stats). Returns how many. The jobs are gone at once for every
 * call; of a topic with more than a few thousand, the memory is freed by
 * engine_reap afterwards. */
int64_t engine_purge(struct engine *e, struct dq_str topic);

/* LIST, SCAN-style over the topic's id table (reverse-binary cursor, as
 * Redis SCAN): calls fn for jobs in `state` from `cursor` on, bucket by
 * bucket, until at least `count` were reported (the last bucket whole, so
 * a page may hold a few more), the table ends, or about 65536 jobs and
 * buckets were looked at. So a page is short only at the end of the scan,
 * or when the state holds fewer than about one job in 65536 of the topic's.
 * Returns the next cursor, 0 when done. Every job present in that state for
 * the whole scan is reported at least once, even when the table grows or
 * shrinks between calls. */
uint64_t engine_list(const struct engine *e, struct dq_str topic, int state,
                     uint32_t count, uint64_t cursor,
                     void (*fn)(void *ud, struct dq_str id), void *ud);

/* Every job in RAM of the topic, in any state, SCAN-style: visits about `buckets`
 * buckets of its id table from `cursor` and calls fn for each job there.
 * Returns the next cursor, 0 when done. Every job present for the whole scan
 * is visited at least once. fn must not change the engine. */
uint64_t engine_scan(const struct engine *e, struct dq_str topic,
                     uint32_t buckets, uint64_t cursor,
                     void (*fn)(void *ud, const struct dq_job *j), void *ud);

/* Frees up to about `budget` jobs of purged topics. Returns true if some
 * are left: call again soon (the embedded store does, between I/O). */
bool engine_reap(struct engine *e, uint32_t budget);

/* Gives back to the system up to `max` pages of memory that jobs no longer
 * use (each costs tens of microseconds); returns how many still wait. */
uint64_t engine_give_back(struct engine *e, uint64_t max);

/* Counters and jobs per state, of one topic or (topic.len == 0) of all.
 * A topic keeps its counters after its last job goes while it is among the
 * most recently emptied topics (IDLE_TOPICS_MAX); an unknown or long-empty
 * topic gives zeros. */
void engine_stats(const struct engine *e, struct dq_str topic,
                  struct dq_stats *out);

/* Calls fn for every topic holding at least one job. */
void engine_topics(const struct engine *e,
                   void (*fn)(void *ud, struct dq_str topic), void *ud);

/* Number of jobs held, all states. */
uint64_t engine_count(const struct engine *e);

/* The earliest due time or lease end, or INT64_MAX if there is none. It
 * may be earlier than the true next expiry (the start of a coarse wheel slot),
 * never later: advancing then simply finds nothing due and tightens it. */
int64_t engine_next_expiry(const struct engine *e);

/* Applies every timed transition with a time <= now, in time order (due
 * jobs -> ready, ended leases -> ready with due = the lease end, or dead), at
 * most `budget` jobs. Returns true if it stopped early (more may be due, or
 * a large slot is still being cascaded down the wheel): call again soon. */
bool engine_advance(struct engine *e, int64_t now, uint32_t budget);

/* For the durable store: puts back a job read from a log or snapshot in the
 * state given by *j (including attempts and deadline), without counting it
 * in the counters. Returns 0, ENGINE_EEXISTS or ENGINE_ENOMEM. */
int engine_restore(struct engine *e, int64_t now, const struct dq_job *j);

/* Bulk loads (recovery): engine_expect announces one job about to be
 * restored into topic (engine_expect_far: one far job, of that id);
 * engine_expect_done sizes every announced topic's id table for its jobs at
 * once, so restoring them never rehashes, and when many far jobs were
 * announced, has a helper thread fault in the memory of their entries ahead
 * of use. engine_expect_end ends the load: restores what engine_far_queue
 * holds, frees the queue and stops the helper (returns 0 or ENGINE_ENOMEM,
 * as engine_far_flush). Hints only: no job changes, and a failure to
 * allocate is ignored. */
void engine_expect(struct engine *e, struct dq_str topic);
void engine_expect_far(struct engine *e, struct dq_str topic, struct dq_str id);
void engine_expect_done(struct engine *e);
int engine_expect_end(struct engine *e);

/* Calls fn for every job (any order). fn must not change the engine. */
void engine_foreach(const struct engine *e,
                    void (*fn)(void *ud, const struct dq_job *j), void *ud);

/* Replaces the counters (for a durable store's recovery). */
void engine_set_counters(struct engine *e, const struct dq_stats *totals);

#endif
