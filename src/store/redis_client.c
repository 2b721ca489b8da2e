/* redis_client.c -- connections, deadlines and cluster routing for the
 * Redis store (see redis_client.h).
 *
 * Every command is a `struct rcall` that lives until Redis answered it or
 * its connection closed. At most MAX_INFLIGHT calls are in flight on a
 * connection, and of the calls that read whole records (RCLI_READS) as
 * many as READ_BYTES of their replies hold, judged by the last ones: the
 * window starts at READ_WIN0, grows by one per small reply and shrinks to
 * fit a big one (TCP's slow start, in calls). The others wait in its
 * queue, in order. That keeps Redis's own backlog short: Redis runs every
 * call it has read before it writes their replies (then 64 KB of them per
 * turn of its loop), so one client's flood (say thousands of GETs of
 * 512 KB bodies: 8 MiB of records a call) would otherwise make it spend
 * seconds producing output before it sends any.
 *
 * Deadlines: a call whose deadline passes completes as unavailable at once
 * (queued: dropped; in flight: abandoned, its reply ignored when it comes).
 * A connection whose oldest call has waited STUCK_US without a byte from
 * Redis is closed and reconnected: Redis (or the path to it) is stuck. One
 * still streaming a big reply is not.
 *
 * Under a sentinel URL, where the data connections go is found and followed
 * by redis_sentinel.c; redis_client_int.h shares the structs.
 */
#include <errno.h>
#include <event2/event.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/xalloc.h"
#include "store/redis_client.h"
#include "store/redis_client_int.h"
#include "store/redis_arena.h"
#include "store/redis_ev.h"

#define CONNECT_TIMEOUT_US 1500000
#define BACKOFF_MAX_MS 2000
#define TICK_MS 50
#define MAX_REDIRECTS 5
#define MAX_INFLIGHT 64           /* calls in flight per connection */
#define READ_BYTES (32u << 20)    /* RCLI_READS replies in flight */
#define READ_WIN0 4               /* RCLI_READS calls in flight at first */
#define STUCK_US 3000000          /* no reply for this long: reconnect */
#define REFRESH_EVERY_US 10000000 /* slot map refresh without a MOVED */
#define REFRESH_MIN_US 250000     /* at most 4 refreshes a second */
#define PARTIAL_REFRESH_US 1000000 /* while slots are missing: every second */
#define WARN_SUMMARY_US 30000000  /* a repeated warning: once per 30 s */

int64_t rcli_now_us(void) { return clock_coarse_us(); }

void rwarn(struct rwarn *w, int64_t now, const char *fmt, ...) {
    char m[sizeof w->last];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    if (strcmp(m, w->last) != 0) {
        if (w->repeats) log_warn("%s (%" PRIu64 " more times)", w->last, w->repeats);
        log_warn("%s", m);
        memcpy(w->last, m, sizeof m);
        w->at = now;
        w->repeats = 0;
        return;
    }
    w->repeats++;
    if (now - w->at >= WARN_SUMMARY_US) {
        log_warn("%s (%" PRIu64 " times in the last %d s)", m, w->repeats,
                 (int)((now - w->at) / 1000000));
        w->at = now;
        w->repeats = 0;
    }
}

void rwarn_clear(struct rwarn *w) {
    if (w->repeats) log_warn("%s (%" PRIu64 " more times)", w->last, w->repeats);
    w->last[0] = '\0';
    w->repeats = 0;
}

static void dispatch(struct rcli *c, struct rcall *k, struct rconn *to,
                     bool asking);
static void refresh_map(struct rcli *c);

/* --- RESP building -------------------------------------------------------- */

static size_t put_bulk(char *out, const char *p, size_t len) {
    int n = sprintf(out, "$%zu\r\n", len);
    memcpy(out + n, p, len);
    memcpy(out + n + len, "\r\n", 2);
    return (size_t)n + len + 2;
}

/* A call, not yet sent; it owns cmd. */
static struct rcall *call_new(struct rcli *c, int slot, enum rcli_kind kind,
                              int argc, char *cmd, size_t len,
                              int64_t deadline, rcli_cb *cb, void *pd) {
    struct rcall *k = xcalloc(1, sizeof *k);
    k->cli = c;
    k->cb = cb;
    k->pd = pd;
    k->slot = slot;
    k->argc = argc;
    k->kind = kind;
    k->cmd = cmd;
    k->len = len;
    k->deadline = deadline;
    return k;
}

/* A RAW call of a few short arguments. */
static void send_simple(struct rcli *c, struct rconn *to, int slot,
                        int64_t deadline, rcli_cb *cb, void *pd, int argc,
                        const char **argv, const size_t *lens) {
    size_t total = 0;
    for (int i = 0; i < argc; i++) total += lens[i] + 32;
    char *cmd = xmalloc(total);
    size_t off = 0;
    for (int i = 0; i < argc; i++) off += put_bulk(cmd + off, argv[i], lens[i]);
    dispatch(c, call_new(c, slot, RCLI_RAW, argc, cmd, off, deadline, cb, pd),
             to, false);
}

/* --- calls -------------------------------------------------------------- */

static void call_unlink(struct rcall *k) {
    if (!k->linked) return;
    struct rconn *n = k->conn;
    if (k->prev) k->prev->next = k->next;
    else n->head = k->next;
    if (k->next) k->next->prev = k->prev;
    else n->tail = k->prev;
    k->prev = k->next = NULL;
    k->linked = false;
    n->inflight--;
    if (k->kind == RCLI_READS) n->reads--;
}

/* Completes a call and frees it. sent: it was written to Redis (with no
 * reply: the outcome is unknown). */
static void call_finish(struct rcall *k, redisReply *r, const char *err, bool sent) {
    rcli_cb *cb = k->cb;
    void *pd = k->pd;
    dq_free(k->cmd);
    dq_free(k);
    if (cb) cb(pd, r, err, sent);
}

/* Completes a call that stays in flight: its reply will be ignored. */
static void call_abandon(struct rcall *k, const char *err) {
    rcli_cb *cb = k->cb;
    k->cb = NULL;
    if (cb) cb(k->pd, NULL, err, true);
}

static void queue_push(struct rconn *n, struct rcall *k) {
    k->conn = n;
    k->queued = true;
    k->next = NULL;
    k->prev = n->qtail;
    if (n->qtail) n->qtail->next = k;
    else n->qhead = k;
    n->qtail = k;
    n->queued++;
}

static void queue_unlink(struct rcall *k) {
    struct rconn *n = k->conn;
    if (k->prev) k->prev->next = k->next;
    else n->qhead = k->next;
    if (k->next) k->next->prev = k->prev;
    else n->qtail = k->prev;
    k->prev = k->next = NULL;
    k->queued = false;
    n->queued--;
}

/* Fails every queued call of a connection that went down. */
static void queue_fail(struct rconn *n, const char *why) {
    while (n->qhead) {
        struct rcall *k = n->qhead;
        queue_unlink(k);
        call_finish(k, NULL, why, false);
    }
}

/* --- connections -------------------------------------------------------- */

static void conn_schedule(struct rconn *n) {
    if (n->cli->closing) return;
    struct timeval tv = {n->backoff_ms / 1000, (n->backoff_ms % 1000) * 1000};
    event_add(n->retry_ev, &tv);
    n->backoff_ms *= 2;
    if (n->backoff_ms > BACKOFF_MAX_MS) n->backoff_ms = BACKOFF_MAX_MS;
}

/* The connection is gone (hiredis frees or has freed the context). */
static void conn_down(struct rconn *n, const char *why) {
    if (n->state == C_DOWN) return;
    bool was_up = n->state == C_UP;
    n->state = C_DOWN;
    n->ac = NULL;
    n->handshaken = false;
    if (!n->cli->closing) {
        if (was_up)
            log_warn("redis %s:%d: connection lost (%s)", n->host, n->port, why);
        else
            log_debug("redis %s:%d: cannot connect (%s)", n->host, n->port, why);
    }
    struct rcli *c = n->cli;
    if (n->sub) c->sub_seed++;
    else if (n->sentinel) c->sent_seed++;
    else if (c->slots) c->refresh_wanted = true;
    conn_schedule(n);
    queue_fail(n, "Redis connection lost");
    if (!n->sentinel && c->sent && !c->switching) rc_sentinel_ask(c);
}

/* Closes a live connection on our initiative: every call on it completes
 * with reply NULL. Not to be called from inside one of its callbacks. */
void rc_conn_kill(struct rconn *n, const char *why) {
    redisAsyncContext *ac = n->ac;
    conn_down(n, why);
    if (ac) {
        ac->data = NULL;
        redisAsyncFree(ac);
    }
}

static void on_connect(const redisAsyncContext *ac, int status) {
    struct rconn *n = ac->data;
    if (!n) return;
    if (status != REDIS_OK) {
        conn_down(n, ac->errstr);
        return;
    }
    n->state = C_UP;
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
    struct rconn *n = ac->data;
    if (!n || n->ac != ac) return;
    conn_down(n, status == REDIS_OK ? "closed" : ac->errstr);
}

static void retry_cb(evutil_socket_t fd, short what, void *arg) {
    rc_conn_connect(arg);
}

static void noop_cb(void *pd, redisReply *r, const char *err, bool sent) {}

static void auth_cb(void *pd, redisReply *r, const char *err, bool sent) {
    struct rconn *n = pd;
    if (r && r->type == REDIS_REPLY_ERROR)
        log_error("redis %s:%d: AUTH failed: %s", n->host, n->port, r->str);
}

static void select_cb(void *pd, redisReply *r, const char *err, bool sent) {
    struct rconn *n = pd;
    if (r && r->type == REDIS_REPLY_ERROR)
        log_error("redis %s:%d: SELECT failed: %s", n->host, n->port, r->str);
}

/* The connection is ready for script calls. */
static void handshake_done(struct rconn *n) {
    struct rcli *c = n->cli;
    n->handshaken = true;
    n->backoff_ms = BACKOFF_MIN_MS;
    log_info("redis %s:%d: connected (script calls by %s)", n->host, n->port,
             n->fcall ? "FCALL" : "EVALSHA");
    if (c->slots) {
        /* a master came (back): its slots may have moved meanwhile */
        if (!c->map_loaded || !c->refreshing) refresh_map(c);
        if (c->map_loaded && c->cfg.on_up) c->cfg.on_up(c->cfg.ud);
    } else if (c->cfg.on_up) {
        c->cfg.on_up(c->cfg.ud);
    }
}

static void script_load_cb(void *pd, redisReply *r, const char *err, bool sent) {
    struct rconn *n = pd;
    struct rcli *c = n->cli;
    if (!r) return;
    if (r->type != REDIS_REPLY_STRING || r->len != 40) {
        log_error("redis %s:%d: SCRIPT LOAD failed: %s", n->host, n->port,
                  r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        return;
    }
    memcpy(c->sha, r->str, 40);
    c->sha[40] = '\0';
    handshake_done(n);
}

/* Whether a FUNCTION LOAD reply says the library is there (loaded now, or
 * by this or another instance of the same build before). */
static bool lib_loaded(const redisReply *r) {
    return r->type == REDIS_REPLY_STRING ||
           (r->type == REDIS_REPLY_ERROR && strstr(r->str, "already exists"));
}

/* FUNCTION LOAD at connect: with it, script calls go as FCALL; without
 * (Redis before 7.0, or refused), SCRIPT LOAD and EVALSHA. */
static void function_load_cb(void *pd, redisReply *r, const char *err, bool sent) {
    struct rconn *n = pd;
    struct rcli *c = n->cli;
    if (!r || n->state == C_DOWN || !n->ac) return;
    n->fcall = lib_loaded(r);
    if (n->fcall) {
        handshake_done(n);
        return;
    }
    log_info("redis %s:%d: FUNCTION LOAD refused (%s): script calls by EVALSHA", n->host,
             n->port, r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    const char *av[3] = {"SCRIPT", "LOAD", c->evsrc};
    size_t al[3] = {6, 4, c->srclen};
    send_simple(c, n, -1, n->connect_deadline, script_load_cb, n, 3, av, al);
}

/* FUNCTION LOAD again, after a node answered that it had no such function
 * (FUNCTION FLUSH, or a replica promoted before it got the library). */
static void function_reload_cb(void *pd, redisReply *r, const char *err, bool sent) {
    struct rconn *n = pd;
    if (r && lib_loaded(r) && n->state != C_DOWN) n->fcall = true;
}

static void message_cb(redisAsyncContext *ac, void *reply, void *pd) {
    struct rconn *n = ac->data;
    redisReply *r = reply;
    if (!n || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 3) return;
    redisReply *kind = r->element[0];
    if (kind->type != REDIS_REPLY_STRING) return;
    if (strcmp(kind->str, "subscribe") == 0) {
        n->backoff_ms = BACKOFF_MIN_MS;
        log_debug("redis %s:%d: subscribed", n->host, n->port);
        /* messages may have been missed while it was down */
        if (n->cli->cfg.on_up && rcli_ready(n->cli)) n->cli->cfg.on_up(n->cli->cfg.ud);
        return;
    }
    if (strcmp(kind->str, "message") != 0) return;
    redisReply *msg = r->element[2];
    if (msg->type == REDIS_REPLY_STRING && n->cli->cfg.on_message)
        n->cli->cfg.on_message(n->cli->cfg.ud, msg->str, msg->len);
}

void rc_conn_connect(struct rconn *n) {
    struct rcli *c = n->cli;
    if (c->closing || n->state != C_DOWN) return;
    if (c->url.sentinel) {
        if (!rc_sentinel_address(n)) return;
    } else if (n->sub) { /* follow the seeds round robin */
        size_t i = c->sub_seed % c->url.nhosts;
        snprintf(n->host, sizeof n->host, "%s", c->url.hosts[i].host);
        n->port = c->url.hosts[i].port;
    }
    redisAsyncContext *ac = redisAsyncConnect(n->host, n->port);
    if (!ac || ac->err) {
        log_debug("redis %s:%d: cannot connect (%s)", n->host, n->port,
                  ac ? ac->errstr : "out of memory");
        if (ac) redisAsyncFree(ac);
        conn_schedule(n);
        return;
    }
    ac->data = n;
    redis_arena_use(ac->c.reader, n->arena);
    if (redis_ev_attach(ac, c->base) != REDIS_OK) {
        redisAsyncFree(ac);
        conn_schedule(n);
        return;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    n->ac = ac;
    n->state = C_CONNECTING;
    n->rwin = READ_WIN0;
    n->connect_deadline = rcli_now_us() + CONNECT_TIMEOUT_US;
    int64_t dl = n->connect_deadline;
    if (n->sentinel) {
        rc_sentinel_hello(n);
        return;
    }
    if (c->url.password[0]) {
        const char *av[3] = {"AUTH", c->url.user, c->url.password};
        size_t al[3] = {4, strlen(c->url.user), strlen(c->url.password)};
        if (c->url.user[0]) send_simple(c, n, -1, dl, auth_cb, n, 3, av, al);
        else {
            av[1] = c->url.password;
            al[1] = al[2];
            send_simple(c, n, -1, dl, auth_cb, n, 2, av, al);
        }
        if (n->state == C_DOWN) return;
    }
    if (n->sub) {
        redisAsyncCommand(ac, message_cb, NULL, "SUBSCRIBE %s", c->channel);
        return;
    }
    if (c->url.db && !c->slots) {
        char db[16];
        int dlen = snprintf(db, sizeof db, "%d", c->url.db);
        const char *av[2] = {"SELECT", db};
        size_t al[2] = {6, (size_t)dlen};
        send_simple(c, n, -1, dl, select_cb, n, 2, av, al);
        if (n->state == C_DOWN) return;
    }
    const char *av[3] = {"FUNCTION", "LOAD", c->lib};
    size_t al[3] = {8, 4, c->liblen};
    n->fcall = false;
    send_simple(c, n, -1, dl, function_load_cb, n, 3, av, al);
}

struct rconn *rc_conn_new(struct rcli *c, const char *host, int port,
                          bool sub) {
    struct rconn *n = xcalloc(1, sizeof *n);
    n->cli = c;
    snprintf(n->host, sizeof n->host, "%s", host);
    n->port = port;
    n->sub = sub;
    n->state = C_DOWN;
    n->backoff_ms = BACKOFF_MIN_MS;
    n->retry_ev = evtimer_new(c->base, retry_cb, n);
    n->arena = redis_arena_new(); /* for each context it connects with */
    if (!sub) {
        n->next = c->conns;
        c->conns = n;
    }
    return n;
}

/* The data connection to host:port, made (and connecting) if new. */
static struct rconn *conn_get(struct rcli *c, const char *host, int port) {
    for (struct rconn *n = c->conns; n; n = n->next)
        if (n->port == port && strcmp(n->host, host) == 0) return n;
    struct rconn *n = rc_conn_new(c, host, port, false);
    rc_conn_connect(n);
    return n;
}

/* --- routing and sending ---------------------------------------------------- */

static struct rconn *route(struct rcli *c, int slot) {
    if (!c->slots) return c->conns;
    if (slot >= 0 && c->map_loaded && c->slots[slot]) return c->slots[slot];
    /* no map yet: any live node answers MOVED if it is the wrong one */
    struct rconn *best = NULL;
    for (struct rconn *n = c->conns; n; n = n->next) {
        if (n->state == C_UP && n->handshaken) return n;
        if (n->state != C_DOWN && !best) best = n;
    }
    return best ? best : c->conns;
}

static void reply_cb(redisAsyncContext *ac, void *reply, void *pd);

/* whether call k may go out on n now */
static bool room(const struct rconn *n, const struct rcall *k) {
    return n->inflight < MAX_INFLIGHT && (k->kind != RCLI_READS || n->reads < n->rwin);
}

/* the bytes of a reply's strings, three levels deep (the script's replies) */
static size_t reply_bytes(const redisReply *r, int depth) {
    size_t b = 16;
    if (r->type == REDIS_REPLY_ARRAY) {
        if (depth > 0)
            for (size_t i = 0; i < r->elements; i++) b += reply_bytes(r->element[i], depth - 1);
    } else if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_ERROR ||
               r->type == REDIS_REPLY_STATUS) {
        b += r->len;
    }
    return b;
}

/* the read window after a RCLI_READS reply of `bytes` */
static void read_window(struct rconn *n, size_t bytes) {
    if (bytes <= READ_BYTES / MAX_INFLIGHT) {
        if (n->rwin < MAX_INFLIGHT) n->rwin++;
    } else {
        size_t fit = READ_BYTES / bytes;
        n->rwin = fit < 1 ? 1 : fit < n->rwin ? fit : n->rwin;
    }
}

static void send_now(struct rcli *c, struct rconn *n, struct rcall *k);

static void dispatch(struct rcli *c, struct rcall *k, struct rconn *to,
                     bool asking) {
    struct rconn *n = to ? to : route(c, k->slot);
    if (!n || n->state == C_DOWN || !n->ac) {
        if (c->slots) c->refresh_wanted = true;
        call_finish(k, NULL, "Redis is not connected", false);
        return;
    }
    k->asking = asking;
    if (n->qhead || !room(n, k)) {
        queue_push(n, k);
        return;
    }
    send_now(c, n, k);
}

/* Sends queued calls while there is room in flight. */
static void queue_run(struct rconn *n) {
    while (n->qhead && room(n, n->qhead) && n->ac && n->state != C_DOWN) {
        struct rcall *k = n->qhead;
        queue_unlink(k);
        send_now(n->cli, n, k);
    }
}

static void send_now(struct rcli *c, struct rconn *n, struct rcall *k) {
    if (k->asking) {
        const char *av[1] = {"ASKING"};
        size_t al[1] = {6};
        k->asking = false;
        struct rcall *a = xcalloc(1, sizeof *a);
        size_t total = 32;
        a->cli = c;
        a->cb = noop_cb;
        a->slot = -1;
        a->argc = 1;
        a->kind = RCLI_RAW;
        a->cmd = xmalloc(total);
        a->len = put_bulk(a->cmd, av[0], al[0]);
        a->deadline = k->deadline;
        send_now(c, n, a);
        if (n->state == C_DOWN || !n->ac) {
            call_finish(k, NULL, "Redis is not connected", false);
            return;
        }
    }
    char head[128];
    size_t hlen;
    const char *h2 = NULL;
    size_t h2len = 0;
    if (k->kind == RCLI_RAW) {
        hlen = (size_t)sprintf(head, "*%d\r\n", k->argc);
    } else if (!k->eval && n->fcall) {
        hlen = (size_t)sprintf(head, "*%d\r\n$5\r\nFCALL\r\n$%zu\r\n%s\r\n", k->argc + 2,
                               strlen(c->fname), c->fname);
    } else if (!k->eval && c->sha[0]) {
        hlen = (size_t)sprintf(head, "*%d\r\n$7\r\nEVALSHA\r\n$40\r\n%s\r\n",
                               k->argc + 2, c->sha);
    } else {
        hlen = (size_t)sprintf(head, "*%d\r\n$4\r\nEVAL\r\n$%zu\r\n", k->argc + 2,
                               c->srclen);
        h2 = c->evsrc;
        h2len = c->srclen;
    }
    size_t total = hlen + (h2 ? h2len + 2 : 0) + k->len;
    char *full = xmalloc(total);
    memcpy(full, head, hlen);
    size_t off = hlen;
    if (h2) {
        memcpy(full + off, h2, h2len);
        memcpy(full + off + h2len, "\r\n", 2);
        off += h2len + 2;
    }
    memcpy(full + off, k->cmd, k->len);
    int rc = redisAsyncFormattedCommand(n->ac, reply_cb, k, full, total);
    dq_free(full);
    if (rc != REDIS_OK) {
        call_finish(k, NULL, "Redis connection is closing", false);
        return;
    }
    n->calls++;
    k->conn = n;
    k->sent = rcli_now_us();
    k->linked = true;
    k->prev = n->tail;
    k->next = NULL;
    if (n->tail) n->tail->next = k;
    else n->head = k;
    n->tail = k;
    n->inflight++;
    if (k->kind == RCLI_READS) n->reads++;
}

/* "MOVED 3999 127.0.0.1:6381" -> slot and address. */
static int parse_redirect(const char *s, int *slot, char *host, size_t hcap,
                          int *port) {
    const char *sp = strchr(s, ' ');
    if (!sp) return -1;
    *slot = atoi(sp + 1);
    const char *addr = strchr(sp + 1, ' ');
    if (!addr) return -1;
    addr++;
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || (size_t)(colon - addr) >= hcap) return -1;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    *port = atoi(colon + 1);
    if (*slot < 0 || *slot >= REDIS_SLOTS || *port <= 0) return -1;
    return 0;
}

static void reply_cb(redisAsyncContext *ac, void *reply, void *pd) {
    struct rcall *k = pd;
    struct rconn *n = k->conn;
    struct rcli *c = k->cli;
    redisReply *r = reply;
    call_unlink(k);
    n->heard = rcli_now_us();
    if (!r) {
        conn_down(n, ac->errstr[0] ? ac->errstr : "closed");
        call_finish(k, NULL, "Redis connection lost", true);
        return;
    }
    if (k->kind == RCLI_READS) read_window(n, reply_bytes(r, 3));
    queue_run(n);
    if (!k->cb) { /* abandoned at its deadline */
        call_finish(k, NULL, NULL, true);
        return;
    }
    if (r->type == REDIS_REPLY_ERROR && k->redirects < MAX_REDIRECTS &&
        !c->closing) {
        if (k->kind != RCLI_RAW && (strncmp(r->str, "NOSCRIPT", 8) == 0 ||
                                       strncmp(r->str, "ERR Function not found", 22) == 0)) {
            k->redirects++;
            k->eval = true;
            if (n->fcall) { /* this call as EVAL, the next ones FCALL again */
                const char *av[3] = {"FUNCTION", "LOAD", c->lib};
                size_t al[3] = {8, 4, c->liblen};
                n->fcall = false;
                send_simple(c, n, -1, k->deadline, function_reload_cb, n, 3, av, al);
            }
            dispatch(c, k, n, false);
            return;
        }
        bool moved = strncmp(r->str, "MOVED ", 6) == 0;
        if (moved || strncmp(r->str, "ASK ", 4) == 0) {
            int slot, port;
            char host[REDIS_URL_HOST_MAX + 1];
            if (parse_redirect(r->str, &slot, host, sizeof host, &port) == 0) {
                if (host[0] == '\0') snprintf(host, sizeof host, "%s", n->host);
                struct rconn *to = conn_get(c, host, port);
                k->redirects++;
                if (moved && c->slots) {
                    c->slots[slot] = to;
                    c->refresh_wanted = true;
                }
                dispatch(c, k, to, !moved);
                return;
            }
        }
    }
    if (r->type == REDIS_REPLY_ERROR && c->sent &&
        (strncmp(r->str, "READONLY", 8) == 0 || strncmp(r->str, "MASTERDOWN", 10) == 0))
        rc_sentinel_ask(c); /* talking to a replica: the master moved */
    if (r->type == REDIS_REPLY_ERROR && c->slots &&
        (strncmp(r->str, "CLUSTERDOWN", 11) == 0 || strncmp(r->str, "TRYAGAIN", 8) == 0))
        c->refresh_wanted = true; /* a failover or a reshard under way */
    call_finish(k, r, NULL, true);
}

/* --- the cluster slot map ----------------------------------------------- */

static void slots_cb(void *pd, redisReply *r, const char *err, bool sent) {
    struct rcli *c = pd;
    c->refreshing = false;
    if (c->closing) return;
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        c->refresh_wanted = true;
        if (r) {
            snprintf(c->why, sizeof c->why, "Redis Cluster: CLUSTER SLOTS failed: %s",
                     r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
            rwarn(&c->mapwarn, rcli_now_us(), "redis cluster: %s", c->why);
        }
        return;
    }
    static struct rconn *next[REDIS_SLOTS];
    memset(next, 0, sizeof next);
    size_t covered = 0;
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3) continue;
        redisReply *m = e->element[2];
        if (e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
            m->element[0]->type != REDIS_REPLY_STRING ||
            m->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        if (lo < 0 || hi >= REDIS_SLOTS || lo > hi) continue;
        const char *host = m->element[0]->str;
        if (host[0] == '\0' || strcmp(host, "?") == 0) host = c->url.hosts[0].host;
        struct rconn *to = conn_get(c, host, (int)m->element[1]->integer);
        for (long long s = lo; s <= hi; s++) next[s] = to;
        covered += (size_t)(hi - lo + 1);
    }
    if (covered == 0) {
        snprintf(c->why, sizeof c->why, "the Redis Cluster has no slots assigned "
                 "(not created yet?)");
        rwarn(&c->mapwarn, rcli_now_us(), "redis cluster: %s", c->why);
        c->refresh_wanted = true;
        return;
    }
    if (covered < REDIS_SLOTS) {
        snprintf(c->why, sizeof c->why, "the Redis Cluster serves %zu of %d slots",
                 covered, REDIS_SLOTS);
        rwarn(&c->mapwarn, rcli_now_us(), "redis cluster: %s", c->why);
    } else {
        rwarn_clear(&c->mapwarn);
        c->why[0] = '\0';
    }
    unsigned masters = 0;
    for (struct rconn *n = c->conns; n; n = n->next)
        for (size_t s = 0; s < REDIS_SLOTS; s++)
            if (next[s] == n) {
                masters++;
                break;
            }
    bool first = !c->map_loaded;
    bool moved = memcmp(c->slots, next, sizeof next) != 0;
    if (!first && moved)
        log_info("redis cluster: the slot map changed (%u masters)", masters);
    if (first || masters != c->masters || covered != c->covered)
        log_info("redis cluster: %u masters, %zu of %d slots covered", masters,
                 covered, REDIS_SLOTS);
    memcpy(c->slots, next, sizeof next);
    c->masters = masters;
    c->covered = covered;
    c->map_loaded = true;
    c->refresh_wanted = false;
    if (first && c->cfg.on_up) c->cfg.on_up(c->cfg.ud);
}

static void refresh_map(struct rcli *c) {
    if (!c->slots || c->refreshing || c->closing) return;
    struct rconn *to = NULL;
    for (struct rconn *n = c->conns; n && !to; n = n->next)
        if (n->state == C_UP && n->handshaken) to = n;
    for (struct rconn *n = c->conns; n && !to; n = n->next)
        if (n->state == C_CONNECTING) to = n;
    if (!to) return;
    c->refreshing = true;
    c->last_refresh = rcli_now_us();
    const char *av[2] = {"CLUSTER", "SLOTS"};
    size_t al[2] = {7, 5};
    send_simple(c, to, -1, c->last_refresh + CONNECT_TIMEOUT_US, slots_cb, c, 2,
                av, al);
}

/* --- the tick: deadlines, connect timeouts, map refreshes ---------------- */

/* The last time Redis sent n something: a reply, or bytes of one that the
 * reader holds (a big reply streams in over many turns). */
static int64_t heard(struct rconn *n, int64_t now) {
    const redisReader *rd = n->ac ? n->ac->c.reader : NULL;
    if (rd && (rd->len != n->rd_len || rd->pos != n->rd_pos)) {
        n->rd_len = rd->len;
        n->rd_pos = rd->pos;
        n->heard = now;
    }
    return n->heard;
}

static void tick_cb(evutil_socket_t fd, short what, void *arg) {
    struct rcli *c = arg;
    int64_t now = rcli_now_us();
    for (struct rconn *n = c->conns; n; n = n->next) {
        if (n->state == C_CONNECTING && now > n->connect_deadline && !n->handshaken) {
            rc_conn_kill(n, "connect timeout");
            continue;
        }
        if (n->state != C_DOWN && n->head) {
            int64_t last = heard(n, now);
            if (last < n->head->sent) last = n->head->sent;
            if (now - last > STUCK_US) {
                rc_conn_kill(n, "no reply in time");
                continue;
            }
        }
        /* deadlines: queued calls are dropped, calls in flight abandoned */
        for (struct rcall *k = n->qhead, *next; k; k = next) {
            next = k->next;
            if (now > k->deadline) {
                queue_unlink(k);
                call_finish(k, NULL, "Redis did not answer in time", false);
            }
        }
        for (struct rcall *k = n->head; k; k = k->next)
            if (k->cb && now > k->deadline)
                call_abandon(k, "Redis did not answer in time");
    }
    if (c->sub && c->sub->state == C_CONNECTING && now > c->sub->connect_deadline)
        rc_conn_kill(c->sub, "connect timeout");
    if (c->sent && c->sent->state == C_CONNECTING && now > c->sent->connect_deadline)
        rc_conn_kill(c->sent, "connect timeout");
    int64_t since = now - c->last_refresh;
    if (c->slots && !c->refreshing &&
        ((c->refresh_wanted && since >= REFRESH_MIN_US) ||
         (c->covered < REDIS_SLOTS && since >= PARTIAL_REFRESH_US) ||
         since > REFRESH_EVERY_US))
        refresh_map(c);
}

/* --- public ------------------------------------------------------------- */

/* The two forms of the script (see lua/delayq.lua): a function library
 * named after a hash of the source, so that instances of different builds
 * sharing a Redis each call their own; and an EVAL script that runs main. */
static void script_forms(struct rcli *c, const char *src) {
    uint64_t h = 1469598103934665603ULL;
    for (const char *p = src; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    snprintf(c->fname, sizeof c->fname, "delayq_%016" PRIx64, h);
    const char *body = strchr(src, '\n'); /* after the "#!lua" line */
    body = body ? body + 1 : src;
    size_t bl = strlen(body);
    c->lib = xmalloc(bl + 2 * sizeof c->fname + 64);
    c->liblen = (size_t)sprintf(c->lib, "#!lua name=%s\n%s\nredis.register_function('%s', main)\n",
                                c->fname, body, c->fname);
    c->evsrc = xmalloc(bl + 64);
    c->srclen = (size_t)sprintf(c->evsrc, "#!lua\nlocal EK, EA = KEYS, ARGV\n%s\nreturn main(EK, EA)\n",
                                body);
}

struct rcli *rcli_new(const struct rcli_config *cfg, char *err, size_t errlen) {
    struct rcli *c = xcalloc(1, sizeof *c);
    c->cfg = *cfg;
    c->url = *cfg->url;
    c->base = cfg->base;
    c->tick_ev = event_new(c->base, -1, EV_PERSIST, tick_cb, c);
    if (!c->tick_ev) {
        snprintf(err, errlen, "cannot create the Redis client's timer");
        dq_free(c);
        return NULL;
    }
    script_forms(c, cfg->script);
    struct timeval tv = {0, TICK_MS * 1000};
    event_add(c->tick_ev, &tv);
    if (c->url.cluster) c->slots = xcalloc(REDIS_SLOTS, sizeof *c->slots);
    if (c->url.sentinel) {
        rc_sentinel_start(c);
    } else {
        /* seeds (the standalone node is the one seed); connect in URL order */
        for (size_t i = c->url.nhosts; i-- > 0;)
            rc_conn_new(c, c->url.hosts[i].host, c->url.hosts[i].port, false);
        for (struct rconn *n = c->conns; n; n = n->next) rc_conn_connect(n);
    }
    if (cfg->channel) {
        c->channel = xstrndup(cfg->channel, strlen(cfg->channel));
        c->sub = rc_conn_new(c, c->url.hosts[0].host, c->url.hosts[0].port, true);
        rc_conn_connect(c->sub);
    }
    return c;
}

/* Drives the connections' I/O by hand until nothing is in flight. */
static void drain(struct rcli *c, int ms) {
    int64_t end = rcli_now_us() + (int64_t)ms * 1000;
    for (;;) {
        struct pollfd fds[64];
        struct rconn *who[64];
        nfds_t nf = 0;
        for (struct rconn *n = c->conns; n && nf < 64; n = n->next) {
            if (!n->ac || !n->head) continue;
            fds[nf].fd = n->ac->c.fd;
            fds[nf].events = POLLIN | (sdslen(n->ac->c.obuf) ? POLLOUT : 0);
            fds[nf].revents = 0;
            if (n->state == C_CONNECTING) fds[nf].events |= POLLOUT;
            who[nf++] = n;
        }
        int64_t left = end - rcli_now_us();
        if (nf == 0 || left <= 0) return;
        int rc = poll(fds, nf, (int)(left / 1000) + 1);
        if (rc < 0 && errno != EINTR) return;
        for (nfds_t i = 0; i < nf; i++) {
            struct rconn *n = who[i];
            if (!fds[i].revents || !n->ac) continue;
            redisAsyncContext *ac = n->ac;
            if (fds[i].revents & POLLOUT) redisAsyncHandleWrite(ac);
            if (n->ac == ac && (fds[i].revents & (POLLIN | POLLERR | POLLHUP)))
                redisAsyncHandleRead(ac);
        }
    }
}

void rcli_free(struct rcli *c, int drain_ms) {
    if (!c) return;
    if (drain_ms > 0) drain(c, drain_ms);
    c->closing = true;
    struct rconn *all = c->conns;
    if (c->sub) {
        c->sub->next = all;
        all = c->sub;
    }
    if (c->sent) {
        c->sent->next = all;
        all = c->sent;
    }
    for (struct rconn *n = all; n; n = n->next)
        if (n->ac) rc_conn_kill(n, "closing");
    while (all) {
        struct rconn *n = all;
        all = n->next;
        event_free(n->retry_ev);
        redis_arena_free(n->arena); /* after its context (rc_conn_kill) */
        dq_free(n);
    }
    event_free(c->tick_ev);
    dq_free(c->slots);
    dq_free(c->channel);
    dq_free(c->lib);
    dq_free(c->evsrc);
    dq_free(c);
}

void rcli_send(struct rcli *c, int slot, enum rcli_kind kind, int argc,
               char *cmd, size_t len, int64_t deadline_us, rcli_cb *cb,
               void *pd) {
    struct rcall *k =
        call_new(c, slot, kind, argc, cmd, len, deadline_us, cb, pd);
    if (c->closing) {
        call_finish(k, NULL, "closing", false);
        return;
    }
    dispatch(c, k, NULL, false);
}

void rcli_status(const struct rcli *c, char *out, size_t cap) {
    if (c->why[0]) {
        snprintf(out, cap, "%s", c->why);
        return;
    }
    for (const struct rconn *n = c->conns; n; n = n->next)
        if (n->state != C_UP) {
            snprintf(out, cap, "Redis at %s:%d is not reachable", n->host, n->port);
            return;
        }
    snprintf(out, cap, "Redis is not ready");
}

bool rcli_ready(const struct rcli *c) {
    if (c->slots) return c->map_loaded;
    return c->conns && c->conns->state == C_UP && c->conns->handshaken;
}

unsigned rcli_masters(const struct rcli *c) {
    return c->slots ? c->masters : 1;
}

void rcli_info(const struct rcli *c,
               void (*emit)(void *ud, const char *name, const char *value),
               void *ud) {
    char name[64], v[REDIS_URL_HOST_MAX + 64];
    int i = 0;
    static const char *const states[] = {"down", "connecting", "up"};
    for (const struct rconn *n = c->conns; n; n = n->next, i++) {
        snprintf(name, sizeof name, "store_redis_node%d", i);
        snprintf(v, sizeof v, "%s:%d,state=%s,calls=%" PRIu64 ",inflight=%zu",
                 n->host, n->port, states[n->state], n->calls, n->inflight);
        emit(ud, name, v);
    }
    if (c->sub) {
        snprintf(v, sizeof v, "%s:%d,state=%s", c->sub->host, c->sub->port,
                 states[c->sub->state]);
        emit(ud, "store_redis_subscriber", v);
    }
    if (c->sent) {
        snprintf(v, sizeof v, "%s:%d,state=%s,master=%s", c->sent->host, c->sent->port,
                 states[c->sent->state], c->have_master ? "known" : "unknown");
        emit(ud, "store_redis_sentinel", v);
    }
}
