/* core_int.h -- what the core's own modules share (not for front ends).
 *
 *   core.c     requests: validation, defaults, the clock, the store call
 *   wait.c     RESERVEs that wait for jobs, and waking them
 *   metrics.c  the metrics table
 *   snapshot.c what the store holds, for /metrics and the dashboard
 */
#ifndef DQ_CORE_INT_H
#define DQ_CORE_INT_H

#include "core/core.h"
#include "core/metrics.h"

struct call;
struct push_notes;
struct wait_table;

struct core {
    struct core_config cfg;
    struct event_base *base;
    const struct dq_store_ops *ops;
    struct dq_store *store;
    struct metrics *metrics;
    struct wait_table *waits;
    struct push_notes *notes; /* push_note.c */
    struct call *calls; /* free list */
    unsigned ncalls;
    bool stopping;
    void (*push_ready)(void *ud, struct dq_str topic, int64_t hint);
    void *push_ud;
    bool store_down;    /* the last store answer was UNAVAILABLE/TIMEOUT */
    char errbuf[512];   /* a validation error's message, during its callback */
};

/* --- wait.c --- */
struct wait_table *wait_table_new(void);
void wait_table_free(struct wait_table *t);
/* Issues a RESERVE and, if it finds nothing and timeout_ms != 0, waits
 * until a job arrives or the timeout (< 0 = forever) passes. Topics are
 * copied when it may wait; with timeout_ms 0 they are only read during the
 * call. Returns NULL when cb has been called already. */
struct core_wait *wait_reserve(struct core *c, const struct dq_str *topics,
                               size_t ntopics, uint32_t count,
                               int64_t timeout_ms, core_cb *cb, void *pd);
/* The store says topic may have ready jobs (store.h's on_ready). */
void wait_on_ready(struct core *c, struct dq_str topic, int64_t hint);
/* Answers every waiting RESERVE with no jobs. */
void wait_wake_all(struct core *c);
uint64_t wait_count(const struct core *c);

/* --- push_note.c --- */
struct push_notes *push_notes_new(void);
void push_notes_free(struct push_notes *pn);
/* PURGE: forgets the notes of every job of topic. */
void push_notes_drop_topic(struct core *c, struct dq_str topic);

/* --- core.c --- */
/* Records whether the store answered (status not UNAVAILABLE/TIMEOUT). */
void core_note_store(struct core *c, int status);
/* Jobs were handed to a client: records how late each was (fire lag). */
void core_handed_out(struct core *c, const struct dq_result *res);

#endif
