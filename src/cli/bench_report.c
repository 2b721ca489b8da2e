/* bench_report.c -- `delayq bench`'s results: the phases' throughput and
 * latency percentiles, and the lateness mode's figures, as text or as one
 * JSON object (bench_int.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "cli/bench_int.h"

static double secs(const struct phase *ph) {
    return ph->t1 > ph->t0 ? (double)(ph->t1 - ph->t0) / 1e9 : 0.0;
}

static double per_sec(const struct phase *ph) {
    double s = secs(ph);
    return s > 0 ? (double)ph->done / s : 0.0;
}

static double ms(uint64_t ns) {
    return round((double)ns / 1000.0) / 1000.0;
}

static const double pcts[] = {50, 90, 99, 99.9};
static const char *const pct_names[] = {"p50", "p90", "p99", "p99.9"};

static void print_latency(const struct phase *ph) {
    for (int k = 1; k < K_N; k++) {
        const struct bench_hist *h = &ph->hist[k];
        if (h->count == 0)
            continue;
        printf("  latency ms  %-8s", bench_kind_name[k]);
        for (size_t i = 0; i < sizeof pcts / sizeof pcts[0]; i++)
            printf("  %s %.3f", pct_names[i], ms(bench_hist_pct(h, pcts[i])));
        printf("  max %.3f  (%" PRIu64 " requests)\n", ms(h->max), h->count);
    }
}

/* "  label  p50 x  p90 x ... max x  min x", in ms. */
static void print_samples(const char *label, struct bench_samples *s) {
    printf("  %s", label);
    for (size_t i = 0; i < sizeof pcts / sizeof pcts[0]; i++)
        printf("  %s %.3f", pct_names[i], (double)bench_samples_pct(s, pcts[i]) / 1000.0);
    printf("  max %.3f  min %.3f\n", (double)bench_samples_pct(s, 100) / 1000.0,
           (double)bench_samples_pct(s, 0) / 1000.0);
}

/* The same as a JSON object, null when there are no samples. */
static json_t *samples_json(struct bench_samples *s) {
    if (s->n == 0)
        return json_null();
    json_t *l = json_object();
    for (size_t i = 0; i < sizeof pcts / sizeof pcts[0]; i++)
        json_object_set_new(l, pct_names[i],
                            json_real((double)bench_samples_pct(s, pcts[i]) / 1000.0));
    json_object_set_new(l, "max", json_real((double)bench_samples_pct(s, 100) / 1000.0));
    json_object_set_new(l, "min", json_real((double)bench_samples_pct(s, 0) / 1000.0));
    return l;
}

void bench_print_text(struct bench *b) {
    const struct opts *o = b->o;
    printf("delayq bench %s: %s:%d, %ld client%s, pipeline %ld, %lld-byte bodies\n",
           o->mode->name, o->t.host, o->t.port, o->clients, o->clients == 1 ? "" : "s",
           o->pipeline, o->size);
    if (o->mode->run == bench_run_lateness) {
        struct phase *ph = &b->phases[0];
        long long missing = ph->target - ph->done;
        printf("  delivered   %lld of %lld (%lld missing, %lld early, %lld twice), %.0f due/s, "
               "added %" PRId64 " ms ahead, %ld consumer%s, COUNT %ld\n",
               ph->done, ph->target, missing < 0 ? 0 : missing, b->early, b->dups, o->rate,
               o->delay_ms, o->clients, o->clients == 1 ? "" : "s", o->count);
        if (b->late.n) {
            print_samples("lateness ms", &b->late);
            printf("  late > 1 ms %zu, > 5 ms %zu  (due -> arrival at the consumer's socket)\n",
                   bench_samples_above(&b->late, 1000), bench_samples_above(&b->late, 5000));
            print_samples("as handled ", &b->late_seen);
            printf("  late > 1 ms %zu, > 5 ms %zu  (due -> handled by this process, which adds its "
                   "own stalls)\n", bench_samples_above(&b->late_seen, 1000),
                   bench_samples_above(&b->late_seen, 5000));
        }
        printf("  client      timer lag max %.3f ms, %lld ticks > 1 ms late (this process's own "
               "stalls); short scheduler slice %s\n", ms(b->tick_lag_max), b->tick_lag_over1,
               b->short_slice ? "granted" : "not available");
        if (b->foreign)
            printf("  other jobs  %lld (not from this run; acked, not counted)\n", b->foreign);
        print_latency(ph);
    } else {
        for (int i = 0; i < b->nphases; i++) {
            struct phase *ph = &b->phases[i];
            printf("  %-16s %lld in %.3f s = %.0f/s\n", ph->what, ph->done, secs(ph),
                   per_sec(ph));
            print_latency(ph);
        }
    }
    if (b->limited)
        printf("  note: cut short by --time-limit %.3g s\n", o->time_limit);
    if (b->ack_short)
        printf("  note: %lld ACKs found no job (lease expired?)\n", b->ack_short);
}

static json_t *latency_json(const struct phase *ph) {
    json_t *lat = json_object();
    for (int k = 1; k < K_N; k++) {
        const struct bench_hist *h = &ph->hist[k];
        if (h->count == 0)
            continue;
        json_t *o = json_object();
        json_object_set_new(o, "count", json_integer((json_int_t)h->count));
        for (size_t i = 0; i < sizeof pcts / sizeof pcts[0]; i++)
            json_object_set_new(o, pct_names[i], json_real(ms(bench_hist_pct(h, pcts[i]))));
        json_object_set_new(o, "max", json_real(ms(h->max)));
        json_object_set_new(o, "mean", json_real(ms((uint64_t)bench_hist_mean(h))));
        json_object_set_new(lat, bench_kind_name[k], o);
    }
    return lat;
}

static json_t *phase_json(const struct phase *ph) {
    return json_pack("{s:s, s:I, s:f, s:I, s:o}", "what", ph->what, "ops",
                     (json_int_t)ph->done, "seconds", round(secs(ph) * 1000) / 1000,
                     "ops_per_sec", (json_int_t)llround(per_sec(ph)), "latency_ms",
                     latency_json(ph));
}

void bench_print_json(struct bench *b) {
    const struct opts *o = b->o;
    json_t *j = json_object();
    char server[300];
    snprintf(server, sizeof server, "%s:%d", o->t.host, o->t.port);
    json_object_set_new(j, "mode", json_string(o->mode->name));
    json_object_set_new(j, "server", json_string(server));
    json_object_set_new(j, "clients", json_integer(o->clients));
    json_object_set_new(j, "pipeline", json_integer(o->pipeline));
    json_object_set_new(j, "size", json_integer(o->size));
    json_object_set_new(j, "jobs", json_integer(o->jobs));
    struct phase *last = &b->phases[b->nphases ? b->nphases - 1 : 0];
    json_object_set_new(j, "ops", json_integer(last->done));
    json_object_set_new(j, "seconds", json_real(round(secs(last) * 1000) / 1000));
    json_object_set_new(j, "ops_per_sec", json_integer(llround(per_sec(last))));
    json_object_set_new(j, "latency_ms", latency_json(last));
    if (b->nphases > 1)
        json_object_set_new(j, "preload", phase_json(&b->phases[0]));
    if (o->mode->run == bench_run_lateness) {
        json_object_set_new(j, "lateness_ms", samples_json(&b->late));
        json_object_set_new(j, "lateness_handled_ms", samples_json(&b->late_seen));
        long long missing = last->target - last->done;
        json_object_set_new(j, "delivered", json_integer(last->done));
        json_object_set_new(j, "missing", json_integer(missing < 0 ? 0 : missing));
        json_object_set_new(j, "early", json_integer(b->early));
        json_object_set_new(j, "duplicates", json_integer(b->dups));
        json_object_set_new(j, "over_1ms",
                            json_integer((json_int_t)bench_samples_above(&b->late, 1000)));
        json_object_set_new(j, "over_5ms",
                            json_integer((json_int_t)bench_samples_above(&b->late, 5000)));
        json_object_set_new(j, "foreign", json_integer(b->foreign));
        json_object_set_new(j, "client_lag_max_ms", json_real(ms(b->tick_lag_max)));
        json_object_set_new(j, "client_lag_over_1ms", json_integer(b->tick_lag_over1));
        json_object_set_new(j, "client_short_slice", json_boolean(b->short_slice));
        json_object_set_new(j, "rate", json_real(o->rate));
        json_object_set_new(j, "delay_ms", json_integer(o->delay_ms));
        json_object_set_new(j, "count", json_integer(o->count));
    }
    json_object_set_new(j, "time_limited", json_boolean(b->limited));
    if (b->ack_short)
        json_object_set_new(j, "ack_not_found", json_integer(b->ack_short));
    if (b->failed)
        json_object_set_new(j, "error", json_string(b->errmsg));
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    if (s) {
        puts(s);
        free(s);
    }
    json_decref(j);
}
