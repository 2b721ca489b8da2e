/* dash_routes.c -- the dashboard's routes on the HTTP front end (DESIGN §11):
 * its embedded files, GET /v1/server and GET /v1/overview (rendered by
 * front/dashboard), and the read-only guard. See http_int.h.
 */
#include <event2/http.h>
#include <string.h>

#include "front/dashboard/dashboard.h"
#include "front/http/http_int.h"
#include "lib/clock.h"
#include "lib/xalloc.h"
#include "version.h"

static const char *mode_name(int mode) {
    return mode == HTTP_DASHBOARD_READONLY ? "readonly"
           : mode == HTTP_DASHBOARD_ON     ? "on"
                                           : "off";
}

void dash_asset(struct hreq *r, const char *path) {
    const struct dash_asset *a =
        r->f->cfg.dashboard != HTTP_DASHBOARD_OFF ? dashboard_find(path) : NULL;
    if (!a) {
        hreq_error(r, 404, "NOTFOUND", "no such route (see docs/http.md)");
        return;
    }
    struct evkeyvalq *h = evhttp_request_get_output_headers(r->req);
    /* the page is small and changes with the binary: always revalidate */
    evhttp_add_header(h, "Cache-Control", "no-cache");
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(h, "Content-Security-Policy",
                      "default-src 'self'; img-src 'self' data:; "
                      "frame-ancestors 'none'");
    hreq_raw(r, 200, a->content_type, a->data, a->len);
}

bool dash_refuses(struct hreq *r, int method) {
    if (method == EVHTTP_REQ_GET || r->f->cfg.dashboard != HTTP_DASHBOARD_READONLY)
        return false;
    /* A browser sends Origin with every POST and DELETE, and a script cannot
     * remove it; the page also marks its own requests. Clients that are not
     * browsers are the bearer token's business. */
    struct evkeyvalq *in = evhttp_request_get_input_headers(r->req);
    if (!evhttp_find_header(in, "Origin") &&
        !evhttp_find_header(in, "X-Delayq-Dashboard"))
        return false;
    hreq_error(r, 403, "READONLY", "the dashboard is read-only "
                                   "(--dashboard readonly): changes from a "
                                   "browser are refused");
    return true;
}

struct dash_req {
    struct hreq *r;
    struct dash_query q; /* overview */
};

static bool gone(struct hreq *r) {
    if (r->req && r->f) return false;
    hreq_raw(r, 0, NULL, NULL, 0); /* the client is gone: frees r */
    return true;
}

static bool snapshot_failed(struct hreq *r, const struct core_snapshot *s) {
    if (s->status == DQ_OK) return false;
    struct dq_result res = {.status = s->status, .errmsg = "the store did not answer"};
    hreq_result_error(r, &res);
    return true;
}

static void done_server(void *pd, const struct dq_result *res) {
    struct hreq *r = pd;
    if (gone(r)) return;
    if (res->status != DQ_OK) {
        hreq_result_error(r, res);
        return;
    }
    struct http_front *f = r->f;
    struct dash_server ds = {
        .version = DELAYQ_VERSION,
        .mode = mode_name(f->cfg.dashboard),
        .now = clock_ms(),
        .started = f->started_ms,
        .clients = (int64_t)(f->cfg.clients ? f->cfg.clients(f->cfg.ud) : f->nconns),
    };
    hreq_json(r, 200, dashboard_server_json(f->core, res->stats, &ds));
}

void dash_server(struct hreq *r) {
    /* the totals only: one store call, whatever the number of topics */
    core_stats(r->f->core, (struct dq_str){"", 0}, done_server, r);
}

static void done_overview(void *pd, const struct core_snapshot *s) {
    struct dash_req *d = pd;
    struct hreq *r = d->r;
    if (!gone(r) && !snapshot_failed(r, s))
        hreq_json(r, 200, dashboard_overview_json(s, &d->q, clock_ms()));
    dq_free(d);
}

/* ?topic=T: that topic's STATS alone, one store call. */
static void done_one_topic(void *pd, const struct dq_result *res) {
    struct dash_req *d = pd;
    struct hreq *r = d->r;
    if (gone(r)) {
        dq_free(d);
        return;
    }
    if (res->status != DQ_OK) {
        hreq_result_error(r, res);
        dq_free(d);
        return;
    }
    struct core_topic_stats t = {
        .topic = {d->q.topic, strlen(d->q.topic)},
        .stats = *res->stats,
    };
    uint64_t jobs = 0;
    for (int i = 0; i < DQ_NSTATES; i++) jobs += t.stats.jobs[i];
    /* a topic without jobs is not listed, as in TOPICS */
    struct core_snapshot s = {.status = DQ_OK, .topics = &t, .ntopics = jobs > 0};
    hreq_json(r, 200, dashboard_overview_json(&s, &d->q, clock_ms()));
    dq_free(d);
}

void dash_overview(struct hreq *r, const char *query) {
    struct dash_req *d = xcalloc(1, sizeof *d);
    char err[200];
    if (dashboard_query(&d->q, query, err, sizeof err) != 0) {
        dq_free(d);
        hreq_error(r, 400, "ERR", "%s", err);
        return;
    }
    d->r = r;
    if (d->q.topic[0])
        core_stats(r->f->core, (struct dq_str){d->q.topic, strlen(d->q.topic)},
                   done_one_topic, d);
    else
        core_snapshot(r->f->core, done_overview, d);
}
