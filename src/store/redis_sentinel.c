/* redis_sentinel.c -- the Redis client under a sentinel URL
 * (redis+sentinel://, see redis_client_int.h and docs/redis.md).
 *
 * One connection goes to a Sentinel (round robin over the URL's hosts): it
 * asks SENTINEL get-master-addr-by-name, then subscribes to +switch-master.
 * The data connection and the subscriber connect to the master it names
 * and move when it names another. When the master's connection fails or a
 * write is refused (READONLY, MASTERDOWN), the Sentinel is asked again.
 */
#include <event2/event.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/log.h"
#include "store/redis_client.h"
#include "store/redis_client_int.h"

/* The master is host:port (from a Sentinel): moves the data connection and
 * the subscriber there if they were elsewhere. */
static void set_master(struct rcli *c, const char *host, int port) {
    struct rconn *d = c->conns;
    if (c->have_master && d->port == port && strcmp(d->host, host) == 0) return;
    log_info("redis sentinel: master %s is %s:%d%s", c->url.master, host, port,
             c->have_master ? " (switched)" : "");
    c->have_master = true;
    c->why[0] = '\0';
    c->switching = true;
    struct rconn *both[2] = {d, c->sub};
    for (int i = 0; i < 2; i++) {
        struct rconn *n = both[i];
        if (!n) continue;
        if (n->state != C_DOWN) rc_conn_kill(n, "the master moved");
        event_del(n->retry_ev);
        n->backoff_ms = BACKOFF_MIN_MS;
        snprintf(n->host, sizeof n->host, "%s", host);
        n->port = port;
        rc_conn_connect(n);
    }
    c->switching = false;
}

/* SENTINEL get-master-addr-by-name: [host, port], or nil if unknown. */
static void master_cb(redisAsyncContext *ac, void *reply, void *pd) {
    struct rconn *n = ac->data;
    redisReply *r = reply;
    if (!n || !r) return;
    struct rcli *c = n->cli;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING &&
        r->element[1]->type == REDIS_REPLY_STRING) {
        int port = atoi(r->element[1]->str);
        if (port > 0 && port < 65536 && r->element[0]->len <= REDIS_URL_HOST_MAX) {
            rwarn_clear(&c->mapwarn);
            set_master(c, r->element[0]->str, port);
            return;
        }
    }
    snprintf(c->why, sizeof c->why, "Sentinel %.64s:%d does not know master '%.64s'%s%.80s",
             n->host, n->port, c->url.master, r->type == REDIS_REPLY_ERROR ? ": " : "",
             r->type == REDIS_REPLY_ERROR ? r->str : "");
    rwarn(&c->mapwarn, rcli_now_us(), "redis sentinel: %s", c->why);
}

/* +switch-master "<name> <old-ip> <old-port> <new-ip> <new-port>" */
static void sentinel_msg_cb(redisAsyncContext *ac, void *reply, void *pd) {
    struct rconn *n = ac->data;
    redisReply *r = reply;
    if (!n || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 3) return;
    redisReply *kind = r->element[0], *msg = r->element[2];
    if (kind->type != REDIS_REPLY_STRING) return;
    if (strcmp(kind->str, "subscribe") == 0) {
        n->state = C_UP;
        n->backoff_ms = BACKOFF_MIN_MS;
        return;
    }
    if (strcmp(kind->str, "message") != 0 || msg->type != REDIS_REPLY_STRING) return;
    char name[REDIS_MASTER_NAME_MAX + 1], oh[REDIS_URL_HOST_MAX + 1],
        nh[REDIS_URL_HOST_MAX + 1];
    int op, np;
    if (sscanf(msg->str, "%127s %255s %d %255s %d", name, oh, &op, nh, &np) != 5) return;
    if (strcmp(name, n->cli->url.master) != 0) return;
    set_master(n->cli, nh, np);
}

/* Asks a Sentinel for the master again (the master's connection failed or
 * refused a write): reconnects the Sentinel connection, which asks first.
 * At most every 500 ms. */
void rc_sentinel_ask(struct rcli *c) {
    struct rconn *n = c->sent;
    if (!n || c->closing || rcli_now_us() - c->last_ask < 500000) return;
    c->last_ask = rcli_now_us();
    if (n->state != C_DOWN) rc_conn_kill(n, "asking again");
    event_del(n->retry_ev);
    n->backoff_ms = BACKOFF_MIN_MS;
    rc_conn_connect(n);
}

void rc_sentinel_start(struct rcli *c) {
    /* one data connection, to wherever the Sentinels say the master is */
    rc_conn_new(c, "", 0, false);
    snprintf(c->why, sizeof c->why, "no Sentinel has named master '%s' yet",
             c->url.master);
    c->sent = rc_conn_new(c, "", 0, true);
    c->sent->sub = false;
    c->sent->sentinel = true;
    rc_conn_connect(c->sent);
}

bool rc_sentinel_address(struct rconn *n) {
    struct rcli *c = n->cli;
    if (n->sentinel) { /* the Sentinels round robin */
        size_t i = c->sent_seed % c->url.nhosts;
        snprintf(n->host, sizeof n->host, "%s", c->url.hosts[i].host);
        n->port = c->url.hosts[i].port;
    } else {
        if (!c->have_master) return false; /* connected once a Sentinel names it */
        if (n->sub) {
            snprintf(n->host, sizeof n->host, "%s", c->conns->host);
            n->port = c->conns->port;
        }
    }
    return true;
}

void rc_sentinel_hello(struct rconn *n) {
    struct rcli *c = n->cli;
    c->last_ask = rcli_now_us();
    redisAsyncCommand(n->ac, master_cb, NULL, "SENTINEL get-master-addr-by-name %s",
                      c->url.master);
    redisAsyncCommand(n->ac, sentinel_msg_cb, NULL, "SUBSCRIBE +switch-master");
}
