/* redis_int.h -- what the files of the Redis store share (not an API: only
 * src/store/redis*.c include it).
 *
 * The store is split by job:
 *   redis.c        the store's operations, requests and their life
 *                  (submission, completion, ids), configuration and INFO;
 *   redis_plan.c   planning (which shards a request touches, in which units)
 *                  and the script calls' arguments (the outbox and builders);
 *   redis_reply.c  decoding the replies (script results, records, GET, WAIT)
 *                  and completing the units;
 *   redis_sched.c  topics and shards, the timer heap, the registry, pub/sub
 *                  wakeups, carries and the sweep.
 * The Lua script is src/store/lua/delayq.lua + far.lua; connections are
 * redis_client.c (Sentinel: redis_sentinel.c); URLs and key slots redis_url.c.
 *
 * Request life: submitted (waiting for the store to be configured, or in
 * the outbox as units, or queued for a plain command) -> flushed at the end
 * of the loop iteration into script calls -> completed from the reply (or
 * failed as UNAVAILABLE / TIMEOUT). Every request completes exactly once,
 * from the loop, never inside the op function that submitted it.
 *
 * Conventions: functions shared between the files are prefixed rs_; none
 * reports an error by return value except where stated: failures go into
 * the request (rs_req_fail) and complete with it.
 */
#ifndef DQ_REDIS_INT_H
#define DQ_REDIS_INT_H

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/htab.h"
#include "store/redis_client.h"
#include "store/redis_rec.h"
#include "store/redis_url.h"
#include "store/result.h"
#include "store/store.h"

#define NKEYS 9                  /* keys per group */
#define CALL_TIMEOUT_US 1800000  /* every request answers within 2 s */
#define SPARE_SET_KEEP 4096      /* a spare result set keeps buffers up to this */
#define MAX_CALL_REQS 128        /* requests per script call */
#define MAX_CALL_BYTES (1 << 20) /* argument bytes per script call */
#define MAX_CALL_JOBS 2000       /* jobs to reserve per script call */
#define MAX_CALL_GETS 16         /* GETs per script call */
#define MAX_UNIT_GROUPS 64       /* groups per unit (standalone) */
#define SWEEP_MS 900
#define WAIT_MS 1000             /* replicas=N: WAIT's timeout */
#define DRAIN_MS 2000

enum op {
    OP_ADD, OP_DEL, OP_ACK, OP_GET, OP_RESERVE, OP_NACK, OP_TOUCH,
    OP_RELEASE, OP_KICK, OP_LIST, OP_PURGE, OP_STATS, OP_TOPICS, OP_CARRY,
    OP_KICKJOB, OP_RESERVE_PUSH,
};

/* The script's name for each op, and whether its units run one after the
 * other (they share a count) or all at once. */
struct rs_opinfo {
    const char *lua;
    bool sequential;
};
extern const struct rs_opinfo OPS[]; /* indexed by enum op (redis.c) */

/* Whether an op changes jobs: when one of its calls was sent and not
 * answered, the change may have been made (TIMEOUT, not UNAVAILABLE).
 * RESERVE counts as a read: jobs a lost reply may have reserved come back
 * when their lease ends, as for a consumer that died, so the client (and a
 * blocked RESERVE, which keeps waiting on UNAVAILABLE) can simply go on. */
static inline bool op_writes(enum op op) {
    return op != OP_GET && op != OP_LIST && op != OP_STATS && op != OP_TOPICS &&
           op != OP_CARRY && op != OP_RESERVE && op != OP_RESERVE_PUSH;
}

/* Script result codes. */
enum { SR_OK = 0, SR_EXISTS = 1, SR_BUSY = 2, SR_NOTRESERVED = 3, SR_TAKEN = 4 };

struct rtopic;

/* One shard of one topic: a hash tag, hence one cluster slot. */
struct rshard {
    struct rtopic *t;
    unsigned idx;
    int slot;          /* -1 standalone */
    char *tag;         /* "{...}:" -- keys are tag + "pool", ... */
    size_t taglen;
    int64_t next;      /* next due time known here; INT64_MAX = none */
    size_t hpos;       /* heap index + 1; 0 = not in the heap */
    uint64_t msg_stamp; /* s->msg_counter when a message lowered next */
    uint64_t bstamp;   /* builder dedupe */
    uint32_t bidx;
};

struct rtopic {
    struct hnode hn;
    uint64_t h;
    char *name;
    size_t len;
    bool registered;  /* in <prefix>:topics as far as we know */
    bool registering;
    uint64_t seen;    /* sweep number that last saw it in the registry */
    unsigned rr;      /* reserve round robin */
    struct rshard *sh;
};

struct rreq;

/* The part of a request that goes in one script call: groups [g0, g0+ng). */
struct unit {
    struct rreq *rq;
    size_t g0, ng;
    struct unit *next;
};

#define REQ_MEM 192 /* copies of a request's strings that fit in the request */

struct rreq {
    struct dq_store *s;
    struct rreq *next;      /* waiting or done list */
    enum op op;
    dq_store_cb *cb;
    void *pd;
    int64_t deadline;
    /* inputs, owned */
    char *mem;
    struct dq_str topic;
    struct dq_str *topics;  /* reserve, reserve_push */
    size_t ntopics;
    struct dq_str *ids;     /* del/ack; ids[0] for one-id ops */
    size_t nids;
    struct dq_add add;      /* strings point into mem / idbuf */
    char idbuf[48];         /* generated id */
    bool gen;
    bool counted;           /* in s->adds_inflight */
    int tries;
    bool retry;             /* add: the generated id was taken, send again */
    bool kick_all;
    int64_t delay;
    uint32_t ttr;
    uint64_t count;         /* reserve/kick: still wanted (kick: 0 = all) */
    int state;
    uint64_t cursor;
    /* plan */
    struct rshard **gs;
    size_t ngs;
    size_t *gids;           /* del/ack: id indices ordered by group */
    size_t *gcnt;           /* del/ack: ids per group */
    struct unit *units;
    size_t nunits, next_unit, pending;
    size_t units_ok;        /* units whose calls were answered */
    int phase;              /* topics / all-stats: 0 = registry first */
    /* results */
    int status;
    char errbuf[200];
    int64_t n;
    uint64_t rcursor;
    struct dq_stats st;
    struct res_set set;     /* the jobs or strings found (store/result.h) */
    struct res res;         /* their result; status, n, ... are above */
    int64_t *hl;            /* carry/topics: jobs per group */
    void (*internal)(struct rreq *rq); /* completion of internal requests */
    /* room for what most requests need, so that they need no malloc: the
     * arrays above point here when theirs fit (REQ_ARRAY) */
    struct {
        char mem[REQ_MEM];
        struct dq_str strs[2];
        struct rshard *gs[1];
        size_t gids[1], gcnt[1];
        struct unit units[1];
    } in;
};

/* Memory for n elements of size sz, for one of rq's arrays: its room in
 * the request (room, cap elements) when they fit, else the heap. old, the
 * array's memory so far, is freed unless it is the room. Not zeroed. */
void *rs_req_array(struct rreq *rq, void *old, void *room, size_t cap, size_t n,
                   size_t sz);
/* The same with the room named by its field in rq->in. */
#define REQ_ARRAY(rq, old, field, n)                                              \
    rs_req_array((rq), (old), (rq)->in.field,                                  \
                 sizeof (rq)->in.field / sizeof (rq)->in.field[0], (n),        \
                 sizeof (rq)->in.field[0])

struct builder {
    int slot;
    uint64_t stamp;
    struct rshard **groups;
    size_t ng, gcap;
    struct unit **units;
    size_t nu, ucap;
    struct buf reqs;
    size_t nargs;
    uint64_t njobs;           /* jobs its reserves may take */
    bool reads;               /* holds GETs: whole records come back */
    /* Units merge: consecutive single-shard RESERVEs of one shard become
     * one script request for all their jobs (a request costs the script
     * ~4 us of Lua whatever its COUNT), handed back in unit order; so do
     * ACKs (and DELs), ADDs and GETs, each still told its own result. */
    size_t nreq;              /* script requests */
    struct umap *um;          /* per unit (ucap of them) */
    bool merge_open;          /* the last request may take more units */
    enum op merge_op;         /* its op */
    uint32_t merge_gi;        /* its group */
    size_t merge_off;         /* reserve: its fixed-width COUNT in reqs;
                                 del/ack: its fixed-width nargs */
    size_t merge_m_off;       /* del/ack: its fixed-width count of requests */
    uint64_t merge_count;     /* reserve: COUNT; del/ack: nargs */
    uint64_t merge_m;         /* del/ack: requests merged */
};

/* How a unit's result is laid out in its request's: its own (a RESERVE
 * takes its share of the jobs), or one count among those of merged
 * ACKs/DELs (code, sum, counts...), or one pair among those of merged ADDs
 * (code, then code and new per add), or one value among those of merged
 * GETs (code, then a record or nil per GET). */
enum { UM_PLAIN, UM_DELS, UM_ADDS, UM_GETS };

/* Where a unit's result is in the call's reply. */
struct umap {
    uint32_t req;             /* the script request */
    uint32_t sub;             /* merged: its place in the request */
    uint8_t form;             /* UM_PLAIN, UM_DELS, UM_ADDS, UM_GETS */
    uint64_t want;            /* reserve: jobs it asked for */
};

struct scall { /* a script call in flight */
    struct dq_store *s;
    struct unit **units;
    struct umap *um;
    size_t nu, nreq;
    struct rshard **groups;
    size_t ng;
    uint64_t msg_stamp;
    int slot;
    int64_t now; /* the script's now (ARGV): reserves' deadlines count from it */
};

struct dq_store {
    struct dq_store_config cfg;
    struct redis_url url;
    struct rcli *cli;
    char inst[17];
    char chan[REDIS_PREFIX_MAX + 16];
    char regkey[REDIS_PREFIX_MAX + 16];
    char cfgkey[REDIS_PREFIX_MAX + 16];
    bool configured, configuring, closing;
    unsigned K;
    struct htab topics;
    size_t ntopics;
    /* timers */
    struct rshard **heap;
    size_t hn, hcap;
    struct event *timer_ev;
    int64_t timer_at;
    struct event *sweep_ev;
    struct event *flush_ev;
    struct event *wait_ev;  /* fails requests waiting for the store too long */
    bool cfg_warned;        /* "cannot read <prefix>:shards" logged */
    struct rwarn script_warn; /* script calls answered with an error */
    bool failed_reserves;   /* a RESERVE failed as unavailable */
    uint64_t sweeps;
    bool sweeping;
    /* requests */
    struct rreq *wait_head, *wait_tail; /* until configured */
    struct rreq *done_head, *done_tail; /* completed, callback pending */
    struct rreq *raw_head, *raw_tail;   /* GETs and registry reads to send */
    struct unit *out_head, *out_tail;   /* to be flushed */
    uint64_t bstamp;
    uint64_t msg_counter;
    struct buf scratch;
    /* the result sets of freed requests, with their memory: most requests
     * fill one with an id or a few jobs, which then costs no malloc */
    struct res_set spare_sets[64];
    size_t nspare;
    int32_t *slot_b; /* cluster flush: slot -> builder index + 1 */
    /* --max-jobs, approximately */
    int64_t count_base, count_delta, adds_inflight;
    /* ids for "*"; ords of adds */
    int64_t id_ms;
    uint64_t id_seq;
    int64_t ord_ms;
    uint64_t ord_seq;
    /* figures for INFO */
    uint64_t calls, requests, messages, carries;
};

static inline int64_t now_ms(struct dq_store *s) {
    return s->cfg.clock ? s->cfg.clock(s->cfg.ud) : clock_ms();
}


/* --- redis.c: requests, ids, submission, configuration ------------------ */

/* A new request of `op` completing through cb(pd); its deadline is now +
 * CALL_TIMEOUT_US. Owned by the store until it completes. */
struct rreq *rs_req_new(struct dq_store *s, enum op op, dq_store_cb *cb, void *pd);
/* Plans and queues a request (or keeps it until the store is configured,
 * failing it UNAVAILABLE at its deadline). Never completes it before
 * returning. */
void rs_submit(struct rreq *rq);
/* Notes a failure; the first one tells (later ones are ignored). msg is
 * copied; NULL = the status's default text. */
void rs_req_fail(struct rreq *rq, int status, const char *msg);
/* Calls the request's callback with its result and frees it. */
void rs_req_complete(struct rreq *rq);
/* Completes the request from the flush event (never inside its op call). */
void rs_req_done_later(struct rreq *rq);
/* Appends a copy of a string (LIST ids, TOPICS names) to the request's
 * result. */
void rs_strs_push(struct rreq *rq, const char *p, size_t len);
/* ADD of a generated id that another instance took: the next id, sent
 * again by rs_unit_finished (after 16 tries: UNAVAILABLE). */
void rs_add_retry(struct rreq *rq);
/* Redis became usable (rcli on_up): configure the store, or resync. */
void rs_on_up(void *ud);

/* --- redis_plan.c: planning, arguments, script calls ---------------------- */

/* Builds the plan of a request: its groups (shards) and units. Returns 0,
 * or 1 if it must first read the registry (TOPICS, STATS of all). */
int rs_plan(struct rreq *rq);
/* The groups of a request: every shard of every known topic. */
void rs_plan_all_topics(struct rreq *rq);
/* The shard of topic t that holds id. */
struct rshard *rs_id_shard(struct dq_store *s, struct rtopic *t, struct dq_str id);
/* Queues the request's next unit (sequential ops) or all of them for the
 * next flush. */
void rs_outbox_units(struct dq_store *s, struct rreq *rq);
/* Sends what is queued: plain commands, then the outbox as script calls. */
void rs_send_queued(struct dq_store *s);
/* The flush event: pending completions, then rs_send_queued. */
void rs_flush_cb(evutil_socket_t fd, short what, void *arg);
/* A plain command of argc strings to the node of `slot` (-1: any);
 * cb as rcli_send's, within CALL_TIMEOUT_US. */
void rs_send_raw(struct dq_store *s, int slot, int argc, const char **av,
                 const size_t *al, rcli_cb *cb, void *pd);

/* --- redis_reply.c: decoding replies, completing units -------------------- */

/* The reply of a script call (pd: its struct scall, freed here or after
 * WAIT): results into the units' requests, next due times into the heap. */
void rs_script_cb(void *pd, redisReply *r, const char *err, bool sent);
/* A unit of rq is over: sends its next unit or retry, or completes it. */
void rs_unit_finished(struct rreq *rq);

/* --- redis_sched.c: topics, the timer heap, registry, wakeups, sweep ------ */

/* The topic, made with its K shards if new (only once configured). */
struct rtopic *rs_topic_get(struct dq_store *s, const char *name, size_t len);
/* htab callbacks of the topic table. */
uint64_t rs_topic_rehash(const struct hnode *n);
void rs_topic_free(void *ud, struct hnode *n);
/* SADDs the topic to the registry once. */
void rs_topic_register(struct dq_store *s, struct rtopic *t);
/* Phase 0 of TOPICS and STATS of all topics: SMEMBERS of the registry. */
void rs_registry_fetch(struct rreq *rq);
/* Sets a shard's next due time (INT64_MAX: none); call rs_arm_timer after. */
void rs_heap_set(struct dq_store *s, struct rshard *sh, int64_t next);
/* Arms the timer at the earliest next due time. */
void rs_arm_timer(struct dq_store *s);
/* Event callbacks: the due-time timer and the sweep. */
void rs_timer_cb(evutil_socket_t fd, short what, void *arg);
void rs_sweep_cb(evutil_socket_t fd, short what, void *arg);
/* Carries every shard of every registered topic now (unless one runs). */
void rs_sweep_now(struct dq_store *s);
/* A wake message from another instance (rcli on_message). */
void rs_on_message(void *ud, const char *msg, size_t len);
/* on_ready and on_push_ready for every known topic. */
void rs_on_ready_all(struct dq_store *s);

#endif
