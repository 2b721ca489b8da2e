/* server.h -- delayqd's server layer: what its modules share.
 *
 *   server.c    the loop, the listener, signals and graceful stop, INFO
 *   conn.c      one client: reading, parsing, the ordered reply queue
 *   commands.c  the command table and one handler per command
 *   blocking.c  clients blocked in RESERVE and waking them
 *
 * One request's path: conn.c reads bytes and cuts them into requests with
 * resp_parse; commands.c checks the arguments and calls the store through
 * its ops table with a `struct req` as the callback's privdata; when the
 * store completes, the handler's callback formats the reply into the req;
 * conn.c releases replies in request order and writes them from the flush
 * event at the end of the loop iteration.
 */
#ifndef DQ_SERVER_H
#define DQ_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/buf.h"
#include "proto/resp.h"
#include "server/config.h"
#include "store/store.h"

struct event;
struct event_base;
struct evconnlistener;
struct waiter;

/* One request whose reply is not sent yet. Requests of a connection are a
 * FIFO; a reply completed out of order waits in `reply` until every request
 * before it is done. */
struct req {
    struct req *next;
    struct conn *c;   /* NULL once the connection is gone */
    struct buf reply; /* only for replies completed out of order */
    bool done;
    struct waiter *w; /* set while this RESERVE may block */
};

struct conn {
    struct server *srv;
    int fd;
    uint64_t id;
    struct event *rev, *wev;
    struct buf in, out;
    struct req *head, *tail; /* in-flight requests, oldest first */
    struct req *imm;         /* conn_reply's request until conn_reply_done */
    uint32_t inflight;
    bool authed;
    bool closing;   /* close once the output is written (QUIT, errors) */
    bool paused;    /* a RESERVE that may block is in flight */
    bool reading;   /* rev is added */
    bool flushing;  /* on the server's flush list */
    bool resume;    /* input is waiting for the inflight count to drop */
    struct conn *prev, *next;     /* all connections */
    struct conn *flush_next;      /* connections with output to write */
    char name[64];
};

struct server {
    struct event_base *base;
    struct config cfg;
    const struct dq_store_ops *ops;
    struct dq_store *store;
    struct evconnlistener *listener;
    struct event *flush_ev;
    struct event *sig_term, *sig_int, *stop_timer;
    struct conn *conns;
    struct conn *flush_list;
    uint64_t nconns;
    uint64_t next_conn_id;
    struct resp_limits limits;
    struct resp_arg *argv; /* the parser's argument array, limits.max_args */
    struct blocking *blocking;
    bool stopping;
    int64_t stop_deadline;
    int64_t started_ms;
    uint64_t total_conns, total_cmds, rejected_conns;
};

/* --- server.c --- */
int server_init(struct server *srv, struct config *cfg);
int server_run(struct server *srv); /* returns the process exit status */
void server_free(struct server *srv);

/* --- conn.c --- */
struct conn *conn_new(struct server *srv, int fd);
/* Closes the socket at once; requests in flight are orphaned (req->c NULL)
 * and freed by their completion. */
void conn_close(struct conn *c);
/* Frees the memory conn.c keeps for reuse (at exit). */
void conn_cache_free(void);
/* Dispatches the complete requests in c->in. Returns false if c was closed
 * (a write between slices of a pipeline failed). */
bool conn_process_input(struct conn *c);
/* Starts a request at the tail of c's queue. */
struct req *req_new(struct conn *c);
/* Where the reply to r goes: c->out if r is the head, else r's own buffer;
 * a scratch buffer when the connection is gone. */
struct buf *req_out(struct req *r);
/* Marks r done, releases the replies that are now in order, frees r. */
void req_done(struct req *r);
/* Shortcut for a reply that is known at once: writes it in order. */
struct buf *conn_reply(struct conn *c);
void conn_reply_done(struct conn *c);
void conn_schedule_flush(struct conn *c);
void conn_flush_all(struct server *srv);

/* --- commands.c --- */
void cmd_dispatch(struct conn *c, struct resp_arg *argv, size_t argc);
/* The job a request names (topic, id) into key[0..1], if it names one. */
bool cmd_key(const struct resp_arg *argv, size_t argc, struct dq_str *key);
/* Appends "name arity flags ..." for COMMAND. */
void cmd_table_reply(struct buf *b);
void reply_status_error(struct buf *b, const struct dq_result *res);
void reply_jobs(struct buf *b, const struct dq_result *res);

/* --- blocking.c --- */
struct blocking *blocking_new(struct server *srv);
void blocking_free(struct blocking *bl);
/* Issues a RESERVE for r with the topics given (copied) and, if it finds
 * nothing and timeout_ms != 0, blocks r until a job arrives or the timeout
 * (< 0 = forever) passes. The reply goes to r. */
void blocking_reserve(struct server *srv, struct req *r,
                      const struct resp_arg *topics, size_t ntopics,
                      uint32_t count, int64_t timeout_ms);
/* The store says topic may have ready jobs (store.h's on_ready). */
void blocking_on_ready(struct server *srv, struct dq_str topic, int64_t hint);
/* The connection of r's waiter went away. */
void blocking_abandon(struct waiter *w);
/* Answers every blocked client with nil (graceful stop). */
void blocking_wake_all(struct server *srv);
uint64_t blocking_count(const struct server *srv);

#endif
