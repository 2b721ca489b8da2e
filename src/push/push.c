/* push.c -- push delivery; see push.h.
 *
 * Topics. The pusher keeps one `struct ptopic` per topic it has heard of:
 * `dirty` says the topic may hold ready push jobs (the core said so, or the
 * last reserve came back full), `reserving` that a reserve is in flight
 * (one at a time per topic), `held` how many of its jobs the pusher holds
 * (reserved, being POSTed or settled). Dirty topics with room queue on a
 * list that one loop event drains, so the core's notifications (which may
 * arrive inside any store call) never call back into the core.
 *
 * Deliveries. A reserved job is copied into a `struct delivery` (one
 * allocation: the struct, then topic, id, body and URL) and handed to the
 * multi handle; curl tells which sockets to watch (socket_cb) and when to
 * time out (timer_cb), and the loop calls curl_multi_socket_action back.
 * When curl is done with a transfer, the answer picks ACK, NACK or dead
 * (settle); the delivery ends when the core has completed that call.
 */
#include "push/push.h"

#include <ctype.h>
#include <curl/curl.h>
#include <event2/event.h>
#include <inttypes.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/core.h"
#include "core/metrics.h"
#include "lib/clock.h"
#include "lib/htab.h"
#include "lib/log.h"
#include "lib/url.h"
#include "lib/xalloc.h"

#define SECRETS_MAX 8
#define KEY_MAX 256
#define RETRY_MS 1000 /* a reserve that failed (store down) is retried */
#define PUSH_HOST_CONNECTIONS 256 /* transfers in curl per receiver host:port */
#define SETTLE_SLICE 64           /* finished transfers settled per event */
#define QUEUE_CHECK_MS 100        /* waiting deliveries' timeouts checked */

struct ptopic {
    struct hnode hn;
    uint64_t hash;
    struct pusher *p;
    struct ptopic *next; /* on the pusher's queue */
    uint32_t held;       /* jobs reserved and not yet settled */
    bool dirty, reserving, again, queued;
    size_t len;
    char name[];
};

/* A receiver (host:port): its transfers in curl, at most
 * PUSH_HOST_CONNECTIONS, and the deliveries waiting for one of them to end
 * (FIFO). Freed when it has neither. */
struct phost {
    struct hnode hn;
    uint64_t hash;
    uint32_t active;
    struct delivery *qhead, *qtail;
    size_t len;
    char key[]; /* "host:port", the host in lower case */
};

struct secret {
    unsigned char key[KEY_MAX];
    size_t len;
};

struct delivery {
    struct delivery *prev, *next; /* the pusher's list of deliveries */
    struct delivery *qnext;       /* on its host's queue, or the queue of
                                     finished transfers */
    struct phost *h;              /* its receiver while it waits or is in curl */
    struct pusher *p;             /* NULL once the pusher is gone */
    struct ptopic *t;
    CURL *easy;
    struct curl_slist *hdrs;
    int64_t start_us, end_us, due;
    int64_t sent_us;              /* handed to curl; 0 = never */
    int64_t timeout_ms;
    uint32_t attempts, ttr, backoff_cap;
    long status;     /* HTTP status, 0 = none */
    CURLcode result;
    struct dq_str id, body, url, ct;
    char err[CURL_ERROR_SIZE];
    char data[];     /* id, body, url, NUL, content type */
};

struct pusher {
    struct event_base *base;
    struct core *core;
    struct metrics *metrics;
    struct pusher_config cfg;
    CURLM *multi;
    struct event *timer;   /* curl's timeout */
    struct event *pump;    /* drains the queue of dirty topics */
    struct event *retry;   /* after a failed reserve */
    struct event *settle;  /* settles the rest of the finished transfers */
    struct event *qcheck;  /* times out deliveries waiting for a receiver */
    size_t nqueued;        /* deliveries waiting for their receiver */
    struct htab topics;    /* struct ptopic by name */
    struct htab hosts;     /* struct phost by key */
    struct ptopic *queue;  /* dirty topics with room */
    struct secret secrets[SECRETS_MAX];
    size_t nsecrets;
    EVP_MAC *mac;
    CURL *idle[PUSH_HOST_CONNECTIONS]; /* easy handles kept for reuse */
    size_t nidle;
    uint64_t inflight;     /* deliveries not yet ended */
    uint32_t reserving;    /* topics with a reserve in flight */
    struct delivery *all;  /* every delivery not yet ended */
    struct delivery *done_head, *done_tail; /* finished transfers to settle */
    struct pusher **listing; /* the first TOPICS, while in flight */
    bool stopping;
};

/* --- signatures ------------------------------------------------------------ */

static EVP_MAC *hmac_fetch(void) { return EVP_MAC_fetch(NULL, "HMAC", NULL); }

/* HMAC-SHA256 over the three parts of a Standard Webhooks message. */
static int hmac3(EVP_MAC *mac, const void *key, size_t keylen,
                 const struct dq_str *parts, size_t nparts,
                 unsigned char out[32]) {
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(mac);
    if (!ctx) return -1;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_end()};
    size_t n = 0;
    int ok = EVP_MAC_init(ctx, key, keylen, params);
    for (size_t i = 0; ok && i < nparts; i++)
        ok = EVP_MAC_update(ctx, (const unsigned char *)parts[i].p,
                            parts[i].len);
    ok = ok && EVP_MAC_final(ctx, out, &n, 32);
    EVP_MAC_CTX_free(ctx);
    return ok && n == 32 ? 0 : -1;
}

static int sign_with(EVP_MAC *mac, const void *key, size_t keylen,
                     const char *id, size_t idlen, int64_t ts,
                     const void *body, size_t bodylen, char *out) {
    char tsbuf[24];
    int tslen = snprintf(tsbuf, sizeof tsbuf, "%" PRId64, ts);
    struct dq_str parts[] = {{id, idlen}, {".", 1}, {tsbuf, (size_t)tslen},
                             {".", 1}, {body, bodylen}};
    unsigned char mac32[32];
    if (hmac3(mac, key, keylen, parts, 5, mac32) != 0) return -1;
    memcpy(out, "v1,", 3);
    EVP_EncodeBlock((unsigned char *)out + 3, mac32, 32); /* 44 + NUL */
    return 0;
}

int push_sign(const void *key, size_t keylen, const char *id, size_t idlen,
              int64_t ts, const void *body, size_t bodylen, char *out) {
    EVP_MAC *mac = hmac_fetch();
    if (!mac) return -1;
    int rc = sign_with(mac, key, keylen, id, idlen, ts, body, bodylen, out);
    EVP_MAC_free(mac);
    return rc;
}

/* One --push-secret: "whsec_BASE64" (Standard Webhooks: the key is the
 * decoded bytes) or any other string (the key is its bytes). */
static const char *parse_secret(const char *s, size_t len, struct secret *out) {
    if (len == 0) return "an empty --push-secret";
    if (len > 6 && strncmp(s, "whsec_", 6) == 0) {
        const char *b = s + 6;
        size_t blen = len - 6;
        if (blen % 4 || blen / 4 * 3 > KEY_MAX)
            return "a whsec_ --push-secret must be base64 (up to 256 bytes)";
        int n = EVP_DecodeBlock(out->key, (const unsigned char *)b, (int)blen);
        if (n < 0) return "a whsec_ --push-secret must be base64";
        if (blen >= 1 && b[blen - 1] == '=') n--;
        if (blen >= 2 && b[blen - 2] == '=') n--;
        out->len = (size_t)n;
        return NULL;
    }
    if (len > KEY_MAX) return "a --push-secret is at most 256 bytes";
    memcpy(out->key, s, len);
    out->len = len;
    return NULL;
}

/* --- Retry-After ----------------------------------------------------------- */

int64_t push_retry_after(const char *v, int64_t now_s) {
    while (*v == ' ') v++;
    if (*v >= '0' && *v <= '9') {
        char *end;
        long long s = strtoll(v, &end, 10);
        while (*end == ' ') end++;
        return *end ? -1 : (s > INT32_MAX ? INT32_MAX : s);
    }
    time_t at = curl_getdate(v, NULL);
    if (at < 0) return -1;
    return at > now_s ? (int64_t)at - now_s : 0;
}

/* --- topics ---------------------------------------------------------------- */

static uint64_t ptopic_hash(const struct hnode *n) {
    return ((const struct ptopic *)n)->hash;
}

static struct ptopic *topic_get(struct pusher *p, struct dq_str name) {
    uint64_t h = htab_hash_bytes(name.p, name.len);
    for (struct hnode *n = htab_bucket(&p->topics, h); n; n = n->next) {
        struct ptopic *t = (struct ptopic *)n;
        if (t->hash == h && t->len == name.len &&
            memcmp(t->name, name.p, name.len) == 0)
            return t;
    }
    struct ptopic *t = xcalloc(1, sizeof *t + name.len);
    t->hash = h;
    t->p = p;
    t->len = name.len;
    memcpy(t->name, name.p, name.len);
    htab_insert(&p->topics, &t->hn, h);
    return t;
}

static struct dq_str topic_name(const struct ptopic *t) {
    return (struct dq_str){t->name, t->len};
}

/* A topic with nothing to do is forgotten (topics used once do not pile
 * up); the core tells again when it has jobs. */
static void topic_maybe_free(struct pusher *p, struct ptopic *t) {
    if (t->held || t->dirty || t->reserving || t->queued) return;
    htab_remove(&p->topics, &t->hn, t->hash);
    dq_free(t);
}

/* Queues t for a reserve if it may have jobs and room. After a delivery
 * ends (freed) the room must be a batch: an eighth of --push-concurrency,
 * so a busy topic reserves several jobs per call, not one per finished
 * delivery; or any room when it holds none. When jobs came (or may be
 * left), any room will do: with deliveries that take long (a receiver that
 * hangs) the jobs would otherwise wait for a batch of them to end. */
static void topic_kick(struct pusher *p, struct ptopic *t, bool freed) {
    uint32_t batch = freed && p->cfg.concurrency / 8 ? p->cfg.concurrency / 8 : 1;
    if (!t->dirty || t->queued || t->reserving || p->stopping ||
        (t->held && t->held + batch > p->cfg.concurrency))
        return;
    t->queued = true;
    t->next = p->queue;
    p->queue = t;
    event_active(p->pump, 0, 0);
}

static void on_push_ready(void *ud, struct dq_str topic, int64_t hint) {
    struct pusher *p = ud;
    struct ptopic *t = topic_get(p, topic);
    t->dirty = true;
    if (t->reserving) t->again = true;
    topic_kick(p, t, false);
}

/* --- settling a delivery --------------------------------------------------- */

/* Handles are kept with their options: every delivery sets the ones that
 * change (easy_get), the others are set once. */
static void easy_put(struct pusher *p, CURL *e) {
    if (p->nidle < sizeof p->idle / sizeof p->idle[0]) {
        p->idle[p->nidle++] = e;
    } else {
        curl_easy_cleanup(e);
    }
}

static void delivery_free(struct delivery *d) {
    curl_slist_free_all(d->hdrs);
    dq_free(d);
}

/* The delivery is over: its job was settled (or abandoned). */
static void delivery_end(struct delivery *d) {
    struct pusher *p = d->p;
    struct ptopic *t = d->t;
    if (d->prev) d->prev->next = d->next;
    else p->all = d->next;
    if (d->next) d->next->prev = d->prev;
    if (d->easy) easy_put(p, d->easy);
    d->easy = NULL;
    t->held--;
    p->inflight--;
    delivery_free(d);
    topic_kick(p, t, true);
    topic_maybe_free(p, t);
}

static void host_of(const struct delivery *d, struct dq_str *host) {
    struct url_parts u;
    if (url_split(d->url.p, d->url.len, &u) == NULL)
        *host = (struct dq_str){u.host, u.host_len};
    else
        *host = (struct dq_str){"?", 1};
}

/* What went wrong, for the log. */
static void describe(const struct delivery *d, char *out, size_t n) {
    if (d->result == CURLE_OK)
        snprintf(out, n, "HTTP %ld", d->status);
    else
        snprintf(out, n, "%s", d->err[0] ? d->err : curl_easy_strerror(d->result));
}

static void settled_cb(void *pd, const struct dq_result *res) {
    struct delivery *d = pd;
    struct pusher *p = d->p;
    if (!p) { /* the pusher went first (pusher_free) */
        delivery_free(d);
        return;
    }
    bool ok = d->result == CURLE_OK && d->status >= 200 && d->status < 300;
    if (ok) {
        core_push_note(p->core, topic_name(d->t), d->id, NULL);
    } else {
        struct core_push_note note = {.at = d->end_us / 1000,
                                      .attempt = d->attempts,
                                      .status = d->result == CURLE_OK ? d->status : 0};
        describe(d, note.error, sizeof note.error);
        core_push_note(p->core, topic_name(d->t), d->id, &note);
    }
    int outcome = METRICS_PUSH_RETRY;
    if (ok && res->status == DQ_OK) {
        outcome = METRICS_PUSHED;
    } else if (!ok && res->status == DQ_OK && res->n == DQ_DEAD) {
        outcome = METRICS_PUSH_FAILED;
        struct dq_str host;
        char why[CURL_ERROR_SIZE + 32];
        host_of(d, &host);
        describe(d, why, sizeof why);
        log_warn("push of %.*s/%.*s to %.*s failed for good after %" PRIu32
                 " attempt(s): %s (the job is dead; KICK delivers it again)",
                 (int)d->t->len, d->t->name, (int)d->id.len, d->id.p,
                 (int)host.len, host.p, d->attempts, why);
    } else if (res->status != DQ_OK && res->status != DQ_NOTRESERVED) {
        /* the store refused the change: the lease brings the job back */
        log_warn("push of %.*s/%.*s: cannot settle it: %s", (int)d->t->len,
                 d->t->name, (int)d->id.len, d->id.p,
                 res->errmsg ? res->errmsg : dq_status_code(res->status));
    }
    metrics_push_end(p->metrics, topic_name(d->t), d->end_us - d->start_us,
                     outcome);
    delivery_end(d);
}

/* The answer decides: ACK, NACK (with Retry-After or the backoff) or dead. */
static void settle(struct delivery *d) {
    struct pusher *p = d->p;
    struct dq_str topic = topic_name(d->t);
    d->end_us = clock_us();
    curl_off_t pre = 0;
    if (d->easy && d->sent_us &&
        curl_easy_getinfo(d->easy, CURLINFO_PRETRANSFER_TIME_T, &pre) ==
            CURLE_OK &&
        pre > 0)
        metrics_fire_lag(p->metrics, topic, d->sent_us + pre - d->due * 1000);
    if (d->easy && d->result == CURLE_OK)
        curl_easy_getinfo(d->easy, CURLINFO_RESPONSE_CODE, &d->status);
    long st = d->status;
    if (d->result == CURLE_OK && st >= 200 && st < 300) {
        core_ack(p->core, topic, &d->id, 1, settled_cb, d);
        return;
    }
    if (d->result == CURLE_OK && st == 410) {
        core_bury(p->core, topic, d->id, settled_cb, d);
        return;
    }
    int64_t delay = CORE_UNSET;
    struct curl_header *h;
    if (d->result == CURLE_OK && (st == 429 || st == 503) &&
        curl_easy_header(d->easy, "Retry-After", 0, CURLH_HEADER, -1, &h) ==
            CURLHE_OK) {
        int64_t s = push_retry_after(h->value, clock_ms() / 1000);
        if (s >= 0) delay = s * 1000 > d->backoff_cap ? d->backoff_cap : s * 1000;
    }
    core_nack(p->core, topic, d->id, delay, settled_cb, d);
}

/* --- receivers: at most PUSH_HOST_CONNECTIONS transfers each in curl ------ */

static CURL *easy_get(struct pusher *p);
static void build_headers(struct pusher *p, struct delivery *d);

static uint64_t phost_hash(const struct hnode *n) {
    return ((const struct phost *)n)->hash;
}

/* The receiver of a URL that url_split accepted. */
static struct phost *host_get(struct pusher *p, const struct url_parts *u) {
    const char *q = u->host + u->host_len;
    if (*q == ']') q++; /* IPv6 */
    unsigned port = *q == ':' ? (unsigned)strtoul(q + 1, NULL, 10) : u->https ? 443 : 80;
    char key[DQ_URL_MAX + 8];
    size_t n = 0;
    for (size_t i = 0; i < u->host_len && n < DQ_URL_MAX; i++)
        key[n++] = (char)tolower((unsigned char)u->host[i]);
    n += (size_t)snprintf(key + n, sizeof key - n, ":%u", port);
    uint64_t h = htab_hash_bytes(key, n);
    for (struct hnode *x = htab_bucket(&p->hosts, h); x; x = x->next) {
        struct phost *ph = (struct phost *)x;
        if (ph->hash == h && ph->len == n && memcmp(ph->key, key, n) == 0) return ph;
    }
    struct phost *ph = xcalloc(1, sizeof *ph + n);
    ph->hash = h;
    ph->len = n;
    memcpy(ph->key, key, n);
    htab_insert(&p->hosts, &ph->hn, h);
    return ph;
}

/* Queues a transfer that is over (or never started) for settling. */
static void done_push(struct pusher *p, struct delivery *d) {
    d->qnext = NULL;
    if (p->done_tail) p->done_tail->qnext = d;
    else p->done_head = d;
    p->done_tail = d;
    event_active(p->settle, 0, 0);
}

/* Hands d's transfer to curl with what is left of its timeout (the time it
 * waited for its receiver counts), or fails it if nothing is left. The
 * request (headers, signature, handle) is made here, so a delivery waiting
 * for its receiver costs no curl handle, and its timestamp is when it is
 * sent. */
static void transfer_start(struct pusher *p, struct delivery *d) {
    int64_t left = d->timeout_ms - (clock_us() - d->start_us) / 1000;
    if (left <= 0) {
        d->h = NULL;
        d->result = CURLE_OPERATION_TIMEDOUT;
        snprintf(d->err, sizeof d->err, "timed out after %" PRId64 " ms waiting for "
                 "one of the %d connections to the receiver", d->timeout_ms,
                 PUSH_HOST_CONNECTIONS);
        done_push(p, d);
        return;
    }
    CURL *e = easy_get(p);
    if (!e) {
        d->h = NULL;
        d->result = CURLE_OUT_OF_MEMORY;
        done_push(p, d);
        return;
    }
    d->easy = e;
    build_headers(p, d);
    curl_easy_setopt(e, CURLOPT_URL, d->url.p);
    curl_easy_setopt(e, CURLOPT_PRIVATE, d);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, d->hdrs);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)d->body.len);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, d->body.p);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, d->err);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)left);
    d->sent_us = clock_us();
    d->h->active++;
    if (curl_multi_add_handle(p->multi, d->easy) != CURLM_OK) {
        d->h->active--;
        d->h = NULL;
        d->sent_us = 0;
        d->result = CURLE_FAILED_INIT;
        done_push(p, d);
    }
}

/* Starts the waiting deliveries of h that have room; frees h when it has
 * neither transfers nor deliveries waiting. */
static void host_pump(struct pusher *p, struct phost *h) {
    while (h->qhead && h->active < PUSH_HOST_CONNECTIONS) {
        struct delivery *d = h->qhead;
        h->qhead = d->qnext;
        if (!h->qhead) h->qtail = NULL;
        p->nqueued--;
        transfer_start(p, d);
    }
    if (!h->active && !h->qhead) {
        htab_remove(&p->hosts, &h->hn, h->hash);
        dq_free(h);
    }
}

/* d's transfer, for its receiver h: at once if h has room, else after
 * those before it. So curl never queues a transfer itself: libcurl 7.88's
 * curl_multi_remove_handle walks its queue of transfers waiting for a
 * connection, and with thousands waiting (topics stuck on one dead
 * receiver) the once-a-second burst of timeouts stalled the loop for
 * 120-250 ms (docs/benchmarks.md). */
static void host_admit(struct pusher *p, struct phost *h, struct delivery *d) {
    d->h = h;
    if (h->active < PUSH_HOST_CONNECTIONS && !h->qhead) {
        transfer_start(p, d);
        return;
    }
    d->qnext = NULL;
    if (h->qtail) h->qtail->qnext = d;
    else h->qhead = d;
    h->qtail = d;
    p->nqueued++;
    if (!evtimer_pending(p->qcheck, NULL)) {
        struct timeval tv = {0, QUEUE_CHECK_MS * 1000};
        evtimer_add(p->qcheck, &tv);
    }
}

/* Fails the deliveries of h whose timeout ran out while they waited. */
static void host_expire(void *ud, struct hnode *n) {
    struct pusher *p = ud;
    struct phost *h = (struct phost *)n;
    int64_t now = clock_us();
    struct delivery **link = &h->qhead, *prev = NULL;
    while (*link) {
        struct delivery *d = *link;
        if (now - d->start_us < d->timeout_ms * 1000) {
            prev = d;
            link = &d->qnext;
            continue;
        }
        *link = d->qnext;
        if (h->qtail == d) h->qtail = prev;
        p->nqueued--;
        transfer_start(p, d); /* fails it: no time left */
    }
}

/* Every QUEUE_CHECK_MS while deliveries wait: their timeouts (a receiver
 * whose transfers all hang frees no place before its own timeouts, and a
 * waiting job's TTR may be shorter). Hosts are freed by host_pump only. */
static void qcheck_cb(evutil_socket_t fd, short what, void *arg) {
    struct pusher *p = arg;
    htab_foreach(&p->hosts, host_expire, p);
    if (p->nqueued) {
        struct timeval tv = {0, QUEUE_CHECK_MS * 1000};
        evtimer_add(p->qcheck, &tv);
    }
}

/* --- curl on the loop ------------------------------------------------------ */

/* Takes the transfers curl has finished and settles them, SETTLE_SLICE at
 * a time: when thousands end together (the timeouts of a receiver that
 * never answers), the rest wait for the next turn of the loop (p->settle),
 * so that clients are served in between. Each frees a place for its
 * receiver's next waiting delivery.
 *
 * Every message is read before any handle is removed: libcurl 7.88's
 * curl_multi_remove_handle also walks the messages not yet read, looking
 * for the handle's own, which is quadratic when many end together. */
static void check_done(struct pusher *p) {
    CURLMsg *m;
    int left;
    struct delivery *first = NULL, *last = NULL;
    while ((m = curl_multi_info_read(p->multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        struct delivery *d = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&d);
        d->result = m->data.result;
        d->qnext = NULL;
        if (last) last->qnext = d;
        else first = d;
        last = d;
    }
    for (struct delivery *d = first, *next; d; d = next) {
        next = d->qnext;
        curl_multi_remove_handle(p->multi, d->easy);
        struct phost *h = d->h;
        d->h = NULL;
        h->active--;
        done_push(p, d);
        host_pump(p, h);
    }
    for (int n = 0; n < SETTLE_SLICE && p->done_head; n++) {
        struct delivery *d = p->done_head;
        p->done_head = d->qnext;
        if (!p->done_head) p->done_tail = NULL;
        settle(d);
    }
    if (p->done_head) event_active(p->settle, 0, 0);
}

static void settle_cb(evutil_socket_t fd, short what, void *arg) {
    check_done(arg);
}

static void sock_event_cb(evutil_socket_t fd, short what, void *arg) {
    struct pusher *p = arg;
    int flags = (what & EV_READ ? CURL_CSELECT_IN : 0) |
                (what & EV_WRITE ? CURL_CSELECT_OUT : 0);
    int running;
    curl_multi_socket_action(p->multi, fd, flags, &running);
    check_done(p);
}

static int socket_cb(CURL *e, curl_socket_t s, int what, void *userp,
                     void *socketp) {
    struct pusher *p = userp;
    struct event *ev = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (ev) event_free(ev);
        return 0;
    }
    short kind = (short)((what & CURL_POLL_IN ? EV_READ : 0) |
                         (what & CURL_POLL_OUT ? EV_WRITE : 0) | EV_PERSIST);
    if (ev) {
        event_del(ev);
        event_assign(ev, p->base, s, kind, sock_event_cb, p);
    } else {
        ev = event_new(p->base, s, kind, sock_event_cb, p);
        curl_multi_assign(p->multi, s, ev);
    }
    event_add(ev, NULL);
    return 0;
}

static void timer_event_cb(evutil_socket_t fd, short what, void *arg) {
    struct pusher *p = arg;
    int running;
    curl_multi_socket_action(p->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(p);
}

static int timer_cb(CURLM *m, long timeout_ms, void *userp) {
    struct pusher *p = userp;
    if (timeout_ms < 0) {
        evtimer_del(p->timer);
        return 0;
    }
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    evtimer_add(p->timer, &tv);
    return 0;
}

static size_t discard_cb(char *ptr, size_t size, size_t n, void *ud) {
    return size * n;
}

/* An easy handle with the options every delivery shares. */
static CURL *easy_get(struct pusher *p) {
    if (p->nidle) return p->idle[--p->nidle];
    CURL *e = curl_easy_init();
    if (!e) return NULL;
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "delayq/0.1");
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard_cb);
    if (p->cfg.ca_file) curl_easy_setopt(e, CURLOPT_CAINFO, p->cfg.ca_file);
    return e;
}

/* --- starting a delivery ----------------------------------------------------- */

static void add_header(struct delivery *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void add_header(struct delivery *d, const char *fmt, ...) {
    char line[DQ_TOPIC_MAX + DQ_ID_MAX + 64 + SECRETS_MAX * PUSH_SIG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    struct curl_slist *l = curl_slist_append(d->hdrs, line);
    if (l) d->hdrs = l;
}

/* The headers of §9. */
static void build_headers(struct pusher *p, struct delivery *d) {
    int64_t ts = clock_ms() / 1000;
    struct dq_str topic = topic_name(d->t);
    char wid[DQ_TOPIC_MAX + DQ_ID_MAX + 2];
    int widlen = snprintf(wid, sizeof wid, "%.*s/%.*s", (int)topic.len,
                          topic.p, (int)d->id.len, d->id.p);
    struct dq_str ct = d->ct;
    if (ct.len == 0) ct = (struct dq_str){DQ_CTYPE_DEFAULT, strlen(DQ_CTYPE_DEFAULT)};
    add_header(d, "Content-Type: %.*s", (int)ct.len, ct.p);
    add_header(d, "webhook-id: %s", wid);
    add_header(d, "webhook-timestamp: %" PRId64, ts);
    if (p->nsecrets) {
        char sigs[SECRETS_MAX * (PUSH_SIG_MAX + 1)];
        size_t off = 0;
        for (size_t i = 0; i < p->nsecrets; i++) {
            char one[PUSH_SIG_MAX];
            if (sign_with(p->mac, p->secrets[i].key, p->secrets[i].len, wid,
                          (size_t)widlen, ts, d->body.p, d->body.len,
                          one) != 0)
                continue;
            off += (size_t)snprintf(sigs + off, sizeof sigs - off, "%s%s",
                                    off ? " " : "", one);
        }
        add_header(d, "webhook-signature: %s", sigs);
    }
    add_header(d, "delayq-topic: %.*s", (int)topic.len, topic.p);
    add_header(d, "delayq-attempt: %" PRIu32, d->attempts);
    add_header(d, "delayq-due: %" PRId64, d->due);
    add_header(d, "Expect:"); /* no 100-continue round trip */
}

static void delivery_start(struct pusher *p, struct ptopic *t,
                           const struct dq_job *j) {
    struct delivery *d = xcalloc(1, sizeof *d + j->id.len + j->body.len +
                                        j->url.len + 1 + j->content_type.len);
    d->p = p;
    d->t = t;
    char *q = d->data;
    memcpy(q, j->id.p, j->id.len);
    d->id = (struct dq_str){q, j->id.len};
    q += j->id.len;
    if (j->body.len) memcpy(q, j->body.p, j->body.len);
    d->body = (struct dq_str){q, j->body.len};
    q += j->body.len;
    memcpy(q, j->url.p, j->url.len);
    d->url = (struct dq_str){q, j->url.len};
    q[j->url.len] = '\0';
    q += j->url.len + 1;
    if (j->content_type.len) memcpy(q, j->content_type.p, j->content_type.len);
    d->ct = (struct dq_str){q, j->content_type.len};
    d->due = j->due;
    d->attempts = j->attempts;
    d->ttr = j->ttr;
    /* Retry-After is capped by the backoff's max; FIXED has none: 1 h */
    d->backoff_cap = j->backoff.kind == DQ_BACKOFF_FIXED
                         ? DQ_BACKOFF_MAX_DEFAULT
                         : j->backoff.max;
    d->start_us = clock_us();
    d->next = p->all;
    if (p->all) p->all->prev = d;
    p->all = d;
    t->held++;
    p->inflight++;
    metrics_push_begin(p->metrics, topic_name(t));

    /* a host struck off --push-allow since the ADD is never called */
    struct url_parts u;
    if (url_split(d->url.p, d->url.len, &u) != NULL ||
        !core_push_allowed(p->core, (struct dq_str){u.host, u.host_len})) {
        d->result = CURLE_URL_MALFORMAT;
        snprintf(d->err, sizeof d->err, "host not allowed by --push-allow");
        d->end_us = d->start_us;
        core_bury(p->core, topic_name(t), d->id, settled_cb, d);
        return;
    }

    d->timeout_ms = p->cfg.timeout_ms;
    if (d->timeout_ms > (int64_t)d->ttr) d->timeout_ms = d->ttr;
    host_admit(p, host_get(p, &u), d);
}

/* --- reserving --------------------------------------------------------------- */

static void reserve_cb(void *pd, const struct dq_result *res) {
    struct ptopic *t = pd;
    struct pusher *p = t->p;
    if (!p) { /* the pusher went first: the jobs come back after their lease */
        dq_free(t);
        return;
    }
    uint32_t want = p->cfg.concurrency - t->held;
    t->reserving = false;
    p->reserving--;
    if (res->status != DQ_OK) {
        /* the store is down or refuses changes: try again in a while */
        t->dirty = true;
        if (!evtimer_pending(p->retry, NULL)) {
            struct timeval tv = {RETRY_MS / 1000, 0};
            evtimer_add(p->retry, &tv);
        }
        return;
    }
    for (size_t i = 0; i < res->njobs; i++) delivery_start(p, t, &res->jobs[i]);
    /* a full answer may leave more behind; a short one took all there was,
     * unless the core told of new jobs meanwhile */
    t->dirty = res->njobs >= want || t->again;
    t->again = false;
    topic_kick(p, t, false);
    topic_maybe_free(p, t);
}

static void pump_cb(evutil_socket_t fd, short what, void *arg) {
    struct pusher *p = arg;
    struct ptopic *t = p->queue;
    p->queue = NULL;
    while (t) {
        struct ptopic *next = t->next;
        t->queued = false;
        t->next = NULL;
        if (!p->stopping && !t->reserving && t->dirty &&
            t->held < p->cfg.concurrency) {
            t->reserving = true;
            p->reserving++;
            core_reserve_push(p->core, topic_name(t),
                              p->cfg.concurrency - t->held, reserve_cb, t);
        } else {
            topic_maybe_free(p, t);
        }
        t = next;
    }
}

static void kick_all(void *ud, struct hnode *n) {
    struct ptopic *t = (struct ptopic *)n;
    topic_kick(t->p, t, false);
}

static void retry_cb(evutil_socket_t fd, short what, void *arg) {
    struct pusher *p = arg;
    htab_foreach(&p->topics, kick_all, NULL);
}

/* At start: every topic may hold push jobs that were ready before. */
static void topics_cb(void *pd, const struct dq_result *res) {
    struct pusher **box = pd, *p = *box;
    dq_free(box);
    if (!p) return; /* the pusher went first */
    p->listing = NULL;
    if (res->status != DQ_OK) {
        log_warn("push: cannot list topics at start: %s",
                 res->errmsg ? res->errmsg : dq_status_code(res->status));
        return;
    }
    for (size_t i = 0; i < res->nstrs; i++)
        on_push_ready(p, res->strs[i], -1);
}

/* --- the pusher -------------------------------------------------------------- */

struct pusher *pusher_new(struct event_base *base, struct core *core,
                          const struct pusher_config *cfg, char *err,
                          size_t errlen) {
    static bool curl_ready;
    if (!curl_ready && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(err, errlen, "push: libcurl cannot start");
        return NULL;
    }
    curl_ready = true;
    struct pusher *p = xcalloc(1, sizeof *p);
    p->base = base;
    p->core = core;
    p->metrics = core_metrics(core);
    p->cfg = *cfg;
    if (p->cfg.concurrency == 0) p->cfg.concurrency = 64;
    if (p->cfg.timeout_ms <= 0) p->cfg.timeout_ms = 30000;
    htab_init(&p->topics, 16, ptopic_hash);
    htab_init(&p->hosts, 16, phost_hash);
    for (const char *s = cfg->secrets; s && *s;) {
        const char *comma = strchr(s, ',');
        size_t n = comma ? (size_t)(comma - s) : strlen(s);
        if (p->nsecrets == SECRETS_MAX) {
            snprintf(err, errlen, "at most %d --push-secret", SECRETS_MAX);
            pusher_free(p);
            return NULL;
        }
        const char *why = parse_secret(s, n, &p->secrets[p->nsecrets++]);
        if (why) {
            snprintf(err, errlen, "%s", why);
            pusher_free(p);
            return NULL;
        }
        s = comma ? comma + 1 : s + n;
    }
    p->mac = hmac_fetch();
    p->multi = curl_multi_init();
    p->timer = evtimer_new(base, timer_event_cb, p);
    p->pump = event_new(base, -1, 0, pump_cb, p);
    p->retry = evtimer_new(base, retry_cb, p);
    p->settle = event_new(base, -1, 0, settle_cb, p);
    p->qcheck = evtimer_new(base, qcheck_cb, p);
    if (!p->mac || !p->multi || !p->timer || !p->pump || !p->retry ||
        !p->settle || !p->qcheck) {
        snprintf(err, errlen, "push: cannot start libcurl or libcrypto");
        pusher_free(p);
        return NULL;
    }
    curl_multi_setopt(p->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(p->multi, CURLMOPT_SOCKETDATA, p);
    curl_multi_setopt(p->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(p->multi, CURLMOPT_TIMERDATA, p);
    /* Connections to one receiver (host and port): beyond this, requests
     * wait in curl's queue. A receiver that never answers then costs at
     * most this many connects per --push-timeout, however many topics
     * point at it; thousands of connects a second to one address make the
     * kernel search long for a free port in every connect() (seconds of
     * stall measured with 3,200 connections timing out every second). */
    curl_multi_setopt(p->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
                      (long)PUSH_HOST_CONNECTIONS);
    curl_multi_setopt(p->multi, CURLMOPT_MAXCONNECTS,
                      (long)(p->cfg.concurrency * 16 > 1024
                                 ? p->cfg.concurrency * 16
                                 : 1024));
    if (core_can_push(core)) {
        core_set_push_ready(core, on_push_ready, p);
        p->listing = xmalloc(sizeof *p->listing);
        *p->listing = p;
        core_topics(core, topics_cb, p->listing);
    }
    return p;
}

void pusher_stop(struct pusher *p) {
    if (p) p->stopping = true;
}

bool pusher_idle(const struct pusher *p) {
    return !p || (p->inflight == 0 && p->reserving == 0 && !p->listing);
}

static void free_entry(void *ud, struct hnode *n) { dq_free(n); }

/* A topic whose reserve is in flight is left to reserve_cb (the core's
 * store completes every call when it closes, after the pusher). */
static void free_topic(void *ud, struct hnode *n) {
    struct ptopic *t = (struct ptopic *)n;
    if (t->reserving) t->p = NULL;
    else dq_free(t);
}

/* Deliveries not yet settled (with curl, waiting for their receiver, or
 * finished and not yet settled) are dropped: their jobs stay reserved and
 * come back when their lease ends. Those waiting for the core to settle
 * them are orphaned: their callback frees them when it comes (the core's
 * store completes everything when it closes). */
static void drop_deliveries(struct pusher *p) {
    struct delivery *d = p->all;
    while (d) {
        struct delivery *next = d->next;
        if (d->easy) {
            curl_multi_remove_handle(p->multi, d->easy);
            curl_easy_cleanup(d->easy);
            d->easy = NULL;
        }
        if (!d->end_us) delivery_free(d); /* not yet settled: no call to wait for */
        else d->p = NULL;                 /* its ACK or NACK completes later */
        d = next;
    }
    p->all = NULL;
}

void pusher_free(struct pusher *p) {
    if (!p) return;
    core_set_push_ready(p->core, NULL, NULL);
    drop_deliveries(p);
    if (p->multi) curl_multi_cleanup(p->multi);
    for (size_t i = 0; i < p->nidle; i++) curl_easy_cleanup(p->idle[i]);
    if (p->timer) event_free(p->timer);
    if (p->pump) event_free(p->pump);
    if (p->retry) event_free(p->retry);
    if (p->settle) event_free(p->settle);
    if (p->qcheck) event_free(p->qcheck);
    if (p->mac) EVP_MAC_free(p->mac);
    htab_foreach(&p->topics, free_topic, NULL);
    htab_destroy(&p->topics);
    if (p->listing) *p->listing = NULL;
    htab_foreach(&p->hosts, free_entry, NULL);
    htab_destroy(&p->hosts);
    dq_free(p);
}
