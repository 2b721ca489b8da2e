/* config.c -- delayqd's settings (see config.h). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/duration.h"
#include "lib/log.h"
#include "lib/xalloc.h"
#include "server/config.h"
#include "store/store.h"
#include "version.h"


enum opt_kind { OPT_STR, OPT_PORT, OPT_U64, OPT_FSYNC, OPT_LEVEL, OPT_FLAG,
                OPT_MS, OPT_DASHBOARD };

struct opt {
    const char *name;
    enum opt_kind kind;
    size_t off;
    const char *def;
    const char *help;
};

#define F(field) offsetof(struct config, field)
static const struct opt opts[] = {
    {"bind", OPT_STR, F(bind), "127.0.0.1", "address to listen on"},
    {"port", OPT_PORT, F(port), "7700", "TCP port to listen on"},
    {"data-dir", OPT_STR, F(data_dir), "./delayq-data",
     "directory of the embedded store's log"},
    {"fsync", OPT_FSYNC, F(fsync_mode), "everysec",
     "always | everysec | no: when the log is synced to disk"},
    {"store", OPT_STR, F(store), NULL,
     "redis://host:port[/db][?prefix=p] or redis-cluster://host:port[,...]; "
     "absent = embedded"},
    {"requirepass", OPT_STR, F(requirepass), NULL,
     "password clients must give with AUTH"},
    {"max-jobs", OPT_U64, F(max_jobs), "0", "most jobs held (0 = no limit)"},
    {"max-body", OPT_U64, F(max_body), "1048576", "largest job body, bytes"},
    {"maxclients", OPT_U64, F(maxclients), "10000",
     "most connected clients"},
    {"max-output", OPT_U64, F(max_output), "67108864",
     "reply bytes a client may leave unread before it is dropped"},
    {"http-port", OPT_PORT, F(http_port), "7780",
     "TCP port of the HTTP/JSON API and /metrics (0 = off)"},
    {"metrics-max-topics", OPT_U64, F(metrics_max_topics), "1000",
     "topics with metric series of their own; the rest are summed as _other"},
    {"dashboard", OPT_DASHBOARD, F(dashboard), "on",
     "off | readonly | on: the web dashboard on the HTTP port"},
    {"log-level", OPT_LEVEL, F(log_level), "info", "debug | info | warn | error"},
    {"memory-horizon", OPT_MS, F(memory_horizon), "1h",
     "embedded store: jobs due later than this are kept on disk, only their "
     "ids in RAM (0 = every job in RAM)"},
    {"repair", OPT_FLAG, F(repair), NULL,
     "truncate a corrupt log at the first bad record instead of refusing "
     "to start"},
};
#undef F
#define NOPTS (sizeof opts / sizeof opts[0])

static const struct opt *find_opt(const char *name) {
    for (size_t i = 0; i < NOPTS; i++)
        if (strcmp(opts[i].name, name) == 0) return &opts[i];
    return NULL;
}

static int set_opt(struct config *cfg, const struct opt *o, const char *v,
                   char *err, size_t errlen) {
    char *field = (char *)cfg + o->off;
    char *end;
    unsigned long long u;
    switch (o->kind) {
    case OPT_STR:
        free(*(char **)field);
        *(char **)field = v ? xstrndup(v, strlen(v)) : NULL;
        return 0;
    case OPT_PORT:
        errno = 0;
        u = strtoull(v, &end, 10);
        if (errno || *end || end == v || u > 65535) break;
        *(int *)field = (int)u;
        return 0;
    case OPT_U64:
        errno = 0;
        u = strtoull(v, &end, 10);
        if (errno || *end || end == v || *v == '-') break;
        *(uint64_t *)field = u;
        return 0;
    case OPT_FSYNC:
        if (strcmp(v, "always") == 0) *(int *)field = DQ_FSYNC_ALWAYS;
        else if (strcmp(v, "everysec") == 0) *(int *)field = DQ_FSYNC_EVERYSEC;
        else if (strcmp(v, "no") == 0) *(int *)field = DQ_FSYNC_NO;
        else break;
        return 0;
    case OPT_LEVEL: {
        int l = log_level_parse(v);
        if (l < 0) break;
        *(int *)field = l;
        return 0;
    }
    case OPT_MS: {
        int64_t ms;
        const char *why;
        if (duration_parse(v, &ms, &why) != 0) {
            snprintf(err, errlen, "invalid value '%s' for --%s: %s", v,
                     o->name, why);
            return -1;
        }
        *(int64_t *)field = ms;
        return 0;
    }
    case OPT_DASHBOARD: /* enum http_dashboard's order */
        if (strcmp(v, "off") == 0) *(int *)field = 0;
        else if (strcmp(v, "readonly") == 0) *(int *)field = 1;
        else if (strcmp(v, "on") == 0) *(int *)field = 2;
        else break;
        return 0;
    case OPT_FLAG:
        if (!v || strcmp(v, "yes") == 0 || strcmp(v, "true") == 0)
            *(bool *)field = true;
        else if (strcmp(v, "no") == 0 || strcmp(v, "false") == 0)
            *(bool *)field = false;
        else break;
        return 0;
    }
    snprintf(err, errlen, "invalid value '%s' for --%s (%s)", v, o->name,
             o->help);
    return -1;
}

static void usage(void) {
    printf("Usage: delayqd [--config FILE] [--name value ...]\n\n"
           "delayq server: a delay queue speaking RESP.\n\nOptions:\n");
    for (size_t i = 0; i < NOPTS; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s", opts[i].name,
                 opts[i].kind == OPT_FLAG ? "" : " V");
        printf("  %-20s %s", left, opts[i].help);
        if (opts[i].def) printf(" (default %s)", opts[i].def);
        printf("\n");
    }
    printf("  %-20s %s\n", "--config FILE",
           "read `name value` lines from FILE (flags win)");
    printf("  %-20s %s\n", "--help, --version", "print and exit");
}

static int load_file(struct config *cfg, const char *path, char *err,
                     size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot open config file %s: %s", path,
                 strerror(errno));
        return -1;
    }
    char line[4096];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line + strspn(line, " \t");
        p[strcspn(p, "#\r\n")] = '\0';
        if (*p == '\0') continue;
        char *name = p;
        p += strcspn(p, " \t");
        if (*p) *p++ = '\0';
        p += strspn(p, " \t");
        char *e = p + strlen(p);
        while (e > p && (e[-1] == ' ' || e[-1] == '\t')) *--e = '\0';
        const struct opt *o = find_opt(name);
        if (!o) {
            snprintf(err, errlen, "%s:%d: unknown setting '%s'", path,
                     lineno, name);
            rc = -1;
        } else if (*p == '\0' && o->kind != OPT_FLAG) {
            snprintf(err, errlen, "%s:%d: '%s' needs a value", path, lineno,
                     name);
            rc = -1;
        } else {
            char sub[3000];
            rc = set_opt(cfg, o, *p ? p : NULL, sub, sizeof sub);
            if (rc) snprintf(err, errlen, "%s:%d: %s", path, lineno, sub);
        }
    }
    fclose(f);
    return rc;
}

int config_load(struct config *cfg, int argc, char **argv, char *err,
                size_t errlen) {
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < NOPTS; i++)
        if (opts[i].def && set_opt(cfg, &opts[i], opts[i].def, err, errlen))
            return -1;
    /* The file first, so flags override it. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage();
            return 1;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("delayqd %s\n", DELAYQ_VERSION);
            return 1;
        }
        if (strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "--config needs a file name");
                return -1;
            }
            if (load_file(cfg, argv[i + 1], err, errlen)) return -1;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--config") == 0) {
            i++;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            snprintf(err, errlen, "unexpected argument '%s' (try --help)", a);
            return -1;
        }
        char name[64];
        const char *eq = strchr(a + 2, '=');
        size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        snprintf(name, sizeof name, "%.*s", (int)nl, a + 2);
        const struct opt *o = find_opt(name);
        if (!o) {
            snprintf(err, errlen, "unknown option '%s' (try --help)", a);
            return -1;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v && o->kind != OPT_FLAG) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "--%s needs a value", o->name);
                return -1;
            }
            v = argv[++i];
        }
        if (set_opt(cfg, o, v, err, errlen)) return -1;
    }
    if (cfg->max_body > 512ULL * 1024 * 1024) {
        snprintf(err, errlen, "--max-body must be at most 536870912");
        return -1;
    }
    if (cfg->metrics_max_topics == 0 || cfg->metrics_max_topics > 1000000) {
        snprintf(err, errlen, "--metrics-max-topics must be from 1 to 1000000");
        return -1;
    }
    if (cfg->maxclients == 0) {
        snprintf(err, errlen, "--maxclients must be at least 1");
        return -1;
    }
    return 0;
}

void config_free(struct config *cfg) {
    for (size_t i = 0; i < NOPTS; i++)
        if (opts[i].kind == OPT_STR) {
            char **f = (char **)((char *)cfg + opts[i].off);
            free(*f);
            *f = NULL;
        }
}
