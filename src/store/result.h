/* result.h -- the results a store builds before it completes them.
 *
 * A store completes an operation after the call returned (the embedded
 * store after its group commit, the Redis store when Redis answers), so
 * what a result points to -- an id, jobs with their strings, a list of
 * ids, counters -- is copied out of the store's state into a result set as
 * it is found, and kept there until the completion. Both stores build their
 * results here; each only says what it found.
 *
 * A set holds any number of results (the embedded store keeps one set for
 * every completion of a loop turn, the Redis store one per request). A
 * result's data is kept as offsets, because the set's memory moves as it
 * grows; res_fire turns them into the pointers of a struct dq_result.
 *
 * Invariants: the jobs or strings of one result are appended one after the
 * other, with no other result of the same set appended in between; a
 * result holds one kind of data. Growth failure aborts (lib/buf.h).
 */
#ifndef DQ_RESULT_H
#define DQ_RESULT_H

#include <stddef.h>
#include <stdint.h>

#include "lib/buf.h"
#include "store/store.h"

/* Where results keep their data. Zeroed = empty. */
struct res_set {
    struct buf bytes; /* strings */
    struct buf items; /* dq_job, dq_str or dq_stats, strings as offsets */
};

enum res_kind { RES_NONE, RES_ID, RES_JOBS, RES_STRS, RES_STATS };

/* One result: the fields of struct dq_result, its data in a set. Zeroed
 * (or res_start) = DQ_OK with nothing. */
struct res {
    int status;         /* enum dq_status */
    const char *errmsg; /* not copied: must live until res_fire */
    int64_t n;
    uint64_t cursor;
    enum res_kind kind;
    size_t off, cnt;    /* the data in the set: offset in items or bytes,
                           elements (bytes for RES_ID) */
};

/* Sets r to `status` with no data. */
static inline void res_start(struct res *r, int status) {
    *r = (struct res){.status = status};
}

/* The add result: a copy of id. */
void res_id(struct res_set *set, struct res *r, struct dq_str id);
/* Makes r a list of jobs, with none yet unless it is one already (get of
 * an absent job, reserve of nothing). res_job does it too. */
void res_jobs(struct res_set *set, struct res *r);
/* Appends a copy of j, strings included, to r's jobs. */
void res_job(struct res_set *set, struct res *r, const struct dq_job *j);
/* Appends a copy of v to r's strings (list ids, topic names). */
void res_str(struct res_set *set, struct res *r, struct dq_str v);
/* Makes r a list of strings, as res_jobs does for jobs. */
void res_strs(struct res_set *set, struct res *r);
/* The stats result: a copy of st. */
void res_stats(struct res_set *set, struct res *r, const struct dq_stats *st);
/* Drops r's data (it stays in the set until res_reset): a failed result
 * hands out no jobs, id, strings or stats. */
void res_clear(struct res *r);

/* Calls cb(pd, result) with r's fields and data. The data stays valid
 * until the set is reset or freed; res_fire is called once per result (it
 * turns the offsets into pointers in place). */
void res_fire(struct res_set *set, struct res *r, dq_store_cb *cb, void *pd);

/* Empties the set for new results, keeping up to `keep` bytes of memory
 * for each of its buffers. */
void res_reset(struct res_set *set, size_t keep);
/* Frees the set's memory. Accepts a zeroed set. */
void res_free(struct res_set *set);

#endif
