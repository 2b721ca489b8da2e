/* hist.c -- see hist.h. */
#include "lib/hist.h"

#include <string.h>

void hist_init(struct hist *h, const double *bounds, int nbounds) {
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->nbounds = nbounds > HIST_MAX_BOUNDS ? HIST_MAX_BOUNDS : nbounds;
}

void hist_observe(struct hist *h, double v) {
    /* first bound >= v, from the bottom: most observations (durations,
     * lateness) fall in the first few buckets */
    int i = 0;
    while (i < h->nbounds && h->bounds[i] < v) i++;
    h->counts[i]++;
    h->count++;
    h->sum += v;
}

uint64_t hist_le(const struct hist *h, int i) {
    uint64_t n = 0;
    for (int k = 0; k <= i && k <= h->nbounds; k++) n += h->counts[k];
    return n;
}

double hist_quantile(const struct hist *h, double q) {
    if (h->count == 0) return 0;
    double rank = q * (double)h->count;
    uint64_t below = 0;
    for (int i = 0; i < h->nbounds; i++) {
        uint64_t in = h->counts[i];
        if ((double)(below + in) >= rank && in > 0) {
            double lo = i == 0 ? 0 : h->bounds[i - 1];
            return lo + (h->bounds[i] - lo) * ((rank - (double)below) / (double)in);
        }
        below += in;
    }
    return h->nbounds ? h->bounds[h->nbounds - 1] : 0;
}
