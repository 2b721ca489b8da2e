/* bench.c -- `delayq bench`, the load generator (DESIGN §4, §7).
 *
 * One process, one thread, one libevent loop driving --clients connections
 * (bench_conn.h), each keeping --pipeline requests in flight. The same loop
 * and the same pipelining drive delayq (RESP), Redis (SET) and beanstalkd
 * (its text protocol), so their figures compare like for like.
 *
 * A run is one or two phases. A phase has a target (jobs), counts what was
 * issued and completed, and keeps a latency histogram per request kind;
 * the loop runs until the phase's reply handler says it is over.
 *   add, set, beanstalk-put    one "produce" phase
 *   reserve, beanstalk-reserve a produce phase (the preload), then "consume"
 *   lateness                   producer and consumers at once
 *
 * Error convention: functions return 0 / -1; the first failure (an error
 * reply, a lost connection) is kept in bench.errmsg, stops the phase, and
 * makes bench_main return 1.
 *
 * bench_report.c prints the results; bench_int.h shares the run's structs.
 */
#include "cli/bench.h"

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <event2/event.h>

#include "cli/bench_conn.h"
#include "cli/bench_hist.h"
#include "cli/bench_int.h"
#include "lib/clock.h"
#include "lib/duration.h"
#include "lib/xalloc.h"

const char *const bench_kind_name[K_N] = {
    "setup", "ADD", "RESERVE", "ACK", "SET", "put", "reserve", "delete",
};

static int run_produce(struct bench *b);
static int run_consume(struct bench *b);

#define LATENESS_TIMEOUT_MS 1000 /* RESERVE TIMEOUT of the lateness consumers */
#define LATENESS_GRACE_MS 5000   /* wait after the last due time */
#define BEANSTALK_TTR "30"

/* ---- small helpers -------------------------------------------------------- */

/* Writes the run tag followed by i in base 36; returns the length. */
static size_t make_id(const struct bench *b, long long i, char *out) {
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    char tmp[16];
    int n = 0;
    unsigned long long v = (unsigned long long)i;
    do {
        tmp[n++] = digits[v % 36];
        v /= 36;
    } while (v);
    memcpy(out, b->tag, b->taglen);
    size_t len = b->taglen;
    while (n)
        out[len++] = tmp[--n];
    out[len] = '\0';
    return len;
}

static void fail(struct bench *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct bench *b, const char *fmt, ...) {
    if (!b->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->errmsg, sizeof b->errmsg, fmt, ap);
        va_end(ap);
        b->failed = 1;
    }
    event_base_loopbreak(b->base);
}

static void phase_end(struct bench *b) {
    if (!b->ph->t1)
        b->ph->t1 = bconn_now_ns();
    event_base_loopbreak(b->base);
}

/* ---- connections ------------------------------------------------------------ */

static void on_reply(struct bconn *c, int tag, const struct bconn_reply *r,
                     uint64_t lat, void *arg) {
    struct client *cl = arg;
    struct bench *b = cl->b;
    int kind = KIND_OF(tag);
    b->inflight--;
    if (b->failed)
        return;
    if (r->type == BR_ERROR) {
        fail(b, "%s:%d replied to %s: %.*s", b->o->t.host, b->o->t.port,
             bench_kind_name[kind], (int)r->text_len, r->text);
        return;
    }
    if (kind == K_SETUP)
        return;
    if (b->ph->t1) {
        b->late_ok++;
        return;
    }
    bench_hist_add(&b->ph->hist[kind], lat);
    b->on_reply(cl, kind, KIND_N(tag), r);
}

static void on_fail(struct bconn *c, const char *why, void *arg) {
    struct client *cl = arg;
    fail(cl->b, "%s:%d: %s", cl->b->o->t.host, cl->b->o->t.port, why);
}

static const struct bconn_handler handler = {on_reply, on_fail};

static void send_cmd(struct client *cl, int tag, int argc, const char *const *argv,
                     const size_t *lens) {
    bconn_cmd(cl->c, tag, argc, argv, lens);
    cl->b->inflight++;
}

static void send_raw(struct client *cl, int tag, const void *a, size_t alen,
                     const void *p, size_t plen, const void *d, size_t dlen) {
    bconn_raw(cl->c, tag, a, alen, p, plen, d, dlen);
    cl->b->inflight++;
}

static void send_line(struct client *cl, int tag, const char *line) {
    send_raw(cl, tag, line, strlen(line), NULL, 0, NULL, 0);
}

/* Opens n connections (AUTH first on RESP when a password is given). */
static int open_clients(struct bench *b, int n) {
    const struct opts *o = b->o;
    b->cl = xcalloc((size_t)n, sizeof *b->cl);
    for (int i = 0; i < n; i++) {
        struct client *cl = &b->cl[i];
        char err[300];
        cl->b = b;
        cl->c = bconn_open(b->base, o->t.host, o->t.port, o->mode->proto, &handler, cl,
                           err, sizeof err);
        if (!cl->c) {
            snprintf(b->errmsg, sizeof b->errmsg, "%s", err);
            b->failed = 1;
            return -1;
        }
        b->ncl = i + 1;
        if (o->mode->proto == BCONN_RESP && o->t.password) {
            const char *argv[] = {"AUTH", o->t.password};
            size_t lens[] = {4, strlen(o->t.password)};
            send_cmd(cl, K_SETUP, 2, argv, lens);
        }
    }
    return 0;
}

static void close_clients(struct bench *b) {
    for (int i = 0; i < b->ncl; i++)
        bconn_close(b->cl[i].c);
    free(b->cl);
    b->cl = NULL;
    b->ncl = 0;
}

/* ---- progress line ----------------------------------------------------------- */

static void on_progress(evutil_socket_t fd, short what, void *arg) {
    struct bench *b = arg;
    struct phase *ph = b->ph;
    uint64_t now = bconn_now_ns();
    double dt = (double)(now - b->prog_t) / 1e9;
    double rate = dt > 0 ? (double)(ph->done - b->prog_done) / dt : 0;
    b->prog_t = now;
    b->prog_done = ph->done;
    fprintf(stderr, "\r%s: %lld/%lld (%.0f%%), %.0f/s        ", ph->what, ph->done,
            ph->target, ph->target ? 100.0 * (double)ph->done / (double)ph->target : 0.0,
            rate);
    b->prog_shown = 1;
}

static void on_limit(evutil_socket_t fd, short what, void *arg) {
    struct bench *b = arg;
    b->limited = 1;
    phase_end(b);
}

/* Runs the loop for phase ph; `start` sends the first requests. Ends early,
 * with what was done so far, after --time-limit seconds. */
static int run_phase(struct bench *b, struct phase *ph, const char *what, long long target,
                     reply_fn *fn, void (*start)(struct bench *b)) {
    memset(ph, 0, sizeof *ph);
    ph->what = what;
    ph->target = target;
    b->ph = ph;
    b->on_reply = fn;
    b->nphases = (int)(ph - b->phases) + 1;
    ph->t0 = b->prog_t = bconn_now_ns();
    b->prog_done = 0;
    if (!b->o->quiet && isatty(2)) {
        struct timeval tv = {0, 250000};
        b->progress = event_new(b->base, -1, EV_PERSIST, on_progress, b);
        event_add(b->progress, &tv);
    }
    b->late_ok = 0;
    if (b->o->time_limit > 0 && b->o->mode->run != bench_run_lateness) {
        double t = b->o->time_limit;
        struct timeval tv = {(time_t)t, (suseconds_t)((t - (double)(time_t)t) * 1e6)};
        b->limit = evtimer_new(b->base, on_limit, b);
        evtimer_add(b->limit, &tv);
    }
    start(b);
    for (int i = 0; i < b->ncl; i++)
        bconn_flush(b->cl[i].c);
    if (!b->failed && !ph->t1)
        event_base_dispatch(b->base);
    if (!ph->t1)
        ph->t1 = bconn_now_ns();
    if (b->limit) {
        event_free(b->limit);
        b->limit = NULL;
    }
    if (b->progress) {
        event_free(b->progress);
        b->progress = NULL;
        if (b->prog_shown)
            fprintf(stderr, "\r%*s\r", 70, "");
        b->prog_shown = 0;
    }
    return b->failed ? -1 : 0;
}

/* ---- produce: ADD / SET / put -------------------------------------------------- */

static void send_add(struct client *cl, long long i, const char *body, size_t blen,
                     int64_t at_ms) {
    struct bench *b = cl->b;
    const struct opts *o = b->o;
    char id[32], num[24];
    size_t idlen = make_id(b, i, id);
    const char *argv[6] = {"ADD", o->topic, id, body};
    size_t lens[6] = {3, strlen(o->topic), idlen, blen};
    int argc = 4;
    if (at_ms > 0) {
        argv[argc] = "AT";
        lens[argc++] = 2;
        argv[argc] = num;
        lens[argc++] = (size_t)snprintf(num, sizeof num, "%" PRId64, at_ms);
    } else if (o->delay_ms > 0) {
        argv[argc] = "DELAY";
        lens[argc++] = 5;
        argv[argc] = num;
        lens[argc++] = (size_t)snprintf(num, sizeof num, "%" PRId64, o->delay_ms);
    }
    send_cmd(cl, K_ADD, argc, argv, lens);
}

static void send_set(struct client *cl, long long i) {
    struct bench *b = cl->b;
    char key[256];
    size_t tl = strlen(b->o->topic);
    if (tl > 200)
        tl = 200;
    memcpy(key, b->o->topic, tl);
    key[tl] = ':';
    size_t klen = tl + 1 + make_id(b, i, key + tl + 1);
    const char *argv[] = {"SET", key, b->body};
    size_t lens[] = {3, klen, (size_t)b->o->size};
    send_cmd(cl, K_SET, 3, argv, lens);
}

static void send_put(struct client *cl) {
    struct bench *b = cl->b;
    char head[96];
    int n = snprintf(head, sizeof head, "put 0 %" PRId64 " " BEANSTALK_TTR " %lld\r\n",
                     (b->o->delay_ms + 999) / 1000, b->o->size);
    send_raw(cl, K_PUT, head, (size_t)n, b->body, (size_t)b->o->size, "\r\n", 2);
}

static void produce_fill(struct client *cl) {
    struct bench *b = cl->b;
    struct phase *ph = b->ph;
    while (cl->busy < b->o->pipeline && ph->issued < ph->target) {
        long long i = ph->issued++;
        switch (b->o->mode->produce) {
        case K_PUT:
            send_put(cl);
            break;
        case K_SET:
            send_set(cl, i);
            break;
        default:
            send_add(cl, i, b->body, (size_t)b->o->size, 0);
        }
        cl->busy++;
    }
}

static void produce_reply(struct client *cl, int kind, int n, const struct bconn_reply *r) {
    struct bench *b = cl->b;
    cl->busy--;
    if (++b->ph->done >= b->ph->target) {
        phase_end(b);
        return;
    }
    produce_fill(cl);
}

static void produce_start(struct bench *b) {
    for (int i = 0; i < b->ncl; i++) {
        if (b->o->mode->proto == BCONN_BEANSTALK) {
            char line[256];
            snprintf(line, sizeof line, "use %s\r\n", b->o->topic);
            send_line(&b->cl[i], K_SETUP, line);
        }
        produce_fill(&b->cl[i]);
    }
}

/* ---- consume: RESERVE TIMEOUT 0 + ACK, reserve-with-timeout 0 + delete ------- */

static void send_reserve(struct client *cl, long timeout_ms) {
    struct bench *b = cl->b;
    if (b->o->mode->proto == BCONN_BEANSTALK) {
        send_line(cl, K_BRESERVE, "reserve-with-timeout 0\r\n");
        return;
    }
    char tbuf[24], cbuf[24];
    const char *argv[] = {"RESERVE", "TIMEOUT", tbuf, "COUNT", cbuf, "FROM", b->o->topic};
    size_t lens[] = {7, 7, (size_t)snprintf(tbuf, sizeof tbuf, "%ld", timeout_ms), 5,
                     (size_t)snprintf(cbuf, sizeof cbuf, "%ld", b->o->count), 4,
                     strlen(b->o->topic)};
    send_cmd(cl, K_RESERVE, 7, argv, lens);
}

/* ACK (or beanstalk delete) the jobs of one RESERVE reply. */
static void send_acks(struct client *cl, const struct bconn_reply *r) {
    struct bench *b = cl->b;
    if (r->njobs == 0)
        return;
    if (b->o->mode->proto == BCONN_BEANSTALK) {
        for (size_t i = 0; i < r->njobs; i++)
            send_raw(cl, KIND(K_DELETE, 1), "delete ", 7, r->jobs[i].id, r->jobs[i].id_len,
                     "\r\n", 2);
        return;
    }
    size_t n = r->njobs;
    const char **argv = xmalloc((n + 2) * sizeof *argv);
    size_t *lens = xmalloc((n + 2) * sizeof *lens);
    argv[0] = "ACK";
    lens[0] = 3;
    argv[1] = b->o->topic;
    lens[1] = strlen(b->o->topic);
    for (size_t i = 0; i < n; i++) {
        argv[i + 2] = r->jobs[i].id;
        lens[i + 2] = r->jobs[i].id_len;
    }
    send_cmd(cl, KIND(K_ACK, n), (int)(n + 2), argv, lens);
    free(argv);
    free(lens);
}

static void consume_fill(struct client *cl) {
    struct bench *b = cl->b;
    struct phase *ph = b->ph;
    long per = b->o->mode->proto == BCONN_BEANSTALK ? 1 : b->o->count;
    while (!cl->drained && cl->busy < b->o->pipeline &&
           ph->issued + cl->busy * per < ph->target) {
        send_reserve(cl, 0);
        cl->busy++;
    }
}

static void consume_reply(struct client *cl, int kind, int n, const struct bconn_reply *r) {
    struct bench *b = cl->b;
    struct phase *ph = b->ph;
    if (kind == K_RESERVE || kind == K_BRESERVE) {
        cl->busy--;
        if (r->type == BR_NIL || r->njobs == 0)
            cl->drained = 1;
        ph->issued += (long long)r->njobs;
        send_acks(cl, r);
        consume_fill(cl);
    } else {
        ph->done += n;
        if (kind == K_ACK && r->type == BR_INTEGER && r->integer < n)
            b->ack_short += n - r->integer;
    }
    if (b->inflight == 0)
        phase_end(b);
}

static void consume_start(struct bench *b) {
    for (int i = 0; i < b->ncl; i++) {
        struct client *cl = &b->cl[i];
        cl->busy = 0;
        cl->drained = 0;
        if (b->o->mode->proto == BCONN_BEANSTALK) {
            char line[256];
            snprintf(line, sizeof line, "watch %s\r\n", b->o->topic);
            send_line(cl, K_SETUP, line);
            if (strcmp(b->o->topic, "default") != 0)
                send_line(cl, K_SETUP, "ignore default\r\n");
        }
        consume_fill(cl);
    }
    if (b->inflight == 0)
        phase_end(b);
}

/* ---- lateness ------------------------------------------------------------------- */

/* The counter make_id put after the run tag, or -1. */
static long long id_index(const struct bench *b, const char *id, size_t len) {
    if (len <= b->taglen || len > b->taglen + 12 || memcmp(id, b->tag, b->taglen) != 0)
        return -1;
    long long v = 0;
    for (size_t i = b->taglen; i < len; i++) {
        char c = id[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 36 + d;
    }
    return v;
}

static int64_t due_of(const struct bench *b, long long i) {
    return b->t0_ms + (int64_t)((double)i * 1000.0 / b->o->rate);
}

static void lateness_produce(struct client *cl) {
    struct bench *b = cl->b;
    struct phase *ph = b->ph;
    int64_t now = clock_ms();
    while (cl->busy < b->o->pipeline && ph->issued < ph->target) {
        int64_t due = due_of(b, ph->issued);
        if (due - b->o->delay_ms > now)
            break;
        /* The body starts with the due time; the rest is padding. */
        char head[24];
        int hl = snprintf(head, sizeof head, "%013" PRId64 "-", due);
        memcpy(b->body, head, (size_t)hl < (size_t)b->o->size ? (size_t)hl : (size_t)b->o->size);
        send_add(cl, ph->issued, b->body, (size_t)b->o->size, due);
        ph->issued++;
        cl->busy++;
    }
}

static void on_tick(evutil_socket_t fd, short what, void *arg) {
    struct bench *b = arg;
    struct client *prod = &b->cl[0];
    uint64_t now = bconn_now_ns();
    if (b->tick_last) {
        uint64_t lag = now - b->tick_last > 1000000 ? now - b->tick_last - 1000000 : 0;
        if (lag > b->tick_lag_max)
            b->tick_lag_max = lag;
        if (lag > 1000000)
            b->tick_lag_over1++;
    }
    b->tick_last = now;
    lateness_produce(prod);
    bconn_flush(prod->c);
    if (b->ph->issued >= b->ph->target && clock_ms() > b->last_due_ms + LATENESS_GRACE_MS)
        phase_end(b);
}

static void lateness_reply(struct client *cl, int kind, int n, const struct bconn_reply *r) {
    struct bench *b = cl->b;
    struct phase *ph = b->ph;
    if (kind == K_ADD) {
        cl->busy--;
        lateness_produce(cl);
        return;
    }
    if (kind == K_ACK) {
        if (r->type == BR_INTEGER && r->integer < n)
            b->ack_short += n - r->integer;
        return;
    }
    /* RESERVE */
    if (r->njobs > 0) {
        int64_t seen_us = clock_us();
        int64_t at_us = r->rx_unix_us ? r->rx_unix_us : seen_us;
        for (size_t i = 0; i < r->njobs; i++) {
            const struct bconn_job *j = &r->jobs[i];
            long long idx = id_index(b, j->id, j->id_len);
            if (idx < 0 || idx >= ph->target || j->head_len < 13) {
                b->foreign++;
                continue;
            }
            if (b->seen[idx / 8] & (1u << (idx % 8))) {
                b->dups++;
                continue;
            }
            b->seen[idx / 8] |= (unsigned char)(1u << (idx % 8));
            int64_t due = 0;
            for (int k = 0; k < 13; k++)
                due = due * 10 + (j->head[k] - '0');
            int64_t late = at_us - due * 1000;
            if (late < 0)
                b->early++;
            bench_samples_add(&b->late, late);
            bench_samples_add(&b->late_seen, seen_us - due * 1000);
            ph->done++;
        }
        send_acks(cl, r);
    }
    if (ph->done >= ph->target) {
        phase_end(b);
        return;
    }
    send_reserve(cl, LATENESS_TIMEOUT_MS);
}

static void lateness_start(struct bench *b) {
    for (int i = 1; i < b->ncl; i++) {
        bconn_stamp_arrivals(b->cl[i].c); /* else the time it is handled */
        send_reserve(&b->cl[i], LATENESS_TIMEOUT_MS);
    }
    struct timeval tv = {0, 1000};
    b->tick = event_new(b->base, -1, EV_PERSIST, on_tick, b);
    event_add(b->tick, &tv);
    lateness_produce(&b->cl[0]);
}

/* ---- modes ----------------------------------------------------------------------- */

static int run_produce(struct bench *b) {
    if (open_clients(b, (int)b->o->clients) < 0)
        return -1;
    return run_phase(b, &b->phases[0], bench_kind_name[b->o->mode->produce], b->o->jobs,
                     produce_reply, produce_start);
}

static int run_consume(struct bench *b) {
    int bs = b->o->mode->proto == BCONN_BEANSTALK;
    if (open_clients(b, (int)b->o->clients) < 0)
        return -1;
    if (run_phase(b, &b->phases[0], bs ? "put (preload)" : "ADD (preload)", b->o->jobs,
                  produce_reply, produce_start) < 0)
        return -1;
    /* Requests still in flight from a preload cut short are answered (and
     * discarded) first; only the jobs whose ADD was answered are counted. */
    while (b->inflight > 0 && !b->failed)
        event_base_loop(b->base, EVLOOP_ONCE);
    if (b->failed)
        return -1;
    long long preloaded = b->phases[0].done + b->late_ok;
    return run_phase(b, &b->phases[1], bs ? "reserve+delete" : "RESERVE+ACK",
                     preloaded < b->o->jobs ? preloaded : b->o->jobs,
                     consume_reply, consume_start);
}

/* What lateness measures is the server; this process must not add its own
 * scheduling delays. When the kernel puts it on the core where the server
 * is running (it follows the server's wakeups there), it can wait a whole
 * slice, milliseconds, before it may send its next RESERVE. A short slice
 * (Linux >= 6.12's sched_attr.sched_runtime for normal tasks, no privilege
 * needed) lets it run as soon as it wakes. Older kernels refuse or ignore
 * it, which is harmless; b->short_slice records which. */
static void ask_short_slice(struct bench *b) {
    struct { /* the kernel's struct sched_attr (glibc < 2.41 has none) */
        uint32_t size, sched_policy;
        uint64_t sched_flags;
        int32_t sched_nice;
        uint32_t sched_priority;
        uint64_t sched_runtime, sched_deadline, sched_period;
    } a = {.size = sizeof a, .sched_policy = SCHED_OTHER, .sched_runtime = 100 * 1000};
    b->short_slice = syscall(SYS_sched_setattr, 0, &a, 0) == 0;
}

int bench_run_lateness(struct bench *b) {
    ask_short_slice(b);
    if (open_clients(b, (int)b->o->clients + 1) < 0)
        return -1;
    /* The first job is due `delay` from now plus a little for the setup. */
    b->t0_ms = clock_ms() + b->o->delay_ms + 100;
    b->last_due_ms = due_of(b, b->o->jobs - 1);
    b->seen = xcalloc((size_t)(b->o->jobs / 8 + 1), 1);
    int rc = run_phase(b, &b->phases[0], "lateness (delivered)", b->o->jobs, lateness_reply,
                       lateness_start);
    event_free(b->tick);
    b->tick = NULL;
    return rc;
}

static const struct mode modes[] = {
    {"add", BCONN_RESP, K_ADD, run_produce, "ADD topic id body [DELAY d]; ADDs per second"},
    {"reserve", BCONN_RESP, K_ADD, run_consume,
     "preload --jobs with ADD, then RESERVE TIMEOUT 0 COUNT k + ACK;\n"
     "                           pairs per second"},
    {"lateness", BCONN_RESP, K_ADD, bench_run_lateness,
     "ADD ... AT due, due times --rate per second, added --delay ahead;\n"
     "                           consumers block in RESERVE; lateness = delivery - due"},
    {"set", BCONN_RESP, K_SET, run_produce, "Redis SET key body (against redis-server)"},
    {"beanstalk-put", BCONN_BEANSTALK, K_PUT, run_produce,
     "beanstalkd put 0 delay 30 bytes (against beanstalkd)"},
    {"beanstalk-reserve", BCONN_BEANSTALK, K_PUT, run_consume,
     "beanstalkd put preload, then reserve-with-timeout 0 + delete"},
};
#define NMODES (sizeof modes / sizeof modes[0])

/* ---- options ------------------------------------------------------------------------ */

static void usage(FILE *f) {
    fprintf(f,
            "usage: delayq [-h host] [-p port] [-a password] [--json] bench [options]\n"
            "\n"
            "Drives a server with pipelined requests from one process and prints throughput,\n"
            "request latency percentiles (send to reply) and, in lateness mode, delivery\n"
            "lateness percentiles. The same harness speaks RESP (delayq, Redis) and\n"
            "beanstalkd's protocol, so the three compare like for like.\n"
            "\n"
            "  -m, --mode MODE     what to run (default add):\n");
    for (size_t i = 0; i < NMODES; i++)
        fprintf(f, "        %-18s %s\n", modes[i].name, modes[i].help);
    fprintf(f,
            "  -c, --clients N     connections; lateness: consumers, plus one producer (1)\n"
            "  -P, --pipeline N    requests in flight per connection (64)\n"
            "  -d, --size BYTES    job body / value size (100)\n"
            "  -n, --jobs N        jobs in all (1000000; lateness: 10 s worth at --rate)\n"
            "  -t, --topic T       topic, key prefix or beanstalkd tube (bench)\n"
            "      --rate N        lateness: jobs due per second (10000)\n"
            "      --delay D       add, beanstalk-put: DELAY of every job (none);\n"
            "                      lateness: how long before its due time a job is added (1s)\n"
            "                      milliseconds or 500ms, 2s, 1m, ...\n"
            "      --count K       RESERVE COUNT (reserve 1, lateness 16)\n"
            "      --time-limit S  stop a phase after S seconds and report what was done\n"
            "                      (not lateness) (none)\n"
            "  -q, --quiet         no progress line on stderr (shown only on a terminal)\n"
            "      --json          print the results as one JSON object\n"
            "  -h HOST, -p PORT, -a PASSWORD  as before the word bench\n"
            "\n"
            "Ids are a per-run tag plus a counter, so runs never collide. Lateness jobs carry\n"
            "their due unix-ms in the first 13 bytes of the body (--size is raised to 14).\n"
            "Exit status: 0 done, 1 an error reply or a lost connection (or lateness jobs\n"
            "never delivered), 2 usage.\n");
}

static int parse_long(const char *name, const char *v, long long lo, long long hi,
                      long long *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "delayq bench: invalid %s '%s': expected an integer from %lld to %lld\n",
                name, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

/* Parses argv into o; returns 0, 1 for --help (printed), or 2 on error. */
static int parse_opts(struct opts *o, int argc, char **argv) {
    long long v;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        char name[32];
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        if (eq) {
            size_t n = (size_t)(eq - a) < sizeof name - 1 ? (size_t)(eq - a) : sizeof name - 1;
            memcpy(name, a, n);
            name[n] = '\0';
            val = eq + 1;
            a = name;
        }
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--json") || !strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            if (a[2] == 'j')
                o->json = 1;
            else
                o->quiet = 1;
            continue;
        }
#define IS(s, l) (!strcmp(a, s) || !strcmp(a, l))
        int known = IS("-m", "--mode") || IS("-c", "--clients") || IS("-P", "--pipeline") ||
                    IS("-d", "--size") || IS("-n", "--jobs") || IS("-t", "--topic") ||
                    IS("--rate", "--rate") || IS("--delay", "--delay") ||
                    IS("--count", "--count") || IS("--time-limit", "--time-limit") ||
                    IS("-h", "--host") || IS("-p", "--port") ||
                    IS("-a", "--password");
        if (!known) {
            fprintf(stderr, "delayq bench: unknown option '%s' (see delayq bench --help)\n", a);
            return 2;
        }
        if (!val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "delayq bench: %s needs a value\n", a);
                return 2;
            }
            val = argv[++i];
        }
        if (IS("-m", "--mode")) {
            o->mode = NULL;
            for (size_t k = 0; k < NMODES; k++)
                if (!strcmp(val, modes[k].name))
                    o->mode = &modes[k];
            if (!o->mode) {
                fprintf(stderr, "delayq bench: invalid --mode '%s': expected one of", val);
                for (size_t k = 0; k < NMODES; k++)
                    fprintf(stderr, " %s", modes[k].name);
                fprintf(stderr, "\n");
                return 2;
            }
        } else if (IS("-c", "--clients")) {
            if (parse_long("--clients", val, 1, 10000, &v))
                return 2;
            o->clients = (long)v;
        } else if (IS("-P", "--pipeline")) {
            if (parse_long("--pipeline", val, 1, 1000000, &v))
                return 2;
            o->pipeline = (long)v;
        } else if (IS("-d", "--size")) {
            if (parse_long("--size", val, 0, 512 << 20, &o->size))
                return 2;
        } else if (IS("-n", "--jobs")) {
            if (parse_long("--jobs", val, 1, (long long)1 << 40, &o->jobs))
                return 2;
        } else if (IS("-t", "--topic")) {
            o->topic = val;
        } else if (IS("--time-limit", "--time-limit")) {
            char *end;
            o->time_limit = strtod(val, &end);
            if (end == val || *end || !(o->time_limit > 0) || o->time_limit > 1e6) {
                fprintf(stderr, "delayq bench: invalid --time-limit '%s': expected seconds > 0\n",
                        val);
                return 2;
            }
        } else if (IS("--count", "--count")) {
            if (parse_long("--count", val, 1, (1 << 20) - 1, &v))
                return 2;
            o->count = (long)v;
        } else if (IS("--rate", "--rate")) {
            char *end;
            o->rate = strtod(val, &end);
            if (end == val || *end || !(o->rate > 0) || o->rate > 1e8) {
                fprintf(stderr, "delayq bench: invalid --rate '%s': expected jobs per second > 0\n",
                        val);
                return 2;
            }
        } else if (IS("--delay", "--delay")) {
            const char *why;
            if (duration_parse(val, &o->delay_ms, &why) < 0) {
                fprintf(stderr, "delayq bench: invalid --delay '%s': %s\n", val, why);
                return 2;
            }
            o->delay_set = 1;
        } else if (IS("-h", "--host")) {
            o->t.host = val;
        } else if (IS("-p", "--port")) {
            if (parse_long("--port", val, 1, 65535, &v))
                return 2;
            o->t.port = (int)v;
        } else if (IS("-a", "--password")) {
            o->t.password = val;
        }
#undef IS
    }
    return 0;
}

/* Fills in the defaults that depend on the mode. */
static void finish_opts(struct opts *o) {
    int late = o->mode->run == bench_run_lateness;
    if (!o->count)
        o->count = late ? 16 : 1;
    if (!o->delay_set)
        o->delay_ms = late ? 1000 : 0;
    if (!o->jobs)
        o->jobs = late ? (long long)(o->rate * 10) : 1000000;
    if (o->jobs < 1)
        o->jobs = 1;
    if (late && o->size < 14)
        o->size = 14;
}

/* ---- entry ------------------------------------------------------------------------- */

int bench_main(const struct cli_target *t, int json, int argc, char **argv) {
    struct opts o = {0};
    o.t = *t;
    if (!o.t.host)
        o.t.host = "127.0.0.1";
    if (!o.t.port)
        o.t.port = 7700;
    o.json = json;
    o.mode = &modes[0];
    o.clients = 1;
    o.pipeline = 64;
    o.size = 100;
    o.topic = "bench";
    o.rate = 10000;
    int rc = parse_opts(&o, argc, argv);
    if (rc)
        return rc == 1 ? 0 : 2;
    finish_opts(&o);

    struct bench *b = xcalloc(1, sizeof *b);
    b->o = &o;
    /* Precise timers (timerfd): the lateness producer ticks every 1 ms. */
    struct event_config *cfg = event_config_new();
    if (cfg) {
        event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
        b->base = event_base_new_with_config(cfg);
        event_config_free(cfg);
    }
    if (!b->base) {
        fprintf(stderr, "delayq bench: cannot create an event loop\n");
        free(b);
        return 1;
    }
    /* Run tag: 5 base-36 digits of the clock in ms (repeats every ~16 h). */
    {
        static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
        uint64_t v = (uint64_t)clock_ms() ^ ((uint64_t)getpid() << 16);
        for (int i = 0; i < 5; i++, v /= 36)
            b->tag[i] = digits[v % 36];
        b->tag[5] = '-';
        b->taglen = 6;
    }
    b->body = xmalloc((size_t)o.size + 1);
    memset(b->body, 'x', (size_t)o.size);

    rc = o.mode->run(b);
    if (b->failed)
        fprintf(stderr, "delayq bench: %s\n", b->errmsg);
    if (b->nphases > 0 && (rc == 0 || b->ph->done > 0)) {
        if (o.json)
            bench_print_json(b);
        else
            bench_print_text(b);
    }
    int status = b->failed ? 1 : 0;
    if (o.mode->run == bench_run_lateness && b->phases[0].done < b->phases[0].target)
        status = 1;
    if (o.mode->run == run_consume)
        if (b->nphases == 2 && b->phases[1].done < b->phases[1].target && !b->failed &&
            !b->limited)
            fprintf(stderr, "delayq bench: the topic ran dry after %lld of %lld jobs\n",
                    b->phases[1].done, b->phases[1].target);

    close_clients(b);
    bench_samples_free(&b->late);
    bench_samples_free(&b->late_seen);
    free(b->seen);
    free(b->body);
    event_base_free(b->base);
    free(b);
    return status;
}
