/* commands.c -- the RESP command table (DESIGN §3): parse, call, render.
 *
 * Each command is one entry {name, arity, flags, handler, usage, help}.
 * A handler turns its arguments into a core call (core/core.h), answering
 * only what the core cannot know at once: unknown option words and numbers
 * that do not parse. The core checks every value and completes through one
 * of the render callbacks below with the req as privdata. Arguments point
 * into the input buffer and are only valid during the handler.
 */
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/metrics.h"
#include "front/resp/resp_int.h"
#include "lib/clock.h"
#include "lib/xalloc.h"

#define CMD_NOAUTH 1 /* allowed before AUTH */
#define CMD_KEYED 2  /* argv[1] is a topic and argv[2] a job id */

struct cmd {
    const char *name;
    int arity; /* > 0: exactly; < 0: at least -arity (name included) */
    int flags;
    void (*fn)(struct conn *c, struct resp_arg *argv, size_t argc);
    const char *usage;
    const char *help;
};

static const struct cmd *cmd_lookup(const struct resp_arg *name);
static size_t cmd_count(void);
static void cmd_table_reply(struct buf *b);

/* --- arguments ------------------------------------------------------------ */

static bool arg_is(const struct resp_arg *a, const char *word) {
    size_t n = strlen(word);
    return a->len == n && strncasecmp(a->p, word, n) == 0;
}

static struct dq_str str_of(const struct resp_arg *a) {
    return (struct dq_str){a->p, a->len};
}

static int clip(size_t len) { return (int)(len > 40 ? 40 : len); }

static void err_reply(struct conn *c, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void err_reply(struct conn *c, const char *code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    resp_error(conn_reply(c), code, "%s", msg);
    conn_reply_done(c);
}

/* Parses a decimal integer; on failure answers an ERR naming `what` and
 * returns false. Ranges are the core's to check. */
static bool arg_int(struct conn *c, const struct resp_arg *a, const char *what,
                    int64_t *out) {
    char tmp[32];
    bool ok = a->len > 0 && a->len < sizeof tmp;
    if (ok) {
        memcpy(tmp, a->p, a->len);
        tmp[a->len] = '\0';
        char *end;
        errno = 0;
        long long ll = strtoll(tmp, &end, 10);
        ok = errno == 0 && *end == '\0' && tmp[0] != ' ' && tmp[0] != '+' &&
             ll != CORE_UNSET;
        *out = ll;
    }
    if (!ok)
        err_reply(c, "ERR", "invalid %s '%.*s': expected an integer", what,
                  clip(a->len), a->p);
    return ok;
}

static void syntax_error(struct conn *c, const struct resp_arg *a,
                         const char *usage) {
    err_reply(c, "ERR", "syntax error at '%.*s' (usage: %s)", clip(a->len),
              a->p, usage);
}

/* --- rendering core results ------------------------------------------------- */

static void render_error(struct buf *b, const struct dq_result *res) {
    const char *msg = res->errmsg ? res->errmsg : core_status_message(res->status);
    resp_error(b, dq_status_code(res->status), "%s", msg);
}

/* Every completion starts here: the req's buffer, or the error rendered
 * and the req done (returns NULL). */
static struct buf *render_start(struct req *r, const struct dq_result *res) {
    struct buf *b = req_out(r);
    if (res->status == DQ_OK) return b;
    render_error(b, res);
    req_done(r);
    return NULL;
}

static void done_int(void *pd, const struct dq_result *res) {
    struct buf *b = render_start(pd, res);
    if (!b) return;
    resp_int(b, res->n);
    req_done(pd);
}

static void done_id(void *pd, const struct dq_result *res) {
    struct buf *b = render_start(pd, res);
    if (!b) return;
    resp_bulk(b, res->id.p, res->id.len);
    req_done(pd);
}

static void done_state(void *pd, const struct dq_result *res) {
    struct buf *b = render_start(pd, res);
    if (!b) return;
    resp_bulk_str(b, dq_state_name((int)res->n));
    req_done(pd);
}

static void field_int(struct buf *b, const char *name, int64_t v) {
    resp_bulk_str(b, name);
    resp_int(b, v);
}

static void field_str(struct buf *b, const char *name, struct dq_str v) {
    resp_bulk_str(b, name);
    resp_bulk(b, v.p, v.len);
}

/* GET: a flat field/value array (a map in RESP3), or nil. */
static void done_get(void *pd, const struct dq_result *res) {
    struct req *r = pd;
    struct buf *b = render_start(r, res);
    if (!b) return;
    int proto = req_proto(r);
    if (res->njobs == 0) {
        resp_nil_v(b, proto);
    } else {
        const struct dq_job *j = &res->jobs[0];
        bool reserved = j->state == DQ_RESERVED;
        bool push = j->url.len > 0;
        resp_map_v(b, proto, (reserved ? 10 : 9) + (push ? 2 : 0));
        field_str(b, "topic", j->topic);
        field_str(b, "id", j->id);
        resp_bulk_str(b, "state");
        resp_bulk_str(b, dq_state_name(j->state));
        field_str(b, "body", j->body);
        field_int(b, "due", j->due);
        field_int(b, "ttr", j->ttr);
        field_int(b, "retries", j->retries);
        field_int(b, "attempts", j->attempts);
        field_int(b, "created", j->created);
        if (reserved) field_int(b, "deadline", j->deadline);
        if (push) {
            field_str(b, "url", j->url);
            field_str(b, "content_type",
                      j->content_type.len
                          ? j->content_type
                          : (struct dq_str){DQ_CTYPE_DEFAULT,
                                            sizeof DQ_CTYPE_DEFAULT - 1});
        }
    }
    req_done(r);
}

static void render_strs(struct buf *b, const struct dq_result *res) {
    resp_array(b, res->nstrs);
    for (size_t i = 0; i < res->nstrs; i++)
        resp_bulk(b, res->strs[i].p, res->strs[i].len);
}

static void done_list(void *pd, const struct dq_result *res) {
    struct buf *b = render_start(pd, res);
    if (!b) return;
    resp_array(b, 2);
    char cur[24]; /* unsigned: a cursor may use bit 63 (engine_list) */
    resp_bulk(b, cur, (size_t)snprintf(cur, sizeof cur, "%" PRIu64, res->cursor));
    render_strs(b, res);
    req_done(pd);
}

static void done_topics(void *pd, const struct dq_result *res) {
    struct buf *b = render_start(pd, res);
    if (!b) return;
    render_strs(b, res);
    req_done(pd);
}

static void done_stats(void *pd, const struct dq_result *res) {
    struct req *r = pd;
    struct buf *b = render_start(r, res);
    if (!b) return;
    const struct dq_stats *s = res->stats;
    resp_map_v(b, req_proto(r), 14);
    field_int(b, "jobs_delayed", (int64_t)s->jobs[DQ_DELAYED]);
    field_int(b, "jobs_ready", (int64_t)s->jobs[DQ_READY]);
    field_int(b, "jobs_reserved", (int64_t)s->jobs[DQ_RESERVED]);
    field_int(b, "jobs_dead", (int64_t)s->jobs[DQ_DEAD]);
    field_int(b, "added", (int64_t)s->added);
    field_int(b, "reserved", (int64_t)s->reserved);
    field_int(b, "acked", (int64_t)s->acked);
    field_int(b, "nacked", (int64_t)s->nacked);
    field_int(b, "expired", (int64_t)s->expired);
    field_int(b, "dead", (int64_t)s->dead);
    field_int(b, "deleted", (int64_t)s->deleted);
    field_int(b, "kicked", (int64_t)s->kicked);
    field_int(b, "pushed", (int64_t)s->pushed);
    field_int(b, "push_failed", (int64_t)s->push_failed);
    req_done(r);
}

/* RESERVE: an array of [topic, id, body, attempts, deadline], or nil. */
static void done_reserve(void *pd, const struct dq_result *res) {
    struct req *r = pd;
    r->w = NULL;
    if (r->c && r->c->paused) {
        r->c->paused = false;
        r->c->resume = true;
    }
    struct buf *b = render_start(r, res);
    if (!b) return;
    if (res->njobs == 0) {
        resp_nil_array_v(b, req_proto(r));
    } else {
        resp_array(b, res->njobs);
        for (size_t i = 0; i < res->njobs; i++) {
            const struct dq_job *j = &res->jobs[i];
            resp_array(b, 5);
            resp_bulk(b, j->topic.p, j->topic.len);
            resp_bulk(b, j->id.p, j->id.len);
            resp_bulk(b, j->body.p, j->body.len);
            resp_int(b, j->attempts);
            resp_int(b, j->deadline);
        }
    }
    req_done(r);
}

/* --- job commands ------------------------------------------------------- */

#define ADD_USAGE                                                            \
    "ADD topic id body [DELAY ms | AT unix-ms] [TTR ms] [RETRIES n] "        \
    "[BACKOFF EXP base-ms max-ms | BACKOFF FIXED ms] [REPLACE] "          \
    "[URL url [CONTENT-TYPE type]]"

static void cmd_add(struct conn *c, struct resp_arg *argv, size_t argc) {
    struct core_add a = CORE_ADD_INIT;
    a.topic = str_of(&argv[1]);
    a.id = str_of(&argv[2]);
    a.body = str_of(&argv[3]);
    for (size_t i = 4; i < argc; i++) {
        const struct resp_arg *o = &argv[i];
        bool more = i + 1 < argc;
        if (arg_is(o, "DELAY") && more) {
            if (!arg_int(c, &argv[++i], "DELAY", &a.delay)) return;
        } else if (arg_is(o, "AT") && more) {
            if (!arg_int(c, &argv[++i], "AT", &a.at)) return;
        } else if (arg_is(o, "TTR") && more) {
            if (!arg_int(c, &argv[++i], "TTR", &a.ttr)) return;
        } else if (arg_is(o, "RETRIES") && more) {
            if (!arg_int(c, &argv[++i], "RETRIES", &a.retries)) return;
        } else if (arg_is(o, "BACKOFF") && more && arg_is(&argv[i + 1], "FIXED") &&
                   i + 2 < argc) {
            a.backoff_kind = DQ_BACKOFF_FIXED;
            if (!arg_int(c, &argv[i + 2], "BACKOFF FIXED", &a.backoff_base))
                return;
            i += 2;
        } else if (arg_is(o, "BACKOFF") && more && arg_is(&argv[i + 1], "EXP") &&
                   i + 3 < argc) {
            a.backoff_kind = DQ_BACKOFF_EXP;
            if (!arg_int(c, &argv[i + 2], "BACKOFF EXP base", &a.backoff_base) ||
                !arg_int(c, &argv[i + 3], "BACKOFF EXP max", &a.backoff_max))
                return;
            i += 3;
        } else if (arg_is(o, "REPLACE")) {
            a.replace = true;
        } else if (arg_is(o, "URL") && more) {
            a.url = str_of(&argv[++i]);
        } else if (arg_is(o, "CONTENT-TYPE") && more) {
            a.content_type = str_of(&argv[++i]);
        } else {
            syntax_error(c, o, ADD_USAGE);
            return;
        }
    }
    core_add(c->f->core, &a, done_id, req_new(c));
}

static void cmd_del(struct conn *c, struct resp_arg *argv, size_t argc) {
    core_del(c->f->core, str_of(&argv[1]), (const struct dq_str *)(argv + 2),
             argc - 2, done_int, req_new(c));
}

static void cmd_ack(struct conn *c, struct resp_arg *argv, size_t argc) {
    core_ack(c->f->core, str_of(&argv[1]), (const struct dq_str *)(argv + 2),
             argc - 2, done_int, req_new(c));
}

static void cmd_get(struct conn *c, struct resp_arg *argv, size_t argc) {
    core_get(c->f->core, str_of(&argv[1]), str_of(&argv[2]), done_get,
             req_new(c));
}

#define RESERVE_USAGE "RESERVE [TIMEOUT ms] [COUNT n] FROM topic [topic ...]"

static void cmd_reserve(struct conn *c, struct resp_arg *argv, size_t argc) {
    int64_t timeout = CORE_UNSET, count = CORE_UNSET;
    size_t i = 1;
    for (; i < argc && !arg_is(&argv[i], "FROM"); i++) {
        if (arg_is(&argv[i], "TIMEOUT") && i + 1 < argc) {
            if (!arg_int(c, &argv[++i], "TIMEOUT", &timeout)) return;
        } else if (arg_is(&argv[i], "COUNT") && i + 1 < argc) {
            if (!arg_int(c, &argv[++i], "COUNT", &count)) return;
        } else {
            syntax_error(c, &argv[i], RESERVE_USAGE);
            return;
        }
    }
    if (i + 1 >= argc) {
        err_reply(c, "ERR", "RESERVE needs FROM and at least one topic "
                            "(usage: " RESERVE_USAGE ")");
        return;
    }
    struct req *r = req_new(c);
    if (timeout != 0) c->paused = true; /* later requests wait, as in Redis */
    r->w = core_reserve(c->f->core, (const struct dq_str *)(argv + i + 1),
                        argc - i - 1, count, timeout, done_reserve, r);
}

static void cmd_nack(struct conn *c, struct resp_arg *argv, size_t argc) {
    int64_t delay = CORE_UNSET;
    if (argc == 5 && arg_is(&argv[3], "DELAY")) {
        if (!arg_int(c, &argv[4], "DELAY", &delay)) return;
    } else if (argc != 3) {
        syntax_error(c, &argv[3], "NACK topic id [DELAY ms]");
        return;
    }
    core_nack(c->f->core, str_of(&argv[1]), str_of(&argv[2]), delay,
              done_state, req_new(c));
}

static void cmd_touch(struct conn *c, struct resp_arg *argv, size_t argc) {
    int64_t ttr = CORE_UNSET;
    if (argc == 5 && arg_is(&argv[3], "TTR")) {
        if (!arg_int(c, &argv[4], "TTR", &ttr)) return;
    } else if (argc != 3) {
        syntax_error(c, &argv[3], "TOUCH topic id [TTR ms]");
        return;
    }
    core_touch(c->f->core, str_of(&argv[1]), str_of(&argv[2]), ttr, done_int,
               req_new(c));
}

static void cmd_kick(struct conn *c, struct resp_arg *argv, size_t argc) {
    int64_t count = CORE_UNSET;
    if (argc == 4 && arg_is(&argv[2], "COUNT")) {
        if (!arg_int(c, &argv[3], "COUNT", &count)) return;
    } else if (argc != 2) {
        syntax_error(c, &argv[2], "KICK topic [COUNT n]");
        return;
    }
    core_kick(c->f->core, str_of(&argv[1]), count, done_int, req_new(c));
}

static void cmd_kickjob(struct conn *c, struct resp_arg *argv, size_t argc) {
    core_kick_job(c->f->core, str_of(&argv[1]), str_of(&argv[2]), done_int,
                  req_new(c));
}

#define LIST_USAGE "LIST topic state [COUNT n] [CURSOR c]"

static void cmd_list(struct conn *c, struct resp_arg *argv, size_t argc) {
    int64_t count = CORE_UNSET;
    uint64_t cursor = 0;
    for (size_t i = 3; i < argc; i++) {
        if (arg_is(&argv[i], "COUNT") && i + 1 < argc) {
            if (!arg_int(c, &argv[++i], "COUNT", &count)) return;
        } else if (arg_is(&argv[i], "CURSOR") && i + 1 < argc) {
            const struct resp_arg *a = &argv[++i];
            char tmp[24], *end;
            bool ok = a->len > 0 && a->len < sizeof tmp &&
                      a->p[0] >= '0' && a->p[0] <= '9';
            if (ok) {
                memcpy(tmp, a->p, a->len);
                tmp[a->len] = '\0';
                errno = 0;
                cursor = strtoull(tmp, &end, 10);
                ok = errno == 0 && *end == '\0';
            }
            if (!ok) {
                err_reply(c, "ERR", "invalid CURSOR: expected the cursor "
                                    "a previous LIST returned, or 0");
                return;
            }
        } else {
            syntax_error(c, &argv[i], LIST_USAGE);
            return;
        }
    }
    core_list(c->f->core, str_of(&argv[1]), str_of(&argv[2]), count, cursor,
              done_list, req_new(c));
}

static void cmd_purge(struct conn *c, struct resp_arg *argv, size_t argc) {
    core_purge(c->f->core, str_of(&argv[1]), done_int, req_new(c));
}

static void cmd_stats(struct conn *c, struct resp_arg *argv, size_t argc) {
    if (argc > 2) {
        syntax_error(c, &argv[2], "STATS [topic]");
        return;
    }
    /* the core reads an empty topic as "all topics": one given empty is an
     * invalid topic here */
    if (argc == 2 && argv[1].len == 0) {
        err_reply(c, "ERR", "invalid topic '': expected 1-%d characters of "
                            "[A-Za-z0-9._:-]", DQ_TOPIC_MAX);
        return;
    }
    struct dq_str t = argc == 2 ? str_of(&argv[1]) : (struct dq_str){"", 0};
    core_stats(c->f->core, t, done_stats, req_new(c));
}

static void cmd_topics(struct conn *c, struct resp_arg *argv, size_t argc) {
    core_topics(c->f->core, done_topics, req_new(c));
}

/* --- connection and server commands ------------------------------------- */

static void cmd_ping(struct conn *c, struct resp_arg *argv, size_t argc) {
    struct buf *b = conn_reply(c);
    if (argc == 1) resp_simple(b, "PONG");
    else if (argc == 2) resp_bulk(b, argv[1].p, argv[1].len);
    else resp_error(b, "ERR", "wrong number of arguments for 'ping' command");
    conn_reply_done(c);
}

static void cmd_echo(struct conn *c, struct resp_arg *argv, size_t argc) {
    resp_bulk(conn_reply(c), argv[1].p, argv[1].len);
    conn_reply_done(c);
}

static void cmd_quit(struct conn *c, struct resp_arg *argv, size_t argc) {
    resp_simple(conn_reply(c), "OK");
    conn_reply_done(c);
    c->closing = true;
}

/* Whether `given` is the password (for user "default" or none). */
static bool password_ok(struct conn *c, const struct resp_arg *user,
                        const struct resp_arg *given) {
    const char *pass = c->f->cfg.requirepass;
    return pass && given->len == strlen(pass) &&
           memcmp(given->p, pass, given->len) == 0 &&
           (!user || arg_is(user, "default"));
}

static void cmd_auth(struct conn *c, struct resp_arg *argv, size_t argc) {
    /* AUTH password, or Redis 6's AUTH username password */
    if (argc > 3) {
        err_reply(c, "ERR", "wrong number of arguments for 'auth' command");
    } else if (!c->f->cfg.requirepass) {
        err_reply(c, "ERR", "AUTH called without any password configured "
                            "(start delayqd with --requirepass)");
    } else if (password_ok(c, argc == 3 ? &argv[1] : NULL, &argv[argc - 1])) {
        c->authed = true;
        resp_simple(conn_reply(c), "OK");
        conn_reply_done(c);
    } else {
        c->authed = false;
        err_reply(c, "WRONGPASS", "invalid password");
    }
}

/* HELLO [protover [AUTH username password] [SETNAME name]]: RESP3 for a
 * client that asks (maps and nulls in its replies), as Redis 6+ does. */
static void cmd_hello(struct conn *c, struct resp_arg *argv, size_t argc) {
    int64_t proto = c->proto;
    if (argc >= 2) {
        if (!arg_int(c, &argv[1], "protocol version", &proto)) return;
        if (proto != 2 && proto != 3) {
            err_reply(c, "NOPROTO", "unsupported protocol version %" PRId64
                      " (2 and 3 are)", proto);
            return;
        }
    }
    bool authed = c->authed;
    const struct resp_arg *name = NULL;
    for (size_t i = 2; i < argc; i++) {
        if (arg_is(&argv[i], "AUTH") && i + 2 < argc) {
            if (!password_ok(c, &argv[i + 1], &argv[i + 2])) {
                err_reply(c, "WRONGPASS", "invalid username-password pair or "
                                          "user is disabled");
                return;
            }
            authed = true;
            i += 2;
        } else if (arg_is(&argv[i], "SETNAME") && i + 1 < argc) {
            name = &argv[++i];
        } else {
            syntax_error(c, &argv[i],
                         "HELLO [protover [AUTH username password] "
                         "[SETNAME name]]");
            return;
        }
    }
    if (!authed) {
        err_reply(c, "NOAUTH", "HELLO must be called with the client already "
                               "authenticated, otherwise the HELLO <proto> AUTH "
                               "<user> <pass> option can be used");
        return;
    }
    c->authed = true;
    c->proto = (int)proto;
    if (name)
        snprintf(c->name, sizeof c->name, "%.*s",
                 (int)(name->len > 63 ? 63 : name->len), name->p);
    struct buf *b = conn_reply(c);
    resp_map_v(b, c->proto, 7);
    resp_bulk_str(b, "server");
    resp_bulk_str(b, "delayq");
    resp_bulk_str(b, "version");
    resp_bulk_str(b, "7.0.0");
    field_int(b, "proto", c->proto);
    field_int(b, "id", (int64_t)c->id);
    resp_bulk_str(b, "mode");
    resp_bulk_str(b, "standalone");
    resp_bulk_str(b, "role");
    resp_bulk_str(b, "master");
    resp_bulk_str(b, "modules");
    resp_array(b, 0);
    conn_reply_done(c);
}

static void cmd_select(struct conn *c, struct resp_arg *argv, size_t argc) {
    if (arg_is(&argv[1], "0")) {
        resp_simple(conn_reply(c), "OK");
        conn_reply_done(c);
    } else {
        err_reply(c, "ERR", "delayq has only database 0");
    }
}

static void cmd_client(struct conn *c, struct resp_arg *argv, size_t argc) {
    struct buf *b = conn_reply(c);
    if (arg_is(&argv[1], "SETNAME") && argc == 3) {
        snprintf(c->name, sizeof c->name, "%.*s",
                 (int)(argv[2].len > 63 ? 63 : argv[2].len), argv[2].p);
        resp_simple(b, "OK");
    } else if (arg_is(&argv[1], "GETNAME")) {
        if (c->name[0]) resp_bulk_str(b, c->name);
        else resp_nil_v(b, c->proto);
    } else if (arg_is(&argv[1], "ID")) {
        resp_int(b, (int64_t)c->id);
    } else if (arg_is(&argv[1], "SETINFO")) {
        resp_simple(b, "OK");
    } else {
        resp_error(b, "ERR", "unknown CLIENT subcommand '%.*s'",
                   clip(argv[1].len), argv[1].p);
    }
    conn_reply_done(c);
}

static void cmd_command(struct conn *c, struct resp_arg *argv, size_t argc) {
    struct buf *b = conn_reply(c);
    if (argc == 1) cmd_table_reply(b);
    else if (arg_is(&argv[1], "COUNT")) resp_int(b, (int64_t)cmd_count());
    else resp_array(b, 0); /* DOCS, INFO ...: nothing more to say */
    conn_reply_done(c);
}

/* CONFIG GET: the few settings Redis clients and redis-benchmark ask for,
 * answered as a Redis with no persistence of its own would. */
static void cmd_config(struct conn *c, struct resp_arg *argv, size_t argc) {
    if (!arg_is(&argv[1], "GET") || argc < 3) {
        err_reply(c, "ERR", "only CONFIG GET parameter [parameter ...] is "
                            "supported (delayqd is configured by its flags)");
        return;
    }
    char port[16], maxclients[24];
    snprintf(port, sizeof port, "%d", c->f->cfg.port);
    snprintf(maxclients, sizeof maxclients, "%" PRIu64, c->f->cfg.maxclients);
    const char *const known[][2] = {
        {"save", ""},       {"appendonly", "no"}, {"databases", "1"},
        {"maxmemory", "0"}, {"timeout", "0"},     {"port", port},
        {"maxclients", maxclients},
    };
    const size_t nknown = sizeof known / sizeof known[0];
    bool hit[sizeof known / sizeof known[0]] = {false};
    size_t nhit = 0;
    for (size_t i = 2; i < argc; i++) {
        char pat[128];
        snprintf(pat, sizeof pat, "%.*s", (int)(argv[i].len > 127 ? 127 : argv[i].len),
                 argv[i].p);
        for (size_t k = 0; k < nknown; k++)
            if (!hit[k] && fnmatch(pat, known[k][0], FNM_CASEFOLD) == 0) {
                hit[k] = true;
                nhit++;
            }
    }
    struct buf *b = conn_reply(c);
    resp_map_v(b, c->proto, nhit);
    for (size_t k = 0; k < nknown; k++)
        if (hit[k]) {
            resp_bulk_str(b, known[k][0]);
            resp_bulk_str(b, known[k][1]);
        }
    conn_reply_done(c);
}

/* --- INFO ----------------------------------------------------------------- */

static void info_emit(void *ud, const char *name, const char *value) {
    buf_appendf(ud, "%s:%s\r\n", name, value);
}

/* The metrics table as INFO lines: label values join the name ("_add"),
 * and per-topic series are left to /metrics (topics may hold ':'). */
static void info_family(void *ud, const char *name, const char *type,
                        const char *help) {}

static bool info_key(char *key, size_t n, const char *name, const char *labels,
                     const char *suffix) {
    if (strstr(labels, "topic=")) return false;
    int len = snprintf(key, n, "%s", name);
    for (const char *p = labels; (p = strchr(p, '"')) != NULL;) {
        const char *q = strchr(p + 1, '"');
        if (!q) break;
        len += snprintf(key + len, n - (size_t)len, "_%.*s", (int)(q - p - 1), p + 1);
        p = q + 1;
    }
    snprintf(key + len, n - (size_t)len, "%s", suffix);
    return true;
}

static void info_value(void *ud, const char *name, const char *labels,
                       double v) {
    char key[160];
    if (info_key(key, sizeof key, name, labels, ""))
        buf_appendf(ud, "%s:%.0f\r\n", key, v);
}

static void info_hist(void *ud, const char *name, const char *labels,
                      const struct hist *h) {
    char key[160];
    if (!info_key(key, sizeof key, name, labels, "_count")) return;
    buf_appendf(ud, "%s:%" PRIu64 "\r\n", key, h->count);
    info_key(key, sizeof key, name, labels, "_p99");
    buf_appendf(ud, "%s:%.6f\r\n", key, hist_quantile(h, 0.99));
}

static void cmd_info(struct conn *c, struct resp_arg *argv, size_t argc) {
    struct resp_front *f = c->f;
    struct buf text = BUF_INIT;
    struct metrics *m = core_metrics(f->core);
    int64_t now = clock_ms();
    const struct hist *lag = metrics_fire_lag_all(m);
    buf_appendf(&text,
                "# Server\r\nredis_version:7.0.0\r\ndelayq_version:0.1.0\r\n"
                "redis_mode:standalone\r\ntcp_port:%d\r\nuptime_in_seconds:%"
                PRId64 "\r\n\r\n# Clients\r\nconnected_clients:%" PRId64
                "\r\nblocked_clients:%" PRIu64 "\r\nmaxclients:%" PRIu64
                "\r\n\r\n# Stats\r\ntotal_connections_received:%" PRIu64
                "\r\nrejected_connections:%" PRIu64
                "\r\ntotal_commands_processed:%" PRIu64
                "\r\nfire_lag_count:%" PRIu64 "\r\nfire_lag_p50_ms:%.3f"
                "\r\nfire_lag_p99_ms:%.3f\r\n\r\n",
                f->cfg.port, (now - f->started_ms) / 1000,
                metrics_clients_now(m), core_blocked(f->core),
                f->cfg.maxclients, f->total_conns, f->rejected_conns,
                f->total_cmds, lag->count, hist_quantile(lag, 0.5) * 1000,
                hist_quantile(lag, 0.99) * 1000);
    struct metrics_push mp;
    metrics_push_totals(m, &mp);
    buf_appendf(&text,
                "# Push\r\npushed:%" PRIu64 "\r\npush_failed:%" PRIu64
                "\r\npush_inflight:%" PRId64 "\r\npush_duration_p50_ms:%.3f"
                "\r\npush_duration_p99_ms:%.3f\r\n\r\n# Store\r\n",
                mp.pushed, mp.failed, mp.inflight,
                hist_quantile(mp.duration, 0.5) * 1000,
                hist_quantile(mp.duration, 0.99) * 1000);
    buf_appendf(&text, "store:%s\r\n", core_store_name(f->core));
    core_store_info(f->core, info_emit, &text);
    buf_appendf(&text, "\r\n# Metrics\r\n");
    struct metrics_visitor v = {info_family, info_value, info_hist, &text};
    metrics_visit(m, &v);
    resp_bulk(conn_reply(c), text.p, text.len);
    conn_reply_done(c);
    buf_free(&text);
}

static const struct cmd commands[] = {
    {"ADD", -4, CMD_KEYED, cmd_add, ADD_USAGE, "add a job, due now or later"},
    {"DEL", -3, CMD_KEYED, cmd_del, "DEL topic id [id ...]",
     "delete jobs in any state; returns how many existed"},
    {"GET", 3, CMD_KEYED, cmd_get, "GET topic id", "a job's fields, or nil"},
    {"RESERVE", -3, 0, cmd_reserve, RESERVE_USAGE,
     "take ready jobs under a lease, waiting up to TIMEOUT"},
    {"ACK", -3, CMD_KEYED, cmd_ack, "ACK topic id [id ...]",
     "a job is done: remove it; returns how many existed"},
    {"NACK", -3, CMD_KEYED, cmd_nack, "NACK topic id [DELAY ms]",
     "a job failed: retry after DELAY or its backoff; returns the new state"},
    {"TOUCH", -3, CMD_KEYED, cmd_touch, "TOUCH topic id [TTR ms]",
     "extend a lease; returns the new deadline"},
    {"KICK", -2, 0, cmd_kick, "KICK topic [COUNT n]",
     "move dead jobs back to ready; returns how many"},
    {"KICKJOB", 3, CMD_KEYED, cmd_kickjob, "KICKJOB topic id",
     "move one dead job back to ready; returns 1, or 0 if it is not dead"},
    {"LIST", -3, 0, cmd_list, LIST_USAGE,
     "ids of a topic's jobs in a state, SCAN-style"},
    {"PURGE", 2, 0, cmd_purge, "PURGE topic",
     "remove every job of a topic; returns how many"},
    {"STATS", -1, 0, cmd_stats, "STATS [topic]", "jobs per state and counters"},
    {"TOPICS", 1, 0, cmd_topics, "TOPICS", "topics holding at least one job"},
    {"PING", -1, 0, cmd_ping, "PING [message]", "PONG, or the message"},
    {"ECHO", 2, 0, cmd_echo, "ECHO message", "the message"},
    {"INFO", -1, 0, cmd_info, "INFO [section]", "server information"},
    {"AUTH", -2, CMD_NOAUTH, cmd_auth, "AUTH password",
     "authenticate (with --requirepass)"},
    {"QUIT", 1, CMD_NOAUTH, cmd_quit, "QUIT", "close the connection"},
    {"SELECT", 2, 0, cmd_select, "SELECT 0", "for Redis clients: database 0"},
    {"CLIENT", -2, 0, cmd_client, "CLIENT SETNAME|GETNAME|ID|SETINFO ...",
     "for Redis clients"},
    {"COMMAND", -1, 0, cmd_command, "COMMAND [COUNT|DOCS]",
     "the command table, for Redis clients"},
    {"HELLO", -1, CMD_NOAUTH, cmd_hello,
     "HELLO [protover [AUTH username password] [SETNAME name]]",
     "for Redis clients: choose RESP2 or RESP3"},
    {"CONFIG", -2, 0, cmd_config, "CONFIG GET parameter [parameter ...]",
     "for Redis clients: the few settings they ask for"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const struct cmd *cmd_lookup(const struct resp_arg *name) {
    if (name->len == 0) return NULL;
    char first = (char)(name->p[0] | 0x20); /* names are letters */
    for (size_t i = 0; i < NCOMMANDS; i++)
        if ((commands[i].name[0] | 0x20) == first && arg_is(name, commands[i].name))
            return &commands[i];
    return NULL;
}

static size_t cmd_count(void) { return NCOMMANDS; }

static void cmd_table_reply(struct buf *b) {
    resp_array(b, NCOMMANDS);
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const struct cmd *cmd = &commands[i];
        char lower[16];
        size_t n = strlen(cmd->name);
        for (size_t k = 0; k <= n; k++)
            lower[k] = (char)(cmd->name[k] | (cmd->name[k] ? 0x20 : 0));
        resp_array(b, 6);
        resp_bulk_str(b, lower);
        resp_int(b, cmd->arity);
        resp_array(b, 0);
        resp_int(b, 0);
        resp_int(b, 0);
        resp_int(b, 0);
    }
}

bool cmd_key(const struct resp_arg *argv, size_t argc, struct dq_str *key) {
    const struct cmd *cmd = cmd_lookup(&argv[0]);
    if (!cmd || !(cmd->flags & CMD_KEYED) || argc < 3) return false;
    if (argv[2].len == 1 && argv[2].p[0] == '*') return false; /* new id */
    key[0] = str_of(&argv[1]);
    key[1] = str_of(&argv[2]);
    return true;
}

void cmd_dispatch(struct conn *c, struct resp_arg *argv, size_t argc) {
    const struct cmd *cmd = cmd_lookup(&argv[0]);
    if (!cmd) {
        err_reply(c, "ERR", "unknown command '%.*s' (see COMMAND)",
                  (int)(argv[0].len > 40 ? 40 : argv[0].len), argv[0].p);
        return;
    }
    if (!c->authed && !(cmd->flags & CMD_NOAUTH)) {
        err_reply(c, "NOAUTH", "Authentication required.");
        return;
    }
    if ((cmd->arity > 0 && argc != (size_t)cmd->arity) ||
        (cmd->arity < 0 && argc < (size_t)-cmd->arity)) {
        err_reply(c, "ERR",
                  "wrong number of arguments for '%s' command (usage: %s)",
                  cmd->name, cmd->usage);
        return;
    }
    cmd->fn(c, argv, argc);
}
