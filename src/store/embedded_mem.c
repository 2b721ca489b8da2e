/* embedded_mem.c -- the embedded store gives memory back (embedded_int.h):
 * purged topics' jobs freed a budgeted step at a time between I/O, emptied
 * slab pages unmapped, and malloc_trim after a large drop of jobs in RAM,
 * with their INFO fields.
 */
#include <event2/event.h>
#include <inttypes.h>
#include <malloc.h>

#include "engine/engine.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "store/embedded_int.h"

#define TRIM_MIN 65536      /* jobs gone since the peak before memory is trimmed */
#define TRIM_DELAY_MS 200   /* after the drop, so a burst of removals is done */

/* Jobs are malloc'd one by one, so after a PURGE or a drain their memory
 * is free inside the heap but still resident: malloc_trim hands the free
 * pages back to the kernel (MADV_DONTNEED). Done once the removals have
 * settled, and only after a large drop, so it costs nothing in steady
 * state. */
void em_trim_cb(evutil_socket_t fd, short what, void *arg) {
    struct dq_store *s = arg;
    s->trim_armed = false;
    int64_t t0 = clock_mono_us();
    malloc_trim(0);
    s->trim_us = clock_mono_us() - t0;
    if (s->trim_us > s->trim_us_max) s->trim_us_max = s->trim_us;
    s->trims++;
    s->trim_peak = engine_count(s->eng) - engine_far_count(s->eng);
    log_debug("memory trimmed in %" PRId64 " us", s->trim_us);
}

void em_note_count(struct dq_store *s) {
    uint64_t n = engine_count(s->eng) - engine_far_count(s->eng);
    if (n > s->trim_peak) {
        s->trim_peak = n;
    } else if (!s->trim_armed && s->trim_ev && s->trim_peak - n >= TRIM_MIN &&
               n < s->trim_peak / 2) {
        struct timeval tv = {0, TRIM_DELAY_MS * 1000};
        event_add(s->trim_ev, &tv);
        s->trim_armed = true;
    }
}

#define REAP_BUDGET 2048 /* purged jobs (and buckets) freed per step: ~1 ms */
#define RELEASE_PAGES 8  /* emptied 2 MiB pages unmapped per step: < 1 ms */

/* Purged topics (a PURGE, or a replayed one) wait to be freed, and
 * emptied pages to be given back. */
void em_reap_soon(struct dq_store *s) {
    if (s->reap_ev &&
        (engine_reap(s->eng, 0) || engine_give_back(s->eng, 0) > 0) &&
        !evtimer_pending(s->reap_ev, NULL)) {
        struct timeval tv = {0, 0};
        event_add(s->reap_ev, &tv);
    }
}

void em_reap_cb(evutil_socket_t fd, short what, void *arg) {
    struct dq_store *s = arg;
    s->in_engine = 1;
    int64_t t0 = clock_mono_us();
    bool more = engine_reap(s->eng, REAP_BUDGET);
    more |= engine_give_back(s->eng, RELEASE_PAGES) > 0;
    int64_t took = clock_mono_us() - t0;
    if (took > s->reap_us_max) s->reap_us_max = took;
    s->in_engine = 0;
    if (more) {
        struct timeval tv = {0, 0};
        event_add(s->reap_ev, &tv);
    } else if (!s->trim_armed) { /* all freed: give back what the heap holds */
        struct timeval tv = {0, TRIM_DELAY_MS * 1000};
        event_add(s->trim_ev, &tv);
        s->trim_armed = true;
    }
}

void em_mem_info(struct dq_store *s, dq_info_emit *emit, void *ud) {
    dq_info_int(emit, ud, "memory_trims", (int64_t)s->trims);
    dq_info_int(emit, ud, "memory_trim_last_us", s->trim_us);
    dq_info_int(emit, ud, "memory_trim_max_us", s->trim_us_max);
    dq_info_int(emit, ud, "purge_freeing",
                engine_reap(s->eng, 0) || engine_give_back(s->eng, 0) > 0);
    dq_info_int(emit, ud, "purge_free_step_max_us", s->reap_us_max);
}
