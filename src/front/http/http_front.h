/* http_front.h -- the HTTP/JSON front end and /metrics (DESIGN §8).
 *
 * libevent's evhttp on the server's loop. It parses requests, calls the
 * core and renders results as JSON (or Prometheus text for /metrics); it
 * holds no job state of its own. The server (server/server.c) creates it
 * beside the core and the RESP front end.
 */
#ifndef DQ_HTTP_FRONT_H
#define DQ_HTTP_FRONT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct core;
struct event_base;
struct http_front;

struct http_front_config {
    const char *bind;
    int port;
    const char *requirepass; /* NULL = no auth; else "Bearer SECRET" */
    uint64_t max_body;       /* --max-body; request bodies may be larger by
                                the JSON and base64 overhead */
    uint64_t maxclients;     /* RESP and HTTP together, see clients() */
    int dashboard;           /* enum http_dashboard, passed on */
    uint64_t (*clients)(void *ud); /* clients of every front end */
    void *ud;
};

enum http_dashboard { HTTP_DASHBOARD_OFF, HTTP_DASHBOARD_READONLY,
                      HTTP_DASHBOARD_ON };

/* Listens on bind:port. Returns the front end, or NULL with a message in
 * err. cfg is copied; its strings must outlive the front end. */
struct http_front *http_front_new(struct event_base *base, struct core *core,
                                  const struct http_front_config *cfg,
                                  char *err, size_t errlen);
/* Graceful stop: no new connections; requests in flight are answered. */
void http_front_stop(struct http_front *f);
/* Whether every request has been answered. */
bool http_front_idle(const struct http_front *f);
/* Closes every connection and frees f. Accepts NULL. Core requests still
 * in flight are orphaned: their completions are dropped. */
void http_front_free(struct http_front *f);
/* Connected HTTP clients (connections that have sent a request). */
uint64_t http_front_clients(const struct http_front *f);

#endif
