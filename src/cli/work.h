/* work.h -- `delayq work`: any program as a consumer (DESIGN §10). */
#ifndef DQ_WORK_H
#define DQ_WORK_H

#include "cli/bench.h" /* struct cli_target */

/* Runs `delayq work` with argv (after the word "work"; global options already
 * taken out). Returns a process exit status: 0 after a graceful stop on
 * SIGTERM or SIGINT, 2 on a usage error. */
int work_main(const struct cli_target *t, int argc, char **argv);

/* Prints the usage of `delayq work` to f. */
void work_usage(FILE *f);

#endif
