/* dashboard.h -- the web dashboard (DESIGN §11).
 *
 * The page itself is three files in src/front/dashboard/assets/ (HTML, CSS,
 * JavaScript), turned into C arrays at build time (scripts/embed) and served
 * as they are: no framework, no request to any other host. Everything the
 * page shows comes from the HTTP API; this module adds the two read-only
 * views the API lacks for it, as JSON documents the HTTP front end serves:
 *
 *   GET /v1/server    version, uptime, store and its health, jobs, memory,
 *                     clients, the totals and fire-lag histogram (the page
 *                     turns successive readings into rates and p50/p99)
 *   GET /v1/overview  one page of topics with their counts, sorted (top-N
 *                     by backlog, dead, ...) and filtered, so 10,000 topics
 *                     never reach the browser at once
 *
 * It knows no transport: the HTTP front end (front/http) routes GET / and
 * /dashboard/... to dashboard_find, gathers a core snapshot and calls the
 * builders below. Errors: builders return NULL only when out of memory;
 * dashboard_query returns -1 with a message naming the parameter.
 */
#ifndef DQ_DASHBOARD_H
#define DQ_DASHBOARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct core;
struct core_snapshot;
struct dq_stats;

/* One embedded file. data is NUL-terminated (not counted in len). */
struct dash_asset {
    const char *path;         /* as requested: "/", "/dashboard/app.js" */
    const char *content_type; /* with charset for text */
    const char *data;
    size_t len;
};

/* The asset served at path (the query string already removed), or NULL.
 * "/" and "/index.html" are the page. The result is static. */
const struct dash_asset *dashboard_find(const char *path);

/* What the server panel shows that the core does not know. */
struct dash_server {
    const char *version;
    const char *mode;        /* "on", "readonly" */
    int64_t now;             /* unix ms */
    int64_t started;         /* unix ms when the server started */
    int64_t clients;         /* connected, every front end */
};

/* GET /v1/server from the store's STATS over all topics (one store call,
 * whatever the number of topics). Returns a new json_t * (the caller owns
 * it; void * so that this header needs no jansson), or NULL when out of
 * memory. */
void *dashboard_server_json(struct core *c, const struct dq_stats *total,
                            const struct dash_server *ds);

/* A GET /v1/overview request. */
enum dash_sort { DASH_SORT_READY, DASH_SORT_DELAYED, DASH_SORT_RESERVED,
                 DASH_SORT_DEAD, DASH_SORT_TOTAL, DASH_SORT_NAME };
struct dash_query {
    int sort;              /* enum dash_sort; default ready (the backlog) */
    uint32_t limit;        /* 1..1000, default 50 */
    uint64_t offset;       /* topics skipped after sorting */
    char match[201];       /* "" or a substring the topic must contain */
    char topic[201];       /* "" or the one topic wanted */
};

/* Parses the query string of GET /v1/overview (`sort`, `limit`, `offset`,
 * `match`, `topic`; NULL = none). Returns 0, or -1 with a message naming the
 * parameter in err. Unknown parameters are errors too. */
int dashboard_query(struct dash_query *q, const char *query, char *err,
                    size_t errlen);

/* GET /v1/overview: {now, ntopics, matched, topics: [...]} for q. Returns a
 * new json_t * (the caller owns it), or NULL when out of memory. */
void *dashboard_overview_json(const struct core_snapshot *s,
                              const struct dash_query *q, int64_t now);

#endif
