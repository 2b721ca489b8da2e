/* redis_reply.c -- the Redis store's replies: script results decoded
 * into the requests' results, records (GET's as the next carry will make
 * them), WAIT for replicas=N, and
 * what a failed call means (UNAVAILABLE: not sent; TIMEOUT: outcome
 * unknown). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/log.h"
#include "lib/xalloc.h"
#include "store/redis_int.h"

static int64_t int_at(const redisReply *a, size_t i);
static const redisReply *str_at(const redisReply *a, size_t i);
static int job_from_rec(struct dq_job *j, const char *rec, size_t len);
static void unit_result(struct unit *u, const redisReply *e, int64_t now);
static void map_error(struct rreq *rq, const char *msg);
static void map_noreply(struct rreq *rq, const char *err, bool sent);
static void scall_free(struct scall *sc);
static void wait_reply_cb(void *pd, redisReply *r, const char *err, bool sent);
static void replicas_wait(struct scall *sc);
static int get_found(struct rreq *rq, const char *rec, size_t len, int64_t lease);

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

/* Fills j's numbers and strings (body, push URL and content type: pointers
 * into rec; topic and id left empty) from a record (redis_rec.c). Returns 0,
 * or -1 if it is malformed. */
static int job_from_rec(struct dq_job *j, const char *rec, size_t len) {
    struct rec_view v;
    *j = (struct dq_job){0};
    if (rs_rec_read((const unsigned char *)rec, len, j, &v) != 0) return -1;
    j->body = (struct dq_str){rec + v.body, v.blen};
    if (v.ulen) {
        j->url = (struct dq_str){rec + v.url, v.ulen};
        j->content_type = (struct dq_str){rec + v.ct, v.clen};
    }
    return 0;
}

/* j, read from the record of a job the script reserved (lua/delayq.lua,
 * "leases": the record is as the reserve found it), as reserved: deadline
 * the lease's end, attempts counting the lease. */
static void job_leased(struct dq_job *j, int64_t deadline) {
    if (j->state != DQ_RESERVED) j->attempts++; /* else an older build's */
    j->state = DQ_RESERVED;
    j->deadline = deadline;
}

/* One unit's result (the script's result for its request); now: the
 * script's. */
static void unit_result(struct unit *u, const redisReply *e, int64_t now) {
    struct rreq *rq = u->rq;
    struct dq_store *s = rq->s;
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 1) {
        rs_req_fail(rq, DQ_UNAVAILABLE, "unexpected reply from the Redis script");
        return;
    }
    int64_t code = int_at(e, 0);
    switch (code) {
    case SR_OK: break;
    case SR_EXISTS: rs_req_fail(rq, DQ_EXISTS, NULL); return;
    case SR_BUSY: rs_req_fail(rq, DQ_BUSY, NULL); return;
    case SR_NOTRESERVED: rs_req_fail(rq, DQ_NOTRESERVED, NULL); return;
    case SR_TAKEN: rs_add_retry(rq); return;
    default: rs_req_fail(rq, DQ_UNAVAILABLE, "unexpected reply from the Redis script"); return;
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
    case OP_NACK: case OP_TOUCH: case OP_RELEASE: case OP_KICKJOB:
        rq->n = int_at(e, 1);
        break;
    case OP_RESERVE: case OP_RESERVE_PUSH: { /* [gidx] id record, per job */
        size_t w = u->ng == 1 ? 2 : 3; /* one group: no index */
        for (size_t i = 1; i + w <= e->elements; i += w) {
            int64_t gi = w == 2 ? 1 : int_at(e, i);
            const redisReply *id = str_at(e, i + w - 2), *rec = str_at(e, i + w - 1);
            if (gi < 1 || (size_t)gi > u->ng || !id || !rec || rec->len < REC_HDR)
                continue;
            struct rshard *sh = rq->gs[u->g0 + (size_t)gi - 1];
            struct dq_job j;
            if (job_from_rec(&j, rec->str, rec->len) != 0)
                continue; /* malformed: its lease brings it back */
            job_leased(&j, now + j.ttr);
            j.topic = (struct dq_str){sh->t->name, sh->t->len};
            j.id = (struct dq_str){id->str, id->len};
            res_job(&rq->set, &rq->res, &j);
            if (rq->count) rq->count--;
        }
        break;
    }
    case OP_LIST: { /* group index, mode, cursor, ids... */
        int64_t gi = int_at(e, 1);
        uint64_t mode = (uint64_t)int_at(e, 2) & 1;
        const redisReply *cur = str_at(e, 3);
        uint64_t v = cur ? strtoull(cur->str, NULL, 10) : 0;
        if (gi < 1 || (size_t)gi > u->ng) gi = (int64_t)u->ng;
        uint64_t shard = rq->gs[u->g0 + (size_t)gi - 1]->idx;
        for (size_t i = 4; i < e->elements; i++) {
            const redisReply *id = str_at(e, i);
            if (id) rs_strs_push(rq, id->str, id->len);
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
        int64_t oldest = e->elements > 13 ? int_at(e, 13) : 0;
        if (oldest > 0 && (rq->st.oldest_ready == 0 || oldest < rq->st.oldest_ready))
            rq->st.oldest_ready = oldest;
        break;
    }
    case OP_TOPICS: case OP_CARRY:
        for (size_t i = 0; i < u->ng; i++) rq->hl[u->g0 + i] = int_at(e, i + 1);
        break;
    case OP_GET: /* the record, or {record, lease end}, or nothing: no
                  * such job (see UM_GETS) */
        if (e->elements >= 2) {
            const redisReply *x = e->element[1], *rec = str_at(e, 1);
            int64_t lease = -1;
            if (x->type == REDIS_REPLY_ARRAY && x->elements == 2) {
                rec = str_at(x, 0);
                lease = int_at(x, 1);
            }
            if (!rec || get_found(rq, rec->str, rec->len, lease) != 0)
                rs_req_fail(rq, DQ_UNAVAILABLE, "a malformed job record in Redis");
        }
        break;
    }
}

/* A unit of rq is over (result recorded or failure noted). */
void rs_unit_finished(struct rreq *rq) {
    struct dq_store *s = rq->s;
    if (rq->pending > 0) rq->pending--;
    if (rq->pending > 0) return;
    if (rq->retry && rq->status == DQ_OK) {
        rq->retry = false;
        rs_plan(rq);
        rs_outbox_units(s, rq);
        return;
    }
    if (rq->status == DQ_OK && OPS[rq->op].sequential &&
        rq->next_unit < rq->nunits && (rq->count > 0 || rq->kick_all)) {
        rs_outbox_units(s, rq);
        return;
    }
    if (rq->status == DQ_UNAVAILABLE && rq->units_ok > 0 && op_writes(rq->op)) {
        /* some of its calls made their changes, the others did not */
        char m[sizeof rq->errbuf];
        snprintf(m, sizeof m, "partly done: %.180s", rq->errbuf);
        rq->status = DQ_OK;
        rs_req_fail(rq, DQ_TIMEOUT, m);
    }
    if (rq->op == OP_TOPICS && rq->status == DQ_OK) {
        /* topics whose shards hold jobs */
        for (size_t i = 0; i < rq->ngs;) {
            struct rtopic *t = rq->gs[i]->t;
            int64_t sum = 0;
            size_t j = i;
            for (; j < rq->ngs && rq->gs[j]->t == t; j++) sum += rq->hl[j];
            if (sum > 0) rs_strs_push(rq, t->name, t->len);
            i = j;
        }
    }
    rs_req_complete(rq);
}

/* An error reply. Redis refuses a command before running it for most
 * errors (OOM under maxmemory thanks to the script's shebang, CLUSTERDOWN,
 * TRYAGAIN, READONLY, LOADING, BUSY, MASTERDOWN, NOAUTH...): nothing was
 * changed. A script that fails while it runs keeps what it did before the
 * error (Redis does not roll back): the outcome is unknown. */
static void map_error(struct rreq *rq, const char *msg) {
    if (strncmp(msg, "OOM", 3) == 0) {
        rs_req_fail(rq, DQ_FULL, "Redis is out of memory (maxmemory)");
        return;
    }
    char m[180];
    bool ran = strncmp(msg, "ERR user_script", 15) == 0 ||
               strncmp(msg, "ERR Error running script", 24) == 0;
    if (ran && op_writes(rq->op)) {
        snprintf(m, sizeof m, "the Redis script failed partway, the change may or "
                 "may not have been made: %s", msg);
        rs_req_fail(rq, DQ_TIMEOUT, m);
        return;
    }
    snprintf(m, sizeof m, "Redis: %s", msg);
    rs_req_fail(rq, DQ_UNAVAILABLE, m);
}

/* No reply: the call was not sent (nothing changed), or it was and the
 * outcome is unknown. */
static void map_noreply(struct rreq *rq, const char *err, bool sent) {
    if (sent && op_writes(rq->op)) {
        char m[180];
        snprintf(m, sizeof m, "%s; the change may or may not have been made",
                 err ? err : "no reply from Redis");
        rs_req_fail(rq, DQ_TIMEOUT, m);
        return;
    }
    rs_req_fail(rq, DQ_UNAVAILABLE, err ? err : "Redis unavailable");
}


void rs_script_cb(void *pd, redisReply *r, const char *err, bool sent) {
    struct scall *sc = pd;
    struct dq_store *s = sc->s;
    const redisReply *res = NULL, *info = NULL;
    /* results: flat, per request a count and that many values */
    redisReply *views = NULL;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_ARRAY &&
        r->element[1]->type == REDIS_REPLY_ARRAY &&
        r->element[1]->elements == 3 * sc->ng) {
        const redisReply *flat = r->element[0];
        views = xcalloc(sc->nreq ? sc->nreq : 1, sizeof *views);
        size_t pos = 0, i = 0;
        for (; i < sc->nreq && pos < flat->elements; i++) {
            int64_t k = int_at(flat, pos);
            if (k < 0 || (size_t)k > flat->elements - pos - 1) break;
            views[i].type = REDIS_REPLY_ARRAY;
            views[i].elements = (size_t)k;
            views[i].element = flat->element + pos + 1;
            pos += 1 + (size_t)k;
        }
        if (i == sc->nreq && pos == flat->elements) {
            res = flat;
            info = r->element[1];
        }
    } else if (r && r->type == REDIS_REPLY_ERROR) {
        rwarn(&s->script_warn, rcli_now_us(), "redis script error: %.150s", r->str);
    }
    if (r && r->type != REDIS_REPLY_ERROR && s->script_warn.last[0])
        rwarn_clear(&s->script_warn);
    /* timing first, so requests completing below see the new state */
    if (info) {
        for (size_t g = 0; g < sc->ng; g++) {
            struct rshard *sh = sc->groups[g];
            int64_t nx = int_at(info, 3 * g);
            if (nx == -2 || s->closing) continue; /* nothing new */
            int64_t next;
            if (nx <= -3) { /* jobs queued for that time: "at most" */
                next = -(nx + 3);
                if (sh->next < next) next = sh->next;
            } else { /* the next due time, or none */
                next = nx < 0 ? INT64_MAX : nx;
                if (sh->msg_stamp > sc->msg_stamp && sh->next < next) next = sh->next;
            }
            rs_heap_set(s, sh, next);
        }
        rs_arm_timer(s);
    }
    /* replicas=N: changes are acknowledged once N replicas have them */
    bool wait = false;
    for (size_t i = 0; res && s->url.replicas > 0 && i < sc->nu && !wait; i++)
        wait = op_writes(sc->units[i]->rq->op);
    /* merged reserves: each unit takes its jobs in turn (taken[] per
     * request, in jobs), through a view of the code and its (id, record)
     * pairs (one group: no group index) */
    size_t *taken = res ? xcalloc(sc->nreq ? sc->nreq : 1, sizeof *taken) : NULL;
    redisReply **tmp = res ? xmalloc((res->elements + 1) * sizeof *tmp) : NULL;
    for (size_t i = 0; i < sc->nu; i++) {
        struct unit *u = sc->units[i];
        struct rreq *rq = u->rq;
        if (res) {
            const struct umap *m = &sc->um[i];
            redisReply *v = &views[m->req];
            if (rq->op == OP_RESERVE && u->ng == 1 && v->elements >= 1) {
                size_t avail = (v->elements - 1) / 2 - taken[m->req];
                size_t k = avail < m->want ? avail : (size_t)m->want;
                tmp[0] = v->element[0];
                memcpy(tmp + 1, v->element + 1 + 2 * taken[m->req], 2 * k * sizeof *tmp);
                taken[m->req] += k;
                redisReply sub = {.type = REDIS_REPLY_ARRAY, .elements = 1 + 2 * k,
                                  .element = tmp};
                unit_result(u, &sub, sc->now);
            } else if (m->form == UM_ADDS) {
                /* adds merged: code, then a byte per add: '0' + code * 2 + new */
                const redisReply *b = v->elements == 2 ? v->element[1] : NULL;
                if (b && b->type == REDIS_REPLY_STRING && m->sub < b->len) {
                    int x = (unsigned char)b->str[m->sub] - '0';
                    redisReply code = {.type = REDIS_REPLY_INTEGER, .integer = x >> 1};
                    redisReply isnew = {.type = REDIS_REPLY_INTEGER, .integer = x & 1};
                    redisReply *e2[2] = {&code, &isnew};
                    redisReply sub = {.type = REDIS_REPLY_ARRAY, .elements = 2, .element = e2};
                    unit_result(u, &sub, sc->now);
                } else {
                    rs_req_fail(rq, DQ_UNAVAILABLE, "unexpected reply from the Redis script");
                }
            } else if (m->form == UM_DELS) {
                /* del/ack merged: code, sum, then a digit per request (all
                 * counts below 10) or each one's count */
                const redisReply *b = v->elements == 3 ? v->element[2] : NULL;
                redisReply cnt = {.type = REDIS_REPLY_INTEGER};
                tmp[0] = v->element[0];
                if (b && b->type == REDIS_REPLY_STRING && m->sub < b->len) {
                    cnt.integer = (unsigned char)b->str[m->sub] - '0';
                    tmp[1] = &cnt;
                } else if (v->elements >= 3 + (size_t)m->sub) {
                    tmp[1] = v->element[2 + m->sub];
                } else {
                    tmp[1] = NULL;
                }
                redisReply sub = {.type = REDIS_REPLY_ARRAY, .elements = 2, .element = tmp};
                if (tmp[1]) unit_result(u, &sub, sc->now);
                else rs_req_fail(rq, DQ_UNAVAILABLE, "unexpected reply from the Redis script");
            } else if (m->form == UM_GETS) {
                /* GETs merged: code, then per GET a record, {record,
                 * lease end} or nil */
                redisReply *x = v->elements >= 2 + (size_t)m->sub
                                    ? v->element[1 + m->sub] : NULL;
                bool found = x && (x->type == REDIS_REPLY_STRING ||
                                   x->type == REDIS_REPLY_ARRAY);
                tmp[0] = v->element[0];
                tmp[1] = x;
                redisReply sub = {.type = REDIS_REPLY_ARRAY, .elements = found ? 2 : 1,
                                  .element = tmp};
                if (x && (found || x->type == REDIS_REPLY_NIL))
                    unit_result(u, &sub, sc->now);
                else
                    rs_req_fail(rq, DQ_UNAVAILABLE, "unexpected reply from the Redis script");
            } else {
                unit_result(u, v, sc->now);
            }
            rq->units_ok++;
        } else if (r && r->type == REDIS_REPLY_ERROR) {
            map_error(rq, r->str);
        } else if (r) {
            map_noreply(rq, "unexpected reply from Redis", true);
        } else {
            map_noreply(rq, err, sent);
        }
        if (!wait) rs_unit_finished(rq); /* may free u */
    }
    if (info && !s->closing) {
        for (size_t g = 0; g < sc->ng; g++) {
            int64_t rl = int_at(info, 3 * g + 1), pl = int_at(info, 3 * g + 2);
            struct rtopic *t = sc->groups[g]->t;
            struct dq_str name = {t->name, t->len};
            if (rl >= 0 && s->cfg.on_ready)
                s->cfg.on_ready(s->cfg.ud, name, s->K == 1 ? rl : -1);
            if (pl >= 0 && s->cfg.on_push_ready)
                s->cfg.on_push_ready(s->cfg.ud, name, s->K == 1 ? pl : -1);
        }
    }
    dq_free(views);
    dq_free(taken);
    dq_free(tmp);
    if (wait) {
        replicas_wait(sc);
        return;
    }
    scall_free(sc);
}

static void scall_free(struct scall *sc) {
    dq_free(sc->units);
    dq_free(sc->um);
    dq_free(sc->groups);
    dq_free(sc);
}

/* WAIT's answer: how many replicas have the call's changes. Fewer than
 * asked: the changes were made on the master but may be lost if it fails
 * now, so they are not acknowledged (TIMEOUT: outcome unknown). */
static void wait_reply_cb(void *pd, redisReply *r, const char *err, bool sent) {
    struct scall *sc = pd;
    struct dq_store *s = sc->s;
    char m[160];
    bool ok = r && r->type == REDIS_REPLY_INTEGER && r->integer >= s->url.replicas;
    if (!ok)
        snprintf(m, sizeof m, "the change was made on the Redis master but %s "
                 "%d replica%s in time; it may be lost if the master fails",
                 r && r->type == REDIS_REPLY_INTEGER ? "did not reach" : "could not be confirmed on",
                 s->url.replicas, s->url.replicas == 1 ? "" : "s");
    for (size_t i = 0; i < sc->nu; i++) {
        struct rreq *rq = sc->units[i]->rq;
        if (!ok && op_writes(rq->op)) rs_req_fail(rq, DQ_TIMEOUT, m);
        rs_unit_finished(rq); /* may free the unit */
    }
    scall_free(sc);
}

static void replicas_wait(struct scall *sc) {
    struct dq_store *s = sc->s;
    /* no longer than the requests may still wait (they answer in 2 s) */
    int64_t deadline = INT64_MAX;
    for (size_t i = 0; i < sc->nu; i++)
        if (sc->units[i]->rq->deadline < deadline) deadline = sc->units[i]->rq->deadline;
    int64_t left = (deadline - rcli_now_us()) / 1000 - 50;
    int wait_ms = left < 1 ? 1 : left > WAIT_MS ? WAIT_MS : (int)left;
    char n[16], ms[16];
    const char *av[3] = {"WAIT", n, ms};
    size_t al[3] = {4, (size_t)snprintf(n, sizeof n, "%d", s->url.replicas),
                    (size_t)snprintf(ms, sizeof ms, "%d", wait_ms)};
    /* on the connection that ran the script: the one serving its slot */
    rs_send_raw(s, sc->slot, 3, av, al, wait_reply_cb, sc);
}

/* GET's record (the script's get; lease: the end of the job's lease, or -1
 * if it is not reserved): the job as the next carry will make it, which is
 * the truth now. Returns 0, or -1 if the record is malformed. */
static int get_found(struct rreq *rq, const char *rec, size_t len, int64_t lease) {
    struct dq_job job;
    if (len < REC_HDR || job_from_rec(&job, rec, len) != 0) return -1;
    if (lease >= 0) job_leased(&job, lease);
    job.topic = rq->topic;
    job.id = rq->ids[0];
    struct dq_job *j = &job;
    int64_t now = now_ms(rq->s);
    if (j->state == DQ_DELAYED && j->due <= now) {
        j->state = DQ_READY;
    } else if (j->state == DQ_RESERVED && j->deadline <= now) {
        j->due = j->deadline;
        j->state = j->attempts <= j->retries ? DQ_READY : DQ_DEAD;
    }
    if (j->state != DQ_RESERVED) j->deadline = 0;
    res_job(&rq->set, &rq->res, j);
    return 0;
}

