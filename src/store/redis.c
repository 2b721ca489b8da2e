/* redis.c -- the Redis store (DESIGN §6; docs/redis.md tells the design).
 *
 * Jobs live in Redis under one hash tag per (topic, shard): a pool hash
 * (id -> packed record), a ready list, a delay zset (id -> due), a lease
 * zset (id -> lease end), a dead zset (id -> time of death) and a stats hash.
 * Every transition is one request of the Lua script (redis_lua.c); the
 * store batches the requests made in one loop iteration into one EVALSHA per
 * node (standalone) or per slot (cluster), so a call carries many
 * transitions, each atomic.
 *
 * Moving jobs in time: every script first "carries" the shards it touches
 * (due jobs -> ready, ended leases -> ready or dead) and answers with each
 * shard's next due time; this instance keeps those in a heap and arms one
 * timer at the earliest. Scripts PUBLISH on <prefix>:wake when a shard got
 * ready jobs or an earlier next due time, so the other instances wake their
 * blocked RESERVEs and their timers; a sweep every 900 ms carries every
 * shard of every registered topic, so a lost message or a dead instance
 * never leaves jobs unmoved.
 *
 * Request life: submitted (waiting for the store to be configured, or in
 * the outbox as units, or queued for a plain command) -> flushed at the end
 * of the loop iteration into script calls -> completed from the reply (or
 * failed as UNAVAILABLE). Every request completes exactly once, from the
 * loop, never inside the op function that submitted it.
 */
#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/htab.h"
#include "lib/log.h"
#include "lib/xalloc.h"
#include "store/redis_client.h"
#include "store/redis_lua.h"
#include "store/redis_url.h"
#include "store/store.h"

#define NKEYS 6                  /* keys per group */
#define REC_HDR 54               /* record header: see redis_lua.c */
#define CALL_TIMEOUT_US 1800000  /* every request answers within 2 s */
#define MAX_CALL_REQS 128        /* requests per script call */
#define MAX_CALL_BYTES (1 << 20) /* argument bytes per script call */
#define MAX_UNIT_GROUPS 64       /* groups per unit (standalone) */
#define SWEEP_MS 900
#define DRAIN_MS 2000

enum op {
    OP_ADD, OP_DEL, OP_ACK, OP_GET, OP_RESERVE, OP_NACK, OP_TOUCH,
    OP_RELEASE, OP_KICK, OP_LIST, OP_PURGE, OP_STATS, OP_TOPICS, OP_CARRY,
};

/* The script's name for each op, and whether its units run one after the
 * other (they share a count) or all at once. */
static const struct {
    const char *lua;
    bool sequential;
} OPS[] = {
    [OP_ADD] = {"add", false},       [OP_DEL] = {"del", false},
    [OP_ACK] = {"del", false},       [OP_GET] = {NULL, false}, /* HGET */
    [OP_RESERVE] = {"reserve", true}, [OP_NACK] = {"nack", false},
    [OP_TOUCH] = {"touch", false},   [OP_RELEASE] = {"release", false},
    [OP_KICK] = {"kick", true},      [OP_LIST] = {"list", true},
    [OP_PURGE] = {"purge", false},   [OP_STATS] = {"stats", false},
    [OP_TOPICS] = {"carry", false},  [OP_CARRY] = {"carry", false},
};

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

struct rjob { /* a result job; strings are offsets in the request's arena */
    size_t topic, tlen, id, ilen, body, blen;
    struct dq_job j;
};

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
    struct dq_str *topics;  /* reserve */
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
    int phase;              /* topics / all-stats: 0 = registry first */
    /* results */
    int status;
    char errbuf[200];
    int64_t n;
    uint64_t rcursor;
    struct dq_stats st;
    struct buf arena;
    struct rjob *jobs;
    size_t njobs, jcap;
    size_t *strs;           /* offsets in arena, pairs (off, len) */
    size_t nstrs, scap;
    int64_t *hl;            /* carry/topics: jobs per group */
    void (*internal)(struct rreq *rq); /* completion of internal requests */
};

struct builder {
    int slot;
    uint64_t stamp;
    struct rshard **groups;
    size_t ng, gcap;
    struct unit **units;
    size_t nu, ucap;
    struct buf reqs;
    size_t nargs;
};

struct scall { /* a script call in flight */
    struct dq_store *s;
    struct unit **units;
    size_t nu;
    struct rshard **groups;
    size_t ng;
    uint64_t msg_stamp;
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

static int64_t now_ms(struct dq_store *s) {
    return s->cfg.clock ? s->cfg.clock(s->cfg.ud) : clock_ms();
}

static void submit(struct rreq *rq);
static void outbox_units(struct dq_store *s, struct rreq *rq);
static void flush_cb(evutil_socket_t fd, short what, void *arg);
static void arm_timer(struct dq_store *s);

/* --- RESP argument building -------------------------------------------- */

static void arg_str(struct buf *b, const char *p, size_t len) {
    char *o = buf_reserve(b, len + 24);
    int n = sprintf(o, "$%zu\r\n", len);
    memcpy(o + n, p, len);
    memcpy(o + n + len, "\r\n", 2);
    b->len += (size_t)n + len + 2;
}

static void arg_cstr(struct buf *b, const char *p) { arg_str(b, p, strlen(p)); }

static void arg_int(struct buf *b, int64_t v) {
    char t[24];
    int n = sprintf(t, "%" PRId64, v);
    arg_str(b, t, (size_t)n);
}

/* A raw command of string arguments; the client takes the buffer. */
static void send_raw(struct dq_store *s, int slot, int argc, const char **av,
                     const size_t *al, rcli_cb *cb, void *pd) {
    struct buf b = BUF_INIT;
    for (int i = 0; i < argc; i++) arg_str(&b, av[i], al[i]);
    rcli_send(s->cli, slot, RCLI_RAW, argc, b.p, b.len,
              rcli_now_us() + CALL_TIMEOUT_US, cb, pd);
}

/* --- topics and shards --------------------------------------------------- */

static uint64_t topic_rehash(const struct hnode *n) {
    return ((const struct rtopic *)n)->h;
}

static struct rtopic *topic_find(struct dq_store *s, const char *name,
                                 size_t len) {
    uint64_t h = htab_hash_bytes(name, len);
    for (struct hnode *n = htab_bucket(&s->topics, h); n; n = n->next) {
        struct rtopic *t = (struct rtopic *)n;
        if (t->h == h && t->len == len && memcmp(t->name, name, len) == 0)
            return t;
    }
    return NULL;
}

/* The topic, made with its K shards if new. Only once configured. */
static struct rtopic *topic_get(struct dq_store *s, const char *name,
                                size_t len) {
    struct rtopic *t = topic_find(s, name, len);
    if (t) return t;
    t = xcalloc(1, sizeof *t);
    t->h = htab_hash_bytes(name, len);
    t->name = xstrndup(name, len);
    t->len = len;
    t->sh = xcalloc(s->K, sizeof *t->sh);
    for (unsigned i = 0; i < s->K; i++) {
        struct rshard *sh = &t->sh[i];
        char tag[REDIS_PREFIX_MAX + DQ_TOPIC_MAX + 64];
        size_t n = redis_shard_tag(tag, sizeof tag, s->url.prefix, name, len,
                                   i, s->K, s->url.cluster);
        sh->t = t;
        sh->idx = i;
        sh->tag = xmalloc(n + 4);
        sh->tag[0] = '{';
        memcpy(sh->tag + 1, tag, n);
        memcpy(sh->tag + 1 + n, "}:", 2);
        sh->taglen = n + 3;
        sh->tag[sh->taglen] = '\0';
        sh->slot = s->url.cluster ? (int)redis_keyslot(tag, n) : -1;
        sh->next = INT64_MAX;
    }
    htab_insert(&s->topics, &t->hn, t->h);
    s->ntopics++;
    return t;
}

static void topic_free(void *ud, struct hnode *n) {
    struct rtopic *t = (struct rtopic *)n;
    struct dq_store *s = ud;
    for (unsigned i = 0; i < s->K; i++) dq_free(t->sh[i].tag);
    dq_free(t->sh);
    dq_free(t->name);
    dq_free(t);
}

/* --- the timer heap: shards by next due time ------------------------------ */

static void heap_swap(struct dq_store *s, size_t a, size_t b) {
    struct rshard *x = s->heap[a];
    s->heap[a] = s->heap[b];
    s->heap[b] = x;
    s->heap[a]->hpos = a + 1;
    s->heap[b]->hpos = b + 1;
}

static void heap_up(struct dq_store *s, size_t i) {
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (s->heap[p]->next <= s->heap[i]->next) break;
        heap_swap(s, p, i);
        i = p;
    }
}

static void heap_down(struct dq_store *s, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < s->hn && s->heap[l]->next < s->heap[m]->next) m = l;
        if (r < s->hn && s->heap[r]->next < s->heap[m]->next) m = r;
        if (m == i) return;
        heap_swap(s, i, m);
        i = m;
    }
}

static void heap_remove(struct dq_store *s, struct rshard *sh) {
    if (!sh->hpos) return;
    size_t i = sh->hpos - 1;
    sh->hpos = 0;
    s->hn--;
    if (i == s->hn) return;
    s->heap[i] = s->heap[s->hn];
    s->heap[i]->hpos = i + 1;
    heap_down(s, i);
    heap_up(s, i);
}

/* Sets the shard's next due time; the caller re-arms the timer. */
static void heap_set(struct dq_store *s, struct rshard *sh, int64_t next) {
    sh->next = next;
    if (next == INT64_MAX) {
        heap_remove(s, sh);
    } else if (!sh->hpos) {
        if (s->hn == s->hcap) {
            s->hcap = s->hcap ? s->hcap * 2 : 64;
            s->heap = xrealloc(s->heap, s->hcap * sizeof *s->heap);
        }
        s->heap[s->hn] = sh;
        sh->hpos = ++s->hn;
        heap_up(s, s->hn - 1);
    } else {
        heap_down(s, sh->hpos - 1);
        heap_up(s, sh->hpos - 1);
    }
}

static void arm_timer(struct dq_store *s) {
    int64_t at = s->hn ? s->heap[0]->next : INT64_MAX;
    if (at == s->timer_at || s->closing) return;
    s->timer_at = at;
    if (at == INT64_MAX) {
        evtimer_del(s->timer_ev);
        return;
    }
    int64_t wait = s->cfg.clock ? (at - now_ms(s)) * 1000 : at * 1000 - clock_us();
    if (wait < 0) wait = 0;
    struct timeval tv = {wait / 1000000, wait % 1000000};
    evtimer_add(s->timer_ev, &tv);
}

/* --- requests -------------------------------------------------------------- */

static struct rreq *req_new(struct dq_store *s, enum op op, dq_store_cb *cb,
                            void *pd) {
    struct rreq *rq = xcalloc(1, sizeof *rq);
    rq->s = s;
    rq->op = op;
    rq->cb = cb;
    rq->pd = pd;
    rq->deadline = rcli_now_us() + CALL_TIMEOUT_US;
    s->requests++;
    return rq;
}

static void req_free(struct rreq *rq) {
    dq_free(rq->mem);
    dq_free(rq->topics);
    dq_free(rq->ids);
    dq_free(rq->gs);
    dq_free(rq->gids);
    dq_free(rq->gcnt);
    dq_free(rq->units);
    dq_free(rq->jobs);
    dq_free(rq->strs);
    dq_free(rq->hl);
    buf_free(&rq->arena);
    dq_free(rq);
}

static void req_fail(struct rreq *rq, int status, const char *msg) {
    if (rq->status != DQ_OK) return; /* the first failure tells */
    rq->status = status;
    if (msg) {
        snprintf(rq->errbuf, sizeof rq->errbuf, "%s", msg);
    } else {
        rq->errbuf[0] = '\0';
    }
}

static size_t arena_put(struct rreq *rq, const char *p, size_t len) {
    size_t off = rq->arena.len;
    buf_append(&rq->arena, p, len);
    return off;
}

static void strs_push(struct rreq *rq, const char *p, size_t len) {
    if (rq->nstrs == rq->scap) {
        rq->scap = rq->scap ? rq->scap * 2 : 16;
        rq->strs = xrealloc(rq->strs, rq->scap * 2 * sizeof *rq->strs);
    }
    rq->strs[2 * rq->nstrs] = arena_put(rq, p, len);
    rq->strs[2 * rq->nstrs + 1] = len;
    rq->nstrs++;
}

/* Calls the request's callback with its result and frees it. */
static void req_complete(struct rreq *rq) {
    struct dq_store *s = rq->s;
    if (rq->counted) {
        s->adds_inflight--;
        rq->counted = false;
    }
    if (rq->internal) {
        rq->internal(rq);
        req_free(rq);
        return;
    }
    struct dq_result r = {.status = rq->status, .n = rq->n};
    if (rq->status != DQ_OK) {
        r.errmsg = rq->errbuf[0] ? rq->errbuf : NULL;
        /* a reserve that got jobs before failing must hand them out */
        if (!(rq->op == OP_RESERVE && rq->njobs > 0)) {
            rq->cb(rq->pd, &r);
            req_free(rq);
            return;
        }
        r.status = DQ_OK;
        r.errmsg = NULL;
    }
    const char *a = rq->arena.p;
    struct dq_job *jobs = NULL;
    struct dq_str *strs = NULL;
    switch (rq->op) {
    case OP_ADD:
        r.id = rq->add.id;
        break;
    case OP_GET:
    case OP_RESERVE:
        if (rq->njobs) {
            jobs = xmalloc(rq->njobs * sizeof *jobs);
            for (size_t i = 0; i < rq->njobs; i++) {
                struct rjob *x = &rq->jobs[i];
                jobs[i] = x->j;
                jobs[i].topic = (struct dq_str){a + x->topic, x->tlen};
                jobs[i].id = (struct dq_str){a + x->id, x->ilen};
                jobs[i].body = (struct dq_str){a + x->body, x->blen};
            }
        }
        r.jobs = jobs;
        r.njobs = rq->njobs;
        break;
    case OP_LIST:
    case OP_TOPICS:
        if (rq->nstrs) {
            strs = xmalloc(rq->nstrs * sizeof *strs);
            for (size_t i = 0; i < rq->nstrs; i++)
                strs[i] = (struct dq_str){a + rq->strs[2 * i], rq->strs[2 * i + 1]};
        }
        r.strs = strs;
        r.nstrs = rq->nstrs;
        r.cursor = rq->rcursor;
        break;
    case OP_STATS:
        r.stats = &rq->st;
        break;
    default:
        break;
    }
    rq->cb(rq->pd, &r);
    dq_free(jobs);
    dq_free(strs);
    req_free(rq);
}

/* Completes a request from the flush event (never inside its op call). */
static void req_done_later(struct rreq *rq) {
    struct dq_store *s = rq->s;
    if (s->closing) { /* no loop any more */
        req_complete(rq);
        return;
    }
    rq->next = NULL;
    if (s->done_tail) s->done_tail->next = rq;
    else s->done_head = rq;
    s->done_tail = rq;
    event_active(s->flush_ev, 0, 0);
}

/* --- planning: which shards a request touches, in which units ---------- */

static struct rshard *id_shard(struct dq_store *s, struct rtopic *t,
                               struct dq_str id) {
    return &t->sh[redis_id_shard(id.p, id.len, s->K)];
}

static void plan_groups(struct rreq *rq, size_t n) {
    rq->gs = xrealloc(rq->gs, (n ? n : 1) * sizeof *rq->gs);
    rq->ngs = 0;
}

/* Splits the groups into units: consecutive groups that can share a call. */
static void plan_units(struct rreq *rq) {
    struct dq_store *s = rq->s;
    dq_free(rq->units);
    rq->units = xcalloc(rq->ngs ? rq->ngs : 1, sizeof *rq->units);
    rq->nunits = 0;
    size_t cap = OPS[rq->op].sequential && !s->url.cluster ? 1024 : MAX_UNIT_GROUPS;
    for (size_t i = 0; i < rq->ngs;) {
        size_t j = i + 1;
        while (j < rq->ngs && j - i < cap &&
               (!s->url.cluster || rq->gs[j]->slot == rq->gs[i]->slot))
            j++;
        struct unit *u = &rq->units[rq->nunits++];
        u->rq = rq;
        u->g0 = i;
        u->ng = j - i;
        i = j;
    }
    rq->next_unit = 0;
    rq->pending = 0;
}

static void plan_all_topics(struct rreq *rq) {
    struct dq_store *s = rq->s;
    plan_groups(rq, s->ntopics * s->K);
    struct htab *h = &s->topics;
    for (int b = 0; b < 2; b++) {
        if (!h->b[b]) continue;
        for (uint64_t i = 0; i <= h->mask[b]; i++) {
            if (b == 0 && h->b[1] && i < h->rehash) continue;
            for (struct hnode *n = h->b[b][i]; n; n = n->next) {
                struct rtopic *t = (struct rtopic *)n;
                for (unsigned k = 0; k < s->K; k++) rq->gs[rq->ngs++] = &t->sh[k];
            }
        }
    }
}

static int cmp_size(const void *a, const void *b) {
    const size_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

/* Builds the plan of a request. Returns 0, or -1 if it completed already
 * (nothing to do). */
static int plan(struct rreq *rq) {
    struct dq_store *s = rq->s;
    struct rtopic *t;
    switch (rq->op) {
    case OP_ADD:
        t = topic_get(s, rq->topic.p, rq->topic.len);
        plan_groups(rq, 1);
        rq->gs[rq->ngs++] = id_shard(s, t, rq->add.id);
        break;
    case OP_GET: case OP_NACK: case OP_TOUCH: case OP_RELEASE:
        t = topic_get(s, rq->topic.p, rq->topic.len);
        plan_groups(rq, 1);
        rq->gs[rq->ngs++] = id_shard(s, t, rq->ids[0]);
        break;
    case OP_DEL: case OP_ACK: {
        t = topic_get(s, rq->topic.p, rq->topic.len);
        /* (shard, index) pairs sorted: ids grouped by shard */
        size_t *pairs = xmalloc(2 * rq->nids * sizeof *pairs);
        for (size_t i = 0; i < rq->nids; i++) {
            pairs[2 * i] = redis_id_shard(rq->ids[i].p, rq->ids[i].len, s->K);
            pairs[2 * i + 1] = i;
        }
        qsort(pairs, rq->nids, 2 * sizeof *pairs, cmp_size);
        plan_groups(rq, rq->nids);
        rq->gids = xmalloc(rq->nids * sizeof *rq->gids);
        rq->gcnt = xcalloc(rq->nids, sizeof *rq->gcnt);
        for (size_t i = 0; i < rq->nids; i++) {
            size_t k = pairs[2 * i];
            if (rq->ngs == 0 || rq->gs[rq->ngs - 1] != &t->sh[k] ||
                rq->gcnt[rq->ngs - 1] == 1000) /* the script unpacks them */
                rq->gs[rq->ngs++] = &t->sh[k];
            rq->gcnt[rq->ngs - 1]++;
            rq->gids[i] = pairs[2 * i + 1];
        }
        dq_free(pairs);
        break;
    }
    case OP_RESERVE:
        plan_groups(rq, rq->ntopics * s->K);
        for (size_t i = 0; i < rq->ntopics; i++) {
            t = topic_get(s, rq->topics[i].p, rq->topics[i].len);
            unsigned start = t->rr++ % s->K;
            for (unsigned k = 0; k < s->K; k++)
                rq->gs[rq->ngs++] = &t->sh[(start + k) % s->K];
        }
        break;
    case OP_KICK: case OP_PURGE: case OP_STATS:
        if (rq->op == OP_STATS && rq->topic.len == 0) {
            if (rq->phase == 0) return 1; /* registry first */
            plan_all_topics(rq);
            break;
        }
        t = topic_get(s, rq->topic.p, rq->topic.len);
        plan_groups(rq, s->K);
        for (unsigned k = 0; k < s->K; k++) rq->gs[rq->ngs++] = &t->sh[k];
        break;
    case OP_LIST: /* from the cursor's shard to the last */
        t = topic_get(s, rq->topic.p, rq->topic.len);
        plan_groups(rq, s->K);
        for (unsigned k = (unsigned)(rq->cursor % s->K); k < s->K; k++)
            rq->gs[rq->ngs++] = &t->sh[k];
        break;
    case OP_TOPICS:
        if (rq->phase == 0) return 1;
        plan_all_topics(rq);
        break;
    case OP_CARRY:
        break; /* groups given by the caller */
    }
    if (rq->op == OP_TOPICS || rq->op == OP_CARRY)
        rq->hl = xcalloc(rq->ngs ? rq->ngs : 1, sizeof *rq->hl);
    plan_units(rq);
    return 0;
}

/* --- registry ------------------------------------------------------------ */

static void members_cb(void *pd, redisReply *r, const char *err);

/* Phase 0 of TOPICS and STATS without a topic: learn the registry. */
static void registry_fetch(struct rreq *rq) {
    struct dq_store *s = rq->s;
    const char *av[2] = {"SMEMBERS", s->regkey};
    size_t al[2] = {8, strlen(s->regkey)};
    send_raw(s, (int)redis_keyslot(s->regkey, al[1]), 2, av, al, members_cb, rq);
}

static void registry_learn(struct dq_store *s, redisReply *r) {
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_STRING || e->len == 0 || e->len > DQ_TOPIC_MAX)
            continue;
        struct rtopic *t = topic_get(s, e->str, e->len);
        t->registered = true;
        t->seen = s->sweeps;
    }
}

static void members_cb(void *pd, redisReply *r, const char *err) {
    struct rreq *rq = pd;
    struct dq_store *s = rq->s;
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        req_fail(rq, DQ_UNAVAILABLE, r ? r->str : err);
        req_complete(rq);
        return;
    }
    registry_learn(s, r);
    rq->phase = 1;
    plan(rq);
    if (rq->ngs == 0) {
        req_complete(rq);
        return;
    }
    outbox_units(s, rq);
}

static void sadd_cb(void *pd, redisReply *r, const char *err) {
    struct rtopic *t = pd;
    t->registering = false;
    if (r && r->type == REDIS_REPLY_INTEGER) t->registered = true;
}

static void topic_register(struct dq_store *s, struct rtopic *t) {
    if (t->registered || t->registering) return;
    t->registering = true;
    const char *av[3] = {"SADD", s->regkey, t->name};
    size_t al[3] = {4, strlen(s->regkey), t->len};
    send_raw(s, (int)redis_keyslot(s->regkey, al[1]), 3, av, al, sadd_cb, t);
}

/* --- the outbox and script calls ------------------------------------------ */

static void outbox_push(struct dq_store *s, struct unit *u) {
    u->next = NULL;
    if (s->out_tail) s->out_tail->next = u;
    else s->out_head = u;
    s->out_tail = u;
    event_active(s->flush_ev, 0, 0);
}

/* Queues the request's next unit (sequential ops) or all of them. */
static void outbox_units(struct dq_store *s, struct rreq *rq) {
    if (OPS[rq->op].sequential) {
        rq->pending = 1;
        outbox_push(s, &rq->units[rq->next_unit++]);
        return;
    }
    rq->pending = rq->nunits;
    for (size_t i = 0; i < rq->nunits; i++) outbox_push(s, &rq->units[i]);
    rq->next_unit = rq->nunits;
}

static uint32_t builder_group(struct dq_store *s, struct builder *b,
                              struct rshard *sh) {
    if (sh->bstamp == b->stamp) return sh->bidx;
    if (b->ng == b->gcap) {
        b->gcap = b->gcap ? b->gcap * 2 : 16;
        b->groups = xrealloc(b->groups, b->gcap * sizeof *b->groups);
    }
    b->groups[b->ng] = sh;
    sh->bstamp = b->stamp;
    sh->bidx = (uint32_t)b->ng;
    return (uint32_t)b->ng++;
}

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void putdouble(unsigned char *p, int64_t v) {
    double d = (double)v;
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(u >> (8 * i));
}

/* Writes the unit's op arguments to sc; returns how many. `now` is the
 * call's time (its ARGV[1]). */
static size_t unit_args(struct unit *u, struct buf *sc, int64_t now) {
    struct rreq *rq = u->rq;
    const struct dq_add *a = &rq->add;
    switch (rq->op) {
    case OP_ADD: { /* id, record, due, delay member, flags */
        struct dq_store *s = rq->s;
        unsigned char h[REC_HDR];
        h[0] = a->due <= now ? DQ_READY : DQ_DELAYED;
        put32(h + 1, 0);
        put32(h + 5, a->ttr);
        put32(h + 9, a->retries);
        h[13] = a->backoff.kind;
        put32(h + 14, a->backoff.base);
        put32(h + 18, a->backoff.max);
        putdouble(h + 22, a->due);
        putdouble(h + 30, now);
        putdouble(h + 38, 0);
        /* ord: the order of adds, for jobs due in the same millisecond */
        if (now > s->ord_ms) {
            s->ord_ms = now;
            s->ord_seq = 0;
        }
        uint64_t ord = (uint64_t)s->ord_ms << 22 | (s->ord_seq++ & 0x3fffff);
        for (int i = 0; i < 8; i++) h[46 + i] = (unsigned char)(ord >> (56 - 8 * i));
        arg_str(sc, a->id.p, a->id.len);
        char *o = buf_reserve(sc, REC_HDR + a->body.len + 24);
        int n = sprintf(o, "$%zu\r\n", REC_HDR + a->body.len);
        memcpy(o + n, h, REC_HDR);
        memcpy(o + n + REC_HDR, a->body.p, a->body.len);
        memcpy(o + n + REC_HDR + a->body.len, "\r\n", 2);
        sc->len += (size_t)n + REC_HDR + a->body.len + 2;
        arg_int(sc, a->due);
        if (h[0] == DQ_DELAYED) {
            o = buf_reserve(sc, 8 + a->id.len + 24);
            n = sprintf(o, "$%zu\r\n", 8 + a->id.len);
            memcpy(o + n, h + 46, 8);
            memcpy(o + n + 8, a->id.p, a->id.len);
            memcpy(o + n + 8 + a->id.len, "\r\n", 2);
            sc->len += (size_t)n + 8 + a->id.len + 2;
        } else {
            arg_str(sc, "", 0);
        }
        arg_cstr(sc, rq->gen ? "g" : a->replace ? "r" : "-");
        return 5;
    }
    case OP_DEL:
    case OP_ACK: {
        size_t n = 1, first = 0;
        arg_cstr(sc, rq->op == OP_ACK ? "ack" : "del");
        for (size_t g = 0; g < u->g0; g++) first += rq->gcnt[g];
        for (size_t g = u->g0; g < u->g0 + u->ng; g++) {
            arg_int(sc, (int64_t)rq->gcnt[g]);
            n++;
            for (size_t i = 0; i < rq->gcnt[g]; i++, first++, n++) {
                struct dq_str id = rq->ids[rq->gids[first]];
                arg_str(sc, id.p, id.len);
            }
        }
        return n;
    }
    case OP_GET:
    case OP_RELEASE:
        arg_str(sc, rq->ids[0].p, rq->ids[0].len);
        return 1;
    case OP_NACK:
        arg_str(sc, rq->ids[0].p, rq->ids[0].len);
        arg_int(sc, rq->delay);
        return 2;
    case OP_TOUCH:
        arg_str(sc, rq->ids[0].p, rq->ids[0].len);
        arg_int(sc, rq->ttr);
        return 2;
    case OP_RESERVE:
    case OP_KICK:
        arg_int(sc, (int64_t)rq->count);
        return 1;
    case OP_LIST: { /* cursor = (value * 2 + mode) * K + shard */
        uint64_t rest = u == rq->units ? rq->cursor / rq->s->K : 0;
        arg_int(sc, rq->state);
        arg_int(sc, (int64_t)(rest & 1));
        char v[24];
        int n = snprintf(v, sizeof v, "%" PRIu64, rest >> 1);
        arg_str(sc, v, (size_t)n);
        arg_int(sc, (int64_t)rq->count);
        return 4;
    }
    default:
        return 0;
    }
}

static void builder_add(struct dq_store *s, struct builder *b, struct unit *u,
                        int64_t now) {
    struct rreq *rq = u->rq;
    uint32_t gi[MAX_UNIT_GROUPS > 1024 ? MAX_UNIT_GROUPS : 1024];
    for (size_t i = 0; i < u->ng; i++) gi[i] = builder_group(s, b, rq->gs[u->g0 + i]);
    s->scratch.len = 0;
    size_t na = unit_args(u, &s->scratch, now);
    arg_cstr(&b->reqs, OPS[rq->op].lua);
    arg_int(&b->reqs, (int64_t)u->ng);
    for (size_t i = 0; i < u->ng; i++) arg_int(&b->reqs, gi[i] + 1);
    arg_int(&b->reqs, (int64_t)na);
    buf_append(&b->reqs, s->scratch.p, s->scratch.len);
    b->nargs += 3 + u->ng + na;
    if (b->nu == b->ucap) {
        b->ucap = b->ucap ? b->ucap * 2 : 16;
        b->units = xrealloc(b->units, b->ucap * sizeof *b->units);
    }
    b->units[b->nu++] = u;
}

static void script_cb(void *pd, redisReply *r, const char *err);

/* Sends the builder's call and resets it. */
static void builder_send(struct dq_store *s, struct builder *b, int64_t now) {
    if (b->nu == 0) return;
    static const char *const suffix[NKEYS] = {"pool", "ready", "delay",
                                              "lease", "dead", "stats"};
    struct buf out = BUF_INIT;
    int64_t deadline = INT64_MAX;
    arg_int(&out, (int64_t)(NKEYS * b->ng));
    char key[REDIS_PREFIX_MAX + DQ_TOPIC_MAX + 96];
    for (size_t g = 0; g < b->ng; g++) {
        struct rshard *sh = b->groups[g];
        memcpy(key, sh->tag, sh->taglen);
        for (int k = 0; k < NKEYS; k++) {
            size_t sl = strlen(suffix[k]);
            memcpy(key + sh->taglen, suffix[k], sl);
            arg_str(&out, key, sh->taglen + sl);
        }
    }
    arg_int(&out, now);
    arg_cstr(&out, s->inst);
    arg_cstr(&out, s->chan);
    arg_int(&out, (int64_t)b->ng);
    for (size_t g = 0; g < b->ng; g++) {
        struct rshard *sh = b->groups[g];
        arg_str(&out, sh->t->name, sh->t->len);
        arg_int(&out, sh->idx);
        /* whether jobs may be due: adds skip the carry otherwise */
        arg_cstr(&out, sh->next <= now ? "1" : "0");
    }
    arg_int(&out, (int64_t)b->nu);
    buf_append(&out, b->reqs.p, b->reqs.len);
    int argc = (int)(1 + NKEYS * b->ng + 4 + 3 * b->ng + 1 + b->nargs);
    struct scall *sc = xcalloc(1, sizeof *sc);
    sc->s = s;
    sc->units = b->units;
    sc->nu = b->nu;
    sc->groups = b->groups;
    sc->ng = b->ng;
    sc->msg_stamp = s->msg_counter;
    for (size_t i = 0; i < b->nu; i++)
        if (b->units[i]->rq->deadline < deadline) deadline = b->units[i]->rq->deadline;
    s->calls++;
    int slot = b->slot;
    /* reset the builder; the call owns the arrays now */
    b->groups = NULL;
    b->ng = b->gcap = 0;
    b->units = NULL;
    b->nu = b->ucap = 0;
    b->reqs.len = 0;
    b->nargs = 0;
    b->stamp = ++s->bstamp;
    rcli_send(s->cli, slot, RCLI_SCRIPT, argc, out.p, out.len, deadline,
              script_cb, sc);
}

static void builder_init(struct dq_store *s, struct builder *b, int slot) {
    memset(b, 0, sizeof *b);
    b->slot = slot;
    b->stamp = ++s->bstamp;
}

static void builder_destroy(struct builder *b) {
    dq_free(b->groups);
    dq_free(b->units);
    buf_free(&b->reqs);
}

/* Turns the outbox into script calls: one per node (standalone) or slot
 * (cluster), split when a call grows past MAX_CALL_REQS/BYTES. */
static void flush_outbox(struct dq_store *s) {
    if (!s->out_head) return;
    int64_t now = now_ms(s);
    struct unit *u = s->out_head;
    s->out_head = s->out_tail = NULL;
    if (!s->url.cluster) {
        struct builder b;
        builder_init(s, &b, -1);
        for (; u; u = u->next) {
            builder_add(s, &b, u, now);
            if (b.nu >= MAX_CALL_REQS || b.reqs.len >= MAX_CALL_BYTES)
                builder_send(s, &b, now);
        }
        builder_send(s, &b, now);
        builder_destroy(&b);
        return;
    }
    /* cluster: a builder per slot, found through the unit's first group */
    struct builder *bs = NULL;
    size_t nb = 0, cb = 0;
    for (struct unit *next; u; u = next) {
        next = u->next;
        int slot = u->rq->gs[u->g0]->slot;
        size_t i = s->slot_b[slot] > 0 ? (size_t)s->slot_b[slot] - 1 : nb;
        if (i == nb) {
            s->slot_b[slot] = (int32_t)nb + 1;
            if (nb == cb) {
                cb = cb ? cb * 2 : 8;
                bs = xrealloc(bs, cb * sizeof *bs);
            }
            builder_init(s, &bs[nb++], slot);
        }
        builder_add(s, &bs[i], u, now);
        if (bs[i].nu >= MAX_CALL_REQS || bs[i].reqs.len >= MAX_CALL_BYTES)
            builder_send(s, &bs[i], now);
    }
    for (size_t i = 0; i < nb; i++) {
        s->slot_b[bs[i].slot] = 0;
        builder_send(s, &bs[i], now);
        builder_destroy(&bs[i]);
    }
    dq_free(bs);
}

static void get_send(struct rreq *rq);

/* Sends what is queued: plain commands, then the outbox's scripts. Requests
 * were queued in that order (see submit), so they reach Redis in the order
 * the server made them. */
static void send_queued(struct dq_store *s) {
    while (s->raw_head) {
        struct rreq *rq = s->raw_head;
        s->raw_head = rq->next;
        if (!s->raw_head) s->raw_tail = NULL;
        if (rq->op == OP_GET) get_send(rq);
        else registry_fetch(rq);
    }
    flush_outbox(s);
}

static void flush_cb(evutil_socket_t fd, short what, void *arg) {
    struct dq_store *s = arg;
    /* completions first: their callbacks may queue more work */
    while (s->done_head) {
        struct rreq *rq = s->done_head;
        s->done_head = rq->next;
        if (!s->done_head) s->done_tail = NULL;
        req_complete(rq);
    }
    send_queued(s);
}

/* --- replies -------------------------------------------------------------- */

static int64_t int_at(const redisReply *a, size_t i) {
    if (i >= a->elements) return 0;
    const redisReply *e = a->element[i];
    if (e->type == REDIS_REPLY_INTEGER) return e->integer;
    if (e->type == REDIS_REPLY_STRING) return strtoll(e->str, NULL, 10);
    return 0;
}

static const redisReply *str_at(const redisReply *a, size_t i) {
    if (i >= a->elements || a->element[i]->type != REDIS_REPLY_STRING) return NULL;
    return a->element[i];
}

/* --- records ------------------------------------------------------------- */


static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static int64_t ledouble(const unsigned char *p) {
    uint64_t u = 0;
    for (int i = 7; i >= 0; i--) u = u << 8 | p[i];
    double d;
    memcpy(&d, &u, sizeof d);
    return (int64_t)d;
}

/* Fills the numbers of j from a record header (REC_HDR bytes). */
static void rec_decode(struct dq_job *j, const unsigned char *h) {
    j->state = (enum dq_state)h[0];
    j->attempts = le32(h + 1);
    j->ttr = le32(h + 5);
    j->retries = le32(h + 9);
    j->backoff.kind = h[13];
    j->backoff.base = le32(h + 14);
    j->backoff.max = le32(h + 18);
    j->due = ledouble(h + 22);
    j->created = ledouble(h + 30);
    j->deadline = ledouble(h + 38);
}

static struct rjob *job_push(struct rreq *rq) {
    if (rq->njobs == rq->jcap) {
        rq->jcap = rq->jcap ? rq->jcap * 2 : 4;
        rq->jobs = xrealloc(rq->jobs, rq->jcap * sizeof *rq->jobs);
    }
    struct rjob *x = &rq->jobs[rq->njobs++];
    memset(x, 0, sizeof *x);
    return x;
}

static void unit_finished(struct rreq *rq);

static void add_retry(struct rreq *rq);

/* One unit's result (the script's result for its request). */
static void unit_result(struct unit *u, const redisReply *e) {
    struct rreq *rq = u->rq;
    struct dq_store *s = rq->s;
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 1) {
        req_fail(rq, DQ_UNAVAILABLE, "unexpected reply from the Redis script");
        return;
    }
    int64_t code = int_at(e, 0);
    switch (code) {
    case SR_OK: break;
    case SR_EXISTS: req_fail(rq, DQ_EXISTS, NULL); return;
    case SR_BUSY: req_fail(rq, DQ_BUSY, NULL); return;
    case SR_NOTRESERVED: req_fail(rq, DQ_NOTRESERVED, NULL); return;
    case SR_TAKEN: add_retry(rq); return;
    default: req_fail(rq, DQ_UNAVAILABLE, "unexpected reply from the Redis script"); return;
    }
    switch (rq->op) {
    case OP_ADD:
        if (int_at(e, 1)) s->count_delta++;
        break;
    case OP_DEL: case OP_ACK: case OP_PURGE:
        rq->n += int_at(e, 1);
        s->count_delta -= int_at(e, 1);
        break;
    case OP_KICK:
        rq->n += int_at(e, 1);
        if (rq->count) rq->count = (uint64_t)int_at(e, 1) >= rq->count ? 0 : rq->count - (uint64_t)int_at(e, 1);
        break;
    case OP_NACK: case OP_TOUCH: case OP_RELEASE:
        rq->n = int_at(e, 1);
        break;
    case OP_RESERVE: /* gidx id record, per job */
        for (size_t i = 1; i + 3 <= e->elements; i += 3) {
            int64_t gi = int_at(e, i);
            const redisReply *id = str_at(e, i + 1), *rec = str_at(e, i + 2);
            if (gi < 1 || (size_t)gi > u->ng || !id || !rec || rec->len < REC_HDR)
                continue;
            struct rshard *sh = rq->gs[u->g0 + (size_t)gi - 1];
            struct rjob *x = job_push(rq);
            x->topic = arena_put(rq, sh->t->name, sh->t->len);
            x->tlen = sh->t->len;
            x->id = arena_put(rq, id->str, id->len);
            x->ilen = id->len;
            x->body = arena_put(rq, rec->str + REC_HDR, rec->len - REC_HDR);
            x->blen = rec->len - REC_HDR;
            rec_decode(&x->j, (const unsigned char *)rec->str);
            if (rq->count) rq->count--;
        }
        break;
    case OP_LIST: { /* group index, mode, cursor, ids... */
        int64_t gi = int_at(e, 1);
        uint64_t mode = (uint64_t)int_at(e, 2) & 1;
        const redisReply *cur = str_at(e, 3);
        uint64_t v = cur ? strtoull(cur->str, NULL, 10) : 0;
        if (gi < 1 || (size_t)gi > u->ng) gi = (int64_t)u->ng;
        uint64_t shard = rq->gs[u->g0 + (size_t)gi - 1]->idx;
        for (size_t i = 4; i < e->elements; i++) {
            const redisReply *id = str_at(e, i);
            if (id) strs_push(rq, id->str, id->len);
        }
        uint64_t got = e->elements > 4 ? e->elements - 4 : 0;
        rq->count = got >= rq->count ? 0 : rq->count - got;
        if (v == 0 && mode == 0) {
            rq->rcursor = shard + 1 < s->K ? shard + 1 : 0;
        } else {
            rq->rcursor = (v * 2 + mode) * s->K + shard;
            rq->count = 0; /* this shard is not done: the page ends here */
        }
        break;
    }
    case OP_STATS: {
        uint64_t v[12];
        for (int i = 0; i < 12; i++) v[i] = (uint64_t)int_at(e, (size_t)i + 1);
        for (int i = 0; i < 4; i++) rq->st.jobs[i] += v[i];
        rq->st.added += v[4];
        rq->st.reserved += v[5];
        rq->st.acked += v[6];
        rq->st.nacked += v[7];
        rq->st.expired += v[8];
        rq->st.dead += v[9];
        rq->st.deleted += v[10];
        rq->st.kicked += v[11];
        break;
    }
    case OP_TOPICS: case OP_CARRY:
        for (size_t i = 0; i < u->ng; i++) rq->hl[u->g0 + i] = int_at(e, i + 1);
        break;
    case OP_GET: /* never a script request */
        break;
    }
}

/* A unit of rq is over (result recorded or failure noted). */
static void unit_finished(struct rreq *rq) {
    struct dq_store *s = rq->s;
    if (rq->pending > 0) rq->pending--;
    if (rq->pending > 0) return;
    if (rq->retry && rq->status == DQ_OK) {
        rq->retry = false;
        plan(rq);
        outbox_units(s, rq);
        return;
    }
    if (rq->status == DQ_OK && OPS[rq->op].sequential &&
        rq->next_unit < rq->nunits && (rq->count > 0 || rq->kick_all)) {
        outbox_units(s, rq);
        return;
    }
    if (rq->op == OP_TOPICS && rq->status == DQ_OK) {
        /* topics whose shards hold jobs */
        for (size_t i = 0; i < rq->ngs;) {
            struct rtopic *t = rq->gs[i]->t;
            int64_t sum = 0;
            size_t j = i;
            for (; j < rq->ngs && rq->gs[j]->t == t; j++) sum += rq->hl[j];
            if (sum > 0) strs_push(rq, t->name, t->len);
            i = j;
        }
    }
    req_complete(rq);
}

static void map_error(struct rreq *rq, const char *msg) {
    if (strncmp(msg, "OOM", 3) == 0) {
        req_fail(rq, DQ_FULL, "Redis is out of memory (maxmemory)");
        return;
    }
    char m[180];
    snprintf(m, sizeof m, "Redis: %s", msg);
    req_fail(rq, DQ_UNAVAILABLE, m);
}

static void on_ready_all(struct dq_store *s);

static void script_cb(void *pd, redisReply *r, const char *err) {
    struct scall *sc = pd;
    struct dq_store *s = sc->s;
    const redisReply *res = NULL, *info = NULL;
    /* results: flat, per request a count and that many values */
    redisReply *views = NULL;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_ARRAY &&
        r->element[1]->type == REDIS_REPLY_ARRAY &&
        r->element[1]->elements == 2 * sc->ng) {
        const redisReply *flat = r->element[0];
        views = xcalloc(sc->nu ? sc->nu : 1, sizeof *views);
        size_t pos = 0, i = 0;
        for (; i < sc->nu && pos < flat->elements; i++) {
            int64_t k = int_at(flat, pos);
            if (k < 0 || (size_t)k > flat->elements - pos - 1) break;
            views[i].type = REDIS_REPLY_ARRAY;
            views[i].elements = (size_t)k;
            views[i].element = flat->element + pos + 1;
            pos += 1 + (size_t)k;
        }
        if (i == sc->nu && pos == flat->elements) {
            res = flat;
            info = r->element[1];
        }
    } else if (r && r->type == REDIS_REPLY_ERROR) {
        log_warn("redis script error: %s", r->str);
    }
    /* timing first, so requests completing below see the new state */
    if (info) {
        for (size_t g = 0; g < sc->ng; g++) {
            struct rshard *sh = sc->groups[g];
            int64_t nx = int_at(info, 2 * g);
            if (nx == -2 || s->closing) continue; /* nothing new */
            int64_t next;
            if (nx <= -3) { /* jobs queued for that time: "at most" */
                next = -(nx + 3);
                if (sh->next < next) next = sh->next;
            } else { /* the next due time, or none */
                next = nx < 0 ? INT64_MAX : nx;
                if (sh->msg_stamp > sc->msg_stamp && sh->next < next) next = sh->next;
            }
            heap_set(s, sh, next);
        }
        arm_timer(s);
    }
    for (size_t i = 0; i < sc->nu; i++) {
        struct unit *u = sc->units[i];
        struct rreq *rq = u->rq;
        if (res) unit_result(u, &views[i]);
        else if (r && r->type == REDIS_REPLY_ERROR) map_error(rq, r->str);
        else if (r) req_fail(rq, DQ_UNAVAILABLE, "unexpected reply from Redis");
        else req_fail(rq, DQ_UNAVAILABLE, err ? err : "Redis unavailable");
        unit_finished(rq); /* may free u */
    }
    if (info && s->cfg.on_ready && !s->closing) {
        for (size_t g = 0; g < sc->ng; g++) {
            int64_t rl = int_at(info, 2 * g + 1);
            if (rl < 0) continue;
            struct rtopic *t = sc->groups[g]->t;
            s->cfg.on_ready(s->cfg.ud, (struct dq_str){t->name, t->len},
                            s->K == 1 ? rl : -1);
        }
    }
    dq_free(views);
    dq_free(sc->units);
    dq_free(sc->groups);
    dq_free(sc);
}

/* --- ids ------------------------------------------------------------------ */

static void gen_id(struct dq_store *s, struct rreq *rq, bool collided) {
    int64_t now = now_ms(s);
    if (now > s->id_ms) {
        s->id_ms = now;
        s->id_seq = 0;
    } else {
        s->id_seq++;
    }
    if (collided) { /* another instance uses these: jump ahead */
        uint32_t r = 0;
        if (getrandom(&r, sizeof r, GRND_NONBLOCK) != sizeof r) r = (uint32_t)now;
        s->id_seq += 1 + r % 1000;
    }
    int n = snprintf(rq->idbuf, sizeof rq->idbuf, "%" PRId64 "-%" PRIu64,
                     s->id_ms, s->id_seq);
    rq->add.id = (struct dq_str){rq->idbuf, (size_t)n};
    rq->gen = true;
}

/* The generated id was taken (by another instance): try the next one. */
static void add_retry(struct rreq *rq) {
    if (!rq->gen || rq->tries >= 16) {
        req_fail(rq, DQ_UNAVAILABLE, "could not generate a free id");
        return;
    }
    gen_id(rq->s, rq, true);
    rq->tries++;
    rq->retry = true; /* unit_finished sends it again */
}

/* --- GET: a plain HGET, decoded here --------------------------------------- */

static void get_cb(void *pd, redisReply *r, const char *err) {
    struct rreq *rq = pd;
    if (!r) {
        req_fail(rq, DQ_UNAVAILABLE, err);
    } else if (r->type == REDIS_REPLY_ERROR) {
        map_error(rq, r->str);
    } else if (r->type == REDIS_REPLY_STRING && r->len >= REC_HDR) {
        const unsigned char *h = (const unsigned char *)r->str;
        struct rjob *x = job_push(rq);
        x->topic = arena_put(rq, rq->topic.p, rq->topic.len);
        x->tlen = rq->topic.len;
        x->id = arena_put(rq, rq->ids[0].p, rq->ids[0].len);
        x->ilen = rq->ids[0].len;
        x->body = arena_put(rq, r->str + REC_HDR, r->len - REC_HDR);
        x->blen = r->len - REC_HDR;
        struct dq_job *j = &x->j;
        rec_decode(j, h);
        /* what the next carry will make of it, which is the truth now */
        int64_t now = now_ms(rq->s);
        if (j->state == DQ_DELAYED && j->due <= now) {
            j->state = DQ_READY;
        } else if (j->state == DQ_RESERVED && j->deadline <= now) {
            j->due = j->deadline;
            j->state = j->attempts <= j->retries ? DQ_READY : DQ_DEAD;
        }
        if (j->state != DQ_RESERVED) j->deadline = 0;
    } else if (r->type != REDIS_REPLY_NIL) {
        req_fail(rq, DQ_UNAVAILABLE, "unexpected reply from Redis");
    }
    req_complete(rq);
}

static void get_send(struct rreq *rq) {
    struct dq_store *s = rq->s;
    struct rtopic *t = topic_get(s, rq->topic.p, rq->topic.len);
    struct rshard *sh = id_shard(s, t, rq->ids[0]);
    char key[REDIS_PREFIX_MAX + DQ_TOPIC_MAX + 96];
    memcpy(key, sh->tag, sh->taglen);
    memcpy(key + sh->taglen, "pool", 4);
    const char *av[3] = {"HGET", key, rq->ids[0].p};
    size_t al[3] = {4, sh->taglen + 4, rq->ids[0].len};
    send_raw(s, sh->slot, 3, av, al, get_cb, rq);
}

/* --- submission ------------------------------------------------------------ */

static void submit(struct rreq *rq) {
    struct dq_store *s = rq->s;
    if (s->closing) {
        req_fail(rq, DQ_UNAVAILABLE, "the store is closing");
        req_done_later(rq);
        return;
    }
    if (!s->configured) {
        rq->next = NULL;
        if (s->wait_tail) s->wait_tail->next = rq;
        else s->wait_head = rq;
        s->wait_tail = rq;
        return;
    }
    if (rq->op == OP_ADD) {
        struct rtopic *t = topic_get(s, rq->topic.p, rq->topic.len);
        if (s->cfg.max_jobs > 0 &&
            s->count_base + s->count_delta + s->adds_inflight >=
                (int64_t)s->cfg.max_jobs) {
            req_fail(rq, DQ_FULL, NULL);
            req_done_later(rq);
            return;
        }
        topic_register(s, t);
        rq->counted = true;
        s->adds_inflight++;
    }
    if (rq->op == OP_GET || plan(rq) != 0) { /* a plain command first */
        /* A GET must not overtake the changes queued before it (an ADD then
         * a GET of the same job, pipelined): those go out first. */
        if (rq->op == OP_GET && s->out_head) send_queued(s);
        rq->next = NULL;
        if (s->raw_tail) s->raw_tail->next = rq;
        else s->raw_head = rq;
        s->raw_tail = rq;
        event_active(s->flush_ev, 0, 0);
        return;
    }
    if (rq->ngs == 0) {
        req_done_later(rq);
        return;
    }
    outbox_units(s, rq);
}

/* Copies the strings of a request into one allocation. */
static char *req_copy(struct rreq *rq, const struct dq_str *in, struct dq_str *out,
                      size_t n, size_t extra) {
    size_t total = extra;
    for (size_t i = 0; i < n; i++) total += in[i].len;
    char *m = xmalloc(total ? total : 1);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(m + off, in[i].p, in[i].len);
        out[i] = (struct dq_str){m + off, in[i].len};
        off += in[i].len;
    }
    rq->mem = m;
    return m + off;
}

/* --- configuration (shards) and resync ------------------------------------ */

static void release_waiting(struct dq_store *s) {
    struct rreq *rq = s->wait_head;
    s->wait_head = s->wait_tail = NULL;
    while (rq) {
        struct rreq *next = rq->next;
        submit(rq);
        rq = next;
    }
}

static void sweep_now(struct dq_store *s);

/* Everything this instance knows may be stale: wake the blocked RESERVEs
 * and carry every shard. */
static void resync(struct dq_store *s) {
    on_ready_all(s);
    sweep_now(s);
}

static void shards_cb(void *pd, redisReply *r, const char *err) {
    struct dq_store *s = pd;
    s->configuring = false;
    if (s->closing) return;
    if (!r || r->type == REDIS_REPLY_ERROR) {
        log_warn("redis: cannot read %s: %s", s->cfgkey, r ? r->str : err);
        return; /* the next on_up tries again */
    }
    unsigned want = s->K;
    if (r->type == REDIS_REPLY_STRING) {
        long k = strtol(r->str, NULL, 10);
        if (k >= 1 && k <= REDIS_SHARDS_MAX) s->K = (unsigned)k;
    }
    if (s->url.shards && s->K != s->url.shards)
        log_warn("redis: %s is %u; using it instead of shards=%u from the URL "
                 "(every instance must use the same number)",
                 s->cfgkey, s->K, s->url.shards);
    else if (s->K != want)
        log_info("redis: using %u shards per topic (from %s)", s->K, s->cfgkey);
    s->configured = true;
    log_info("redis: ready (%s, %u shard%s per topic, prefix %s)",
             s->url.cluster ? "cluster" : "standalone", s->K, s->K == 1 ? "" : "s",
             s->url.prefix);
    release_waiting(s);
    resync(s);
}

static void noop_reply(void *pd, redisReply *r, const char *err) {}

static void on_up(void *ud) {
    struct dq_store *s = ud;
    if (s->closing) return;
    if (s->configured) {
        resync(s);
        return;
    }
    if (s->configuring) return;
    unsigned masters = rcli_masters(s->cli);
    if (masters == 0) return;
    s->K = s->url.shards ? s->url.shards : (s->url.cluster ? masters : 1);
    s->configuring = true;
    char k[16];
    int kl = snprintf(k, sizeof k, "%u", s->K);
    int slot = (int)redis_keyslot(s->cfgkey, strlen(s->cfgkey));
    const char *av[4] = {"SET", s->cfgkey, k, "NX"};
    size_t al[4] = {3, strlen(s->cfgkey), (size_t)kl, 2};
    send_raw(s, slot, 4, av, al, noop_reply, NULL);
    const char *gv[2] = {"GET", s->cfgkey};
    size_t gl[2] = {3, strlen(s->cfgkey)};
    send_raw(s, slot, 2, gv, gl, shards_cb, s);
}

/* --- wakeups: messages, the timer, the sweep ------------------------------ */

static void on_message(void *ud, const char *msg, size_t len) {
    struct dq_store *s = ud;
    if (!s->configured || s->closing) return;
    /* "<inst> <shard> <due or -1> <ready 0/1> <topic>" */
    char buf[512];
    if (len >= sizeof buf) return;
    memcpy(buf, msg, len);
    buf[len] = '\0';
    char inst[32], topic[DQ_TOPIC_MAX + 1];
    long long shard, due;
    int ready;
    if (sscanf(buf, "%31s %lld %lld %d %200s", inst, &shard, &due, &ready,
               topic) != 5)
        return;
    if (strcmp(inst, s->inst) == 0) return;
    s->messages++;
    if (shard < 0 || (unsigned long long)shard >= s->K) return;
    struct rtopic *t = topic_get(s, topic, strlen(topic));
    struct rshard *sh = &t->sh[shard];
    if (due >= 0) {
        sh->msg_stamp = ++s->msg_counter;
        if (due < sh->next) {
            heap_set(s, sh, due);
            arm_timer(s);
        }
    }
    if (ready && s->cfg.on_ready)
        s->cfg.on_ready(s->cfg.ud, (struct dq_str){t->name, t->len}, -1);
}

static void carry_done(struct rreq *rq) { rq->s->carries++; }

/* Carries the given shards (an internal request). */
static void carry_shards(struct dq_store *s, struct rshard **gs, size_t n,
                         void (*done)(struct rreq *)) {
    struct rreq *rq = req_new(s, OP_CARRY, NULL, NULL);
    rq->internal = done;
    rq->gs = gs;
    rq->ngs = n;
    plan(rq);
    if (n == 0) {
        req_done_later(rq);
        return;
    }
    outbox_units(s, rq);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg) {
    struct dq_store *s = arg;
    s->timer_at = INT64_MAX;
    if (!s->configured) return;
    int64_t now = now_ms(s);
    struct rshard **gs = NULL;
    size_t n = 0, cap = 0;
    while (s->hn && s->heap[0]->next <= now) {
        struct rshard *sh = s->heap[0];
        heap_remove(s, sh);
        /* if the carry fails, try again after a while (the sweep also does) */
        sh->next = INT64_MAX;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            gs = xrealloc(gs, cap * sizeof *gs);
        }
        gs[n++] = sh;
    }
    if (n) carry_shards(s, gs, n, carry_done);
    else dq_free(gs);
    arm_timer(s);
}

static void sweep_done(struct rreq *rq) {
    struct dq_store *s = rq->s;
    s->sweeping = false;
    s->carries++;
    if (rq->status != DQ_OK) return;
    int64_t total = 0;
    for (size_t i = 0; i < rq->ngs; i++) total += rq->hl[i];
    s->count_base = total;
    s->count_delta = 0;
}

static void sweep_members_cb(void *pd, redisReply *r, const char *err) {
    struct dq_store *s = pd;
    if (s->closing) return;
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        s->sweeping = false;
        return;
    }
    s->sweeps++;
    registry_learn(s, r);
    /* repair: topics we registered that the registry lost (Redis restarted
     * empty, FLUSHDB...) are added again */
    struct rreq *rq = req_new(s, OP_CARRY, NULL, NULL);
    rq->internal = sweep_done;
    plan_all_topics(rq);
    for (size_t i = 0; i < rq->ngs; i += s->K) {
        struct rtopic *t = rq->gs[i]->t;
        if (t->registered && t->seen != s->sweeps) {
            t->registered = false;
            topic_register(s, t);
        }
    }
    plan(rq);
    if (rq->ngs == 0) {
        req_done_later(rq);
        return;
    }
    outbox_units(s, rq);
}

static void sweep_now(struct dq_store *s) {
    if (!s->configured || s->sweeping || s->closing) return;
    s->sweeping = true;
    const char *av[2] = {"SMEMBERS", s->regkey};
    size_t al[2] = {8, strlen(s->regkey)};
    send_raw(s, (int)redis_keyslot(s->regkey, al[1]), 2, av, al,
             sweep_members_cb, s);
}

static void sweep_cb(evutil_socket_t fd, short what, void *arg) {
    sweep_now(arg);
}

static void on_ready_all(struct dq_store *s) {
    if (!s->cfg.on_ready) return;
    /* collect first: on_ready may create topics */
    size_t n = 0;
    struct dq_str *names = xmalloc((s->ntopics ? s->ntopics : 1) * sizeof *names);
    struct htab *h = &s->topics;
    for (int b = 0; b < 2; b++) {
        if (!h->b[b]) continue;
        for (uint64_t i = 0; i <= h->mask[b]; i++) {
            if (b == 0 && h->b[1] && i < h->rehash) continue;
            for (struct hnode *hn = h->b[b][i]; hn; hn = hn->next) {
                struct rtopic *t = (struct rtopic *)hn;
                names[n++] = (struct dq_str){t->name, t->len};
            }
        }
    }
    for (size_t i = 0; i < n; i++) s->cfg.on_ready(s->cfg.ud, names[i], -1);
    dq_free(names);
}

/* --- the operations ------------------------------------------------------- */

static int redis_open(struct dq_store **out, const struct dq_store_config *cfg,
                      char *err, size_t errlen) {
    struct dq_store *s = xcalloc(1, sizeof *s);
    s->cfg = *cfg;
    if (redis_url_parse(cfg->url, &s->url, err, errlen) != 0) {
        dq_free(s);
        return -1;
    }
    uint64_t r[2] = {0, 0};
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != sizeof r) {
        r[0] = (uint64_t)clock_us();
        r[1] = (uint64_t)getpid();
    }
    snprintf(s->inst, sizeof s->inst, "%016" PRIx64, r[0] ^ (r[1] << 1));
    snprintf(s->chan, sizeof s->chan, "%s:wake", s->url.prefix);
    snprintf(s->regkey, sizeof s->regkey, "%s:topics", s->url.prefix);
    snprintf(s->cfgkey, sizeof s->cfgkey, "%s:shards", s->url.prefix);
    s->K = 1;
    s->timer_at = INT64_MAX;
    if (htab_init(&s->topics, 64, topic_rehash) != 0) {
        snprintf(err, errlen, "out of memory");
        dq_free(s);
        return -1;
    }
    if (s->url.cluster) s->slot_b = xcalloc(REDIS_SLOTS, sizeof *s->slot_b);
    s->timer_ev = evtimer_new(cfg->base, timer_cb, s);
    s->sweep_ev = event_new(cfg->base, -1, EV_PERSIST, sweep_cb, s);
    s->flush_ev = event_new(cfg->base, -1, 0, flush_cb, s);
    struct rcli_config cc = {
        .base = cfg->base, .url = &s->url, .script = asset_store_lua_delayq_lua,
        .channel = s->chan, .on_message = on_message, .on_up = on_up, .ud = s,
    };
    if (!s->timer_ev || !s->sweep_ev || !s->flush_ev ||
        !(s->cli = rcli_new(&cc, err, errlen))) {
        if (s->timer_ev) event_free(s->timer_ev);
        if (s->sweep_ev) event_free(s->sweep_ev);
        if (s->flush_ev) event_free(s->flush_ev);
        htab_destroy(&s->topics);
        dq_free(s->slot_b);
        dq_free(s);
        return -1;
    }
    struct timeval tv = {SWEEP_MS / 1000, (SWEEP_MS % 1000) * 1000};
    event_add(s->sweep_ev, &tv);
    log_info("redis store: %s (prefix %s)", s->url.cluster ? "cluster" : "standalone",
             s->url.prefix);
    *out = s;
    return 0;
}

static void fail_list(struct rreq *rq) {
    while (rq) {
        struct rreq *next = rq->next;
        req_fail(rq, DQ_UNAVAILABLE, "the store is closing");
        req_complete(rq);
        rq = next;
    }
}

static void redis_close(struct dq_store *s) {
    if (!s) return;
    /* send what is queued and wait for the answers */
    flush_cb(-1, 0, s);
    s->closing = true;
    evtimer_del(s->timer_ev);
    event_del(s->sweep_ev);
    rcli_free(s->cli, DRAIN_MS);
    s->cli = NULL;
    /* what is left never reached Redis */
    struct rreq *w = s->wait_head, *d = s->done_head, *q = s->raw_head;
    s->wait_head = s->wait_tail = s->done_head = s->done_tail = NULL;
    s->raw_head = s->raw_tail = NULL;
    fail_list(d);
    fail_list(w);
    fail_list(q);
    while (s->out_head) { /* units queued by callbacks during the drain */
        struct unit *u = s->out_head;
        s->out_head = u->next;
        req_fail(u->rq, DQ_UNAVAILABLE, "the store is closing");
        unit_finished(u->rq);
    }
    event_free(s->timer_ev);
    event_free(s->sweep_ev);
    event_free(s->flush_ev);
    htab_foreach(&s->topics, topic_free, s);
    htab_destroy(&s->topics);
    dq_free(s->heap);
    dq_free(s->slot_b);
    buf_free(&s->scratch);
    dq_free(s);
}

static void redis_add(struct dq_store *s, const struct dq_add *a,
                      dq_store_cb *cb, void *pd) {
    struct rreq *rq = req_new(s, OP_ADD, cb, pd);
    struct dq_str in[3] = {a->topic, a->id, a->body}, out[3];
    req_copy(rq, in, out, 3, 0);
    rq->add = *a;
    rq->topic = rq->add.topic = out[0];
    rq->add.id = out[1];
    rq->add.body = out[2];
    if (a->id.len == 1 && a->id.p[0] == '*') gen_id(s, rq, false);
    submit(rq);
}

static struct rreq *req_ids(struct dq_store *s, enum op op, struct dq_str topic,
                            const struct dq_str *ids, size_t nids,
                            dq_store_cb *cb, void *pd) {
    struct rreq *rq = req_new(s, op, cb, pd);
    struct dq_str *in = xmalloc((nids + 1) * sizeof *in);
    rq->ids = xmalloc((nids + 1) * sizeof *rq->ids);
    in[0] = topic;
    if (nids) memcpy(in + 1, ids, nids * sizeof *ids);
    req_copy(rq, in, rq->ids, nids + 1, 0);
    dq_free(in);
    rq->topic = rq->ids[0];
    memmove(rq->ids, rq->ids + 1, nids * sizeof *rq->ids);
    rq->nids = nids;
    return rq;
}

static void redis_del(struct dq_store *s, struct dq_str topic,
                      const struct dq_str *ids, size_t nids, dq_store_cb *cb,
                      void *pd) {
    submit(req_ids(s, OP_DEL, topic, ids, nids, cb, pd));
}

static void redis_ack(struct dq_store *s, struct dq_str topic,
                      const struct dq_str *ids, size_t nids, dq_store_cb *cb,
                      void *pd) {
    submit(req_ids(s, OP_ACK, topic, ids, nids, cb, pd));
}

static void redis_get(struct dq_store *s, struct dq_str topic, struct dq_str id,
                      dq_store_cb *cb, void *pd) {
    submit(req_ids(s, OP_GET, topic, &id, 1, cb, pd));
}

static void redis_reserve(struct dq_store *s, const struct dq_str *topics,
                          size_t ntopics, uint32_t count, dq_store_cb *cb,
                          void *pd) {
    struct rreq *rq = req_new(s, OP_RESERVE, cb, pd);
    rq->topics = xmalloc((ntopics ? ntopics : 1) * sizeof *rq->topics);
    req_copy(rq, topics, rq->topics, ntopics, 0);
    rq->ntopics = ntopics;
    rq->count = count ? count : 1;
    if (rq->count > DQ_COUNT_MAX) rq->count = DQ_COUNT_MAX;
    submit(rq);
}

static void redis_nack(struct dq_store *s, struct dq_str topic, struct dq_str id,
                       int64_t delay, dq_store_cb *cb, void *pd) {
    struct rreq *rq = req_ids(s, OP_NACK, topic, &id, 1, cb, pd);
    rq->delay = delay < 0 ? -1 : delay;
    submit(rq);
}

static void redis_touch(struct dq_store *s, struct dq_str topic,
                        struct dq_str id, uint32_t ttr, dq_store_cb *cb,
                        void *pd) {
    struct rreq *rq = req_ids(s, OP_TOUCH, topic, &id, 1, cb, pd);
    rq->ttr = ttr;
    submit(rq);
}

static void redis_release(struct dq_store *s, struct dq_str topic,
                          struct dq_str id, dq_store_cb *cb, void *pd) {
    submit(req_ids(s, OP_RELEASE, topic, &id, 1, cb, pd));
}

static void redis_kick(struct dq_store *s, struct dq_str topic, uint64_t count,
                       dq_store_cb *cb, void *pd) {
    struct rreq *rq = req_ids(s, OP_KICK, topic, NULL, 0, cb, pd);
    rq->count = count;
    rq->kick_all = count == 0;
    submit(rq);
}

static void redis_list(struct dq_store *s, struct dq_str topic, int state,
                       uint32_t count, uint64_t cursor, dq_store_cb *cb,
                       void *pd) {
    struct rreq *rq = req_ids(s, OP_LIST, topic, NULL, 0, cb, pd);
    rq->state = state;
    rq->count = count ? count : 10;
    rq->cursor = cursor;
    submit(rq);
}

static void redis_purge(struct dq_store *s, struct dq_str topic,
                        dq_store_cb *cb, void *pd) {
    submit(req_ids(s, OP_PURGE, topic, NULL, 0, cb, pd));
}

static void redis_stats(struct dq_store *s, struct dq_str topic,
                        dq_store_cb *cb, void *pd) {
    submit(req_ids(s, OP_STATS, topic, NULL, 0, cb, pd));
}

static void redis_topics(struct dq_store *s, dq_store_cb *cb, void *pd) {
    submit(req_ids(s, OP_TOPICS, (struct dq_str){"", 0}, NULL, 0, cb, pd));
}

static void redis_info(struct dq_store *s, dq_info_emit *emit, void *ud) {
    emit(ud, "store_redis_mode", s->url.cluster ? "cluster" : "standalone");
    emit(ud, "store_redis_prefix", s->url.prefix);
    dq_info_int(emit, ud, "store_redis_shards", (int64_t)(s->K));
    emit(ud, "store_redis_ready", s->configured && rcli_ready(s->cli) ? "1" : "0");
    dq_info_int(emit, ud, "store_redis_masters", (int64_t)(rcli_masters(s->cli)));
    dq_info_int(emit, ud, "store_redis_known_topics", (int64_t)(s->ntopics));
    dq_info_int(emit, ud, "store_redis_requests", (int64_t)(s->requests));
    dq_info_int(emit, ud, "store_redis_script_calls", (int64_t)(s->calls));
    dq_info_int(emit, ud, "store_redis_carries", (int64_t)(s->carries));
    dq_info_int(emit, ud, "store_redis_messages", (int64_t)(s->messages));
    dq_info_int(emit, ud, "store_redis_jobs_estimate", (int64_t)(s->count_base + s->count_delta));
    rcli_info(s->cli, emit, ud);
}

const struct dq_store_ops dq_store_redis = {
    .name = "redis",
    .open = redis_open,
    .close = redis_close,
    .add = redis_add,
    .del = redis_del,
    .get = redis_get,
    .reserve = redis_reserve,
    .ack = redis_ack,
    .nack = redis_nack,
    .touch = redis_touch,
    .release = redis_release,
    .kick = redis_kick,
    .list = redis_list,
    .purge = redis_purge,
    .stats = redis_stats,
    .topics = redis_topics,
    .info = redis_info,
};
