/* core.h -- delayq's protocol-free core (DESIGN §5).
 *
 * Every front end (RESP, HTTP, the pusher) reaches jobs through these calls
 * and nothing else. The core validates each field against the limits of
 * job.h, fills the ADD defaults, reads the clock once per request, calls the
 * store through its ops table, owns blocked RESERVEs and keeps the metrics
 * table. It knows no protocol: a request is a function call with typed
 * arguments, and it completes through a callback with a `struct dq_result`.
 *
 * Contract of every request function:
 *  - Strings (dq_str) are borrowed for the duration of the call only.
 *  - `cb(pd, res)` is called exactly once, possibly before the function
 *    returns (a validation error, or a store that completes at once),
 *    usually later from the event loop. `res` and everything it points to
 *    is valid only during the callback.
 *  - A validation error completes with status DQ_INVALID (or DQ_TOOBIG) and
 *    an errmsg that names the field, in the words of DESIGN §2 ("delay",
 *    "ttr", "topic"...). Front ends show it as it is.
 *  - Integers a front end could not parse at all are the front end's error
 *    (it knows the caller's spelling); the core checks ranges.
 *
 * Error convention of this layer: request functions return nothing and
 * report through the callback; core_open returns 0 or -1 with a message.
 */
#ifndef DQ_CORE_H
#define DQ_CORE_H

#include <stdbool.h>
#include <stdint.h>

#include "job.h"
#include "lib/hist.h"
#include "store/store.h"

struct event_base;
struct core;
struct core_wait;
struct metrics;

/* How many store gauges a snapshot carries (metrics_store_gauges). */
#define CORE_STORE_GAUGES 8
/* How many store histograms a snapshot carries (metrics_store_hists). */
#define CORE_STORE_HISTS 1

/* "Not given" for the optional integer fields below. */
#define CORE_UNSET INT64_MIN

struct core_config {
    struct event_base *base;
    const struct dq_store_ops *ops; /* the store; its cfg below */
    struct dq_store_config store;   /* base/on_ready/ud are set by the core */
    uint64_t max_body;
    uint32_t metrics_max_topics;    /* topics with their own series */
    const char *push_allow;         /* --push-allow: host patterns, NULL = any */
};

/* Opens the store and readies the core. Returns 0 and sets *out, or -1
 * with a message in err. Strings in cfg must outlive the core. */
int core_open(struct core **out, const struct core_config *cfg, char *err,
              size_t errlen);
/* Answers every blocked RESERVE (nil), closes the store (which completes
 * what it still holds) and frees the core. Accepts NULL. */
void core_close(struct core *c);

/* Stops taking work that could wait: blocked RESERVEs are answered now
 * (no jobs) and new ones do not block (graceful stop). */
void core_stop(struct core *c);

typedef void core_cb(void *pd, const struct dq_result *res);

/* ADD. The fields a client may leave out are CORE_UNSET (integers) or
 * empty strings. id "*" asks the store for a time-ordered id. */
struct core_add {
    struct dq_str topic, id, body;
    int64_t delay;          /* ms from now */
    int64_t at;             /* unix ms; not with delay */
    int64_t ttr, retries;
    int backoff_kind;       /* -1 = default, else enum dq_backoff_kind */
    int64_t backoff_base, backoff_max;
    bool replace;
    /* Push delivery (§9): an absolute http(s) URL the server POSTs the body
     * to when the job is due; empty = none (the job is for RESERVE). */
    struct dq_str url, content_type;
};
#define CORE_ADD_INIT                                                       \
    {.delay = CORE_UNSET, .at = CORE_UNSET, .ttr = CORE_UNSET,               \
     .retries = CORE_UNSET, .backoff_kind = -1,                              \
     .backoff_base = CORE_UNSET, .backoff_max = CORE_UNSET}

/* res: id. Errors: INVALID, TOOBIG, EXISTS, BUSY, FULL, store errors. */
void core_add(struct core *c, const struct core_add *a, core_cb *cb, void *pd);
/* res: n = how many of ids existed. */
void core_del(struct core *c, struct dq_str topic, const struct dq_str *ids,
              size_t nids, core_cb *cb, void *pd);
/* res: njobs 1, or 0 when there is no such job. */
void core_get(struct core *c, struct dq_str topic, struct dq_str id,
              core_cb *cb, void *pd);
/* res: n = how many of ids existed (any state). */
void core_ack(struct core *c, struct dq_str topic, const struct dq_str *ids,
              size_t nids, core_cb *cb, void *pd);
/* delay CORE_UNSET = the job's backoff. res: n = the new enum dq_state. */
void core_nack(struct core *c, struct dq_str topic, struct dq_str id,
               int64_t delay, core_cb *cb, void *pd);
/* A reserved job goes dead at once, whatever its retries (the pusher, on
 * a receiver's 410 Gone). res: n = DQ_DEAD. Errors: NOTRESERVED. */
void core_bury(struct core *c, struct dq_str topic, struct dq_str id,
               core_cb *cb, void *pd);
/* ttr CORE_UNSET = the job's own. res: n = the new deadline. */
void core_touch(struct core *c, struct dq_str topic, struct dq_str id,
                int64_t ttr, core_cb *cb, void *pd);
/* count CORE_UNSET = all. res: n = dead jobs moved to ready. */
/* One job by id: dead -> ready, attempts 0. res: n = 1 if it was dead. */
void core_kick_job(struct core *c, struct dq_str topic, struct dq_str id,
                   core_cb *cb, void *pd);
void core_kick(struct core *c, struct dq_str topic, int64_t count, core_cb *cb,
               void *pd);
/* state by name; count CORE_UNSET = 10. res: strs/nstrs, cursor. */
void core_list(struct core *c, struct dq_str topic, struct dq_str state,
               int64_t count, uint64_t cursor, core_cb *cb, void *pd);
/* res: n = jobs removed. */
void core_purge(struct core *c, struct dq_str topic, core_cb *cb, void *pd);
/* topic.len 0 = all topics. res: stats. */
void core_stats(struct core *c, struct dq_str topic, core_cb *cb, void *pd);
/* res: strs/nstrs. */
void core_topics(struct core *c, core_cb *cb, void *pd);

/* RESERVE: up to count (CORE_UNSET = 1) ready jobs from the topics, in
 * order. timeout_ms: CORE_UNSET = wait forever, 0 = do not wait.
 * res: jobs/njobs, 0 jobs when the wait ended without any.
 *
 * Returns NULL when cb has already been called; otherwise a handle that
 * stays valid until cb is called, for core_reserve_cancel. */
struct core_wait *core_reserve(struct core *c, const struct dq_str *topics,
                               size_t ntopics, int64_t count,
                               int64_t timeout_ms, core_cb *cb, void *pd);
/* The pusher's RESERVE: up to count ready push jobs of the topic (never
 * waits). res: jobs/njobs with url and content_type. */
void core_reserve_push(struct core *c, struct dq_str topic, uint32_t count,
                       core_cb *cb, void *pd);
/* Whether the store delivers push jobs (has reserve_push). */
bool core_can_push(const struct core *c);
/* Who is told when a topic may hold ready push jobs (the pusher): fn(ud,
 * topic, hint) as store.h's on_push_ready. Set once, before jobs move. */
void core_set_push_ready(struct core *c,
                         void (*fn)(void *ud, struct dq_str topic,
                                    int64_t hint),
                         void *ud);
/* Whether host may receive pushes (--push-allow). */
bool core_push_allowed(const struct core *c, struct dq_str host);

/* The client of a waiting RESERVE went away: cb will not be called, and
 * jobs reserved for it meanwhile are given back to the store at once. */
void core_reserve_cancel(struct core_wait *w);

/* A sentence for a status that came without errmsg ("the job is reserved
 * and cannot be replaced"); "failed" for one without a sentence. */
const char *core_status_message(int status);

/* Clients blocked in RESERVE now. */
uint64_t core_blocked(const struct core *c);

/* INFO: appends the store's lines ("name", "value") through emit. */
void core_store_info(struct core *c, dq_info_emit *emit, void *ud);
/* The store's name ("embedded", "redis"). */
const char *core_store_name(const struct core *c);

/* The store may complete what it holds (a pipeline's slice is done; see
 * dq_store_ops.push); and may start loading these jobs (prefetch). */
void core_push(struct core *c);
void core_prefetch(struct core *c, const struct dq_str *keys, size_t n);
/* Whether the store has prefetch (a front end parses ahead only then). */
bool core_can_prefetch(const struct core *c);

/* The last failed push attempt of a job (DESIGN §9), kept in memory for
 * GET and the dashboard; see core/push_note.c. */
struct core_push_note {
    int64_t at;        /* unix ms the attempt ended */
    uint32_t attempt;
    long status;       /* the receiver's HTTP status; 0 = no answer */
    char error[128];   /* what went wrong, in words */
};
/* The pusher notes a failed attempt (n), or forgets the job's note (n
 * NULL) after a delivery that succeeded. n is copied. */
void core_push_note(struct core *c, struct dq_str topic, struct dq_str id,
                    const struct core_push_note *n);
/* The job's note, or NULL; valid until the next core call. */
const struct core_push_note *core_push_note_get(const struct core *c,
                                                struct dq_str topic,
                                                struct dq_str id);

/* The metrics table every front end reads (core/metrics.h). */
struct metrics *core_metrics(struct core *c);

/* What the store holds, gathered for /metrics, INFO and the dashboard. */
struct core_topic_stats {
    struct dq_str topic;
    struct dq_stats stats;
};
struct core_snapshot {
    int status;                          /* DQ_OK, or why the store failed */
    const struct core_topic_stats *topics; /* every topic holding jobs */
    size_t ntopics;
    struct dq_stats total;               /* over all topics */
    int64_t log_bytes;                   /* the embedded log; -1 = none */
    /* The store's own gauges, by the index of metrics_store_gauges
     * (core/metrics.h); -1 = the store does not report it. */
    int64_t gauges[CORE_STORE_GAUGES];
    /* The store's own histograms, by the index of metrics_store_hists;
     * nbounds 0 = the store does not report it. Bounds in hist_bounds. */
    struct hist hists[CORE_STORE_HISTS];
    double hist_bounds[CORE_STORE_HISTS][HIST_MAX_BOUNDS];
};
typedef void core_snapshot_cb(void *pd, const struct core_snapshot *s);
/* Asks the store for its topics and each topic's STATS (not counted as
 * commands in the metrics) and calls cb once with all of them; the
 * snapshot is valid only during cb. cb may run before this returns. */
void core_snapshot(struct core *c, core_snapshot_cb *cb, void *pd);
/* 1 when the last answer from the store was not UNAVAILABLE/TIMEOUT. */
int64_t core_store_up(const struct core *c);

#endif
