/* redis_ev.c -- hiredis's async context on libevent, writes at the end of
 * the loop turn (redis_ev.h says why). */
#include <stdbool.h>

#include "lib/xalloc.h"
#include "store/redis_ev.h"

struct redis_ev {
    redisAsyncContext *ac;
    struct event *rev;   /* EV_READ, persists while hiredis wants reads */
    struct event *wev;   /* EV_WRITE: connecting, or the socket was full */
    struct event *flush; /* no fd: made active to write at the turn's end */
    bool reading, writing, queued;
};

/* The context whose end-of-turn write runs now: a write hiredis could not
 * finish then waits for the socket, not for another turn's end. */
static struct redis_ev *flushing;

static void read_cb(evutil_socket_t fd, short what, void *arg) {
    struct redis_ev *e = arg;
    redisAsyncHandleRead(e->ac);
}

static void write_cb(evutil_socket_t fd, short what, void *arg) {
    struct redis_ev *e = arg;
    redisAsyncHandleWrite(e->ac);
}

/* Adds ev (want) or deletes it, unless it already is: *on says whether it is
 * added. */
static void watch(struct event *ev, bool *on, bool want) {
    if (*on == want) return;
    *on = want;
    if (want) event_add(ev, NULL);
    else event_del(ev);
}

static void wait_writable(struct redis_ev *e) { watch(e->wev, &e->writing, true); }

static void flush_cb(evutil_socket_t fd, short what, void *arg) {
    struct redis_ev *e = arg;
    e->queued = false;
    if (e->writing) return; /* the write event will do it */
    if (!(e->ac->c.flags & REDIS_CONNECTED)) {
        wait_writable(e); /* hiredis learns of the connect by writability */
        return;
    }
    flushing = e;
    redisAsyncHandleWrite(e->ac); /* a write error frees e (cleanup) */
    flushing = NULL;
}

static void add_read(void *pd) {
    struct redis_ev *e = pd;
    watch(e->rev, &e->reading, true);
}

static void del_read(void *pd) {
    struct redis_ev *e = pd;
    watch(e->rev, &e->reading, false);
}

static void add_write(void *pd) {
    struct redis_ev *e = pd;
    if (e->writing) return;
    if (flushing == e) {
        wait_writable(e);
    } else if (!e->queued) {
        e->queued = true;
        event_active(e->flush, EV_WRITE, 1);
    }
}

static void del_write(void *pd) {
    struct redis_ev *e = pd;
    watch(e->wev, &e->writing, false);
}

static void cleanup(void *pd) {
    struct redis_ev *e = pd;
    if (flushing == e) flushing = NULL;
    event_free(e->rev);
    event_free(e->wev);
    event_free(e->flush);
    dq_free(e);
}

int redis_ev_attach(redisAsyncContext *ac, struct event_base *base) {
    if (ac->ev.data) return REDIS_ERR;
    struct redis_ev *e = xcalloc(1, sizeof *e);
    e->ac = ac;
    int fd = ac->c.fd;
    e->rev = event_new(base, fd, EV_READ | EV_PERSIST, read_cb, e);
    e->wev = event_new(base, fd, EV_WRITE | EV_PERSIST, write_cb, e);
    e->flush = event_new(base, -1, 0, flush_cb, e);
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
    ac->ev.data = e;
    add_read(e);
    wait_writable(e); /* the connect completes when the socket is writable */
    return REDIS_OK;
}
