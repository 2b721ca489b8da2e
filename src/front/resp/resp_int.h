/* resp_int.h -- what the RESP front end's modules share.
 *
 *   listener.c  the listener, accepting, graceful stop
 *   conn.c      one client: reading, parsing, the ordered reply queue
 *   commands.c  the command table: parse arguments, call the core, render
 *
 * One request's path: conn.c reads bytes and cuts them into requests with
 * resp_parse; commands.c turns the arguments into a core call with a
 * `struct req` as the callback's privdata; when the core completes, the
 * command's callback renders the result into the req; conn.c releases
 * replies in request order and writes them from the flush event at the end
 * of the loop iteration.
 */
#ifndef DQ_RESP_INT_H
#define DQ_RESP_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/core.h"
#include "core/metrics.h"
#include "front/resp/resp_front.h"
#include "lib/buf.h"
#include "proto/resp.h"

struct event;
struct event_base;
struct evconnlistener;

/* One request whose reply is not sent yet. Requests of a connection are a
 * FIFO; a reply completed out of order waits in `reply` until every request
 * before it is done. */
struct req {
    struct req *next;
    struct conn *c;   /* NULL once the connection is gone */
    struct buf reply; /* only for replies completed out of order */
    bool done;
    struct core_wait *w; /* set while this RESERVE may wait */
};

struct conn {
    struct resp_front *f;
    int fd;
    uint64_t id;
    struct event *rev, *wev;
    struct buf in, out;
    struct req *head, *tail; /* in-flight requests, oldest first */
    struct req *imm;         /* conn_reply's request until conn_reply_done */
    uint32_t inflight;
    int proto;      /* 2 or 3 (after HELLO 3) */
    bool authed;
    bool closing;   /* close once the output is written (QUIT, errors) */
    bool paused;    /* a RESERVE that may block is in flight */
    bool reading;   /* rev is added */
    bool flushing;  /* on the front end's flush list */
    bool resume;    /* input is waiting for the inflight count to drop */
    struct conn *prev, *next;     /* all connections */
    struct conn *flush_next;      /* connections with output to write */
    char name[64];
};

struct resp_front {
    struct event_base *base;
    struct core *core;
    struct resp_front_config cfg;
    struct evconnlistener *listener;
    struct event *flush_ev;
    struct conn *conns;
    struct conn *flush_list;
    uint64_t nconns;
    uint64_t next_conn_id;
    struct resp_limits limits;
    struct resp_arg *argv; /* the parser's argument array, limits.max_args */
    bool stopping;
    int64_t started_ms;
    uint64_t total_conns, total_cmds, rejected_conns;
};

/* --- conn.c --- */
struct conn *conn_new(struct resp_front *f, int fd);
/* Closes the socket at once; requests in flight are orphaned (req->c NULL)
 * and freed by their completion. */
void conn_close(struct conn *c);
/* Frees the memory conn.c keeps for reuse (at exit). */
void conn_cache_free(void);
/* Dispatches the complete requests in c->in. Returns false if c was closed
 * (a write between slices of a pipeline failed). */
bool conn_process_input(struct conn *c);
/* Reads what the socket holds without waiting (graceful stop). */
void conn_drain_socket(struct conn *c);
/* Starts a request at the tail of c's queue. */
struct req *req_new(struct conn *c);
/* Where the reply to r goes: c->out if r is the head, else r's own buffer;
 * a scratch buffer when the connection is gone. */
struct buf *req_out(struct req *r);
/* The protocol version to render r's reply in (2 when the client is gone). */
int req_proto(const struct req *r);
/* Marks r done, releases the replies that are now in order, frees r. */
void req_done(struct req *r);
/* Shortcut for a reply that is known at once: writes it in order. */
struct buf *conn_reply(struct conn *c);
void conn_reply_done(struct conn *c);
void conn_schedule_flush(struct conn *c);
void conn_flush_all(struct resp_front *f);

/* --- commands.c --- */
void cmd_dispatch(struct conn *c, struct resp_arg *argv, size_t argc);
/* The job a request names (topic, id) into key[0..1], if it names one. */
bool cmd_key(const struct resp_arg *argv, size_t argc, struct dq_str *key);

#endif
