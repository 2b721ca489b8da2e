/* job.c -- helpers of the job model (see job.h). */
#include <strings.h>

#include "job.h"

static const char *const state_names[DQ_NSTATES] = {
    [DQ_DELAYED] = "delayed",
    [DQ_READY] = "ready",
    [DQ_RESERVED] = "reserved",
    [DQ_DEAD] = "dead",
};

const char *dq_state_name(int state) {
    if (state < 0 || state >= DQ_NSTATES) return NULL;
    return state_names[state];
}

int dq_state_parse(const char *s, size_t len) {
    for (int i = 0; i < DQ_NSTATES; i++) {
        const char *n = state_names[i];
        size_t nl = __builtin_strlen(n);
        if (nl == len && strncasecmp(n, s, len) == 0) return i;
    }
    return -1;
}

int64_t dq_backoff_delay(const struct dq_backoff *b, uint32_t attempts) {
    if (b->kind == DQ_BACKOFF_FIXED) return b->base;
    int64_t d = b->base;
    for (uint32_t i = 1; i < attempts && d < b->max; i++) d *= 2;
    if (d > b->max) d = b->max;
    return d;
}
