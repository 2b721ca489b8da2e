/* server.c -- the loop, the listener, signals and graceful stop.
 *
 * Graceful stop (SIGTERM/SIGINT): the listener closes, every connection
 * reads what it has already been sent and stops reading, blocked RESERVEs
 * answer nil, and the loop runs until every request in flight is answered
 * and written (at most STOP_GRACE_MS), then the store flushes and syncs.
 */
#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/clock.h"
#include "lib/htab.h"
#include "lib/log.h"
#include "lib/xalloc.h"
#include "server/server.h"

#define STOP_GRACE_MS 4000

static void on_ready(void *ud, struct dq_str topic, int64_t hint) {
    blocking_on_ready(ud, topic, hint);
}

static void flush_cb(evutil_socket_t fd, short what, void *arg) {
    conn_flush_all(arg);
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd,
                      struct sockaddr *addr, int len, void *arg) {
    struct server *srv = arg;
    if (srv->nconns >= srv->cfg.maxclients) {
        static const char msg[] = "-ERR max number of clients reached\r\n";
        ssize_t n = write(fd, msg, sizeof msg - 1);
        (void)n;
        close(fd);
        srv->rejected_conns++;
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conn_new(srv, fd);
}

static void accept_error_cb(struct evconnlistener *l, void *arg) {
    int err = EVUTIL_SOCKET_ERROR();
    /* EMFILE and friends: keep going, the next accept may succeed */
    log_warn("accept failed: %s", evutil_socket_error_to_string(err));
}

static bool idle(struct server *srv) {
    for (struct conn *c = srv->conns; c; c = c->next)
        if (c->head || buf_unread(&c->out)) return false;
    return true;
}

static void stop_check_cb(evutil_socket_t fd, short what, void *arg) {
    struct server *srv = arg;
    if (idle(srv) || clock_ms() >= srv->stop_deadline) {
        event_base_loopbreak(srv->base);
        return;
    }
    struct timeval tv = {0, 5000};
    evtimer_add(srv->stop_timer, &tv);
}

static void begin_stop(struct server *srv, const char *why) {
    if (srv->stopping) return;
    log_info("%s: stopping (answering requests in flight)", why);
    srv->stopping = true;
    srv->stop_deadline = clock_ms() + STOP_GRACE_MS;
    if (srv->listener) {
        evconnlistener_free(srv->listener);
        srv->listener = NULL;
    }
    /* Read what clients already sent, answer it, then read no more. */
    for (struct conn *c = srv->conns, *next; c; c = next) {
        next = c->next;
        for (;;) {
            char *p = buf_reserve(&c->in, 64 * 1024);
            ssize_t n = read(c->fd, p, c->in.cap - c->in.len);
            if (n <= 0) break;
            c->in.len += (size_t)n;
        }
        conn_process_input(c);
    }
    blocking_wake_all(srv);
    stop_check_cb(-1, 0, srv);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg) {
    begin_stop(arg, sig == SIGINT ? "SIGINT" : "SIGTERM");
}

int server_init(struct server *srv, struct config *cfg) {
    memset(srv, 0, sizeof *srv);
    srv->cfg = *cfg;
    srv->started_ms = clock_ms();
    signal(SIGPIPE, SIG_IGN);

    /* A secret hash key, so clients cannot choose ids that collide. */
    unsigned char key[16];
    if (getrandom(key, sizeof key, 0) == (ssize_t)sizeof key) htab_set_key(key);

    struct event_config *ec = event_config_new();
    event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
    srv->base = event_base_new_with_config(ec);
    event_config_free(ec);
    if (!srv->base) {
        log_error("cannot create the event loop");
        return -1;
    }

    srv->limits.max_args = 1024 * 1024;
    srv->limits.max_bulk = cfg->max_body + 1024 * 1024;
    srv->limits.max_inline = 64 * 1024;
    srv->argv = xcalloc(srv->limits.max_args, sizeof *srv->argv);
    srv->blocking = blocking_new(srv);
    srv->flush_ev = event_new(srv->base, -1, 0, flush_cb, srv);

    srv->ops = dq_store_for_url(cfg->store);
    if (!srv->ops) {
        log_error("unsupported --store '%s': expected redis://host:port or "
                  "redis-cluster://host:port[,host:port...]",
                  cfg->store);
        return -1;
    }
    struct dq_store_config sc = {
        .base = srv->base,
        .url = cfg->store,
        .data_dir = cfg->data_dir,
        .fsync_mode = cfg->fsync_mode,
        .repair = cfg->repair,
        .max_jobs = cfg->max_jobs,
        .memory_horizon_ms = cfg->memory_horizon,
        .on_ready = on_ready,
        .ud = srv,
    };
    char err[512] = "";
    if (srv->ops->open(&srv->store, &sc, err, sizeof err) != 0) {
        log_error("cannot open the %s store: %s", srv->ops->name, err);
        return -1;
    }

    struct sockaddr_storage ss;
    int sslen = sizeof ss;
    char addr[300];
    snprintf(addr, sizeof addr, strchr(cfg->bind, ':') ? "[%s]:%d" : "%s:%d",
             cfg->bind, cfg->port);
    if (evutil_parse_sockaddr_port(addr, (struct sockaddr *)&ss, &sslen)) {
        log_error("invalid --bind address '%s'", cfg->bind);
        return -1;
    }
    srv->listener = evconnlistener_new_bind(
        srv->base, accept_cb, srv,
        LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 511,
        (struct sockaddr *)&ss, sslen);
    if (!srv->listener) {
        log_error("cannot listen on %s: %s", addr, strerror(errno));
        return -1;
    }
    evconnlistener_set_error_cb(srv->listener, accept_error_cb);

    srv->sig_term = evsignal_new(srv->base, SIGTERM, signal_cb, srv);
    srv->sig_int = evsignal_new(srv->base, SIGINT, signal_cb, srv);
    srv->stop_timer = evtimer_new(srv->base, stop_check_cb, srv);
    evsignal_add(srv->sig_term, NULL);
    evsignal_add(srv->sig_int, NULL);
    log_info("delayqd listening on %s (store: %s)", addr, srv->ops->name);
    return 0;
}

int server_run(struct server *srv) {
    event_base_dispatch(srv->base);
    return 0;
}

void server_free(struct server *srv) {
    while (srv->conns) conn_close(srv->conns);
    if (srv->store) srv->ops->close(srv->store);
    srv->store = NULL;
    conn_cache_free();
    blocking_free(srv->blocking);
    if (srv->listener) evconnlistener_free(srv->listener);
    if (srv->flush_ev) event_free(srv->flush_ev);
    if (srv->sig_term) event_free(srv->sig_term);
    if (srv->sig_int) event_free(srv->sig_int);
    if (srv->stop_timer) event_free(srv->stop_timer);
    dq_free(srv->argv);
    if (srv->base) event_base_free(srv->base);
}
