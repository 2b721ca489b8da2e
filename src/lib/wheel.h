/* wheel.h -- a hierarchical timing wheel with 1 ms resolution.
 *
 * Timers are intrusive: the caller embeds a struct wheel_node in its own
 * object, sets `when` (ms) and links it with wheel_add; the wheel never
 * allocates. 8 levels of 64 slots cover 2^48 ms (8900 years). A timer lives
 * at the level of the highest 6-bit group in which its time differs from the
 * wheel's current time, so every slot of level 0 holds a single millisecond.
 * A 64-bit occupancy bitmap per level finds the next non-empty slot with one
 * count-trailing-zeros; insert and cancel are O(1).
 *
 * Order: wheel_due hands timers out by time, timers with equal times in the
 * order they were added (no sequence number is stored; see wheel.c).
 *
 * Time: the wheel's current time only moves forward, to times passed to
 * wheel_due. A timer added with a time before the current time is due at the
 * current time. Times are clamped to [0, WHEEL_TIME_MAX] for placement.
 *
 * A struct wheel holds the heads of its slots and must not be moved or copied
 * once initialised. While a node is not in a wheel its next/prev links are
 * free for the caller's use (e.g. on a plain list).
 */
#ifndef DQ_WHEEL_H
#define DQ_WHEEL_H

#include <stdint.h>

#define WHEEL_LEVELS 8
#define WHEEL_SLOT_BITS 6
#define WHEEL_SLOTS (1 << WHEEL_SLOT_BITS)
#define WHEEL_TIME_MAX ((INT64_C(1) << (WHEEL_LEVELS * WHEEL_SLOT_BITS)) - 1)

struct wheel_node {
    struct wheel_node *next, *prev;
    int64_t when; /* ms; set by the caller before wheel_add */
};

struct wheel {
    int64_t cur;    /* current time */
    uint64_t count; /* timers held */
    int pending;    /* slot being cascaded down, or -1 */
    uint64_t occupied[WHEEL_LEVELS];
    struct wheel_node slot[WHEEL_LEVELS * WHEEL_SLOTS]; /* list heads */
    /* Bounds of the times in each occupied slot: every timer in slot i has
     * lo[i] <= when <= hi[i] (deletions leave them loose, never wrong). */
    int64_t lo[WHEEL_LEVELS * WHEEL_SLOTS], hi[WHEEL_LEVELS * WHEEL_SLOTS];
};

/* Return values of wheel_due. */
enum { WHEEL_IDLE = 0, WHEEL_DUE = 1, WHEEL_AGAIN = 2 };

/* Initialises an empty wheel whose current time is `now` (clamped to >= 0). */
void wheel_init(struct wheel *w, int64_t now);

/* Links n (n->when set) at the tail of its slot. O(1). */
void wheel_add(struct wheel *w, struct wheel_node *n);

/* Unlinks n, which must be in w. O(1). n's links are left dangling. */
void wheel_del(struct wheel *w, struct wheel_node *n);

/* Finds the earliest timer with when <= now, moving the current time forward
 * and cascading timers from higher levels down as needed. Each timer moved
 * costs one unit of *work (decremented). Returns WHEEL_DUE and sets *out to
 * the timer, which stays linked (wheel_del it to consume it); WHEEL_IDLE if
 * no timer is due at `now`; WHEEL_AGAIN if *work ran out before the answer
 * was known (call again: a partly cascaded slot resumes where it stopped). */
int wheel_due(struct wheel *w, int64_t now, uint32_t *work,
              struct wheel_node **out);

/* The time at which wheel_due will next find a timer, or INT64_MAX if the
 * wheel is empty. Never later than the earliest timer: it is the lower
 * bound of the first occupied slot, exact unless a deletion loosened it;
 * calling wheel_due at that time cascades the slot and the next answer is
 * exact. */
int64_t wheel_next(const struct wheel *w);

static inline uint64_t wheel_count(const struct wheel *w) { return w->count; }

#endif
