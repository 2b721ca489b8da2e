/* engine_far.c -- the engine's far jobs (engine.h: engine_restore_far,
 * engine_far_queue/flush, engine_far_ref, engine_load, engine_far_move,
 * engine_far_count, engine_scan_far; engine_add_far is ADD, in engine.c).
 *
 * A far job is a stub: its id and the 48-bit ref where its store keeps it,
 * in its topic's far table (struct stub, engine_int.h), allocated from the
 * engine's stub slab. Recovery queues them (engine_far_queue) and restores
 * a million at a time sorted by far-table bucket. LIST's far phase and
 * engine_scan_far walk the far tables. engine.c keeps the state machine.
 */
#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "engine/engine_int.h"
#include "lib/htab.h"
#include "lib/slab.h"
#include "lib/xalloc.h"

#define FARQ_MAX (1u << 20)  /* far jobs engine_far_queue sorts at a time */
#define FARQ_AHEAD 32        /* ... whose chains it loads ahead of use */

/* engine_far_queue: a far job waiting to be restored. */
struct far_pend {
    uint64_t h;      /* its id's hash */
    struct topic *t;
    uint64_t ref;
    uint32_t id_off; /* its id, in far_queue.ids */
    uint16_t id_len;
    uint16_t key;    /* the top 16 bits of its far-table bucket's index */
};

_Static_assert(sizeof(struct far_pend) == 32, "far_pend grew");

static struct stub *stub_of_h(const struct hnode *n) {
    return (struct stub *)((char *)n - offsetof(struct stub, hnode));
}

static struct dq_str stub_id(const struct stub *f) {
    return (struct dq_str){f->id, (size_t)f->id_len1 + 1};
}

static uint64_t stub_ref(const struct stub *f) {
    uint64_t r = 0;
    for (int i = 5; i >= 0; i--) r = r << 8 | f->ref[i];
    return r;
}

static void stub_set_ref(struct stub *f, uint64_t r) {
    for (int i = 0; i < 6; i++, r >>= 8) f->ref[i] = (uint8_t)r;
}

struct stub *en_stub_new(struct engine *e, struct dq_str id, uint64_t ref) {
    struct stub *f = slab_alloc(&e->stubs, offsetof(struct stub, id) + id.len);
    if (!f) return NULL;
    f->id_len1 = (uint8_t)(id.len - 1);
    memcpy(f->id, id.p, id.len);
    stub_set_ref(f, ref);
    return f;
}

uint64_t en_stub_rehash(const struct hnode *n) {
    struct dq_str id = stub_id(stub_of_h(n));
    return htab_hash_bytes(id.p, id.len);
}

struct stub *en_stub_find(const struct topic *t, struct dq_str id,
                          uint64_t h) {
    for (struct hnode *n = htab_bucket(&t->far, h); n; n = n->next) {
        struct stub *f = stub_of_h(n);
        if ((size_t)f->id_len1 + 1 == id.len &&
            memcmp(f->id, id.p, id.len) == 0)
            return f;
    }
    return NULL;
}

void en_stub_remove(struct engine *e, struct topic *t, struct stub *f,
                    uint64_t h, bool tell) {
    htab_remove(&t->far, &f->hnode, h);
    t->st.jobs[DQ_DELAYED]--;
    e->st.jobs[DQ_DELAYED]--;
    e->count--;
    e->nfar--;
    if (tell && e->hooks.on_far_drop)
        e->hooks.on_far_drop(e->hooks.ud, stub_ref(f));
    slab_free(&e->stubs, f);
}

void en_stub_free_cb(void *ud, struct hnode *n) {
    slab_free(&((struct engine *)ud)->stubs, stub_of_h(n));
}

void en_stub_drop_cb(void *ud, struct hnode *n) {
    struct engine *e = ud;
    struct stub *f = stub_of_h(n);
    if (e->hooks.on_far_drop) e->hooks.on_far_drop(e->hooks.ud, stub_ref(f));
    slab_free(&e->stubs, f);
}

void en_far_queue_free(struct far_queue *q) {
    dq_free(q->p);
    dq_free(q->tmp);
    dq_free(q->ids);
    memset(q, 0, sizeof *q);
}

/* engine_restore_far in topic t (which exists), for an id of hash h. */
static int restore_far(struct engine *e, struct topic *t, struct dq_str id,
                       uint64_t h, uint64_t ref) {
    struct job *old = htab_count(&t->jobs) ? en_job_find(t, id, h) : NULL;
    if (old) en_job_remove(e, old, h); /* a reserved one too: the record wins */
    struct stub *f = htab_count(&t->far) ? en_stub_find(t, id, h) : NULL;
    if (f) { /* moved, or replaced by another far job */
        if (e->hooks.on_far_drop)
            e->hooks.on_far_drop(e->hooks.ud, stub_ref(f));
        stub_set_ref(f, ref);
        if (e->hooks.on_far_restore) e->hooks.on_far_restore(e->hooks.ud, ref);
        return 0;
    }
    f = en_stub_new(e, id, ref);
    if (!f) return ENGINE_ENOMEM;
    en_topic_use(e, t);
    htab_insert(&t->far, &f->hnode, h);
    e->nfar++;
    e->count++;
    t->st.jobs[DQ_DELAYED]++;
    e->st.jobs[DQ_DELAYED]++;
    if (e->hooks.on_far_restore) e->hooks.on_far_restore(e->hooks.ud, ref);
    return 0;
}

int engine_restore_far(struct engine *e, struct dq_str topic,
                       struct dq_str id, uint64_t ref) {
    assert(ref <= REF_MAX);
    struct topic *t = en_topic_get(e, topic);
    bool created = false;
    if (!t) {
        if (!(t = en_topic_create(e, topic))) return ENGINE_ENOMEM;
        created = true;
    }
    int rc = restore_far(e, t, id, htab_hash_bytes(id.p, id.len), ref);
    if (rc < 0 && created) en_topic_free(e, t);
    return rc;
}

/* Sorts the queue by bucket (two stable passes of a radix sort, so that
 * records of one id keep their order) and restores it in that order: the
 * far tables' buckets are then visited in memory order and the new stubs
 * lie in that order too, instead of one random cache and TLB miss after
 * another (100 million far jobs: a table of half a gigabyte). */
static int far_queue_run(struct engine *e) {
    struct far_queue *q = &e->farq;
    for (int pass = 0; pass < 2; pass++) {
        uint32_t at[256] = {0};
        struct far_pend *src = pass ? q->tmp : q->p;
        struct far_pend *dst = pass ? q->p : q->tmp;
        int shift = 8 * pass;
        for (uint32_t i = 0; i < q->n; i++) at[src[i].key >> shift & 0xff]++;
        uint32_t sum = 0;
        for (int k = 0; k < 256; k++) {
            uint32_t c = at[k];
            at[k] = sum;
            sum += c;
        }
        for (uint32_t i = 0; i < q->n; i++)
            dst[at[src[i].key >> shift & 0xff]++] = src[i];
    }
    int rc = 0;
    for (uint32_t i = 0; i < q->n && rc == 0; i++) {
        for (int d = 0; d < 3; d++) {
            uint32_t k = i + (uint32_t)(FARQ_AHEAD >> d);
            if (k < q->n) htab_prefetch(&q->p[k].t->far, q->p[k].h, d);
        }
        if (i + FARQ_AHEAD / 2 < q->n)
            __builtin_prefetch(q->ids + q->p[i + FARQ_AHEAD / 2].id_off);
        const struct far_pend *a = &q->p[i];
        rc = restore_far(e, a->t, (struct dq_str){q->ids + a->id_off, a->id_len},
                         a->h, a->ref);
    }
    q->n = 0;
    q->ids_len = 0;
    return rc;
}

/* Room for one more job of id length len; false if memory ran out. */
static bool far_queue_room(struct far_queue *q, size_t len) {
    if (q->n == q->cap) {
        uint32_t cap = q->cap ? 2 * q->cap : 1024;
        struct far_pend *p = dq_realloc(q->p, cap * sizeof *p);
        if (!p) return false;
        q->p = p;
        struct far_pend *tmp = dq_realloc(q->tmp, cap * sizeof *tmp);
        if (!tmp) return false;
        q->tmp = tmp;
        q->cap = cap;
    }
    if (q->ids_len + len > q->ids_cap) {
        size_t cap = q->ids_cap ? 2 * q->ids_cap : 16384;
        while (cap < q->ids_len + len) cap *= 2;
        char *ids = dq_realloc(q->ids, cap);
        if (!ids) return false;
        q->ids = ids;
        q->ids_cap = cap;
    }
    return true;
}

int engine_far_queue(struct engine *e, struct dq_str topic, struct dq_str id,
                     uint64_t ref) {
    assert(ref <= REF_MAX);
    struct far_queue *q = &e->farq;
    if (q->n == FARQ_MAX) {
        int rc = far_queue_run(e);
        if (rc < 0) return rc;
    }
    struct topic *t = en_topic_get(e, topic);
    if (!t || !far_queue_room(q, id.len)) {
        int rc = engine_far_flush(e);
        return rc < 0 ? rc : engine_restore_far(e, topic, id, ref);
    }
    en_topic_use(e, t); /* off the idle list: nothing frees it meanwhile */
    uint64_t h = htab_hash_bytes(id.p, id.len), mask = htab_mask(&t->far);
    int bits = mask ? 64 - __builtin_clzll(mask) : 0;
    struct far_pend *a = &q->p[q->n++];
    a->h = h;
    a->t = t;
    a->ref = ref;
    a->id_off = (uint32_t)q->ids_len;
    a->id_len = (uint16_t)id.len;
    a->key = (uint16_t)((h & mask) >> (bits > 16 ? bits - 16 : 0));
    memcpy(q->ids + q->ids_len, id.p, id.len);
    q->ids_len += id.len;
    return 0;
}

int engine_far_flush(struct engine *e) {
    return e->farq.n ? far_queue_run(e) : 0;
}

int engine_far_ref(const struct engine *e, struct dq_str topic,
                   struct dq_str id, uint64_t *ref) {
    const struct topic *t = en_topic_lookup(e, topic);
    if (!t || htab_count(&t->far) == 0) return 0;
    const struct stub *f = en_stub_find(t, id, htab_hash_bytes(id.p, id.len));
    if (!f) return 0;
    if (ref) *ref = stub_ref(f);
    return 1;
}

int engine_load(struct engine *e, int64_t now, const struct dq_job *src,
                uint64_t ref) {
    struct topic *t = en_topic_get(e, src->topic);
    if (!t || htab_count(&t->far) == 0) return 0;
    uint64_t h = htab_hash_bytes(src->id.p, src->id.len);
    struct stub *f = en_stub_find(t, src->id, h);
    if (!f || stub_ref(f) != ref) return 0;
    struct job *j =
        en_job_alloc(e, t, src->id, src->body, src->url, src->content_type);
    if (!j) return ENGINE_ENOMEM;
    en_stub_remove(e, t, f, h, false);
    en_job_options(j, src->due, src->created, src->ttr, src->retries,
                   src->attempts, &src->backoff);
    htab_insert(&t->jobs, &j->hnode, h);
    e->count++;
    /* through the wheel even if due already, so that it turns ready in
     * due-time order with the others at the next engine_advance */
    en_place(e, j, DQ_DELAYED, (int64_t)j->due);
    return 1;
}

int engine_far_move(struct engine *e, struct dq_str topic, struct dq_str id,
                    uint64_t from, uint64_t to) {
    struct topic *t = en_topic_get(e, topic);
    if (!t || htab_count(&t->far) == 0) return 0;
    struct stub *f = en_stub_find(t, id, htab_hash_bytes(id.p, id.len));
    if (!f || stub_ref(f) != from) return 0;
    stub_set_ref(f, to);
    return 1;
}

uint64_t engine_far_count(const struct engine *e) { return e->nfar; }

static void list_far_cb(void *ud, const struct hnode *n) {
    struct list_ctx *c = ud;
    c->work++;
    c->fn(c->ud, stub_id(stub_of_h(n)));
    c->found++;
}

uint64_t en_far_list(const struct topic *t, uint64_t cursor, uint32_t count,
                     uint64_t budget, struct list_ctx *c) {
    if (htab_count(&t->far) == 0) return 0;
    do {
        cursor = htab_scan(&t->far, cursor, 1, list_far_cb, c);
        c->work++;
    } while (cursor != 0 && c->found < count && c->work < budget);
    return cursor;
}

struct scan_far_ctx {
    void (*fn)(void *ud, struct dq_str id, uint64_t ref);
    void *ud;
};

static void scan_far_cb(void *ud, const struct hnode *n) {
    const struct scan_far_ctx *c = ud;
    const struct stub *f = stub_of_h(n);
    c->fn(c->ud, stub_id(f), stub_ref(f));
}

uint64_t engine_scan_far(const struct engine *e, struct dq_str topic,
                         uint32_t buckets, uint64_t cursor,
                         void (*fn)(void *ud, struct dq_str id, uint64_t ref),
                         void *ud) {
    const struct topic *t = en_topic_lookup(e, topic);
    if (!t || htab_count(&t->far) == 0) return 0;
    struct scan_far_ctx c = {fn, ud};
    return htab_scan(&t->far, cursor, buckets, scan_far_cb, &c);
}
