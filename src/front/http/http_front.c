/* http_front.c -- evhttp on the server's loop: connections, the client
 * count, replies, graceful stop. See http_int.h for a request's path. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "core/metrics.h"
#include "front/http/http_int.h"
#include "lib/listen.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "lib/xalloc.h"

/* Seconds a connection may stay silent (headers half sent, or idle between
 * keep-alive requests) before evhttp closes it. */
#define HTTP_IDLE_TIMEOUT_S 120
#define HTTP_MAX_HEADERS (64 * 1024)

/* --- connections ------------------------------------------------------------- */

static uint64_t conn_hash(const struct hnode *n) {
    return ((const struct hconn *)n)->hash;
}

static uint64_t ptr_hash(const void *p) {
    return htab_hash_bytes(&p, sizeof p);
}

static void hreq_free(struct hreq *r) {
    struct http_front *f = r->f;
    if (r->watch) event_free(r->watch);
    if (f) {
        if (r->prev) r->prev->next = r->next;
        else f->reqs = r->next;
        if (r->next) r->next->prev = r->prev;
        f->inflight--;
    }
    hj_free(&r->in);
    dq_free(r);
}

/* r's client is gone: its reply is dropped, and a RESERVE waiting for jobs
 * is cancelled (jobs reserved for it go back). evhttp frees the request
 * unless it detached it from the connection (`ours`). */
static void hreq_orphan(struct hreq *r, bool ours) {
    r->hc = NULL;
    if (r->w) {
        core_reserve_cancel(r->w);
        r->w = NULL;
        if (ours && r->req) evhttp_request_free(r->req);
        r->req = NULL;
        hreq_free(r);
    } else if (!ours) {
        r->req = NULL; /* the completion frees r */
    }
}

/* evhttp closes the connection (the client left, a timeout, or ours). */
static void conn_close_cb(struct evhttp_connection *evcon, void *arg) {
    struct hconn *hc = arg;
    struct http_front *f = hc->f;
    for (struct hreq *r = f->reqs, *next; r; r = next) {
        next = r->next;
        if (r->hc == hc)
            hreq_orphan(r, r->req &&
                               evhttp_request_get_connection(r->req) == NULL);
    }
    htab_remove(&f->conns, &hc->hn, hc->hash);
    f->nconns--;
    metrics_clients(core_metrics(f->core), -1);
    dq_free(hc);
}

/* The hconn of evcon, counting a new one; NULL (after replying 503) when
 * --maxclients is reached. */
static struct hconn *conn_get(struct http_front *f,
                              struct evhttp_request *req) {
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    uint64_t h = ptr_hash(evcon);
    for (struct hnode *n = htab_bucket(&f->conns, h); n; n = n->next) {
        struct hconn *hc = (struct hconn *)n;
        if (hc->evcon == evcon) return hc;
    }
    uint64_t now = f->cfg.clients ? f->cfg.clients(f->cfg.ud) : f->nconns;
    if (now >= f->cfg.maxclients) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection",
                          "close");
        struct evbuffer *b = evbuffer_new();
        evbuffer_add_printf(b, "{\"error\":\"ERR\",\"message\":\"max number "
                               "of clients reached\"}\n");
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          "Content-Type", "application/json");
        evhttp_send_reply(req, 503, "Service Unavailable", b);
        evbuffer_free(b);
        return NULL;
    }
    struct hconn *hc = xcalloc(1, sizeof *hc);
    hc->hash = h;
    hc->f = f;
    hc->evcon = evcon;
    htab_insert(&f->conns, &hc->hn, h);
    f->nconns++;
    metrics_clients(core_metrics(f->core), 1);
    evhttp_connection_set_closecb(evcon, conn_close_cb, hc);
    return hc;
}

static void request_cb(struct evhttp_request *req, void *arg) {
    struct http_front *f = arg;
    struct hconn *hc = conn_get(f, req);
    if (!hc) return;
    struct hreq *r = xcalloc(1, sizeof *r);
    r->f = f;
    r->hc = hc;
    r->req = req;
    r->next = f->reqs;
    if (f->reqs) f->reqs->prev = r;
    f->reqs = r;
    f->inflight++;
    route_dispatch(r);
}

static void watch_cb(evutil_socket_t fd, short what, void *arg) {
    struct hreq *r = arg;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) {
        /* the client sent more (pipelining): evhttp reads it after the
         * reply; leaving the close undetected until then */
        return;
    }
    if (r->req && r->hc) /* closecb orphans r, cancelling its RESERVE */
        evhttp_connection_free(r->hc->evcon);
}

void hreq_watch(struct hreq *r) {
    if (!r->req || !r->hc) return;
    struct bufferevent *bev = evhttp_connection_get_bufferevent(r->hc->evcon);
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd < 0) return;
    r->watch = event_new(r->f->base, fd, EV_READ, watch_cb, r);
    event_add(r->watch, NULL);
}

/* --- replies ----------------------------------------------------------------- */

static const char *reason(int status) {
    switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 507: return "Insufficient Storage";
    default: return "Error";
    }
}

struct evbuffer *hreq_body(struct hreq *r) {
    return r->req ? evhttp_request_get_output_buffer(r->req) : NULL;
}

/* evhttp hands a reply to the connection's bufferevent, which writes it
 * when the next poll says the socket is writable: turning writing on, then
 * off and reading back on, one loop turn later. Running its write event
 * now writes the reply in this turn instead, so those changes cancel out
 * before the poll (libevent's changelist) and no epoll_ctl is made. If the
 * socket is not writable, the bufferevent waits for it as before.
 * ev_write comes from event2/bufferevent_struct.h, which libevent documents
 * as a layout later versions may change: checked against 2.1 (Debian 12). */
static void write_now(struct evhttp_connection *evcon) {
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon)
                                    : NULL;
    if (bev && evbuffer_get_length(bufferevent_get_output(bev)) > 0 &&
        (bufferevent_get_enabled(bev) & EV_WRITE))
        event_active(&bev->ev_write, EV_WRITE, 1);
}

void hreq_send(struct hreq *r, int status, const char *content_type) {
    if (r->req) {
        struct evhttp_connection *evcon = evhttp_request_get_connection(r->req);
        struct evkeyvalq *h = evhttp_request_get_output_headers(r->req);
        evhttp_add_header(h, "Content-Type", content_type);
        evhttp_send_reply(r->req, status, reason(status), NULL);
        write_now(evcon);
    }
    hreq_free(r);
}

void hreq_drop(struct hreq *r) {
    /* r->req, if any, is one evhttp detached from its connection: ours */
    if (r->req) evhttp_request_free(r->req);
    hreq_free(r);
}

void hreq_raw(struct hreq *r, int status, const char *content_type,
              const char *data, size_t len) {
    struct evbuffer *b = hreq_body(r);
    if (b) evbuffer_add(b, data, len);
    hreq_send(r, status, content_type);
}

static int dump_cb(const char *p, size_t n, void *ud) {
    return evbuffer_add(ud, p, n);
}

void hreq_json(struct hreq *r, int status, void *json) {
    json_t *doc = json;
    struct evbuffer *b = hreq_body(r);
    if (b) {
        if (json_dump_callback(doc, dump_cb, b, JSON_COMPACT) != 0) {
            evbuffer_drain(b, evbuffer_get_length(b));
            json_decref(doc);
            hreq_error(r, 500, "ERR", "cannot render the reply as JSON");
            return;
        }
        evbuffer_add(b, "\n", 1); /* a reply is a line, for curl users */
    }
    json_decref(doc);
    hreq_send(r, status, "application/json");
}

void hreq_error(struct hreq *r, int status, const char *code, const char *fmt,
                ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* the message may quote client bytes, cut anywhere: keep it ASCII */
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f) *p = '?';
    json_t *doc = json_pack("{ssss}", "error", code, "message", msg);
    hreq_json(r, status, doc);
}

void hreq_result_error(struct hreq *r, const struct dq_result *res) {
    int status;
    switch (res->status) {
    case DQ_NOTFOUND: status = 404; break;
    case DQ_EXISTS:
    case DQ_BUSY:
    case DQ_NOTRESERVED: status = 409; break;
    case DQ_TOOBIG: status = 413; break;
    case DQ_FULL: status = 507; break;
    case DQ_UNAVAILABLE: status = 503; break;
    case DQ_TIMEOUT: status = 504; break;
    case DQ_IOERR:
    case DQ_NOMEM: status = 500; break;
    default: status = 400; break; /* DQ_INVALID and anything unnamed */
    }
    const char *msg = res->errmsg ? res->errmsg : core_status_message(res->status);
    hreq_error(r, status, dq_status_code(res->status), "%s", msg);
}

/* --- the front end ------------------------------------------------------------ */

struct http_front *http_front_new(struct event_base *base, struct core *core,
                                  const struct http_front_config *cfg,
                                  char *err, size_t errlen) {
    struct http_front *f = xcalloc(1, sizeof *f);
    f->base = base;
    f->core = core;
    f->cfg = *cfg;
    f->started_ms = clock_ms();
    htab_init(&f->conns, 64, conn_hash);
    f->http = evhttp_new(base);
    if (!f->http) {
        snprintf(err, errlen, "cannot create the HTTP server");
        http_front_free(f);
        return NULL;
    }
    /* A body may carry --max-body bytes as base64 (4/3) inside JSON. */
    evhttp_set_max_body_size(f->http,
                             (ev_ssize_t)(cfg->max_body / 3 * 4 + 64 * 1024));
    evhttp_set_max_headers_size(f->http, HTTP_MAX_HEADERS);
    evhttp_set_timeout(f->http, HTTP_IDLE_TIMEOUT_S);
    evhttp_set_allowed_methods(f->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST |
                                            EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_HEAD);
    evhttp_set_gencb(f->http, request_cb, f);
    /* Our own listener: evhttp's own has a backlog of 128, and a burst
     * of connections past it waits out the SYN retry (a second). */
    char addr[300];
    struct evconnlistener *l = listen_tcp(base, cfg->bind, cfg->port, NULL,
                                          NULL, "HTTP", addr, sizeof addr, err,
                                          errlen);
    if (!l) {
        http_front_free(f);
        return NULL;
    }
    /* accepted sockets inherit it (Linux): replies leave at once */
    int one = 1;
    setsockopt(evconnlistener_get_fd(l), IPPROTO_TCP, TCP_NODELAY, &one,
               sizeof one);
    f->sock = evhttp_bind_listener(f->http, l);
    log_info("delayqd listening on %s (HTTP)", addr);
    return f;
}

void http_front_stop(struct http_front *f) {
    if (!f) return;
    f->stopping = true;
    if (f->sock) {
        evhttp_del_accept_socket(f->http, f->sock);
        f->sock = NULL;
    }
}

bool http_front_idle(const struct http_front *f) {
    return !f || f->inflight == 0;
}

uint64_t http_front_clients(const struct http_front *f) {
    return f ? f->nconns : 0;
}

void http_front_free(struct http_front *f) {
    if (!f) return;
    if (f->http) evhttp_free(f->http); /* closes connections: closecbs run */
    /* what is left has no connection; completions will drop it */
    for (struct hreq *r = f->reqs, *next; r; r = next) {
        next = r->next;
        r->f = NULL;
        hreq_orphan(r, true);
    }
    htab_destroy(&f->conns);
    dq_free(f);
}
