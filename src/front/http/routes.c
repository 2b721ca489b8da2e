/* routes.c -- the HTTP route table (DESIGN §8): path and query, call the
 * core, render JSON.
 *
 * Each route is one entry {method, path, flags, body, handler, help}; a
 * path segment "{topic}" or "{id}" captures that segment, percent-decoded.
 * A handler turns the request into one core call with the hreq as
 * privdata, answering at once only what the core cannot know (a body or
 * query it cannot decode); the core checks every value as it does for
 * RESP, and a done_* callback renders the result. A handler never touches
 * the hreq after calling the core: the completion may already have freed
 * it.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <sys/queue.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/metrics.h"
#include "front/http/http_int.h"
#include "lib/base64.h"
#include "lib/xalloc.h"

#define ROUTE_NOAUTH 1 /* open without the bearer token (/healthz) */

#define MAX_SEGMENTS 8

struct route_args {
    struct dq_str topic, id;
    struct evkeyvalq *query;
    const char *body;
    size_t body_len;
};

struct route {
    int method; /* EVHTTP_REQ_* */
    const char *path;
    int flags;
    int body;   /* enum hj_kind the body decodes as */
    void (*fn)(struct hreq *r, struct route_args *a);
    const char *help;
};

static struct core *core_of(struct hreq *r) { return r->f->core; }

/* --- rendering -------------------------------------------------------------- */

/* body when the bytes are UTF-8, else body_base64. */
static void set_body(json_t *o, struct dq_str body) {
    json_t *s = json_stringn(body.p, body.len);
    if (s) {
        json_object_set_new(o, "body", s);
        return;
    }
    char *b = xmalloc(BASE64_ENCODED_LEN(body.len) + 1);
    size_t n = base64_encode(body.p, body.len, b);
    json_object_set_new(o, "body_base64", json_stringn(b, n));
    dq_free(b);
}

/* A string that came through the core's checks (printable ASCII). */
static json_t *jstr(struct dq_str s) { return json_stringn(s.p, s.len); }

/* The status is an error: replied (returns true). */
static bool failed(struct hreq *r, const struct dq_result *res) {
    if (!r->req || !r->f) { /* the client or the front end is gone */
        hreq_drop(r);
        return true;
    }
    if (res->status == DQ_OK) return false;
    hreq_result_error(r, res);
    return true;
}

/* The hot replies are written by hand, without building a document. */
static void reply_int(struct hreq *r, const struct dq_result *res,
                      const char *key) {
    if (failed(r, res)) return;
    evbuffer_add_printf(hreq_body(r), "{\"%s\":%" PRId64 "}\n", key, res->n);
    hreq_send(r, 200, "application/json");
}

/* s as a JSON string: s is printable ASCII (a checked topic or id). */
static void add_ascii(struct evbuffer *b, const char *s, size_t n) {
    evbuffer_add(b, "\"", 1);
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && s[j] != '"' && s[j] != '\\') j++;
        evbuffer_add(b, s + i, j - i);
        if (j < n) {
            char esc[2] = {'\\', s[j]};
            evbuffer_add(b, esc, 2);
            j++;
        }
        i = j;
    }
    evbuffer_add(b, "\"", 1);
}

static void done_deleted(void *pd, const struct dq_result *res) {
    reply_int(pd, res, "deleted");
}
static void done_acked(void *pd, const struct dq_result *res) {
    reply_int(pd, res, "acked");
}
static void done_deadline(void *pd, const struct dq_result *res) {
    reply_int(pd, res, "deadline");
}
static void done_kicked(void *pd, const struct dq_result *res) {
    reply_int(pd, res, "kicked");
}
static void done_removed(void *pd, const struct dq_result *res) {
    reply_int(pd, res, "removed");
}

static void done_state(void *pd, const struct dq_result *res) {
    struct hreq *r = pd;
    if (failed(r, res)) return;
    hreq_json(r, 200, json_pack("{ss}", "state", dq_state_name((int)res->n)));
}

static void done_add(void *pd, const struct dq_result *res) {
    struct hreq *r = pd;
    if (failed(r, res)) return;
    struct evbuffer *b = hreq_body(r);
    evbuffer_add(b, "{\"topic\":", 9);
    add_ascii(b, r->topic, strlen(r->topic));
    evbuffer_add(b, ",\"id\":", 6);
    add_ascii(b, res->id.p, res->id.len);
    evbuffer_add(b, "}\n", 2);
    hreq_send(r, 201, "application/json");
}

static void done_get(void *pd, const struct dq_result *res) {
    struct hreq *r = pd;
    if (failed(r, res)) return;
    if (res->njobs == 0) {
        hreq_error(r, 404, "NOTFOUND", "no job with this id in topic '%s'",
                   r->topic);
        return;
    }
    const struct dq_job *j = &res->jobs[0];
    json_t *o = json_pack("{soso ss}", "topic", jstr(j->topic), "id",
                          jstr(j->id), "state", dq_state_name(j->state));
    set_body(o, j->body);
    json_object_set_new(o, "due", json_integer(j->due));
    json_object_set_new(o, "ttr", json_integer(j->ttr));
    json_object_set_new(o, "retries", json_integer(j->retries));
    json_object_set_new(o, "attempts", json_integer(j->attempts));
    json_object_set_new(o, "created", json_integer(j->created));
    if (j->state == DQ_RESERVED)
        json_object_set_new(o, "deadline", json_integer(j->deadline));
    if (j->url.len) { /* push delivery (§9) */
        json_object_set_new(o, "url", jstr(j->url));
        json_object_set_new(o, "content_type",
                            j->content_type.len
                                ? jstr(j->content_type)
                                : json_string(DQ_CTYPE_DEFAULT));
        const struct core_push_note *n =
            core_push_note_get(core_of(r), j->topic, j->id);
        if (n) /* the last attempt failed */
            json_object_set_new(o, "last_push",
                                json_pack("{sIsIsIss}", "at", (json_int_t)n->at,
                                          "attempt", (json_int_t)n->attempt,
                                          "status", (json_int_t)n->status,
                                          "error", n->error));
    }
    hreq_json(r, 200, o);
}

static void done_reserve(void *pd, const struct dq_result *res) {
    struct hreq *r = pd;
    r->w = NULL;
    if (r->watch) {
        event_free(r->watch);
        r->watch = NULL;
    }
    if (failed(r, res)) return;
    json_t *jobs = json_array();
    for (size_t i = 0; i < res->njobs; i++) {
        const struct dq_job *j = &res->jobs[i];
        json_t *o = json_pack("{soso}", "topic", jstr(j->topic), "id", jstr(j->id));
        set_body(o, j->body);
        json_object_set_new(o, "attempts", json_integer(j->attempts));
        json_object_set_new(o, "deadline", json_integer(j->deadline));
        json_array_append_new(jobs, o);
    }
    hreq_json(r, 200, json_pack("{so}", "jobs", jobs));
}

static json_t *strs_array(const struct dq_result *res) {
    json_t *a = json_array();
    for (size_t i = 0; i < res->nstrs; i++)
        json_array_append_new(a, jstr(res->strs[i]));
    return a;
}

static void done_list(void *pd, const struct dq_result *res) {
    struct hreq *r = pd;
    if (failed(r, res)) return;
    char cur[24];
    snprintf(cur, sizeof cur, "%" PRIu64, res->cursor);
    hreq_json(r, 200, json_pack("{ssso}", "cursor", cur, "ids", strs_array(res)));
}

static void done_topics(void *pd, const struct dq_result *res) {
    struct hreq *r = pd;
    if (failed(r, res)) return;
    hreq_json(r, 200, json_pack("{so}", "topics", strs_array(res)));
}

static void done_stats(void *pd, const struct dq_result *res) {
    struct hreq *r = pd;
    if (failed(r, res)) return;
    hreq_json(r, 200, hj_stats(res->stats, HJ_STATS_FLAT));
}

static void done_health(void *pd, const struct dq_result *res) {
    struct hreq *r = pd;
    if (failed(r, res)) return;
    hreq_json(r, 200, json_pack("{ssss}", "status", "ok", "store",
                                core_store_name(core_of(r))));
}

static void done_metrics(void *pd, const struct core_snapshot *s) {
    struct hreq *r = pd;
    if (!r->req || !r->f) {
        hreq_drop(r); /* the client is gone */
        return;
    }
    struct buf out = BUF_INIT;
    prom_render(&out, core_metrics(core_of(r)), s);
    hreq_raw(r, 200, "text/plain; version=0.0.4; charset=utf-8", out.p, out.len);
    buf_free(&out);
}

/* --- query strings ------------------------------------------------------------ */

/* Every query parameter is one of `allowed` (NULL-terminated). */
static bool query_known(struct hreq *r, struct evkeyvalq *q,
                        const char *const *allowed) {
    for (struct evkeyval *kv = q->tqh_first; kv; kv = kv->next.tqe_next) {
        bool ok = false;
        for (int i = 0; allowed[i] && !ok; i++) ok = !strcmp(kv->key, allowed[i]);
        if (!ok) {
            hreq_error(r, 400, "ERR", "unknown query parameter '%.40s'", kv->key);
            return false;
        }
    }
    return true;
}

/* A non-negative decimal integer parameter; *out untouched when absent. */
static bool query_u64(struct hreq *r, struct evkeyvalq *q, const char *name,
                      uint64_t *out) {
    const char *v = evhttp_find_header(q, name);
    if (!v) return true;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (v[0] < '0' || v[0] > '9' || *end || errno) {
        hreq_error(r, 400, "ERR", "invalid %s '%.40s': expected an integer",
                   name, v);
        return false;
    }
    *out = x;
    return true;
}

/* --- handlers ----------------------------------------------------------------- */

static void keep_topic(struct hreq *r, struct dq_str t) {
    size_t n = t.len < DQ_TOPIC_MAX ? t.len : DQ_TOPIC_MAX;
    memcpy(r->topic, t.p, n);
    r->topic[n] = '\0';
}

static void h_add(struct hreq *r, struct route_args *a) {
    keep_topic(r, a->topic);
    r->in.add.topic = a->topic;
    core_add(core_of(r), &r->in.add, done_add, r);
}

static void h_get(struct hreq *r, struct route_args *a) {
    keep_topic(r, a->topic);
    core_get(core_of(r), a->topic, a->id, done_get, r);
}

static void h_del(struct hreq *r, struct route_args *a) {
    core_del(core_of(r), a->topic, &a->id, 1, done_deleted, r);
}

static void h_ack(struct hreq *r, struct route_args *a) {
    core_ack(core_of(r), a->topic, &a->id, 1, done_acked, r);
}

static void h_nack(struct hreq *r, struct route_args *a) {
    core_nack(core_of(r), a->topic, a->id, r->in.delay, done_state, r);
}

static void h_touch(struct hreq *r, struct route_args *a) {
    core_touch(core_of(r), a->topic, a->id, r->in.ttr, done_deadline, r);
}

static void h_kick(struct hreq *r, struct route_args *a) {
    core_kick(core_of(r), a->topic, r->in.count, done_kicked, r);
}

static void h_kick_job(struct hreq *r, struct route_args *a) {
    core_kick_job(core_of(r), a->topic, a->id, done_kicked, r);
}

static void h_purge(struct hreq *r, struct route_args *a) {
    core_purge(core_of(r), a->topic, done_removed, r);
}

#define RESERVE_DEFAULT_TIMEOUT_MS 30000

static void h_reserve(struct hreq *r, struct route_args *a) {
    int64_t timeout = r->in.timeout == CORE_UNSET ? RESERVE_DEFAULT_TIMEOUT_MS
                                                  : r->in.timeout;
    struct core_wait *w = core_reserve(core_of(r), r->in.topics, r->in.ntopics,
                                       r->in.count, timeout, done_reserve, r);
    if (w) { /* else r is answered and gone */
        r->w = w;
        hreq_watch(r);
    }
}

static void h_list(struct hreq *r, struct route_args *a) {
    static const char *const allowed[] = {"state", "count", "cursor", NULL};
    uint64_t count = 0, cursor = 0;
    if (!query_known(r, a->query, allowed) ||
        !query_u64(r, a->query, "count", &count) ||
        !query_u64(r, a->query, "cursor", &cursor))
        return;
    const char *state = evhttp_find_header(a->query, "state");
    if (!state) {
        hreq_error(r, 400, "ERR", "missing state: expected ?state=delayed, "
                                  "ready, reserved or dead");
        return;
    }
    int64_t n = evhttp_find_header(a->query, "count")
                    ? (count > INT64_MAX ? INT64_MAX : (int64_t)count)
                    : CORE_UNSET;
    core_list(core_of(r), a->topic, (struct dq_str){state, strlen(state)}, n,
              cursor, done_list, r);
}

static void h_topics(struct hreq *r, struct route_args *a) {
    core_topics(core_of(r), done_topics, r);
}

static void h_stats(struct hreq *r, struct route_args *a) {
    static const char *const allowed[] = {"topic", NULL};
    if (!query_known(r, a->query, allowed)) return;
    const char *t = evhttp_find_header(a->query, "topic");
    if (t && !*t) {
        hreq_error(r, 400, "ERR", "invalid topic '': expected 1-%d "
                                  "characters of [A-Za-z0-9._:-]", DQ_TOPIC_MAX);
        return;
    }
    core_stats(core_of(r), (struct dq_str){t ? t : "", t ? strlen(t) : 0},
               done_stats, r);
}

static void h_health(struct hreq *r, struct route_args *a) {
    core_topics(core_of(r), done_health, r);
}

static void h_metrics(struct hreq *r, struct route_args *a) {
    core_snapshot(core_of(r), done_metrics, r);
}

/* The dashboard (dash_routes.c). */
static void h_page(struct hreq *r, struct route_args *a) { dash_asset(r, "/"); }

static void h_asset(struct hreq *r, struct route_args *a) {
    char path[64];
    if (a->id.len > 40 || memchr(a->id.p, '\0', a->id.len)) {
        hreq_error(r, 404, "NOTFOUND", "no such route (see docs/http.md)");
        return;
    }
    snprintf(path, sizeof path, "/dashboard/%.*s", (int)a->id.len, a->id.p);
    dash_asset(r, path);
}

static void h_server(struct hreq *r, struct route_args *a) { dash_server(r); }

static void h_overview(struct hreq *r, struct route_args *a) {
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(r->req);
    dash_overview(r, uri ? evhttp_uri_get_query(uri) : NULL);
}

static const struct route routes[] = {
    {EVHTTP_REQ_POST, "/v1/topics/{topic}/jobs", 0, HJ_ADD, h_add,
     "add a job: {id?, body | body_base64, delay?, at?, ttr?, retries?, "
     "backoff?, replace?, url?, content_type?}"},
    {EVHTTP_REQ_GET, "/v1/topics/{topic}/jobs", 0, HJ_NONE, h_list,
     "ids of a topic's jobs in a state: ?state=S&count=N&cursor=C"},
    {EVHTTP_REQ_GET, "/v1/topics/{topic}/jobs/{id}", 0, HJ_NONE, h_get,
     "a job's fields"},
    {EVHTTP_REQ_DELETE, "/v1/topics/{topic}/jobs/{id}", 0, HJ_NONE, h_del,
     "delete a job in any state"},
    {EVHTTP_REQ_POST, "/v1/topics/{topic}/jobs/{id}/ack", 0, HJ_NONE, h_ack,
     "a job is done: remove it"},
    {EVHTTP_REQ_POST, "/v1/topics/{topic}/jobs/{id}/nack", 0, HJ_NACK, h_nack,
     "a job failed: retry after {delay?} or its backoff"},
    {EVHTTP_REQ_POST, "/v1/topics/{topic}/jobs/{id}/touch", 0, HJ_TOUCH,
     h_touch, "extend a lease by {ttr?} or the job's own"},
    {EVHTTP_REQ_POST, "/v1/topics/{topic}/jobs/{id}/kick", 0, HJ_NONE,
     h_kick_job, "a dead job back to ready, attempts 0"},
    {EVHTTP_REQ_POST, "/v1/topics/{topic}/kick", 0, HJ_KICK, h_kick,
     "move {count?} dead jobs back to ready"},
    {EVHTTP_REQ_DELETE, "/v1/topics/{topic}", 0, HJ_NONE, h_purge,
     "remove every job of a topic"},
    {EVHTTP_REQ_POST, "/v1/reserve", 0, HJ_RESERVE, h_reserve,
     "take ready jobs: {topics, timeout? (30 s), count?}"},
    {EVHTTP_REQ_GET, "/v1/topics", 0, HJ_NONE, h_topics,
     "topics holding at least one job"},
    {EVHTTP_REQ_GET, "/v1/stats", 0, HJ_NONE, h_stats,
     "jobs per state and counters: ?topic=T"},
    {EVHTTP_REQ_GET, "/healthz", ROUTE_NOAUTH, HJ_NONE, h_health,
     "200 when the store answers, else 503"},
    {EVHTTP_REQ_GET, "/metrics", 0, HJ_NONE, h_metrics,
     "Prometheus text format 0.0.4"},
    /* the dashboard: the page needs no token (it holds no data and shows
     * the login field) */
    {EVHTTP_REQ_GET, "/", ROUTE_NOAUTH, HJ_NONE, h_page, "the dashboard"},
    {EVHTTP_REQ_GET, "/dashboard/{id}", ROUTE_NOAUTH, HJ_NONE, h_asset,
     "the dashboard's files"},
    {EVHTTP_REQ_GET, "/v1/server", 0, HJ_NONE, h_server,
     "version, uptime, store, jobs, memory, clients, fire-lag histogram"},
    {EVHTTP_REQ_GET, "/v1/overview", 0, HJ_NONE, h_overview,
     "a page of topics with counts: ?sort=ready|delayed|reserved|dead|total"
     "|name&limit=N&offset=N&match=S&topic=T"},
};
#define NROUTES (sizeof routes / sizeof routes[0])

/* --- matching ------------------------------------------------------------------- */

#define MAX_PATH 2048

struct path {
    char buf[MAX_PATH];      /* the decoded segments, back to back */
    const char *seg[MAX_SEGMENTS];
    size_t len[MAX_SEGMENTS];
    int n;
};

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Splits "/a/b%2Fc/d" into percent-decoded segments; false if the path is
 * malformed, too long or has too many segments. */
static bool path_split(const char *raw, struct path *p) {
    size_t o = 0;
    p->n = 0;
    for (const char *s = raw; *s == '/';) {
        s++;
        if (p->n == MAX_SEGMENTS) return false;
        p->seg[p->n] = p->buf + o;
        size_t start = o;
        for (; *s && *s != '/'; s++) {
            char c = *s;
            if (c == '%') {
                int hi = hexval(s[1]), lo = hi < 0 ? -1 : hexval(s[2]);
                if (lo < 0) return false;
                c = (char)(hi << 4 | lo);
                s += 2;
            }
            if (o == MAX_PATH) return false;
            p->buf[o++] = c;
        }
        p->len[p->n++] = o - start;
    }
    return true;
}

/* Whether path p has the shape of pattern (captures into a). */
static bool match(const char *pattern, const struct path *p,
                  struct route_args *a) {
    int i = 0;
    for (const char *s = pattern; *s == '/'; i++) {
        s++;
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (i >= p->n) return false;
        struct dq_str seg = {p->seg[i], p->len[i]};
        if (n == 7 && !memcmp(s, "{topic}", 7)) a->topic = seg;
        else if (n == 4 && !memcmp(s, "{id}", 4)) a->id = seg;
        else if (p->len[i] != n || memcmp(p->seg[i], s, n)) return false;
        s += n;
    }
    return i == p->n;
}

static bool authorized(struct hreq *r) {
    const char *pass = r->f->cfg.requirepass;
    if (!pass) return true;
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(r->req),
                                       "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    size_t n = strlen(pass);
    if (strlen(h) != n) return false;
    unsigned char diff = 0; /* in constant time */
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(h[i] ^ pass[i]);
    return diff == 0;
}

static const char *method_name(int m) {
    switch (m) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_DELETE: return "DELETE";
    default: return "HEAD";
    }
}

void route_dispatch(struct hreq *r) {
    struct evhttp_request *req = r->req;
    int method = evhttp_request_get_command(req);
    if (method == EVHTTP_REQ_HEAD) method = EVHTTP_REQ_GET;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *raw = uri ? evhttp_uri_get_path(uri) : NULL;
    struct path p;
    if (!raw || !path_split(raw, &p)) {
        hreq_error(r, 404, "NOTFOUND", "no such route (see docs/http.md)");
        return;
    }
    const struct route *rt = NULL;
    struct route_args a = {0};
    char allow[64] = "";
    size_t nallow = 0;
    for (size_t i = 0; i < NROUTES; i++) {
        struct route_args t = {0};
        if (!match(routes[i].path, &p, &t)) continue;
        if (routes[i].method == method) {
            rt = &routes[i];
            a = t;
            break;
        }
        nallow += (size_t)snprintf(allow + nallow, sizeof allow - nallow, "%s%s",
                                   nallow ? ", " : "", method_name(routes[i].method));
    }
    if (!rt) {
        if (nallow) {
            evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
            hreq_error(r, 405, "ERR", "method %s not allowed here (allowed: %s)",
                       method_name(method), allow);
        } else {
            hreq_error(r, 404, "NOTFOUND", "no such route (see docs/http.md)");
        }
        return;
    }
    if (dash_refuses(r, method)) return;
    if (!(rt->flags & ROUTE_NOAUTH) && !authorized(r)) {
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          "WWW-Authenticate", "Bearer");
        hreq_error(r, 401, "NOAUTH", "authentication required: send "
                                     "Authorization: Bearer <--requirepass>");
        return;
    }
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    const char *body = len ? (const char *)evbuffer_pullup(in, -1) : "";
    char err[300];
    if (hj_decode(rt->body, body, len, &r->in, err, sizeof err) != 0) {
        hreq_error(r, 400, "ERR", "%s", err);
        return;
    }
    struct evkeyvalq q = {0};
    TAILQ_INIT(&q);
    const char *qs = evhttp_uri_get_query(uri);
    if (qs && evhttp_parse_query_str(qs, &q) != 0) {
        evhttp_clear_headers(&q);
        hreq_error(r, 400, "ERR", "malformed query string");
        return;
    }
    if (rt->fn != h_list && rt->fn != h_stats && rt->fn != h_overview &&
        q.tqh_first) {
        static const char *const none[] = {NULL};
        query_known(r, &q, none); /* replies: this route takes none */
        evhttp_clear_headers(&q);
        return;
    }
    a.query = &q;
    a.body = body;
    a.body_len = len;
    rt->fn(r, &a); /* r may be gone now */
    evhttp_clear_headers(&q);
}
