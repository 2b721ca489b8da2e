/* http_json.h -- decoding the JSON bodies of HTTP requests (DESIGN §8), and
 * the one document several replies share: STATS counters.
 *
 * A pure function of the bytes: no socket, no core call, no clock, so it is
 * unit-tested and fuzzed alone (tests/fuzz/fuzz_http_json.c). Each request
 * kind accepts a fixed set of fields; anything else -- malformed JSON, a
 * field of the wrong type, an unknown field -- is an error whose message
 * names the field. Ranges are the core's to check (as for RESP).
 *
 * Durations ("delay", "ttr", "timeout") are integers of milliseconds or
 * strings such as "30m" (lib/duration.h); "at" is unix milliseconds or an
 * RFC 3339 string. The body is "body" (a JSON string, UTF-8) or
 * "body_base64", not both.
 */
#ifndef DQ_HTTP_JSON_H
#define DQ_HTTP_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

enum hj_kind {
    HJ_ADD,     /* POST /v1/topics/{t}/jobs */
    HJ_RESERVE, /* POST /v1/reserve */
    HJ_NACK,    /* .../nack {delay?} */
    HJ_TOUCH,   /* .../touch {ttr?} */
    HJ_KICK,    /* .../kick {count?} */
    HJ_NONE,    /* routes that take no fields ({} or no body) */
};

/* A decoded request. Strings point into the parsed document (or into
 * body_buf), so they live until hj_free. */
struct hj_req {
    void *doc;              /* the parsed document (json_t) */
    char *body_buf;         /* body_base64, decoded */
    struct core_add add;    /* HJ_ADD: every field but topic */
    struct dq_str *topics;  /* HJ_RESERVE */
    size_t ntopics;
    int64_t timeout;        /* HJ_RESERVE; CORE_UNSET when absent */
    int64_t count;          /* HJ_RESERVE, HJ_KICK */
    int64_t delay;          /* HJ_NACK */
    int64_t ttr;            /* HJ_TOUCH */
};

/* Decodes data[0..len) (len 0 = an empty object) as a request of `kind`.
 * Returns 0 and fills *out, or -1 with a message naming the field in err;
 * *out must be passed to hj_free either way. */
int hj_decode(int kind, const char *data, size_t len, struct hj_req *out,
              char *err, size_t errlen);
/* Frees what hj_decode allocated. Accepts a zeroed request. */
void hj_free(struct hj_req *r);

/* What of a struct dq_stats hj_stats renders. */
enum hj_stats_shape {
    HJ_STATS_FLAT,     /* GET /v1/stats, as RESP's STATS: jobs_<state> for
                          every state, then every counter */
    HJ_STATS_JOBS,     /* jobs per state: {<state>..., total} */
    HJ_STATS_COUNTERS, /* every counter: {added, reserved, ..., push_failed} */
};

/* The stats as a new JSON object (a json_t *, owned by the caller; void *
 * so that this header needs no jansson); NULL when out of memory. */
void *hj_stats(const struct dq_stats *s, int shape);

#endif
