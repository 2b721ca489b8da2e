/* http_int.h -- what the HTTP front end's modules share.
 *
 *   http_front.c  evhttp on the loop: connections, client count, auth,
 *                 replies, graceful stop
 *   routes.c      the route table: path and query, call the core, render
 *   http_json.c   JSON request bodies, decoded by a pure function
 *   prom.c        the metrics table in Prometheus text format
 *
 * One request's path: evhttp parses it and calls http_front.c, which
 * counts the connection, checks the bearer token and makes a `struct
 * hreq`; routes.c finds the route, decodes the body and calls the core with
 * the hreq as privdata; the completion renders JSON and replies. If the
 * client goes away first, the hreq is orphaned (its reply dropped) and a
 * waiting RESERVE is cancelled, which gives its jobs back.
 */
#ifndef DQ_HTTP_INT_H
#define DQ_HTTP_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/core.h"
#include "front/http/http_front.h"
#include "front/http/http_json.h"
#include "lib/buf.h"
#include "lib/htab.h"

struct evhttp;
struct evhttp_bound_socket;
struct evhttp_connection;
struct evhttp_request;
struct evbuffer;
struct event;
struct event_base;

struct http_front {
    struct event_base *base;
    struct core *core;
    struct http_front_config cfg;
    struct evhttp *http;
    struct evhttp_bound_socket *sock;
    struct htab conns;   /* struct hconn by evhttp_connection */
    uint64_t nconns;
    struct hreq *reqs;   /* not answered yet */
    uint64_t inflight;
    bool stopping;
    int64_t started_ms;  /* unix ms, for the dashboard's uptime */
};

/* A connection that has sent at least one request. */
struct hconn {
    struct hnode hn;
    uint64_t hash;
    struct http_front *f;
    struct evhttp_connection *evcon;
};

/* One request until it is answered. */
struct hreq {
    struct hreq *prev, *next; /* in f->reqs */
    struct http_front *f;      /* NULL once the front end is gone */
    struct hconn *hc;          /* NULL once the connection is gone */
    struct evhttp_request *req;/* NULL when the reply has nowhere to go */
    struct core_wait *w;       /* a RESERVE that may wait */
    struct event *watch;       /* notices the client leave meanwhile */
    struct hj_req in;          /* the decoded body */
    char topic[DQ_TOPIC_MAX + 1]; /* ADD's reply names it */
};

/* --- http_front.c --- */
/* Reply and free r: status with a JSON document (stolen), or raw bytes.
 * When the client is gone (r->req NULL) they only free r. */
void hreq_json(struct hreq *r, int status, void *json);
/* For replies written by hand: the body buffer (NULL when the client is
 * gone), then hreq_send replies with it and frees r. */
struct evbuffer *hreq_body(struct hreq *r);
void hreq_send(struct hreq *r, int status, const char *content_type);
void hreq_raw(struct hreq *r, int status, const char *content_type,
              const char *data, size_t len);
/* While r waits (a long-poll RESERVE), watch its socket: when the client
 * closes it the connection is closed, which cancels r (evhttp itself does
 * not read while a request is unanswered). */
void hreq_watch(struct hreq *r);
/* The client or the front end is gone (r->req NULL, or r->f NULL): frees
 * r without a reply. */
void hreq_drop(struct hreq *r);
/* Replies {"error": code, "message": ...} and frees r. */
void hreq_error(struct hreq *r, int status, const char *code, const char *fmt,
                ...) __attribute__((format(printf, 4, 5)));
/* Replies the error of a core result (its status mapped to HTTP). */
void hreq_result_error(struct hreq *r, const struct dq_result *res);

/* --- routes.c --- */
void route_dispatch(struct hreq *r);

/* --- dash_routes.c: the dashboard (front/dashboard) --- */
/* Replies the embedded file at path, or 404 (also with --dashboard off). */
void dash_asset(struct hreq *r, const char *path);
/* GET /v1/server and GET /v1/overview?query (NULL = none); they reply. */
void dash_server(struct hreq *r);
void dash_overview(struct hreq *r, const char *query);
/* --dashboard readonly: a change (method not GET) from a browser (Origin
 * or the page's X-Delayq-Dashboard header) is refused with 403 READONLY.
 * Returns true when it replied so. */
bool dash_refuses(struct hreq *r, int method);

/* --- prom.c --- */
/* Appends the metrics table and the store's snapshot to out in the
 * Prometheus text format 0.0.4. */
void prom_render(struct buf *out, const struct metrics *m,
                 const struct core_snapshot *s);

#endif
