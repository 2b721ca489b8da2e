/* bench.h -- `delayq bench`, the load generator (DESIGN §4). */
#ifndef DQ_BENCH_H
#define DQ_BENCH_H

struct cli_target {
    const char *host;     /* -h, default 127.0.0.1 */
    int port;             /* -p, default 7700 */
    const char *password; /* -a, NULL = none */
};

/* Runs the benchmark described by argv (after the word "bench"; argv[0] is
 * the first option). Prints progress to stderr and results to stdout (JSON
 * with json != 0). Returns a process exit status. */
int bench_main(const struct cli_target *t, int json, int argc, char **argv);

#endif
