/* store.h -- the asynchronous store interface (DESIGN §5).
 *
 * The server reaches job state only through a `struct dq_store_ops`, a const
 * table of operations, and never tests which store it has. Two stores
 * implement it: the embedded one (engine + append-only log, store/embedded.c)
 * and the Redis one (store/redis.c).
 *
 * Contract of every operation:
 *  - Arguments have been validated by the server against the limits of
 *    job.h; strings (dq_str) are only borrowed for the duration of the call.
 *  - The operation completes by calling `cb(privdata, res)` exactly once,
 *    possibly before the operation function returns (a store may complete
 *    synchronously) but usually later, from the event loop: the embedded
 *    store completes after its group commit, the Redis store when Redis
 *    replies. `res` and everything it points to is valid only during the
 *    callback. Completions of one store may come in any order; the server
 *    keeps replies in request order itself.
 *  - Errors come back in res->status (enum dq_status) with an optional
 *    human-readable res->errmsg; when status is not DQ_OK nothing was
 *    changed, except where a status below says otherwise.
 *  - Operations that change state (all but get, list, stats, topics) are
 *    durable by the store's own definition when cb sees DQ_OK.
 *
 * Ready notifications: a store calls cfg->on_ready(cfg->ud, topic, hint)
 * whenever jobs in `topic` may have become ready (an ADD of a due job, a due
 * time reached, a lease that ended, a KICK, a NACK with no delay, a message
 * from another instance). `hint` is how many ready jobs the topic holds, or
 * -1 if the store does not know. The server answers by calling reserve for
 * the clients blocked on that topic. on_ready may run inside any store call,
 * after the store's state is consistent; a store never calls it from inside
 * reserve.
 *
 * Push jobs (§9: added with a URL) are delivered by the server itself, never
 * handed to a client: reserve never returns one, and a store tells of them
 * through cfg->on_push_ready(cfg->ud, topic, hint) instead of on_ready; the
 * pusher takes them with reserve_push. Every other operation treats them as
 * any job (GET shows url and content_type).
 */
#ifndef DQ_STORE_H
#define DQ_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job.h"

struct event_base;

/* The store's contract with the loop: a store keeps at most this many
 * events of its own active (ready to run in the current loop turn) at any
 * time -- its batch or commit event. A front end compares the loop's count
 * of active events against it (with its own) to tell whether other work is
 * waiting in this turn; see front/resp/conn.c's slices. */
#define DQ_STORE_ACTIVE_EVENTS 1

enum dq_status {
    DQ_OK = 0,
    DQ_EXISTS,       /* ADD: id taken */
    DQ_BUSY,         /* ADD REPLACE: the job is reserved */
    DQ_NOTRESERVED,  /* NACK, TOUCH, RELEASE: job absent or not reserved */
    DQ_FULL,         /* ADD: --max-jobs reached */
    DQ_UNAVAILABLE,  /* the store cannot be reached; nothing was changed */
    DQ_IOERR,        /* the write failed (disk full, I/O error); nothing changed */
    DQ_NOMEM,        /* out of memory; nothing changed */
    DQ_TIMEOUT,      /* sent to the store, no answer in time: the change
                        may or may not have happened */
    /* Set by the core, never by a store: */
    DQ_INVALID,      /* a field is malformed or out of range (errmsg names it) */
    DQ_TOOBIG,       /* the body is longer than --max-body */
    DQ_NOTFOUND,     /* no such job (HTTP 404; RESP answers nil instead) */
};

/* The RESP error code of a status ("EXISTS", "BUSY", ...); "ERR" for the
 * ones without a code of their own. */
const char *dq_status_code(int status);

/* What an operation completes with. Which fields are set depends on the
 * operation; see each one below. */
struct dq_result {
    int status;               /* enum dq_status */
    const char *errmsg;       /* optional detail for a non-OK status */
    int64_t n;                /* integer result */
    struct dq_str id;         /* add: the job's id */
    const struct dq_job *jobs;/* get (0 or 1), reserve (0..count) */
    size_t njobs;
    const struct dq_str *strs;/* list: ids; topics: topic names */
    size_t nstrs;
    uint64_t cursor;          /* list: next cursor, 0 = done */
    const struct dq_stats *stats;
};

typedef void dq_store_cb(void *privdata, const struct dq_result *res);

struct dq_store; /* opaque; each store defines it */

struct dq_store_config {
    struct event_base *base;  /* the server's loop; the store adds its events */
    const char *url;          /* --store, NULL = embedded */
    const char *data_dir;     /* --data-dir (embedded) */
    int fsync_mode;           /* enum dq_fsync */
    bool repair;              /* --repair (embedded) */
    uint64_t max_jobs;        /* 0 = no limit */
    int64_t memory_horizon_ms;/* embedded: jobs due later go to disk; 0 = none */
    int64_t (*clock)(void *ud); /* unix ms; NULL = the real clock */
    void (*on_ready)(void *ud, struct dq_str topic, int64_t hint);
    /* The same for push jobs (they never wake on_ready); may be NULL. */
    void (*on_push_ready)(void *ud, struct dq_str topic, int64_t hint);
    void *ud;                 /* passed to clock and the on_ functions */
};

enum dq_fsync { DQ_FSYNC_ALWAYS, DQ_FSYNC_EVERYSEC, DQ_FSYNC_NO };

/* The INFO line callback of dq_store_ops.info. */
typedef void dq_info_emit(void *ud, const char *name, const char *value);

struct dq_store_ops {
    const char *name;

    /* Opens a store on cfg->base. Returns 0 and sets *out, or -1 with a
     * message in err (recovery failed, Redis URL malformed, ...). The config
     * is copied; strings in it must outlive the store. */
    int (*open)(struct dq_store **out, const struct dq_store_config *cfg,
                char *err, size_t errlen);

    /* Flushes and syncs what is pending, completes every operation still in
     * flight (with DQ_UNAVAILABLE if it cannot finish) and frees the store.
     * Synchronous; accepts NULL. */
    void (*close)(struct dq_store *s);

    /* ADD. res: id. Errors: EXISTS, BUSY, FULL. */
    void (*add)(struct dq_store *s, const struct dq_add *a, dq_store_cb *cb,
                void *pd);
    /* DEL. res: n = how many of ids existed. */
    void (*del)(struct dq_store *s, struct dq_str topic,
                const struct dq_str *ids, size_t nids, dq_store_cb *cb,
                void *pd);
    /* GET. res: jobs/njobs = 1, or njobs = 0 if absent. */
    void (*get)(struct dq_store *s, struct dq_str topic, struct dq_str id,
                dq_store_cb *cb, void *pd);
    /* One non-blocking RESERVE attempt: up to `count` ready jobs, taken from
     * the topics in order (all of the first topic's before the second's).
     * res: jobs/njobs (0 if none ready). Blocking is the server's business. */
    void (*reserve)(struct dq_store *s, const struct dq_str *topics,
                    size_t ntopics, uint32_t count, dq_store_cb *cb,
                    void *pd);
    /* RESERVE for the pusher: up to `count` ready push jobs of one topic,
     * as reserve does for the others. res: jobs/njobs, with url and
     * content_type. NULL in a store without push delivery (ADD with a URL
     * is then refused). */
    void (*reserve_push)(struct dq_store *s, struct dq_str topic,
                         uint32_t count, dq_store_cb *cb, void *pd);
    /* ACK. res: n = how many of ids existed (any state). */
    void (*ack)(struct dq_store *s, struct dq_str topic,
                const struct dq_str *ids, size_t nids, dq_store_cb *cb,
                void *pd);
    /* NACK. delay < 0 = the job's backoff; DQ_NACK_DEAD (job.h) = dead at
     * once whatever its retries (a push receiver answered 410). res: n = the new enum dq_state.
     * Errors: NOTRESERVED. */
    void (*nack)(struct dq_store *s, struct dq_str topic, struct dq_str id,
                 int64_t delay, dq_store_cb *cb, void *pd);
    /* TOUCH. ttr 0 = the job's own. res: n = the new deadline.
     * Errors: NOTRESERVED. */
    void (*touch)(struct dq_store *s, struct dq_str topic, struct dq_str id,
                  uint32_t ttr, dq_store_cb *cb, void *pd);
    /* Gives back a job that was reserved for a client that went away before
     * it could be told: reserved -> ready, attempts -= 1, at the head of the
     * ready queue. res: n = 1 if it was reserved, else 0. */
    void (*release)(struct dq_store *s, struct dq_str topic, struct dq_str id,
                    dq_store_cb *cb, void *pd);
    /* KICK of one job by id: dead -> ready, attempts 0. res: n = 1 if it
     * was dead, else 0 (absent or in another state). */
    void (*kick_job)(struct dq_store *s, struct dq_str topic, struct dq_str id,
                     dq_store_cb *cb, void *pd);
    /* KICK. count 0 = all. res: n = dead jobs moved to ready. */
    void (*kick)(struct dq_store *s, struct dq_str topic, uint64_t count,
                 dq_store_cb *cb, void *pd);
    /* LIST, SCAN-style: every job that is in `state` for the whole scan is
     * returned at least once; cursor 0 starts. res: strs/nstrs, cursor. */
    void (*list)(struct dq_store *s, struct dq_str topic, int state,
                 uint32_t count, uint64_t cursor, dq_store_cb *cb, void *pd);
    /* PURGE. res: n = jobs removed. */
    void (*purge)(struct dq_store *s, struct dq_str topic, dq_store_cb *cb,
                  void *pd);
    /* STATS; topic.len 0 = all topics. res: stats. */
    void (*stats)(struct dq_store *s, struct dq_str topic, dq_store_cb *cb,
                  void *pd);
    /* TOPICS. res: strs/nstrs, the topics holding at least one job. */
    void (*topics)(struct dq_store *s, dq_store_cb *cb, void *pd);

    /* The server holds the next requests of a pipeline: these n jobs
     * (keys[2i] a topic, keys[2i+1] an id) are about to be used. The store
     * may start loading what it will need. A hint; may be NULL. */
    void (*prefetch)(struct dq_store *s, const struct dq_str *keys, size_t n);

    /* The server has dispatched a slice of one client's pipeline and more
     * of it is waiting. The store may complete what it holds now (write
     * its batch, send its commands), so that the first replies leave while
     * the rest is handled and the client refills its pipeline meanwhile.
     * A hint: a store may keep batching (one fdatasync per loop turn under
     * --fsync always). Synchronous; may be NULL. */
    void (*push)(struct dq_store *s);

    /* Appends "name:value\r\n" lines about the store to INFO's text.
     * Synchronous; may be NULL. */
    void (*info)(struct dq_store *s, dq_info_emit *emit, void *ud);
};

/* Emits one INFO line with an integer value. */
void dq_info_int(dq_info_emit *emit, void *ud, const char *name, int64_t v);

extern const struct dq_store_ops dq_store_embedded;
extern const struct dq_store_ops dq_store_redis;

/* The store for a --store URL: embedded for NULL or "", redis for redis://,
 * redis-cluster:// and redis-sentinel://; NULL for anything else. */
const struct dq_store_ops *dq_store_for_url(const char *url);

#endif
