/* delayq.h -- libdelayq, the C client and worker library for delayqd
 * (DESIGN §10; the protocol is docs/protocol.md, the worker docs/workers.md).
 *
 * Link with `pkg-config --cflags --libs delayq` (hiredis and pthreads).
 *
 * Error convention (hiredis style). Every call returns DELAYQ_OK (0) or
 * DELAYQ_ERR (-1). On DELAYQ_ERR the context's error is set: delayq_err()
 * gives a code (enum delayq_error) and delayq_errstr() a message for people
 * ("EXISTS job o-1 already exists in topic orders", "connection refused").
 * The error stays until the next call on the context, which clears it.
 * Server error replies (EXISTS, NOTRESERVED, ...) leave the connection
 * usable; I/O errors and timeouts close it, and the next call reconnects
 * (and re-authenticates) once before sending, unless reconnect is off.
 *
 * Results are returned through out-parameters and are owned by the caller:
 * free them with the matching delayq_*_free (which accept NULL). Strings
 * passed in are NUL-terminated, except bodies, which come with a length.
 *
 * A context is not thread-safe: use one per thread (the worker does).
 * Writing to a connection the server closed raises SIGPIPE: programs that
 * must survive that ignore it (signal(SIGPIPE, SIG_IGN)).
 */
#ifndef DELAYQ_H
#define DELAYQ_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DELAYQ_OK 0
#define DELAYQ_ERR -1

enum delayq_error {
    DELAYQ_E_NONE = 0,
    /* client side */
    DELAYQ_E_IO,          /* cannot connect, connection lost or closed */
    DELAYQ_E_TIMEOUT,     /* the connect or read timeout passed, or the server
                             answered TIMEOUT (a change sent to its store was not
                             confirmed). Either way a change may or may not have
                             been made: see docs/protocol.md for what to retry */
    DELAYQ_E_PROTOCOL,    /* a reply of an unexpected shape */
    DELAYQ_E_NOMEM,       /* out of memory */
    DELAYQ_E_ARG,         /* a bad argument, caught before sending */
    /* server error replies, by their code (docs/protocol.md) */
    DELAYQ_E_SERVER,      /* ERR: syntax, arity, bad value */
    DELAYQ_E_EXISTS,      /* ADD: the id is taken */
    DELAYQ_E_BUSY,        /* ADD REPLACE: the job is reserved */
    DELAYQ_E_NOTRESERVED, /* NACK, TOUCH: the job is not reserved */
    DELAYQ_E_FULL,        /* ADD: --max-jobs reached */
    DELAYQ_E_TOOBIG,      /* ADD: body over --max-body */
    DELAYQ_E_NOAUTH,      /* a password is needed */
    DELAYQ_E_WRONGPASS,   /* AUTH failed */
    DELAYQ_E_UNAVAILABLE, /* the server's store cannot be reached */
    DELAYQ_E_IOERR,       /* the server's store write failed */
    DELAYQ_E_OTHER,       /* another error code from the server */
};

/* The name of a code ("EXISTS", "IO", ...); never NULL. */
const char *delayq_error_name(int err);

/* ---- connecting --------------------------------------------------------- */

struct delayq_options {
    const char *host;           /* NULL = "127.0.0.1" */
    int port;                   /* 0 = 7700 */
    const char *password;       /* NULL = no AUTH */
    int64_t connect_timeout_ms; /* 0 = 5000; < 0 = none */
    int64_t read_timeout_ms;    /* 0 = none: wait for replies for ever. A
                                   RESERVE waits its own TIMEOUT on top. */
    int no_reconnect;           /* 1 = a lost connection stays lost */
};

typedef struct delayq delayq;

/* Connects and authenticates. Returns a context, also when that failed (then
 * delayq_err() is set and later calls try to connect again), or NULL when
 * out of memory. opts may be NULL (all defaults); its strings are copied. */
delayq *delayq_connect(const struct delayq_options *opts);

/* Closes the connection and frees the context. Accepts NULL. */
void delayq_free(delayq *dq);

int delayq_err(const delayq *dq);           /* 0 when the last call succeeded */
const char *delayq_errstr(const delayq *dq); /* "" when the last call succeeded */

/* Closes the current connection (if any) and connects again now. */
int delayq_reconnect(delayq *dq);

/* ---- jobs --------------------------------------------------------------- */

enum delayq_state {
    DELAYQ_UNKNOWN = 0,
    DELAYQ_DELAYED,
    DELAYQ_READY,
    DELAYQ_RESERVED,
    DELAYQ_DEAD,
};

/* "delayed", "ready", "reserved", "dead" or "unknown". */
const char *delayq_state_name(enum delayq_state s);

/* A job as GET or RESERVE returns it. Fields a reply does not carry are 0
 * (RESERVE gives topic, id, body, attempts and deadline; GET gives all but
 * deadline unless reserved). body is NUL-terminated after body_len bytes. */
struct delayq_job {
    char *topic;
    char *id;
    char *body;
    size_t body_len;
    enum delayq_state state;
    int64_t due;      /* unix ms */
    int64_t ttr;      /* ms */
    int64_t retries;
    int64_t attempts;
    int64_t created;  /* unix ms */
    int64_t deadline; /* unix ms, while reserved */
};

void delayq_job_free(struct delayq_job *job);            /* accepts NULL */
void delayq_jobs_free(struct delayq_job *jobs, size_t n); /* an array, as RESERVE gives */

enum delayq_backoff_kind { DELAYQ_BACKOFF_DEFAULT = 0, DELAYQ_BACKOFF_EXP, DELAYQ_BACKOFF_FIXED };

/* Options of ADD. Start from DELAYQ_ADD_OPTS_INIT: -1 means "not given"
 * (the server's default). Give delay_ms or at_ms, not both. */
struct delayq_add_opts {
    int64_t delay_ms;
    int64_t at_ms; /* unix ms */
    int64_t ttr_ms;
    int64_t retries;
    enum delayq_backoff_kind backoff;
    int64_t backoff_base_ms; /* EXP base, or the FIXED delay */
    int64_t backoff_max_ms;  /* EXP only */
    int replace;             /* overwrite a job that is not reserved */
    const char *url;          /* push delivery (DESIGN §9), or NULL */
    const char *content_type; /* with url, or NULL */
};
#define DELAYQ_ADD_OPTS_INIT {-1, -1, -1, -1, DELAYQ_BACKOFF_DEFAULT, 0, 0, 0, NULL, NULL}

/* ADD. id "*" asks the server for a time-ordered id. On success, if id_out is
 * not NULL, *id_out is the job's id (malloc'd, the caller frees it). opts may
 * be NULL. Errors: EXISTS, BUSY, FULL, TOOBIG, SERVER (bad value), ... */
int delayq_add(delayq *dq, const char *topic, const char *id, const void *body,
               size_t body_len, const struct delayq_add_opts *opts, char **id_out);

/* GET. *job is the job (free with delayq_job_free), or NULL if there is no
 * such job (that is not an error). */
int delayq_get(delayq *dq, const char *topic, const char *id, struct delayq_job **job);

/* DEL and ACK of n ids in one topic; *count (may be NULL) = how many existed. */
int delayq_del(delayq *dq, const char *topic, const char *const *ids, size_t n,
               int64_t *count);
int delayq_ack(delayq *dq, const char *topic, const char *const *ids, size_t n,
               int64_t *count);

/* RESERVE up to `count` jobs (>= 1) from ntopics topics. timeout_ms < 0 waits
 * for ever, 0 does not wait. On success *jobs is an array of *n jobs (free
 * with delayq_jobs_free), or NULL with *n == 0 if none became ready in time. */
int delayq_reserve(delayq *dq, const char *const *topics, size_t ntopics,
                   int64_t timeout_ms, int64_t count, struct delayq_job **jobs,
                   size_t *n);

/* NACK. delay_ms < 0 = the job's backoff. *state (may be NULL) = the job's new
 * state: DELAYED, READY or DEAD. Errors: NOTRESERVED, ... */
int delayq_nack(delayq *dq, const char *topic, const char *id, int64_t delay_ms,
                enum delayq_state *state);

/* TOUCH. ttr_ms < 0 = the job's ttr. *deadline (may be NULL) = the new lease
 * end, unix ms. Errors: NOTRESERVED, ... */
int delayq_touch(delayq *dq, const char *topic, const char *id, int64_t ttr_ms,
                 int64_t *deadline);

/* KICK up to count dead jobs (count < 0 = all) back to ready; *kicked may be NULL. */
int delayq_kick(delayq *dq, const char *topic, int64_t count, int64_t *kicked);

/* PURGE: removes every job of the topic; *removed may be NULL. */
int delayq_purge(delayq *dq, const char *topic, int64_t *removed);

/* One LIST page: ids of jobs in `state` ("delayed", "ready", "reserved",
 * "dead"). cursor NULL or "0" starts; count <= 0 = the server's page size.
 * *ids is an array of *n strings (free with delayq_strings_free) and
 * *next_cursor the cursor to continue from ("0" = done; the caller frees it). */
int delayq_list(delayq *dq, const char *topic, const char *state, int64_t count,
                const char *cursor, char ***ids, size_t *n, char **next_cursor);

/* TOPICS: *topics is an array of *n strings (free with delayq_strings_free). */
int delayq_topics(delayq *dq, char ***topics, size_t *n);
void delayq_strings_free(char **strings, size_t n); /* accepts NULL */

/* STATS for a topic, or the whole server when topic is NULL. Counters the
 * server does not send stay 0. */
struct delayq_stats {
    int64_t jobs_delayed, jobs_ready, jobs_reserved, jobs_dead;
    int64_t added, reserved, acked, nacked, expired, dead, deleted, kicked;
};
int delayq_stats(delayq *dq, const char *topic, struct delayq_stats *st);

/* The names of struct delayq_stats's fields in order, and their values as an
 * array (st viewed as DELAYQ_STATS_N int64_t). */
#define DELAYQ_STATS_N 12
extern const char *const delayq_stats_fields[DELAYQ_STATS_N];

/* PING [msg]: *reply (may be NULL; the caller frees it) is the server's answer. */
int delayq_ping(delayq *dq, const char *msg, char **reply);

/* INFO [section]: *text is the server's text (the caller frees it), *len its length. */
int delayq_info(delayq *dq, const char *section, char **text, size_t *len);

/* ---- the worker (threads) ------------------------------------------------
 *
 * delayq_worker_run() consumes jobs from `topics` with up to `concurrency`
 * handlers running at once, each in its own thread with its own connection.
 * It reserves only as many jobs as it has free slots. While a handler runs,
 * a heartbeat thread TOUCHes its job every heartbeat fraction of the lease
 * (default a third), so a long job is not delivered to anyone else; the
 * heartbeat stops when the handler returns.
 *
 * The handler's return value decides: DELAYQ_DONE -> ACK, then on_success;
 * DELAYQ_RETRY -> NACK with the job's backoff (or the delay set by
 * delayq_task_retry_in), then on_retry, or on_dead if no retries were left.
 *
 * Timeout: once a handler has run `timeout_ms`, its task is flagged cancelled
 * (delayq_task_cancelled() turns true and on_cancel is called) and its
 * heartbeat stops; whatever the handler then
 * returns, the job is NACKed (a retry). A thread cannot be killed: a handler
 * that ignores the flag keeps its slot, and its job comes back to the queue
 * when its lease ends.
 *
 * Graceful stop (delayq_worker_stop): nothing more is reserved (jobs that
 * arrive in a RESERVE already sent are handed back at once with NACK DELAY
 * 0); running handlers have `grace_ms` to finish normally; then every
 * unfinished job is handed back at once (NACK DELAY 0, no hook), its task
 * flagged cancelled, and run() waits for those handlers to return, ignoring
 * their results.
 *
 * ACKs are batched: one handler thread at a time ACKs every job whose
 * handler succeeded meanwhile, one ACK per topic, and calls their on_success
 * (so on_success calls never overlap, and may run in another job's thread). on_retry and on_dead run in the
 * handler's thread after its NACK. Hooks run after the server answered; `err`
 * in on_retry/on_dead is 0, or an error code if the ACK/NACK itself failed
 * (then the lease ends and the server redelivers or buries the job). */

enum delayq_result { DELAYQ_DONE = 0, DELAYQ_RETRY = 1 };

struct delayq_task; /* a job being handled */

/* The job (valid until the handler returns). */
const struct delayq_job *delayq_task_job(const struct delayq_task *t);
/* True once the handler's timeout passed or a stop's grace ended. Thread-safe. */
int delayq_task_cancelled(const struct delayq_task *t);
/* The slot the task runs in, 0 .. concurrency-1: a key for per-slot data. */
int delayq_task_slot(const struct delayq_task *t);
/* With DELAYQ_RETRY: retry after delay_ms instead of the job's backoff. */
void delayq_task_retry_in(struct delayq_task *t, int64_t delay_ms);

struct delayq_worker_opts {
    const char *const *topics;
    size_t ntopics;
    int concurrency;            /* handlers at once; 0 = 1 */
    int64_t timeout_ms;         /* handler timeout; 0 = none */
    int64_t grace_ms;           /* on stop; 0 = 30000, < 0 = do not wait */
    double heartbeat;           /* TOUCH every this fraction of the lease; 0 = 1/3 */
    int64_t poll_ms;            /* longest RESERVE wait, bounds how fast a stop is
                                   noticed; 0 = 500 */
    enum delayq_result (*handler)(struct delayq_task *t, void *arg);
    void (*on_success)(const struct delayq_job *job, void *arg);
    void (*on_retry)(const struct delayq_job *job, int err, void *arg);
    void (*on_dead)(const struct delayq_job *job, int err, void *arg);
    /* Called when a running task is flagged cancelled, with the worker's lock
     * held: keep it short (write to a pipe, signal a condition). May be NULL. */
    void (*on_cancel)(struct delayq_task *t, void *arg);
    void *arg;                  /* passed to handler and hooks */
};

typedef struct delayq_worker delayq_worker;

/* Creates a worker; its connections use conn (copied; NULL = defaults).
 * Returns NULL with *errstr (if not NULL) pointing to a static message on a
 * bad option. Nothing connects until delayq_worker_run. */
delayq_worker *delayq_worker_new(const struct delayq_options *conn,
                                 const struct delayq_worker_opts *opts,
                                 const char **errstr);

/* Runs until delayq_worker_stop, then stops gracefully and returns
 * DELAYQ_OK. Connection failures are retried with a growing pause (up to 2 s)
 * and reported by the optional log callback; they do not end the run. */
int delayq_worker_run(delayq_worker *w);

/* Asks a running worker to stop (thread-safe, idempotent; not async-signal-
 * safe: from a signal handler, sigwait in a thread instead). */
void delayq_worker_stop(delayq_worker *w);

/* Where the worker reports connection trouble; default: stderr. */
void delayq_worker_set_log(delayq_worker *w, void (*log)(const char *msg, void *arg));

/* Frees a worker that is not running. Accepts NULL. */
void delayq_worker_free(delayq_worker *w);

#ifdef __cplusplus
}
#endif
#endif
