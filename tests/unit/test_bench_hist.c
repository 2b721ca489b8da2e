/* test_bench_hist.c -- the recorders behind every figure of `delayq bench`
 * (src/cli/bench_hist.c), checked against percentiles computed exactly here
 * by sorting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli/bench_hist.h"

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank: the ceil(p/100 * n)-th smallest of sorted v[0..n). */
static uint64_t exact_pct(const uint64_t *v, size_t n, double p) {
    size_t rank = (size_t)(p / 100.0 * (double)n);
    if ((double)rank < p / 100.0 * (double)n) rank++;
    if (rank == 0) rank = 1;
    return v[rank - 1];
}

static uint64_t rnd_state = 88172645463325252ULL;
static uint64_t rnd(void) { /* xorshift64 */
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

static void test_small_values_are_exact(void **state) {
    static struct bench_hist h;
    bench_hist_init(&h);
    uint64_t v[BENCH_HIST_SUB];
    for (uint64_t i = 0; i < BENCH_HIST_SUB; i++) {
        v[i] = BENCH_HIST_SUB - 1 - i; /* added in reverse order */
        bench_hist_add(&h, v[i]);
    }
    qsort(v, BENCH_HIST_SUB, sizeof v[0], cmp_u64);
    const double ps[] = {1, 25, 50, 90, 99, 99.9, 100};
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++)
        assert_int_equal(bench_hist_pct(&h, ps[k]), exact_pct(v, BENCH_HIST_SUB, ps[k]));
    assert_int_equal(h.min, 0);
    assert_int_equal(h.max, BENCH_HIST_SUB - 1);
    assert_int_equal(h.count, BENCH_HIST_SUB);
}

static void test_large_values_within_one_sixty_fourth(void **state) {
    enum { N = 200000 };
    static struct bench_hist h;
    uint64_t *v = malloc(N * sizeof *v);
    assert_non_null(v);
    bench_hist_init(&h);
    double sum = 0;
    for (size_t i = 0; i < N; i++) {
        /* spread over many octaves: 1 ns .. ~1 s */
        v[i] = (rnd() % 1000 + 1) << (rnd() % 21);
        sum += (double)v[i];
        bench_hist_add(&h, v[i]);
    }
    qsort(v, N, sizeof v[0], cmp_u64);
    const double ps[] = {10, 50, 90, 99, 99.9, 99.99};
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        double want = (double)exact_pct(v, N, ps[k]);
        double got = (double)bench_hist_pct(&h, ps[k]);
        assert_true(got >= want * (1 - 1.0 / 64) && got <= want * (1 + 1.0 / 64));
    }
    assert_int_equal(bench_hist_pct(&h, 100), v[N - 1]);
    assert_int_equal(h.min, v[0]);
    double mean = bench_hist_mean(&h);
    assert_true(mean > sum / N * 0.999999 && mean < sum / N * 1.000001);
    free(v);
}

static void test_merge_equals_adding_everything(void **state) {
    static struct bench_hist a, b, all;
    bench_hist_init(&a);
    bench_hist_init(&b);
    bench_hist_init(&all);
    for (int i = 0; i < 50000; i++) {
        uint64_t x = rnd() % 10000000;
        bench_hist_add(i % 3 ? &a : &b, x);
        bench_hist_add(&all, x);
    }
    bench_hist_merge(&a, &b);
    assert_int_equal(a.count, all.count);
    assert_int_equal(a.min, all.min);
    assert_int_equal(a.max, all.max);
    assert_memory_equal(a.b, all.b, sizeof a.b);
}

static void test_empty_recorders_report_zero(void **state) {
    static struct bench_hist h; /* zeroed: valid and empty */
    assert_int_equal(bench_hist_pct(&h, 50), 0);
    assert_true(bench_hist_mean(&h) == 0);
    struct bench_samples s = BENCH_SAMPLES_INIT;
    assert_int_equal(bench_samples_pct(&s, 99), 0);
    assert_int_equal(bench_samples_above(&s, -5), 0);
    bench_samples_free(&s);
}

static void test_samples_exact_with_negatives_and_late_adds(void **state) {
    struct bench_samples s = BENCH_SAMPLES_INIT;
    /* -50 .. 49, shuffled by a stride coprime with 100 */
    for (int i = 0; i < 100; i++) bench_samples_add(&s, (int64_t)((i * 37) % 100) - 50);
    assert_int_equal(bench_samples_pct(&s, 0), -50);
    assert_int_equal(bench_samples_pct(&s, 50), -1); /* the 50th smallest */
    assert_int_equal(bench_samples_pct(&s, 99), 48);
    assert_int_equal(bench_samples_pct(&s, 100), 49);
    assert_int_equal(bench_samples_above(&s, 0), 49);
    assert_int_equal(bench_samples_above(&s, -51), 100);
    /* adds after a query are sorted in on the next one */
    bench_samples_add(&s, 1000);
    bench_samples_add(&s, -1000);
    assert_int_equal(bench_samples_pct(&s, 100), 1000);
    assert_int_equal(bench_samples_pct(&s, 0), -1000);
    assert_int_equal(bench_samples_above(&s, 49), 1);
    bench_samples_free(&s);
    assert_int_equal(s.n, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_values_are_exact),
        cmocka_unit_test(test_large_values_within_one_sixty_fourth),
        cmocka_unit_test(test_merge_equals_adding_everything),
        cmocka_unit_test(test_empty_recorders_report_zero),
        cmocka_unit_test(test_samples_exact_with_negatives_and_late_adds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
