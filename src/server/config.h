/* config.h -- delayqd's settings: flags, config file, defaults (DESIGN §4).
 *
 * Every setting is one entry of a const table {name, kind, field, help}, so
 * `--help` and the config file reader come from the same place. A config
 * file holds one `name value` pair per line (`#` starts a comment); flags
 * given on the command line win over the file.
 */
#ifndef DQ_CONFIG_H
#define DQ_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct config {
    char *bind;
    int port;
    char *data_dir;
    int fsync_mode;       /* enum dq_fsync */
    char *store;          /* NULL = embedded */
    char *requirepass;    /* NULL = no AUTH */
    uint64_t max_jobs;    /* 0 = no limit */
    uint64_t max_body;
    uint64_t maxclients;
    uint64_t max_output;  /* per-client reply bytes before it is dropped */
    int log_level;        /* enum log_level */
    int http_port;        /* 0 = no HTTP front end */
    uint64_t metrics_max_topics; /* topics with series of their own */
    int dashboard;        /* enum http_dashboard: off, readonly, on */
    bool repair;
    int64_t memory_horizon; /* ms; 0 = every job in RAM */
};

/* Fills *cfg from argv (and a --config file it names). Returns 0, 1 when
 * --help or --version was printed (exit 0), or -1 with a message in err.
 * Strings in cfg are owned by cfg: free with config_free. */
int config_load(struct config *cfg, int argc, char **argv, char *err,
                size_t errlen);
void config_free(struct config *cfg);

#endif
