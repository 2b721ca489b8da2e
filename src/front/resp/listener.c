/* listener.c -- the RESP front end's listener, its life and graceful stop. */
#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "front/resp/resp_int.h"
#include "lib/clock.h"
#include "lib/listen.h"
#include "lib/log.h"
#include "lib/xalloc.h"

static void flush_cb(evutil_socket_t fd, short what, void *arg) {
    conn_flush_all(arg);
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd,
                      struct sockaddr *addr, int len, void *arg) {
    struct resp_front *f = arg;
    uint64_t now = f->cfg.clients ? f->cfg.clients(f->cfg.ud) : f->nconns;
    if (now >= f->cfg.maxclients) {
        static const char msg[] = "-ERR max number of clients reached\r\n";
        ssize_t n = write(fd, msg, sizeof msg - 1);
        (void)n;
        close(fd);
        f->rejected_conns++;
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conn_new(f, fd);
}

static void accept_error_cb(struct evconnlistener *l, void *arg) {
    int err = EVUTIL_SOCKET_ERROR();
    /* EMFILE and friends: keep going, the next accept may succeed */
    log_warn("accept failed: %s", evutil_socket_error_to_string(err));
}

struct resp_front *resp_front_new(struct event_base *base, struct core *core,
                                  const struct resp_front_config *cfg,
                                  char *err, size_t errlen) {
    struct resp_front *f = xcalloc(1, sizeof *f);
    f->base = base;
    f->core = core;
    f->cfg = *cfg;
    f->started_ms = clock_ms();
    f->limits.max_args = 1024 * 1024;
    f->limits.max_bulk = cfg->max_body + 1024 * 1024;
    f->limits.max_inline = 64 * 1024;
    f->argv = xcalloc(f->limits.max_args, sizeof *f->argv);
    f->flush_ev = event_new(base, -1, 0, flush_cb, f);

    char addr[300];
    f->listener = listen_tcp(base, cfg->bind, cfg->port, accept_cb, f, "RESP",
                             addr, sizeof addr, err, errlen);
    if (!f->listener) {
        resp_front_free(f);
        return NULL;
    }
    evconnlistener_set_error_cb(f->listener, accept_error_cb);
    log_info("delayqd listening on %s (RESP)", addr);
    return f;
}

void resp_front_stop(struct resp_front *f) {
    f->stopping = true;
    if (f->listener) {
        evconnlistener_free(f->listener);
        f->listener = NULL;
    }
    /* Read what clients already sent, answer it, then read no more. */
    for (struct conn *c = f->conns, *next; c; c = next) {
        next = c->next;
        conn_drain_socket(c);
        conn_process_input(c);
    }
}

bool resp_front_idle(const struct resp_front *f) {
    for (struct conn *c = f->conns; c; c = c->next)
        if (c->head || buf_unread(&c->out)) return false;
    return true;
}

uint64_t resp_front_clients(const struct resp_front *f) { return f->nconns; }

void resp_front_free(struct resp_front *f) {
    if (!f) return;
    while (f->conns) conn_close(f->conns);
    if (f->listener) evconnlistener_free(f->listener);
    if (f->flush_ev) event_free(f->flush_ev);
    dq_free(f->argv);
    dq_free(f);
}

void resp_front_cache_free(void) { conn_cache_free(); }
