/* resp_front.h -- the RESP front end: Redis-protocol clients (DESIGN §3).
 *
 * It listens, parses requests, calls the core and renders the results as
 * RESP; it holds no job state of its own. The server (server/server.c)
 * creates it on the loop beside the core and the other front ends.
 */
#ifndef DQ_RESP_FRONT_H
#define DQ_RESP_FRONT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct core;
struct event_base;
struct resp_front;

struct resp_front_config {
    const char *bind;
    int port;
    const char *requirepass; /* NULL = no AUTH */
    uint64_t max_body;       /* the parser's bulk limit follows it */
    uint64_t maxclients;     /* RESP and HTTP together, see clients() */
    uint64_t max_output;     /* reply bytes a client may leave unread */
    /* Clients connected through every front end, for --maxclients. */
    uint64_t (*clients)(void *ud);
    void *ud;
};

/* Listens on bind:port. Returns the front end, or NULL with a message in
 * err. cfg is copied; its strings must outlive the front end. */
struct resp_front *resp_front_new(struct event_base *base, struct core *core,
                                  const struct resp_front_config *cfg,
                                  char *err, size_t errlen);
/* Graceful stop: closes the listener, answers what clients have already
 * sent and reads no more. */
void resp_front_stop(struct resp_front *f);
/* Whether every request is answered and every reply written. */
bool resp_front_idle(const struct resp_front *f);
/* Closes every connection and frees f. Accepts NULL. Requests still in
 * flight in the core are orphaned: their completions are rendered to
 * nowhere. */
void resp_front_free(struct resp_front *f);
/* Frees what the RESP front end keeps for reuse; call once at exit, after
 * the core is closed (its last completions may still use it). */
void resp_front_cache_free(void);
/* Connected clients. */
uint64_t resp_front_clients(const struct resp_front *f);

#endif
