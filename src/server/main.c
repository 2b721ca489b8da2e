/* main.c -- delayqd: parse the settings, run the server. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "lib/log.h"
#include "server/config.h"
#include "server/server.h"

#define HUGETLB_TUNABLE "glibc.malloc.hugetlb=1"

/* delayqd holds millions of small jobs on the malloc heap. With 4 KiB pages,
 * loading them is dominated by page faults (restarting with 10 million jobs:
 * 16 s; with transparent huge pages: 7 s). glibc backs its heap with huge
 * pages only when told so through GLIBC_TUNABLES before the process starts,
 * so delayqd runs itself again once with the tunable added. DELAYQ_HUGEPAGES=0
 * turns this off; if the exec fails, delayqd simply goes on as it is.
 *
 * Only the load uses them: the first touch of a huge page zeroes 2 MiB at
 * once, which takes milliseconds on a virtual machine, and while serving
 * that is a stall every client sees (jobs delivered late). So once the
 * store is open, new memory comes in 4 KiB pages again (end_huge_pages);
 * the huge pages already mapped stay. */
static void use_huge_pages(char **argv) {
    const char *off = getenv("DELAYQ_HUGEPAGES");
    const char *cur = getenv("GLIBC_TUNABLES");
    if ((off && strcmp(off, "0") == 0) ||
        (cur && strstr(cur, "glibc.malloc.hugetlb")))
        return;
    char val[1024];
    int n = snprintf(val, sizeof val, "%s%s%s", cur ? cur : "",
                     cur && *cur ? ":" : "", HUGETLB_TUNABLE);
    if (n < 0 || (size_t)n >= sizeof val) return;
    if (setenv("GLIBC_TUNABLES", val, 1) != 0) return;
    execv("/proc/self/exe", argv);
    /* still here: run without */
}

static void end_huge_pages(void) { prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0); }

int main(int argc, char **argv) {
    use_huge_pages(argv);
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
    if (server_init(&srv, &cfg) == 0) {
        end_huge_pages();
        status = server_run(&srv);
    }
    server_free(&srv);
    config_free(&cfg);
    if (status == 0) log_info("stopped");
    return status;
}
