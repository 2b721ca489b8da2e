/* hist.h -- a cumulative histogram with fixed bucket bounds, Prometheus
 * style: counts[i] is how many observations were <= bounds[i] and above
 * bounds[i-1]; counts[nbounds] holds the rest (+Inf). Nothing allocates.
 */
#ifndef DQ_HIST_H
#define DQ_HIST_H

#include <stdint.h>

#define HIST_MAX_BOUNDS 20

struct hist {
    const double *bounds; /* ascending; shared, owned by the caller */
    int nbounds;          /* <= HIST_MAX_BOUNDS */
    uint64_t counts[HIST_MAX_BOUNDS + 1];
    uint64_t count;
    double sum;
};

/* Readies h with these bounds (kept by pointer). */
void hist_init(struct hist *h, const double *bounds, int nbounds);
void hist_observe(struct hist *h, double v);
/* How many observations were <= bounds[i] (cumulative), i < nbounds. */
uint64_t hist_le(const struct hist *h, int i);
/* An estimate of quantile q (0..1) by linear interpolation inside the
 * bucket that holds it, as Prometheus's histogram_quantile does; 0 when
 * empty. Past the last bound it answers the last bound. */
double hist_quantile(const struct hist *h, double q);

#endif
