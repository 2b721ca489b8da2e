/* test_client.c -- libdelayq (include/delayq.h) against a real delayqd:
 * typed results, error codes, timeouts, AUTH, reconnection, and the worker
 * (slots, heartbeat, timeout, hooks, graceful stop).
 *
 * Each group starts build/asan/delayqd (or $DELAYQD) on a free port in a
 * temporary directory. Waits are on conditions with deadlines.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "delayq.h"

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap(void) { usleep(5000); }

/* ---- a real server ------------------------------------------------------ */

struct server {
    pid_t pid;
    int port;
    char dir[64];
    const char *password;
};

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(fd, (struct sockaddr *)&a, sizeof a);
    socklen_t n = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &n);
    close(fd);
    return ntohs(a.sin_port);
}

static void server_start(struct server *s) {
    const char *bin = getenv("DELAYQD") ? getenv("DELAYQD") : "build/asan/delayqd";
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        const char *argv[16] = {bin, "--bind", "127.0.0.1", "--port", port, "--data-dir",
                                s->dir, "--log-level", "warn", "--http-port", "0"};
        int n = 11;
        if (s->password) argv[n++] = "--requirepass", argv[n++] = s->password;
        execv(bin, (char **)argv);
        _exit(127);
    }
    struct delayq_options o = {.port = s->port, .password = s->password,
                               .connect_timeout_ms = 200};
    int64_t until = mono_ms() + 20000;
    for (;;) {
        delayq *dq = delayq_connect(&o);
        bool up = dq && delayq_ping(dq, NULL, NULL) == DELAYQ_OK;
        delayq_free(dq);
        if (up) return;
        assert_true(mono_ms() < until);
        assert_int_equal(waitpid(s->pid, NULL, WNOHANG), 0);
        usleep(20000);
    }
}

static void server_stop(struct server *s) {
    kill(s->pid, SIGTERM);
    int st;
    waitpid(s->pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static struct server *server_new(const char *password) {
    struct server *s = calloc(1, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "/tmp/dq-client-XXXXXX");
    assert_non_null(mkdtemp(s->dir));
    s->port = free_port();
    s->password = password;
    server_start(s);
    return s;
}

static int group_setup(void **state) {
    signal(SIGPIPE, SIG_IGN);
    *state = server_new(NULL);
    return 0;
}

static int group_teardown(void **state) {
    struct server *s = *state;
    server_stop(s);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s->dir);
    if (system(cmd) != 0) return -1;
    free(s);
    return 0;
}

static delayq *connect_to(const struct server *s) {
    struct delayq_options o = {.port = s->port};
    delayq *dq = delayq_connect(&o);
    assert_non_null(dq);
    assert_int_equal(delayq_err(dq), 0);
    return dq;
}

/* ---- commands ------------------------------------------------------------ */

static void test_add_get_typed(void **state) {
    delayq *dq = connect_to(*state);
    delayq_purge(dq, "t-add", NULL);
    struct delayq_add_opts o = DELAYQ_ADD_OPTS_INIT;
    o.delay_ms = 60000;
    o.ttr_ms = 1500;
    o.retries = 0;
    o.backoff = DELAYQ_BACKOFF_FIXED;
    o.backoff_base_ms = 10;
    char *id = NULL;
    assert_int_equal(delayq_add(dq, "t-add", "a", "x\0y", 3, &o, &id), DELAYQ_OK);
    assert_string_equal(id, "a");
    free(id);
    struct delayq_job *j;
    assert_int_equal(delayq_get(dq, "t-add", "a", &j), DELAYQ_OK);
    assert_non_null(j);
    assert_string_equal(j->topic, "t-add");
    assert_int_equal(j->state, DELAYQ_DELAYED);
    assert_int_equal(j->body_len, 3);
    assert_memory_equal(j->body, "x\0y", 3);
    assert_int_equal(j->ttr, 1500);
    assert_int_equal(j->retries, 0);
    assert_int_equal(j->attempts, 0);
    assert_true(j->due >= j->created + 60000 - 5);
    assert_int_equal(j->deadline, 0);
    delayq_job_free(j);

    /* the id is taken: EXISTS, and the connection carries on */
    assert_int_equal(delayq_add(dq, "t-add", "a", "z", 1, NULL, NULL), DELAYQ_ERR);
    assert_int_equal(delayq_err(dq), DELAYQ_E_EXISTS);
    assert_true(strncmp(delayq_errstr(dq), "EXISTS", 6) == 0);
    assert_string_equal(delayq_error_name(delayq_err(dq)), "EXISTS");
    o = (struct delayq_add_opts)DELAYQ_ADD_OPTS_INIT;
    o.replace = 1;
    assert_int_equal(delayq_add(dq, "t-add", "a", "z", 1, &o, NULL), DELAYQ_OK);
    assert_int_equal(delayq_err(dq), 0);
    assert_string_equal(delayq_errstr(dq), "");

    /* server ids, a missing job, a bad value named by the server */
    assert_int_equal(delayq_add(dq, "t-add", "*", "", 0, NULL, &id), DELAYQ_OK);
    assert_true(strlen(id) > 0 && strcmp(id, "*") != 0);
    free(id);
    assert_int_equal(delayq_get(dq, "t-add", "nope", &j), DELAYQ_OK);
    assert_null(j);
    o = (struct delayq_add_opts)DELAYQ_ADD_OPTS_INIT;
    o.ttr_ms = 0;
    assert_int_equal(delayq_add(dq, "t-add", "b", "", 0, &o, NULL), DELAYQ_ERR);
    assert_int_equal(delayq_err(dq), DELAYQ_E_SERVER);
    assert_non_null(strcasestr(delayq_errstr(dq), "TTR"));
    o = (struct delayq_add_opts)DELAYQ_ADD_OPTS_INIT;
    o.delay_ms = 1;
    o.at_ms = 1;
    assert_int_equal(delayq_add(dq, "t-add", "b", "", 0, &o, NULL), DELAYQ_ERR);
    assert_int_equal(delayq_err(dq), DELAYQ_E_ARG);
    delayq_free(dq);
}

static void test_reserve_touch_nack_ack(void **state) {
    delayq *dq = connect_to(*state);
    delayq_purge(dq, "t-res", NULL);
    struct delayq_add_opts o = DELAYQ_ADD_OPTS_INIT;
    o.retries = 1;
    for (int i = 0; i < 3; i++) {
        char id[16];
        snprintf(id, sizeof id, "j%d", i);
        assert_int_equal(delayq_add(dq, "t-res", id, id, 2, &o, NULL), DELAYQ_OK);
    }
    const char *topics[] = {"t-other", "t-res"};
    struct delayq_job *jobs;
    size_t n;
    assert_int_equal(delayq_reserve(dq, topics, 2, 0, 2, &jobs, &n), DELAYQ_OK);
    assert_int_equal(n, 2);
    assert_string_equal(jobs[0].id, "j0");
    assert_string_equal(jobs[1].id, "j1");
    assert_string_equal(jobs[1].body, "j1");
    assert_int_equal(jobs[0].attempts, 1);
    assert_true(jobs[0].deadline > 0);
    int64_t deadline;
    assert_int_equal(delayq_touch(dq, "t-res", "j0", 120000, &deadline), DELAYQ_OK);
    assert_true(deadline >= jobs[0].deadline + 60000);
    enum delayq_state st;
    assert_int_equal(delayq_nack(dq, "t-res", "j0", 0, &st), DELAYQ_OK);
    assert_int_equal(st, DELAYQ_READY);
    const char *ids[] = {"j1", "ghost"};
    int64_t count;
    assert_int_equal(delayq_ack(dq, "t-res", ids, 2, &count), DELAYQ_OK);
    assert_int_equal(count, 1);
    delayq_jobs_free(jobs, n);

    /* NACK of a job not reserved: NOTRESERVED */
    assert_int_equal(delayq_nack(dq, "t-res", "j2", -1, &st), DELAYQ_ERR);
    assert_int_equal(delayq_err(dq), DELAYQ_E_NOTRESERVED);
    assert_int_equal(delayq_touch(dq, "t-res", "j2", -1, NULL), DELAYQ_ERR);
    assert_int_equal(delayq_err(dq), DELAYQ_E_NOTRESERVED);

    /* j0 again (attempt 2 of 2; j2, due earlier, deleted first): a NACK
     * buries it; KICK brings it back */
    assert_int_equal(delayq_del(dq, "t-res", (const char *[]){"j2"}, 1, &count), DELAYQ_OK);
    assert_int_equal(count, 1);
    assert_int_equal(delayq_reserve(dq, topics + 1, 1, 0, 1, &jobs, &n), DELAYQ_OK);
    assert_int_equal(n, 1);
    assert_string_equal(jobs[0].id, "j0");
    assert_int_equal(jobs[0].attempts, 2);
    assert_int_equal(delayq_nack(dq, "t-res", "j0", -1, &st), DELAYQ_OK);
    assert_int_equal(st, DELAYQ_DEAD);
    delayq_jobs_free(jobs, n);
    int64_t kicked;
    assert_int_equal(delayq_kick(dq, "t-res", -1, &kicked), DELAYQ_OK);
    assert_int_equal(kicked, 1);

    /* nothing ready in time: OK with no jobs, after about the timeout */
    assert_int_equal(delayq_reserve(dq, (const char *[]){"t-empty"}, 1, 0, 1, &jobs, &n),
                     DELAYQ_OK);
    assert_int_equal(n, 0);
    assert_null(jobs);
    int64_t t0 = mono_ms();
    assert_int_equal(delayq_reserve(dq, (const char *[]){"t-empty"}, 1, 100, 1, &jobs, &n),
                     DELAYQ_OK);
    assert_int_equal(n, 0);
    assert_true(mono_ms() - t0 >= 95);
    delayq_free(dq);
}

static void test_list_topics_stats_del_purge(void **state) {
    delayq *dq = connect_to(*state);
    delayq_purge(dq, "t-list", NULL);
    for (int i = 0; i < 25; i++) {
        char id[16];
        snprintf(id, sizeof id, "i%02d", i);
        assert_int_equal(delayq_add(dq, "t-list", id, "", 0, NULL, NULL), DELAYQ_OK);
    }
    int seen = 0;
    char *cursor = NULL;
    do {
        char **ids, *next;
        size_t n;
        assert_int_equal(delayq_list(dq, "t-list", "ready", 10, cursor, &ids, &n, &next),
                         DELAYQ_OK);
        seen += (int)n;
        delayq_strings_free(ids, n);
        free(cursor);
        cursor = next;
    } while (strcmp(cursor, "0") != 0);
    free(cursor);
    assert_int_equal(seen, 25);

    char **topics;
    size_t nt;
    assert_int_equal(delayq_topics(dq, &topics, &nt), DELAYQ_OK);
    bool found = false;
    for (size_t i = 0; i < nt; i++) found |= strcmp(topics[i], "t-list") == 0;
    assert_true(found);
    delayq_strings_free(topics, nt);

    struct delayq_stats st;
    assert_int_equal(delayq_stats(dq, "t-list", &st), DELAYQ_OK);
    assert_int_equal(st.jobs_ready, 25);
    assert_true(st.added >= 25);
    const char *ids[] = {"i00", "i01", "zz"};
    int64_t n;
    assert_int_equal(delayq_del(dq, "t-list", ids, 3, &n), DELAYQ_OK);
    assert_int_equal(n, 2);
    assert_int_equal(delayq_purge(dq, "t-list", &n), DELAYQ_OK);
    assert_int_equal(n, 23);
    assert_int_equal(delayq_stats(dq, "t-list", &st), DELAYQ_OK);
    assert_int_equal(st.jobs_ready, 0);

    char *text;
    size_t len;
    assert_int_equal(delayq_info(dq, NULL, &text, &len), DELAYQ_OK);
    assert_true(len > 0 && strlen(text) == len);
    free(text);
    char *pong;
    assert_int_equal(delayq_ping(dq, "hi", &pong), DELAYQ_OK);
    assert_string_equal(pong, "hi");
    free(pong);
    delayq_free(dq);
}

/* ---- connections ------------------------------------------------------------ */

static void test_connect_refused_and_read_timeout(void **state) {
    (void)state;
    struct delayq_options o = {.port = free_port(), .no_reconnect = 1};
    delayq *dq = delayq_connect(&o);
    assert_int_equal(delayq_err(dq), DELAYQ_E_IO);
    assert_non_null(strstr(delayq_errstr(dq), "refused"));
    delayq_free(dq);

    /* a listener that never answers: the read timeout ends the call */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 4), 0);
    socklen_t n = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &n);
    o = (struct delayq_options){.port = ntohs(a.sin_port), .read_timeout_ms = 150};
    dq = delayq_connect(&o);
    assert_int_equal(delayq_err(dq), 0);
    int64_t t0 = mono_ms();
    assert_int_equal(delayq_ping(dq, NULL, NULL), DELAYQ_ERR);
    assert_int_equal(delayq_err(dq), DELAYQ_E_TIMEOUT);
    assert_true(mono_ms() - t0 >= 140);
    delayq_free(dq);
    close(fd);
}

static void test_auth(void **state) {
    (void)state;
    struct server *s = server_new("s3cret");
    struct delayq_options o = {.port = s->port};
    delayq *dq = delayq_connect(&o);
    assert_int_equal(delayq_err(dq), 0);
    assert_int_equal(delayq_stats(dq, NULL, &(struct delayq_stats){0}), DELAYQ_ERR);
    assert_int_equal(delayq_err(dq), DELAYQ_E_NOAUTH);
    delayq_free(dq);
    o.password = "wrong";
    dq = delayq_connect(&o);
    assert_int_equal(delayq_err(dq), DELAYQ_E_WRONGPASS);
    assert_non_null(strstr(delayq_errstr(dq), "AUTH failed"));
    delayq_free(dq);
    o.password = "s3cret";
    dq = delayq_connect(&o);
    assert_int_equal(delayq_err(dq), 0);
    assert_int_equal(delayq_ping(dq, NULL, NULL), DELAYQ_OK);

    /* the server restarts: the call that saw the loss fails, the next one
     * reconnects and authenticates again */
    server_stop(s);
    server_start(s);
    assert_int_equal(delayq_ping(dq, NULL, NULL), DELAYQ_ERR);
    assert_int_equal(delayq_err(dq), DELAYQ_E_IO);
    assert_int_equal(delayq_add(dq, "t", "after", "", 0, NULL, NULL), DELAYQ_OK);
    delayq_free(dq);
    group_teardown((void **)&s);
}

/* ---- the worker ------------------------------------------------------------- */

struct wt {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running, max_running, handled, success, retry, dead, cancels;
    bool gate;          /* handlers wait for this */
    bool until_cancel;  /* handlers wait for their cancel flag instead */
    int64_t hold_ms;    /* handlers take this long */
    delayq_worker *w;
};

static enum delayq_result wt_handler(struct delayq_task *t, void *arg) {
    struct wt *x = arg;
    const struct delayq_job *j = delayq_task_job(t);
    pthread_mutex_lock(&x->mu);
    x->running++;
    if (x->running > x->max_running) x->max_running = x->running;
    pthread_cond_broadcast(&x->cv);
    int64_t until = mono_ms() + x->hold_ms;
    while ((x->gate && !delayq_task_cancelled(t)) ||
           (x->until_cancel && !delayq_task_cancelled(t)) || mono_ms() < until) {
        pthread_mutex_unlock(&x->mu);
        nap();
        pthread_mutex_lock(&x->mu);
    }
    x->running--;
    x->handled++;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    return strncmp(j->body, "fail", 4) == 0 ? DELAYQ_RETRY : DELAYQ_DONE;
}

static void wt_count(struct wt *x, int *field) {
    pthread_mutex_lock(&x->mu);
    (*field)++;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
}
static void wt_success(const struct delayq_job *j, void *arg) {
    struct wt *x = arg;
    wt_count(x, &x->success);
}
static void wt_retry(const struct delayq_job *j, int err, void *arg) {
    struct wt *x = arg;
    wt_count(x, &x->retry);
}
static void wt_dead(const struct delayq_job *j, int err, void *arg) {
    struct wt *x = arg;
    wt_count(x, &x->dead);
}
static void wt_cancel(struct delayq_task *t, void *arg) {
    struct wt *x = arg;
    x->cancels++; /* called with the worker's lock held, not ours */
}

/* Waits (up to 20 s) until *field reaches want. */
static void wt_wait(struct wt *x, const int *field, int want) {
    int64_t until = mono_ms() + 20000;
    pthread_mutex_lock(&x->mu);
    while (*field < want && mono_ms() < until) {
        pthread_mutex_unlock(&x->mu);
        nap();
        pthread_mutex_lock(&x->mu);
    }
    int got = *field;
    pthread_mutex_unlock(&x->mu);
    assert_int_equal(got, want);
}

static void *wt_run(void *w) {
    delayq_worker_run(w);
    return NULL;
}

static void wt_start(struct wt *x, const struct server *s, const char *topic, int conc,
                     int64_t timeout_ms, int64_t grace_ms, pthread_t *th) {
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    struct delayq_options conn = {.port = s->port};
    const char *topics[] = {topic};
    struct delayq_worker_opts o = {
        .topics = topics, .ntopics = 1, .concurrency = conc, .timeout_ms = timeout_ms,
        .grace_ms = grace_ms, .poll_ms = 100, .handler = wt_handler,
        .on_success = wt_success, .on_retry = wt_retry, .on_dead = wt_dead,
        .on_cancel = wt_cancel, .arg = x,
    };
    const char *why = NULL;
    x->w = delayq_worker_new(&conn, &o, &why);
    assert_non_null(x->w);
    pthread_create(th, NULL, wt_run, x->w);
}

static void wt_finish(struct wt *x, pthread_t th) {
    delayq_worker_stop(x->w);
    pthread_join(th, NULL);
    delayq_worker_free(x->w);
}

static void test_worker_slots_and_hooks(void **state) {
    struct server *s = *state;
    delayq *dq = connect_to(s);
    struct delayq_add_opts o = DELAYQ_ADD_OPTS_INIT;
    o.retries = 0;
    for (int i = 0; i < 10; i++) {
        char id[16];
        snprintf(id, sizeof id, "w%d", i);
        const char *body = i < 2 ? "fail" : "ok";
        assert_int_equal(delayq_add(dq, "t-w", id, body, strlen(body), &o, NULL), DELAYQ_OK);
    }
    struct wt x = {.gate = true};
    pthread_t th;
    wt_start(&x, s, "t-w", 3, 0, 30000, &th);
    wt_wait(&x, &x.running, 3);
    /* three slots busy: three reserved, the rest untouched */
    struct delayq_stats st;
    assert_int_equal(delayq_stats(dq, "t-w", &st), DELAYQ_OK);
    assert_int_equal(st.jobs_reserved, 3);
    assert_int_equal(st.jobs_ready, 7);
    pthread_mutex_lock(&x.mu);
    x.gate = false;
    pthread_mutex_unlock(&x.mu);
    wt_wait(&x, &x.success, 8);
    wt_wait(&x, &x.dead, 2);
    assert_int_equal(x.retry, 0);
    assert_int_equal(x.max_running, 3);
    wt_finish(&x, th);
    assert_int_equal(delayq_stats(dq, "t-w", &st), DELAYQ_OK);
    assert_int_equal(st.acked, 8);
    assert_int_equal(st.jobs_dead, 2);
    delayq_free(dq);
}

static void test_worker_heartbeat_keeps_the_lease(void **state) {
    struct server *s = *state;
    delayq *dq = connect_to(s);
    struct delayq_add_opts o = DELAYQ_ADD_OPTS_INIT;
    o.ttr_ms = 2000; /* TOUCHed every ~0.67 s: 1.3 s of slack on a loaded machine */
    assert_int_equal(delayq_add(dq, "t-hb", "long", "ok", 2, &o, NULL), DELAYQ_OK);
    struct wt x = {.hold_ms = 4500};
    pthread_t th;
    wt_start(&x, s, "t-hb", 2, 0, 30000, &th);
    wt_wait(&x, &x.success, 1);
    wt_finish(&x, th);
    struct delayq_stats st;
    assert_int_equal(delayq_stats(dq, "t-hb", &st), DELAYQ_OK);
    assert_int_equal(st.reserved, 1);
    assert_int_equal(st.expired, 0);
    assert_int_equal(x.handled, 1);
    delayq_free(dq);
}

static void test_worker_timeout_retries(void **state) {
    struct server *s = *state;
    delayq *dq = connect_to(s);
    struct delayq_add_opts o = DELAYQ_ADD_OPTS_INIT;
    o.backoff = DELAYQ_BACKOFF_FIXED;
    o.backoff_base_ms = 3600000;
    assert_int_equal(delayq_add(dq, "t-to", "slow", "ok", 2, &o, NULL), DELAYQ_OK);
    struct wt x = {.until_cancel = true};
    pthread_t th;
    int64_t t0 = mono_ms();
    wt_start(&x, s, "t-to", 1, 200, 30000, &th);
    wt_wait(&x, &x.retry, 1); /* the handler said DONE, but too late */
    assert_true(mono_ms() - t0 >= 195);
    wt_finish(&x, th);
    assert_int_equal(x.success, 0);
    assert_int_equal(x.cancels, 1);
    struct delayq_job *j;
    assert_int_equal(delayq_get(dq, "t-to", "slow", &j), DELAYQ_OK);
    assert_int_equal(j->state, DELAYQ_DELAYED);
    assert_int_equal(j->attempts, 1);
    delayq_job_free(j);
    delayq_free(dq);
}

static void test_worker_stop_hands_back_after_the_grace(void **state) {
    struct server *s = *state;
    delayq *dq = connect_to(s);
    struct delayq_add_opts o = DELAYQ_ADD_OPTS_INIT;
    o.ttr_ms = 600000;
    assert_int_equal(delayq_add(dq, "t-stop", "a", "ok", 2, &o, NULL), DELAYQ_OK);
    assert_int_equal(delayq_add(dq, "t-stop", "b", "ok", 2, &o, NULL), DELAYQ_OK);
    assert_int_equal(delayq_add(dq, "t-stop", "c", "ok", 2, &o, NULL), DELAYQ_OK);
    struct wt x = {.gate = true};
    pthread_t th;
    wt_start(&x, s, "t-stop", 2, 0, 100, &th);
    wt_wait(&x, &x.running, 2);
    wt_finish(&x, th); /* returns once the handlers saw the cancel */
    assert_int_equal(x.success + x.retry + x.dead, 0); /* no hook for handed-back jobs */
    assert_int_equal(x.cancels, 2);
    struct delayq_stats st;
    assert_int_equal(delayq_stats(dq, "t-stop", &st), DELAYQ_OK);
    assert_int_equal(st.jobs_ready, 3); /* back at once, not after 10 minutes */
    assert_int_equal(st.reserved, 2);
    assert_int_equal(st.nacked, 2);
    delayq_free(dq);
}

static void test_worker_rejects_bad_options(void **state) {
    (void)state;
    const char *why = NULL;
    struct delayq_worker_opts o = {.ntopics = 0, .handler = wt_handler};
    assert_null(delayq_worker_new(NULL, &o, &why));
    assert_non_null(strstr(why, "topic"));
    const char *topics[] = {"t"};
    o = (struct delayq_worker_opts){.topics = topics, .ntopics = 1};
    assert_null(delayq_worker_new(NULL, &o, &why));
    assert_non_null(strstr(why, "handler"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_get_typed),
        cmocka_unit_test(test_reserve_touch_nack_ack),
        cmocka_unit_test(test_list_topics_stats_del_purge),
        cmocka_unit_test(test_connect_refused_and_read_timeout),
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_worker_slots_and_hooks),
        cmocka_unit_test(test_worker_heartbeat_keeps_the_lease),
        cmocka_unit_test(test_worker_timeout_retries),
        cmocka_unit_test(test_worker_stop_hands_back_after_the_grace),
        cmocka_unit_test(test_worker_rejects_bad_options),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
