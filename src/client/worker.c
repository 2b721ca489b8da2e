/* worker.c -- libdelayq's worker (include/delayq.h, docs/workers.md).
 *
 * Threads, each with its own connection:
 *   - the caller of delayq_worker_run, the dispatcher: RESERVE COUNT <free
 *     slots> (never more), hands each job to an idle slot, and on stop runs
 *     the grace period and hands unfinished jobs back;
 *   - one handler thread per slot: runs the handler, then NACKs a failure
 *     and calls its hook, or queues a success for ACK. The first handler
 *     thread to queue one while no one is ACKing becomes the acker: it ACKs
 *     every queued job, one ACK per topic, until the queue is empty (so ACKs
 *     are batched under load and immediate when idle);
 *   - the heartbeat thread: TOUCHes running jobs every `heartbeat` fraction
 *     of their lease and flags handlers past their timeout.
 * One mutex guards the slots; nothing talks to the server with it held.
 * A slot's state moves FREE -> QUEUED -> RUNNING -> (FINISHING | ABANDONED)
 * -> FREE; whoever moves it out of RUNNING under the lock answers the server
 * for the job (the handler thread, or the dispatcher at the end of a grace).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "delayq.h"

#define DEFAULT_GRACE_MS 30000
#define DEFAULT_POLL_MS 500
#define DEFAULT_HEARTBEAT (1.0 / 3)
#define MIN_TOUCH_MS 10
#define MAX_PAUSE_MS 2000

enum slot_state { S_FREE, S_QUEUED, S_RUNNING, S_FINISHING, S_ABANDONED };

struct delayq_task {
    struct delayq_worker *w;
    int index;
    enum slot_state state;
    unsigned gen;          /* bumped at each dispatch */
    struct delayq_job job; /* owned while not FREE */
    int64_t started;       /* monotonic ms, when the handler began */
    int64_t next_touch;    /* monotonic ms */
    int64_t retry_delay;   /* -1 = backoff */
    bool timed_out;
    atomic_int cancelled;
    pthread_t thread;
    pthread_cond_t cv; /* its handler thread waits here for a job */
};

struct delayq_worker {
    struct delayq_options conn;
    char *host, *password;
    char **topics;
    size_t ntopics;
    int n;
    int64_t timeout_ms, grace_ms, poll_ms;
    double heartbeat;
    struct delayq_worker_opts o; /* handler, hooks, arg */
    void (*log)(const char *msg, void *arg);

    pthread_mutex_t mu;
    pthread_cond_t cv_main; /* dispatcher: a slot freed, stop */
    pthread_cond_t cv_hb;   /* heartbeat: a job started, exit */
    bool running, stopping, exiting;
    int nfree;
    struct delayq_task *slots;
    int *done; /* slots whose jobs wait for the acker */
    int ndone;
    bool acking; /* a handler thread is ACKing the done slots */
    int *ack_slots;         /* the acker's copy of done */
    const char **ack_ids;   /* the ids of one ACK */
    bool *ack_sent;
    pthread_t hb_thread;
};

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits on cv until the monotonic time `until` (ms) at the latest. */
static void wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until) {
    struct timespec ts = {.tv_sec = until / 1000, .tv_nsec = (until % 1000) * 1000000};
    pthread_cond_timedwait(cv, mu, &ts);
}

static void default_log(const char *msg, void *arg) {
    (void)arg;
    fprintf(stderr, "delayq worker: %s\n", msg);
}

static void wlog(struct delayq_worker *w, const char *what, const delayq *dq) {
    char msg[640];
    snprintf(msg, sizeof msg, "%s: %s", what, delayq_errstr(dq));
    w->log(msg, w->o.arg);
}

const struct delayq_job *delayq_task_job(const struct delayq_task *t) { return &t->job; }

int delayq_task_slot(const struct delayq_task *t) { return t->index; }

int delayq_task_cancelled(const struct delayq_task *t) {
    return atomic_load(&t->cancelled);
}

void delayq_task_retry_in(struct delayq_task *t, int64_t delay_ms) {
    t->retry_delay = delay_ms < 0 ? -1 : delay_ms;
}

static void free_strings(char **v, size_t n) {
    if (!v) return;
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* Frees a worker's memory (not its locks). Accepts NULL. */
static void free_memory(struct delayq_worker *w) {
    if (!w) return;
    free_strings(w->topics, w->ntopics);
    free(w->slots);
    free(w->done);
    free(w->ack_slots);
    free(w->ack_ids);
    free(w->ack_sent);
    free(w->host);
    free(w->password);
    free(w);
}

delayq_worker *delayq_worker_new(const struct delayq_options *conn,
                                 const struct delayq_worker_opts *opts,
                                 const char **errstr) {
    const char *why = NULL;
    if (!opts->handler) why = "a handler is required";
    else if (opts->ntopics == 0 || !opts->topics) why = "at least one topic is required";
    else if (opts->concurrency < 0 || opts->concurrency > 10000)
        why = "concurrency must be from 1 to 10000";
    else if (opts->heartbeat < 0 || opts->heartbeat >= 1)
        why = "heartbeat must be a fraction of the lease, below 1";
    else if (opts->timeout_ms < 0) why = "timeout must not be negative";
    for (size_t i = 0; !why && i < opts->ntopics; i++)
        if (!opts->topics[i] || !*opts->topics[i]) why = "a topic is empty";
    if (why) {
        if (errstr) *errstr = why;
        return NULL;
    }
    struct delayq_worker *w = calloc(1, sizeof *w);
    if (!w) goto oom;
    w->conn = conn ? *conn : (struct delayq_options){0};
    w->host = w->conn.host ? strdup(w->conn.host) : NULL;
    w->password = w->conn.password ? strdup(w->conn.password) : NULL;
    w->conn.host = w->host;
    w->conn.password = w->password;
    w->topics = calloc(opts->ntopics, sizeof *w->topics);
    w->ntopics = opts->ntopics;
    w->n = opts->concurrency ? opts->concurrency : 1;
    w->slots = calloc((size_t)w->n, sizeof *w->slots);
    w->done = calloc((size_t)w->n, sizeof *w->done);
    w->ack_slots = calloc((size_t)w->n, sizeof *w->ack_slots);
    w->ack_ids = calloc((size_t)w->n, sizeof *w->ack_ids);
    w->ack_sent = calloc((size_t)w->n, sizeof *w->ack_sent);
    if (!w->done || !w->ack_slots || !w->ack_ids || !w->ack_sent ||(conn && conn->host && !w->host) || (conn && conn->password && !w->password) ||
        !w->topics || !w->slots)
        goto oom;
    for (size_t i = 0; i < opts->ntopics; i++)
        if (!(w->topics[i] = strdup(opts->topics[i]))) goto oom;
    w->timeout_ms = opts->timeout_ms;
    w->grace_ms = opts->grace_ms ? opts->grace_ms : DEFAULT_GRACE_MS;
    w->poll_ms = opts->poll_ms > 0 ? opts->poll_ms : DEFAULT_POLL_MS;
    w->heartbeat = opts->heartbeat > 0 ? opts->heartbeat : DEFAULT_HEARTBEAT;
    w->o = *opts;
    w->log = default_log;
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv_main, &ca);
    pthread_cond_init(&w->cv_hb, &ca);
    for (int i = 0; i < w->n; i++) {
        w->slots[i].w = w;
        w->slots[i].index = i;
        pthread_cond_init(&w->slots[i].cv, &ca);
    }
    pthread_condattr_destroy(&ca);
    return w;
oom:
    free_memory(w);
    if (errstr) *errstr = "out of memory";
    return NULL;
}

void delayq_worker_set_log(delayq_worker *w, void (*log)(const char *msg, void *arg)) {
    w->log = log ? log : default_log;
}

void delayq_worker_stop(delayq_worker *w) {
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    pthread_cond_broadcast(&w->cv_main);
    pthread_mutex_unlock(&w->mu);
}

void delayq_worker_free(delayq_worker *w) {
    if (!w) return;
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv_main);
    pthread_cond_destroy(&w->cv_hb);
    for (int i = 0; i < w->n; i++) pthread_cond_destroy(&w->slots[i].cv);
    free_memory(w);
}

/* ---- answering the server --------------------------------------------- */

/* Errors after which an ACK or NACK is worth sending once more. */
static bool retryable(int err) {
    return err == DELAYQ_E_IO || err == DELAYQ_E_TIMEOUT || err == DELAYQ_E_UNAVAILABLE;
}

/* NACK, tried a second time after an I/O error, TIMEOUT or UNAVAILABLE
 * (safe: a repeated NACK gets NOTRESERVED). Returns 0 or the error code. */
static int nack(struct delayq_worker *w, delayq *dq, const struct delayq_job *j,
                int64_t delay, enum delayq_state *state) {
    for (int attempt = 0; attempt < 2; attempt++) {
        if (delayq_nack(dq, j->topic, j->id, delay, state) == DELAYQ_OK) return 0;
        int err = delayq_err(dq);
        if (!retryable(err)) return err;
        wlog(w, "NACK", dq);
    }
    return delayq_err(dq);
}

static void free_job(struct delayq_job *j) {
    free(j->topic);
    free(j->id);
    free(j->body);
    memset(j, 0, sizeof *j);
}

/* ---- the acker ------------------------------------------------------------ */

/* ACKs the finished jobs of slots done[0..n), one ACK per topic, calls the
 * hooks and frees the slots. The slots are FINISHING: nobody else touches
 * their jobs. */
static void ack_batch(struct delayq_worker *w, delayq *dq, const int *done, int n) {
    const char **ids = w->ack_ids;
    bool *sent = w->ack_sent;
    memset(sent, 0, (size_t)n * sizeof *sent);
    for (int i = 0; i < n; i++) {
        if (sent[i]) continue;
        const char *topic = w->slots[done[i]].job.topic;
        int k = 0;
        for (int m = i; m < n; m++)
            if (!sent[m] && strcmp(w->slots[done[m]].job.topic, topic) == 0)
                ids[k++] = w->slots[done[m]].job.id;
        int err = 0; /* ACK is idempotent: tried once more after a retryable error */
        for (int attempt = 0; attempt < 2; attempt++) {
            if (dq && delayq_ack(dq, topic, ids, (size_t)k, NULL) == DELAYQ_OK) {
                err = 0;
                break;
            }
            err = dq ? delayq_err(dq) : DELAYQ_E_NOMEM;
            if (!retryable(err)) break;
            wlog(w, "ACK", dq);
        }
        for (int m = i; m < n; m++) {
            struct delayq_task *t = &w->slots[done[m]];
            if (sent[m] || strcmp(t->job.topic, topic) != 0) continue;
            sent[m] = true;
            if (!err && w->o.on_success) w->o.on_success(&t->job, w->o.arg);
            else if (err && w->o.on_retry) w->o.on_retry(&t->job, err, w->o.arg);
        }
    }
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < n; i++) {
        free_job(&w->slots[done[i]].job);
        w->slots[done[i]].state = S_FREE;
    }
    w->nfree += n;
    pthread_cond_broadcast(&w->cv_main);
    pthread_mutex_unlock(&w->mu);
}

static void *handler_main(void *arg) {
    struct delayq_task *t = arg;
    struct delayq_worker *w = t->w;
    delayq *dq = delayq_connect(&w->conn);
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (t->state != S_QUEUED && !w->exiting) pthread_cond_wait(&t->cv, &w->mu);
        if (t->state != S_QUEUED) break;
        t->state = S_RUNNING;
        t->started = mono_ms(); /* the timeout counts from here */
        if (w->timeout_ms > 0) pthread_cond_signal(&w->cv_hb); /* to time it */
        pthread_mutex_unlock(&w->mu);

        enum delayq_result res = w->o.handler(t, w->o.arg);

        pthread_mutex_lock(&w->mu);
        bool abandoned = t->state == S_ABANDONED;
        bool timed_out = t->timed_out;
        if (!abandoned) t->state = S_FINISHING;
        if (!abandoned && res == DELAYQ_DONE && !timed_out) {
            w->done[w->ndone++] = t->index; /* the acker frees the slot */
            if (!w->acking) {
                w->acking = true;
                while (w->ndone > 0) {
                    int n = w->ndone;
                    memcpy(w->ack_slots, w->done, (size_t)n * sizeof *w->done);
                    w->ndone = 0;
                    pthread_mutex_unlock(&w->mu);
                    ack_batch(w, dq, w->ack_slots, n);
                    pthread_mutex_lock(&w->mu);
                }
                w->acking = false;
            }
            continue;
        }
        pthread_mutex_unlock(&w->mu);

        if (!abandoned && dq) { /* a failure or a timeout: NACK */
            enum delayq_state st = DELAYQ_UNKNOWN;
            int err = nack(w, dq, &t->job, timed_out ? -1 : t->retry_delay, &st);
            if (st == DELAYQ_DEAD) {
                if (w->o.on_dead) w->o.on_dead(&t->job, err, w->o.arg);
            } else if (w->o.on_retry) {
                w->o.on_retry(&t->job, err, w->o.arg);
            }
        }
        pthread_mutex_lock(&w->mu);
        free_job(&t->job);
        t->state = S_FREE;
        w->nfree++;
        pthread_cond_broadcast(&w->cv_main);
    }
    pthread_mutex_unlock(&w->mu);
    delayq_free(dq);
    return NULL;
}

/* ---- the heartbeat ------------------------------------------------------ */

struct touch {
    int slot;
    unsigned gen;
    char *topic, *id;
};

/* The next TOUCH of a job whose lease ends at the wall time `deadline`. */
static int64_t next_touch(const struct delayq_worker *w, int64_t deadline) {
    int64_t lease = deadline - wall_ms();
    int64_t every = (int64_t)((double)lease * w->heartbeat);
    return mono_ms() + (every < MIN_TOUCH_MS ? MIN_TOUCH_MS : every);
}

static void *heartbeat_main(void *arg) {
    struct delayq_worker *w = arg;
    delayq *dq = delayq_connect(&w->conn);
    struct touch *todo = calloc((size_t)w->n, sizeof *todo);
    pthread_mutex_lock(&w->mu);
    while (!w->exiting) {
        int64_t now = mono_ms(), wake = now + 1000;
        int ntodo = 0;
        for (int i = 0; i < w->n; i++) {
            struct delayq_task *t = &w->slots[i];
            if ((t->state != S_RUNNING && t->state != S_QUEUED) || t->timed_out) continue;
            bool timed = w->timeout_ms > 0 && t->state == S_RUNNING;
            if (timed && now >= t->started + w->timeout_ms) {
                t->timed_out = true; /* no more TOUCH: the lease runs out */
                atomic_store(&t->cancelled, 1);
                if (w->o.on_cancel) w->o.on_cancel(t, w->o.arg);
                continue;
            }
            if (now >= t->next_touch && todo && dq) {
                char *topic = strdup(t->job.topic), *id = strdup(t->job.id);
                if (topic && id) {
                    todo[ntodo++] = (struct touch){i, t->gen, topic, id};
                } else {
                    free(topic);
                    free(id);
                }
                t->next_touch = now + MIN_TOUCH_MS * 10; /* until the reply says */
            }
            if (t->next_touch < wake) wake = t->next_touch;
            if (timed && t->started + w->timeout_ms < wake)
                wake = t->started + w->timeout_ms;
        }
        if (ntodo == 0) {
            wait_until(&w->cv_hb, &w->mu, wake);
            continue;
        }
        pthread_mutex_unlock(&w->mu);
        for (int k = 0; k < ntodo; k++) {
            int64_t deadline = 0;
            int rc = delayq_touch(dq, todo[k].topic, todo[k].id, -1, &deadline);
            if (rc != DELAYQ_OK && delayq_err(dq) != DELAYQ_E_NOTRESERVED)
                wlog(w, "TOUCH", dq);
            pthread_mutex_lock(&w->mu);
            struct delayq_task *t = &w->slots[todo[k].slot];
            if (rc == DELAYQ_OK && t->gen == todo[k].gen &&
                (t->state == S_RUNNING || t->state == S_QUEUED))
                t->next_touch = next_touch(w, deadline);
            pthread_mutex_unlock(&w->mu);
            free(todo[k].topic);
            free(todo[k].id);
        }
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    free(todo);
    delayq_free(dq);
    return NULL;
}

/* ---- the dispatcher ------------------------------------------------------ */

/* Hands jobs back at once (NACK DELAY 0), with no hook. */
static void hand_back(struct delayq_worker *w, delayq *dq, struct delayq_job *jobs,
                      size_t n) {
    for (size_t i = 0; i < n; i++)
        if (nack(w, dq, &jobs[i], 0, NULL) && delayq_err(dq) != DELAYQ_E_NOTRESERVED)
            wlog(w, "handing a job back", dq);
}

/* The stop: wait for running handlers up to the grace period, then hand the
 * rest back and wait for their handlers to return. Called with mu held. */
static void stop_phase(struct delayq_worker *w, delayq *dq) {
    int64_t until = mono_ms() + (w->grace_ms > 0 ? w->grace_ms : 0);
    while (w->nfree < w->n && mono_ms() < until) wait_until(&w->cv_main, &w->mu, until);
    struct delayq_job *back = calloc((size_t)w->n, sizeof *back);
    size_t nback = 0;
    for (int i = 0; i < w->n; i++) {
        struct delayq_task *t = &w->slots[i];
        if (t->state != S_RUNNING && t->state != S_QUEUED) continue;
        bool started = t->state == S_RUNNING;
        if (started) {
            t->state = S_ABANDONED;
            atomic_store(&t->cancelled, 1);
            if (w->o.on_cancel) w->o.on_cancel(t, w->o.arg);
        }
        if (back) {
            back[nback].topic = strdup(t->job.topic);
            back[nback].id = strdup(t->job.id);
            if (back[nback].topic && back[nback].id) nback++;
        }
        if (!started) { /* never started: the slot is free again */
            free_job(&t->job);
            t->state = S_FREE;
            w->nfree++;
        }
    }
    pthread_mutex_unlock(&w->mu);
    if (dq) hand_back(w, dq, back, nback);
    delayq_jobs_free(back, nback);
    pthread_mutex_lock(&w->mu);
    while (w->nfree < w->n) pthread_cond_wait(&w->cv_main, &w->mu);
}

int delayq_worker_run(delayq_worker *w) {
    pthread_mutex_lock(&w->mu);
    if (w->running) {
        pthread_mutex_unlock(&w->mu);
        return DELAYQ_ERR;
    }
    w->running = true;
    w->exiting = false;
    w->nfree = w->n;
    pthread_mutex_unlock(&w->mu);

    for (int i = 0; i < w->n; i++) pthread_create(&w->slots[i].thread, NULL, handler_main, &w->slots[i]);
    pthread_create(&w->hb_thread, NULL, heartbeat_main, w);
    delayq *dq = delayq_connect(&w->conn);
    int64_t pause = 0;

    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->nfree == 0 && !w->stopping) pthread_cond_wait(&w->cv_main, &w->mu);
        if (w->stopping || !dq) break;
        int64_t want = w->nfree;
        pthread_mutex_unlock(&w->mu);

        struct delayq_job *jobs = NULL;
        size_t n = 0;
        int rc = delayq_reserve(dq, (const char *const *)w->topics, w->ntopics, w->poll_ms,
                                want, &jobs, &n);
        pthread_mutex_lock(&w->mu);
        if (rc != DELAYQ_OK) {
            pthread_mutex_unlock(&w->mu);
            wlog(w, "RESERVE", dq);
            pthread_mutex_lock(&w->mu);
            pause = pause ? (pause * 2 > MAX_PAUSE_MS ? MAX_PAUSE_MS : pause * 2) : 100;
            int64_t until = mono_ms() + pause;
            while (!w->stopping && mono_ms() < until) wait_until(&w->cv_main, &w->mu, until);
            continue;
        }
        pause = 0;
        if (w->stopping) {
            pthread_mutex_unlock(&w->mu);
            hand_back(w, dq, jobs, n);
            delayq_jobs_free(jobs, n);
            pthread_mutex_lock(&w->mu);
            break;
        }
        for (size_t i = 0, s = 0; i < n; i++) {
            while (w->slots[s].state != S_FREE) s++; /* n <= nfree */
            struct delayq_task *t = &w->slots[s];
            t->job = jobs[i];
            t->gen++;
            t->next_touch = next_touch(w, jobs[i].deadline);
            t->retry_delay = -1;
            t->timed_out = false;
            atomic_store(&t->cancelled, 0);
            t->state = S_QUEUED;
            w->nfree--;
        }
        free(jobs); /* the strings now belong to the slots */
        for (int s = 0; n && s < w->n; s++)
            if (w->slots[s].state == S_QUEUED) pthread_cond_signal(&w->slots[s].cv);
        if (n) pthread_cond_signal(&w->cv_hb);
    }
    stop_phase(w, dq);
    w->exiting = true;
    for (int i = 0; i < w->n; i++) pthread_cond_signal(&w->slots[i].cv);
    pthread_cond_broadcast(&w->cv_hb);
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < w->n; i++) pthread_join(w->slots[i].thread, NULL);
    pthread_join(w->hb_thread, NULL);
    delayq_free(dq);
    pthread_mutex_lock(&w->mu);
    w->running = false;
    w->stopping = false;
    pthread_mutex_unlock(&w->mu);
    return DELAYQ_OK;
}
