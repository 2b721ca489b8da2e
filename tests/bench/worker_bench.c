/* worker_bench.c -- libdelayq's worker with an empty handler, end to end:
 * the jobs/s a consumer built on the library can reach (docs/benchmarks.md).
 *
 * Waits for --jobs ready jobs in the topic (added beforehand, e.g. by
 * `delayq bench -m add -t T -n N`), then runs a worker with -c slots whose
 * handler does nothing, and stops it once N jobs were acked. Prints jobs/s
 * from the first reserve to the last ACK.
 *
 *   cc -O2 -Iinclude -o build/worker_bench tests/bench/worker_bench.c \
 *      build/lib/libdelayq.a -lhiredis -pthread
 *   build/worker_bench -p 7700 -t bench -n 200000 -c 16
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "delayq.h"

static long target, done;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static delayq_worker *w;
static double t_first;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static enum delayq_result handler(struct delayq_task *t, void *arg) {
    if (t_first == 0) { /* a benign race: any first job's time will do */
        pthread_mutex_lock(&mu);
        if (t_first == 0) t_first = now_s();
        pthread_mutex_unlock(&mu);
    }
    return DELAYQ_DONE;
}

static void on_success(const struct delayq_job *j, void *arg) {
    pthread_mutex_lock(&mu);
    if (++done == target) delayq_worker_stop(w);
    pthread_mutex_unlock(&mu);
}

int main(int argc, char **argv) {
    struct delayq_options conn = {0};
    const char *topic = "bench";
    int conc = 16, opt;
    target = 100000;
    while ((opt = getopt(argc, argv, "p:t:n:c:")) != -1) {
        if (opt == 'p') conn.port = atoi(optarg);
        else if (opt == 't') topic = optarg;
        else if (opt == 'n') target = atol(optarg);
        else if (opt == 'c') conc = atoi(optarg);
        else return 2;
    }
    const char *topics[] = {topic};
    struct delayq_worker_opts o = {.topics = topics, .ntopics = 1, .concurrency = conc,
                                   .handler = handler, .on_success = on_success};
    const char *why;
    w = delayq_worker_new(&conn, &o, &why);
    if (!w) {
        fprintf(stderr, "worker_bench: %s\n", why);
        return 1;
    }
    delayq_worker_run(w);
    double secs = now_s() - t_first;
    printf("c_worker concurrency=%d jobs=%ld seconds=%.3f jobs_per_s=%.0f\n", conc, done, secs,
           (double)done / secs);
    delayq_worker_free(w);
    return 0;
}
