/* redis.c -- the Redis store (DESIGN §6; docs/redis.md tells the design):
 * its operations, the life of a request, ids, configuration and INFO.
 *
 * Jobs live in Redis under one hash tag per (topic, shard): a pool hash
 * (id -> packed record), a ready list, a delay zset (id -> due), a lease
 * zset (id -> lease end), a dead zset (id -> time of death) and a stats hash.
 * Every transition is one request of the Lua script (lua/delayq.lua); the
 * store batches the requests made in one loop iteration into one EVALSHA per
 * node (standalone) or per slot (cluster), so a call carries many
 * transitions, each atomic. redis_int.h tells how the files share the work.
 */
#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include "lib/clock.h"
#include "lib/htab.h"
#include "lib/log.h"
#include "lib/xalloc.h"
#include "store/redis_int.h"
#include "store/redis_lua.h"

/* The script's name for each op, and whether its units run one after the
 * other (they share a count) or all at once. */
const struct rs_opinfo OPS[] = {
    [OP_ADD] = {"add", false},       [OP_DEL] = {"del", false},
    [OP_ACK] = {"del", false},       [OP_GET] = {"gets", false},
    [OP_RESERVE] = {"reserve", true}, [OP_NACK] = {"nack", false},
    [OP_TOUCH] = {"touch", false},   [OP_RELEASE] = {"release", false},
    [OP_KICK] = {"kick", true},      [OP_LIST] = {"list", true},
    [OP_PURGE] = {"purge", false},   [OP_STATS] = {"stats", false},
    [OP_TOPICS] = {"carry", false},  [OP_CARRY] = {"carry", false},
    [OP_KICKJOB] = {"kickjob", false},
    [OP_RESERVE_PUSH] = {"preserve", true},
};

static void req_free(struct rreq *rq);
static void gen_id(struct dq_store *s, struct rreq *rq, bool collided);
static void wait_arm(struct dq_store *s);
static void wait_cb(evutil_socket_t fd, short what, void *arg);
static char *req_copy(struct rreq *rq, const struct dq_str *in, struct dq_str *out,
                      size_t n, size_t extra);
static void release_waiting(struct dq_store *s);
static void resync(struct dq_store *s);
static void shards_cb(void *pd, redisReply *r, const char *err, bool sent);
static void noop_reply(void *pd, redisReply *r, const char *err, bool sent);
static int redis_open(struct dq_store **out, const struct dq_store_config *cfg,
                      char *err, size_t errlen);
static void fail_list(struct rreq *rq);
static void redis_close(struct dq_store *s);
static void redis_add(struct dq_store *s, const struct dq_add *a,
                      dq_store_cb *cb, void *pd);
static struct rreq *req_ids(struct dq_store *s, enum op op, struct dq_str topic,
                            const struct dq_str *ids, size_t nids,
                            dq_store_cb *cb, void *pd);
static void redis_del(struct dq_store *s, struct dq_str topic,
                      const struct dq_str *ids, size_t nids, dq_store_cb *cb,
                      void *pd);
static void redis_ack(struct dq_store *s, struct dq_str topic,
                      const struct dq_str *ids, size_t nids, dq_store_cb *cb,
                      void *pd);
static void redis_get(struct dq_store *s, struct dq_str topic, struct dq_str id,
                      dq_store_cb *cb, void *pd);
static void redis_reserve(struct dq_store *s, const struct dq_str *topics,
                          size_t ntopics, uint32_t count, dq_store_cb *cb,
                          void *pd);
static void redis_reserve_push(struct dq_store *s, struct dq_str topic,
                               uint32_t count, dq_store_cb *cb, void *pd);
static void redis_nack(struct dq_store *s, struct dq_str topic, struct dq_str id,
                       int64_t delay, dq_store_cb *cb, void *pd);
static void redis_touch(struct dq_store *s, struct dq_str topic,
                        struct dq_str id, uint32_t ttr, dq_store_cb *cb,
                        void *pd);
static void redis_release(struct dq_store *s, struct dq_str topic,
                          struct dq_str id, dq_store_cb *cb, void *pd);
static void redis_kick(struct dq_store *s, struct dq_str topic, uint64_t count,
                       dq_store_cb *cb, void *pd);
static void redis_list(struct dq_store *s, struct dq_str topic, int state,
                       uint32_t count, uint64_t cursor, dq_store_cb *cb,
                       void *pd);
static void redis_purge(struct dq_store *s, struct dq_str topic,
                        dq_store_cb *cb, void *pd);
static void redis_stats(struct dq_store *s, struct dq_str topic,
                        dq_store_cb *cb, void *pd);
static void redis_topics(struct dq_store *s, dq_store_cb *cb, void *pd);
static void redis_info(struct dq_store *s, dq_info_emit *emit, void *ud);

/* --- requests -------------------------------------------------------------- */

struct rreq *rs_req_new(struct dq_store *s, enum op op, dq_store_cb *cb,
                            void *pd) {
    struct rreq *rq = xcalloc(1, sizeof *rq);
    rq->s = s;
    rq->op = op;
    rq->cb = cb;
    rq->pd = pd;
    rq->deadline = rcli_now_us() + CALL_TIMEOUT_US;
    if (s->nspare) rq->set = s->spare_sets[--s->nspare];
    s->requests++;
    return rq;
}

/* Frees p unless it is rq's own room (rq->in), not freed on its own. */
static void own_free(struct rreq *rq, void *p) {
    const char *c = p;
    if (c < (const char *)&rq->in || c >= (const char *)(&rq->in + 1)) dq_free(p);
}

void *rs_req_array(struct rreq *rq, void *old, void *room, size_t cap, size_t n,
                   size_t sz) {
    own_free(rq, old);
    return n <= cap ? room : xmalloc(n * sz);
}

static void req_free(struct rreq *rq) {
    own_free(rq, rq->mem);
    own_free(rq, rq->topics);
    own_free(rq, rq->ids);
    own_free(rq, rq->gs);
    own_free(rq, rq->gids);
    own_free(rq, rq->gcnt);
    own_free(rq, rq->units);
    dq_free(rq->hl);
    struct dq_store *s = rq->s;
    if (s->nspare < sizeof s->spare_sets / sizeof s->spare_sets[0] && !s->closing) {
        res_reset(&rq->set, SPARE_SET_KEEP);
        s->spare_sets[s->nspare++] = rq->set;
    } else {
        res_free(&rq->set);
    }
    dq_free(rq);
}

void rs_req_fail(struct rreq *rq, int status, const char *msg) {
    if (rq->status != DQ_OK) return; /* the first failure tells */
    rq->status = status;
    if (msg) {
        snprintf(rq->errbuf, sizeof rq->errbuf, "%.*s",
                 (int)sizeof rq->errbuf - 1, msg);
    } else {
        rq->errbuf[0] = '\0';
    }
}

void rs_strs_push(struct rreq *rq, const char *p, size_t len) {
    res_str(&rq->set, &rq->res, (struct dq_str){p, len});
}

/* Calls the request's callback with its result and frees it. */
void rs_req_complete(struct rreq *rq) {
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
    bool reserve = rq->op == OP_RESERVE || rq->op == OP_RESERVE_PUSH;
    if (rq->op == OP_RESERVE && rq->status == DQ_UNAVAILABLE) s->failed_reserves = true;
    struct res *r = &rq->res;
    r->status = rq->status;
    r->n = rq->n;
    r->cursor = rq->rcursor;
    switch (rq->op) {
    case OP_ADD: res_id(&rq->set, r, rq->add.id); break;
    case OP_GET: case OP_RESERVE: case OP_RESERVE_PUSH: res_jobs(&rq->set, r); break;
    case OP_LIST: case OP_TOPICS: res_strs(&rq->set, r); break;
    case OP_STATS: res_stats(&rq->set, r, &rq->st); break;
    default: break;
    }
    if (rq->status != DQ_OK) {
        /* a reserve that got jobs before failing must hand them out */
        if (reserve && r->cnt > 0) {
            r->status = DQ_OK;
        } else {
            res_clear(r);
            r->errmsg = rq->errbuf[0] ? rq->errbuf : NULL;
        }
    }
    res_fire(&rq->set, r, rq->cb, rq->pd);
    req_free(rq);
}

/* Completes a request from the flush event (never inside its op call). */
void rs_req_done_later(struct rreq *rq) {
    struct dq_store *s = rq->s;
    if (s->closing) { /* no loop any more */
        rs_req_complete(rq);
        return;
    }
    rq->next = NULL;
    if (s->done_tail) s->done_tail->next = rq;
    else s->done_head = rq;
    s->done_tail = rq;
    event_active(s->flush_ev, 0, 0);
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
void rs_add_retry(struct rreq *rq) {
    if (!rq->gen || rq->tries >= 16) {
        rs_req_fail(rq, DQ_UNAVAILABLE, "could not generate a free id");
        return;
    }
    gen_id(rq->s, rq, true);
    rq->tries++;
    rq->retry = true; /* rs_unit_finished sends it again */
}

/* --- submission ------------------------------------------------------------ */

void rs_submit(struct rreq *rq) {
    struct dq_store *s = rq->s;
    if (s->closing) {
        rs_req_fail(rq, DQ_UNAVAILABLE, "the store is closing");
        rs_req_done_later(rq);
        return;
    }
    if (!s->configured) {
        /* answered when the store is ready, or UNAVAILABLE at its deadline
         * (the list is in deadline order: every request has the same wait) */
        rq->next = NULL;
        if (s->wait_tail) s->wait_tail->next = rq;
        else s->wait_head = rq;
        s->wait_tail = rq;
        if (s->wait_head == rq) wait_arm(s);
        return;
    }
    if (rq->op == OP_ADD) {
        struct rtopic *t = rs_topic_get(s, rq->topic.p, rq->topic.len);
        if (s->cfg.max_jobs > 0 &&
            s->count_base + s->count_delta + s->adds_inflight >=
                (int64_t)s->cfg.max_jobs) {
            rs_req_fail(rq, DQ_FULL, NULL);
            rs_req_done_later(rq);
            return;
        }
        rs_topic_register(s, t);
        rq->counted = true;
        s->adds_inflight++;
    }
    if (rs_plan(rq) != 0) { /* a plain command first */
        rq->next = NULL;
        if (s->raw_tail) s->raw_tail->next = rq;
        else s->raw_head = rq;
        s->raw_tail = rq;
        event_active(s->flush_ev, 0, 0);
        return;
    }
    if (rq->ngs == 0) {
        rs_req_done_later(rq);
        return;
    }
    rs_outbox_units(s, rq);
}

/* Arms the wait timer for the first waiting request's deadline. */
static void wait_arm(struct dq_store *s) {
    if (!s->wait_head || s->closing) return;
    int64_t us = s->wait_head->deadline - rcli_now_us();
    if (us < 0) us = 0;
    struct timeval tv = {us / 1000000, us % 1000000};
    evtimer_add(s->wait_ev, &tv);
}

/* Requests that waited for the store to be ready until their deadline:
 * UNAVAILABLE (they were never sent). */
static void wait_cb(evutil_socket_t fd, short what, void *arg) {
    struct dq_store *s = arg;
    int64_t now = rcli_now_us();
    char why[160];
    rcli_status(s->cli, why, sizeof why);
    while (s->wait_head && s->wait_head->deadline <= now) {
        struct rreq *rq = s->wait_head;
        s->wait_head = rq->next;
        if (!s->wait_head) s->wait_tail = NULL;
        rs_req_fail(rq, DQ_UNAVAILABLE, why);
        rs_req_complete(rq);
    }
    wait_arm(s);
}

/* Copies the strings of a request into one allocation. */
static char *req_copy(struct rreq *rq, const struct dq_str *in, struct dq_str *out,
                      size_t n, size_t extra) {
    size_t total = extra;
    for (size_t i = 0; i < n; i++) total += in[i].len;
    char *m = REQ_ARRAY(rq, rq->mem, mem, total);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (in[i].len) memcpy(m + off, in[i].p, in[i].len);
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
    evtimer_del(s->wait_ev);
    while (rq) {
        struct rreq *next = rq->next;
        rs_submit(rq);
        rq = next;
    }
}


/* Everything this instance knows may be stale: wake the blocked RESERVEs
 * and carry every shard. */
static void resync(struct dq_store *s) {
    rs_on_ready_all(s);
    rs_sweep_now(s);
}

static void shards_cb(void *pd, redisReply *r, const char *err, bool sent) {
    struct dq_store *s = pd;
    s->configuring = false;
    if (s->closing) return;
    if (!r || r->type == REDIS_REPLY_ERROR) {
        if (!s->cfg_warned) /* once until it works; the sweep timer retries */
            log_warn("redis: cannot read %s: %s (retrying)", s->cfgkey,
                     r ? r->str : err);
        s->cfg_warned = true;
        return;
    }
    s->cfg_warned = false;
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

static void noop_reply(void *pd, redisReply *r, const char *err, bool sent) {}

void rs_on_up(void *ud) {
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
    rs_send_raw(s, slot, 4, av, al, noop_reply, NULL);
    const char *gv[2] = {"GET", s->cfgkey};
    size_t gl[2] = {3, strlen(s->cfgkey)};
    rs_send_raw(s, slot, 2, gv, gl, shards_cb, s);
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
    if (htab_init(&s->topics, 64, rs_topic_rehash) != 0) {
        snprintf(err, errlen, "out of memory");
        dq_free(s);
        return -1;
    }
    if (s->url.cluster) s->slot_b = xcalloc(REDIS_SLOTS, sizeof *s->slot_b);
    s->timer_ev = evtimer_new(cfg->base, rs_timer_cb, s);
    s->sweep_ev = event_new(cfg->base, -1, EV_PERSIST, rs_sweep_cb, s);
    s->flush_ev = event_new(cfg->base, -1, 0, rs_flush_cb, s);
    s->wait_ev = evtimer_new(cfg->base, wait_cb, s);
    struct rcli_config cc = {
        .base = cfg->base, .url = &s->url, .script = asset_store_lua_delayq_lua,
        .channel = s->chan, .on_message = rs_on_message, .on_up = rs_on_up, .ud = s,
    };
    if (!s->timer_ev || !s->sweep_ev || !s->flush_ev || !s->wait_ev ||
        !(s->cli = rcli_new(&cc, err, errlen))) {
        if (s->wait_ev) event_free(s->wait_ev);
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
        rs_req_fail(rq, DQ_UNAVAILABLE, "the store is closing");
        rs_req_complete(rq);
        rq = next;
    }
}

static void redis_close(struct dq_store *s) {
    if (!s) return;
    /* send what is queued and wait for the answers */
    rs_flush_cb(-1, 0, s);
    s->closing = true;
    evtimer_del(s->timer_ev);
    evtimer_del(s->wait_ev);
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
        rs_req_fail(u->rq, DQ_UNAVAILABLE, "the store is closing");
        rs_unit_finished(u->rq);
    }
    event_free(s->timer_ev);
    event_free(s->sweep_ev);
    event_free(s->flush_ev);
    event_free(s->wait_ev);
    htab_foreach(&s->topics, rs_topic_free, s);
    htab_destroy(&s->topics);
    dq_free(s->heap);
    dq_free(s->slot_b);
    buf_free(&s->scratch);
    while (s->nspare) res_free(&s->spare_sets[--s->nspare]);
    dq_free(s);
}

static void redis_add(struct dq_store *s, const struct dq_add *a,
                      dq_store_cb *cb, void *pd) {
    struct rreq *rq = rs_req_new(s, OP_ADD, cb, pd);
    struct dq_str in[5] = {a->topic, a->id, a->body, a->url, a->content_type}, out[5];
    req_copy(rq, in, out, 5, 0);
    rq->add = *a;
    rq->topic = rq->add.topic = out[0];
    rq->add.id = out[1];
    rq->add.body = out[2];
    rq->add.url = out[3];
    rq->add.content_type = out[4];
    if (a->id.len == 1 && a->id.p[0] == '*') gen_id(s, rq, false);
    rs_submit(rq);
}

static struct rreq *req_ids(struct dq_store *s, enum op op, struct dq_str topic,
                            const struct dq_str *ids, size_t nids,
                            dq_store_cb *cb, void *pd) {
    struct rreq *rq = rs_req_new(s, op, cb, pd);
    /* topic and ids copied together: [0] the topic, then the ids */
    struct dq_str *v = REQ_ARRAY(rq, NULL, strs, nids + 1);
    v[0] = topic;
    if (nids) memcpy(v + 1, ids, nids * sizeof *ids);
    req_copy(rq, v, v, nids + 1, 0);
    rq->topic = v[0];
    memmove(v, v + 1, nids * sizeof *v);
    rq->ids = v;
    rq->nids = nids;
    return rq;
}

static void redis_del(struct dq_store *s, struct dq_str topic,
                      const struct dq_str *ids, size_t nids, dq_store_cb *cb,
                      void *pd) {
    rs_submit(req_ids(s, OP_DEL, topic, ids, nids, cb, pd));
}

static void redis_ack(struct dq_store *s, struct dq_str topic,
                      const struct dq_str *ids, size_t nids, dq_store_cb *cb,
                      void *pd) {
    rs_submit(req_ids(s, OP_ACK, topic, ids, nids, cb, pd));
}

static void redis_get(struct dq_store *s, struct dq_str topic, struct dq_str id,
                      dq_store_cb *cb, void *pd) {
    rs_submit(req_ids(s, OP_GET, topic, &id, 1, cb, pd));
}

static void redis_reserve(struct dq_store *s, const struct dq_str *topics,
                          size_t ntopics, uint32_t count, dq_store_cb *cb,
                          void *pd) {
    struct rreq *rq = rs_req_new(s, OP_RESERVE, cb, pd);
    rq->topics = REQ_ARRAY(rq, NULL, strs, ntopics);
    req_copy(rq, topics, rq->topics, ntopics, 0);
    rq->ntopics = ntopics;
    rq->count = count ? count : 1;
    if (rq->count > DQ_COUNT_MAX) rq->count = DQ_COUNT_MAX;
    rs_submit(rq);
}

/* The pusher's RESERVE: ready push jobs of one topic (the script's
 * preserve, from the shards' push ready lists), with their URLs. */
static void redis_reserve_push(struct dq_store *s, struct dq_str topic,
                               uint32_t count, dq_store_cb *cb, void *pd) {
    struct rreq *rq = rs_req_new(s, OP_RESERVE_PUSH, cb, pd);
    rq->topics = REQ_ARRAY(rq, NULL, strs, 1);
    req_copy(rq, &topic, rq->topics, 1, 0);
    rq->ntopics = 1;
    rq->count = count ? count : 1;
    if (rq->count > DQ_COUNT_MAX) rq->count = DQ_COUNT_MAX;
    rs_submit(rq);
}

static void redis_nack(struct dq_store *s, struct dq_str topic, struct dq_str id,
                       int64_t delay, dq_store_cb *cb, void *pd) {
    struct rreq *rq = req_ids(s, OP_NACK, topic, &id, 1, cb, pd);
    /* < 0: the job's backoff (-1 to the script); DQ_NACK_DEAD as it is */
    rq->delay = delay == DQ_NACK_DEAD ? DQ_NACK_DEAD : delay < 0 ? -1 : delay;
    rs_submit(rq);
}

static void redis_touch(struct dq_store *s, struct dq_str topic,
                        struct dq_str id, uint32_t ttr, dq_store_cb *cb,
                        void *pd) {
    struct rreq *rq = req_ids(s, OP_TOUCH, topic, &id, 1, cb, pd);
    rq->ttr = ttr;
    rs_submit(rq);
}

static void redis_release(struct dq_store *s, struct dq_str topic,
                          struct dq_str id, dq_store_cb *cb, void *pd) {
    rs_submit(req_ids(s, OP_RELEASE, topic, &id, 1, cb, pd));
}

static void redis_kick_job(struct dq_store *s, struct dq_str topic,
                           struct dq_str id, dq_store_cb *cb, void *pd) {
    rs_submit(req_ids(s, OP_KICKJOB, topic, &id, 1, cb, pd));
}

static void redis_kick(struct dq_store *s, struct dq_str topic, uint64_t count,
                       dq_store_cb *cb, void *pd) {
    struct rreq *rq = req_ids(s, OP_KICK, topic, NULL, 0, cb, pd);
    rq->count = count;
    rq->kick_all = count == 0;
    rs_submit(rq);
}

static void redis_list(struct dq_store *s, struct dq_str topic, int state,
                       uint32_t count, uint64_t cursor, dq_store_cb *cb,
                       void *pd) {
    struct rreq *rq = req_ids(s, OP_LIST, topic, NULL, 0, cb, pd);
    rq->state = state;
    rq->count = count ? count : 10;
    rq->cursor = cursor;
    rs_submit(rq);
}

static void redis_purge(struct dq_store *s, struct dq_str topic,
                        dq_store_cb *cb, void *pd) {
    rs_submit(req_ids(s, OP_PURGE, topic, NULL, 0, cb, pd));
}

static void redis_stats(struct dq_store *s, struct dq_str topic,
                        dq_store_cb *cb, void *pd) {
    rs_submit(req_ids(s, OP_STATS, topic, NULL, 0, cb, pd));
}

static void redis_topics(struct dq_store *s, dq_store_cb *cb, void *pd) {
    rs_submit(req_ids(s, OP_TOPICS, (struct dq_str){"", 0}, NULL, 0, cb, pd));
}

static void redis_info(struct dq_store *s, dq_info_emit *emit, void *ud) {
    emit(ud, "store_redis_mode",
         s->url.cluster ? "cluster" : s->url.sentinel ? "sentinel" : "standalone");
    dq_info_int(emit, ud, "store_redis_replicas", s->url.replicas);
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
    .reserve_push = redis_reserve_push,
    .ack = redis_ack,
    .nack = redis_nack,
    .touch = redis_touch,
    .release = redis_release,
    .kick_job = redis_kick_job,
    .kick = redis_kick,
    .list = redis_list,
    .purge = redis_purge,
    .stats = redis_stats,
    .topics = redis_topics,
    .info = redis_info,
};
