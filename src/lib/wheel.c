/* wheel.c -- hierarchical timing wheel (see wheel.h).
 *
 * Placement. With `cur` the current time, a timer of time t > cur sits at
 * level L = the highest 6-bit group in which t and cur differ, in slot
 * (t >> 6L) & 63 of that level. All groups above L are equal and t's group L
 * is larger than cur's, so on every level the occupied slots lie strictly
 * after cur's own slot (no wrap-around), every timer of level L is earlier
 * than every timer of level L+1, and timers with equal times always share a
 * slot. A timer with t <= cur sits in level 0, slot cur & 63 (due now).
 *
 * Moving time. wheel_due looks for the lowest occupied level. On level 0 the
 * first occupied slot is one exact millisecond. On a higher level it moves
 * cur to the start of the first occupied slot (nothing lies between) and
 * cascades that slot: each timer is placed again relative to the new cur,
 * which puts it on a lower level. Cascading costs one unit of work per timer,
 * so a slot of a million timers due in the same millisecond is cascaded over
 * several calls; until it is done, the slot is `pending` and nothing is
 * handed out.
 *
 * Bursts. Each slot keeps bounds [lo, hi] of its timers' times. A slot
 * whose bounds are equal holds timers of one time only, and is cascaded by
 * splicing its whole list into the target slot in O(1): a million timers due
 * in the same millisecond cost nothing until they are handed out.
 *
 * Stable ties without a sequence number. Within a slot, timers are appended,
 * so equal times keep the order they were added in. When a slot is
 * cascaded, all levels below it were empty when the cascade began (it was
 * the lowest occupied level); timers added since then went to those lower
 * levels and are later than every timer still in the pending slot. So the
 * cascade takes timers from the TAIL of the pending slot and pushes each at
 * the HEAD of its target slot: the cascaded timers keep their order and end
 * up before every later-added timer of the same time. Deleting a timer of
 * the pending slot between two calls is a plain unlink.
 */
#include <stdbool.h>
#include <stddef.h>

#include "lib/wheel.h"

#define LEVEL_MASK ((uint64_t)WHEEL_SLOTS - 1)

static int64_t clamp_time(int64_t t) {
    if (t < 0) return 0;
    if (t > WHEEL_TIME_MAX) return WHEEL_TIME_MAX;
    return t;
}

void wheel_init(struct wheel *w, int64_t now) {
    w->cur = clamp_time(now);
    w->count = 0;
    w->pending = -1;
    for (int l = 0; l < WHEEL_LEVELS; l++) w->occupied[l] = 0;
    for (int i = 0; i < WHEEL_LEVELS * WHEEL_SLOTS; i++) {
        w->slot[i].next = w->slot[i].prev = &w->slot[i];
        w->slot[i].when = 0;
    }
}

/* Start time of slot s of `level`, given the current time. */
static int64_t slot_start(int64_t cur, int level, unsigned s) {
    unsigned shift = (unsigned)level * WHEEL_SLOT_BITS;
    uint64_t hi = (uint64_t)cur >> (shift + WHEEL_SLOT_BITS)
                                 << (shift + WHEEL_SLOT_BITS);
    return (int64_t)(hi | ((uint64_t)s << shift));
}

/* Index into w->slot of the slot a timer of time `when` belongs to now. */
static unsigned slot_of(const struct wheel *w, int64_t when) {
    int64_t t = clamp_time(when);
    if (t <= w->cur) return (unsigned)(w->cur & (int64_t)LEVEL_MASK);
    uint64_t x = (uint64_t)t ^ (uint64_t)w->cur;
    unsigned level = (unsigned)(63 - __builtin_clzll(x)) / WHEEL_SLOT_BITS;
    unsigned s = (unsigned)((uint64_t)t >> (level * WHEEL_SLOT_BITS)) & LEVEL_MASK;
    return level * WHEEL_SLOTS + s;
}

static bool marked(const struct wheel *w, unsigned idx) {
    return w->occupied[idx / WHEEL_SLOTS] & (UINT64_C(1) << (idx % WHEEL_SLOTS));
}

static void mark(struct wheel *w, unsigned idx) {
    w->occupied[idx / WHEEL_SLOTS] |= UINT64_C(1) << (idx % WHEEL_SLOTS);
}

/* Widens the bounds of slot idx to include t (idx is about to hold it). */
static void bound(struct wheel *w, unsigned idx, int64_t t) {
    if (!marked(w, idx)) {
        w->lo[idx] = w->hi[idx] = t;
    } else {
        if (t < w->lo[idx]) w->lo[idx] = t;
        if (t > w->hi[idx]) w->hi[idx] = t;
    }
}

static void unmark(struct wheel *w, unsigned idx) {
    w->occupied[idx / WHEEL_SLOTS] &= ~(UINT64_C(1) << (idx % WHEEL_SLOTS));
}

void wheel_add(struct wheel *w, struct wheel_node *n) {
    unsigned idx = slot_of(w, n->when);
    struct wheel_node *head = &w->slot[idx];
    bound(w, idx, clamp_time(n->when));
    n->next = head;
    n->prev = head->prev;
    head->prev->next = n;
    head->prev = n;
    mark(w, idx);
    w->count++;
}

void wheel_del(struct wheel *w, struct wheel_node *n) {
    struct wheel_node *p = n->prev, *q = n->next;
    p->next = q;
    q->prev = p;
    /* p == q only if the circle was {n, head}: the slot is now empty. */
    if (p == q) unmark(w, (unsigned)(p - w->slot));
    w->count--;
}

/* Moves timers of the pending slot down, tail first, each to the head of
 * its new slot. Returns 0 when done, -1 if *work ran out. */
static int cascade(struct wheel *w, uint32_t *work) {
    struct wheel_node *head = &w->slot[w->pending];
    if (head->next != head && w->lo[w->pending] == w->hi[w->pending]) {
        /* one time only: splice the whole list before the target's */
        unsigned idx = slot_of(w, w->lo[w->pending]);
        struct wheel_node *t = &w->slot[idx], *first = head->next,
                          *last = head->prev;
        bound(w, idx, w->lo[w->pending]);
        last->next = t->next;
        t->next->prev = last;
        t->next = first;
        first->prev = t;
        head->next = head->prev = head;
        mark(w, idx);
    }
    while (head->prev != head) {
        if (work && *work == 0) return -1;
        if (work) (*work)--;
        struct wheel_node *n = head->prev;
        head->prev = n->prev;
        n->prev->next = head;
        unsigned idx = slot_of(w, n->when);
        struct wheel_node *t = &w->slot[idx];
        bound(w, idx, clamp_time(n->when));
        n->prev = t;
        n->next = t->next;
        t->next->prev = n;
        t->next = n;
        mark(w, idx);
    }
    unmark(w, (unsigned)w->pending);
    w->pending = -1;
    return 0;
}

int wheel_due(struct wheel *w, int64_t now, uint32_t *work,
              struct wheel_node **out) {
    for (;;) {
        if (w->pending >= 0 && cascade(w, work) < 0) return WHEEL_AGAIN;
        unsigned s0 = (unsigned)(w->cur & (int64_t)LEVEL_MASK);
        if (w->occupied[0] & (UINT64_C(1) << s0)) {
            if (w->cur > now) return WHEEL_IDLE;
            *out = w->slot[s0].next;
            return WHEEL_DUE;
        }
        int level = 0;
        while (level < WHEEL_LEVELS && !w->occupied[level]) level++;
        if (level == WHEEL_LEVELS) return WHEEL_IDLE;
        unsigned s = (unsigned)__builtin_ctzll(w->occupied[level]);
        int64_t t = slot_start(w->cur, level, s);
        if (t > now) return WHEEL_IDLE;
        w->cur = t;
        if (level > 0) w->pending = level * WHEEL_SLOTS + (int)s;
    }
}

int64_t wheel_next(const struct wheel *w) {
    if (w->count == 0) return INT64_MAX;
    if (w->pending >= 0) {
        const struct wheel_node *h = &w->slot[w->pending];
        if (h->next != h) return w->cur;
    }
    for (int level = 0; level < WHEEL_LEVELS; level++) {
        uint64_t occ = w->occupied[level];
        if (!occ) continue;
        unsigned s = (unsigned)__builtin_ctzll(occ);
        int64_t t = slot_start(w->cur, level, s);
        if (level == 0) return t;
        /* A short slot is scanned for its exact minimum; a long one
         * answers with its lower bound. */
        unsigned idx = (unsigned)level * WHEEL_SLOTS + s;
        const struct wheel_node *h = &w->slot[idx], *n = h->next;
        int64_t min = INT64_MAX;
        for (int k = 0; n != h && k < 16; k++, n = n->next)
            if (n->when < min) min = n->when;
        if (n == h) return min;
        return w->lo[idx] > t ? w->lo[idx] : t;
    }
    return INT64_MAX; /* not reached: count > 0 */
}
