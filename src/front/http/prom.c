/* prom.c -- the metrics table in the Prometheus text format 0.0.4. */
#include <inttypes.h>
#include <stdio.h>

#include "core/metrics.h"
#include "front/http/http_int.h"

static void p_family(void *ud, const char *name, const char *type,
                     const char *help) {
    buf_appendf(ud, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void p_value(void *ud, const char *name, const char *labels, double v) {
    if (*labels) buf_appendf(ud, "%s{%s} %.15g\n", name, labels, v);
    else buf_appendf(ud, "%s %.15g\n", name, v);
}

static void p_hist(void *ud, const char *name, const char *labels,
                   const struct hist *h) {
    const char *sep = *labels ? "," : "";
    for (int i = 0; i < h->nbounds; i++)
        buf_appendf(ud, "%s_bucket{%s%sle=\"%.6g\"} %" PRIu64 "\n", name,
                    labels, sep, h->bounds[i], hist_le(h, i));
    buf_appendf(ud, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels,
                sep, h->count);
    if (*labels) {
        buf_appendf(ud, "%s_sum{%s} %.15g\n", name, labels, h->sum);
        buf_appendf(ud, "%s_count{%s} %" PRIu64 "\n", name, labels, h->count);
    } else {
        buf_appendf(ud, "%s_sum %.15g\n", name, h->sum);
        buf_appendf(ud, "%s_count %" PRIu64 "\n", name, h->count);
    }
}

void prom_render(struct buf *out, const struct metrics *m,
                 const struct core_snapshot *s) {
    struct metrics_visitor v = {p_family, p_value, p_hist, out};
    metrics_visit(m, &v);
    if (s->status == DQ_OK) metrics_visit_store(m, s, &v);
}
