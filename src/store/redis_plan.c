/* redis_plan.c -- the Redis store's planning: which shards a request
 * touches and in which units, and the script calls that carry them (the
 * outbox, one builder per node or slot, the arguments of every op). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/xalloc.h"
#include "store/redis_int.h"

static void arg_str(struct buf *b, const char *p, size_t len);
static void arg_cstr(struct buf *b, const char *p);
static void arg_int(struct buf *b, int64_t v);
static void plan_groups(struct rreq *rq, size_t n);
static void plan_units(struct rreq *rq);
static int cmp_size(const void *a, const void *b);
static void add_topic_groups(void *ud, struct hnode *n);
static void outbox_push(struct dq_store *s, struct unit *u);
static uint32_t builder_group(struct dq_store *s, struct builder *b,
                              struct rshard *sh);
static size_t unit_args(struct unit *u, struct buf *sc, int64_t now);
static void builder_add(struct dq_store *s, struct builder *b, struct unit *u,
                        int64_t now);
static void builder_send(struct dq_store *s, struct builder *b, int64_t now);
static void builder_init(struct dq_store *s, struct builder *b, int slot);
static void builder_destroy(struct builder *b);
static bool builder_full(const struct builder *b);
static size_t put10(struct buf *b, uint64_t v);
static void patch10(struct buf *b, size_t off, uint64_t v);
static void flush_outbox(struct dq_store *s);

/* --- RESP argument building -------------------------------------------- */

/* Writes v in decimal at o; returns the end. (No printf here: a call
 * carries hundreds of arguments, and sprintf was a tenth of the server's
 * time under load.) */
static char *put_dec(char *o, uint64_t v) {
    char t[20];
    size_t n = 0;
    do {
        t[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) *o++ = t[--n];
    return o;
}

/* Writes a bulk string's head "$len\r\n" at o (room for 24 bytes); returns
 * its length. */
static size_t bulk_head(char *o, size_t len) {
    char *p = put_dec(o + 1, len);
    o[0] = '$';
    p[0] = '\r';
    p[1] = '\n';
    return (size_t)(p + 2 - o);
}

static void arg_str(struct buf *b, const char *p, size_t len) {
    char *o = buf_reserve(b, len + 24);
    size_t n = bulk_head(o, len);
    memcpy(o + n, p, len);
    memcpy(o + n + len, "\r\n", 2);
    b->len += n + len + 2;
}

static void arg_cstr(struct buf *b, const char *p) { arg_str(b, p, strlen(p)); }

static void arg_int(struct buf *b, int64_t v) {
    char t[24], *e = t;
    if (v < 0) *e++ = '-';
    e = put_dec(e, v < 0 ? -(uint64_t)v : (uint64_t)v);
    arg_str(b, t, (size_t)(e - t));
}

/* A raw command of string arguments; the client takes the buffer. */
void rs_send_raw(struct dq_store *s, int slot, int argc, const char **av,
                     const size_t *al, rcli_cb *cb, void *pd) {
    struct buf b = BUF_INIT;
    for (int i = 0; i < argc; i++) arg_str(&b, av[i], al[i]);
    rcli_send(s->cli, slot, RCLI_RAW, argc, b.p, b.len,
              rcli_now_us() + CALL_TIMEOUT_US, cb, pd);
}

/* --- planning: which shards a request touches, in which units ---------- */

struct rshard *rs_id_shard(struct dq_store *s, struct rtopic *t,
                               struct dq_str id) {
    return &t->sh[redis_id_shard(id.p, id.len, s->K)];
}

static void plan_groups(struct rreq *rq, size_t n) {
    rq->gs = REQ_ARRAY(rq, rq->gs, gs, n);
    rq->ngs = 0;
}

/* Splits the groups into units: consecutive groups that can share a call. */
static void plan_units(struct rreq *rq) {
    struct dq_store *s = rq->s;
    rq->units = REQ_ARRAY(rq, rq->units, units, rq->ngs);
    memset(rq->units, 0, (rq->ngs ? rq->ngs : 1) * sizeof *rq->units);
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

static void add_topic_groups(void *ud, struct hnode *n) {
    struct rreq *rq = ud;
    struct rtopic *t = (struct rtopic *)n;
    for (unsigned k = 0; k < rq->s->K; k++) rq->gs[rq->ngs++] = &t->sh[k];
}

void rs_plan_all_topics(struct rreq *rq) {
    plan_groups(rq, rq->s->ntopics * rq->s->K);
    htab_foreach(&rq->s->topics, add_topic_groups, rq);
}

static int cmp_size(const void *a, const void *b) {
    const size_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

/* Builds the plan of a request. Returns 0, or 1 if it must read the registry first
 * (TOPICS, STATS of all topics). */
int rs_plan(struct rreq *rq) {
    struct dq_store *s = rq->s;
    struct rtopic *t;
    switch (rq->op) {
    case OP_ADD:
        t = rs_topic_get(s, rq->topic.p, rq->topic.len);
        plan_groups(rq, 1);
        rq->gs[rq->ngs++] = rs_id_shard(s, t, rq->add.id);
        break;
    case OP_GET: case OP_NACK: case OP_TOUCH: case OP_RELEASE: case OP_KICKJOB:
        t = rs_topic_get(s, rq->topic.p, rq->topic.len);
        plan_groups(rq, 1);
        rq->gs[rq->ngs++] = rs_id_shard(s, t, rq->ids[0]);
        break;
    case OP_DEL: case OP_ACK: {
        t = rs_topic_get(s, rq->topic.p, rq->topic.len);
        /* (shard, index) pairs sorted: ids grouped by shard; a lone id (most
         * ACKs) needs no memory but the request's own */
        bool one = rq->nids <= 1;
        size_t pair1[2];
        size_t *pairs = one ? pair1 : xmalloc(2 * rq->nids * sizeof *pairs);
        for (size_t i = 0; i < rq->nids; i++) {
            pairs[2 * i] = redis_id_shard(rq->ids[i].p, rq->ids[i].len, s->K);
            pairs[2 * i + 1] = i;
        }
        if (!one) qsort(pairs, rq->nids, 2 * sizeof *pairs, cmp_size);
        plan_groups(rq, rq->nids);
        rq->gids = REQ_ARRAY(rq, rq->gids, gids, rq->nids);
        rq->gcnt = REQ_ARRAY(rq, rq->gcnt, gcnt, rq->nids);
        memset(rq->gcnt, 0, (one ? 1 : rq->nids) * sizeof *rq->gcnt);
        for (size_t i = 0; i < rq->nids; i++) {
            size_t k = pairs[2 * i];
            if (rq->ngs == 0 || rq->gs[rq->ngs - 1] != &t->sh[k] ||
                rq->gcnt[rq->ngs - 1] == 1000) /* the script unpacks them */
                rq->gs[rq->ngs++] = &t->sh[k];
            rq->gcnt[rq->ngs - 1]++;
            rq->gids[i] = pairs[2 * i + 1];
        }
        if (!one) dq_free(pairs);
        break;
    }
    case OP_RESERVE: case OP_RESERVE_PUSH:
        plan_groups(rq, rq->ntopics * s->K);
        for (size_t i = 0; i < rq->ntopics; i++) {
            t = rs_topic_get(s, rq->topics[i].p, rq->topics[i].len);
            unsigned start = t->rr++ % s->K;
            for (unsigned k = 0; k < s->K; k++)
                rq->gs[rq->ngs++] = &t->sh[(start + k) % s->K];
        }
        break;
    case OP_KICK: case OP_PURGE: case OP_STATS:
        if (rq->op == OP_STATS && rq->topic.len == 0) {
            if (rq->phase == 0) return 1; /* registry first */
            rs_plan_all_topics(rq);
            break;
        }
        t = rs_topic_get(s, rq->topic.p, rq->topic.len);
        plan_groups(rq, s->K);
        for (unsigned k = 0; k < s->K; k++) rq->gs[rq->ngs++] = &t->sh[k];
        break;
    case OP_LIST: /* from the cursor's shard to the last */
        t = rs_topic_get(s, rq->topic.p, rq->topic.len);
        plan_groups(rq, s->K);
        for (unsigned k = (unsigned)(rq->cursor % s->K); k < s->K; k++)
            rq->gs[rq->ngs++] = &t->sh[k];
        break;
    case OP_TOPICS:
        if (rq->phase == 0) return 1;
        rs_plan_all_topics(rq);
        break;
    case OP_CARRY:
        break; /* groups given by the caller */
    }
    if (rq->op == OP_TOPICS || rq->op == OP_CARRY)
        rq->hl = xcalloc(rq->ngs ? rq->ngs : 1, sizeof *rq->hl);
    plan_units(rq);
    return 0;
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
void rs_outbox_units(struct dq_store *s, struct rreq *rq) {
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

/* Writes the unit's op arguments to sc; returns how many. `now` is the
 * call's time (its ARGV[1]). */
static size_t unit_args(struct unit *u, struct buf *sc, int64_t now) {
    struct rreq *rq = u->rq;
    const struct dq_add *a = &rq->add;
    switch (rq->op) {
    case OP_ADD: { /* id, record, flags[, due, delay member] */
        struct dq_store *s = rq->s;
        /* ord: the order of adds, for jobs due in the same millisecond */
        if (now > s->ord_ms) {
            s->ord_ms = now;
            s->ord_seq = 0;
        }
        uint64_t ord = rs_rec_ord(s->ord_ms, s->ord_seq++);
        arg_str(sc, a->id.p, a->id.len);
        size_t rl = rs_rec_size(a);
        char *o = buf_reserve(sc, rl + 24);
        size_t n = bulk_head(o, rl);
        unsigned char *h = (unsigned char *)o + n;
        rs_rec_write(h, a, now, ord);
        bool delayed = h[0] == DQ_DELAYED;
        unsigned char ordb[8]; /* with REC_PUSH for a push job */
        memcpy(ordb, h + REC_ORD, 8);
        memcpy(o + n + rl, "\r\n", 2);
        sc->len += n + rl + 2;
        arg_cstr(sc, rq->gen ? "g" : a->replace ? "r" : "-");
        if (!delayed) return 3; /* a ready job needs no due time nor member */
        arg_int(sc, a->due);
        o = buf_reserve(sc, 8 + a->id.len + 24);
        n = bulk_head(o, 8 + a->id.len);
        memcpy(o + n, ordb, 8);
        memcpy(o + n + 8, a->id.p, a->id.len);
        memcpy(o + n + 8 + a->id.len, "\r\n", 2);
        sc->len += n + 8 + a->id.len + 2;
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
    case OP_KICKJOB:
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
    case OP_RESERVE_PUSH:
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

/* A del/ack unit's arguments start with its mode, "ack" or "del". */
#define MODE_BYTES (sizeof "$3\r\nack\r\n" - 1)

/* Writes v as a 10-digit argument; returns the offset of its digits. */
static size_t put10(struct buf *b, uint64_t v) {
    char t[10];
    for (int i = 9; i >= 0; i--, v /= 10) t[i] = (char)('0' + v % 10);
    arg_str(b, t, 10);
    return b->len - 12;
}

/* Rewrites the 10 digits at off (put10's) with v. */
static void patch10(struct buf *b, size_t off, uint64_t v) {
    for (int i = 9; i >= 0; i--, v /= 10) b->p[off + (size_t)i] = (char)('0' + v % 10);
}

static void builder_add(struct dq_store *s, struct builder *b, struct unit *u,
                        int64_t now) {
    struct rreq *rq = u->rq;
    uint32_t gi[MAX_UNIT_GROUPS > 1024 ? MAX_UNIT_GROUPS : 1024];
    for (size_t i = 0; i < u->ng; i++) gi[i] = builder_group(s, b, rq->gs[u->g0 + i]);
    if (b->nu == b->ucap) {
        b->ucap = b->ucap ? b->ucap * 2 : 16;
        b->units = xrealloc(b->units, b->ucap * sizeof *b->units);
        b->um = xrealloc(b->um, b->ucap * sizeof *b->um);
    }
    bool dels = (rq->op == OP_ACK || rq->op == OP_DEL) && u->ng == 1;
    bool adds = rq->op == OP_ADD && u->ng == 1;
    bool gets = rq->op == OP_GET && u->ng == 1;
    bool mergeable = (rq->op == OP_RESERVE && u->ng == 1) || dels || adds || gets;
    struct umap *m = &b->um[b->nu];
    memset(m, 0, sizeof *m);
    if (rq->op == OP_RESERVE || rq->op == OP_RESERVE_PUSH) b->njobs += rq->count;
    /* a GET's record can be as big as a body gets: a few a call, so that a
     * client asking for many big ones gets its replies streamed, not in one
     * enormous call result (GETs merged or not) */
    if (rq->op == OP_GET) {
        b->njobs += MAX_CALL_JOBS / MAX_CALL_GETS;
        b->reads = true;
    }
    m->want = rq->count;
    m->form = dels ? UM_DELS : adds ? UM_ADDS : gets ? UM_GETS : UM_PLAIN;
    if (mergeable && b->merge_open && b->merge_op == rq->op && b->merge_gi == gi[0]) {
        if (dels || adds || gets) { /* its arguments join the last request's */
            size_t skip = dels ? MODE_BYTES : 0;
            s->scratch.len = 0;
            size_t na = unit_args(u, &s->scratch, now) - (dels ? 1 : 0);
            buf_append(&b->reqs, s->scratch.p + skip, s->scratch.len - skip);
            b->nargs += na;
            b->merge_count += na;
            patch10(&b->reqs, b->merge_off, b->merge_count);
            patch10(&b->reqs, b->merge_m_off, ++b->merge_m);
            m->sub = (uint32_t)(b->merge_m - 1);
        } else { /* raise the last request's COUNT */
            b->merge_count += rq->count;
            patch10(&b->reqs, b->merge_off, b->merge_count);
        }
        m->req = (uint32_t)(b->nreq - 1);
        b->units[b->nu++] = u;
        return;
    }
    arg_cstr(&b->reqs, adds ? "adds" : OPS[rq->op].lua);
    arg_int(&b->reqs, (int64_t)u->ng);
    for (size_t i = 0; i < u->ng; i++) arg_int(&b->reqs, gi[i] + 1);
    size_t na;
    if (adds || gets) { /* nargs and the count of adds (GETs) in a fixed width */
        s->scratch.len = 0;
        size_t una = unit_args(u, &s->scratch, now);
        na = una + 1; /* m, then id record flags [due member] per add (id per GET) */
        b->merge_off = put10(&b->reqs, na);
        b->merge_m_off = put10(&b->reqs, 1);
        buf_append(&b->reqs, s->scratch.p, s->scratch.len);
        b->merge_count = na;
        b->merge_m = 1;
    } else if (dels) { /* nargs and the count of requests in a fixed width */
        s->scratch.len = 0;
        size_t una = unit_args(u, &s->scratch, now);
        na = una + 1; /* mode, m, then n ids... */
        b->merge_off = put10(&b->reqs, na);
        arg_cstr(&b->reqs, rq->op == OP_ACK ? "ack*" : "del*");
        b->merge_m_off = put10(&b->reqs, 1);
        buf_append(&b->reqs, s->scratch.p + MODE_BYTES, s->scratch.len - MODE_BYTES);
        b->merge_count = na;
        b->merge_m = 1;
    } else if (mergeable) { /* the count in a fixed width, so that it can grow */
        arg_int(&b->reqs, 1);
        b->merge_off = put10(&b->reqs, rq->count);
        b->merge_count = rq->count;
        na = 1;
    } else {
        s->scratch.len = 0;
        na = unit_args(u, &s->scratch, now);
        arg_int(&b->reqs, (int64_t)na);
        buf_append(&b->reqs, s->scratch.p, s->scratch.len);
    }
    b->merge_open = mergeable;
    b->merge_op = rq->op;
    b->merge_gi = gi[0];
    b->nargs += 3 + u->ng + na;
    b->um[b->nu].req = (uint32_t)b->nreq++;
    b->units[b->nu++] = u;
}


/* Sends the builder's call and resets it. */
static void builder_send(struct dq_store *s, struct builder *b, int64_t now) {
    if (b->nu == 0) return;
    static const char *const suffix[NKEYS] = {"pool", "ready", "delay", "lease",
                                              "dead", "stats", "pready", "fz", "fo"};
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
    arg_int(&out, (int64_t)s->url.far * 1000);
    arg_int(&out, (int64_t)b->ng);
    for (size_t g = 0; g < b->ng; g++) {
        struct rshard *sh = b->groups[g];
        arg_str(&out, sh->t->name, sh->t->len);
        arg_int(&out, sh->idx);
        /* whether jobs may be due: adds skip the carry otherwise */
        arg_cstr(&out, sh->next <= now ? "1" : "0");
    }
    arg_int(&out, (int64_t)b->nreq);
    buf_append(&out, b->reqs.p, b->reqs.len);
    int argc = (int)(1 + NKEYS * b->ng + 5 + 3 * b->ng + 1 + b->nargs);
    struct scall *sc = xcalloc(1, sizeof *sc);
    sc->s = s;
    sc->units = b->units;
    sc->um = b->um;
    sc->nu = b->nu;
    sc->nreq = b->nreq;
    sc->groups = b->groups;
    sc->ng = b->ng;
    sc->msg_stamp = s->msg_counter;
    sc->now = now;
    sc->slot = b->slot;
    for (size_t i = 0; i < b->nu; i++)
        if (b->units[i]->rq->deadline < deadline) deadline = b->units[i]->rq->deadline;
    s->calls++;
    int slot = b->slot;
    enum rcli_kind kind = b->reads ? RCLI_READS : RCLI_SCRIPT;
    /* reset the builder; the call owns the arrays now */
    b->groups = NULL;
    b->ng = b->gcap = 0;
    b->units = NULL;
    b->um = NULL;
    b->nu = b->ucap = 0;
    b->nreq = 0;
    b->merge_open = false;
    b->reqs.len = 0;
    b->nargs = 0;
    b->njobs = 0;
    b->reads = false;
    b->stamp = ++s->bstamp;
    rcli_send(s->cli, slot, kind, argc, out.p, out.len, deadline,
              rs_script_cb, sc);
}

static void builder_init(struct dq_store *s, struct builder *b, int slot) {
    memset(b, 0, sizeof *b);
    b->slot = slot;
    b->stamp = ++s->bstamp;
}

static void builder_destroy(struct builder *b) {
    dq_free(b->groups);
    dq_free(b->units);
    dq_free(b->um);
    buf_free(&b->reqs);
}

/* A call is as big as it should get: it is sent once it holds this much, so
 * one script call stays short (other clients wait while it runs). */
static bool builder_full(const struct builder *b) {
    return b->nu >= MAX_CALL_REQS || b->reqs.len >= MAX_CALL_BYTES ||
           b->njobs >= MAX_CALL_JOBS;
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
        /* next first: a call that fails at once (no connection) completes
         * its requests, and frees their units, inside builder_send */
        for (struct unit *next; u; u = next) {
            next = u->next;
            builder_add(s, &b, u, now);
            if (builder_full(&b)) builder_send(s, &b, now);
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
        if (builder_full(&bs[i])) builder_send(s, &bs[i], now);
    }
    for (size_t i = 0; i < nb; i++) {
        s->slot_b[bs[i].slot] = 0;
        builder_send(s, &bs[i], now);
        builder_destroy(&bs[i]);
    }
    dq_free(bs);
}


/* Sends what is queued: plain commands, then the outbox's scripts. Requests
 * were queued in that order (see rs_submit), so they reach Redis in the order
 * the server made them. */
void rs_send_queued(struct dq_store *s) {
    while (s->raw_head) {
        struct rreq *rq = s->raw_head;
        s->raw_head = rq->next;
        if (!s->raw_head) s->raw_tail = NULL;
        rs_registry_fetch(rq);
    }
    flush_outbox(s);
}

void rs_flush_cb(evutil_socket_t fd, short what, void *arg) {
    struct dq_store *s = arg;
    /* completions first: their callbacks may queue more work */
    while (s->done_head) {
        struct rreq *rq = s->done_head;
        s->done_head = rq->next;
        if (!s->done_head) s->done_tail = NULL;
        rs_req_complete(rq);
    }
    rs_send_queued(s);
}
