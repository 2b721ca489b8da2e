/* snapshot.c -- what the store holds, gathered at once for /metrics, INFO
 * and the dashboard: the topics, then every topic's STATS in parallel, then
 * the totals. The store's own calls are used (not core_stats), so a scrape
 * does not show up as commands in the metrics it reports.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core_int.h"
#include "lib/xalloc.h"

struct snap {
    struct core *core;
    core_snapshot_cb *cb;
    void *pd;
    struct core_topic_stats *topics;
    char *names;
    size_t ntopics;
    size_t pending;   /* stats calls not answered yet */
    int status;       /* the first error */
    struct dq_stats total;
};

/* Picks the store's gauges and histograms out of its INFO lines. */
static void gauge_emit(void *ud, const char *name, const char *value) {
    struct core_snapshot *out = ud;
    if (strcmp(name, "log_bytes") == 0) out->log_bytes = atoll(value);
    for (int i = 0; i < CORE_STORE_GAUGES; i++)
        if (strcmp(name, metrics_store_gauges[i].info) == 0)
            out->gauges[i] = atoll(value);
    for (int i = 0; i < CORE_STORE_HISTS; i++)
        metrics_store_hist_line(&metrics_store_hists[i], name, value,
                                &out->hists[i], out->hist_bounds[i]);
}

static void finish(struct snap *s) {
    struct core_snapshot out = {
        .status = s->status,
        .topics = s->topics,
        .ntopics = s->status == DQ_OK ? s->ntopics : 0,
        .total = s->total,
        .log_bytes = -1,
    };
    for (int i = 0; i < CORE_STORE_GAUGES; i++) out.gauges[i] = -1;
    core_store_info(s->core, gauge_emit, &out);
    s->cb(s->pd, &out);
    dq_free(s->topics);
    dq_free(s->names);
    dq_free(s);
}

/* One of the parallel STATS calls: where its answer goes. */
struct slot {
    struct snap *s;
    struct dq_stats *dst;
};

static void on_stats(void *pd, const struct dq_result *res) {
    struct slot *sl = pd;
    struct snap *s = sl->s;
    core_note_store(s->core, res->status);
    if (res->status != DQ_OK) {
        if (s->status == DQ_OK) s->status = res->status;
    } else {
        *sl->dst = *res->stats;
    }
    dq_free(sl);
    if (--s->pending == 0) finish(s);
}

static void ask(struct snap *s, struct dq_str topic, struct dq_stats *dst) {
    struct slot *sl = xmalloc(sizeof *sl);
    sl->s = s;
    sl->dst = dst;
    s->core->ops->stats(s->core->store, topic, on_stats, sl);
}

static void on_topics(void *pd, const struct dq_result *res) {
    struct snap *s = pd;
    core_note_store(s->core, res->status);
    if (res->status != DQ_OK) {
        s->status = res->status;
        finish(s);
        return;
    }
    size_t bytes = 0;
    for (size_t i = 0; i < res->nstrs; i++) bytes += res->strs[i].len;
    s->ntopics = res->nstrs;
    s->topics = xcalloc(res->nstrs + 1, sizeof *s->topics);
    s->names = xmalloc(bytes + 1);
    char *p = s->names;
    for (size_t i = 0; i < res->nstrs; i++) {
        memcpy(p, res->strs[i].p, res->strs[i].len);
        s->topics[i].topic = (struct dq_str){p, res->strs[i].len};
        p += res->strs[i].len;
    }
    /* +1 for the totals; the counter is set first since a store may
     * complete inside the call */
    s->pending = s->ntopics + 1 + 1;
    for (size_t i = 0; i < s->ntopics; i++)
        ask(s, s->topics[i].topic, &s->topics[i].stats);
    ask(s, (struct dq_str){"", 0}, &s->total);
    if (--s->pending == 0) finish(s);
}

void core_snapshot(struct core *c, core_snapshot_cb *cb, void *pd) {
    struct snap *s = xcalloc(1, sizeof *s);
    s->core = c;
    s->cb = cb;
    s->pd = pd;
    c->ops->topics(c->store, on_topics, s);
}
