/* engine_int.h -- what the engine's files share (engine.c: topics, jobs and
 * the state machine of DESIGN §2; engine_far.c: the far jobs, their queue at
 * recovery, LIST's far phase and engine_scan_far; engine_load.c: the hints,
 * restores and walk of recovery and snapshots). Private to those files. */
#ifndef DQ_ENGINE_INT_H
#define DQ_ENGINE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "lib/htab.h"
#include "lib/slab.h"
#include "lib/wheel.h"

struct topic;
struct far_pend; /* engine_far.c */

#define BODY_MAX ((size_t)(1 << 30) - 1)
#define STUBS_AHEAD_MIN (64u << 20) /* far entries worth faulting in ahead */

/* The id table link sits right before the id so that walking a chain
 * touches one cache line per job (the link, the length and the id). */
struct job {
    struct wheel_node node; /* wheel (delayed, reserved) or a topic list */
    struct topic *topic;
    uint64_t due : 48, attempts : 16;
    uint64_t created : 48, retries : 16;
    uint32_t ttr : 30, state : 2;
    uint32_t body_len : 30, backoff_fixed : 1, push : 1;
    uint32_t backoff_base, backoff_max;
    struct hnode hnode; /* the topic's id table */
    uint8_t id_len1;    /* id length - 1 (ids are 1..256 bytes) */
    char data[];        /* id, body, then the push tail if push is set */
};

/* A far job (engine_add_far): only its id and where its store keeps it. */
struct stub {
    struct hnode hnode; /* the topic's far table */
    uint8_t id_len1;
    uint8_t ref[6];     /* slot:u16, offset:u32, little-endian */
    char id[];
};

#define REF_MAX ((UINT64_C(1) << 48) - 1)

struct far_queue {
    struct far_pend *p, *tmp; /* tmp: the radix sort's other half */
    uint32_t n, cap;
    char *ids;
    size_t ids_len, ids_cap;
};

struct topic {
    struct hnode hnode; /* the engine's topic table */
    uint64_t hash;
    struct htab jobs;   /* id -> job */
    struct htab far;    /* id -> stub (delayed jobs held by the store) */
    struct wheel_node ready, dead; /* list heads */
    struct wheel_node pushq;    /* ready push jobs: the pusher's FIFO */
    uint64_t npush;             /* jobs on pushq */
    struct dq_stats st;
    struct wheel_node idle;     /* on the engine's idle list while jobless */
    uint64_t expect;            /* engine_expect: jobs announced */
    uint64_t expect_far;        /* engine_expect_far: far jobs announced */
    struct topic *touched_next; /* engine_advance: topics that gained ready */
    bool touched;
    bool purged;                /* a grave: its jobs are being freed */
    struct topic *grave_next;
    uint64_t reap_pos;          /* htab_drain's position */
    uint8_t name_len;
    char name[];
};

struct engine {
    uint64_t max_jobs;
    struct engine_hooks hooks;
    struct dq_stats st; /* global counters and jobs per state */
    uint64_t count;     /* jobs, far ones included */
    uint64_t nfar;
    struct slab stubs;  /* far jobs: no malloc header, 8-byte rounding */
    struct slab jobs;   /* jobs up to SLAB_MAX bytes (the rest: malloc), so
                           pages go back to the system as jobs go */
    struct htab topics;
    struct topic *last; /* the topic found last (most calls repeat it) */
    struct wheel_node idle; /* topics without jobs, oldest first */
    struct topic *graves;   /* purged topics whose jobs are freed bit by bit */
    uint64_t nidle;
    struct wheel wheel;
    struct far_queue farq; /* engine_far_queue */
    uint64_t expect_stubs; /* engine_expect_far: bytes of far entries */
};

/* engine_list: what a page has found so far. */
struct list_ctx {
    int state;
    void (*fn)(void *ud, struct dq_str id);
    void *ud;
    uint32_t found; /* jobs reported */
    uint64_t work;  /* jobs and buckets looked at */
};

static inline struct job *en_job_of_h(const struct hnode *n) {
    return (struct job *)((char *)n - offsetof(struct job, hnode));
}

static inline struct topic *en_topic_of_h(const struct hnode *n) {
    return (struct topic *)((char *)n - offsetof(struct topic, hnode));
}

/* --- engine.c --------------------------------------------------------------- */

/* The topic named name, or NULL. en_topic_get also makes it the one found
 * last; en_topic_create makes a new one (NULL if memory ran out), which
 * en_topic_free frees again (its jobs already gone). en_topic_use: t gains
 * a job, it is no longer idle. */
struct topic *en_topic_lookup(const struct engine *e, struct dq_str name);
struct topic *en_topic_get(struct engine *e, struct dq_str name);
struct topic *en_topic_create(struct engine *e, struct dq_str name);
void en_topic_free(struct engine *e, struct topic *t);
void en_topic_use(struct engine *e, struct topic *t);
/* The topic named name for a recovery hint: made if need be, and then kept
 * like an emptied one (it may get no job). NULL if memory ran out. */
struct topic *en_topic_hint(struct engine *e, struct dq_str name);
/* What callers see of j. */
void en_view(const struct job *j, struct dq_job *out);
/* t within the 48 bits of the job's time fields. */
int64_t en_clamp_time(int64_t t);

/* The job id of t (h the hash of id), or NULL. */
struct job *en_job_find(const struct topic *t, struct dq_str id, uint64_t h);
/* A job of topic t, not linked anywhere; url.len 0 = not a push job. NULL
 * if memory ran out. en_job_options sets its fields (clamped). */
struct job *en_job_alloc(struct engine *e, struct topic *t, struct dq_str id,
                         struct dq_str body, struct dq_str url,
                         struct dq_str ctype);
void en_job_options(struct job *j, int64_t due, int64_t created, uint32_t ttr,
                    uint32_t retries, uint32_t attempts,
                    const struct dq_backoff *b);
/* Links j where `state` keeps it (appending to lists) and counts it. */
void en_place(struct engine *e, struct job *j, int state, int64_t when);
/* Unlinks and frees j (not its topic). h is the hash of its id. */
void en_job_remove(struct engine *e, struct job *j, uint64_t h);

/* --- engine_far.c ----------------------------------------------------------- */

/* A stub for id at ref, not linked anywhere; NULL if memory ran out. */
struct stub *en_stub_new(struct engine *e, struct dq_str id, uint64_t ref);
/* The far table's rehash function. */
uint64_t en_stub_rehash(const struct hnode *n);
/* The far job id of t (h the hash of id), or NULL. */
struct stub *en_stub_find(const struct topic *t, struct dq_str id, uint64_t h);
/* Unlinks and frees a far job, uncounting it; with tell, tells the store
 * its record is dead (on_far_drop). */
void en_stub_remove(struct engine *e, struct topic *t, struct stub *f,
                    uint64_t h, bool tell);
/* htab callbacks over a far table (ud = the engine): en_stub_drop_cb tells
 * the store (on_far_drop) and frees, en_stub_free_cb only frees. Neither
 * unlinks nor uncounts. */
void en_stub_drop_cb(void *ud, struct hnode *n);
void en_stub_free_cb(void *ud, struct hnode *n);
/* Frees engine_far_queue's memory and empties it. */
void en_far_queue_free(struct far_queue *q);
/* LIST's far phase: reports t's far jobs to c from cursor on, bucket by
 * bucket, until c holds count or c->work reaches budget. Returns the next
 * cursor, 0 when the far table is done (or empty). */
uint64_t en_far_list(const struct topic *t, uint64_t cursor, uint32_t count,
                     uint64_t budget, struct list_ctx *c);

#endif
