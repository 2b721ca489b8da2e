/* redis_client.h -- an asynchronous client of one Redis or of a Redis
 * Cluster, on the server's libevent loop (hiredis async underneath).
 *
 * What it adds to hiredis:
 *  - connections that come back: a lost or timed-out connection is closed,
 *    every call in flight on it completes as unavailable, and it reconnects
 *    with backoff (100 ms doubling to 2 s); each (re)connection sends AUTH,
 *    SELECT and SCRIPT LOAD first;
 *  - deadlines: a call not answered by its deadline completes as unavailable
 *    (its connection is closed, since Redis answers in order);
 *  - Redis Cluster: the slot map from CLUSTER SLOTS, one connection per
 *    master, MOVED (map updated, call re-sent, map refreshed) and ASK
 *    (ASKING + re-send) followed;
 *  - the script: RCLI_SCRIPT calls go out as FCALL of the script loaded as a
 *    function library at connect (FUNCTION LOAD, Redis 7); where that is
 *    refused, as EVALSHA; as EVAL while neither is known or when a node
 *    answers NOSCRIPT or "Function not found" (then loaded again);
 *  - one subscriber connection for a pub/sub channel.
 *
 * Error convention: rcli_new returns NULL with a message; everything else
 * reports through callbacks. Every rcli_send completes its callback exactly
 * once: with a reply (which may be an error reply other than MOVED, ASK and
 * NOSCRIPT), or with reply NULL and a reason when Redis could not be
 * reached in time -- in that case the command may or may not have run if it
 * had been sent, which the callback's `sent` tells. The callback may run inside rcli_send (when no connection
 * can take the call) and inside rcli_free.
 */
#ifndef DQ_REDIS_CLIENT_H
#define DQ_REDIS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/redis_url.h"

struct event_base;
struct redisReply;
struct rcli;

/* reply is valid only during the call; err is set when reply is NULL, and
 * then `sent` tells whether the command had been written to Redis (it may
 * have run: the outcome is unknown) or not (it did not run). */
typedef void rcli_cb(void *pd, struct redisReply *reply, const char *err,
                     bool sent);

struct rcli_config {
    struct event_base *base;
    const struct redis_url *url; /* copied */
    const char *script;          /* Lua source of RCLI_SCRIPT calls; borrowed */
    const char *channel;         /* subscribed to; NULL = none; copied */
    /* A message on the channel. */
    void (*on_message)(void *ud, const char *msg, size_t len);
    /* Redis became usable: a data connection finished its handshake
     * (standalone) or the slot map was loaded (cluster). Called again after
     * every reconnection and map change; also after the subscriber
     * reconnects (messages may have been missed). */
    void (*on_up)(void *ud);
    void *ud;
};

enum rcli_kind {
    RCLI_RAW,    /* cmd holds the whole command */
    RCLI_SCRIPT, /* cmd holds the arguments after EVALSHA's sha */
    RCLI_READS,  /* a script call whose reply carries whole records (GETs):
                    as big as bodies get, so few of them go at once */
};

/* A warning that may repeat for as long as a state lasts (no slots, a
 * failing CLUSTER SLOTS, CLUSTERDOWN): rwarn logs it when the text
 * changes, then sums the repeats up once per 30 s; rwarn_clear ends the
 * state (logging the repeats not yet told). Zero-initialise. */
struct rwarn {
    char last[200];
    int64_t at;
    uint64_t repeats;
};
__attribute__((format(printf, 3, 4)))
void rwarn(struct rwarn *w, int64_t now_us, const char *fmt, ...);
void rwarn_clear(struct rwarn *w);

/* Starts connecting. Returns NULL (with a message in err) only if the
 * loop's events cannot be made. */
struct rcli *rcli_new(const struct rcli_config *cfg, char *err, size_t errlen);

/* Waits up to drain_ms for the calls in flight to be answered (their
 * callbacks run), then closes every connection: calls still pending
 * complete with reply NULL. Accepts NULL. */
void rcli_free(struct rcli *c, int drain_ms);

/* Sends a command to the node serving `slot` (-1: the standalone node, or
 * any node in a cluster). cmd[0..len) is `argc` RESP bulk strings
 * ("$3\r\nGET\r\n..."), allocated with dq_malloc; the client owns it from
 * now on. deadline_us is on rcli_now_us()'s clock. */
void rcli_send(struct rcli *c, int slot, enum rcli_kind kind, int argc,
               char *cmd, size_t len, int64_t deadline_us, rcli_cb *cb,
               void *pd);

/* Writes into out[0..cap) why Redis cannot serve calls now (not reachable,
 * no slots assigned, slots missing...), for error messages. */
void rcli_status(const struct rcli *c, char *out, size_t cap);

/* True when calls can be expected to succeed (see on_up). */
bool rcli_ready(const struct rcli *c);

/* Masters in the slot map (1 for standalone; 0 while no map is loaded). */
unsigned rcli_masters(const struct rcli *c);

/* The clock of the store's deadlines and timeouts (seconds long, armed on
 * every request): the coarse monotonic clock, microseconds. */
int64_t rcli_now_us(void);

/* Calls emit(ud, name, value) for INFO lines about the connections. */
void rcli_info(const struct rcli *c,
               void (*emit)(void *ud, const char *name, const char *value),
               void *ud);

#endif
