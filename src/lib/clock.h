/* clock.h -- the wall clock, in the units the job model uses. */
#ifndef DQ_CLOCK_H
#define DQ_CLOCK_H

#include <stdint.h>

/* Unix time in milliseconds (CLOCK_REALTIME). */
int64_t clock_ms(void);
/* Unix time in microseconds (CLOCK_REALTIME). */
int64_t clock_us(void);

#endif
