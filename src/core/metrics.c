/* metrics.c -- the metrics table; see metrics.h. */
#include "core/metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "lib/htab.h"
#include "lib/xalloc.h"

#define MAX_TOPICS_DEFAULT 1000

/* Seconds. Commands take microseconds to milliseconds; fire lag is a
 * fraction of a millisecond when all is well. */
static const double cmd_bounds[] = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025,   0.05,   0.1,     0.25,   0.5,   1,      2.5,   5};
static const double lag_bounds[] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,     2.5,   5,    10};
/* A push takes a fraction of a millisecond on loopback, up to its
 * timeout (--push-timeout, 30 s by default) at worst. */
static const double push_bounds[] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,     2.5,    5,     10, 30};
#define NB(a) ((int)(sizeof a / sizeof a[0]))

static const char *const cmd_names[M_NCMDS] = {
    "add",   "del",  "get",  "reserve", "ack",   "nack",
    "touch", "kick", "list", "purge",   "stats", "topics"};

/* Push delivery (§9) of one topic, or of several. */
struct push_m {
    struct hist dur;
    uint64_t pushed, failed;
    int64_t inflight;
};

struct topic_m {
    struct hnode hn;
    uint64_t hash;
    struct hist lag;
    struct push_m push;
    size_t len;
    char name[];
};

struct metrics {
    struct hist cmd[M_NCMDS];
    uint64_t cmd_errors[M_NCMDS];
    struct htab topics; /* struct topic_m */
    uint32_t ntopics, max_topics;
    struct hist lag_other; /* topics past max_topics */
    struct hist lag_all;
    struct push_m push_other, push_all;
    int64_t clients;
    int64_t (*blocked)(void *ud);
    int64_t (*store_up)(void *ud);
    void *gauge_ud;
};

static uint64_t topic_hash(const struct hnode *n) {
    return ((const struct topic_m *)n)->hash;
}

struct metrics *metrics_new(uint32_t max_topics) {
    struct metrics *m = xcalloc(1, sizeof *m);
    for (int i = 0; i < M_NCMDS; i++)
        hist_init(&m->cmd[i], cmd_bounds, NB(cmd_bounds));
    hist_init(&m->lag_other, lag_bounds, NB(lag_bounds));
    hist_init(&m->lag_all, lag_bounds, NB(lag_bounds));
    hist_init(&m->push_other.dur, push_bounds, NB(push_bounds));
    hist_init(&m->push_all.dur, push_bounds, NB(push_bounds));
    htab_init(&m->topics, 16, topic_hash);
    m->max_topics = max_topics ? max_topics : MAX_TOPICS_DEFAULT;
    return m;
}

static void free_topic(void *ud, struct hnode *n) { dq_free(n); }

void metrics_free(struct metrics *m) {
    if (!m) return;
    htab_foreach(&m->topics, free_topic, NULL);
    htab_destroy(&m->topics);
    dq_free(m);
}

const char *metrics_cmd_name(int cmd) {
    return cmd >= 0 && cmd < M_NCMDS ? cmd_names[cmd] : "unknown";
}

void metrics_command(struct metrics *m, int cmd, int64_t usec, int status) {
    hist_observe(&m->cmd[cmd], (double)usec / 1e6);
    if (status != 0) m->cmd_errors[cmd]++;
}

static struct topic_m *topic_find(const struct metrics *m, struct dq_str t) {
    uint64_t h = htab_hash_bytes(t.p, t.len);
    for (struct hnode *n = htab_bucket(&m->topics, h); n; n = n->next) {
        struct topic_m *tm = (struct topic_m *)n;
        if (tm->hash == h && tm->len == t.len && memcmp(tm->name, t.p, t.len) == 0)
            return tm;
    }
    return NULL;
}

/* The series of topic t, created while there is room; NULL = "_other". */
static struct topic_m *topic_series(struct metrics *m, struct dq_str t) {
    struct topic_m *tm = topic_find(m, t);
    if (tm || m->ntopics >= m->max_topics) return tm;
    tm = xcalloc(1, sizeof *tm + t.len + 1);
    tm->hash = htab_hash_bytes(t.p, t.len);
    tm->len = t.len;
    memcpy(tm->name, t.p, t.len);
    hist_init(&tm->lag, lag_bounds, NB(lag_bounds));
    hist_init(&tm->push.dur, push_bounds, NB(push_bounds));
    htab_insert(&m->topics, &tm->hn, tm->hash);
    m->ntopics++;
    return tm;
}

void metrics_fire_lag(struct metrics *m, struct dq_str topic, int64_t lag_us) {
    double s = lag_us > 0 ? (double)lag_us / 1e6 : 0;
    struct topic_m *tm = topic_series(m, topic);
    hist_observe(tm ? &tm->lag : &m->lag_other, s);
    hist_observe(&m->lag_all, s);
}

static struct push_m *push_of(struct metrics *m, struct dq_str topic) {
    struct topic_m *tm = topic_series(m, topic);
    return tm ? &tm->push : &m->push_other;
}

void metrics_push_begin(struct metrics *m, struct dq_str topic) {
    push_of(m, topic)->inflight++;
    m->push_all.inflight++;
}

void metrics_push_end(struct metrics *m, struct dq_str topic, int64_t usec,
                      int outcome) {
    struct push_m *pm[2] = {push_of(m, topic), &m->push_all};
    for (int i = 0; i < 2; i++) {
        pm[i]->inflight--;
        hist_observe(&pm[i]->dur, (double)usec / 1e6);
        if (outcome == METRICS_PUSHED) pm[i]->pushed++;
        if (outcome == METRICS_PUSH_FAILED) pm[i]->failed++;
    }
}

void metrics_push_counts(const struct metrics *m, struct dq_str topic,
                         uint64_t *pushed, uint64_t *failed) {
    const struct push_m *p = &m->push_all;
    if (topic.len) {
        const struct topic_m *tm = topic_find(m, topic);
        p = tm ? &tm->push : NULL;
    }
    *pushed = p ? p->pushed : 0;
    *failed = p ? p->failed : 0;
}

void metrics_push_totals(const struct metrics *m, struct metrics_push *out) {
    out->pushed = m->push_all.pushed;
    out->failed = m->push_all.failed;
    out->inflight = m->push_all.inflight;
    out->duration = &m->push_all.dur;
}

void metrics_clients(struct metrics *m, int delta) { m->clients += delta; }
int64_t metrics_clients_now(const struct metrics *m) { return m->clients; }

void metrics_set_gauge_fn(struct metrics *m, int64_t (*blocked)(void *ud),
                          int64_t (*store_up)(void *ud), void *ud) {
    m->blocked = blocked;
    m->store_up = store_up;
    m->gauge_ud = ud;
}

const struct hist *metrics_fire_lag_all(const struct metrics *m) {
    return &m->lag_all;
}

/* --- the table of families ------------------------------------------------ */

struct family {
    const char *name, *type, *help;
    void (*emit)(const struct metrics *m, const struct family *f,
                 const struct metrics_visitor *v);
};

static void emit_cmd_duration(const struct metrics *m, const struct family *f,
                              const struct metrics_visitor *v) {
    char labels[64];
    for (int i = 0; i < M_NCMDS; i++) {
        snprintf(labels, sizeof labels, "command=\"%s\"", cmd_names[i]);
        v->hist(v->ud, f->name, labels, &m->cmd[i]);
    }
}

static void emit_cmd_errors(const struct metrics *m, const struct family *f,
                            const struct metrics_visitor *v) {
    char labels[64];
    for (int i = 0; i < M_NCMDS; i++) {
        snprintf(labels, sizeof labels, "command=\"%s\"", cmd_names[i]);
        v->value(v->ud, f->name, labels, (double)m->cmd_errors[i]);
    }
}

struct lag_ctx {
    const struct family *f;
    const struct metrics_visitor *v;
};

static void emit_topic_lag(void *ud, struct hnode *n) {
    struct lag_ctx *lc = ud;
    struct topic_m *tm = (struct topic_m *)n;
    char labels[DQ_TOPIC_MAX + 16];
    snprintf(labels, sizeof labels, "topic=\"%s\"", tm->name);
    lc->v->hist(lc->v->ud, lc->f->name, labels, &tm->lag);
}

static void emit_fire_lag(const struct metrics *m, const struct family *f,
                          const struct metrics_visitor *v) {
    struct lag_ctx lc = {f, v};
    htab_foreach(&m->topics, emit_topic_lag, &lc);
    if (m->lag_other.count) v->hist(v->ud, f->name, "topic=\"_other\"", &m->lag_other);
}

/* One topic's sample of the push family lc->f. */
static void emit_push_series(const struct lag_ctx *lc, const char *topic,
                             const struct push_m *p) {
    char labels[DQ_TOPIC_MAX + 40];
    const char *fam = lc->f->name;
    if (strcmp(fam, "delayq_push_duration_seconds") == 0) {
        snprintf(labels, sizeof labels, "topic=\"%s\"", topic);
        lc->v->hist(lc->v->ud, fam, labels, &p->dur);
    } else {
        snprintf(labels, sizeof labels, "topic=\"%s\"", topic);
        lc->v->value(lc->v->ud, fam, labels, (double)p->inflight);
    }
}

/* Topics that never pushed are left out of the push families. */
static void emit_topic_push(void *ud, struct hnode *n) {
    struct topic_m *tm = (struct topic_m *)n;
    if (tm->push.dur.count || tm->push.inflight)
        emit_push_series(ud, tm->name, &tm->push);
}

static void emit_push(const struct metrics *m, const struct family *f,
                      const struct metrics_visitor *v) {
    struct lag_ctx lc = {f, v};
    htab_foreach(&m->topics, emit_topic_push, &lc);
    if (m->push_other.dur.count || m->push_other.inflight)
        emit_push_series(&lc, "_other", &m->push_other);
}

static void emit_clients(const struct metrics *m, const struct family *f,
                         const struct metrics_visitor *v) {
    v->value(v->ud, f->name, "", (double)m->clients);
}

static void emit_blocked(const struct metrics *m, const struct family *f,
                         const struct metrics_visitor *v) {
    v->value(v->ud, f->name, "", m->blocked ? (double)m->blocked(m->gauge_ud) : 0);
}

static void emit_store_up(const struct metrics *m, const struct family *f,
                          const struct metrics_visitor *v) {
    v->value(v->ud, f->name, "", m->store_up ? (double)m->store_up(m->gauge_ud) : 1);
}

static const struct family families[] = {
    {"delayq_fire_lag_seconds", "histogram",
     "How late jobs were handed to a consumer or pushed, after their due time",
     emit_fire_lag},
    {"delayq_command_duration_seconds", "histogram",
     "Time from a command's arrival in the core to its completion", emit_cmd_duration},
    {"delayq_command_errors_total", "counter",
     "Commands that completed with an error", emit_cmd_errors},
    {"delayq_connected_clients", "gauge", "Clients connected (RESP and HTTP)",
     emit_clients},
    {"delayq_blocked_clients", "gauge", "Clients waiting in RESERVE", emit_blocked},
    {"delayq_store_up", "gauge", "1 when the store answers, else 0", emit_store_up},
    {"delayq_push_duration_seconds", "histogram",
     "Time from a push's start to the receiver's answer (or its failure)",
     emit_push},
    {"delayq_push_inflight", "gauge", "Pushes waiting for their receiver",
     emit_push},
};

void metrics_visit(const struct metrics *m, const struct metrics_visitor *v) {
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        const struct family *f = &families[i];
        v->family(v->ud, f->name, f->type, f->help);
        f->emit(m, f, v);
    }
}

/* --- the store's families ------------------------------------------------- */

static const char *const event_names[] = {
    "added", "reserved", "acked", "nacked", "expired", "dead", "deleted",
    "kicked"};

static void stats_add(struct dq_stats *to, const struct dq_stats *s) {
    for (int i = 0; i < DQ_NSTATES; i++) to->jobs[i] += s->jobs[i];
    to->added += s->added;
    to->reserved += s->reserved;
    to->acked += s->acked;
    to->nacked += s->nacked;
    to->expired += s->expired;
    to->dead += s->dead;
    to->deleted += s->deleted;
    to->kicked += s->kicked;
}

static void stats_events(const struct dq_stats *s, uint64_t ev[8]) {
    const uint64_t v[8] = {s->added,   s->reserved, s->acked,   s->nacked,
                           s->expired, s->dead,     s->deleted, s->kicked};
    memcpy(ev, v, sizeof v);
}

static void emit_topic_jobs(const struct metrics_visitor *v, const char *topic,
                            size_t tlen, const struct dq_stats *s) {
    char labels[DQ_TOPIC_MAX + 64];
    for (int st = 0; st < DQ_NSTATES; st++) {
        snprintf(labels, sizeof labels, "topic=\"%.*s\",state=\"%s\"",
                 (int)tlen, topic, dq_state_name(st));
        v->value(v->ud, "delayq_jobs", labels, (double)s->jobs[st]);
    }
}

/* The store's events of a topic, then the pusher's (pushed, push_failed:
 * since this server started; p NULL = none). */
static void emit_topic_events(const struct metrics_visitor *v,
                              const char *topic, size_t tlen,
                              const struct dq_stats *s,
                              const struct push_m *p) {
    char labels[DQ_TOPIC_MAX + 64];
    uint64_t ev[10];
    stats_events(s, ev);
    ev[8] = p ? p->pushed : 0;
    ev[9] = p ? p->failed : 0;
    static const char *const push_names[] = {"pushed", "push_failed"};
    for (int e = 0; e < 10; e++) {
        snprintf(labels, sizeof labels, "topic=\"%.*s\",event=\"%s\"",
                 (int)tlen, topic, e < 8 ? event_names[e] : push_names[e - 8]);
        v->value(v->ud, "delayq_jobs_total", labels, (double)ev[e]);
    }
}

const struct store_gauge metrics_store_gauges[CORE_STORE_GAUGES] = {
    {"jobs_in_ram", "delayq_jobs_in_ram", "Jobs held whole in memory"},
    {"jobs_on_disk", "delayq_jobs_on_disk",
     "Far jobs kept in segment files, only their id in memory"},
    {"far_segments", "delayq_far_segments", "Far segment files"},
    {"far_segment_bytes", "delayq_far_segment_bytes", "Bytes of far segment files"},
    {"far_segments_loading", "delayq_far_segments_loading",
     "Far segments being loaded into memory now"},
    {"far_loading_bytes_left", "delayq_far_loading_bytes_left",
     "Bytes of the segments being loaded still to read"},
    {"far_records_loaded", "delayq_far_records_loaded_total",
     "Far jobs loaded into memory since start"},
    {"far_damaged_places", "delayq_far_damaged_places",
     "Damaged places the background check found in far segments (--repair)"},
};

const struct store_gauge metrics_store_hists[CORE_STORE_HISTS] = {
    {"log_fsync_seconds", "delayq_fsync_duration_seconds",
     "How long the log's fdatasyncs took (the ones that make commits durable)"},
};

/* "le=count,...,+Inf=count" into h: false if malformed. */
static bool parse_buckets(const char *v, struct hist *h, double *bounds) {
    uint64_t prev = 0;
    int nb = 0;
    for (;;) {
        char *end;
        bool inf = strncmp(v, "+Inf=", 5) == 0;
        double le = 0;
        if (inf) end = (char *)v + 4;
        else le = strtod(v, &end);
        if (end == v || *end != '=' || !isfinite(le)) return false;
        if (!inf && (nb == HIST_MAX_BOUNDS || (nb && le <= bounds[nb - 1])))
            return false;
        v = end + 1;
        if (*v < '0' || *v > '9') return false;
        uint64_t cum = strtoull(v, &end, 10);
        if (cum < prev || (*end != ',' && *end != '\0')) return false;
        if (inf) {
            if (*end) return false;
            h->counts[nb] = cum - prev;
            h->count = cum;
            h->nbounds = nb;
            return true;
        }
        bounds[nb] = le;
        h->counts[nb++] = cum - prev;
        prev = cum;
        if (!*end) return false; /* no +Inf */
        v = end + 1;
    }
}

void metrics_store_hist_line(const struct store_gauge *g, const char *name,
                             const char *value, struct hist *h,
                             double *bounds) {
    size_t n = strlen(g->info);
    if (strncmp(name, g->info, n) != 0) return;
    if (strcmp(name + n, "_sum") == 0) {
        h->sum = strtod(value, NULL);
    } else if (strcmp(name + n, "_buckets") == 0) {
        double sum = h->sum;
        hist_init(h, bounds, 0);
        h->sum = sum;
        if (!parse_buckets(value, h, bounds)) h->nbounds = 0;
        h->bounds = bounds;
    }
}

void metrics_visit_store(const struct metrics *m,
                         const struct core_snapshot *s,
                         const struct metrics_visitor *v) {
    size_t own = s->ntopics < m->max_topics ? s->ntopics : m->max_topics;
    struct dq_stats other = {0};
    for (size_t i = own; i < s->ntopics; i++) stats_add(&other, &s->topics[i].stats);
    v->family(v->ud, "delayq_jobs", "gauge", "Jobs held now, per topic and state");
    for (size_t i = 0; i < own; i++)
        emit_topic_jobs(v, s->topics[i].topic.p, s->topics[i].topic.len,
                        &s->topics[i].stats);
    if (own < s->ntopics) emit_topic_jobs(v, "_other", 6, &other);
    v->family(v->ud, "delayq_jobs_total", "counter",
              "Job events since the store began, per topic");
    for (size_t i = 0; i < own; i++) {
        const struct topic_m *tm = topic_find(m, s->topics[i].topic);
        emit_topic_events(v, s->topics[i].topic.p, s->topics[i].topic.len,
                          &s->topics[i].stats, tm ? &tm->push : NULL);
    }
    if (own < s->ntopics)
        emit_topic_events(v, "_other", 6, &other, &m->push_other);
    if (s->log_bytes >= 0) {
        v->family(v->ud, "delayq_log_bytes", "gauge",
                  "Bytes in the embedded store's append-only log");
        v->value(v->ud, "delayq_log_bytes", "", (double)s->log_bytes);
    }
    for (int i = 0; i < CORE_STORE_GAUGES; i++) {
        const struct store_gauge *g = &metrics_store_gauges[i];
        if (s->gauges[i] < 0) continue;
        v->family(v->ud, g->name, strstr(g->name, "_total") ? "counter" : "gauge",
                  g->help);
        v->value(v->ud, g->name, "", (double)s->gauges[i]);
    }
    for (int i = 0; i < CORE_STORE_HISTS; i++) {
        const struct store_gauge *g = &metrics_store_hists[i];
        if (s->hists[i].nbounds == 0) continue;
        v->family(v->ud, g->name, "histogram", g->help);
        v->hist(v->ud, g->name, "", &s->hists[i]);
    }
}
