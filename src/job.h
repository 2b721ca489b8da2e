/* job.h -- the job model of DESIGN §2, shared by every layer.
 *
 * Nothing here allocates. A dq_str never owns its bytes: whoever hands one
 * out says how long they stay valid. Times are unix milliseconds (int64_t),
 * durations are milliseconds.
 */
#ifndef DQ_JOB_H
#define DQ_JOB_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

/* Limits of §2. The server validates requests against these before any store
 * sees them, so stores may assume their inputs are within range. */
#define DQ_TOPIC_MAX      200
#define DQ_ID_MAX         256
#define DQ_TTR_DEFAULT    30000
#define DQ_TTR_MAX        (7LL * 24 * 3600 * 1000)
#define DQ_RETRIES_DEFAULT 3
#define DQ_RETRIES_MAX    1000
#define DQ_BACKOFF_BASE_DEFAULT 1000
#define DQ_BACKOFF_MAX_DEFAULT  3600000
#define DQ_BACKOFF_LIMIT  DQ_TTR_MAX            /* largest base/max/fixed delay */
#define DQ_DUE_AHEAD_MAX  (3653LL * 24 * 3600 * 1000) /* ten years */
#define DQ_BODY_DEFAULT_MAX (1024 * 1024)
#define DQ_COUNT_MAX      1000                  /* RESERVE/LIST COUNT */
#define DQ_URL_MAX        2048                  /* push URL (§9) */
#define DQ_CTYPE_MAX      255                   /* push Content-Type */
#define DQ_CTYPE_DEFAULT  "application/octet-stream"

enum dq_state {
    DQ_DELAYED = 0,
    DQ_READY = 1,
    DQ_RESERVED = 2,
    DQ_DEAD = 3,
};
#define DQ_NSTATES 4

enum dq_backoff_kind {
    DQ_BACKOFF_EXP = 0,   /* base * 2^(attempts-1), capped at max */
    DQ_BACKOFF_FIXED = 1, /* always base */
};

/* NACK's delay for "dead at once, whatever the retries" (a push receiver
 * answered 410 Gone). */
#define DQ_NACK_DEAD (-2)

struct dq_backoff {
    uint8_t kind;  /* enum dq_backoff_kind */
    uint32_t base; /* ms */
    uint32_t max;  /* ms; unused for FIXED */
};

struct dq_str {
    const char *p;
    size_t len;
};

/* A read-only view of one job, as GET and RESERVE report it. */
struct dq_job {
    struct dq_str topic, id, body;
    enum dq_state state;
    int64_t due;      /* when it became (or becomes) ready */
    int64_t created;
    int64_t deadline; /* lease end; 0 unless reserved */
    uint32_t ttr;
    uint32_t retries;
    uint32_t attempts;
    struct dq_backoff backoff;
    /* Push delivery (§9): url.len 0 = none (the job is for RESERVE);
     * content_type.len 0 = the default. */
    struct dq_str url, content_type;
};

/* An ADD request, validated. */
struct dq_add {
    struct dq_str topic, id, body; /* id "*" = the store generates one */
    int64_t due;                   /* absolute unix ms, already clamped */
    uint32_t ttr;
    uint32_t retries;
    struct dq_backoff backoff;
    bool replace;
    int64_t now; /* the request's one clock read (unix ms); 0 = the store reads its own */
    struct dq_str url, content_type; /* push delivery; len 0 = none */
};

/* Counters of STATS: totals since start (or since the log began, for a
 * durable store) and current jobs per state. */
struct dq_stats {
    uint64_t jobs[DQ_NSTATES]; /* indexed by enum dq_state */
    uint64_t added, reserved, acked, nacked, expired, dead, deleted, kicked;
    /* Due time (unix ms) of the ready job handed out next, the one that has
     * waited longest; 0 = no ready job, or the store does not say (Redis,
     * and the all-topics STATS). */
    int64_t oldest_ready;
    /* Push delivery since this server started (the core fills these from
     * its metrics; stores leave them 0). */
    uint64_t pushed, push_failed;
};

/* "delayed", "ready", ...; NULL for an out-of-range value. */
const char *dq_state_name(int state);
/* The state named by s (case-insensitive), or -1. */
int dq_state_parse(const char *s, size_t len);

/* Backoff delay before the retry that follows attempt number `attempts`
 * (>= 1). Never overflows: the result is at most DQ_BACKOFF_LIMIT. */
int64_t dq_backoff_delay(const struct dq_backoff *b, uint32_t attempts);

#endif
