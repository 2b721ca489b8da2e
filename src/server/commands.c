/* commands.c -- the command table (DESIGN §3) and its handlers.
 *
 * Each command is one entry {name, arity, flags, handler, usage, help}.
 * A handler checks its arguments, answers errors at once with an ERR naming
 * the argument, and otherwise calls the store with a `struct req`; the
 * store's completion formats the reply. Arguments point into the input
 * buffer and are only valid during the handler: stores copy what they keep.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/clock.h"
#include "lib/xalloc.h"
#include "server/server.h"

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

/* --- argument checking -------------------------------------------------- */

static bool arg_is(const struct resp_arg *a, const char *word) {
    size_t n = strlen(word);
    return a->len == n && strncasecmp(a->p, word, n) == 0;
}

static struct dq_str str_of(const struct resp_arg *a) {
    return (struct dq_str){a->p, a->len};
}

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

/* Parses a decimal integer in [min, max]; on failure answers an ERR naming
 * `what` and returns false. */
static bool arg_int(struct conn *c, const struct resp_arg *a, const char *what,
                    int64_t min, int64_t max, int64_t *out) {
    char tmp[32];
    int64_t v = 0;
    bool ok = a->len > 0 && a->len < sizeof tmp;
    if (ok) {
        memcpy(tmp, a->p, a->len);
        tmp[a->len] = '\0';
        char *end;
        errno = 0;
        long long ll = strtoll(tmp, &end, 10);
        ok = errno == 0 && *end == '\0' && tmp[0] != ' ' && tmp[0] != '+';
        v = ll;
    }
    if (!ok || v < min || v > max) {
        err_reply(c, "ERR",
                  "invalid %s '%.*s': expected an integer from %" PRId64
                  " to %" PRId64,
                  what, (int)(a->len > 40 ? 40 : a->len), a->p, min, max);
        return false;
    }
    *out = v;
    return true;
}

static bool check_topic(struct conn *c, const struct resp_arg *a) {
    bool ok = a->len >= 1 && a->len <= DQ_TOPIC_MAX;
    for (size_t i = 0; ok && i < a->len; i++) {
        unsigned char ch = (unsigned char)a->p[i];
        ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
             (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == ':' ||
             ch == '-';
    }
    if (!ok)
        err_reply(c, "ERR",
                  "invalid topic '%.*s': expected 1-%d characters of "
                  "[A-Za-z0-9._:-]",
                  (int)(a->len > 40 ? 40 : a->len), a->p, DQ_TOPIC_MAX);
    return ok;
}

static bool check_id(struct conn *c, const struct resp_arg *a) {
    bool ok = a->len >= 1 && a->len <= DQ_ID_MAX;
    for (size_t i = 0; ok && i < a->len; i++)
        ok = a->p[i] > ' ' && a->p[i] < 127;
    if (!ok)
        err_reply(c, "ERR",
                  "invalid id: expected 1-%d printable ASCII characters "
                  "without spaces",
                  DQ_ID_MAX);
    return ok;
}

static bool check_ids(struct conn *c, struct resp_arg *ids, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!check_id(c, &ids[i])) return false;
    return true;
}

static void syntax_error(struct conn *c, const struct resp_arg *a,
                         const char *cmd) {
    err_reply(c, "ERR", "syntax error at '%.*s' (usage: %s)",
              (int)(a->len > 40 ? 40 : a->len), a->p, cmd);
}

/* --- replies from store results ------------------------------------------ */

void reply_status_error(struct buf *b, const struct dq_result *res) {
    static const char *const msgs[] = {
        [DQ_EXISTS] = "a job with this id already exists in the topic",
        [DQ_BUSY] = "the job is reserved and cannot be replaced",
        [DQ_NOTRESERVED] = "the job does not exist or is not reserved",
        [DQ_FULL] = "--max-jobs reached: delete or ack jobs first",
        [DQ_UNAVAILABLE] = "the store cannot be reached; nothing was changed",
        [DQ_IOERR] = "the write failed; nothing was changed",
        [DQ_NOMEM] = "out of memory; nothing was changed",
    };
    const char *msg = res->errmsg;
    if (!msg && res->status > 0 && res->status <= DQ_NOMEM)
        msg = msgs[res->status];
    resp_error(b, dq_status_code(res->status), "%s", msg ? msg : "failed");
}

void reply_jobs(struct buf *b, const struct dq_result *res) {
    if (res->njobs == 0) {
        resp_nil_array(b);
        return;
    }
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

/* Completions. Each writes the reply for one kind of result. */

static bool done_error(struct req *r, const struct dq_result *res,
                       struct buf **b) {
    *b = req_out(r);
    if (res->status == DQ_OK) return false;
    reply_status_error(*b, res);
    req_done(r);
    return true;
}

static void done_int(void *pd, const struct dq_result *res) {
    struct buf *b;
    if (done_error(pd, res, &b)) return;
    resp_int(b, res->n);
    req_done(pd);
}

static void done_id(void *pd, const struct dq_result *res) {
    struct buf *b;
    if (done_error(pd, res, &b)) return;
    resp_bulk(b, res->id.p, res->id.len);
    req_done(pd);
}

static void done_state(void *pd, const struct dq_result *res) {
    struct buf *b;
    if (done_error(pd, res, &b)) return;
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

static void done_get(void *pd, const struct dq_result *res) {
    struct buf *b;
    if (done_error(pd, res, &b)) return;
    if (res->njobs == 0) {
        resp_nil(b);
    } else {
        const struct dq_job *j = &res->jobs[0];
        bool reserved = j->state == DQ_RESERVED;
        resp_array(b, reserved ? 20 : 18);
        field_str(b, "topic", j->topic);
        field_str(b, "id", j->id);
        const char *st = dq_state_name(j->state);
        field_str(b, "state", (struct dq_str){st, strlen(st)});
        field_str(b, "body", j->body);
        field_int(b, "due", j->due);
        field_int(b, "ttr", j->ttr);
        field_int(b, "retries", j->retries);
        field_int(b, "attempts", j->attempts);
        field_int(b, "created", j->created);
        if (reserved) field_int(b, "deadline", j->deadline);
    }
    req_done(pd);
}

static void done_strs(void *pd, const struct dq_result *res, bool cursor) {
    struct buf *b;
    if (done_error(pd, res, &b)) return;
    if (cursor) {
        resp_array(b, 2);
        char cur[24];
        snprintf(cur, sizeof cur, "%" PRIu64, res->cursor);
        resp_bulk_str(b, cur);
    }
    resp_array(b, res->nstrs);
    for (size_t i = 0; i < res->nstrs; i++)
        resp_bulk(b, res->strs[i].p, res->strs[i].len);
    req_done(pd);
}

static void done_list(void *pd, const struct dq_result *res) {
    done_strs(pd, res, true);
}

static void done_topics(void *pd, const struct dq_result *res) {
    done_strs(pd, res, false);
}

static void done_stats(void *pd, const struct dq_result *res) {
    struct buf *b;
    if (done_error(pd, res, &b)) return;
    const struct dq_stats *s = res->stats;
    resp_array(b, 24);
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
    req_done(pd);
}

/* --- job commands ------------------------------------------------------- */

#define ADD_USAGE                                                            \
    "ADD topic id body [DELAY ms | AT unix-ms] [TTR ms] [RETRIES n] "        \
    "[BACKOFF EXP base-ms max-ms | BACKOFF FIXED ms] [REPLACE]"

static void cmd_add(struct conn *c, struct resp_arg *argv, size_t argc) {
    struct server *srv = c->srv;
    if (!check_topic(c, &argv[1])) return;
    if (!(argv[2].len == 1 && argv[2].p[0] == '*') && !check_id(c, &argv[2]))
        return;
    if (argv[3].len > srv->cfg.max_body) {
        err_reply(c, "TOOBIG", "body is %zu bytes, --max-body is %" PRIu64,
                  argv[3].len, srv->cfg.max_body);
        return;
    }
    int64_t now = clock_ms();
    struct dq_add a = {
        .topic = str_of(&argv[1]),
        .id = str_of(&argv[2]),
        .body = str_of(&argv[3]),
        .due = now,
        .ttr = DQ_TTR_DEFAULT,
        .retries = DQ_RETRIES_DEFAULT,
        .backoff = {DQ_BACKOFF_EXP, DQ_BACKOFF_BASE_DEFAULT,
                    DQ_BACKOFF_MAX_DEFAULT},
        .now = now,
    };
    bool have_delay = false, have_at = false;
    int64_t v, v2;
    for (size_t i = 4; i < argc; i++) {
        const struct resp_arg *o = &argv[i];
        bool more = i + 1 < argc;
        if (arg_is(o, "DELAY") && more) {
            if (!arg_int(c, &argv[++i], "DELAY", 0, DQ_DUE_AHEAD_MAX, &v))
                return;
            a.due = now + v;
            have_delay = true;
        } else if (arg_is(o, "AT") && more) {
            if (!arg_int(c, &argv[++i], "AT", 0, now + DQ_DUE_AHEAD_MAX, &v))
                return;
            a.due = v < now ? now : v;
            have_at = true;
        } else if (arg_is(o, "TTR") && more) {
            if (!arg_int(c, &argv[++i], "TTR", 1, DQ_TTR_MAX, &v)) return;
            a.ttr = (uint32_t)v;
        } else if (arg_is(o, "RETRIES") && more) {
            if (!arg_int(c, &argv[++i], "RETRIES", 0, DQ_RETRIES_MAX, &v))
                return;
            a.retries = (uint32_t)v;
        } else if (arg_is(o, "BACKOFF") && more && arg_is(&argv[i + 1], "FIXED") &&
                   i + 2 < argc) {
            if (!arg_int(c, &argv[i + 2], "BACKOFF FIXED", 0, DQ_BACKOFF_LIMIT,
                         &v))
                return;
            a.backoff = (struct dq_backoff){DQ_BACKOFF_FIXED, (uint32_t)v, 0};
            i += 2;
        } else if (arg_is(o, "BACKOFF") && more && arg_is(&argv[i + 1], "EXP") &&
                   i + 3 < argc) {
            if (!arg_int(c, &argv[i + 2], "BACKOFF EXP base", 1,
                         DQ_BACKOFF_LIMIT, &v) ||
                !arg_int(c, &argv[i + 3], "BACKOFF EXP max", v,
                         DQ_BACKOFF_LIMIT, &v2))
                return;
            a.backoff = (struct dq_backoff){DQ_BACKOFF_EXP, (uint32_t)v,
                                            (uint32_t)v2};
            i += 3;
        } else if (arg_is(o, "REPLACE")) {
            a.replace = true;
        } else {
            syntax_error(c, o, ADD_USAGE);
            return;
        }
    }
    if (have_delay && have_at) {
        err_reply(c, "ERR", "DELAY and AT cannot be used together");
        return;
    }
    srv->ops->add(srv->store, &a, done_id, req_new(c));
}

static void cmd_del(struct conn *c, struct resp_arg *argv, size_t argc) {
    if (!check_topic(c, &argv[1]) || !check_ids(c, argv + 2, argc - 2)) return;
    c->srv->ops->del(c->srv->store, str_of(&argv[1]),
                     (const struct dq_str *)(argv + 2), argc - 2, done_int,
                     req_new(c));
}

static void cmd_ack(struct conn *c, struct resp_arg *argv, size_t argc) {
    if (!check_topic(c, &argv[1]) || !check_ids(c, argv + 2, argc - 2)) return;
    c->srv->ops->ack(c->srv->store, str_of(&argv[1]),
                     (const struct dq_str *)(argv + 2), argc - 2, done_int,
                     req_new(c));
}

static void cmd_get(struct conn *c, struct resp_arg *argv, size_t argc) {
    if (!check_topic(c, &argv[1]) || !check_id(c, &argv[2])) return;
    c->srv->ops->get(c->srv->store, str_of(&argv[1]), str_of(&argv[2]),
                     done_get, req_new(c));
}

#define RESERVE_USAGE "RESERVE [TIMEOUT ms] [COUNT n] FROM topic [topic ...]"

static void cmd_reserve(struct conn *c, struct resp_arg *argv, size_t argc) {
    int64_t timeout = -1, count = 1;
    size_t i = 1;
    for (; i < argc && !arg_is(&argv[i], "FROM"); i++) {
        if (arg_is(&argv[i], "TIMEOUT") && i + 1 < argc) {
            if (!arg_int(c, &argv[++i], "TIMEOUT", 0, DQ_DUE_AHEAD_MAX,
                         &timeout))
                return;
        } else if (arg_is(&argv[i], "COUNT") && i + 1 < argc) {
            if (!arg_int(c, &argv[++i], "COUNT", 1, DQ_COUNT_MAX, &count))
                return;
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
    for (size_t t = i + 1; t < argc; t++)
        if (!check_topic(c, &argv[t])) return;
    if (c->srv->stopping) timeout = 0;
    blocking_reserve(c->srv, req_new(c), argv + i + 1, argc - i - 1,
                     (uint32_t)count, timeout);
}

static void cmd_nack(struct conn *c, struct resp_arg *argv, size_t argc) {
    int64_t delay = -1;
    if (!check_topic(c, &argv[1]) || !check_id(c, &argv[2])) return;
    if (argc == 5 && arg_is(&argv[3], "DELAY")) {
        if (!arg_int(c, &argv[4], "DELAY", 0, DQ_DUE_AHEAD_MAX, &delay))
            return;
    } else if (argc != 3) {
        syntax_error(c, &argv[3], "NACK topic id [DELAY ms]");
        return;
    }
    c->srv->ops->nack(c->srv->store, str_of(&argv[1]), str_of(&argv[2]),
                      delay, done_state, req_new(c));
}

static void cmd_touch(struct conn *c, struct resp_arg *argv, size_t argc) {
    int64_t ttr = 0;
    if (!check_topic(c, &argv[1]) || !check_id(c, &argv[2])) return;
    if (argc == 5 && arg_is(&argv[3], "TTR")) {
        if (!arg_int(c, &argv[4], "TTR", 1, DQ_TTR_MAX, &ttr)) return;
    } else if (argc != 3) {
        syntax_error(c, &argv[3], "TOUCH topic id [TTR ms]");
        return;
    }
    c->srv->ops->touch(c->srv->store, str_of(&argv[1]), str_of(&argv[2]),
                       (uint32_t)ttr, done_int, req_new(c));
}

static void cmd_kick(struct conn *c, struct resp_arg *argv, size_t argc) {
    int64_t count = 0;
    if (!check_topic(c, &argv[1])) return;
    if (argc == 4 && arg_is(&argv[2], "COUNT")) {
        if (!arg_int(c, &argv[3], "COUNT", 1, INT64_MAX, &count)) return;
    } else if (argc != 2) {
        syntax_error(c, &argv[2], "KICK topic [COUNT n]");
        return;
    }
    c->srv->ops->kick(c->srv->store, str_of(&argv[1]), (uint64_t)count,
                      done_int, req_new(c));
}

#define LIST_USAGE "LIST topic state [COUNT n] [CURSOR c]"

static void cmd_list(struct conn *c, struct resp_arg *argv, size_t argc) {
    int64_t count = 10;
    uint64_t cursor = 0;
    if (!check_topic(c, &argv[1])) return;
    int state = dq_state_parse(argv[2].p, argv[2].len);
    if (state < 0) {
        err_reply(c, "ERR",
                  "invalid state '%.*s': expected delayed, ready, reserved "
                  "or dead",
                  (int)(argv[2].len > 40 ? 40 : argv[2].len), argv[2].p);
        return;
    }
    for (size_t i = 3; i < argc; i++) {
        if (arg_is(&argv[i], "COUNT") && i + 1 < argc) {
            if (!arg_int(c, &argv[++i], "COUNT", 1, DQ_COUNT_MAX, &count))
                return;
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
    c->srv->ops->list(c->srv->store, str_of(&argv[1]), state, (uint32_t)count,
                      cursor, done_list, req_new(c));
}

static void cmd_purge(struct conn *c, struct resp_arg *argv, size_t argc) {
    if (!check_topic(c, &argv[1])) return;
    c->srv->ops->purge(c->srv->store, str_of(&argv[1]), done_int, req_new(c));
}

static void cmd_stats(struct conn *c, struct resp_arg *argv, size_t argc) {
    struct dq_str t = {"", 0};
    if (argc == 2) {
        if (!check_topic(c, &argv[1])) return;
        t = str_of(&argv[1]);
    } else if (argc > 2) {
        syntax_error(c, &argv[2], "STATS [topic]");
        return;
    }
    c->srv->ops->stats(c->srv->store, t, done_stats, req_new(c));
}

static void cmd_topics(struct conn *c, struct resp_arg *argv, size_t argc) {
    c->srv->ops->topics(c->srv->store, done_topics, req_new(c));
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

static void cmd_auth(struct conn *c, struct resp_arg *argv, size_t argc) {
    const char *pass = c->srv->cfg.requirepass;
    /* AUTH password, or Redis 6's AUTH username password */
    const struct resp_arg *given = &argv[argc - 1];
    if (argc > 3) {
        err_reply(c, "ERR", "wrong number of arguments for 'auth' command");
    } else if (!pass) {
        err_reply(c, "ERR", "AUTH called without any password configured "
                            "(start delayqd with --requirepass)");
    } else if (given->len == strlen(pass) &&
               memcmp(given->p, pass, given->len) == 0 &&
               (argc == 2 || arg_is(&argv[1], "default"))) {
        c->authed = true;
        resp_simple(conn_reply(c), "OK");
        conn_reply_done(c);
    } else {
        c->authed = false;
        err_reply(c, "WRONGPASS", "invalid password");
    }
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
        else resp_nil(b);
    } else if (arg_is(&argv[1], "ID")) {
        resp_int(b, (int64_t)c->id);
    } else if (arg_is(&argv[1], "SETINFO")) {
        resp_simple(b, "OK");
    } else {
        resp_error(b, "ERR", "unknown CLIENT subcommand '%.*s'",
                   (int)(argv[1].len > 40 ? 40 : argv[1].len), argv[1].p);
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

struct info_ctx {
    struct buf text;
};

static void info_emit(void *ud, const char *name, const char *value) {
    buf_appendf(&((struct info_ctx *)ud)->text, "%s:%s\r\n", name, value);
}

static void cmd_info(struct conn *c, struct resp_arg *argv, size_t argc) {
    struct server *srv = c->srv;
    struct info_ctx ic = {BUF_INIT};
    int64_t now = clock_ms();
    buf_appendf(&ic.text,
                "# Server\r\nredis_version:7.0.0\r\ndelayq_version:0.1.0\r\n"
                "redis_mode:standalone\r\ntcp_port:%d\r\nuptime_in_seconds:%"
                PRId64 "\r\n\r\n# Clients\r\nconnected_clients:%" PRIu64
                "\r\nblocked_clients:%" PRIu64 "\r\nmaxclients:%" PRIu64
                "\r\n\r\n# Stats\r\ntotal_connections_received:%" PRIu64
                "\r\nrejected_connections:%" PRIu64
                "\r\ntotal_commands_processed:%" PRIu64 "\r\n\r\n# Store\r\n",
                srv->cfg.port, (now - srv->started_ms) / 1000, srv->nconns,
                blocking_count(srv), srv->cfg.maxclients, srv->total_conns,
                srv->rejected_conns, srv->total_cmds);
    if (srv->ops->info) srv->ops->info(srv->store, info_emit, &ic);
    resp_bulk(conn_reply(c), ic.text.p, ic.text.len);
    conn_reply_done(c);
    buf_free(&ic.text);
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
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const struct cmd *cmd_lookup(const struct resp_arg *name) {
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (arg_is(name, commands[i].name)) return &commands[i];
    return NULL;
}

static size_t cmd_count(void) { return NCOMMANDS; }

void cmd_table_reply(struct buf *b) {
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
