/* clock.h -- the wall clock, in the units the job model uses, and a
 * monotonic one for measuring durations and timeouts. */
#ifndef DQ_CLOCK_H
#define DQ_CLOCK_H

#include <stdint.h>

/* Unix time in milliseconds (CLOCK_REALTIME). */
int64_t clock_ms(void);
/* Unix time in microseconds (CLOCK_REALTIME). */
int64_t clock_us(void);
/* A monotonic clock in microseconds (CLOCK_MONOTONIC): for durations and
 * timeouts, never for due times. */
int64_t clock_mono_us(void);
/* The same in milliseconds. */
int64_t clock_mono_ms(void);
/* The monotonic clock as of the last timer tick (CLOCK_MONOTONIC_COARSE:
 * a few milliseconds behind at most, and several times cheaper to read):
 * for timeouts of seconds that are armed on every request. */
int64_t clock_coarse_us(void);

#endif
