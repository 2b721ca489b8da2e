/* bench_hist.h -- latency histograms and exact percentiles for `delayq bench`.
 *
 * Two recorders:
 * - struct bench_hist: a log-linear histogram of unsigned values (ns). Fixed
 *   size, no allocation, O(1) per sample; a percentile is exact to 1/64 of
 *   its value (under 1.6 %), min and max are exact. For request latencies,
 *   of which a run records millions.
 * - struct bench_samples: every sample kept (signed), sorted on demand, so
 *   percentiles are exact. For delivery lateness, which can be negative if a
 *   server delivers early and of which a run records at most --jobs.
 * Neither is thread-safe; the bench is one thread.
 */
#ifndef DQ_BENCH_HIST_H
#define DQ_BENCH_HIST_H

#include <stddef.h>
#include <stdint.h>

#define BENCH_HIST_SUB     128 /* values below this are their own bucket */
#define BENCH_HIST_BUCKETS (BENCH_HIST_SUB + 57 * 64)

struct bench_hist {
    uint64_t count;
    uint64_t min, max; /* exact; 0 while count is 0 */
    double sum;
    uint64_t b[BENCH_HIST_BUCKETS];
};

/* Empties h. A zeroed struct is also a valid empty histogram. */
void bench_hist_init(struct bench_hist *h);
void bench_hist_add(struct bench_hist *h, uint64_t v);
/* Adds every sample of src to dst. */
void bench_hist_merge(struct bench_hist *dst, const struct bench_hist *src);
/* The value at percentile p (0 < p <= 100): the smallest recorded value
 * range holding at least p % of the samples, given as the middle of that
 * range clamped to [min, max]. p = 100 is exactly max. 0 when empty. */
uint64_t bench_hist_pct(const struct bench_hist *h, double p);
/* Mean, 0 when empty. */
double bench_hist_mean(const struct bench_hist *h);

struct bench_samples {
    int64_t *v;
    size_t n, cap;
    int sorted;
};

#define BENCH_SAMPLES_INIT {NULL, 0, 0, 1}

/* Appends v (aborts on allocation failure, through lib/xalloc.h). */
void bench_samples_add(struct bench_samples *s, int64_t v);
/* The sample at percentile p (nearest rank: the ceil(p/100 * n)-th smallest;
 * p = 0 gives the minimum). Sorts s on first use after an add. 0 when empty. */
int64_t bench_samples_pct(struct bench_samples *s, double p);
/* How many samples are greater than v. Sorts s like bench_samples_pct. */
size_t bench_samples_above(struct bench_samples *s, int64_t v);
/* Frees the memory; s is then empty. Accepts an empty struct. */
void bench_samples_free(struct bench_samples *s);

#endif
