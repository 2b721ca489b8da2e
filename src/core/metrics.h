/* metrics.h -- the metrics table (DESIGN §8).
 *
 * What the core measures itself: each command's duration, how late each job
 * was handed out (fire lag, per topic), clients connected and blocked. INFO,
 * /metrics and the dashboard all read it through metrics_visit, which walks
 * one const table of families, so a metric has one name everywhere. At most
 * `max_topics` topics get series of their own; the rest are summed under
 * topic "_other".
 */
#ifndef DQ_METRICS_H
#define DQ_METRICS_H

#include <stdint.h>

#include "job.h"
#include "lib/hist.h"

struct metrics;

enum metrics_cmd {
    M_ADD, M_DEL, M_GET, M_RESERVE, M_ACK, M_NACK, M_TOUCH, M_KICK, M_LIST,
    M_PURGE, M_STATS, M_TOPICS, M_NCMDS
};

/* Returns a new table; max_topics 0 = the default (1000). */
struct metrics *metrics_new(uint32_t max_topics);
void metrics_free(struct metrics *m); /* accepts NULL */

/* A command took usec microseconds and completed with status. */
void metrics_command(struct metrics *m, int cmd, int64_t usec, int status);
/* A job of topic was handed out lag_us microseconds after its due time
 * (negative values count as 0). */
void metrics_fire_lag(struct metrics *m, struct dq_str topic, int64_t lag_us);
/* Front ends keep the count of their connected clients here. */
void metrics_clients(struct metrics *m, int delta);
int64_t metrics_clients_now(const struct metrics *m);
/* Gauges the table reads through callbacks when visited (blocked clients,
 * store up): set once by their owner. */
void metrics_set_gauge_fn(struct metrics *m, int64_t (*blocked)(void *ud),
                          int64_t (*store_up)(void *ud), void *ud);

/* Push delivery (§9): a push to topic's receiver started; it ended after
 * usec with an outcome. */
enum { METRICS_PUSHED, METRICS_PUSH_RETRY, METRICS_PUSH_FAILED };
void metrics_push_begin(struct metrics *m, struct dq_str topic);
void metrics_push_end(struct metrics *m, struct dq_str topic, int64_t usec,
                      int outcome);
/* Pushes acked and given up, of topic (len 0 = all; 0 for a topic past
 * max_topics, whose figures are summed under "_other"). */
void metrics_push_counts(const struct metrics *m, struct dq_str topic,
                         uint64_t *pushed, uint64_t *failed);
struct metrics_push {
    uint64_t pushed, failed;
    int64_t inflight;
    const struct hist *duration;
};
void metrics_push_totals(const struct metrics *m, struct metrics_push *out);

/* Fire lag over all topics (for INFO and the dashboard). */
const struct hist *metrics_fire_lag_all(const struct metrics *m);

/* How a renderer sees the table: a family header, then its samples.
 * labels is "" or `k="v",k2="v2"` (values need no escaping: topics and
 * command names are plain). */
struct metrics_visitor {
    void (*family)(void *ud, const char *name, const char *type,
                   const char *help);
    void (*value)(void *ud, const char *name, const char *labels, double v);
    void (*hist)(void *ud, const char *name, const char *labels,
                 const struct hist *h);
    void *ud;
};
void metrics_visit(const struct metrics *m, const struct metrics_visitor *v);

/* The store's families from a snapshot (core.h's core_snapshot):
 * delayq_jobs{topic,state}, delayq_jobs_total{topic,event}, for the
 * embedded store delayq_log_bytes, and the store's own gauges and
 * histograms (below); same topic cap as above. */
struct core_snapshot;
void metrics_visit_store(const struct metrics *m,
                         const struct core_snapshot *s,
                         const struct metrics_visitor *v);

/* Gauges a store reports among its INFO lines, exported as they are:
 * {INFO name, metric name, help}; CORE_STORE_GAUGES of them. */
struct store_gauge {
    const char *info, *name, *help;
};
extern const struct store_gauge metrics_store_gauges[];

/* Histograms a store reports among its INFO lines, CORE_STORE_HISTS of
 * them, {INFO prefix, metric name, help}: "<prefix>_sum:seconds" and
 * "<prefix>_buckets:le=count,..." (cumulative counts, ascending bounds, the
 * last le "+Inf"; the count is the +Inf one). */
extern const struct store_gauge metrics_store_hists[];

/* Reads one INFO line into h if it is one of g's: the sum, or the buckets
 * (bounds kept in bounds[HIST_MAX_BOUNDS], h->bounds points there). A
 * malformed buckets line leaves h->nbounds 0 (not reported). */
void metrics_store_hist_line(const struct store_gauge *g, const char *name,
                             const char *value, struct hist *h,
                             double *bounds);

/* The command's lower-case name ("add"). */
const char *metrics_cmd_name(int cmd);

#endif
