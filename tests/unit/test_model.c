/* test_model.c -- randomized model-based test of the engine.
 *
 * A tiny, obviously-correct reference model of DESIGN §2 (arrays and linear
 * scans) runs the same random operations as the engine; after every step
 * every return value, every job's fields, the hook calls, the counters and
 * the topics must agree. Ready order is checked by every RESERVE and by a
 * final drain.
 *
 * Timed transitions: the model applies them like engine_advance: by time,
 * equal times in the order the job was put on the timer (`tseq`), at most
 * `budget` per call.
 *
 * Far jobs: each sequence has a memory horizon H (0 = off, or a few ms to a
 * few seconds, so jobs cross it constantly). Like the tiered store, the
 * harness adds a job whose window [k*H, (k+1)*H) starts after now + H as a
 * far job (engine_add_far), keeps the whole job aside, and loads it
 * (engine_load) as soon as time reaches its window's opening; the model
 * knows nothing of this, so every answer must be the same. Among equal due
 * times a loaded job counts as scheduled when it was loaded.
 *
 * Env: MODEL_SEED=n runs that one sequence (the seed is printed on failure),
 * MODEL_SEQS=n sets how many sequences, MODEL_VERBOSE=1 prints operations.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/engine.h"

enum { NT = 3, NI = 8, STEPS = 200 };

static const char *const TOPIC[NT + 1] = {"a", "bb", "topic.c", "zz"};
static const char *const ID[NI] = {"0", "1x", "2xx", "3", "4yyyy", "5", "6",
                                   "7-abcdefghijklmnopqrstuvwxyz"};

static struct dq_str S(const char *s) { return (struct dq_str){s, strlen(s)}; }

/* --- the reference model ------------------------------------------------------ */

struct mjob {
    bool ex;
    int st;
    int64_t due, created, deadline;
    uint32_t ttr, retries, attempts;
    struct dq_backoff bo;
    char body[8];
    size_t blen;
    uint64_t tseq; /* order put on the timer (delayed, reserved) */
};

struct model {
    struct mjob j[NT][NI];
    int ready[NT][NI], nready[NT]; /* FIFO of id indexes */
    int dead[NT][NI], ndead[NT];
    struct dq_stats st[NT], g;
    uint64_t count, max_jobs, tseq;
    int64_t now;
};

/* Hook events, as recorded from the engine and as the model expects them. */
struct events {
    int nready;
    int ready_t[16];
    uint64_t ready_n[16];
    int nexp;
    int exp_t[64], exp_i[64];
    bool exp_dead[64];
};

/* How often each outcome happened (printed once: the test must reach them). */
enum {
    C_ADD_DELAYED, C_ADD_READY, C_EXISTS, C_BUSY, C_FULL, C_REPLACED,
    C_RESERVED, C_NACK_DELAYED, C_NACK_READY, C_NACK_DEAD, C_NOTRESERVED,
    C_TOUCHED, C_KICKED, C_PURGED, C_RELEASED, C_TO_READY, C_EXPIRED,
    C_EXPIRED_DEAD, C_ADVANCE_MORE, C_LISTED, C_ADD_FAR, C_LOADED, C_N
};
static const char *const C_NAME[C_N] = {
    "add-delayed", "add-ready", "exists", "busy", "full", "replaced",
    "reserved", "nack-delayed", "nack-ready", "nack-dead", "notreserved",
    "touched", "kicked", "purged", "released", "due->ready", "expired",
    "expired->dead", "advance-more", "list-scans", "add-far", "loaded",
};
static uint64_t cov[C_N];

static struct model M;
static struct events got, want;
static uint64_t seed_now;
static int step_now;
static bool verbose;

static void fail_here(int line, const char *what) {
    fail_msg("model mismatch at test_model.c:%d (%s): seed %llu step %d "
             "(rerun: MODEL_SEED=%llu MODEL_VERBOSE=1)",
             line, what, (unsigned long long)seed_now, step_now,
             (unsigned long long)seed_now);
}

#define CHECK(c) do { if (!(c)) fail_here(__LINE__, #c); } while (0)

static void fifo_append(int *a, int *n, int v) { a[(*n)++] = v; }

static void fifo_push(int *a, int *n, int v) {
    memmove(a + 1, a, sizeof *a * (size_t)*n);
    a[0] = v;
    (*n)++;
}

static void fifo_remove(int *a, int *n, int v) {
    for (int k = 0; k < *n; k++)
        if (a[k] == v) {
            memmove(a + k, a + k + 1, sizeof *a * (size_t)(*n - k - 1));
            (*n)--;
            return;
        }
}

static void m_count(int t, int st, int d) {
    M.st[t].jobs[st] += (uint64_t)(int64_t)d;
    M.g.jobs[st] += (uint64_t)(int64_t)d;
}

static int topic_jobs(int t) {
    int n = 0;
    for (int i = 0; i < NI; i++) n += M.j[t][i].ex;
    return n;
}

static void m_ready_event(int t) {
    want.ready_t[want.nready] = t;
    want.ready_n[want.nready] = M.st[t].jobs[DQ_READY];
    want.nready++;
}

/* Puts an existing job in state st (appending to lists). */
static void m_place(int t, int i, int st) {
    struct mjob *j = &M.j[t][i];
    j->st = st;
    if (st == DQ_READY) fifo_append(M.ready[t], &M.nready[t], i);
    if (st == DQ_DEAD) fifo_append(M.dead[t], &M.ndead[t], i);
    if (st == DQ_DELAYED || st == DQ_RESERVED) j->tseq = ++M.tseq;
    m_count(t, st, +1);
}

static void m_unplace(int t, int i) {
    struct mjob *j = &M.j[t][i];
    if (j->st == DQ_READY) fifo_remove(M.ready[t], &M.nready[t], i);
    if (j->st == DQ_DEAD) fifo_remove(M.dead[t], &M.ndead[t], i);
    m_count(t, j->st, -1);
}

static void m_remove(int t, int i) {
    m_unplace(t, i);
    M.j[t][i].ex = false;
    M.count--;
}

/* A topic that lost its last job keeps its counters (the engine keeps the
 * 4096 most recently emptied topics; the model has fewer). */
static void m_topic_gc(int t) { (void)t; }

static int m_add(int t, int i, int64_t due, uint32_t ttr, uint32_t retries,
                 struct dq_backoff bo, const char *body, bool replace) {
    struct mjob *j = &M.j[t][i];
    if (j->ex) {
        if (!replace) return cov[C_EXISTS]++, ENGINE_EEXISTS;
        if (j->st == DQ_RESERVED) return cov[C_BUSY]++, ENGINE_EBUSY;
        m_remove(t, i);
        cov[C_REPLACED]++;
    } else if (M.max_jobs && M.count >= M.max_jobs) {
        return cov[C_FULL]++, ENGINE_EFULL;
    }
    j->ex = true;
    j->due = due;
    j->created = M.now;
    j->deadline = 0;
    j->ttr = ttr;
    j->retries = retries;
    j->attempts = 0;
    j->bo = bo;
    j->blen = strlen(body);
    memcpy(j->body, body, j->blen);
    M.count++;
    int st = due <= M.now ? DQ_READY : DQ_DELAYED;
    cov[st == DQ_READY ? C_ADD_READY : C_ADD_DELAYED]++;
    m_place(t, i, st);
    M.st[t].added++;
    M.g.added++;
    if (st == DQ_READY) m_ready_event(t);
    return st;
}

static int m_drop(int t, int i, bool ack) {
    if (t >= NT || !M.j[t][i].ex) return 0;
    m_remove(t, i);
    if (ack) {
        M.st[t].acked++;
        M.g.acked++;
    } else {
        M.st[t].deleted++;
        M.g.deleted++;
    }
    m_topic_gc(t);
    return 1;
}

/* Fills out[] with (topic, id) pairs. */
static int m_reserve(const int *ts, int nts, uint32_t count, int out[][2]) {
    int n = 0;
    for (int k = 0; k < nts && (uint32_t)n < count; k++) {
        int t = ts[k];
        if (t >= NT) continue;
        while ((uint32_t)n < count && M.nready[t] > 0) {
            int i = M.ready[t][0];
            struct mjob *j = &M.j[t][i];
            m_unplace(t, i);
            j->attempts++;
            j->deadline = M.now + j->ttr;
            m_place(t, i, DQ_RESERVED);
            M.st[t].reserved++;
            M.g.reserved++;
            cov[C_RESERVED]++;
            out[n][0] = t;
            out[n][1] = i;
            n++;
        }
    }
    return n;
}

static int64_t m_backoff(const struct dq_backoff *b, uint32_t attempts) {
    if (b->kind == DQ_BACKOFF_FIXED) return b->base;
    int64_t d = b->base; /* base * 2^(attempts-1), capped at max */
    for (uint32_t k = 1; k < attempts && d < b->max; k++) d *= 2;
    return d < b->max ? d : b->max;
}

static int m_nack(int t, int i, int64_t delay) {
    if (t >= NT || !M.j[t][i].ex || M.j[t][i].st != DQ_RESERVED)
        return cov[C_NOTRESERVED]++, ENGINE_ENOTRESERVED;
    struct mjob *j = &M.j[t][i];
    m_unplace(t, i);
    j->deadline = 0;
    M.st[t].nacked++;
    M.g.nacked++;
    if (j->attempts > j->retries) {
        m_place(t, i, DQ_DEAD);
        M.st[t].dead++;
        M.g.dead++;
        cov[C_NACK_DEAD]++;
        return DQ_DEAD;
    }
    int64_t d = delay >= 0 ? delay : m_backoff(&j->bo, j->attempts);
    j->due = M.now + d;
    if (d == 0) {
        m_place(t, i, DQ_READY);
        m_ready_event(t);
        cov[C_NACK_READY]++;
        return DQ_READY;
    }
    m_place(t, i, DQ_DELAYED);
    cov[C_NACK_DELAYED]++;
    return DQ_DELAYED;
}

static int m_touch(int t, int i, uint32_t ttr, int64_t *deadline) {
    if (t >= NT || !M.j[t][i].ex || M.j[t][i].st != DQ_RESERVED)
        return ENGINE_ENOTRESERVED;
    struct mjob *j = &M.j[t][i];
    j->deadline = M.now + (ttr ? ttr : j->ttr);
    j->tseq = ++M.tseq;
    *deadline = j->deadline;
    cov[C_TOUCHED]++;
    return 0;
}

static int m_release(int t, int i) {
    if (t >= NT || !M.j[t][i].ex || M.j[t][i].st != DQ_RESERVED) return 0;
    struct mjob *j = &M.j[t][i];
    m_unplace(t, i);
    j->deadline = 0;
    if (j->attempts > 0) j->attempts--;
    j->st = DQ_READY;
    fifo_push(M.ready[t], &M.nready[t], i);
    m_count(t, DQ_READY, +1);
    m_ready_event(t);
    cov[C_RELEASED]++;
    return 1;
}

static int64_t m_kick(int t, uint64_t count) {
    if (t >= NT) return 0;
    int64_t n = 0;
    while ((count == 0 || (uint64_t)n < count) && M.ndead[t] > 0) {
        int i = M.dead[t][0];
        m_unplace(t, i);
        M.j[t][i].attempts = 0;
        M.j[t][i].due = M.now;
        m_place(t, i, DQ_READY);
        n++;
    }
    cov[C_KICKED] += (uint64_t)n;
    M.st[t].kicked += (uint64_t)n;
    M.g.kicked += (uint64_t)n;
    if (n) m_ready_event(t);
    return n;
}

static int64_t m_purge(int t) {
    if (t >= NT) return 0;
    int64_t n = 0;
    for (int i = 0; i < NI; i++)
        if (M.j[t][i].ex) {
            m_remove(t, i);
            n++;
        }
    M.g.deleted += (uint64_t)n;
    M.st[t].deleted += (uint64_t)n;
    cov[C_PURGED] += (uint64_t)n;
    m_topic_gc(t);
    return n;
}

static bool m_timed(const struct mjob *j, int64_t *when) {
    if (!j->ex) return false;
    if (j->st == DQ_DELAYED) *when = j->due;
    else if (j->st == DQ_RESERVED) *when = j->deadline;
    else return false;
    return true;
}

static bool m_advance(uint32_t budget) {
    bool touched[NT] = {false};
    uint32_t n = 0;
    bool more = false;
    for (;;) {
        int bt = -1, bi = -1;
        int64_t bw = 0, w;
        for (int t = 0; t < NT; t++)
            for (int i = 0; i < NI; i++)
                if (m_timed(&M.j[t][i], &w) && w <= M.now &&
                    (bt < 0 || w < bw ||
                     (w == bw && M.j[t][i].tseq < M.j[bt][bi].tseq))) {
                    bt = t;
                    bi = i;
                    bw = w;
                }
        if (bt < 0) break;
        if (n == budget) {
            more = true;
            cov[C_ADVANCE_MORE]++;
            break;
        }
        n++;
        struct mjob *j = &M.j[bt][bi];
        bool lease = j->st == DQ_RESERVED;
        m_unplace(bt, bi);
        bool dead = lease && j->attempts > j->retries;
        if (lease && !dead) j->due = j->deadline; /* ready from the lease end */
        j->deadline = 0;
        m_place(bt, bi, dead ? DQ_DEAD : DQ_READY);
        cov[!lease ? C_TO_READY : dead ? C_EXPIRED_DEAD : C_EXPIRED]++;
        if (lease) {
            M.st[bt].expired++;
            M.g.expired++;
            if (dead) {
                M.st[bt].dead++;
                M.g.dead++;
            }
            want.exp_t[want.nexp] = bt;
            want.exp_i[want.nexp] = bi;
            want.exp_dead[want.nexp] = dead;
            want.nexp++;
        }
        if (!dead) touched[bt] = true;
    }
    for (int t = 0; t < NT; t++)
        if (touched[t]) m_ready_event(t);
    return more;
}

/* --- engine side ------------------------------------------------------------------ */

/* --- the far tier (the harness plays the store) ---------------------------------- */

struct far_job {
    bool ex;
    uint64_t ref, order;
    struct dq_job j;
    char body[8];
};

static struct far_job FAR[NT][NI];
static int64_t horizon; /* 0: no far jobs */
static uint64_t far_refs, far_order;

static int64_t window_of(int64_t due) { return due / horizon * horizon; }

static bool goes_far(int64_t due) {
    return horizon > 0 && window_of(due) > M.now + horizon;
}

static void hook_far_drop(void *ud, uint64_t ref) {
    for (int t = 0; t < NT; t++)
        for (int i = 0; i < NI; i++)
            if (FAR[t][i].ex && FAR[t][i].ref == ref) {
                FAR[t][i].ex = false;
                return;
            }
    fail_here(__LINE__, "on_far_drop for an unknown ref");
}

static int far_add(struct engine *e, int t, int i, const struct dq_add *a) {
    uint64_t ref = ++far_refs;
    int rc = engine_add_far(e, M.now, a, ref);
    if (rc < 0) return rc;
    struct far_job *f = &FAR[t][i];
    CHECK(!f->ex); /* a replaced one was dropped through the hook */
    f->ex = true;
    f->ref = ref;
    f->order = ++far_order;
    f->j = (struct dq_job){
        .topic = S(TOPIC[t]), .id = S(ID[i]), .state = DQ_DELAYED,
        .due = a->due, .created = M.now, .ttr = a->ttr,
        .retries = a->retries, .backoff = a->backoff,
    };
    memcpy(f->body, a->body.p, a->body.len);
    f->j.body = (struct dq_str){f->body, a->body.len};
    return rc;
}

/* Loads every far job whose window opened, in the order they were added. */
static void far_load(struct engine *e) {
    for (;;) {
        struct far_job *best = NULL;
        int bt = 0, bi = 0;
        for (int t = 0; t < NT; t++)
            for (int i = 0; i < NI; i++) {
                struct far_job *f = &FAR[t][i];
                if (f->ex && window_of(f->j.due) <= M.now + horizon &&
                    (!best || f->order < best->order)) {
                    best = f;
                    bt = t;
                    bi = i;
                }
            }
        if (!best) return;
        CHECK(engine_load(e, M.now, &best->j, best->ref) == 1);
        best->ex = false;
        CHECK(M.j[bt][bi].ex && M.j[bt][bi].st == DQ_DELAYED);
        M.j[bt][bi].tseq = ++M.tseq; /* on the timer from now on */
        cov[C_LOADED]++;
    }
}

static int topic_index(struct dq_str s) {
    for (int t = 0; t <= NT; t++)
        if (s.len == strlen(TOPIC[t]) && memcmp(s.p, TOPIC[t], s.len) == 0)
            return t;
    return -1;
}

static int id_index(struct dq_str s) {
    for (int i = 0; i < NI; i++)
        if (s.len == strlen(ID[i]) && memcmp(s.p, ID[i], s.len) == 0) return i;
    return -1;
}

static void hook_ready(void *ud, struct dq_str topic, uint64_t ready) {
    CHECK(got.nready < 16);
    got.ready_t[got.nready] = topic_index(topic);
    got.ready_n[got.nready] = ready;
    got.nready++;
}

static void hook_expire(void *ud, const struct dq_job *j, bool dead) {
    CHECK(got.nexp < 64);
    got.exp_t[got.nexp] = topic_index(j->topic);
    got.exp_i[got.nexp] = id_index(j->id);
    got.exp_dead[got.nexp] = dead;
    got.nexp++;
    CHECK((int)j->state == (dead ? DQ_DEAD : DQ_READY));
}

static void check_events(void) {
    CHECK(got.nexp == want.nexp);
    for (int k = 0; k < got.nexp; k++) {
        CHECK(got.exp_t[k] == want.exp_t[k]);
        CHECK(got.exp_i[k] == want.exp_i[k]);
        CHECK(got.exp_dead[k] == want.exp_dead[k]);
    }
    /* on_ready: once per topic; the engine's order across topics is free. */
    CHECK(got.nready == want.nready);
    for (int k = 0; k < want.nready; k++) {
        bool found = false;
        for (int q = 0; q < got.nready; q++)
            if (got.ready_t[q] == want.ready_t[k]) {
                CHECK(got.ready_n[q] == want.ready_n[k]);
                found = true;
            }
        CHECK(found);
    }
    memset(&got, 0, sizeof got);
    memset(&want, 0, sizeof want);
}

struct topics_seen {
    int n;
    bool seen[NT + 1];
};

static void topics_cb(void *ud, struct dq_str topic) {
    struct topics_seen *s = ud;
    int t = topic_index(topic);
    CHECK(t >= 0 && t < NT);
    CHECK(!s->seen[t]);
    s->seen[t] = true;
    s->n++;
}

static void foreach_cb(void *ud, const struct dq_job *j) { (*(int *)ud)++; }

static void check_all(struct engine *e) {
    int64_t min_when = INT64_MAX;
    for (int t = 0; t <= NT; t++) {
        for (int i = 0; i < NI; i++) {
            struct dq_job v;
            int r = engine_get(e, S(TOPIC[t]), S(ID[i]), &v);
            if (t == NT) {
                CHECK(r == 0);
                continue;
            }
            const struct mjob *j = &M.j[t][i];
            const struct far_job *f = &FAR[t][i];
            uint64_t ref = 0;
            CHECK(engine_far_ref(e, S(TOPIC[t]), S(ID[i]), &ref) == (int)f->ex);
            if (f->ex) {
                /* far: the harness holds it; the engine only its id */
                CHECK(r == 0 && j->ex && ref == f->ref);
                v = f->j;
                CHECK(j->st == DQ_DELAYED);
            } else {
                CHECK(r == (int)j->ex);
            }
            if (!j->ex) continue;
            CHECK((int)v.state == j->st);
            CHECK(v.attempts == j->attempts);
            CHECK(v.due == j->due);
            CHECK(v.deadline == (j->st == DQ_RESERVED ? j->deadline : 0));
            CHECK(v.created == j->created);
            CHECK(v.ttr == j->ttr);
            CHECK(v.retries == j->retries);
            CHECK(v.backoff.kind == j->bo.kind);
            CHECK(v.backoff.base == j->bo.base);
            CHECK(v.backoff.max == j->bo.max);
            CHECK(v.body.len == j->blen);
            CHECK(memcmp(v.body.p, j->body, j->blen) == 0);
            int64_t w;
            if (!f->ex && m_timed(j, &w) && w < min_when) min_when = w;
        }
    }
    CHECK(engine_count(e) == M.count);
    struct dq_stats s;
    for (int t = 0; t <= NT; t++) {
        engine_stats(e, S(TOPIC[t]), &s);
        if (t < NT) {
            /* the due time of the ready job handed out next */
            CHECK(s.oldest_ready ==
                  (M.nready[t] ? M.j[t][M.ready[t][0]].due : 0));
            s.oldest_ready = 0;
            CHECK(memcmp(&s, &M.st[t], sizeof s) == 0);
        }
        else
            CHECK(s.added == 0 && s.jobs[DQ_READY] == 0);
    }
    engine_stats(e, (struct dq_str){"", 0}, &s);
    CHECK(memcmp(&s, &M.g, sizeof s) == 0);
    struct topics_seen ts = {0};
    engine_topics(e, topics_cb, &ts);
    for (int t = 0; t < NT; t++) CHECK(ts.seen[t] == (topic_jobs(t) > 0));
    int nf = 0, nfar = 0;
    for (int t = 0; t < NT; t++)
        for (int i = 0; i < NI; i++) nfar += FAR[t][i].ex;
    engine_foreach(e, foreach_cb, &nf);
    CHECK((uint64_t)(nf + nfar) == M.count);
    CHECK(engine_far_count(e) == (uint64_t)nfar);
    int64_t nx = engine_next_expiry(e);
    CHECK(nx <= min_when);
    CHECK((nx == INT64_MAX) == (min_when == INT64_MAX));
}

struct list_seen {
    bool seen[NI];
    int t;
};

static void list_cb(void *ud, struct dq_str id) {
    struct list_seen *l = ud;
    int i = id_index(id);
    CHECK(i >= 0);
    l->seen[i] = true;
}

static void check_list(struct engine *e, int t, int st, uint32_t count) {
    struct list_seen l = {{false}, t};
    cov[C_LISTED]++;
    uint64_t c = 0;
    int guard = 0;
    do {
        c = engine_list(e, S(TOPIC[t]), st, count, c, list_cb, &l);
        CHECK(++guard < 1000);
    } while (c != 0);
    for (int i = 0; i < NI; i++)
        CHECK(l.seen[i] == (t < NT && M.j[t][i].ex && M.j[t][i].st == st));
}

/* --- random sequences --------------------------------------------------------------- */

static uint64_t rng;
static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static uint64_t pick(const uint64_t *a, size_t n) { return a[rnd() % n]; }
#define PICK(a) pick(a, sizeof a / sizeof a[0])

static const uint64_t STEP_MS[] = {0, 1, 2, 5, 63, 64, 65, 100, 1000, 4095,
                                   70000, 3600000};
static const uint64_t DELAY_MS[] = {0, 1, 2, 10, 64, 100, 1000, 5000, 300000,
                                    86400000};
static const uint64_t TTR_MS[] = {1, 5, 64, 100, 1000, 30000};
static const uint64_t BUDGET[] = {0, 1, 2, 3, 5, 1000};

static struct dq_backoff random_backoff(void) {
    static const uint64_t base[] = {0, 1, 10, 100, 1000};
    struct dq_backoff b;
    b.kind = rnd() % 3 == 0 ? DQ_BACKOFF_FIXED : DQ_BACKOFF_EXP;
    b.base = (uint32_t)PICK(base);
    b.max = b.kind == DQ_BACKOFF_FIXED ? 0 : b.base + (uint32_t)(rnd() % 3000);
    return b;
}

/* A random job of topic t in state st if there is one, else a random id. */
static int pick_in_state(int t, int st) {
    int c[NI], n = 0;
    for (int i = 0; t < NT && i < NI; i++)
        if (M.j[t][i].ex && M.j[t][i].st == st) c[n++] = i;
    return n ? c[rnd() % (uint64_t)n] : (int)(rnd() % NI);
}

static void run(uint64_t seed) {
    seed_now = seed;
    rng = seed * 2654435761u + 1;
    memset(&M, 0, sizeof M);
    memset(&got, 0, sizeof got);
    memset(&want, 0, sizeof want);
    memset(FAR, 0, sizeof FAR);
    static const int64_t horizons[] = {0, 1, 3, 64, 100, 1000, 5000};
    horizon = horizons[rnd() % (sizeof horizons / sizeof horizons[0])];
    M.now = 1700000000000 + (int64_t)(rnd() % 100000);
    M.max_jobs = rnd() % 3 == 0 ? 1 + rnd() % 12 : 0;
    struct engine_config cfg = {
        .max_jobs = M.max_jobs,
        .hooks = {.on_ready = hook_ready, .on_expire = hook_expire,
                  .on_far_drop = hook_far_drop},
    };
    struct engine *e = engine_new(&cfg, M.now);
    CHECK(e != NULL);
    for (step_now = 0; step_now < STEPS; step_now++) {
        int t = (int)(rnd() % (NT + 1) == NT && rnd() % 4 == 0 ? NT : rnd() % NT);
        int i = (int)(rnd() % NI);
        struct dq_str ts = S(TOPIC[t]), is = S(ID[i]);
        unsigned op = (unsigned)(rnd() % 100);
        if (t == NT && op < 30) t = 0, ts = S(TOPIC[0]); /* ADDs to real topics */
        if (op >= 34 && op < 78 && rnd() % 2) { /* aim at a reserved job */
            i = pick_in_state(t, DQ_RESERVED);
            is = S(ID[i]);
        }
        if (op < 30) {
            static const char *const bodies[] = {"", "b", "body", "xyzzy!"};
            int64_t due = M.now + (rnd() % 5 == 0 ? -(int64_t)(rnd() % 1000)
                                                  : (int64_t)PICK(DELAY_MS));
            struct dq_add a = {
                .topic = ts, .id = is, .body = S(bodies[rnd() % 4]),
                .due = due, .ttr = (uint32_t)PICK(TTR_MS),
                .retries = (uint32_t)(rnd() % 4), .backoff = random_backoff(),
                .replace = rnd() % 4 == 0,
            };
            if (verbose)
                printf("%d: ADD %s %s due=now%+lld ttr=%u retries=%u%s\n",
                       step_now, TOPIC[t], ID[i], (long long)(due - M.now),
                       a.ttr, a.retries, a.replace ? " REPLACE" : "");
            int want_rc = m_add(t, i, due, a.ttr, a.retries, a.backoff,
                                a.body.p, a.replace);
            struct dq_job v;
            /* the server's look-ahead hint: must change nothing */
            struct dq_str keys[4] = {ts, is, S(TOPIC[(t + 1) % (NT + 1)]), is};
            engine_prefetch(e, keys, 2);
            if (goes_far(due)) {
                CHECK(far_add(e, t, i, &a) == want_rc);
                cov[C_ADD_FAR]++;
            } else {
                int rc = engine_add(e, M.now, &a, &v);
                CHECK(rc == want_rc);
                if (rc >= 0) CHECK((int)v.state == rc && id_index(v.id) == i);
            }
        } else if (op < 34) {
            if (verbose) printf("%d: DEL %s %s\n", step_now, TOPIC[t], ID[i]);
            CHECK(engine_del(e, ts, is) == m_drop(t, i, false));
        } else if (op < 42) {
            if (verbose) printf("%d: ACK %s %s\n", step_now, TOPIC[t], ID[i]);
            CHECK(engine_ack(e, ts, is) == m_drop(t, i, true));
        } else if (op < 56) {
            int tl[4], ntl = 1 + (int)(rnd() % 3);
            struct dq_str sl[4];
            for (int k = 0; k < ntl; k++) {
                tl[k] = (int)(rnd() % (NT + 1));
                sl[k] = S(TOPIC[tl[k]]);
            }
            uint32_t count = (uint32_t)(rnd() % 5);
            if (verbose)
                printf("%d: RESERVE %u from %d topics (%s...)\n", step_now,
                       count, ntl, TOPIC[tl[0]]);
            int mout[32][2];
            struct dq_job out[32];
            int wn = m_reserve(tl, ntl, count, mout);
            int n = engine_reserve(e, M.now, sl, (size_t)ntl, count, out);
            CHECK(n == wn);
            for (int k = 0; k < n; k++) {
                CHECK(topic_index(out[k].topic) == mout[k][0]);
                CHECK(id_index(out[k].id) == mout[k][1]);
                const struct mjob *j = &M.j[mout[k][0]][mout[k][1]];
                CHECK(out[k].attempts == j->attempts);
                CHECK(out[k].deadline == j->deadline);
                CHECK(out[k].state == DQ_RESERVED);
            }
        } else if (op < 64) {
            static const uint64_t delays[] = {0, 1, 50, 5000};
            int64_t delay = rnd() % 2 ? -1 : (int64_t)PICK(delays);
            if (verbose)
                printf("%d: NACK %s %s %lld\n", step_now, TOPIC[t], ID[i],
                       (long long)delay);
            int w = m_nack(t, i, delay);
            CHECK(engine_nack(e, M.now, ts, is, delay) == w);
        } else if (op < 68) {
            uint32_t ttr = rnd() % 2 ? 0 : (uint32_t)PICK(TTR_MS);
            int64_t d1 = -1, d2 = -1;
            if (verbose)
                printf("%d: TOUCH %s %s %u\n", step_now, TOPIC[t], ID[i], ttr);
            int w = m_touch(t, i, ttr, &d1);
            CHECK(engine_touch(e, M.now, ts, is, ttr, &d2) == w);
            if (w == 0) CHECK(d1 == d2);
        } else if (op < 72) {
            uint64_t count = rnd() % 3;
            if (verbose) printf("%d: KICK %s %llu\n", step_now, TOPIC[t],
                                (unsigned long long)count);
            CHECK(engine_kick(e, M.now, ts, count) == m_kick(t, count));
        } else if (op < 74) {
            if (verbose) printf("%d: PURGE %s\n", step_now, TOPIC[t]);
            CHECK(engine_purge(e, ts) == m_purge(t));
        } else if (op < 78) {
            if (verbose) printf("%d: RELEASE %s %s\n", step_now, TOPIC[t], ID[i]);
            CHECK(engine_release(e, ts, is) == m_release(t, i));
        } else if (op < 81) {
            int st = (int)(rnd() % DQ_NSTATES);
            uint32_t count = (uint32_t)(1 + rnd() % 3);
            if (verbose)
                printf("%d: LIST %s %d count %u\n", step_now, TOPIC[t], st, count);
            check_list(e, t, st, count);
        } else {
            /* Time passes; apply timed transitions, maybe not all. */
            M.now += (int64_t)PICK(STEP_MS);
            far_load(e); /* windows that opened: before anything is due */
            int calls = rnd() % 3 == 0 ? 1 : 100;
            if (verbose) printf("%d: ADVANCE now=%lld\n", step_now, (long long)M.now);
            for (int c = 0; c < calls; c++) {
                uint32_t budget = (uint32_t)PICK(BUDGET);
                bool wm = m_advance(budget);
                bool em = engine_advance(e, M.now, budget);
                CHECK(em == wm);
                check_events();
                if (!em) break;
            }
        }
        check_events();
        check_all(e);
    }
    /* Drain: catch up with time, then everything ready comes out in the
     * model's order. */
    M.now += 86400000LL * 30;
    far_load(e);
    while (m_advance(1000)) {}
    while (engine_advance(e, M.now, 1000)) {}
    memset(&got, 0, sizeof got);
    memset(&want, 0, sizeof want);
    int all[NT + 1] = {0, 1, 2, 3};
    struct dq_str sl[NT + 1];
    for (int t = 0; t <= NT; t++) sl[t] = S(TOPIC[t]);
    int mout[NT * NI][2];
    struct dq_job out[NT * NI];
    int wn = m_reserve(all, NT + 1, NT * NI, mout);
    int n = engine_reserve(e, M.now, sl, NT + 1, NT * NI, out);
    CHECK(n == wn);
    for (int k = 0; k < n; k++) {
        CHECK(topic_index(out[k].topic) == mout[k][0]);
        CHECK(id_index(out[k].id) == mout[k][1]);
    }
    check_all(e);
    engine_free(e);
}

static void test_model(void **state) {
    const char *s = getenv("MODEL_SEED");
    verbose = getenv("MODEL_VERBOSE") != NULL;
    if (s) {
        run(strtoull(s, NULL, 0));
        return;
    }
    const char *n = getenv("MODEL_SEQS");
    int seqs = n ? atoi(n) : 2000;
    for (int k = 1; k <= seqs; k++) run((uint64_t)k);
    printf("    %d sequences of %d steps; outcomes:", seqs, STEPS);
    for (int c = 0; c < C_N; c++) {
        printf(" %s=%llu", C_NAME[c], (unsigned long long)cov[c]);
        assert_true(cov[c] > 0);
    }
    printf("\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
