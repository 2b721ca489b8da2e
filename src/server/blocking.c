/* blocking.c -- clients waiting in RESERVE.
 *
 * A RESERVE that may wait becomes a waiter, queued at the tail of one FIFO
 * per topic it names, at once (before the store has even answered its first
 * attempt, so a job that turns ready meanwhile is not missed). The store's
 * on_ready(topic, hint) walks that topic's FIFO from the oldest waiter and
 * issues one reserve per waiter until the hint (ready jobs) is used up, so
 * the longest-waiting client gets the next job. A waiter whose attempt is
 * still in flight is marked to try again if it comes back empty.
 *
 * A waiter ends with jobs, with nil at its timeout, with nil at shutdown, or
 * when its client goes away; jobs reserved for a client that went away are
 * given back to the store (release), so nothing is lost.
 */
#include <event2/event.h>
#include <string.h>

#include "lib/xalloc.h"
#include "server/server.h"

struct entry { /* a waiter's place in one topic's FIFO */
    struct entry *prev, *next;
    struct waiter *w;
    struct topicq *q;
};

struct topicq {
    struct topicq *hnext;
    struct entry *head, *tail;
    size_t len;
    char name[];
};

struct waiter {
    struct server *srv;
    struct req *r;           /* NULL once the client went away */
    struct dq_str *topics;   /* copies, in `names` */
    char *names;
    size_t ntopics;
    uint32_t count;
    int64_t timeout_ms;      /* < 0 forever, 0 never wait */
    struct event *timer;
    struct entry *entries;   /* ntopics of them, when queued */
    bool queued;
    bool inflight;           /* a reserve for it is in flight */
    bool retry;              /* a topic got ready jobs during that reserve */
    bool expired;            /* its timeout passed (or shutdown) */
    bool chain;              /* woken without a count: wake the next too */
};

struct blocking {
    struct server *srv;
    struct topicq **buckets;
    size_t nbuckets, nqueues;
    uint64_t nwaiters;
};

static uint64_t hash(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    return h;
}

struct blocking *blocking_new(struct server *srv) {
    struct blocking *bl = xcalloc(1, sizeof *bl);
    bl->srv = srv;
    bl->nbuckets = 64;
    bl->buckets = xcalloc(bl->nbuckets, sizeof *bl->buckets);
    return bl;
}

void blocking_free(struct blocking *bl) {
    if (!bl) return;
    for (size_t i = 0; i < bl->nbuckets; i++) {
        struct topicq *q = bl->buckets[i];
        while (q) {
            struct topicq *n = q->hnext;
            dq_free(q);
            q = n;
        }
    }
    dq_free(bl->buckets);
    dq_free(bl);
}

uint64_t blocking_count(const struct server *srv) {
    return srv->blocking->nwaiters;
}

static struct topicq **find_slot(struct blocking *bl, struct dq_str t) {
    struct topicq **pp = &bl->buckets[hash(t.p, t.len) & (bl->nbuckets - 1)];
    while (*pp && !(strlen((*pp)->name) == t.len &&
                    memcmp((*pp)->name, t.p, t.len) == 0))
        pp = &(*pp)->hnext;
    return pp;
}

static void grow(struct blocking *bl) {
    size_t nb = bl->nbuckets * 2;
    struct topicq **b = xcalloc(nb, sizeof *b);
    for (size_t i = 0; i < bl->nbuckets; i++) {
        struct topicq *q = bl->buckets[i];
        while (q) {
            struct topicq *n = q->hnext;
            size_t k = hash(q->name, strlen(q->name)) & (nb - 1);
            q->hnext = b[k];
            b[k] = q;
            q = n;
        }
    }
    dq_free(bl->buckets);
    bl->buckets = b;
    bl->nbuckets = nb;
}

static struct topicq *get_queue(struct blocking *bl, struct dq_str t) {
    struct topicq **pp = find_slot(bl, t);
    if (*pp) return *pp;
    if (bl->nqueues >= bl->nbuckets) {
        grow(bl);
        pp = find_slot(bl, t);
    }
    struct topicq *q = xcalloc(1, sizeof *q + t.len + 1);
    memcpy(q->name, t.p, t.len);
    *pp = q;
    bl->nqueues++;
    return q;
}

static void drop_queue(struct blocking *bl, struct topicq *q) {
    struct topicq **pp = find_slot(bl, (struct dq_str){q->name, strlen(q->name)});
    *pp = q->hnext;
    bl->nqueues--;
    dq_free(q);
}

static void enqueue(struct waiter *w) {
    struct blocking *bl = w->srv->blocking;
    w->entries = xcalloc(w->ntopics, sizeof *w->entries);
    for (size_t i = 0; i < w->ntopics; i++) {
        struct entry *e = &w->entries[i];
        struct topicq *q = get_queue(bl, w->topics[i]);
        e->w = w;
        e->q = q;
        e->prev = q->tail;
        if (q->tail) q->tail->next = e;
        else q->head = e;
        q->tail = e;
        q->len++;
    }
    w->queued = true;
    bl->nwaiters++;
}

static void dequeue(struct waiter *w) {
    if (!w->queued) return;
    struct blocking *bl = w->srv->blocking;
    for (size_t i = 0; i < w->ntopics; i++) {
        struct entry *e = &w->entries[i];
        struct topicq *q = e->q;
        if (e->prev) e->prev->next = e->next;
        else q->head = e->next;
        if (e->next) e->next->prev = e->prev;
        else q->tail = e->prev;
        if (--q->len == 0) drop_queue(bl, q);
    }
    dq_free(w->entries);
    w->entries = NULL;
    w->queued = false;
    bl->nwaiters--;
}

static void waiter_free(struct waiter *w) {
    dequeue(w);
    if (w->timer) event_free(w->timer);
    dq_free(w->topics);
    dq_free(w->names);
    dq_free(w);
}

/* Ends the wait: the reply is in the req already. */
static void finish(struct waiter *w) {
    struct req *r = w->r;
    if (r) {
        r->w = NULL;
        if (r->c) {
            r->c->paused = false;
            r->c->resume = true;
        }
        req_done(r);
    }
    waiter_free(w);
}

static void noop_cb(void *pd, const struct dq_result *res) {}

static void attempt(struct waiter *w);

static void reserve_cb(void *pd, const struct dq_result *res) {
    struct waiter *w = pd;
    struct server *srv = w->srv;
    w->inflight = false;
    if (!w->r) { /* the client went away: give the jobs back */
        for (size_t i = 0; i < res->njobs; i++)
            srv->ops->release(srv->store, res->jobs[i].topic, res->jobs[i].id,
                              noop_cb, NULL);
        waiter_free(w);
        return;
    }
    if (res->status != DQ_OK) {
        if (res->status == DQ_UNAVAILABLE && w->queued && !w->expired) {
            /* keep waiting: the store calls on_ready when it is back */
            return;
        }
        reply_status_error(req_out(w->r), res);
        finish(w);
        return;
    }
    if (res->njobs > 0) {
        reply_jobs(req_out(w->r), res);
        bool chain = w->chain;
        struct dq_str first = w->topics[0];
        char name[DQ_TOPIC_MAX];
        memcpy(name, first.p, first.len);
        finish(w);
        if (chain) blocking_on_ready(srv, (struct dq_str){name, first.len}, -1);
        return;
    }
    if (w->retry && !w->expired) {
        w->retry = false;
        attempt(w);
        return;
    }
    if (w->timeout_ms == 0 || w->expired) {
        resp_nil_array(req_out(w->r));
        finish(w);
    }
    /* else: stay queued until on_ready or the timeout */
}

static void attempt(struct waiter *w) {
    struct server *srv = w->srv;
    w->inflight = true;
    srv->ops->reserve(srv->store, w->topics, w->ntopics, w->count, reserve_cb,
                      w);
}

static void timeout_cb(evutil_socket_t fd, short what, void *arg) {
    struct waiter *w = arg;
    w->expired = true;
    if (w->inflight) return; /* its completion answers */
    resp_nil_array(req_out(w->r));
    finish(w);
}

void blocking_reserve(struct server *srv, struct req *r,
                      const struct resp_arg *topics, size_t ntopics,
                      uint32_t count, int64_t timeout_ms) {
    struct waiter *w = xcalloc(1, sizeof *w);
    size_t total = 0;
    for (size_t i = 0; i < ntopics; i++) total += topics[i].len;
    w->srv = srv;
    w->r = r;
    w->names = xmalloc(total ? total : 1);
    w->topics = xcalloc(ntopics, sizeof *w->topics);
    w->ntopics = ntopics;
    w->count = count;
    w->timeout_ms = timeout_ms;
    for (size_t i = 0, off = 0; i < ntopics; i++) {
        memcpy(w->names + off, topics[i].p, topics[i].len);
        w->topics[i] = (struct dq_str){w->names + off, topics[i].len};
        off += topics[i].len;
    }
    r->w = w; /* so a client that goes away gets its jobs released */
    if (timeout_ms != 0) {
        if (r->c) r->c->paused = true;
        enqueue(w);
        if (timeout_ms > 0) {
            w->timer = evtimer_new(srv->base, timeout_cb, w);
            struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
            evtimer_add(w->timer, &tv);
        }
    }
    attempt(w);
}

void blocking_on_ready(struct server *srv, struct dq_str topic, int64_t hint) {
    struct blocking *bl = srv->blocking;
    if (bl->nwaiters == 0) return;
    struct topicq *q = *find_slot(bl, topic);
    if (!q) return;
    int64_t budget = hint < 0 ? 1 : hint;
    /* attempt() may complete at once and end waiters, freeing entries and
     * even q: pick the waiters to wake first. */
    struct waiter **wake = xmalloc(q->len * sizeof *wake);
    size_t n = 0;
    for (struct entry *e = q->head; e && budget > 0; e = e->next) {
        struct waiter *w = e->w;
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

void blocking_abandon(struct waiter *w) {
    w->r = NULL;
    dequeue(w);
    if (!w->inflight) waiter_free(w);
}

/* Finds a queued waiter with no attempt in flight, marking every waiter
 * it passes as expired. O(waiters) per call: only used at shutdown. */
static struct waiter *next_idle(struct blocking *bl) {
    for (size_t i = 0; i < bl->nbuckets; i++)
        for (struct topicq *q = bl->buckets[i]; q; q = q->hnext)
            for (struct entry *e = q->head; e; e = e->next) {
                e->w->expired = true;
                if (!e->w->inflight) return e->w;
            }
    return NULL;
}

void blocking_wake_all(struct server *srv) {
    struct waiter *w;
    while ((w = next_idle(srv->blocking)) != NULL) {
        resp_nil_array(req_out(w->r));
        finish(w);
    }
}
