/* main.c -- delayqd: parse the settings, run the server. */
#include <stdio.h>

#include "lib/log.h"
#include "server/config.h"
#include "server/server.h"

int main(int argc, char **argv) {
    struct config cfg;
    char err[4096];
    int rc = config_load(&cfg, argc, argv, err, sizeof err);
    if (rc != 0) {
        if (rc < 0) fprintf(stderr, "delayqd: %s\n", err);
        config_free(&cfg);
        return rc < 0 ? 2 : 0;
    }
    log_set_level(cfg.log_level);
    struct server srv;
    int status = 1;
    if (server_init(&srv, &cfg) == 0) status = server_run(&srv);
    server_free(&srv);
    config_free(&cfg);
    if (status == 0) log_info("stopped");
    return status;
}
