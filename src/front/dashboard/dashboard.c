/* dashboard.c -- the dashboard's assets and JSON views; see dashboard.h. */
#include "front/dashboard/dashboard.h"

#include <errno.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <sys/queue.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "core/metrics.h"
#include "front/http/http_json.h"
#include "lib/hist.h"
#include "lib/xalloc.h"

/* --- the embedded files (build/gen/front/dashboard/assets/, scripts/embed) */

#define ASSET(name)                                                          \
    extern const char asset_front_dashboard_assets_##name[];                 \
    extern const size_t asset_front_dashboard_assets_##name##_len;
ASSET(index_html)
ASSET(app_js)
ASSET(style_css)

#define A(name) asset_front_dashboard_assets_##name
static struct dash_asset assets[] = {
    {"/", "text/html; charset=utf-8", A(index_html), 0},
    {"/index.html", "text/html; charset=utf-8", A(index_html), 0},
    {"/dashboard/app.js", "text/javascript; charset=utf-8", A(app_js), 0},
    {"/dashboard/style.css", "text/css; charset=utf-8", A(style_css), 0},
};
#define NASSETS (sizeof assets / sizeof assets[0])

const struct dash_asset *dashboard_find(const char *path) {
    /* lengths are link-time constants, not compile-time: filled once */
    if (!assets[0].len) {
        assets[0].len = assets[1].len = A(index_html_len);
        assets[2].len = A(app_js_len);
        assets[3].len = A(style_css_len);
    }
    for (size_t i = 0; i < NASSETS; i++)
        if (strcmp(path, assets[i].path) == 0) return &assets[i];
    return NULL;
}

/* Jobs from which memory per job (RSS / jobs) is shown. */
#define DASH_PER_JOB_MIN 10000

/* --- GET /v1/server ---------------------------------------------------------- */

static void info_emit(void *ud, const char *name, const char *value) {
    json_object_set_new(ud, name, json_string(value));
}

/* Resident memory of this process in bytes, 0 when unknown. */
static uint64_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long size = 0, resident = 0;
    int n = fscanf(f, "%lu %lu", &size, &resident);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? (uint64_t)resident * (uint64_t)page : 0;
}

/* A histogram as {bounds, buckets (cumulative, +Inf last), count, sum}. */
static json_t *hist_json(const struct hist *h) {
    json_t *bounds = json_array(), *buckets = json_array();
    for (int i = 0; i < h->nbounds; i++) {
        json_array_append_new(bounds, json_real(h->bounds[i]));
        json_array_append_new(buckets, json_integer((json_int_t)hist_le(h, i)));
    }
    json_array_append_new(buckets, json_integer((json_int_t)h->count));
    return json_pack("{so so sI sf}", "bounds", bounds, "buckets", buckets,
                     "count", (json_int_t)h->count, "sum", h->sum);
}

void *dashboard_server_json(struct core *c, const struct dq_stats *total,
                            const struct dash_server *ds) {
    json_t *info = json_object();
    core_store_info(c, info_emit, info);
    uint64_t jobs = 0;
    for (int i = 0; i < DQ_NSTATES; i++) jobs += total->jobs[i];
    uint64_t rss = rss_bytes();
    /* below that, the process's fixed cost would dominate the quotient */
    json_t *per_job = jobs >= DASH_PER_JOB_MIN && rss
                          ? json_real((double)rss / (double)jobs)
                          : json_null();
    int64_t uptime = (ds->now - ds->started) / 1000;
    return json_pack(
        "{ss ss sI sI s{ss sb so} sI sI sI so so so so}",
        "version", ds->version,
        "dashboard", ds->mode,
        "now", (json_int_t)ds->now,
        "uptime_s", (json_int_t)(uptime > 0 ? uptime : 0),
        "store", "name", core_store_name(c), "up", core_store_up(c) != 0,
        "info", info,
        "clients", (json_int_t)ds->clients,
        "blocked", (json_int_t)core_blocked(c),
        "rss_bytes", (json_int_t)rss,
        "memory_per_job", per_job,
        "jobs", hj_stats(total, HJ_STATS_JOBS),
        "totals", hj_stats(total, HJ_STATS_COUNTERS),
        "fire_lag", hist_json(metrics_fire_lag_all(core_metrics(c))));
}

/* --- GET /v1/overview -------------------------------------------------------- */

static const char *const sort_names[] = {"ready", "delayed", "reserved",
                                         "dead",  "total",   "name"};

static bool parse_u64(const char *v, uint64_t max, uint64_t *out) {
    if (!*v || *v == '-' || *v == '+') return false;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || *end || n > max) return false;
    *out = n;
    return true;
}

static int set_str(char *dst, size_t cap, const char *v, const char *name,
                   char *err, size_t errlen) {
    size_t n = strlen(v);
    if (n >= cap) {
        snprintf(err, errlen, "%s: longer than %zu bytes", name, cap - 1);
        return -1;
    }
    memcpy(dst, v, n + 1);
    return 0;
}

static int query_param(struct dash_query *q, const char *k, const char *v,
                       char *err, size_t errlen) {
    uint64_t n;
    if (strcmp(k, "sort") == 0) {
        for (int i = 0; i < (int)(sizeof sort_names / sizeof sort_names[0]); i++)
            if (strcmp(v, sort_names[i]) == 0) {
                q->sort = i;
                return 0;
            }
        snprintf(err, errlen, "sort: expected ready, delayed, reserved, dead, "
                 "total or name, got '%.40s'", v);
        return -1;
    }
    if (strcmp(k, "limit") == 0) {
        if (!parse_u64(v, 1000, &n) || n == 0) {
            snprintf(err, errlen, "limit: expected 1..1000, got '%.40s'", v);
            return -1;
        }
        q->limit = (uint32_t)n;
        return 0;
    }
    if (strcmp(k, "offset") == 0) {
        if (!parse_u64(v, UINT32_MAX, &n)) {
            snprintf(err, errlen, "offset: expected a count, got '%.40s'", v);
            return -1;
        }
        q->offset = n;
        return 0;
    }
    if (strcmp(k, "match") == 0)
        return set_str(q->match, sizeof q->match, v, k, err, errlen);
    if (strcmp(k, "topic") == 0)
        return set_str(q->topic, sizeof q->topic, v, k, err, errlen);
    snprintf(err, errlen, "unknown parameter '%.40s' (expected sort, limit, "
             "offset, match, topic)", k);
    return -1;
}

int dashboard_query(struct dash_query *q, const char *query, char *err,
                    size_t errlen) {
    memset(q, 0, sizeof *q);
    q->sort = DASH_SORT_READY;
    q->limit = 50;
    if (!query || !*query) return 0;
    struct evkeyvalq kv;
    TAILQ_INIT(&kv);
    if (evhttp_parse_query_str(query, &kv) != 0) {
        snprintf(err, errlen, "malformed query string");
        return -1;
    }
    int rc = 0;
    for (struct evkeyval *e = kv.tqh_first; e && rc == 0; e = e->next.tqe_next)
        rc = query_param(q, e->key, e->value, err, errlen);
    evhttp_clear_headers(&kv);
    return rc;
}

static uint64_t topic_total(const struct dq_stats *st) {
    uint64_t n = 0;
    for (int i = 0; i < DQ_NSTATES; i++) n += st->jobs[i];
    return n;
}

static int sort_key; /* qsort has no context argument */

static uint64_t sort_value(const struct core_topic_stats *t) {
    switch (sort_key) {
    case DASH_SORT_READY: return t->stats.jobs[DQ_READY];
    case DASH_SORT_DELAYED: return t->stats.jobs[DQ_DELAYED];
    case DASH_SORT_RESERVED: return t->stats.jobs[DQ_RESERVED];
    case DASH_SORT_DEAD: return t->stats.jobs[DQ_DEAD];
    case DASH_SORT_TOTAL: return topic_total(&t->stats);
    default: return 0;
    }
}

static int by_name(const struct core_topic_stats *a,
                   const struct core_topic_stats *b) {
    size_t n = a->topic.len < b->topic.len ? a->topic.len : b->topic.len;
    int c = memcmp(a->topic.p, b->topic.p, n);
    return c ? c : (a->topic.len > b->topic.len) - (a->topic.len < b->topic.len);
}

/* Largest first, then by name, so a page is stable between polls. */
static int compare(const void *pa, const void *pb) {
    const struct core_topic_stats *a = *(const struct core_topic_stats *const *)pa;
    const struct core_topic_stats *b = *(const struct core_topic_stats *const *)pb;
    uint64_t va = sort_value(a), vb = sort_value(b);
    if (va != vb) return va < vb ? 1 : -1;
    return by_name(a, b);
}

static bool contains(struct dq_str s, const char *sub, size_t sublen) {
    if (sublen > s.len) return false;
    for (size_t i = 0; i + sublen <= s.len; i++)
        if (memcmp(s.p + i, sub, sublen) == 0) return true;
    return false;
}

static json_t *topic_json(const struct core_topic_stats *t) {
    const struct dq_stats *st = &t->stats;
    return json_pack("{ss# so sI so so}", "topic", t->topic.p, (int)t->topic.len,
                     "jobs", hj_stats(st, HJ_STATS_JOBS),
                     "total", (json_int_t)topic_total(st),
                     "counters", hj_stats(st, HJ_STATS_COUNTERS), "oldest_ready",
                     st->oldest_ready ? json_integer(st->oldest_ready) : json_null());
}

void *dashboard_overview_json(const struct core_snapshot *s,
                              const struct dash_query *q, int64_t now) {
    const struct core_topic_stats **sel =
        xmalloc((s->ntopics + 1) * sizeof *sel);
    size_t n = 0, mlen = strlen(q->match), tlen = strlen(q->topic);
    for (size_t i = 0; i < s->ntopics; i++) {
        const struct core_topic_stats *t = &s->topics[i];
        if (tlen && (t->topic.len != tlen || memcmp(t->topic.p, q->topic, tlen)))
            continue;
        if (mlen && !contains(t->topic, q->match, mlen)) continue;
        sel[n++] = t;
    }
    sort_key = q->sort;
    qsort(sel, n, sizeof *sel, compare);
    json_t *topics = json_array();
    for (uint64_t i = q->offset; i < n && i < q->offset + q->limit; i++)
        json_array_append_new(topics, topic_json(sel[i]));
    dq_free(sel);
    return json_pack("{sI sI sI so}", "now", (json_int_t)now, "ntopics",
                     (json_int_t)s->ntopics, "matched", (json_int_t)n,
                     "topics", topics);
}
