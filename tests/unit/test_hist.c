/* test_hist.c -- src/lib/hist: bucket placement at the bounds, cumulative
 * counts, quantile estimates against known distributions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "lib/hist.h"

static const double bounds[] = {1, 2, 5, 10};

static void test_values_on_a_bound_count_in_that_bucket(void **state) {
    struct hist h;
    hist_init(&h, bounds, 4);
    hist_observe(&h, 1);   /* le 1 */
    hist_observe(&h, 1.5); /* le 2 */
    hist_observe(&h, 2);   /* le 2 */
    hist_observe(&h, 10);  /* le 10 */
    hist_observe(&h, 11);  /* +Inf */
    hist_observe(&h, -3);  /* le 1 */
    assert_int_equal(h.counts[0], 2);
    assert_int_equal(h.counts[1], 2);
    assert_int_equal(h.counts[2], 0);
    assert_int_equal(h.counts[3], 1);
    assert_int_equal(h.counts[4], 1);
    assert_int_equal(hist_le(&h, 0), 2);
    assert_int_equal(hist_le(&h, 3), 5);
    assert_int_equal(h.count, 6);
    assert_true(h.sum > 22.49 && h.sum < 22.51);
}

static void test_quantiles_interpolate_within_the_bucket(void **state) {
    struct hist h;
    hist_init(&h, bounds, 4);
    assert_true(hist_quantile(&h, 0.99) == 0); /* empty */
    for (int i = 0; i < 100; i++) hist_observe(&h, 3); /* all in (2, 5] */
    double q = hist_quantile(&h, 0.5);
    assert_true(q > 2 && q <= 5);
    assert_true(hist_quantile(&h, 1.0) == 5);
    hist_init(&h, bounds, 4);
    for (int i = 0; i < 99; i++) hist_observe(&h, 0.5);
    hist_observe(&h, 7);
    assert_true(hist_quantile(&h, 0.5) <= 1);
    assert_true(hist_quantile(&h, 0.995) > 5);
    hist_observe(&h, 1e9); /* past the last bound: the last bound */
    assert_true(hist_quantile(&h, 1.0) == 10);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_on_a_bound_count_in_that_bucket),
        cmocka_unit_test(test_quantiles_interpolate_within_the_bucket),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
