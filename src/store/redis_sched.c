/* redis_sched.c -- the Redis store in time: topics and their shards, the
 * heap of next due times and its timer, the topic registry, wakeup messages
 * from the other instances, carries and the sweep.
 *
 * Every script first "carries" the shards it touches (due jobs -> ready,
 * ended leases -> ready or dead) and answers with each shard's next due
 * time; this instance keeps those in a heap and arms one timer at the
 * earliest. Scripts PUBLISH on <prefix>:wake when a shard got ready jobs or
 * an earlier next due time, so the other instances wake their blocked
 * RESERVEs and their timers; a sweep every 900 ms carries every shard of
 * every registered topic, so a lost message or a dead instance never leaves
 * jobs unmoved. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/log.h"
#include "lib/xalloc.h"
#include "store/redis_int.h"

static struct rtopic *topic_find(struct dq_store *s, const char *name,
                                 size_t len);
static void heap_swap(struct dq_store *s, size_t a, size_t b);
static void heap_up(struct dq_store *s, size_t i);
static void heap_down(struct dq_store *s, size_t i);
static void heap_remove(struct dq_store *s, struct rshard *sh);
static void registry_learn(struct dq_store *s, redisReply *r);
static void members_cb(void *pd, redisReply *r, const char *err, bool sent);
static void sadd_cb(void *pd, redisReply *r, const char *err, bool sent);
static void carry_done(struct rreq *rq);
static void carry_shards(struct dq_store *s, struct rshard **gs, size_t n,
                         void (*done)(struct rreq *));
static void sweep_done(struct rreq *rq);
static void sweep_members_cb(void *pd, redisReply *r, const char *err, bool sent);

/* --- topics and shards --------------------------------------------------- */

uint64_t rs_topic_rehash(const struct hnode *n) {
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
struct rtopic *rs_topic_get(struct dq_store *s, const char *name,
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

void rs_topic_free(void *ud, struct hnode *n) {
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
void rs_heap_set(struct dq_store *s, struct rshard *sh, int64_t next) {
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

void rs_arm_timer(struct dq_store *s) {
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

/* --- registry ------------------------------------------------------------ */


/* Phase 0 of TOPICS and STATS without a topic: learn the registry. */
void rs_registry_fetch(struct rreq *rq) {
    struct dq_store *s = rq->s;
    const char *av[2] = {"SMEMBERS", s->regkey};
    size_t al[2] = {8, strlen(s->regkey)};
    rs_send_raw(s, (int)redis_keyslot(s->regkey, al[1]), 2, av, al, members_cb, rq);
}

static void registry_learn(struct dq_store *s, redisReply *r) {
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_STRING || e->len == 0 || e->len > DQ_TOPIC_MAX)
            continue;
        struct rtopic *t = rs_topic_get(s, e->str, e->len);
        t->registered = true;
        t->seen = s->sweeps;
    }
}

static void members_cb(void *pd, redisReply *r, const char *err, bool sent) {
    struct rreq *rq = pd;
    struct dq_store *s = rq->s;
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        rs_req_fail(rq, DQ_UNAVAILABLE, r ? r->str : err);
        rs_req_complete(rq);
        return;
    }
    registry_learn(s, r);
    rq->phase = 1;
    rs_plan(rq);
    if (rq->ngs == 0) {
        rs_req_complete(rq);
        return;
    }
    rs_outbox_units(s, rq);
}

static void sadd_cb(void *pd, redisReply *r, const char *err, bool sent) {
    struct rtopic *t = pd;
    t->registering = false;
    if (r && r->type == REDIS_REPLY_INTEGER) t->registered = true;
}

void rs_topic_register(struct dq_store *s, struct rtopic *t) {
    if (t->registered || t->registering) return;
    t->registering = true;
    const char *av[3] = {"SADD", s->regkey, t->name};
    size_t al[3] = {4, strlen(s->regkey), t->len};
    rs_send_raw(s, (int)redis_keyslot(s->regkey, al[1]), 3, av, al, sadd_cb, t);
}

/* --- wakeups: messages, the timer, the sweep ------------------------------ */

void rs_on_message(void *ud, const char *msg, size_t len) {
    struct dq_store *s = ud;
    if (!s->configured || s->closing) return;
    /* "<inst> <shard> <due or -1> <ready> <topic>"; ready: 1 jobs became
     * ready, 2 push jobs did, 3 both */
    size_t il = strlen(s->inst);
    if (len > il && memcmp(msg, s->inst, il) == 0 && msg[il] == ' ') return; /* our own */
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
    struct rtopic *t = rs_topic_get(s, topic, strlen(topic));
    struct rshard *sh = &t->sh[shard];
    if (due >= 0) {
        sh->msg_stamp = ++s->msg_counter;
        if (due < sh->next) {
            rs_heap_set(s, sh, due);
            rs_arm_timer(s);
        }
    }
    if ((ready & 1) && s->cfg.on_ready)
        s->cfg.on_ready(s->cfg.ud, (struct dq_str){t->name, t->len}, -1);
    if ((ready & 2) && s->cfg.on_push_ready)
        s->cfg.on_push_ready(s->cfg.ud, (struct dq_str){t->name, t->len}, -1);
}

static void carry_done(struct rreq *rq) { rq->s->carries++; }

/* Carries the given shards (an internal request). */
static void carry_shards(struct dq_store *s, struct rshard **gs, size_t n,
                         void (*done)(struct rreq *)) {
    struct rreq *rq = rs_req_new(s, OP_CARRY, NULL, NULL);
    rq->internal = done;
    rq->gs = gs;
    rq->ngs = n;
    rs_plan(rq);
    if (n == 0) {
        rs_req_done_later(rq);
        return;
    }
    rs_outbox_units(s, rq);
}

void rs_timer_cb(evutil_socket_t fd, short what, void *arg) {
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
    rs_arm_timer(s);
}

static void sweep_done(struct rreq *rq) {
    struct dq_store *s = rq->s;
    s->sweeping = false;
    s->carries++;
    if (rq->status != DQ_OK) return;
    if (s->failed_reserves) {
        /* RESERVEs failed as unavailable since the last sweep; the server
         * keeps blocked ones waiting for on_ready: Redis answers again */
        s->failed_reserves = false;
        rs_on_ready_all(s);
    }
    int64_t total = 0;
    for (size_t i = 0; i < rq->ngs; i++) total += rq->hl[i];
    s->count_base = total;
    s->count_delta = 0;
}

static void sweep_members_cb(void *pd, redisReply *r, const char *err, bool sent) {
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
    struct rreq *rq = rs_req_new(s, OP_CARRY, NULL, NULL);
    rq->internal = sweep_done;
    rs_plan_all_topics(rq);
    for (size_t i = 0; i < rq->ngs; i += s->K) {
        struct rtopic *t = rq->gs[i]->t;
        if (t->registered && t->seen != s->sweeps) {
            t->registered = false;
            rs_topic_register(s, t);
        }
    }
    rs_plan(rq);
    if (rq->ngs == 0) {
        rs_req_done_later(rq);
        return;
    }
    rs_outbox_units(s, rq);
}

void rs_sweep_now(struct dq_store *s) {
    if (!s->configured || s->sweeping || s->closing) return;
    s->sweeping = true;
    const char *av[2] = {"SMEMBERS", s->regkey};
    size_t al[2] = {8, strlen(s->regkey)};
    rs_send_raw(s, (int)redis_keyslot(s->regkey, al[1]), 2, av, al,
             sweep_members_cb, s);
}

void rs_sweep_cb(evutil_socket_t fd, short what, void *arg) {
    struct dq_store *s = arg;
    if (!s->configured) { /* Redis was not ready: try again */
        if (rcli_ready(s->cli)) rs_on_up(s);
        return;
    }
    rs_sweep_now(s);
}

struct names {
    struct dq_str *v;
    size_t n;
};

static void collect_name(void *ud, struct hnode *n) {
    struct names *c = ud;
    struct rtopic *t = (struct rtopic *)n;
    c->v[c->n++] = (struct dq_str){t->name, t->len};
}

void rs_on_ready_all(struct dq_store *s) {
    /* collect first: on_ready may create topics */
    struct names c = {xmalloc((s->ntopics ? s->ntopics : 1) * sizeof *c.v), 0};
    htab_foreach(&s->topics, collect_name, &c);
    for (size_t i = 0; i < c.n; i++) {
        if (s->cfg.on_ready) s->cfg.on_ready(s->cfg.ud, c.v[i], -1);
        if (s->cfg.on_push_ready) s->cfg.on_push_ready(s->cfg.ud, c.v[i], -1);
    }
    dq_free(c.v);
}
