/* engine_load.c -- the engine's side of recovery and snapshots: the hints
 * that size its tables before a replay (engine_expect*), the jobs a replay
 * restores (engine_restore) and the counters it sets, and the walk over
 * every job that a snapshot writes (engine_foreach). engine.c keeps topics,
 * jobs and the state machine; engine_int.h shares what they use. */
#include <assert.h>
#include <stddef.h>

#include "engine/engine_int.h"
#include "lib/htab.h"
#include "lib/slab.h"

/* --- before a replay: how many jobs and far jobs each topic will get ------ */

void engine_expect(struct engine *e, struct dq_str topic) {
    struct topic *t = en_topic_hint(e, topic);
    if (t) t->expect++; /* only a hint: none if memory ran out */
}

static void expect_cb(void *ud, struct hnode *n) {
    struct topic *t = en_topic_of_h(n);
    if (t->expect) htab_reserve(&t->jobs, htab_count(&t->jobs) + t->expect);
    /* far tables at two per bucket, as they grow while serving: their
     * buckets are a fifth of a far job's memory */
    if (t->expect_far)
        htab_reserve(&t->far, (htab_count(&t->far) + t->expect_far + 1) / 2);
    t->expect = t->expect_far = 0;
}

void engine_expect_far(struct engine *e, struct dq_str topic,
                       struct dq_str id) {
    struct topic *t = en_topic_hint(e, topic);
    if (!t) return; /* only a hint */
    t->expect_far++;
    e->expect_stubs += (offsetof(struct stub, id) + id.len + 7) & ~(size_t)7;
}

void engine_expect_done(struct engine *e) {
    htab_foreach(&e->topics, expect_cb, NULL);
    if (e->expect_stubs >= STUBS_AHEAD_MIN)
        slab_reserve(&e->stubs, e->expect_stubs);
    e->expect_stubs = 0;
}

int engine_expect_end(struct engine *e) {
    int rc = engine_far_flush(e);
    en_far_queue_free(&e->farq);
    slab_reserve_end(&e->stubs);
    return rc;
}

/* --- the replay, the counters, the snapshot's walk ------------------------ */

int engine_restore(struct engine *e, int64_t now, const struct dq_job *src) {
    assert(src->state >= DQ_DELAYED && src->state <= DQ_DEAD);
    if (src->body.len > BODY_MAX) return ENGINE_ENOMEM;
    struct topic *t = en_topic_get(e, src->topic);
    uint64_t h = htab_hash_bytes(src->id.p, src->id.len);
    if (t && (en_job_find(t, src->id, h) || en_stub_find(t, src->id, h)))
        return ENGINE_EEXISTS;
    bool created = false;
    if (!t) {
        if (!(t = en_topic_create(e, src->topic))) return ENGINE_ENOMEM;
        created = true;
    }
    struct job *j =
        en_job_alloc(e, t, src->id, src->body, src->url, src->content_type);
    if (!j) {
        if (created) en_topic_free(e, t);
        return ENGINE_ENOMEM;
    }
    en_job_options(j, src->due, src->created, src->ttr, src->retries,
                   src->attempts, &src->backoff);
    en_topic_use(e, t);
    htab_insert(&t->jobs, &j->hnode, h);
    e->count++;
    int64_t when = src->state == DQ_RESERVED ? en_clamp_time(src->deadline)
                                             : (int64_t)j->due;
    en_place(e, j, src->state, when);
    return 0;
}

struct foreach_ctx {
    void (*fn)(void *ud, const struct dq_job *j);
    void *ud;
};

static void foreach_job_cb(void *ud, struct hnode *n) {
    const struct foreach_ctx *c = ud;
    struct dq_job v;
    en_view(en_job_of_h(n), &v);
    c->fn(c->ud, &v);
}

static void foreach_topic_cb(void *ud, struct hnode *n) {
    htab_foreach(&en_topic_of_h(n)->jobs, foreach_job_cb, ud);
}

void engine_foreach(const struct engine *e,
                    void (*fn)(void *ud, const struct dq_job *j), void *ud) {
    struct foreach_ctx c = {fn, ud};
    htab_foreach(&e->topics, foreach_topic_cb, &c);
}

void engine_set_counters(struct engine *e, const struct dq_stats *totals) {
    e->st.added = totals->added;
    e->st.reserved = totals->reserved;
    e->st.acked = totals->acked;
    e->st.nacked = totals->nacked;
    e->st.expired = totals->expired;
    e->st.dead = totals->dead;
    e->st.deleted = totals->deleted;
    e->st.kicked = totals->kicked;
}
