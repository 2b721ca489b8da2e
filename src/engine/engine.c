/* engine.c -- the in-memory job engine (see engine.h).
 *
 * A job is one allocation: a 73-byte header, then the id bytes, then the
 * body bytes. Its wheel node is the only pair of links it has: a delayed job
 * sits in the timing wheel at its due time, a reserved one at its lease end,
 * a ready one on its topic's ready FIFO and a dead one on its topic's dead
 * list (never two at once). Its hash link chains it in its topic's id table.
 *
 * Ready order. Every transition to ready appends to the topic's FIFO
 * (RELEASE pushes at its head), and engine_advance applies timed transitions
 * in time order, equal times in the order they were scheduled (the wheel's
 * stable ties). So a caller that advances to `now` before its other calls at
 * `now` sees jobs handed out by the time they became ready, ties in the
 * order they were added.
 *
 * `due` is the time the job was last scheduled for: set by ADD (and REPLACE)
 * and by NACK, kept through reserve, lease end, release and KICK.
 *
 * A topic exists while it holds a job; its counters go with it, the global
 * counters stay.
 *
 * Far jobs (stubs: an id and a ref) live in engine_far.c; this file only
 * adds them (engine_add_far), finds them where ADD and DEL look for an id,
 * and frees them with their topic. Recovery's hints and restores, and the
 * snapshot's walk, are in engine_load.c. engine_int.h shares the structs
 * and the helpers the files use.
 */
#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "engine/engine_int.h"
#include "lib/htab.h"
#include "lib/slab.h"
#include "lib/wheel.h"
#include "lib/xalloc.h"

#define TIME_MAX ((INT64_C(1) << 48) - 1) /* due/created are 48-bit fields */
#define ATTEMPTS_MAX 0xffff
#define RETRIES_MAX 0xffff
#define TTR_MAX ((UINT32_C(1) << 30) - 1)
#define TOPICS_SIZE 16 /* initial buckets of the topic table */
#define IDLE_TOPICS_MAX 4096 /* emptied topics kept for their counters */
#define JOBS_SIZE 4    /* initial buckets of a topic's id table */
#define PREFETCH_MAX 64   /* keys one engine_prefetch call looks at */
#define PREFETCH_DEPTH 2  /* chain nodes it loads after the bucket */
#define PURGE_NOW 4096    /* a PURGE of more jobs frees them later */

/* A push job (§9) ends with a tail after its body: url_len:u16 ct_len:u8,
 * then the URL and the content type. Jobs without a URL carry nothing. */
#define PUSH_TAIL_FIXED 3

_Static_assert(offsetof(struct job, data) <= 74, "job header too large");
_Static_assert(DQ_TTR_MAX <= TTR_MAX, "ttr field too narrow");
_Static_assert(DQ_RETRIES_MAX <= RETRIES_MAX, "retries field too narrow");
_Static_assert(DQ_ID_MAX <= 256, "id length field too narrow");
_Static_assert(DQ_TOPIC_MAX <= 255, "topic length field too narrow");

/* --- small helpers ---------------------------------------------------------- */

static struct job *job_of(struct wheel_node *n) {
    return (struct job *)((char *)n - offsetof(struct job, node));
}

static size_t id_len(const struct job *j) { return (size_t)j->id_len1 + 1; }

/* Jobs of a topic, far ones included. */
static uint64_t topic_count(const struct topic *t) {
    return htab_count(&t->jobs) + htab_count(&t->far);
}

static struct dq_str job_id(const struct job *j) {
    return (struct dq_str){j->data, id_len(j)};
}

static struct dq_str topic_name(const struct topic *t) {
    return (struct dq_str){t->name, t->name_len};
}

int64_t en_clamp_time(int64_t t) {
    if (t < 0) return 0;
    if (t > TIME_MAX) return TIME_MAX;
    return t;
}

/* now + d, saturating. */
static int64_t add_ms(int64_t now, int64_t d) {
    if (d < 0) d = 0;
    if (now > TIME_MAX - d) return TIME_MAX;
    return en_clamp_time(now + d);
}

static void list_init(struct wheel_node *h) { h->next = h->prev = h; }

static bool list_empty(const struct wheel_node *h) { return h->next == h; }

static void list_append(struct wheel_node *h, struct wheel_node *n) {
    n->next = h;
    n->prev = h->prev;
    h->prev->next = n;
    h->prev = n;
}

static void list_push(struct wheel_node *h, struct wheel_node *n) {
    n->prev = h;
    n->next = h->next;
    h->next->prev = n;
    h->next = n;
}

static void list_unlink(struct wheel_node *n) {
    n->prev->next = n->next;
    n->next->prev = n->prev;
}

void en_view(const struct job *j, struct dq_job *out) {
    out->topic = topic_name(j->topic);
    out->id = job_id(j);
    out->body = (struct dq_str){j->data + id_len(j), j->body_len};
    out->state = (enum dq_state)j->state;
    out->due = (int64_t)j->due;
    out->created = (int64_t)j->created;
    out->deadline = j->state == DQ_RESERVED ? j->node.when : 0;
    out->ttr = j->ttr;
    out->retries = (uint32_t)j->retries;
    out->attempts = (uint32_t)j->attempts;
    out->backoff.kind = j->backoff_fixed ? DQ_BACKOFF_FIXED : DQ_BACKOFF_EXP;
    out->backoff.base = j->backoff_base;
    out->backoff.max = j->backoff_max;
    out->url = out->content_type = (struct dq_str){NULL, 0};
    if (j->push) {
        const uint8_t *p = (const uint8_t *)j->data + id_len(j) + j->body_len;
        size_t ulen = (size_t)p[0] | (size_t)p[1] << 8;
        out->url = (struct dq_str){(const char *)p + PUSH_TAIL_FIXED, ulen};
        out->content_type =
            (struct dq_str){(const char *)p + PUSH_TAIL_FIXED + ulen, p[2]};
    }
}

/* --- topics ----------------------------------------------------------------- */

static uint64_t topic_rehash(const struct hnode *n) {
    return en_topic_of_h(n)->hash;
}

static uint64_t job_rehash(const struct hnode *n) {
    const struct job *j = en_job_of_h(n);
    return htab_hash_bytes(j->data, id_len(j));
}

static bool topic_is(const struct topic *t, struct dq_str name) {
    return t->name_len == name.len && memcmp(t->name, name.p, name.len) == 0;
}

struct topic *en_topic_lookup(const struct engine *e, struct dq_str name) {
    if (e->last && topic_is(e->last, name)) return e->last;
    uint64_t h = htab_hash_bytes(name.p, name.len);
    for (struct hnode *n = htab_bucket(&e->topics, h); n; n = n->next) {
        struct topic *t = en_topic_of_h(n);
        if (t->hash == h && topic_is(t, name)) return t;
    }
    return NULL;
}

struct topic *en_topic_get(struct engine *e, struct dq_str name) {
    struct topic *t = en_topic_lookup(e, name);
    if (t) e->last = t;
    return t;
}

struct topic *en_topic_create(struct engine *e, struct dq_str name) {
    assert(name.len >= 1 && name.len <= 255);
    struct topic *t = dq_malloc(offsetof(struct topic, name) + name.len);
    if (!t) return NULL;
    memset(t, 0, offsetof(struct topic, name));
    if (htab_init(&t->jobs, JOBS_SIZE, job_rehash) < 0) {
        dq_free(t);
        return NULL;
    }
    if (htab_init(&t->far, 1, en_stub_rehash) < 0) {
        htab_destroy(&t->jobs);
        dq_free(t);
        return NULL;
    }
    t->hash = htab_hash_bytes(name.p, name.len);
    list_init(&t->ready);
    list_init(&t->pushq);
    list_init(&t->dead);
    list_init(&t->idle);
    t->name_len = (uint8_t)name.len;
    memcpy(t->name, name.p, name.len);
    htab_insert(&e->topics, &t->hnode, t->hash);
    e->last = t;
    return t;
}

/* Frees t, whose jobs are already gone. */
void en_topic_free(struct engine *e, struct topic *t) {
    if (!list_empty(&t->idle)) {
        list_unlink(&t->idle);
        e->nidle--;
    }
    htab_remove(&e->topics, &t->hnode, t->hash);
    htab_destroy(&t->jobs);
    htab_destroy(&t->far);
    if (e->last == t) e->last = NULL;
    dq_free(t);
}

/* A topic that lost its last job keeps its counters (STATS topic) while it
 * is among the IDLE_TOPICS_MAX most recently emptied; older ones are freed,
 * so topics used once cannot pile up. */
static void topic_free_if_empty(struct engine *e, struct topic *t) {
    if (topic_count(t) != 0 || !list_empty(&t->idle)) return;
    list_append(&e->idle, &t->idle);
    e->nidle++;
    while (e->nidle > IDLE_TOPICS_MAX) {
        struct topic *old = (struct topic *)((char *)e->idle.next -
                                             offsetof(struct topic, idle));
        en_topic_free(e, old);
    }
}

struct topic *en_topic_hint(struct engine *e, struct dq_str name) {
    struct topic *t = en_topic_get(e, name);
    if (!t && (t = en_topic_create(e, name))) topic_free_if_empty(e, t);
    return t;
}

/* t gains a job: it is no longer idle. */
void en_topic_use(struct engine *e, struct topic *t) {
    if (list_empty(&t->idle)) return;
    list_unlink(&t->idle);
    list_init(&t->idle);
    e->nidle--;
}

/* Tells who takes them: RESERVE's waiters (on_ready) about ready jobs
 * without a URL, the pusher (on_push_ready) about push jobs. */
static void notify_ready(struct engine *e, struct topic *t) {
    uint64_t plain = t->st.jobs[DQ_READY] - t->npush;
    if (e->hooks.on_ready && plain)
        e->hooks.on_ready(e->hooks.ud, topic_name(t), plain);
    if (e->hooks.on_push_ready && t->npush)
        e->hooks.on_push_ready(e->hooks.ud, topic_name(t), t->npush);
}

/* --- jobs ------------------------------------------------------------------- */

struct job *en_job_find(const struct topic *t, struct dq_str id,
                        uint64_t h) {
    for (struct hnode *n = htab_bucket(&t->jobs, h); n; n = n->next) {
        struct job *j = en_job_of_h(n);
        if (id_len(j) == id.len && memcmp(j->data, id.p, id.len) == 0)
            return j;
    }
    return NULL;
}

/* The job topic/id, or NULL; *tp receives its topic. */
static struct job *find(struct engine *e, struct dq_str topic, struct dq_str id,
                        struct topic **tp, uint64_t *hp) {
    struct topic *t = en_topic_get(e, topic);
    if (!t) return NULL;
    uint64_t h = htab_hash_bytes(id.p, id.len);
    if (tp) *tp = t;
    if (hp) *hp = h;
    return en_job_find(t, id, h);
}

/* Links j where `state` keeps it (appending to lists) and counts it. */
void en_place(struct engine *e, struct job *j, int state, int64_t when) {
    j->state = (uint32_t)state;
    switch (state) {
    case DQ_DELAYED:
    case DQ_RESERVED:
        j->node.when = when;
        wheel_add(&e->wheel, &j->node);
        break;
    case DQ_READY:
        if (j->push) {
            list_append(&j->topic->pushq, &j->node);
            j->topic->npush++;
        } else {
            list_append(&j->topic->ready, &j->node);
        }
        break;
    default:
        list_append(&j->topic->dead, &j->node);
        break;
    }
    j->topic->st.jobs[state]++;
    e->st.jobs[state]++;
}

/* Unlinks j from its wheel slot or list and uncounts it. */
static void unplace(struct engine *e, struct job *j) {
    if (j->state == DQ_DELAYED || j->state == DQ_RESERVED)
        wheel_del(&e->wheel, &j->node);
    else
        list_unlink(&j->node);
    if (j->state == DQ_READY && j->push) j->topic->npush--;
    j->topic->st.jobs[j->state]--;
    if (!j->topic->purged) e->st.jobs[j->state]--;
}

/* A job of topic t; url.len 0 = not a push job (no tail). */
struct job *en_job_alloc(struct engine *e, struct topic *t,
                         struct dq_str id, struct dq_str body,
                         struct dq_str url, struct dq_str ctype) {
    assert(id.len >= 1 && id.len <= DQ_ID_MAX);
    assert(url.len <= DQ_URL_MAX && ctype.len <= DQ_CTYPE_MAX);
    bool push = url.len > 0;
    size_t tail = push ? PUSH_TAIL_FIXED + url.len + ctype.len : 0;
    size_t n = offsetof(struct job, data) + id.len + body.len + tail;
    struct job *j = n <= SLAB_MAX ? slab_alloc(&e->jobs, n) : dq_malloc(n);
    if (!j) return NULL;
    j->topic = t;
    j->id_len1 = (uint8_t)(id.len - 1);
    j->body_len = (uint32_t)body.len;
    j->push = push;
    memcpy(j->data, id.p, id.len);
    if (body.len) memcpy(j->data + id.len, body.p, body.len);
    if (push) {
        uint8_t *p = (uint8_t *)j->data + id.len + body.len;
        p[0] = (uint8_t)url.len;
        p[1] = (uint8_t)(url.len >> 8);
        p[2] = (uint8_t)ctype.len;
        memcpy(p + PUSH_TAIL_FIXED, url.p, url.len);
        if (ctype.len) memcpy(p + PUSH_TAIL_FIXED + url.len, ctype.p, ctype.len);
    }
    return j;
}

void en_job_options(struct job *j, int64_t due, int64_t created,
                    uint32_t ttr, uint32_t retries, uint32_t attempts,
                    const struct dq_backoff *b) {
    j->due = (uint64_t)en_clamp_time(due);
    j->created = (uint64_t)en_clamp_time(created);
    j->ttr = ttr > TTR_MAX ? TTR_MAX : ttr;
    j->retries = retries > RETRIES_MAX ? RETRIES_MAX : retries;
    j->attempts = attempts > ATTEMPTS_MAX ? ATTEMPTS_MAX : attempts;
    j->backoff_fixed = b->kind == DQ_BACKOFF_FIXED;
    j->backoff_base = b->base;
    j->backoff_max = b->max;
}

/* The bytes of j's allocation (what job_alloc asked for). */
static size_t job_size(const struct job *j) {
    size_t n = offsetof(struct job, data) + id_len(j) + j->body_len;
    if (j->push) {
        const uint8_t *p = (const uint8_t *)j->data + n -
                           offsetof(struct job, data);
        n += PUSH_TAIL_FIXED + ((size_t)p[0] | (size_t)p[1] << 8) + p[2];
    }
    return n;
}

static void job_free(struct engine *e, struct job *j) {
    size_t n = job_size(j);
    if (n <= SLAB_MAX) slab_free(&e->jobs, j);
    else dq_free(j);
}

/* Unlinks and frees j (not its topic). h is the hash of its id. */
void en_job_remove(struct engine *e, struct job *j, uint64_t h) {
    unplace(e, j);
    htab_remove(&j->topic->jobs, &j->hnode, h);
    e->count--;
    job_free(e, j);
}

/* --- API -------------------------------------------------------------------- */

struct engine *engine_new(const struct engine_config *cfg, int64_t now) {
    struct engine *e = dq_calloc(1, sizeof *e);
    if (!e) return NULL;
    if (cfg) {
        e->max_jobs = cfg->max_jobs;
        e->hooks = cfg->hooks;
    }
    if (htab_init(&e->topics, TOPICS_SIZE, topic_rehash) < 0) {
        dq_free(e);
        return NULL;
    }
    wheel_init(&e->wheel, now);
    list_init(&e->idle);
    return e;
}

static void free_job_cb(void *ud, struct hnode *n) {
    job_free(ud, en_job_of_h(n));
}

static void free_topic_cb(void *ud, struct hnode *n) {
    struct topic *t = en_topic_of_h(n);
    htab_foreach(&t->jobs, free_job_cb, ud);
    htab_destroy(&t->jobs);
    htab_foreach(&t->far, en_stub_free_cb, ud);
    htab_destroy(&t->far);
    dq_free(t);
}

void engine_free(struct engine *e) {
    if (!e) return;
    htab_foreach(&e->topics, free_topic_cb, e);
    htab_destroy(&e->topics);
    while (e->graves) {
        struct topic *g = e->graves;
        e->graves = g->grave_next;
        free_topic_cb(e, &g->hnode);
    }
    en_far_queue_free(&e->farq);
    slab_destroy(&e->stubs);
    slab_destroy(&e->jobs);
    dq_free(e);
}

/* ADD, of a job kept in RAM (far false) or a far job the store keeps at
 * `ref`. */
static int add(struct engine *e, int64_t now, const struct dq_add *a,
               bool far, uint64_t ref, struct dq_job *out) {
    if (a->body.len > BODY_MAX) return ENGINE_ENOMEM;
    struct topic *t = en_topic_get(e, a->topic);
    uint64_t h = htab_hash_bytes(a->id.p, a->id.len);
    struct job *old = t ? en_job_find(t, a->id, h) : NULL;
    struct stub *oldf = t && !old ? en_stub_find(t, a->id, h) : NULL;
    if (old || oldf) {
        if (!a->replace) return ENGINE_EEXISTS;
        if (old && old->state == DQ_RESERVED) return ENGINE_EBUSY;
    } else if (e->max_jobs && e->count >= e->max_jobs) {
        return ENGINE_EFULL;
    }
    bool created = false;
    if (!t) {
        if (!(t = en_topic_create(e, a->topic))) return ENGINE_ENOMEM;
        created = true;
    }
    struct job *j = NULL;
    struct stub *f = NULL;
    if (far) {
        f = en_stub_new(e, a->id, ref);
    } else {
        j = en_job_alloc(e, t, a->id, a->body, a->url, a->content_type);
    }
    if (!j && !f) {
        if (created) en_topic_free(e, t);
        return ENGINE_ENOMEM;
    }
    en_topic_use(e, t);
    if (old) en_job_remove(e, old, h);
    if (oldf) en_stub_remove(e, t, oldf, h, true);
    t->st.added++;
    e->st.added++;
    e->count++;
    if (far) {
        htab_insert(&t->far, &f->hnode, h);
        e->nfar++;
        t->st.jobs[DQ_DELAYED]++;
        e->st.jobs[DQ_DELAYED]++;
        return DQ_DELAYED;
    }
    en_job_options(j, a->due, now, a->ttr, a->retries, 0, &a->backoff);
    htab_insert(&t->jobs, &j->hnode, h);
    int state = (int64_t)j->due <= now ? DQ_READY : DQ_DELAYED;
    en_place(e, j, state, (int64_t)j->due);
    if (out) en_view(j, out);
    if (state == DQ_READY) notify_ready(e, t);
    return state;
}

int engine_add(struct engine *e, int64_t now, const struct dq_add *a,
               struct dq_job *out) {
    return add(e, now, a, false, 0, out);
}

int engine_add_far(struct engine *e, int64_t now, const struct dq_add *a,
                   uint64_t ref) {
    assert(ref <= REF_MAX);
    return add(e, now, a, true, ref, NULL);
}

/* DEL and ACK. */
static int drop(struct engine *e, struct dq_str topic, struct dq_str id,
                bool ack) {
    struct topic *t = NULL;
    uint64_t h = 0;
    struct job *j = find(e, topic, id, &t, &h);
    struct stub *f = !j && t && htab_count(&t->far) ? en_stub_find(t, id, h)
                                                    : NULL;
    if (j) en_job_remove(e, j, h);
    else if (f) en_stub_remove(e, t, f, h, true);
    else return 0;
    if (ack) {
        t->st.acked++;
        e->st.acked++;
    } else {
        t->st.deleted++;
        e->st.deleted++;
    }
    topic_free_if_empty(e, t);
    return 1;
}

int engine_del(struct engine *e, struct dq_str topic, struct dq_str id) {
    return drop(e, topic, id, false);
}

int engine_ack(struct engine *e, struct dq_str topic, struct dq_str id) {
    return drop(e, topic, id, true);
}

void engine_prefetch(const struct engine *e, const struct dq_str *keys,
                     size_t n) {
    const struct htab *tab[PREFETCH_MAX], *far[PREFETCH_MAX];
    uint64_t h[PREFETCH_MAX];
    if (n > PREFETCH_MAX) n = PREFETCH_MAX;
    for (size_t i = 0; i < n; i++) {
        const struct topic *t = en_topic_lookup(e, keys[2 * i]);
        tab[i] = t && htab_count(&t->jobs) ? &t->jobs : NULL;
        far[i] = t && htab_count(&t->far) ? &t->far : NULL;
        h[i] = htab_hash_bytes(keys[2 * i + 1].p, keys[2 * i + 1].len);
    }
    /* Level by level, so that each level's loads are in flight together
     * and the next level finds the links it reads already there. */
    for (int depth = 0; depth <= PREFETCH_DEPTH; depth++)
        for (size_t i = 0; i < n; i++) {
            if (tab[i]) htab_prefetch(tab[i], h[i], depth);
            if (far[i]) htab_prefetch(far[i], h[i], depth);
        }
}

int engine_get(const struct engine *e, struct dq_str topic, struct dq_str id,
               struct dq_job *out) {
    const struct topic *t = en_topic_lookup(e, topic);
    if (!t) return 0;
    const struct job *j = en_job_find(t, id, htab_hash_bytes(id.p, id.len));
    if (!j) return 0;
    if (out) en_view(j, out);
    return 1;
}

/* RESERVE from the plain ready FIFOs (push false) or the push ones. */
static int reserve(struct engine *e, int64_t now, const struct dq_str *topics,
                   size_t ntopics, uint32_t count, struct dq_job *out,
                   bool push) {
    uint32_t n = 0;
    for (size_t i = 0; i < ntopics && n < count; i++) {
        struct topic *t = en_topic_get(e, topics[i]);
        if (!t) continue;
        struct wheel_node *q = push ? &t->pushq : &t->ready;
        while (n < count && !list_empty(q)) {
            struct job *j = job_of(q->next);
            unplace(e, j);
            if (j->attempts < ATTEMPTS_MAX) j->attempts++;
            en_place(e, j, DQ_RESERVED, add_ms(now, j->ttr));
            t->st.reserved++;
            e->st.reserved++;
            en_view(j, &out[n++]);
        }
    }
    return (int)n;
}

int engine_reserve(struct engine *e, int64_t now, const struct dq_str *topics,
                   size_t ntopics, uint32_t count, struct dq_job *out) {
    return reserve(e, now, topics, ntopics, count, out, false);
}

int engine_reserve_push(struct engine *e, int64_t now, struct dq_str topic,
                        uint32_t count, struct dq_job *out) {
    return reserve(e, now, &topic, 1, count, out, true);
}

int engine_nack(struct engine *e, int64_t now, struct dq_str topic,
                struct dq_str id, int64_t delay) {
    struct topic *t;
    struct job *j = find(e, topic, id, &t, NULL);
    if (!j || j->state != DQ_RESERVED) return ENGINE_ENOTRESERVED;
    unplace(e, j);
    t->st.nacked++;
    e->st.nacked++;
    if (j->attempts > j->retries || delay == DQ_NACK_DEAD) {
        en_place(e, j, DQ_DEAD, 0);
        t->st.dead++;
        e->st.dead++;
        return DQ_DEAD;
    }
    if (delay < 0) {
        struct dq_backoff b = {
            .kind = j->backoff_fixed ? DQ_BACKOFF_FIXED : DQ_BACKOFF_EXP,
            .base = j->backoff_base,
            .max = j->backoff_max,
        };
        delay = dq_backoff_delay(&b, (uint32_t)j->attempts);
    }
    int64_t due = add_ms(now, delay);
    j->due = (uint64_t)due;
    if (due <= now) {
        en_place(e, j, DQ_READY, 0);
        notify_ready(e, t);
        return DQ_READY;
    }
    en_place(e, j, DQ_DELAYED, due);
    return DQ_DELAYED;
}

int engine_touch(struct engine *e, int64_t now, struct dq_str topic,
                 struct dq_str id, uint32_t ttr, int64_t *deadline) {
    struct job *j = find(e, topic, id, NULL, NULL);
    if (!j || j->state != DQ_RESERVED) return ENGINE_ENOTRESERVED;
    int64_t d = add_ms(now, ttr ? ttr : j->ttr);
    wheel_del(&e->wheel, &j->node);
    j->node.when = d;
    wheel_add(&e->wheel, &j->node);
    if (deadline) *deadline = d;
    return 0;
}

int engine_release(struct engine *e, struct dq_str topic, struct dq_str id) {
    struct topic *t;
    struct job *j = find(e, topic, id, &t, NULL);
    if (!j || j->state != DQ_RESERVED) return 0;
    unplace(e, j);
    if (j->attempts > 0) j->attempts--;
    j->state = DQ_READY;
    if (j->push) {
        list_push(&t->pushq, &j->node);
        t->npush++;
    } else {
        list_push(&t->ready, &j->node);
    }
    t->st.jobs[DQ_READY]++;
    e->st.jobs[DQ_READY]++;
    notify_ready(e, t);
    return 1;
}

/* dead -> ready, attempts 0, due now (the ready order follows due). */
static void kick_one(struct engine *e, struct job *j, int64_t now) {
    unplace(e, j);
    j->attempts = 0;
    j->due = (uint64_t)en_clamp_time(now);
    en_place(e, j, DQ_READY, 0);
}

int engine_kick_job(struct engine *e, int64_t now, struct dq_str topic,
                    struct dq_str id) {
    struct topic *t;
    struct job *j = find(e, topic, id, &t, NULL);
    if (!j || j->state != DQ_DEAD) return 0;
    kick_one(e, j, now);
    t->st.kicked++;
    e->st.kicked++;
    notify_ready(e, t);
    return 1;
}

int64_t engine_kick(struct engine *e, int64_t now, struct dq_str topic,
                    uint64_t count) {
    struct topic *t = en_topic_get(e, topic);
    if (!t) return 0;
    int64_t n = 0;
    while ((count == 0 || (uint64_t)n < count) && !list_empty(&t->dead)) {
        kick_one(e, job_of(t->dead.next), now);
        n++;
    }
    t->st.kicked += (uint64_t)n;
    e->st.kicked += (uint64_t)n;
    if (n) notify_ready(e, t);
    return n;
}

/* A job of a purged topic (PURGE, or the reaper's slices of a grave): out
 * of wherever it is placed, freed. */
static void purge_cb(void *ud, struct hnode *n) {
    struct job *j = en_job_of_h(n);
    unplace(ud, j);
    job_free(ud, j);
}

/* PURGE of a big topic: the topic becomes a grave, out of the topic table,
 * under a fresh topic of the same name that keeps its counters; its jobs
 * stop counting at once and are freed by engine_reap, a slice at a time
 * (a job of it that the wheel hands out meanwhile is freed there). */
static int64_t purge_later(struct engine *e, struct topic *t) {
    struct dq_str name = topic_name(t);
    uint64_t nfar = htab_count(&t->far), n = topic_count(t);
    htab_remove(&e->topics, &t->hnode, t->hash);
    if (e->last == t) e->last = NULL;
    struct topic *nt = en_topic_create(e, name);
    if (!nt) { /* cannot defer: do it now */
        htab_insert(&e->topics, &t->hnode, t->hash);
        return -1;
    }
    nt->st = t->st;
    memset(nt->st.jobs, 0, sizeof nt->st.jobs);
    nt->st.deleted += n;
    for (int k = 0; k < DQ_NSTATES; k++) e->st.jobs[k] -= t->st.jobs[k];
    e->count -= n;
    e->nfar -= nfar;
    e->st.deleted += n;
    if (!list_empty(&t->idle)) {
        list_unlink(&t->idle);
        list_init(&t->idle);
        e->nidle--;
    }
    t->purged = true;
    t->reap_pos = 0;
    t->grave_next = e->graves;
    e->graves = t;
    topic_free_if_empty(e, nt);
    return (int64_t)n;
}

bool engine_reap(struct engine *e, uint32_t budget) {
    uint64_t visits = budget;
    while (e->graves && visits > 0) {
        struct topic *g = e->graves;
        bool far = htab_count(&g->far) > 0;
        if (far || htab_count(&g->jobs)) {
            uint64_t left = far ? htab_drain(&g->far, &g->reap_pos, &visits,
                                             en_stub_drop_cb, e)
                                : htab_drain(&g->jobs, &g->reap_pos, &visits,
                                             purge_cb, e);
            if (far && left == 0) g->reap_pos = 0; /* the jobs next */
            if (left) continue;
            if (far) continue;
        }
        e->graves = g->grave_next;
        htab_destroy(&g->jobs);
        htab_destroy(&g->far);
        dq_free(g);
    }
    return e->graves != NULL;
}

uint64_t engine_give_back(struct engine *e, uint64_t max) {
    uint64_t left = slab_release(&e->jobs, max);
    return left + slab_release(&e->stubs, max);
}

int64_t engine_purge(struct engine *e, struct dq_str topic) {
    struct topic *t = en_topic_get(e, topic);
    if (!t) return 0;
    if (topic_count(t) > PURGE_NOW) {
        int64_t n = purge_later(e, t);
        if (n >= 0) return n;
    }
    uint64_t nfar = htab_count(&t->far);
    if (nfar) {
        htab_foreach(&t->far, en_stub_drop_cb, e);
        struct htab fresh;
        if (htab_init(&fresh, 1, en_stub_rehash) == 0) {
            htab_destroy(&t->far);
            t->far = fresh;
        } else {
            htab_clear(&t->far);
        }
        t->st.jobs[DQ_DELAYED] -= nfar;
        e->st.jobs[DQ_DELAYED] -= nfar;
        e->nfar -= nfar;
    }
    uint64_t n = htab_count(&t->jobs) + nfar;
    htab_foreach(&t->jobs, purge_cb, e);
    /* the table still links the freed jobs: start it afresh (keeping the
     * old buckets if a new table cannot be had, now that it is empty) */
    struct htab fresh;
    if (htab_init(&fresh, JOBS_SIZE, job_rehash) == 0) {
        htab_destroy(&t->jobs);
        t->jobs = fresh;
    } else {
        htab_clear(&t->jobs);
    }
    e->count -= n;
    e->st.deleted += n;
    t->st.deleted += n;
    topic_free_if_empty(e, t);
    return (int64_t)n;
}


#define LIST_WORK 65536 /* buckets and jobs one LIST call looks at, beyond COUNT */
#define LIST_NEAR (UINT64_C(1) << 62) /* cursor bit: delayed jobs in RAM (62:
                                        cursors stay positive int64s) */

static void list_cb(void *ud, const struct hnode *n) {
    struct list_ctx *c = ud;
    const struct job *j = en_job_of_h(n);
    c->work++;
    if ((int)j->state == c->state) {
        c->fn(c->ud, job_id(j));
        c->found++;
    }
}

/* One bucket at a time (a bucket as the table's SCAN defines it: one of the
 * smaller table and those it expands to while resizing), on through empty
 * buckets and jobs of other states until the page holds `count`, so a page
 * is short only at the end, or when LIST_WORK jobs and buckets held too few
 * in `state`. The last bucket is reported whole (the cursor cannot point
 * inside one), so a page may hold a few more than `count`. */
uint64_t engine_list(const struct engine *e, struct dq_str topic, int state,
                     uint32_t count, uint64_t cursor,
                     void (*fn)(void *ud, struct dq_str id), void *ud) {
    const struct topic *t = en_topic_lookup(e, topic);
    if (!t || t->st.jobs[state] == 0) return 0;
    if (count == 0) count = 1;
    struct list_ctx c = {state, fn, ud, 0, 0};
    uint64_t budget = LIST_WORK + (uint64_t)count * 4;
    /* Delayed jobs: the far table first (cursor bit 62 clear), then the jobs
     * in RAM (bit 62 set). Jobs only move from far to RAM, so one that moves
     * during the scan is met in RAM if it was not met far. */
    if (state == DQ_DELAYED && !(cursor & LIST_NEAR)) {
        cursor = en_far_list(t, cursor, count, budget, &c);
        if (cursor != 0) return cursor;
        cursor = LIST_NEAR;
    }
    uint64_t phase = cursor & LIST_NEAR;
    cursor &= ~LIST_NEAR;
    if (c.found >= count || c.work >= budget) return phase | cursor;
    do {
        cursor = htab_scan(&t->jobs, cursor, 1, list_cb, &c);
        c.work++;
    } while (cursor != 0 && c.found < count && c.work < budget);
    return cursor ? phase | cursor : 0;
}

struct scan_ctx {
    void (*fn)(void *ud, const struct dq_job *j);
    void *ud;
};

static void scan_cb(void *ud, const struct hnode *n) {
    const struct scan_ctx *c = ud;
    struct dq_job v;
    en_view(en_job_of_h(n), &v);
    c->fn(c->ud, &v);
}

uint64_t engine_scan(const struct engine *e, struct dq_str topic,
                     uint32_t buckets, uint64_t cursor,
                     void (*fn)(void *ud, const struct dq_job *j), void *ud) {
    const struct topic *t = en_topic_lookup(e, topic);
    if (!t) return 0;
    struct scan_ctx c = {fn, ud};
    return htab_scan(&t->jobs, cursor, buckets, scan_cb, &c);
}

void engine_stats(const struct engine *e, struct dq_str topic,
                  struct dq_stats *out) {
    if (topic.len == 0) {
        *out = e->st;
        return;
    }
    const struct topic *t = en_topic_lookup(e, topic);
    if (t) {
        *out = t->st;
        out->oldest_ready =
            list_empty(&t->ready) ? 0 : (int64_t)job_of(t->ready.next)->due;
    } else {
        memset(out, 0, sizeof *out);
    }
}

struct topics_ctx {
    void (*fn)(void *ud, struct dq_str topic);
    void *ud;
};

static void topics_cb(void *ud, struct hnode *n) {
    const struct topics_ctx *c = ud;
    const struct topic *t = en_topic_of_h(n);
    if (topic_count(t)) c->fn(c->ud, topic_name(t));
}

void engine_topics(const struct engine *e,
                   void (*fn)(void *ud, struct dq_str topic), void *ud) {
    struct topics_ctx c = {fn, ud};
    htab_foreach(&e->topics, topics_cb, &c);
}

uint64_t engine_count(const struct engine *e) { return e->count; }

int64_t engine_next_expiry(const struct engine *e) {
    return wheel_next(&e->wheel);
}

bool engine_advance(struct engine *e, int64_t now, uint32_t budget) {
    /* Cascading timers down the wheel is cheaper than a transition; allow a
     * few per job, and enough that small batches never stop on it. */
    uint32_t work = budget >= (UINT32_MAX - 1024) / 4 ? UINT32_MAX
                                                      : budget * 4 + 1024;
    struct topic *touched = NULL;
    uint32_t n = 0;
    bool more = false;
    for (;;) {
        struct wheel_node *node;
        int r = wheel_due(&e->wheel, now, &work, &node);
        if (r == WHEEL_IDLE) break;
        if (r == WHEEL_AGAIN || n == budget) {
            more = true;
            break;
        }
        n++;
        struct job *j = job_of(node);
        struct topic *t = j->topic;
        if (t->purged) { /* purged: engine_reap frees it, off the wheel */
            unplace(e, j);
            j->state = DQ_DEAD;
            list_append(&t->dead, &j->node);
            t->st.jobs[DQ_DEAD]++;
            continue;
        }
        bool lease = j->state == DQ_RESERVED;
        unplace(e, j);
        bool dead = lease && j->attempts > j->retries;
        if (lease && !dead) j->due = (uint64_t)j->node.when; /* lease end */
        en_place(e, j, dead ? DQ_DEAD : DQ_READY, 0);
        if (lease) {
            t->st.expired++;
            e->st.expired++;
            if (dead) {
                t->st.dead++;
                e->st.dead++;
            }
        }
        if (!dead && !t->touched) {
            t->touched = true;
            t->touched_next = touched;
            touched = t;
        }
        if (lease && e->hooks.on_expire) {
            struct dq_job v;
            en_view(j, &v);
            e->hooks.on_expire(e->hooks.ud, &v, dead);
        }
    }
    while (touched) {
        struct topic *t = touched;
        touched = t->touched_next;
        t->touched = false;
        t->touched_next = NULL;
        notify_ready(e, t);
    }
    return more;
}
