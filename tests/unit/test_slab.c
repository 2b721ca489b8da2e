/* test_slab.c -- the small-object allocator: sizes, reuse, and pages given
 * back when their objects go. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/slab.h"

static void test_sizes_and_alignment(void **state) {
    struct slab s = {0};
    assert_null(slab_alloc(&s, 0));
    assert_null(slab_alloc(&s, SLAB_MAX + 1));
    void *p[SLAB_MAX + 1];
    for (size_t n = 1; n <= SLAB_MAX; n++) {
        p[n] = slab_alloc(&s, n);
        assert_non_null(p[n]);
        assert_int_equal((uintptr_t)p[n] % 8, 0);
        memset(p[n], (int)n, n);
    }
    for (size_t n = 1; n <= SLAB_MAX; n++) {
        unsigned char *c = p[n];
        for (size_t k = 0; k < n; k++) assert_int_equal(c[k], (unsigned char)n);
    }
    for (size_t n = 1; n <= SLAB_MAX; n++) slab_free(&s, p[n]);
    assert_int_equal(s.objects, 0);
    slab_destroy(&s);
    assert_int_equal(s.pages, 0);
}

/* 24-byte objects cost 24 bytes; pages come back as they empty. */
static void test_pages_come_back(void **state) {
    enum { N = 200000 };
    struct slab s = {0};
    void **p = malloc(N * sizeof *p);
    for (int i = 0; i < N; i++) {
        p[i] = slab_alloc(&s, 23);
        assert_non_null(p[i]);
        memcpy(p[i], &i, sizeof i);
    }
    /* 24 bytes each, plus the rest of the last page */
    assert_true(slab_bytes(&s) <= (uint64_t)N * 24 + SLAB_PAGE);
    /* free every other one: no page is empty, nothing comes back */
    uint64_t full = s.pages;
    for (int i = 0; i < N; i += 2) slab_free(&s, p[i]);
    assert_int_equal(s.pages, full);
    /* reuse: the freed slots are handed out again, no new page */
    for (int i = 0; i < N; i += 2) assert_non_null(p[i] = slab_alloc(&s, 20));
    assert_int_equal(s.pages, full);
    for (int i = 1; i < N; i += 2) {
        int v;
        memcpy(&v, p[i], sizeof v);
        assert_int_equal(v, i);
    }
    /* free everything: the pages wait for slab_release, a few at a time;
     * at most one page is kept */
    for (int i = 0; i < N; i++) slab_free(&s, p[i]);
    assert_true(s.nempty >= full - 1);
    assert_true(slab_release(&s, 1) == s.nempty && s.nempty >= full - 2);
    while (slab_release(&s, 2)) {}
    assert_true(s.pages <= 1);
    slab_destroy(&s);
    assert_int_equal(s.pages, 0);
    free(p);
}

/* A reservation: new pages are cut from it (faulted in by its thread)
 * until it runs out, then mapped one by one again; what is not used goes
 * back at slab_reserve_end; a 32-byte object never straddles cache lines. */
static void test_reserve(void **state) {
    enum { N = 3 * (SLAB_PAGE / 32) };
    struct slab s = {0};
    assert_int_equal(slab_reserve(&s, 2 * SLAB_PAGE), 0);
    assert_int_equal(slab_reserve(&s, 8 * SLAB_PAGE), 0); /* ends the first */
    void **p = malloc(N * sizeof *p);
    for (int i = 0; i < N; i++) {
        p[i] = slab_alloc(&s, 27);
        assert_non_null(p[i]);
        assert_int_equal((uintptr_t)p[i] % 32, 0);
        memcpy(p[i], &i, sizeof i);
    }
    assert_int_equal(s.pages, 4); /* the headers take room: 4, not 3 */
    slab_reserve_end(&s);
    slab_reserve_end(&s); /* twice: nothing */
    for (int i = 0; i < N; i++) {
        int v;
        memcpy(&v, p[i], sizeof v);
        assert_int_equal(v, i);
        slab_free(&s, p[i]);
    }
    assert_int_equal(s.objects, 0);
    assert_non_null(slab_alloc(&s, 8)); /* beyond the reservation: mapped */
    slab_destroy(&s);
    assert_int_equal(s.pages, 0);
    free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_and_alignment),
        cmocka_unit_test(test_pages_come_back),
        cmocka_unit_test(test_reserve),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
