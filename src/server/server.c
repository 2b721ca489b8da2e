/* server.c -- the loop, signals and graceful stop.
 *
 * Graceful stop (SIGTERM/SIGINT): the listeners close, every connection
 * reads what it has already been sent and stops reading, blocked RESERVEs
 * answer with no jobs, and the loop runs until every request in flight is
 * answered and written (at most STOP_GRACE_MS), then the store flushes and
 * syncs.
 */
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "core/core.h"
#include "core/metrics.h"
#include "front/http/http_front.h"
#include "front/resp/resp_front.h"
#include "lib/clock.h"
#include "lib/htab.h"
#include "lib/log.h"
#include "push/push.h"
#include "server/server.h"

#define STOP_GRACE_MS 4000

static bool idle(struct server *srv) {
    return resp_front_idle(srv->resp) && http_front_idle(srv->http) &&
           pusher_idle(srv->pusher);
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
    core_stop(srv->core); /* RESERVEs read below do not block */
    pusher_stop(srv->pusher); /* deliveries in flight finish */
    resp_front_stop(srv->resp);
    http_front_stop(srv->http);
    core_stop(srv->core); /* and those blocked before answer now */
    stop_check_cb(-1, 0, srv);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg) {
    begin_stop(arg, sig == SIGINT ? "SIGINT" : "SIGTERM");
}

static uint64_t clients(void *ud) {
    struct server *srv = ud;
    return resp_front_clients(srv->resp) + http_front_clients(srv->http);
}

static int64_t blocked(void *ud) {
    return (int64_t)core_blocked(((struct server *)ud)->core);
}

static int64_t store_up(void *ud) {
    return core_store_up(((struct server *)ud)->core);
}

int server_init(struct server *srv, struct config *cfg) {
    memset(srv, 0, sizeof *srv);
    srv->cfg = *cfg;
    signal(SIGPIPE, SIG_IGN);

    /* A secret hash key, so clients cannot choose ids that collide. */
    unsigned char key[16];
    if (getrandom(key, sizeof key, 0) == (ssize_t)sizeof key) htab_set_key(key);

    struct event_config *ec = event_config_new();
    event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
    /* epoll changes are batched until the next wait: evhttp turns reading
     * and writing off and on around every request, which would otherwise
     * cost four epoll_ctl per request (two this way). Safe as long as no
     * fd that has an event is dup()ed, which nothing here does. */
    event_config_set_flag(ec, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    srv->base = event_base_new_with_config(ec);
    event_config_free(ec);
    if (!srv->base) {
        log_error("cannot create the event loop");
        return -1;
    }

    struct core_config cc = {
        .base = srv->base,
        .ops = dq_store_for_url(cfg->store),
        .store = {
            .url = cfg->store,
            .data_dir = cfg->data_dir,
            .fsync_mode = cfg->fsync_mode,
            .repair = cfg->repair,
            .max_jobs = cfg->max_jobs,
            .memory_horizon_ms = cfg->memory_horizon,
        },
        .max_body = cfg->max_body,
        .push_allow = cfg->push_allow,
        .metrics_max_topics = (uint32_t)cfg->metrics_max_topics,
    };
    if (!cc.ops) {
        log_error("unsupported --store '%s': expected redis://host:port or "
                  "redis-cluster://host:port[,host:port...]",
                  cfg->store);
        return -1;
    }
    char err[512] = "";
    if (core_open(&srv->core, &cc, err, sizeof err) != 0) {
        log_error("cannot open the %s store: %s", cc.ops->name, err);
        return -1;
    }
    metrics_set_gauge_fn(core_metrics(srv->core), blocked, store_up, srv);

    struct pusher_config pc = {
        .secrets = cfg->push_secret,
        .ca_file = cfg->push_ca,
        .timeout_ms = (int64_t)cfg->push_timeout,
        .concurrency = (uint32_t)cfg->push_concurrency,
    };
    srv->pusher = pusher_new(srv->base, srv->core, &pc, err, sizeof err);
    if (!srv->pusher) {
        log_error("%s", err);
        return -1;
    }

    struct resp_front_config rc = {
        .bind = cfg->bind,
        .port = cfg->port,
        .requirepass = cfg->requirepass,
        .max_body = cfg->max_body,
        .maxclients = cfg->maxclients,
        .max_output = cfg->max_output,
        .clients = clients,
        .ud = srv,
    };
    srv->resp = resp_front_new(srv->base, srv->core, &rc, err, sizeof err);
    if (!srv->resp) {
        log_error("%s", err);
        return -1;
    }
    if (cfg->http_port) {
        struct http_front_config hc = {
            .bind = cfg->bind,
            .port = cfg->http_port,
            .requirepass = cfg->requirepass,
            .max_body = cfg->max_body,
            .maxclients = cfg->maxclients,
            .dashboard = cfg->dashboard,
            .clients = clients,
            .ud = srv,
        };
        srv->http = http_front_new(srv->base, srv->core, &hc, err, sizeof err);
        if (!srv->http) {
            log_error("%s", err);
            return -1;
        }
    }

    srv->sig_term = evsignal_new(srv->base, SIGTERM, signal_cb, srv);
    srv->sig_int = evsignal_new(srv->base, SIGINT, signal_cb, srv);
    srv->stop_timer = evtimer_new(srv->base, stop_check_cb, srv);
    evsignal_add(srv->sig_term, NULL);
    evsignal_add(srv->sig_int, NULL);
    log_info("store: %s", core_store_name(srv->core));
    return 0;
}

int server_run(struct server *srv) {
    event_base_dispatch(srv->base);
    return 0;
}

void server_free(struct server *srv) {
    resp_front_free(srv->resp);
    http_front_free(srv->http);
    pusher_free(srv->pusher);
    core_close(srv->core);
    resp_front_cache_free();
    if (srv->sig_term) event_free(srv->sig_term);
    if (srv->sig_int) event_free(srv->sig_int);
    if (srv->stop_timer) event_free(srv->stop_timer);
    if (srv->base) event_base_free(srv->base);
}
