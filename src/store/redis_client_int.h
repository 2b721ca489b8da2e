/* redis_client_int.h -- what the Redis client's two files share
 * (redis_client.c: connections, deadlines, cluster routing, the slot map;
 * redis_sentinel.c: finding the master through Sentinels and following its
 * moves). Private to those two files: the Redis store sees redis_client.h.
 * Functions shared between them are prefixed rc_. */
#ifndef DQ_REDIS_CLIENT_INT_H
#define DQ_REDIS_CLIENT_INT_H

#include <hiredis/async.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/redis_client.h"
#include "store/redis_url.h"

#define BACKOFF_MIN_MS 100

enum cstate { C_DOWN, C_CONNECTING, C_UP };

struct rconn;

struct rcall {
    struct rcall *prev, *next; /* in conn's in-flight list or queue */
    struct rcli *cli;
    struct rconn *conn;
    rcli_cb *cb;
    void *pd;
    int slot;
    int argc;
    enum rcli_kind kind;
    int redirects;
    bool eval;   /* send the source (EVAL), not the function or SHA */
    bool asking; /* send ASKING first */
    bool linked; /* in flight */
    bool queued; /* in the queue */
    int64_t sent;
    char *cmd;
    size_t len;
    int64_t deadline;
};

struct rconn {
    struct rcli *cli;
    struct rconn *next; /* in cli->conns */
    char host[REDIS_URL_HOST_MAX + 1];
    int port;
    bool sub;           /* the subscriber */
    bool sentinel;      /* the Sentinel connection (asks, then subscribes) */
    enum cstate state;
    redisAsyncContext *ac;
    struct redis_arena *arena; /* its replies' memory (redis_arena.h) */
    struct event *retry_ev;
    int backoff_ms;
    int64_t connect_deadline;
    struct rcall *head, *tail;   /* in flight, send order */
    size_t inflight;
    size_t reads;       /* RCLI_READS calls in flight */
    size_t rwin;        /* ... and how many may be */
    int64_t heard;      /* when Redis last sent us something */
    size_t rd_len, rd_pos; /* the reader's buffer at the last tick */
    struct rcall *qhead, *qtail; /* waiting for a slot */
    size_t queued;
    uint64_t calls; /* commands sent, for INFO */
    bool handshaken;    /* FUNCTION / SCRIPT LOAD answered since the last connect */
    bool fcall;         /* the node has the function library: FCALL */
};

struct rcli {
    struct rcli_config cfg;
    struct redis_url url;
    char *channel;
    struct event_base *base;
    struct event *tick_ev;
    struct rconn *conns;   /* data connections */
    struct rconn *sub;     /* subscriber, or NULL */
    size_t sub_seed;       /* which seed the subscriber uses */
    char sha[41];          /* "" until SCRIPT LOAD answered */
    char *evsrc;           /* the script as EVAL runs it */
    size_t srclen;
    char *lib;             /* the script as a function library */
    size_t liblen;
    char fname[32];        /* its function: delayq_<hash of the source> */
    bool closing;
    /* cluster */
    struct rconn **slots;  /* REDIS_SLOTS entries, or NULL when standalone */
    bool map_loaded;
    bool refreshing;
    bool refresh_wanted;
    int64_t last_refresh;
    unsigned masters;
    size_t covered;        /* slots the map covers */
    struct rwarn mapwarn;  /* about the slot map */
    char why[200];         /* why calls cannot be served, for errors */
    /* Sentinel */
    struct rconn *sent;    /* to one Sentinel, or NULL */
    size_t sent_seed;      /* which Sentinel */
    bool have_master;      /* the data connection's address is the master's */
    bool switching;        /* moving the connections to a new master */
    int64_t last_ask;      /* when the Sentinel was last asked */
};

/* --- redis_client.c --------------------------------------------------------- */

/* A connection to host:port (a data connection, linked into c->conns,
 * unless sub), down and not yet connecting. */
struct rconn *rc_conn_new(struct rcli *c, const char *host, int port,
                          bool sub);
/* Starts connecting n if it is down (and the client is not closing). */
void rc_conn_connect(struct rconn *n);
/* Closes a live connection on our initiative: every call on it completes
 * with reply NULL. Not to be called from inside one of its callbacks. */
void rc_conn_kill(struct rconn *n, const char *why);

/* --- redis_sentinel.c ------------------------------------------------------- */

/* rcli_new of a sentinel URL: one data connection, to wherever the
 * Sentinels say the master is, and the connection to a Sentinel, which
 * starts connecting. */
void rc_sentinel_start(struct rcli *c);
/* Where rc_conn_connect connects n under a sentinel URL: the next Sentinel
 * (round robin) for the Sentinel connection, the master for the others.
 * False while no Sentinel has named the master (n is then not connected). */
bool rc_sentinel_address(struct rconn *n);
/* The Sentinel connection is made: asks for the master and subscribes to
 * +switch-master. */
void rc_sentinel_hello(struct rconn *n);
/* Asks a Sentinel for the master again (the master's connection failed or
 * refused a write). At most every 500 ms. */
void rc_sentinel_ask(struct rcli *c);

#endif
