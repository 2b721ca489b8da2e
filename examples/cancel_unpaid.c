/* cancel_unpaid.c -- the seeds' own use case with libdelayq: cancel an order
 * that is still unpaid 30 minutes after it was placed (docs/workers.md).
 *
 *   cc cancel_unpaid.c $(pkg-config --cflags --libs delayq) -o cancel_unpaid
 *   ./cancel_unpaid place o-1          # when the order is placed
 *   ./cancel_unpaid work               # the consumer, any number of them
 *
 * Options: -p PORT (default 7700), -d DELAY_MS for place (default 30 min),
 * -n MAX for work (stop after MAX orders; default: run until SIGTERM/SIGINT).
 * "Paid" is simulated by a file paid/ORDER in the current directory; a real
 * handler asks the order service, and cancels only if the order is still
 * unpaid -- the check makes the handler idempotent, since a job can be
 * delivered more than once.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <delayq.h>

#define TOPIC "orders.unpaid"

static int max_jobs, done_jobs;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static delayq_worker *worker;

static int order_is_paid(const char *order) {
    char path[512];
    snprintf(path, sizeof path, "paid/%s", order);
    return access(path, F_OK) == 0;
}

static enum delayq_result handle(struct delayq_task *t, void *arg) {
    const struct delayq_job *j = delayq_task_job(t);
    if (order_is_paid(j->id)) {
        printf("order %s: paid, nothing to do\n", j->id);
    } else {
        /* cancel it in the order service; a failure here would return
         * DELAYQ_RETRY and the job would come back after its backoff */
        printf("order %s: not paid, cancelled (attempt %lld)\n", j->id,
               (long long)j->attempts);
    }
    fflush(stdout);
    return DELAYQ_DONE;
}

static void on_success(const struct delayq_job *j, void *arg) {
    pthread_mutex_lock(&mu);
    if (max_jobs && ++done_jobs == max_jobs) delayq_worker_stop(worker);
    pthread_mutex_unlock(&mu);
}

static void on_dead(const struct delayq_job *j, int err, void *arg) {
    fprintf(stderr, "order %s: gave up, see `delayq list %s dead`\n", j->id, TOPIC);
}

static void *signals(void *set) {
    int sig;
    sigwait(set, &sig);
    delayq_worker_stop(worker);
    return NULL;
}

int main(int argc, char **argv) {
    struct delayq_options conn = {0};
    long long delay = 30 * 60 * 1000;
    int opt;
    while ((opt = getopt(argc, argv, "p:d:n:")) != -1) {
        if (opt == 'p') conn.port = atoi(optarg);
        else if (opt == 'd') delay = atoll(optarg);
        else if (opt == 'n') max_jobs = atoi(optarg);
        else return 2;
    }
    if (optind < argc && strcmp(argv[optind], "place") == 0 && optind + 1 < argc) {
        delayq *dq = delayq_connect(&conn);
        struct delayq_add_opts o = DELAYQ_ADD_OPTS_INIT;
        o.delay_ms = delay;
        o.retries = 5;
        /* the order id is the job id: placing an order twice adds one job */
        if (!dq || delayq_add(dq, TOPIC, argv[optind + 1], "", 0, &o, NULL) != DELAYQ_OK) {
            fprintf(stderr, "place: %s\n", dq ? delayq_errstr(dq) : "out of memory");
            delayq_free(dq);
            return 1;
        }
        delayq_free(dq);
        return 0;
    }
    if (optind < argc && strcmp(argv[optind], "work") == 0) {
        static sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
        const char *topics[] = {TOPIC};
        struct delayq_worker_opts o = {
            .topics = topics, .ntopics = 1, .concurrency = 4, .timeout_ms = 60000,
            .handler = handle, .on_success = on_success, .on_dead = on_dead,
        };
        const char *why;
        worker = delayq_worker_new(&conn, &o, &why);
        if (!worker) {
            fprintf(stderr, "work: %s\n", why);
            return 1;
        }
        pthread_t th;
        pthread_create(&th, NULL, signals, &set);
        pthread_detach(th);
        delayq_worker_run(worker); /* until stopped; then a graceful stop */
        delayq_worker_free(worker);
        return 0;
    }
    fprintf(stderr, "usage: cancel_unpaid [-p PORT] [-d DELAY_MS] place ORDER\n"
                    "       cancel_unpaid [-p PORT] [-n MAX] work\n");
    return 2;
}
