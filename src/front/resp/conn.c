/* conn.c -- one client connection: bytes in, requests out, replies in order.
 *
 * Reading: the socket is read into c->in and cut into requests by
 * resp_parse; each request is dispatched at once (commands.c). Parsing
 * pauses while a RESERVE that may block is in flight (later requests wait,
 * as in Redis) and while too many requests are in flight; reading stops
 * only when a lot of unparsed input has piled up. Reading never waits for
 * the client to read its replies, so a client that writes its whole pipeline
 * before reading cannot deadlock against us.
 *
 * Replies: each request that the store answers later gets a `struct req` in
 * the connection's FIFO. A reply that completes at the head goes straight to
 * c->out, others wait in their req. Output is written by the flush event at
 * the end of the loop iteration, so the replies of a pipeline leave in one
 * write. A client whose unread replies pass --max-output is dropped.
 *
 * Slices: a long pipeline is dispatched SLICE requests at a time; between
 * slices, when no other connection waits, the store is asked to complete
 * what it holds (its push operation) and the replies so far are written.
 * The client then refills its pipeline while we handle the rest, instead of
 * each side waiting for the other's whole batch: one connection with 64
 * requests in flight runs about twice as fast (docs/benchmarks.md).
 */
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/log.h"
#include "lib/xalloc.h"
#include "front/resp/resp_int.h"

#define READ_CHUNK (64 * 1024)
#define MAX_INFLIGHT 4096            /* requests in flight before parsing waits */
#define IN_MAX (64 * 1024 * 1024)   /* unparsed input before reading waits */
#define SLICE 16 /* requests dispatched before the replies so far are pushed */
/* Events that may be active in a loop turn without being other work: our
 * flush event and the store's own (store.h, DQ_STORE_ACTIVE_EVENTS). */
#define OWN_EVENTS (1 + DQ_STORE_ACTIVE_EVENTS)

static struct buf scratch; /* replies to connections that are gone */

static void conn_read_cb(evutil_socket_t fd, short what, void *arg);
static void conn_write_cb(evutil_socket_t fd, short what, void *arg);
static bool conn_write(struct conn *c);

static void set_reading(struct conn *c, bool on) {
    if (on == c->reading || c->fd < 0) return;
    if (on) event_add(c->rev, NULL);
    else event_del(c->rev);
    c->reading = on;
}

struct conn *conn_new(struct resp_front *f, int fd) {
    struct conn *c = xcalloc(1, sizeof *c);
    c->f = f;
    c->fd = fd;
    c->id = ++f->next_conn_id;
    c->proto = 2;
    c->authed = f->cfg.requirepass == NULL;
    c->rev = event_new(f->base, fd, EV_READ | EV_PERSIST, conn_read_cb, c);
    c->wev = event_new(f->base, fd, EV_WRITE | EV_PERSIST, conn_write_cb, c);
    c->next = f->conns;
    if (f->conns) f->conns->prev = c;
    f->conns = c;
    f->nconns++;
    f->total_conns++;
    metrics_clients(core_metrics(f->core), 1);
    set_reading(c, true);
    return c;
}

/* Freed requests are kept for reuse: a pipeline of ADDs would otherwise
 * cost a malloc and a free per request. */
#define REQ_CACHE_MAX 4096
static struct req *req_cache;
static unsigned req_cached;

static void req_free(struct req *r) {
    buf_free(&r->reply);
    if (req_cached < REQ_CACHE_MAX) {
        r->next = req_cache;
        req_cache = r;
        req_cached++;
        return;
    }
    dq_free(r);
}

void conn_cache_free(void) {
    while (req_cache) {
        struct req *r = req_cache;
        req_cache = r->next;
        dq_free(r);
    }
    req_cached = 0;
    buf_free(&scratch);
}

void conn_close(struct conn *c) {
    struct resp_front *f = c->f;
    /* Requests the store still owes a completion are orphaned, and freed
     * by it; the rest (done, or waiting in blocking.c) are freed here. */
    for (struct req *r = c->head, *next; r; r = next) {
        next = r->next;
        r->c = NULL;
        if (r->w) {
            core_reserve_cancel(r->w);
            r->w = NULL;
            req_free(r);
        } else if (r->done) {
            req_free(r);
        }
    }
    c->head = c->tail = NULL;
    if (c->prev) c->prev->next = c->next;
    else f->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    f->nconns--;
    metrics_clients(core_metrics(f->core), -1);
    if (c->flushing) {
        struct conn **pp = &f->flush_list;
        while (*pp && *pp != c) pp = &(*pp)->flush_next;
        if (*pp) *pp = c->flush_next;
    }
    event_free(c->rev);
    event_free(c->wev);
    close(c->fd);
    buf_free(&c->in);
    buf_free(&c->out);
    log_debug("client %llu closed", (unsigned long long)c->id);
    dq_free(c);
}

/* --- the request queue -------------------------------------------------- */

struct req *req_new(struct conn *c) {
    struct req *r = req_cache;
    if (r) {
        req_cache = r->next;
        req_cached--;
        memset(r, 0, sizeof *r);
    } else {
        r = xcalloc(1, sizeof *r);
    }
    r->c = c;
    if (c->tail) c->tail->next = r;
    else c->head = r;
    c->tail = r;
    c->inflight++;
    return r;
}

int req_proto(const struct req *r) { return r->c ? r->c->proto : 2; }

struct buf *req_out(struct req *r) {
    if (!r->c) {
        buf_reset(&scratch, 1 << 16);
        return &scratch;
    }
    return r == r->c->head ? &r->c->out : &r->reply;
}

void req_done(struct req *r) {
    struct conn *c = r->c;
    r->done = true;
    if (!c) {
        req_free(r);
        return;
    }
    /* Release every finished reply at the head, in order. The head's reply
     * was written to c->out directly. */
    while (c->head && c->head->done) {
        struct req *h = c->head;
        c->head = h->next;
        if (!c->head) c->tail = NULL;
        c->inflight--;
        req_free(h);
        if (c->head && c->head->done && c->head->reply.len) {
            buf_append(&c->out, c->head->reply.p, c->head->reply.len);
            buf_free(&c->head->reply);
        }
    }
    conn_schedule_flush(c);
    if (c->inflight < MAX_INFLIGHT / 2 && buf_unread(&c->in)) c->resume = true;
}

struct buf *conn_reply(struct conn *c) {
    if (!c->head) return &c->out;
    c->imm = req_new(c);
    return &c->imm->reply;
}

void conn_reply_done(struct conn *c) {
    struct req *r = c->imm;
    c->imm = NULL;
    if (r) req_done(r);
    else conn_schedule_flush(c);
}

/* --- input -------------------------------------------------------------- */

static void protocol_error(struct conn *c, const char *msg) {
    struct buf *b = conn_reply(c);
    resp_error(b, "ERR", "Protocol error: %s", msg);
    conn_reply_done(c);
    c->closing = true;
    set_reading(c, false);
    log_debug("client %llu: protocol error: %s", (unsigned long long)c->id,
              msg);
}

/* Between slices of a long pipeline: the store completes what it holds and
 * the replies so far are written, so the client can send more while the
 * rest is handled. That only pays when this connection is all the work
 * there is: when other events wait to run in this loop turn (other
 * connections' input), the loop stays busy anyway, and the replies leave at
 * the end of the turn with everyone else's, after one log write for all.
 * The server's flush event and the store's batch event may be active too;
 * they are not other work. Returns false if the connection was closed. */
static bool conn_push(struct conn *c) {
    struct resp_front *f = c->f;
    if (event_base_get_num_events(f->base, EVENT_BASE_COUNT_ACTIVE) > OWN_EVENTS)
        return true;
    core_push(f->core);
    return conn_write(c);
}

/* Before a slice is dispatched: parses ahead (multibulk requests only;
 * inline ones may be unescaped in place, so they are parsed once) and tells
 * the store which jobs the slice will touch, so that their cache misses
 * overlap. The requests are parsed again when dispatched. */
static void prefetch_slice(struct conn *c) {
    struct resp_front *f = c->f;
    struct dq_str keys[2 * SLICE];
    size_t nkeys = 0, off = 0, len = buf_unread(&c->in);
    char *p = c->in.p + c->in.off;
    for (int i = 0; i < SLICE && off < len && p[off] == '*'; i++) {
        size_t argc = 0;
        const char *err = NULL;
        ssize_t n = resp_parse(p + off, len - off, &f->limits, f->argv,
                               &argc, &err);
        if (n < 0) break;
        if (argc > 0 && cmd_key(f->argv, argc, &keys[2 * nkeys])) nkeys++;
        off += (size_t)n;
    }
    if (nkeys > 1) core_prefetch(f->core, keys, nkeys);
}

bool conn_process_input(struct conn *c) {
    struct resp_front *f = c->f;
    unsigned sliced = 0;
    c->resume = false;
    while (!c->closing && !c->paused && buf_unread(&c->in) > 0) {
        if (c->inflight >= MAX_INFLIGHT) {
            c->resume = true;
            break;
        }
        if (sliced == 0 && core_can_prefetch(f->core)) prefetch_slice(c);
        size_t argc = 0;
        const char *err = NULL;
        ssize_t n = resp_parse(c->in.p + c->in.off, buf_unread(&c->in),
                               &f->limits, f->argv, &argc, &err);
        if (n == RESP_NEED) break;
        if (n == RESP_BAD) {
            protocol_error(c, err ? err : "malformed request");
            break;
        }
        if (argc > 0) {
            f->total_cmds++;
            cmd_dispatch(c, f->argv, argc);
        }
        buf_consume(&c->in, (size_t)n);
        if (++sliced == SLICE && buf_unread(&c->in) > 0) {
            if (!conn_push(c)) return false;
            sliced = 0;
        }
    }
    set_reading(c, !c->closing && !f->stopping &&
                       buf_unread(&c->in) < IN_MAX + f->limits.max_bulk);
    return true;
}

void conn_drain_socket(struct conn *c) {
    for (;;) {
        char *p = buf_reserve(&c->in, READ_CHUNK);
        ssize_t n = read(c->fd, p, c->in.cap - c->in.len);
        if (n <= 0) break;
        c->in.len += (size_t)n;
    }
}

static void conn_read_cb(evutil_socket_t fd, short what, void *arg) {
    struct conn *c = arg;
    char *p = buf_reserve(&c->in, READ_CHUNK);
    ssize_t n = read(fd, p, c->in.cap - c->in.len);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        conn_close(c);
        return;
    }
    if (n < 0) return;
    c->in.len += (size_t)n;
    conn_process_input(c);
}

/* --- output ------------------------------------------------------------- */

void conn_schedule_flush(struct conn *c) {
    if (c->flushing) return;
    struct resp_front *f = c->f;
    c->flushing = true;
    c->flush_next = f->flush_list;
    f->flush_list = c;
    event_active(f->flush_ev, 0, 0);
}

/* Writes what it can. Returns false if the connection was closed. */
static bool conn_write(struct conn *c) {
    while (buf_unread(&c->out) > 0) {
        ssize_t n = write(c->fd, c->out.p + c->out.off, buf_unread(&c->out));
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) break;
            conn_close(c);
            return false;
        }
        buf_consume(&c->out, (size_t)n);
    }
    if (buf_unread(&c->out) == 0) {
        buf_reset(&c->out, 1 << 16);
        event_del(c->wev);
        if (c->closing && !c->head) {
            conn_close(c);
            return false;
        }
    } else {
        if (buf_unread(&c->out) > c->f->cfg.max_output) {
            log_warn("client %llu dropped: %zu reply bytes unread "
                     "(--max-output %llu)",
                     (unsigned long long)c->id, buf_unread(&c->out),
                     (unsigned long long)c->f->cfg.max_output);
            /* reset, not close: the kernel must not keep trickling the
             * unread replies to it */
            struct linger lg = {1, 0};
            setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
            conn_close(c);
            return false;
        }
        event_add(c->wev, NULL);
    }
    return true;
}

static void conn_write_cb(evutil_socket_t fd, short what, void *arg) {
    conn_write(arg);
}

void conn_flush_all(struct resp_front *f) {
    /* Resumed input may add replies: loop until the list stays empty. */
    while (f->flush_list) {
        struct conn *list = f->flush_list;
        f->flush_list = NULL;
        while (list) {
            struct conn *c = list;
            list = c->flush_next;
            c->flushing = false;
            if (c->resume && !c->paused && !conn_process_input(c)) continue;
            conn_write(c);
        }
    }
}
