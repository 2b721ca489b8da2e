/* test_htab.c -- the intrusive hash table (src/lib/htab.c): lookups through
 * growth, shrinking and incremental rehashing, SCAN's guarantee, and
 * htab_prefetch, which must never change what the table holds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/htab.h"

struct item {
    struct hnode h;
    uint64_t key;
    bool in;   /* linked in the table */
    int seen;  /* scan visits */
};

static struct item *item_of(const struct hnode *n) {
    return (struct item *)((char *)n - offsetof(struct item, h));
}

static uint64_t key_hash(uint64_t k) { return htab_hash_bytes(&k, sizeof k); }

static uint64_t item_rehash(const struct hnode *n) {
    return key_hash(item_of(n)->key);
}

static struct item *find(const struct htab *t, uint64_t key) {
    for (struct hnode *n = htab_bucket(t, key_hash(key)); n; n = n->next)
        if (item_of(n)->key == key) return item_of(n);
    return NULL;
}

/* Every depth, present and absent keys: a hint only. */
static void prefetch_all_depths(const struct htab *t, uint64_t key) {
    for (int depth = 0; depth < 6; depth++)
        htab_prefetch(t, key_hash(key), depth);
}

#define N 20000

static void test_lookups_through_growth_and_shrinking(void **state) {
    struct htab t;
    struct item *items = calloc(N, sizeof *items);
    assert_non_null(items);
    assert_int_equal(htab_init(&t, 4, item_rehash), 0);
    for (uint64_t i = 0; i < N; i++) {
        items[i].key = i * 7919;
        assert_null(find(&t, items[i].key));
        prefetch_all_depths(&t, items[i].key);
        htab_insert(&t, &items[i].h, key_hash(items[i].key));
        items[i].in = true;
        if (i % 97 == 0) /* the ones inserted so far, some mid-rehash */
            for (uint64_t k = 0; k <= i; k += 13)
                assert_ptr_equal(find(&t, items[k].key), &items[k]);
    }
    assert_int_equal(htab_count(&t), N);
    for (uint64_t i = 0; i < N; i++) {
        if (i % 10 == 0) continue; /* keep a tenth: the table shrinks */
        prefetch_all_depths(&t, items[i].key);
        htab_remove(&t, &items[i].h, key_hash(items[i].key));
        items[i].in = false;
    }
    assert_int_equal(htab_count(&t), N / 10);
    for (uint64_t i = 0; i < N; i++) {
        prefetch_all_depths(&t, items[i].key);
        assert_ptr_equal(find(&t, items[i].key), items[i].in ? &items[i] : NULL);
    }
    htab_destroy(&t);
    free(items);
}

static void count_visit(void *ud, const struct hnode *n) {
    (void)ud;
    item_of(n)->seen++;
}

static void test_scan_sees_every_node_while_the_table_grows(void **state) {
    struct htab t;
    struct item *items = calloc(N, sizeof *items);
    assert_non_null(items);
    assert_int_equal(htab_init(&t, 4, item_rehash), 0);
    for (uint64_t i = 0; i < N / 4; i++) {
        items[i].key = i;
        htab_insert(&t, &items[i].h, key_hash(i));
    }
    /* scan in small steps while the other three quarters go in */
    uint64_t cursor = 0, next = N / 4;
    do {
        cursor = htab_scan(&t, cursor, 8, count_visit, NULL);
        for (int k = 0; k < 40 && next < N; k++, next++) {
            items[next].key = next;
            htab_insert(&t, &items[next].h, key_hash(next));
        }
    } while (cursor != 0);
    for (uint64_t i = 0; i < N / 4; i++)
        assert_true(items[i].seen >= 1);
    htab_destroy(&t);
    free(items);
}

static void test_prefetch_on_an_empty_table(void **state) {
    struct htab t;
    assert_int_equal(htab_init(&t, 1, item_rehash), 0);
    for (uint64_t k = 0; k < 100; k++) prefetch_all_depths(&t, k);
    assert_int_equal(htab_count(&t), 0);
    htab_destroy(&t);
}

int main(void) {
    unsigned char key[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    htab_set_key(key);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookups_through_growth_and_shrinking),
        cmocka_unit_test(test_scan_sees_every_node_while_the_table_grows),
        cmocka_unit_test(test_prefetch_on_an_empty_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
