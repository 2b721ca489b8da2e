/* test_wheel.c -- the hierarchical timing wheel (src/lib/wheel.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/wheel.h"

struct tnode {
    struct wheel_node n;
    uint64_t seq; /* insertion order */
    int live;
};

static struct tnode *tn(struct wheel_node *n) {
    return (struct tnode *)((char *)n - offsetof(struct tnode, n));
}

static struct wheel *new_wheel(int64_t now) {
    struct wheel *w = malloc(sizeof *w);
    assert_non_null(w);
    wheel_init(w, now);
    return w;
}

/* Pops one due timer (unlimited work), NULL if none. */
static struct tnode *pop(struct wheel *w, int64_t now) {
    struct wheel_node *n;
    uint32_t work = UINT32_MAX;
    int r = wheel_due(w, now, &work, &n);
    assert_int_not_equal(r, WHEEL_AGAIN);
    if (r == WHEEL_IDLE) return NULL;
    wheel_del(w, n);
    return tn(n);
}

static void test_empty(void **state) {
    struct wheel *w = new_wheel(1000);
    assert_int_equal(wheel_next(w), INT64_MAX);
    assert_null(pop(w, INT64_MAX / 2));
    assert_int_equal(wheel_count(w), 0);
    free(w);
}

static void test_basic_order(void **state) {
    struct wheel *w = new_wheel(1000);
    struct tnode t[5] = {0};
    int64_t when[5] = {1005, 1001, 1000 + 70000, 1001, 1000 + 64};
    for (int i = 0; i < 5; i++) {
        t[i].n.when = when[i];
        wheel_add(w, &t[i].n);
    }
    assert_int_equal(wheel_count(w), 5);
    assert_int_equal(wheel_next(w), 1001);
    assert_null(pop(w, 1000));
    assert_ptr_equal(pop(w, 1001), &t[1]);
    assert_ptr_equal(pop(w, 1001), &t[3]);
    assert_null(pop(w, 1001));
    assert_int_equal(wheel_next(w), 1005);
    /* Jumping far ahead hands everything out in time order. */
    assert_ptr_equal(pop(w, 1000000), &t[0]);
    assert_ptr_equal(pop(w, 1000000), &t[4]);
    assert_ptr_equal(pop(w, 1000000), &t[2]);
    assert_null(pop(w, 1000000));
    assert_int_equal(wheel_next(w), INT64_MAX);
    free(w);
}

static void test_cancel(void **state) {
    struct wheel *w = new_wheel(0);
    struct tnode t[3] = {0};
    for (int i = 0; i < 3; i++) {
        t[i].n.when = 100 + i;
        wheel_add(w, &t[i].n);
    }
    wheel_del(w, &t[0].n);
    wheel_del(w, &t[2].n);
    assert_int_equal(wheel_count(w), 1);
    assert_int_equal(wheel_next(w), 101);
    assert_ptr_equal(pop(w, 200), &t[1]);
    assert_int_equal(wheel_next(w), INT64_MAX);
    for (int l = 0; l < WHEEL_LEVELS; l++) assert_true(w->occupied[l] == 0);
    free(w);
}

static void test_past_is_due_now(void **state) {
    struct wheel *w = new_wheel(5000);
    struct tnode a = {0}, b = {0};
    a.n.when = 10; /* in the past */
    b.n.when = 5000;
    wheel_add(w, &a.n);
    wheel_add(w, &b.n);
    assert_int_equal(wheel_next(w), 5000);
    assert_ptr_equal(pop(w, 5000), &a);
    assert_ptr_equal(pop(w, 5000), &b);
    free(w);
}

static void test_ten_years(void **state) {
    int64_t now = INT64_C(1763800000000);
    int64_t ten = INT64_C(3653) * 24 * 3600 * 1000;
    struct wheel *w = new_wheel(now);
    struct tnode a = {0}, b = {0}, c = {0};
    a.n.when = now + ten;
    b.n.when = now + ten;
    c.n.when = now + ten - 1;
    wheel_add(w, &a.n);
    wheel_add(w, &b.n);
    wheel_add(w, &c.n);
    int64_t nx = wheel_next(w);
    assert_true(nx <= now + ten - 1);
    /* Step through the bounds as an event loop would: never late. */
    int steps = 0;
    struct tnode *got;
    while (!(got = pop(w, nx))) {
        int64_t n2 = wheel_next(w);
        assert_true(n2 >= nx);
        assert_true(n2 <= now + ten - 1);
        nx = n2;
        assert_true(++steps < 20);
    }
    assert_ptr_equal(got, &c);
    assert_int_equal(nx, now + ten - 1);
    assert_ptr_equal(pop(w, now + ten), &a);
    assert_ptr_equal(pop(w, now + ten), &b);
    free(w);
}

/* next is exact for short slots and for level 0, a lower bound otherwise. */
static void test_next_bound(void **state) {
    struct wheel *w = new_wheel(0);
    enum { N = 100 };
    struct tnode *t = calloc(N, sizeof *t);
    for (int i = 0; i < N; i++) {
        t[i].n.when = 100000 + i;
        wheel_add(w, &t[i].n);
    }
    int64_t nx = wheel_next(w);
    assert_true(nx <= 100000);
    assert_true(nx > 0);
    /* Advancing to the bound cascades; the bound then tightens to exact. */
    for (int guard = 0; nx < 100000; guard++) {
        assert_null(pop(w, nx));
        int64_t n2 = wheel_next(w);
        assert_true(n2 > nx);
        nx = n2;
        assert_true(guard < 10);
    }
    assert_int_equal(nx, 100000);
    free(t);
    free(w);

    w = new_wheel(0);
    struct tnode a = {0};
    a.n.when = 5000000; /* alone in a high slot: exact */
    wheel_add(w, &a.n);
    assert_int_equal(wheel_next(w), 5000000);
    free(w);
}

/* Many timers in one millisecond far ahead (and one a millisecond later, so
 * the slot must be cascaded timer by timer), drained with a small work
 * allowance: the partly cascaded slot resumes, deletions and additions in
 * between are honoured, and the order is the order of addition. */
static void test_budgeted_cascade(void **state) {
    enum { N = 20000 };
    int64_t due = 3 * 262144 + 12345; /* level 3 from 0 */
    struct wheel *w = new_wheel(0);
    struct tnode *t = calloc(N + 100, sizeof *t);
    struct tnode later = {.seq = UINT64_MAX, .live = 1};
    later.n.when = due + 1;
    wheel_add(w, &later.n);
    for (int i = 0; i < N; i++) {
        t[i].n.when = due;
        t[i].seq = (uint64_t)i;
        t[i].live = 1;
        wheel_add(w, &t[i].n);
    }
    int again = 0, extra = 0;
    uint64_t want = 0;
    int64_t now = due;
    for (;;) {
        uint32_t work = 100;
        struct wheel_node *n;
        int r = wheel_due(w, now, &work, &n);
        if (r == WHEEL_IDLE && now == due) {
            now = due + 1; /* the later timer */
            continue;
        }
        if (r == WHEEL_IDLE) break;
        if (r == WHEEL_AGAIN) {
            assert_int_equal(work, 0);
            again++;
            /* Between calls: delete some pending timers, add new ones
             * with the same time (they must come after all old ones). */
            int k = (again * 7919) % N;
            if (t[k].live) {
                wheel_del(w, &t[k].n);
                t[k].live = 0;
            }
            if (extra < 100) {
                struct tnode *x = &t[N + extra];
                x->n.when = due;
                x->seq = (uint64_t)(N + extra);
                x->live = 1;
                wheel_add(w, &x->n);
                extra++;
            }
            continue;
        }
        struct tnode *x = tn(n);
        wheel_del(w, n);
        assert_true(x->live);
        x->live = 0;
        if (x == &later) continue;
        assert_true(x->seq >= want);
        want = x->seq + 1;
    }
    assert_false(later.live);
    assert_true(again > 100);
    assert_int_equal(wheel_count(w), 0);
    for (int i = 0; i < N + extra; i++) assert_false(t[i].live);
    free(t);
    free(w);
}

/* A slot of timers that all share one time is cascaded in O(1), whatever
 * the work allowance, and hands its timers out in the order added. */
static void test_same_time_splice(void **state) {
    enum { N = 50000 };
    int64_t due = 5 * 262144 + 777; /* level 3 from 0 */
    struct wheel *w = new_wheel(0);
    struct tnode *t = calloc(N + 1, sizeof *t);
    for (int i = 0; i < N; i++) {
        t[i].n.when = due;
        t[i].seq = (uint64_t)i;
        wheel_add(w, &t[i].n);
    }
    assert_int_equal(wheel_next(w), due);
    uint32_t work = 1;
    struct wheel_node *n;
    /* every level is crossed with a single unit of work */
    int r;
    int calls = 0;
    while ((r = wheel_due(w, due, &work, &n)) == WHEEL_AGAIN) {
        work = 1;
        assert_true(++calls < 10);
    }
    assert_int_equal(r, WHEEL_DUE);
    /* one added now, at the same time, comes after all of them */
    t[N].n.when = due;
    t[N].seq = N;
    wheel_add(w, &t[N].n);
    for (int i = 0; i <= N; i++) {
        work = 1;
        assert_int_equal(wheel_due(w, due, &work, &n), WHEEL_DUE);
        assert_int_equal(tn(n)->seq, (uint64_t)i);
        wheel_del(w, n);
    }
    assert_int_equal(wheel_count(w), 0);
    free(t);
    free(w);
}

/* --- randomized property test against a linear scan ------------------------ */

static uint64_t rng;
static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int64_t random_delta(void) {
    switch (rnd() % 8) {
    case 0: return 0;
    case 1: return (int64_t)(rnd() % 4);
    case 2: return (int64_t)(rnd() % 64);
    case 3: return (int64_t)(rnd() % 5000);
    case 4: return (int64_t)(rnd() % 300000);
    case 5: return (int64_t)(rnd() % 20000000);
    case 6: return (int64_t)(rnd() % (INT64_C(1) << 36));
    default: return 64 - (int64_t)(rnd() % 3); /* slot edges */
    }
}

static void check_next(const struct wheel *w, const struct tnode *t, int n) {
    int64_t min = INT64_MAX;
    int live = 0;
    for (int i = 0; i < n; i++)
        if (t[i].live) {
            live++;
            if (t[i].n.when < min) min = t[i].n.when;
        }
    assert_int_equal(wheel_count(w), (uint64_t)live);
    int64_t nx = wheel_next(w);
    assert_true(nx <= min);
    if (min != INT64_MAX && w->pending < 0 && (min >> 6) == (w->cur >> 6))
        assert_int_equal(nx, min);
}

static void run_random(uint64_t seed) {
    enum { N = 256 };
    struct tnode t[N];
    memset(t, 0, sizeof t);
    rng = seed;
    int64_t now = (int64_t)(rnd() % (INT64_C(1) << 41));
    struct wheel *w = new_wheel(now);
    uint64_t seq = 0;
    for (int step = 0; step < 3000; step++) {
        unsigned op = (unsigned)(rnd() % 10);
        if (op < 4) { /* add */
            int i = (int)(rnd() % N);
            if (t[i].live) continue;
            int j = (int)(rnd() % N);
            if (rnd() % 3 == 0 && t[j].live && t[j].n.when >= now)
                t[i].n.when = t[j].n.when; /* a tie */
            else
                t[i].n.when = now + random_delta();
            t[i].seq = seq++;
            t[i].live = 1;
            wheel_add(w, &t[i].n);
        } else if (op < 5) { /* cancel */
            int i = (int)(rnd() % N);
            if (!t[i].live) continue;
            wheel_del(w, &t[i].n);
            t[i].live = 0;
        } else { /* time passes; pop some or all of what is due */
            if (op < 8) now += random_delta();
            int limit = rnd() % 2 ? (int)(rnd() % 8) : N;
            for (int k = 0; k < limit;) {
                uint32_t work = rnd() % 2 ? (uint32_t)(rnd() % 5) : UINT32_MAX;
                struct wheel_node *n;
                int r = wheel_due(w, now, &work, &n);
                if (r == WHEEL_AGAIN) {
                    assert_int_equal(work, 0);
                    continue;
                }
                /* The expected timer: smallest (when, seq) of all. */
                int best = -1;
                for (int i = 0; i < N; i++)
                    if (t[i].live &&
                        (best < 0 || t[i].n.when < t[best].n.when ||
                         (t[i].n.when == t[best].n.when &&
                          t[i].seq < t[best].seq)))
                        best = i;
                if (r == WHEEL_IDLE) {
                    if (best >= 0 && t[best].n.when <= now)
                        fail_msg("seed %llu step %d: timer due at %lld idle at %lld",
                                 (unsigned long long)seed, step,
                                 (long long)t[best].n.when, (long long)now);
                    break;
                }
                if (tn(n) != &t[best])
                    fail_msg("seed %llu step %d: got when %lld seq %llu, want "
                             "when %lld seq %llu",
                             (unsigned long long)seed, step,
                             (long long)tn(n)->n.when,
                             (unsigned long long)tn(n)->seq,
                             (long long)t[best].n.when,
                             (unsigned long long)t[best].seq);
                assert_true(n->when <= now);
                wheel_del(w, n);
                tn(n)->live = 0;
                k++;
            }
        }
        check_next(w, t, N);
    }
    free(w);
}

static void test_random_order(void **state) {
    uint64_t base = 0x9e3779b97f4a7c15ULL;
    const char *s = getenv("WHEEL_SEED");
    if (s) {
        run_random(strtoull(s, NULL, 0));
        return;
    }
    for (uint64_t i = 1; i <= 200; i++) run_random(base * i);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_basic_order),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_past_is_due_now),
        cmocka_unit_test(test_ten_years),
        cmocka_unit_test(test_next_bound),
        cmocka_unit_test(test_budgeted_cascade),
        cmocka_unit_test(test_same_time_splice),
        cmocka_unit_test(test_random_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
