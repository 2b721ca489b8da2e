/* bench_hist.c -- latency histograms and exact percentiles (see bench_hist.h).
 *
 * Bucket layout: a value v < 128 has bucket v. A larger v with highest set
 * bit e (7 <= e <= 63) keeps its top 7 bits m = v >> (e - 6), 64 <= m < 128,
 * and goes to bucket 128 + (e - 7) * 64 + (m - 64). A bucket then spans
 * 2^(e-6) values, 1/64 of its lower bound.
 */
#include "cli/bench_hist.h"

#include <stdlib.h>
#include <string.h>

#include "lib/xalloc.h"

static size_t bucket_of(uint64_t v) {
    if (v < BENCH_HIST_SUB)
        return (size_t)v;
    int e = 63 - __builtin_clzll(v);
    uint64_t m = v >> (e - 6);
    return BENCH_HIST_SUB + (size_t)(e - 7) * 64 + (size_t)(m - 64);
}

/* The lowest and highest value of bucket i. */
static void bucket_range(size_t i, uint64_t *lo, uint64_t *hi) {
    if (i < BENCH_HIST_SUB) {
        *lo = *hi = i;
        return;
    }
    int e = (int)((i - BENCH_HIST_SUB) / 64) + 7;
    uint64_t m = (i - BENCH_HIST_SUB) % 64 + 64;
    *lo = m << (e - 6);
    *hi = *lo + ((uint64_t)1 << (e - 6)) - 1;
}

void bench_hist_init(struct bench_hist *h) {
    memset(h, 0, sizeof *h);
}

void bench_hist_add(struct bench_hist *h, uint64_t v) {
    if (h->count == 0 || v < h->min)
        h->min = v;
    if (v > h->max)
        h->max = v;
    h->count++;
    h->sum += (double)v;
    h->b[bucket_of(v)]++;
}

void bench_hist_merge(struct bench_hist *dst, const struct bench_hist *src) {
    if (src->count == 0)
        return;
    if (dst->count == 0 || src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
    dst->count += src->count;
    dst->sum += src->sum;
    for (size_t i = 0; i < BENCH_HIST_BUCKETS; i++)
        dst->b[i] += src->b[i];
}

uint64_t bench_hist_pct(const struct bench_hist *h, double p) {
    if (h->count == 0)
        return 0;
    if (p >= 100.0)
        return h->max;
    uint64_t rank = (uint64_t)(p / 100.0 * (double)h->count + 0.999999);
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (size_t i = 0; i < BENCH_HIST_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank) {
            uint64_t lo, hi;
            bucket_range(i, &lo, &hi);
            uint64_t v = lo + (hi - lo) / 2;
            if (v < h->min)
                v = h->min;
            if (v > h->max)
                v = h->max;
            return v;
        }
    }
    return h->max;
}

double bench_hist_mean(const struct bench_hist *h) {
    return h->count ? h->sum / (double)h->count : 0.0;
}

void bench_samples_add(struct bench_samples *s, int64_t v) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 4096;
        s->v = xrealloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = v;
    s->sorted = 0;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void sort_samples(struct bench_samples *s) {
    if (!s->sorted) {
        qsort(s->v, s->n, sizeof *s->v, cmp_i64);
        s->sorted = 1;
    }
}

int64_t bench_samples_pct(struct bench_samples *s, double p) {
    if (s->n == 0)
        return 0;
    sort_samples(s);
    if (p <= 0.0)
        return s->v[0];
    size_t rank = (size_t)(p / 100.0 * (double)s->n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > s->n)
        rank = s->n;
    return s->v[rank - 1];
}

size_t bench_samples_above(struct bench_samples *s, int64_t v) {
    sort_samples(s);
    size_t lo = 0, hi = s->n; /* first index with value > v */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->v[mid] <= v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return s->n - lo;
}

void bench_samples_free(struct bench_samples *s) {
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
    s->sorted = 1;
}
