/* bench_int.h -- what `delayq bench`'s two files share (bench.c: the load
 * generator's connections, modes and options; bench_report.c: its results,
 * as text or JSON). Private to those two files. */
#ifndef DQ_BENCH_INT_H
#define DQ_BENCH_INT_H

#include <stdint.h>

#include <event2/event.h>

#include "cli/bench.h"
#include "cli/bench_conn.h"
#include "cli/bench_hist.h"

/* Request kinds. A request's ring tag is KIND(kind, n): n jobs it covers
 * (an ACK of several ids). */
enum kind { K_SETUP, K_ADD, K_RESERVE, K_ACK, K_SET, K_PUT, K_BRESERVE, K_DELETE, K_N };
#define KIND(k, n) ((int)(k) | (int)(n) << 4)
#define KIND_OF(tag) ((tag) & 15)
#define KIND_N(tag) ((tag) >> 4)

/* Their names in the output (bench.c). */
extern const char *const bench_kind_name[K_N];

struct bench;

struct mode {
    const char *name;
    enum bconn_proto proto;
    enum kind produce; /* the request that adds a job: K_ADD, K_SET or K_PUT */
    int (*run)(struct bench *b);
    const char *help;
};

/* The lateness mode's run (bench.c): a mode is lateness if its run is this. */
int bench_run_lateness(struct bench *b);

struct opts {
    struct cli_target t;
    int json, quiet;
    const struct mode *mode;
    long clients, pipeline, count;
    long long size, jobs;
    const char *topic;
    double rate;
    int64_t delay_ms;
    int delay_set;
    double time_limit; /* seconds a produce or consume phase may run; 0 = none */
};

struct client {
    struct bench *b;
    struct bconn *c;
    int drained;  /* consume: a RESERVE found nothing */
    long busy;    /* primary requests in flight (ADD, RESERVE, ...) */
};

struct phase {
    const char *what;  /* "ADD", "RESERVE+ACK", ... */
    long long target;  /* jobs */
    long long issued;  /* produce: requests sent; consume: jobs received */
    long long done;    /* jobs completed (replied / acked / delivered) */
    uint64_t t0, t1;   /* monotonic ns */
    struct bench_hist hist[K_N];
};

typedef void reply_fn(struct client *cl, int kind, int n, const struct bconn_reply *r);

struct bench {
    const struct opts *o;
    struct event_base *base;
    struct client *cl;
    int ncl;
    struct phase phases[2];
    int nphases;
    struct phase *ph;
    reply_fn *on_reply;
    long long inflight; /* every request in flight on every connection */
    int failed;
    char errmsg[700];

    char tag[8]; /* run tag: prefix of every id, so runs never collide */
    size_t taglen;
    char *body;  /* body template, o->size bytes */

    struct event *limit;  /* --time-limit of the current phase */
    int limited;          /* a phase was cut short by it */
    long long late_ok;    /* replies (not errors) that came after their phase ended */
    long long ack_short;  /* ACKed jobs the server no longer had */

    /* progress line */
    struct event *progress;
    uint64_t prog_t;
    long long prog_done;
    int prog_shown;

    /* lateness */
    struct event *tick;           /* the producer's 1 ms timer */
    int64_t t0_ms, last_due_ms;   /* due times of the first and last job */
    long long foreign, early;     /* jobs not of this run; delivered before due */
    long long dups;               /* jobs of this run delivered a second time */
    unsigned char *seen;          /* bitmap: job i was delivered */
    struct bench_samples late;    /* lateness of each delivered job, us: from
                                     its due time to its arrival at the
                                     consumer's socket (the kernel's stamp) */
    struct bench_samples late_seen; /* ... to when this process handled it */
    int short_slice;              /* ask_short_slice succeeded */
    uint64_t tick_last;           /* when the tick last fired */
    uint64_t tick_lag_max;        /* the longest it fired late: our own stalls */
    long long tick_lag_over1;     /* firings more than 1 ms late */
};

/* bench_report.c: prints the run's results to stdout. */
void bench_print_text(struct bench *b);
void bench_print_json(struct bench *b);

#endif
