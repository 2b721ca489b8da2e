/* wait.c -- RESERVEs that wait for jobs.
 *
 * A RESERVE that may wait becomes a waiter, queued at the tail of one FIFO
 * per topic it names, at once (before the store has even answered its first
 * attempt, so a job that turns ready meanwhile is not missed). The store's
 * on_ready(topic, hint) walks that topic's FIFO from the oldest waiter and
 * issues one reserve per waiter until the hint (ready jobs) is used up, so
 * the longest-waiting client gets the next job. A waiter whose attempt is
 * still in flight is marked to try again if it comes back empty.
 *
 * A waiter ends with jobs, with none at its timeout, with none at shutdown,
 * or when its client goes away (core_reserve_cancel); jobs reserved for a
 * client that went away are given back to the store (release), so nothing
 * is lost.
 *
 * A RESERVE with TIMEOUT 0 is a waiter too (so that it can be cancelled
 * while its attempt is in flight), but one that is never queued: it borrows
 * the caller's topics for its one attempt instead of copying them, and
 * waiters are kept for reuse, so it costs no allocation.
 */
#include <event2/event.h>
#include <string.h>

#include "core/core_int.h"
#include "lib/clock.h"
#include "lib/htab.h"
#include "lib/xalloc.h"

struct entry { /* a waiter's place in one topic's FIFO */
    struct entry *prev, *next;
    struct core_wait *w;
    struct topicq *q;
};

struct topicq {
    struct hnode hn;
    uint64_t hash;
    struct entry *head, *tail;
    size_t len;
    size_t namelen;
    char name[];
};

struct core_wait {
    struct core *core;
    struct core_wait *next;  /* in the free list */
    core_cb *cb;             /* NULL once the client went away */
    void *pd;
    const struct dq_str *topics; /* copies (`own`), or the caller's while
                                    the first attempt is issued */
    struct dq_str *own;      /* NULL when not copied (TIMEOUT 0) */
    char *names;
    size_t ntopics;
    uint32_t count;
    int64_t timeout_ms;      /* < 0 forever, 0 never wait */
    int64_t start_us;        /* of the attempt in flight */
    struct event *timer;
    struct entry *entries;   /* ntopics of them, when queued */
    bool queued;
    bool inflight;           /* a reserve for it is in flight */
    bool retry;              /* a topic got ready jobs during that reserve */
    bool expired;            /* its timeout passed (or shutdown) */
    bool chain;              /* woken without a count: wake the next too */
    bool *answered;          /* set when cb is called, while wait_reserve runs */
};

struct wait_table {
    struct htab queues; /* struct topicq by name */
    uint64_t nwaiters;
    struct core_wait *free; /* kept for reuse */
    unsigned nfree;
};

#define WAIT_CACHE_MAX 4096

static uint64_t queue_hash(const struct hnode *n) {
    return ((const struct topicq *)n)->hash;
}

struct wait_table *wait_table_new(void) {
    struct wait_table *t = xcalloc(1, sizeof *t);
    htab_init(&t->queues, 64, queue_hash);
    return t;
}

static void free_queue(void *ud, struct hnode *n) { dq_free(n); }

void wait_table_free(struct wait_table *t) {
    if (!t) return;
    while (t->free) {
        struct core_wait *w = t->free;
        t->free = w->next;
        dq_free(w);
    }
    htab_foreach(&t->queues, free_queue, NULL);
    htab_destroy(&t->queues);
    dq_free(t);
}

uint64_t wait_count(const struct core *c) { return c->waits->nwaiters; }

static struct topicq *find_queue(struct wait_table *t, struct dq_str name,
                                 uint64_t h) {
    for (struct hnode *n = htab_bucket(&t->queues, h); n; n = n->next) {
        struct topicq *q = (struct topicq *)n;
        if (q->hash == h && q->namelen == name.len &&
            memcmp(q->name, name.p, name.len) == 0)
            return q;
    }
    return NULL;
}

static struct topicq *get_queue(struct wait_table *t, struct dq_str name) {
    uint64_t h = htab_hash_bytes(name.p, name.len);
    struct topicq *q = find_queue(t, name, h);
    if (q) return q;
    q = xcalloc(1, sizeof *q + name.len);
    q->hash = h;
    q->namelen = name.len;
    memcpy(q->name, name.p, name.len);
    htab_insert(&t->queues, &q->hn, h);
    return q;
}

static void enqueue(struct core_wait *w) {
    struct wait_table *t = w->core->waits;
    w->entries = xcalloc(w->ntopics, sizeof *w->entries);
    for (size_t i = 0; i < w->ntopics; i++) {
        struct entry *e = &w->entries[i];
        struct topicq *q = get_queue(t, w->topics[i]);
        e->w = w;
        e->q = q;
        e->prev = q->tail;
        if (q->tail) q->tail->next = e;
        else q->head = e;
        q->tail = e;
        q->len++;
    }
    w->queued = true;
    t->nwaiters++;
}

static void dequeue(struct core_wait *w) {
    if (!w->queued) return;
    struct wait_table *t = w->core->waits;
    for (size_t i = 0; i < w->ntopics; i++) {
        struct entry *e = &w->entries[i];
        struct topicq *q = e->q;
        if (e->prev) e->prev->next = e->next;
        else q->head = e->next;
        if (e->next) e->next->prev = e->prev;
        else q->tail = e->prev;
        if (--q->len == 0) {
            htab_remove(&t->queues, &q->hn, q->hash);
            dq_free(q);
        }
    }
    dq_free(w->entries);
    w->entries = NULL;
    w->queued = false;
    t->nwaiters--;
}

static struct core_wait *waiter_new(struct core *c) {
    struct wait_table *t = c->waits;
    struct core_wait *w = t->free;
    if (w) {
        t->free = w->next;
        t->nfree--;
        memset(w, 0, sizeof *w);
    } else {
        w = xcalloc(1, sizeof *w);
    }
    w->core = c;
    return w;
}

static void waiter_free(struct core_wait *w) {
    struct wait_table *t = w->core->waits;
    dequeue(w);
    if (w->timer) event_free(w->timer);
    dq_free(w->own);
    dq_free(w->names);
    if (t->nfree < WAIT_CACHE_MAX) {
        w->next = t->free;
        t->free = w;
        t->nfree++;
    } else {
        dq_free(w);
    }
}

/* Ends the wait with res. */
static void answer(struct core_wait *w, const struct dq_result *res) {
    core_cb *cb = w->cb;
    void *pd = w->pd;
    if (w->answered) *w->answered = true;
    waiter_free(w);
    if (cb) cb(pd, res);
}

static void answer_none(struct core_wait *w) {
    struct dq_result res = {.status = DQ_OK};
    answer(w, &res);
}

static void noop_cb(void *pd, const struct dq_result *res) {}

static void attempt(struct core_wait *w);

static void reserve_cb(void *pd, const struct dq_result *res) {
    struct core_wait *w = pd;
    struct core *c = w->core;
    w->inflight = false;
    metrics_command(c->metrics, M_RESERVE, clock_mono_us() - w->start_us,
                    res->status);
    if (!w->cb) { /* the client went away: give the jobs back */
        for (size_t i = 0; i < res->njobs; i++)
            c->ops->release(c->store, res->jobs[i].topic, res->jobs[i].id,
                            noop_cb, NULL);
        waiter_free(w);
        return;
    }
    if (res->status != DQ_OK) {
        if (res->status == DQ_UNAVAILABLE && w->queued && !w->expired) {
            /* keep waiting: the store calls on_ready when it is back */
            return;
        }
        answer(w, res);
        return;
    }
    if (res->njobs > 0) {
        bool chain = w->chain; /* only a queued waiter is woken */
        char name[DQ_TOPIC_MAX];
        size_t len = chain ? w->topics[0].len : 0;
        if (chain) memcpy(name, w->topics[0].p, len);
        core_handed_out(c, res);
        answer(w, res);
        if (chain) wait_on_ready(c, (struct dq_str){name, len}, -1);
        return;
    }
    if (w->retry && !w->expired) {
        w->retry = false;
        attempt(w);
        return;
    }
    if (w->timeout_ms == 0 || w->expired) answer_none(w);
    /* else: stay queued until on_ready or the timeout */
}

static void attempt(struct core_wait *w) {
    struct core *c = w->core;
    w->inflight = true;
    w->start_us = clock_mono_us();
    c->ops->reserve(c->store, w->topics, w->ntopics, w->count, reserve_cb, w);
}

static void timeout_cb(evutil_socket_t fd, short what, void *arg) {
    struct core_wait *w = arg;
    w->expired = true;
    if (w->inflight) return; /* its completion answers */
    answer_none(w);
}

struct core_wait *wait_reserve(struct core *c, const struct dq_str *topics,
                               size_t ntopics, uint32_t count,
                               int64_t timeout_ms, core_cb *cb, void *pd) {
    struct core_wait *w = waiter_new(c);
    w->cb = cb;
    w->pd = pd;
    w->topics = topics; /* the store borrows them only during the call */
    w->ntopics = ntopics;
    w->count = count;
    w->timeout_ms = timeout_ms;
    if (timeout_ms != 0) { /* it may attempt again: its own copies */
        size_t total = 0;
        for (size_t i = 0; i < ntopics; i++) total += topics[i].len;
        w->names = xmalloc(total ? total : 1);
        w->own = xcalloc(ntopics, sizeof *w->own);
        for (size_t i = 0, off = 0; i < ntopics; i++) {
            memcpy(w->names + off, topics[i].p, topics[i].len);
            w->own[i] = (struct dq_str){w->names + off, topics[i].len};
            off += topics[i].len;
        }
        w->topics = w->own;
        enqueue(w);
        if (timeout_ms > 0) {
            w->timer = evtimer_new(c->base, timeout_cb, w);
            struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
            evtimer_add(w->timer, &tv);
        }
    }
    /* The attempt may complete (and free w) before it returns: `answered`
     * on the stack tells. */
    bool answered = false;
    w->answered = &answered;
    attempt(w);
    if (answered) return NULL;
    w->answered = NULL;
    if (!w->own) w->topics = NULL; /* the caller's; never attempted again */
    return w;
}

void wait_on_ready(struct core *c, struct dq_str topic, int64_t hint) {
    struct wait_table *t = c->waits;
    if (t->nwaiters == 0) return;
    struct topicq *q = find_queue(t, topic, htab_hash_bytes(topic.p, topic.len));
    if (!q) return;
    int64_t budget = hint < 0 ? 1 : hint;
    /* attempt() may complete at once and end waiters, freeing entries and
     * even q: pick the waiters to wake first. */
    struct core_wait **wake = xmalloc(q->len * sizeof *wake);
    size_t n = 0;
    for (struct entry *e = q->head; e && budget > 0; e = e->next) {
        struct core_wait *w = e->w;
        if (w->inflight) {
            w->retry = true; /* its attempt may have missed these jobs */
        } else if (!w->expired) {
            w->chain = hint < 0;
            w->inflight = true; /* taken: attempted below */
            wake[n++] = w;
            budget -= w->count;
        }
    }
    for (size_t i = 0; i < n; i++) attempt(wake[i]);
    dq_free(wake);
}

void core_reserve_cancel(struct core_wait *w) {
    w->cb = NULL;
    dequeue(w);
    if (!w->inflight) waiter_free(w);
}

/* Finds a queued waiter with no attempt in flight, marking every waiter
 * it passes as expired. O(waiters) per call: only used at shutdown. */
struct find_idle {
    struct core_wait *found;
};

static void idle_of_queue(void *ud, struct hnode *n) {
    struct find_idle *f = ud;
    if (f->found) return;
    for (struct entry *e = ((struct topicq *)n)->head; e; e = e->next) {
        e->w->expired = true;
        if (!e->w->inflight) {
            f->found = e->w;
            return;
        }
    }
}

void wait_wake_all(struct core *c) {
    for (;;) {
        struct find_idle f = {NULL};
        htab_foreach(&c->waits->queues, idle_of_queue, &f);
        if (!f.found) break;
        answer_none(f.found);
    }
}
