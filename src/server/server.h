/* server.h -- delayqd: the core and its front ends on one event loop.
 *
 *   server.c   the loop, signals and graceful stop; builds the core and
 *              the front ends from the settings
 *   config.c   the settings (flags, config file)
 *   main.c     the process: huge pages for loading, then the server
 *
 * The server is the only place that knows every part: the core (core/)
 * knows no front end, and a front end (front/) knows only the core.
 */
#ifndef DQ_SERVER_H
#define DQ_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "server/config.h"

struct core;
struct event;
struct event_base;
struct resp_front;
struct http_front;

struct server {
    struct event_base *base;
    struct config cfg;
    struct core *core;
    struct resp_front *resp;
    struct http_front *http; /* NULL with --http-port 0 */
    struct event *sig_term, *sig_int, *stop_timer;
    bool stopping;
    int64_t stop_deadline;
};

/* Opens the store and starts listening. Returns 0, or -1 after logging
 * why; server_free must be called either way. */
int server_init(struct server *srv, struct config *cfg);
/* Runs the loop until a graceful stop ends; returns the exit status. */
int server_run(struct server *srv);
void server_free(struct server *srv);

#endif
