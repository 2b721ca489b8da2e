/* delayq.c -- bin/delayq, the command-line client (DESIGN §4).
 *
 * One subcommand per protocol command, described by a const table of
 * struct cmd (name, usage, arity, options, handler, one line of help) in the
 * manner of tmux's cmd_entry; `delayq help` and `delayq SUB --help` are
 * generated from it. Durations and times are parsed by lib/duration.h and
 * sent as milliseconds. The server is reached through libdelayq
 * (include/delayq.h), one typed call per command; `delayq work` is work.c.
 *
 * Error convention of this file: a handler returns the process exit status.
 * Failures that end the command (connection, server error reply, a reply of
 * the wrong shape) print "delayq: ..." to stderr and exit(EXIT_FAIL) from the
 * helper that saw them; usage errors exit with EXIT_USAGE and a hint.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>

#include "delayq.h"

#include "cli/bench.h"
#include "cli/render.h"
#include "cli/work.h"
#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/duration.h"
#include "lib/xalloc.h"

#define EXIT_FAIL 1  /* server error, connection failure, nothing found */
#define EXIT_USAGE 2 /* bad command line */

#define DEFAULT_HOST "127.0.0.1"
#define DEFAULT_PORT 7700
#define CONNECT_TIMEOUT_S 5
#define LIST_PAGE_DEFAULT 1000 /* COUNT for `list --all` pages */

/* ---- options ------------------------------------------------------------ */

enum opt_kind {
    K_FLAG,     /* no value */
    K_DURATION, /* human duration -> ms */
    K_TIME,     /* RFC 3339 or unix ms -> unix ms */
    K_COUNT,    /* non-negative integer */
    K_BACKOFF,  /* exp:BASE[:MAX] | fixed:D */
    K_STRING,   /* kept as text */
};

enum opt_id {
    O_DELAY, O_AT, O_TTR, O_RETRIES, O_BACKOFF, O_REPLACE,
    O_TIMEOUT, O_COUNT, O_ALL, O_CURSOR,
    O__N
};

struct opt_def {
    const char *name; /* without the leading "--" */
    const char *arg;  /* placeholder shown in help; NULL for flags */
    enum opt_kind kind;
};

static const struct opt_def opt_defs[O__N] = {
    [O_DELAY] = {"delay", "D", K_DURATION},
    [O_AT] = {"at", "TIME", K_TIME},
    [O_TTR] = {"ttr", "D", K_DURATION},
    [O_RETRIES] = {"retries", "N", K_COUNT},
    [O_BACKOFF] = {"backoff", "SPEC", K_BACKOFF},
    [O_REPLACE] = {"replace", NULL, K_FLAG},
    [O_TIMEOUT] = {"timeout", "D", K_DURATION},
    [O_COUNT] = {"count", "N", K_COUNT},
    [O_ALL] = {"all", NULL, K_FLAG},
    [O_CURSOR] = {"cursor", "C", K_STRING},
};

/* An option as one command accepts it, with that command's help line. */
struct cmd_opt {
    enum opt_id id;
    const char *help;
};

struct backoff {
    bool fixed;
    int64_t base, max;
};

/* A parsed command line (after the subcommand name). */
struct args {
    char **pos; /* positional arguments, pointing into argv */
    int npos;
    bool has[O__N];
    int64_t num[O__N];     /* durations, times and counts, in ms or units */
    const char *str[O__N]; /* the text given, for strings and messages */
    struct backoff backoff;
};

struct cli;

struct cmd {
    const char *name;
    const char *usage;      /* what follows the name */
    int min_args, max_args; /* positional arguments; max -1 = no limit */
    int (*exec)(struct cli *c, const struct cmd *self, struct args *a);
    const char *help;       /* one line, for `delayq help` */
    const char *details;    /* more text for `delayq SUB --help`, or NULL */
    bool raw;               /* pass argv through unparsed (bench) */
    struct cmd_opt opts[7]; /* ends at the first entry with help == NULL */
};

struct cli {
    struct cli_target t;
    int json;
    delayq *dq; /* NULL until the first command is sent */
};

static void die(struct cli *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
static void die(struct cli *c, const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fputs("delayq: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (c) delayq_free(c->dq);
    exit(EXIT_FAIL);
}

static void warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void warnx(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fputs("delayq: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* Prints a usage error for cmd (NULL = the global command line) and exits. */
static void usage_error(const struct cmd *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
static void usage_error(const struct cmd *cmd, const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "delayq%s%s: ", cmd ? " " : "", cmd ? cmd->name : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (cmd) {
        fprintf(stderr, "\nusage: delayq %s %s\nTry 'delayq %s --help'.\n",
                cmd->name, cmd->usage, cmd->name);
    } else {
        fputs("\nusage: delayq [-h HOST] [-p PORT] [-a PASSWORD] [--json] "
              "COMMAND [ARGS...]\nTry 'delayq help'.\n", stderr);
    }
    exit(EXIT_USAGE);
}

/* ---- parsing values ------------------------------------------------------ */

static int parse_count(const char *s, int64_t *out) {
    if (!*s) return -1;
    int64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        if (__builtin_mul_overflow(v, 10, &v) ||
            __builtin_add_overflow(v, *p - '0', &v))
            return -1;
    }
    *out = v;
    return 0;
}

static bool all_digits(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return false;
    return true;
}

/* "exp:BASE[:MAX]", "exp" or "fixed:D"; 0 or -1 with *why set. */
static int parse_backoff(const char *s, struct backoff *b, const char **why) {
    const char *colon = strchr(s, ':');
    size_t klen = colon ? (size_t)(colon - s) : strlen(s);
    if (klen == 3 && strncasecmp(s, "exp", 3) == 0) {
        b->fixed = false;
        b->base = 1000;
        b->max = 3600000;
        if (!colon) return 0;
        char base[64];
        const char *rest = colon + 1, *c2 = strchr(rest, ':');
        size_t blen = c2 ? (size_t)(c2 - rest) : strlen(rest);
        if (blen >= sizeof base) return *why = "BASE too long", -1;
        memcpy(base, rest, blen);
        base[blen] = '\0';
        if (duration_parse(base, &b->base, why) < 0) return -1;
        if (c2 && duration_parse(c2 + 1, &b->max, why) < 0) return -1;
        return 0;
    }
    if (klen == 5 && strncasecmp(s, "fixed", 5) == 0) {
        b->fixed = true;
        b->max = 0;
        if (!colon) return *why = "fixed needs a delay, like fixed:30s", -1;
        return duration_parse(colon + 1, &b->base, why);
    }
    *why = "expected exp:BASE:MAX (like exp:1s:1h) or fixed:D (like fixed:30s)";
    return -1;
}

static const struct cmd_opt *find_opt(const struct cmd *cmd, const char *name,
                                      size_t len) {
    for (const struct cmd_opt *o = cmd->opts; o->help; o++) {
        const char *n = opt_defs[o->id].name;
        if (strlen(n) == len && strncmp(n, name, len) == 0) return o;
    }
    return NULL;
}

/* Applies a global option (-h -p -a --json and long forms) at argv[*i];
 * returns true if it was one. `cmd` is only for error messages. */
static bool global_opt(struct cli *c, const struct cmd *cmd, int argc,
                       char **argv, int *i) {
    const char *s = argv[*i], *val = NULL;
    char which = 0;
    if (strcmp(s, "--json") == 0) {
        c->json = 1;
        return true;
    }
    if (s[0] == '-' && s[1] && !s[2] && strchr("hpa", s[1])) {
        which = s[1];
    } else {
        static const char *const longs[] = {"--host", "--port", "--password"};
        for (int k = 0; k < 3 && !which; k++) {
            size_t n = strlen(longs[k]);
            if (strncmp(s, longs[k], n) == 0 && (s[n] == '\0' || s[n] == '=')) {
                which = "hpa"[k];
                if (s[n] == '=') val = s + n + 1;
            }
        }
    }
    if (!which) return false;
    if (!val) {
        if (*i + 1 >= argc) {
            if (which == 'h')
                usage_error(cmd, "-h needs a HOST (for help, use --help)");
            usage_error(cmd, "%s needs a value", s);
        }
        val = argv[++*i];
    }
    if (which == 'h') {
        c->t.host = val;
    } else if (which == 'a') {
        c->t.password = val;
    } else {
        int64_t port;
        if (parse_count(val, &port) < 0 || port < 1 || port > 65535)
            usage_error(cmd, "invalid port '%s': expected 1-65535", val);
        c->t.port = (int)port;
    }
    return true;
}

/* Parses argv (the words after the subcommand) into a. Options may come in
 * any order, between positional arguments, as --name VALUE or --name=VALUE;
 * "--" ends them; "-" alone is positional. Exits on a usage error; returns
 * 1 if --help was asked for, else 0. */
static int parse_args(struct cli *c, const struct cmd *cmd, int argc,
                      char **argv, struct args *a) {
    memset(a, 0, sizeof *a);
    a->pos = xcalloc((size_t)argc + 1, sizeof *a->pos);
    bool opts_done = false;
    for (int i = 0; i < argc; i++) {
        char *s = argv[i];
        if (opts_done || s[0] != '-' || strcmp(s, "-") == 0) {
            a->pos[a->npos++] = s;
            continue;
        }
        if (strcmp(s, "--") == 0) {
            opts_done = true;
            continue;
        }
        if (strcmp(s, "--help") == 0) return 1;
        if (global_opt(c, cmd, argc, argv, &i)) continue;
        if (s[1] != '-') usage_error(cmd, "unknown option '%s'", s);
        const char *name = s + 2, *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        const struct cmd_opt *o = find_opt(cmd, name, nlen);
        if (!o) usage_error(cmd, "unknown option '--%.*s'", (int)nlen, name);
        const struct opt_def *d = &opt_defs[o->id];
        const char *val = eq ? eq + 1 : NULL;
        if (d->kind == K_FLAG) {
            if (val) usage_error(cmd, "--%s takes no value", d->name);
            a->has[o->id] = true;
            continue;
        }
        if (!val) {
            if (i + 1 >= argc)
                usage_error(cmd, "--%s needs a value (%s)", d->name, d->arg);
            val = argv[++i];
        }
        const char *why = NULL;
        int64_t v = 0;
        switch (d->kind) {
        case K_DURATION:
            if (duration_parse(val, &v, &why) < 0)
                usage_error(cmd, "invalid --%s '%s': %s", d->name, val, why);
            break;
        case K_TIME:
            if (all_digits(val)) {
                if (parse_count(val, &v) < 0)
                    usage_error(cmd, "invalid --%s '%s': too large", d->name, val);
            } else if (duration_parse_time(val, &v, &why) < 0) {
                usage_error(cmd,
                            "invalid --%s '%s': %s (give an RFC 3339 time "
                            "or unix milliseconds)", d->name, val, why);
            }
            break;
        case K_COUNT:
            if (parse_count(val, &v) < 0)
                usage_error(cmd, "invalid --%s '%s': expected a whole number",
                            d->name, val);
            break;
        case K_BACKOFF:
            if (parse_backoff(val, &a->backoff, &why) < 0)
                usage_error(cmd, "invalid --%s '%s': %s", d->name, val, why);
            break;
        case K_FLAG:
        case K_STRING:
            break;
        }
        a->has[o->id] = true;
        a->num[o->id] = v;
        a->str[o->id] = val;
    }
    if (a->npos < cmd->min_args || (cmd->max_args >= 0 && a->npos > cmd->max_args)) {
        /* name the first missing argument, from the usage line */
        if (a->npos < cmd->min_args) {
            char word[64];
            const char *u = cmd->usage;
            for (int k = 0; k < a->npos && *u; k++) {
                u = strchr(u, ' ');
                if (!u) break;
                u++;
            }
            size_t n = u ? strcspn(u, " .") : 0;
            if (u && n > 0 && n < sizeof word && u[0] != '[') {
                memcpy(word, u, n);
                word[n] = '\0';
                usage_error(cmd, "missing %s", word);
            }
            usage_error(cmd, "missing arguments");
        }
        usage_error(cmd, "too many arguments ('%s' is one too many)",
                    a->pos[cmd->max_args]);
    }
    return 0;
}

static void args_free(struct args *a) { free(a->pos); }

/* ---- talking to the server ---------------------------------------------- */

/* Connects (with a timeout for the connect only) and authenticates through
 * libdelayq; exits on failure. */
static void connect_server(struct cli *c) {
    struct delayq_options o = {
        .host = c->t.host,
        .port = c->t.port,
        .password = c->t.password,
        .connect_timeout_ms = CONNECT_TIMEOUT_S * 1000,
        /* no read timeout: RESERVE may wait as long as it was told to */
        .no_reconnect = 1,
    };
    c->dq = delayq_connect(&o);
    if (!c->dq) die(c, "out of memory");
    if (delayq_err(c->dq)) die(c, "%s", delayq_errstr(c->dq));
}

/* The connection, made on first use. */
static delayq *conn(struct cli *c) {
    if (!c->dq) connect_server(c);
    return c->dq;
}

/* Exits unless rc is DELAYQ_OK, printing the library's error (a server
 * error reply starts with its code, like "EXISTS ..."). */
static void check(struct cli *c, int rc) {
    if (rc == DELAYQ_OK) return;
    fflush(stdout);
    fprintf(stderr, "delayq: %s\n", delayq_errstr(c->dq));
    if (delayq_err(c->dq) == DELAYQ_E_NOAUTH && !c->t.password)
        fputs("delayq: the server wants a password: pass -a PASSWORD "
              "or set DELAYQ_PASSWORD\n", stderr);
    delayq_free(c->dq);
    exit(EXIT_FAIL);
}

static bool is_time_field(const char *f) {
    return !strcmp(f, "due") || !strcmp(f, "created") || !strcmp(f, "deadline");
}

/* ---- the subcommands ---------------------------------------------------- */

static int exec_help(struct cli *c, const struct cmd *self, struct args *a);

/* Reads all of stdin into b. */
static void read_stdin(struct cli *c, struct buf *b) {
    if (isatty(STDIN_FILENO))
        fputs("delayq: reading the body from stdin (end with Ctrl-D)\n", stderr);
    for (;;) {
        char *p = buf_reserve(b, 65536);
        ssize_t n = read(STDIN_FILENO, p, 65536);
        if (n == 0) break;
        if (n < 0) {
            if (errno == EINTR) continue;
            die(c, "cannot read the body from stdin: %s", strerror(errno));
        }
        b->len += (size_t)n;
    }
}

static int exec_add(struct cli *c, const struct cmd *self, struct args *a) {
    if (a->has[O_DELAY] && a->has[O_AT])
        usage_error(self, "give --delay or --at, not both");
    struct buf body = BUF_INIT;
    const char *bp;
    size_t blen;
    if (a->npos < 3 || strcmp(a->pos[2], "-") == 0) {
        read_stdin(c, &body);
        bp = body.p ? body.p : "";
        blen = body.len;
    } else {
        bp = a->pos[2];
        blen = strlen(bp);
    }
    struct delayq_add_opts o = DELAYQ_ADD_OPTS_INIT;
    if (a->has[O_DELAY]) o.delay_ms = a->num[O_DELAY];
    if (a->has[O_AT]) o.at_ms = a->num[O_AT];
    if (a->has[O_TTR]) o.ttr_ms = a->num[O_TTR];
    if (a->has[O_RETRIES]) o.retries = a->num[O_RETRIES];
    if (a->has[O_BACKOFF]) {
        o.backoff = a->backoff.fixed ? DELAYQ_BACKOFF_FIXED : DELAYQ_BACKOFF_EXP;
        o.backoff_base_ms = a->backoff.base;
        o.backoff_max_ms = a->backoff.max;
    }
    o.replace = a->has[O_REPLACE];
    char *id = NULL;
    int rc = delayq_add(conn(c), a->pos[0], a->pos[1], bp, blen, &o, &id);
    buf_free(&body);
    check(c, rc);
    if (c->json) {
        json_t *j = json_object();
        json_object_set_new(j, "topic", json_str(a->pos[0]));
        json_object_set_new(j, "id", json_str(id));
        emit_json(j);
    } else {
        puts(id);
    }
    free(id);
    return 0;
}

/* The fields of a job as GET gives them, in the protocol's order. */
static const char *const job_fields[] = {"topic", "id", "state", "body", "due", "ttr",
                                         "retries", "attempts", "created", "deadline"};
#define NJOB_FIELDS (sizeof job_fields / sizeof job_fields[0])

static int64_t job_int(const struct delayq_job *j, const char *f) {
    return !strcmp(f, "due")        ? j->due
           : !strcmp(f, "ttr")      ? j->ttr
           : !strcmp(f, "retries")  ? j->retries
           : !strcmp(f, "attempts") ? j->attempts
           : !strcmp(f, "created")  ? j->created
                                    : j->deadline;
}

static int exec_get(struct cli *c, const struct cmd *self, struct args *a) {
    struct delayq_job *j;
    check(c, delayq_get(conn(c), a->pos[0], a->pos[1], &j));
    if (!j) {
        if (c->json) emit_json(json_null());
        warnx("no job '%s' in topic '%s'", a->pos[1], a->pos[0]);
        return EXIT_FAIL;
    }
    size_t nf = j->state == DELAYQ_RESERVED ? NJOB_FIELDS : NJOB_FIELDS - 1;
    json_t *o = c->json ? json_object() : NULL;
    struct table t = {.ncols = 2};
    for (size_t i = 0; i < nf; i++) {
        const char *f = job_fields[i];
        const char *s = i == 0 ? j->topic : i == 1 ? j->id
                      : i == 2 ? delayq_state_name(j->state) : NULL;
        if (o) {
            if (i == 3) json_set_body(o, j->body, j->body_len);
            else json_object_set_new(o, f, s ? json_str(s) : json_integer(job_int(j, f)));
            continue;
        }
        char *cell;
        if (i == 3) {
            cell = escaped(j->body, j->body_len);
        } else if (s) {
            cell = escaped(s, strlen(s));
        } else if (is_time_field(f)) {
            cell = when(job_int(j, f));
        } else if (!strcmp(f, "ttr")) {
            char d[DURATION_FMT_MAX];
            cell = xstr(duration_format(j->ttr, d, sizeof d));
        } else {
            cell = fmt_ll(job_int(j, f));
        }
        table_row(&t, xstr(f), cell);
    }
    if (o) {
        emit_json(o);
    } else {
        table_print(&t);
        table_free(&t);
    }
    delayq_job_free(j);
    return 0;
}

/* Prints "N past" or {"past": N}. */
static void print_count(struct cli *c, const char *past, int64_t n) {
    if (c->json) {
        json_t *o = json_object();
        json_object_set_new(o, past, json_integer(n));
        emit_json(o);
    } else {
        printf("%lld %s\n", (long long)n, past);
    }
}

static int exec_del(struct cli *c, const struct cmd *self, struct args *a) {
    int64_t n;
    check(c, delayq_del(conn(c), a->pos[0], (const char *const *)a->pos + 1,
                        (size_t)a->npos - 1, &n));
    print_count(c, "deleted", n);
    return 0;
}
static int exec_ack(struct cli *c, const struct cmd *self, struct args *a) {
    int64_t n;
    check(c, delayq_ack(conn(c), a->pos[0], (const char *const *)a->pos + 1,
                        (size_t)a->npos - 1, &n));
    print_count(c, "acked", n);
    return 0;
}
static int exec_kick(struct cli *c, const struct cmd *self, struct args *a) {
    int64_t n;
    check(c, delayq_kick(conn(c), a->pos[0], a->has[O_COUNT] ? a->num[O_COUNT] : -1, &n));
    print_count(c, "kicked", n);
    return 0;
}
static int exec_purge(struct cli *c, const struct cmd *self, struct args *a) {
    int64_t n;
    check(c, delayq_purge(conn(c), a->pos[0], &n));
    print_count(c, "purged", n);
    return 0;
}

static int exec_reserve(struct cli *c, const struct cmd *self, struct args *a) {
    struct delayq_job *jobs;
    size_t n;
    check(c, delayq_reserve(conn(c), (const char *const *)a->pos, (size_t)a->npos,
                            a->has[O_TIMEOUT] ? a->num[O_TIMEOUT] : -1,
                            a->has[O_COUNT] ? a->num[O_COUNT] : 1, &jobs, &n));
    if (n == 0) {
        if (c->json) emit_json(json_array());
        char d[DURATION_FMT_MAX];
        if (a->num[O_TIMEOUT] > 0)
            warnx("no job ready within %s",
                  duration_format(a->num[O_TIMEOUT], d, sizeof d));
        else
            warnx("no job ready");
        return EXIT_FAIL;
    }
    if (c->json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++) {
            json_t *o = json_object();
            json_object_set_new(o, "topic", json_str(jobs[i].topic));
            json_object_set_new(o, "id", json_str(jobs[i].id));
            json_set_body(o, jobs[i].body, jobs[i].body_len);
            json_object_set_new(o, "attempts", json_integer(jobs[i].attempts));
            json_object_set_new(o, "deadline", json_integer(jobs[i].deadline));
            json_array_append_new(arr, o);
        }
        emit_json(arr);
    } else {
        struct table t = {.ncols = 5};
        table_row(&t, xstr("TOPIC"), xstr("ID"), xstr("ATTEMPTS"), xstr("DEADLINE"),
                  xstr("BODY"));
        for (size_t i = 0; i < n; i++) {
            const struct delayq_job *j = &jobs[i];
            table_row(&t, escaped(j->topic, strlen(j->topic)), escaped(j->id, strlen(j->id)),
                      fmt_ll(j->attempts), when(j->deadline), escaped(j->body, j->body_len));
        }
        table_print(&t);
        table_free(&t);
    }
    delayq_jobs_free(jobs, n);
    return 0;
}

static int exec_nack(struct cli *c, const struct cmd *self, struct args *a) {
    enum delayq_state st;
    check(c, delayq_nack(conn(c), a->pos[0], a->pos[1],
                         a->has[O_DELAY] ? a->num[O_DELAY] : -1, &st));
    if (c->json) {
        json_t *o = json_object();
        json_object_set_new(o, "state", json_string(delayq_state_name(st)));
        emit_json(o);
    } else {
        puts(delayq_state_name(st));
    }
    return 0;
}

static int exec_touch(struct cli *c, const struct cmd *self, struct args *a) {
    int64_t deadline;
    check(c, delayq_touch(conn(c), a->pos[0], a->pos[1],
                          a->has[O_TTR] ? a->num[O_TTR] : -1, &deadline));
    if (c->json) {
        json_t *o = json_object();
        json_object_set_new(o, "deadline", json_integer(deadline));
        emit_json(o);
    } else {
        char *w = when(deadline);
        printf("deadline %s\n", w);
        free(w);
    }
    return 0;
}

static int exec_list(struct cli *c, const struct cmd *self, struct args *a) {
    bool all = a->has[O_ALL];
    if (all && a->has[O_CURSOR]) usage_error(self, "give --all or --cursor, not both");
    int64_t count = a->has[O_COUNT] ? a->num[O_COUNT] : all ? LIST_PAGE_DEFAULT : 0;
    char *cursor = a->has[O_CURSOR] ? xstr(a->str[O_CURSOR]) : NULL;
    json_t *ids = c->json ? json_array() : NULL;
    /* A LIST page may hold fewer ids than asked, even none, while more
     * follow (SCAN semantics): without --all, keep paging until about a
     * page of ids has been shown. */
    size_t shown = 0, want = count > 0 ? (size_t)count : 10;
    for (;;) {
        char **page, *next;
        size_t n;
        check(c, delayq_list(conn(c), a->pos[0], a->pos[1], count, cursor, &page, &n,
                             &next));
        shown += n;
        for (size_t i = 0; i < n; i++) {
            if (ids) {
                json_array_append_new(ids, json_str(page[i]));
            } else {
                char *s = escaped(page[i], strlen(page[i]));
                puts(s);
                free(s);
            }
        }
        delayq_strings_free(page, n);
        free(cursor);
        cursor = next;
        if (strcmp(cursor, "0") == 0 || (!all && shown >= want)) break;
    }
    if (ids) {
        json_t *o = json_object();
        json_object_set_new(o, "cursor", json_string(cursor));
        json_object_set_new(o, "ids", ids);
        emit_json(o);
    } else if (strcmp(cursor, "0") != 0) {
        warnx("more ids follow: use --cursor %s, or --all", cursor);
    }
    free(cursor);
    return 0;
}

static int exec_stats(struct cli *c, const struct cmd *self, struct args *a) {
    struct delayq_stats st;
    check(c, delayq_stats(conn(c), a->npos ? a->pos[0] : NULL, &st));
    const int64_t *v = (const int64_t *)&st;
    json_t *o = c->json ? json_object() : NULL;
    struct table t = {.ncols = 2};
    for (int i = 0; i < DELAYQ_STATS_N; i++) {
        if (o)
            json_object_set_new(o, delayq_stats_fields[i], json_integer(v[i]));
        else
            table_row(&t, xstr(delayq_stats_fields[i]), fmt_ll(v[i]));
    }
    if (o) {
        emit_json(o);
    } else {
        table_print(&t);
        table_free(&t);
    }
    return 0;
}

static int exec_topics(struct cli *c, const struct cmd *self, struct args *a) {
    char **topics;
    size_t n;
    check(c, delayq_topics(conn(c), &topics, &n));
    json_t *arr = c->json ? json_array() : NULL;
    for (size_t i = 0; i < n; i++) {
        if (arr) {
            json_array_append_new(arr, json_str(topics[i]));
        } else {
            char *s = escaped(topics[i], strlen(topics[i]));
            puts(s);
            free(s);
        }
    }
    if (arr) emit_json(arr);
    delayq_strings_free(topics, n);
    return 0;
}

static int exec_ping(struct cli *c, const struct cmd *self, struct args *a) {
    delayq *dq = conn(c);
    char *reply;
    int64_t t0 = clock_mono_us();
    int rc = delayq_ping(dq, a->npos ? a->pos[0] : NULL, &reply);
    double ms = (double)(clock_mono_us() - t0) / 1e3;
    check(c, rc);
    if (c->json) {
        json_t *o = json_object();
        json_object_set_new(o, "reply", json_str(reply));
        json_object_set_new(o, "latency_ms", json_real((double)(int64_t)(ms * 1000) / 1000));
        emit_json(o);
    } else {
        char *s = escaped(reply, strlen(reply));
        printf("%s (%.3f ms)\n", s, ms);
        free(s);
    }
    free(reply);
    return 0;
}

/* INFO text ("# Section" lines and "key:value" lines) as a flat JSON object;
 * values that are whole integers become numbers. */
static json_t *info_json(const char *s, size_t n) {
    json_t *o = json_object();
    const char *end = s + n;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *le = nl ? nl : end;
        const char *colon = memchr(s, ':', (size_t)(le - s));
        size_t vlen = colon ? (size_t)(le - colon - 1) : 0;
        if (colon && vlen && colon[vlen] == '\r') vlen--;
        if (colon && *s != '#' && colon > s) {
            char *k = xstrndup(s, (size_t)(colon - s));
            char *val = xstrndup(colon + 1, vlen);
            char *ep;
            errno = 0;
            long long ll = strtoll(val, &ep, 10);
            json_t *jv = (*val && !*ep && !errno) ? json_integer(ll)
                                                  : json_stringn(val, vlen);
            if (jv) json_object_set_new(o, k, jv);
            free(k);
            free(val);
        }
        s = nl ? nl + 1 : end;
    }
    return o;
}

static int exec_info(struct cli *c, const struct cmd *self, struct args *a) {
    char *text;
    size_t n;
    check(c, delayq_info(conn(c), a->npos ? a->pos[0] : NULL, &text, &n));
    if (c->json) {
        emit_json(info_json(text, n));
    } else {
        for (size_t i = 0; i < n; i++)
            if (text[i] != '\r') putchar(text[i]);
        if (n && text[n - 1] != '\n') putchar('\n');
    }
    free(text);
    return 0;
}

static int exec_work(struct cli *c, const struct cmd *self, struct args *a) {
    return work_main(&c->t, a->npos, a->pos);
}

static int exec_bench(struct cli *c, const struct cmd *self, struct args *a) {
    return bench_main(&c->t, c->json, a->npos, a->pos);
}

/* ---- the table ------------------------------------------------------------ */

static const struct cmd commands[] = {
    {"add", "TOPIC ID [BODY|-] [--delay D | --at TIME] [--ttr D] [--retries N] "
            "[--backoff SPEC] [--replace]",
     2, 3, exec_add, "Add a job, due now, after a delay or at a time",
     "Prints the job's id. With BODY absent or '-', the body is read from stdin\n"
     "(binary-safe). An ID of '*' (quote it from the shell) makes the server\n"
     "choose a time-ordered id. Put -- before a BODY that starts with '-'.\n\n"
     "Examples:\n"
     "  delayq add orders o-1 --delay 30m 'cancel if unpaid'\n"
     "  delayq add reminders '*' --at 2026-11-22T09:30:00+08:00 < msg.json\n"
     "  delayq add hooks h-9 body --retries 5 --backoff exp:1s:10m",
     false,
     {{O_DELAY, "due after this long (500ms, 30s, 1h30m, 2d; plain number = ms)"},
      {O_AT, "due at this RFC 3339 time or unix ms (past = now)"},
      {O_TTR, "lease length after each reserve (server default 30s)"},
      {O_RETRIES, "re-deliveries allowed after the first (server default 3)"},
      {O_BACKOFF, "delay before a retry: exp:BASE:MAX (like exp:1s:1h) or fixed:D"},
      {O_REPLACE, "overwrite a job with this id unless it is reserved"},
      {0, NULL}}},
    {"get", "TOPIC ID", 2, 2, exec_get, "Show one job",
     "Prints the job's fields, times as RFC 3339 (UTC) and relative to now.\n"
     "Exits 1 if there is no such job. With --json, a body that is not UTF-8\n"
     "is given as body_base64.",
     false, {{0, NULL}}},
    {"del", "TOPIC ID...", 2, -1, exec_del, "Delete jobs, in any state",
     "Prints how many of the ids existed.", false, {{0, NULL}}},
    {"reserve", "TOPIC... [--timeout D] [--count N]", 1, -1, exec_reserve,
     "Take ready jobs, waiting for one if none is ready",
     "Leases up to --count ready jobs (default 1), oldest due first, from the\n"
     "topics given. Without --timeout it waits for ever; --timeout 0 does not\n"
     "wait. Exits 1 if none became ready in time. Ack each job when done.",
     false,
     {{O_TIMEOUT, "give up after this long (0 = do not wait)"},
      {O_COUNT, "take up to N jobs at once (default 1)"},
      {0, NULL}}},
    {"ack", "TOPIC ID...", 2, -1, exec_ack, "Acknowledge jobs: done, remove them",
     "Prints how many of the ids existed. Acking is idempotent.", false, {{0, NULL}}},
    {"nack", "TOPIC ID [--delay D]", 2, 2, exec_nack,
     "Give a reserved job back for a retry",
     "Prints the job's new state: delayed (retry after the backoff or --delay),\n"
     "ready, or dead (no retries left).",
     false, {{O_DELAY, "retry after this long instead of the job's backoff"}, {0, NULL}}},
    {"touch", "TOPIC ID [--ttr D]", 2, 2, exec_touch, "Extend a reserved job's lease",
     "Prints the new deadline.", false,
     {{O_TTR, "new lease length from now (default: the job's ttr)"}, {0, NULL}}},
    {"kick", "TOPIC [--count N]", 1, 1, exec_kick, "Move dead jobs back to ready",
     "Prints how many jobs were kicked; their attempts restart at 0.", false,
     {{O_COUNT, "kick at most N jobs"}, {0, NULL}}},
    {"list", "TOPIC STATE [--count N] [--cursor C | --all]", 2, 2, exec_list,
     "List job ids in a state, one per line",
     "STATE is delayed, ready, reserved or dead. One page is printed unless\n"
     "--all follows the cursor to the end; the next cursor goes to stderr.",
     false,
     {{O_COUNT, "ids per page"},
      {O_CURSOR, "continue from the cursor a previous page returned"},
      {O_ALL, "follow the cursor to the end"},
      {0, NULL}}},
    {"purge", "TOPIC", 1, 1, exec_purge, "Remove every job of a topic",
     "Prints how many jobs were removed, in all states.", false, {{0, NULL}}},
    {"stats", "[TOPIC]", 0, 1, exec_stats, "Show job counts and counters",
     "Jobs per state and totals (added, reserved, acked, ...), for one topic\n"
     "or for the whole server.",
     false, {{0, NULL}}},
    {"topics", "", 0, 0, exec_topics, "List topics that hold jobs", NULL, false,
     {{0, NULL}}},
    {"ping", "[MESSAGE]", 0, 1, exec_ping, "Check the server answers, with the round trip",
     NULL, false, {{0, NULL}}},
    {"info", "[SECTION]", 0, 1, exec_info, "Show server information", NULL, false,
     {{0, NULL}}},
    {"work", "--topic T [--topic U] [-c N] [--timeout D] [--grace D] -- COMMAND [ARGS...]",
     0, -1, exec_work, "Run a command for each job: exit 0 acks, else retries",
     "Its options are described by 'delayq work --help'; -h, -p and -a apply\n"
     "as for every command. See docs/workers.md.", true, {{0, NULL}}},
    {"bench", "[OPTIONS]", 0, -1, exec_bench,
     "Load generator: throughput, latency and lateness",
     "Its options are described by 'delayq bench --help'; -h, -p, -a and\n"
     "--json apply as for every command.", true, {{0, NULL}}},
    {"help", "[COMMAND]", 0, 1, exec_help, "Show help for all commands or one", NULL,
     false, {{0, NULL}}},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const struct cmd *find_cmd(const char *name) {
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static void print_main_help(FILE *f) {
    fputs("usage: delayq [-h HOST] [-p PORT] [-a PASSWORD] [--json] COMMAND [ARGS...]\n\n"
          "Command-line client for delayqd, the delay-queue server.\n\n"
          "Commands:\n", f);
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].help);
    fputs("\nGlobal options (before or after the command):\n"
          "  -h HOST        server host (default " DEFAULT_HOST ")\n"
          "  -p PORT        server port (default 7700)\n"
          "  -a PASSWORD    password for AUTH (or set DELAYQ_PASSWORD)\n"
          "  --json         print replies as JSON\n"
          "  --help         this help; 'delayq COMMAND --help' for one command\n\n"
          "Durations: 500ms, 30s, 1h30m, 2d, 1.5s, or a plain number of milliseconds.\n"
          "Times: RFC 3339 (2026-11-22T10:00:00Z, 2026-11-22T18:00:00+08:00) or unix ms.\n"
          "Exit status: 0 done; 1 server error, no connection, no such job or\n"
          "nothing reserved in time; 2 bad command line.\n", f);
}

static void print_cmd_help(const struct cmd *cmd, FILE *f) {
    fprintf(f, "usage: delayq %s %s\n\n%s.\n", cmd->name, cmd->usage, cmd->help);
    if (cmd->details) fprintf(f, "\n%s\n", cmd->details);
    if (cmd->opts[0].help) {
        fputs("\nOptions:\n", f);
        for (const struct cmd_opt *o = cmd->opts; o->help; o++) {
            const struct opt_def *d = &opt_defs[o->id];
            char left[40];
            snprintf(left, sizeof left, "--%s%s%s", d->name, d->arg ? " " : "",
                     d->arg ? d->arg : "");
            fprintf(f, "  %-16s %s\n", left, o->help);
        }
    }
    fputs("\nGlobal options: -h HOST, -p PORT, -a PASSWORD, --json "
          "(see 'delayq help').\n", f);
}

static int exec_help(struct cli *c, const struct cmd *self, struct args *a) {
    if (a->npos == 0) {
        print_main_help(stdout);
        return 0;
    }
    const struct cmd *cmd = find_cmd(a->pos[0]);
    if (!cmd) usage_error(self, "unknown command '%s'", a->pos[0]);
    print_cmd_help(cmd, stdout);
    return 0;
}

int main(int argc, char **argv) {
    const char *pass = getenv("DELAYQ_PASSWORD");
    struct cli c = {.t = {DEFAULT_HOST, DEFAULT_PORT, pass && *pass ? pass : NULL}};
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            print_main_help(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        if (!global_opt(&c, NULL, argc, argv, &i))
            usage_error(NULL, "unknown option '%s'", argv[i]);
    }
    if (i >= argc) usage_error(NULL, "missing COMMAND");
    const struct cmd *cmd = find_cmd(argv[i]);
    if (!cmd) usage_error(NULL, "unknown command '%s'", argv[i]);
    i++;

    struct args a;
    if (cmd->raw) {
        /* Global options are ours wherever they are; the rest is passed on
         * verbatim (everything after "--" included). */
        memset(&a, 0, sizeof a);
        a.pos = xcalloc((size_t)(argc - i) + 1, sizeof *a.pos);
        for (bool rest = false; i < argc; i++) {
            if (!rest && strcmp(argv[i], "--") == 0) rest = true;
            if (rest || !global_opt(&c, cmd, argc, argv, &i)) a.pos[a.npos++] = argv[i];
        }
        int rc = cmd->exec(&c, cmd, &a);
        args_free(&a);
        return rc;
    }
    if (parse_args(&c, cmd, argc - i, argv + i, &a) == 1) {
        print_cmd_help(cmd, stdout);
        args_free(&a);
        return 0;
    }
    int rc = cmd->exec(&c, cmd, &a);
    args_free(&a);
    delayq_free(c.dq);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "delayq: cannot write the output: %s\n", strerror(errno));
        return EXIT_FAIL;
    }
    return rc;
}
