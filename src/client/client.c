/* client.c -- libdelayq's connection and commands (include/delayq.h).
 *
 * A thin typed layer over hiredis's synchronous API: every command is sent
 * as argv + lengths (binary-safe), its reply is checked for the shape the
 * protocol promises (docs/protocol.md) and turned into C values. Error
 * replies become a code (their first word) plus the whole line as message.
 * An I/O error or a timeout drops the connection; the next call reconnects.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "delayq.h"

#define DEFAULT_HOST "127.0.0.1"
#define DEFAULT_PORT 7700
#define DEFAULT_CONNECT_MS 5000
#define MAX_ARGS_INLINE 16

struct delayq {
    redisContext *c;   /* NULL when not connected */
    char *host;
    int port;
    char *password;
    int64_t connect_ms; /* < 0 = none */
    int64_t read_ms;    /* 0 = none */
    bool no_reconnect;
    bool ever_connected;
    int64_t sock_timeout; /* the read timeout now set on c, ms; -1 = none */
    int err;
    char errstr[512];
};

static const char *const error_names[] = {
    [DELAYQ_E_NONE] = "OK",
    [DELAYQ_E_IO] = "IO",
    [DELAYQ_E_TIMEOUT] = "TIMEOUT",
    [DELAYQ_E_PROTOCOL] = "PROTOCOL",
    [DELAYQ_E_NOMEM] = "NOMEM",
    [DELAYQ_E_ARG] = "ARG",
    [DELAYQ_E_SERVER] = "ERR",
    [DELAYQ_E_EXISTS] = "EXISTS",
    [DELAYQ_E_BUSY] = "BUSY",
    [DELAYQ_E_NOTRESERVED] = "NOTRESERVED",
    [DELAYQ_E_FULL] = "FULL",
    [DELAYQ_E_TOOBIG] = "TOOBIG",
    [DELAYQ_E_NOAUTH] = "NOAUTH",
    [DELAYQ_E_WRONGPASS] = "WRONGPASS",
    [DELAYQ_E_UNAVAILABLE] = "UNAVAILABLE",
    [DELAYQ_E_IOERR] = "IOERR",
    [DELAYQ_E_OTHER] = "OTHER",
};
#define NERRORS (int)(sizeof error_names / sizeof error_names[0])

const char *delayq_error_name(int err) {
    return err >= 0 && err < NERRORS && error_names[err] ? error_names[err] : "UNKNOWN";
}

static int fail(delayq *dq, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(delayq *dq, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dq->errstr, sizeof dq->errstr, fmt, ap);
    va_end(ap);
    dq->err = code;
    return DELAYQ_ERR;
}

/* The code of an error reply, from its first word. */
static int server_code(const char *s, size_t n) {
    size_t w = 0;
    while (w < n && s[w] != ' ') w++;
    if (w == 7 && strncmp(s, "TIMEOUT", 7) == 0) return DELAYQ_E_TIMEOUT;
    for (int i = DELAYQ_E_SERVER; i < DELAYQ_E_OTHER; i++)
        if (strlen(error_names[i]) == w && strncmp(s, error_names[i], w) == 0) return i;
    return DELAYQ_E_OTHER;
}

int delayq_err(const delayq *dq) { return dq ? dq->err : DELAYQ_E_NOMEM; }
const char *delayq_errstr(const delayq *dq) {
    return dq ? dq->errstr : "out of memory";
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static void drop(delayq *dq) {
    if (dq->c) redisFree(dq->c);
    dq->c = NULL;
}

static struct timeval tv_of(int64_t ms) {
    return (struct timeval){.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
}

/* Sets the socket's read timeout to ms (-1 = none) if it is not that yet. */
static void set_sock_timeout(delayq *dq, int64_t ms) {
    if (!dq->c || dq->sock_timeout == ms) return;
    redisSetTimeout(dq->c, tv_of(ms < 0 ? 0 : ms));
    dq->sock_timeout = ms;
}

/* Records the error of a failed hiredis call on dq->c and drops the
 * connection. what: the command, for the message. */
static int io_fail(delayq *dq, const char *what) {
    redisContext *c = dq->c;
    int code = DELAYQ_E_IO;
    char msg[256];
    if (c->err == REDIS_ERR_EOF) {
        snprintf(msg, sizeof msg, "%s:%d closed the connection", dq->host, dq->port);
    } else if (c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        code = DELAYQ_E_TIMEOUT;
        snprintf(msg, sizeof msg, "no reply from %s:%d within the read timeout",
                 dq->host, dq->port);
    } else if (c->err == REDIS_ERR_PROTOCOL) {
        code = DELAYQ_E_PROTOCOL;
        snprintf(msg, sizeof msg, "protocol error from %s:%d: %s", dq->host, dq->port,
                 c->errstr);
    } else {
        snprintf(msg, sizeof msg, "connection to %s:%d failed: %s", dq->host, dq->port,
                 c->errstr);
    }
    drop(dq);
    return fail(dq, code, "%s%s%s", what ? what : "", what ? ": " : "", msg);
}

static int do_connect(delayq *dq) {
    drop(dq);
    dq->sock_timeout = -1;
    dq->c = dq->connect_ms < 0 ? redisConnect(dq->host, dq->port)
                               : redisConnectWithTimeout(dq->host, dq->port,
                                                         tv_of(dq->connect_ms));
    if (!dq->c) return fail(dq, DELAYQ_E_NOMEM, "out of memory");
    if (dq->c->err) {
        bool timeout = strstr(dq->c->errstr, "timed out") != NULL;
        fail(dq, timeout ? DELAYQ_E_TIMEOUT : DELAYQ_E_IO, "cannot connect to %s:%d: %s",
             dq->host, dq->port, dq->c->errstr);
        drop(dq);
        return DELAYQ_ERR;
    }
    /* The connect timeout must not become a read timeout. */
    dq->sock_timeout = dq->connect_ms < 0 ? -1 : 0;
    set_sock_timeout(dq, dq->read_ms > 0 ? dq->read_ms : -1);
    dq->ever_connected = true;
    if (!dq->password) return DELAYQ_OK;
    const char *argv[2] = {"AUTH", dq->password};
    redisReply *r = redisCommandArgv(dq->c, 2, argv, NULL);
    if (!r) return io_fail(dq, "AUTH");
    int rc = DELAYQ_OK;
    if (r->type == REDIS_REPLY_ERROR) {
        int code = server_code(r->str, r->len);
        rc = fail(dq, code == DELAYQ_E_SERVER ? DELAYQ_E_WRONGPASS : code,
                  "AUTH failed: %s", r->str);
        drop(dq);
    }
    freeReplyObject(r);
    return rc;
}

delayq *delayq_connect(const struct delayq_options *opts) {
    struct delayq_options o = opts ? *opts : (struct delayq_options){0};
    delayq *dq = calloc(1, sizeof *dq);
    if (!dq) return NULL;
    dq->host = strdup(o.host ? o.host : DEFAULT_HOST);
    dq->password = dup_or_null(o.password);
    if (!dq->host || (o.password && !dq->password)) {
        delayq_free(dq);
        return NULL;
    }
    dq->port = o.port ? o.port : DEFAULT_PORT;
    dq->connect_ms = o.connect_timeout_ms ? o.connect_timeout_ms : DEFAULT_CONNECT_MS;
    dq->read_ms = o.read_timeout_ms > 0 ? o.read_timeout_ms : 0;
    dq->no_reconnect = o.no_reconnect;
    do_connect(dq);
    return dq;
}

void delayq_free(delayq *dq) {
    if (!dq) return;
    drop(dq);
    free(dq->host);
    free(dq->password);
    free(dq);
}

int delayq_reconnect(delayq *dq) {
    dq->err = 0;
    dq->errstr[0] = '\0';
    return do_connect(dq);
}

/* Sends argv and returns its reply, or NULL with the error set (an error
 * reply is freed and becomes the error). wait_ms: how long the server may
 * take on purpose (RESERVE's TIMEOUT; < 0 = for ever), added to the read
 * timeout. */
static redisReply *call(delayq *dq, int argc, const char **argv, const size_t *len,
                        int64_t wait_ms) {
    dq->err = 0;
    dq->errstr[0] = '\0';
    if (!dq->c) {
        if (dq->no_reconnect && dq->ever_connected) {
            fail(dq, DELAYQ_E_IO, "not connected to %s:%d (reconnect is off)", dq->host,
                 dq->port);
            return NULL;
        }
        if (do_connect(dq) != DELAYQ_OK) return NULL;
    }
    int64_t t = -1;
    if (dq->read_ms > 0 && wait_ms >= 0) t = dq->read_ms + wait_ms;
    set_sock_timeout(dq, t);
    redisReply *r = redisCommandArgv(dq->c, argc, argv, len);
    if (!r) {
        io_fail(dq, NULL);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        fail(dq, server_code(r->str, r->len), "%s", r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* ---- building commands ---------------------------------------------------- */

struct argv {
    int n, cap;
    const char **v;
    size_t *len;
    const char *v0[MAX_ARGS_INLINE];
    size_t len0[MAX_ARGS_INLINE];
    char nums[8][24]; /* formatted integers */
    int nnums;
    bool oom;
};

static void av_init(struct argv *a) {
    a->n = 0;
    a->cap = MAX_ARGS_INLINE;
    a->v = a->v0;
    a->len = a->len0;
    a->nnums = 0;
    a->oom = false;
}

static void av_addn(struct argv *a, const char *s, size_t n) {
    if (a->n == a->cap) {
        int cap = a->cap * 2;
        const char **v = malloc((size_t)cap * sizeof *v);
        size_t *len = malloc((size_t)cap * sizeof *len);
        if (!v || !len) {
            free(v);
            free(len);
            a->oom = true;
            return;
        }
        memcpy(v, a->v, (size_t)a->n * sizeof *v);
        memcpy(len, a->len, (size_t)a->n * sizeof *len);
        if (a->v != a->v0) free(a->v), free(a->len);
        a->v = v;
        a->len = len;
        a->cap = cap;
    }
    a->v[a->n] = s;
    a->len[a->n++] = n;
}

static void av_add(struct argv *a, const char *s) { av_addn(a, s, strlen(s)); }

static void av_addll(struct argv *a, const char *name, int64_t x) {
    if (name) av_add(a, name);
    char *buf = a->nums[a->nnums++];
    int n = snprintf(buf, sizeof a->nums[0], "%lld", (long long)x);
    av_addn(a, buf, (size_t)n);
}

static void av_free(struct argv *a) {
    if (a->v != a->v0) free(a->v), free(a->len);
}

/* Sends a and frees it. */
static redisReply *send_av(delayq *dq, struct argv *a, int64_t wait_ms) {
    redisReply *r = NULL;
    if (a->oom)
        fail(dq, DELAYQ_E_NOMEM, "out of memory");
    else
        r = call(dq, a->n, a->v, a->len, wait_ms);
    av_free(a);
    return r;
}

static int bad_reply(delayq *dq, redisReply *r, const char *what, const char *expected) {
    if (r) freeReplyObject(r);
    return fail(dq, DELAYQ_E_PROTOCOL, "unexpected reply to %s: expected %s", what, expected);
}

static bool is_str(const redisReply *r) {
    return r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS;
}

static char *dup_str(const redisReply *r) {
    char *s = malloc(r->len + 1);
    if (!s) return NULL;
    memcpy(s, r->str, r->len);
    s[r->len] = '\0';
    return s;
}

/* A command whose reply is an integer. */
static int int_reply(delayq *dq, struct argv *a, const char *what, int64_t *out) {
    redisReply *r = send_av(dq, a, 0);
    if (!r) return DELAYQ_ERR;
    if (r->type != REDIS_REPLY_INTEGER) return bad_reply(dq, r, what, "an integer");
    if (out) *out = r->integer;
    freeReplyObject(r);
    return DELAYQ_OK;
}

/* A command whose reply is a string; *out (may be NULL) gets a copy. */
static int str_reply(delayq *dq, struct argv *a, const char *what, char **out,
                     size_t *len) {
    redisReply *r = send_av(dq, a, 0);
    if (!r) return DELAYQ_ERR;
    if (!is_str(r)) return bad_reply(dq, r, what, "a string");
    if (out && !(*out = dup_str(r))) {
        freeReplyObject(r);
        return fail(dq, DELAYQ_E_NOMEM, "out of memory");
    }
    if (len) *len = r->len;
    freeReplyObject(r);
    return DELAYQ_OK;
}

static bool valid_name(const char *s) { return s && *s; }

static int check_names(delayq *dq, const char *topic, const char *id) {
    dq->err = 0;
    dq->errstr[0] = '\0';
    if (!valid_name(topic)) return fail(dq, DELAYQ_E_ARG, "missing topic");
    if (id && !*id) return fail(dq, DELAYQ_E_ARG, "missing id");
    return DELAYQ_OK;
}

/* Checks the names and starts `verb topic [id]` in a; DELAYQ_ERR with the
 * error set on a missing name. */
static int start_cmd(delayq *dq, struct argv *a, const char *verb, const char *topic,
                     const char *id, bool with_id) {
    if (check_names(dq, topic, with_id ? (id ? id : "") : NULL) != DELAYQ_OK) return DELAYQ_ERR;
    av_init(a);
    av_add(a, verb);
    av_add(a, topic);
    if (with_id) av_add(a, id);
    return DELAYQ_OK;
}

/* ---- jobs ----------------------------------------------------------------- */

static const char *const state_names[] = {"unknown", "delayed", "ready", "reserved",
                                          "dead"};

const char *delayq_state_name(enum delayq_state s) {
    return (unsigned)s < 5 ? state_names[s] : "unknown";
}

static enum delayq_state state_of(const char *s, size_t n) {
    for (int i = 1; i < 5; i++)
        if (strlen(state_names[i]) == n && memcmp(s, state_names[i], n) == 0)
            return (enum delayq_state)i;
    return DELAYQ_UNKNOWN;
}

static void job_clear(struct delayq_job *j) {
    free(j->topic);
    free(j->id);
    free(j->body);
}

void delayq_job_free(struct delayq_job *job) {
    if (!job) return;
    job_clear(job);
    free(job);
}

void delayq_jobs_free(struct delayq_job *jobs, size_t n) {
    if (!jobs) return;
    for (size_t i = 0; i < n; i++) job_clear(&jobs[i]);
    free(jobs);
}

void delayq_strings_free(char **strings, size_t n) {
    if (!strings) return;
    for (size_t i = 0; i < n; i++) free(strings[i]);
    free(strings);
}

int delayq_add(delayq *dq, const char *topic, const char *id, const void *body,
               size_t body_len, const struct delayq_add_opts *opts, char **id_out) {
    static const struct delayq_add_opts none = DELAYQ_ADD_OPTS_INIT;
    const struct delayq_add_opts *o = opts ? opts : &none;
    if (o->delay_ms >= 0 && o->at_ms >= 0)
        return fail(dq, DELAYQ_E_ARG, "give delay_ms or at_ms, not both");
    struct argv a;
    if (start_cmd(dq, &a, "ADD", topic, id, true) != DELAYQ_OK) return DELAYQ_ERR;
    av_addn(&a, body ? body : "", body ? body_len : 0);
    if (o->delay_ms >= 0) av_addll(&a, "DELAY", o->delay_ms);
    if (o->at_ms >= 0) av_addll(&a, "AT", o->at_ms);
    if (o->ttr_ms >= 0) av_addll(&a, "TTR", o->ttr_ms);
    if (o->retries >= 0) av_addll(&a, "RETRIES", o->retries);
    if (o->backoff == DELAYQ_BACKOFF_EXP) {
        av_add(&a, "BACKOFF");
        av_addll(&a, "EXP", o->backoff_base_ms);
        av_addll(&a, NULL, o->backoff_max_ms);
    } else if (o->backoff == DELAYQ_BACKOFF_FIXED) {
        av_add(&a, "BACKOFF");
        av_addll(&a, "FIXED", o->backoff_base_ms);
    }
    if (o->replace) av_add(&a, "REPLACE");
    if (o->url) {
        av_add(&a, "URL");
        av_add(&a, o->url);
        if (o->content_type) av_add(&a, "CONTENT-TYPE"), av_add(&a, o->content_type);
    }
    return str_reply(dq, &a, "ADD", id_out, NULL);
}

/* Fills j from a GET reply's field/value pairs. */
static int job_from_pairs(delayq *dq, const redisReply *r, struct delayq_job *j) {
    if (r->elements % 2) return bad_reply(dq, NULL, "GET", "field/value pairs");
    for (size_t i = 0; i < r->elements; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        if (!is_str(k)) return bad_reply(dq, NULL, "GET", "field names");
        char **s = !strcmp(k->str, "topic") ? &j->topic
                   : !strcmp(k->str, "id")  ? &j->id
                   : !strcmp(k->str, "body") ? &j->body
                                              : NULL;
        if (s || !strcmp(k->str, "state")) {
            if (!is_str(v)) return bad_reply(dq, NULL, "GET", "a string value");
            if (!s) {
                j->state = state_of(v->str, v->len);
                continue;
            }
            free(*s);
            if (!(*s = dup_str(v))) return fail(dq, DELAYQ_E_NOMEM, "out of memory");
            if (s == &j->body) j->body_len = v->len;
            continue;
        }
        if (v->type != REDIS_REPLY_INTEGER) continue; /* a field we do not know */
        int64_t *f = !strcmp(k->str, "due")       ? &j->due
                     : !strcmp(k->str, "ttr")      ? &j->ttr
                     : !strcmp(k->str, "retries")  ? &j->retries
                     : !strcmp(k->str, "attempts") ? &j->attempts
                     : !strcmp(k->str, "created")  ? &j->created
                     : !strcmp(k->str, "deadline") ? &j->deadline
                                                   : NULL;
        if (f) *f = v->integer;
    }
    if (!j->topic || !j->id || !j->body)
        return bad_reply(dq, NULL, "GET", "topic, id and body");
    return DELAYQ_OK;
}

int delayq_get(delayq *dq, const char *topic, const char *id, struct delayq_job **job) {
    *job = NULL;
    struct argv a;
    if (start_cmd(dq, &a, "GET", topic, id, true) != DELAYQ_OK) return DELAYQ_ERR;
    redisReply *r = send_av(dq, &a, 0);
    if (!r) return DELAYQ_ERR;
    if (r->type == REDIS_REPLY_NIL) {
        freeReplyObject(r);
        return DELAYQ_OK;
    }
    if (r->type != REDIS_REPLY_ARRAY) return bad_reply(dq, r, "GET", "an array or nil");
    struct delayq_job *j = calloc(1, sizeof *j);
    if (!j) {
        freeReplyObject(r);
        return fail(dq, DELAYQ_E_NOMEM, "out of memory");
    }
    int rc = job_from_pairs(dq, r, j);
    freeReplyObject(r);
    if (rc != DELAYQ_OK) {
        delayq_job_free(j);
        return rc;
    }
    *job = j;
    return DELAYQ_OK;
}

static int ids_cmd(delayq *dq, const char *verb, const char *topic,
                   const char *const *ids, size_t n, int64_t *count) {
    if (n == 0) return fail(dq, DELAYQ_E_ARG, "%s needs at least one id", verb);
    struct argv a;
    if (start_cmd(dq, &a, verb, topic, NULL, false) != DELAYQ_OK) return DELAYQ_ERR;
    for (size_t i = 0; i < n; i++) av_add(&a, ids[i]);
    return int_reply(dq, &a, verb, count);
}

int delayq_del(delayq *dq, const char *topic, const char *const *ids, size_t n,
               int64_t *count) {
    return ids_cmd(dq, "DEL", topic, ids, n, count);
}

int delayq_ack(delayq *dq, const char *topic, const char *const *ids, size_t n,
               int64_t *count) {
    return ids_cmd(dq, "ACK", topic, ids, n, count);
}

int delayq_reserve(delayq *dq, const char *const *topics, size_t ntopics,
                   int64_t timeout_ms, int64_t count, struct delayq_job **jobs,
                   size_t *n) {
    *jobs = NULL;
    *n = 0;
    dq->err = 0;
    if (ntopics == 0) return fail(dq, DELAYQ_E_ARG, "RESERVE needs at least one topic");
    if (count < 1) return fail(dq, DELAYQ_E_ARG, "RESERVE count must be at least 1");
    struct argv a;
    av_init(&a);
    av_add(&a, "RESERVE");
    if (timeout_ms >= 0) av_addll(&a, "TIMEOUT", timeout_ms);
    if (count != 1) av_addll(&a, "COUNT", count);
    av_add(&a, "FROM");
    for (size_t i = 0; i < ntopics; i++) av_add(&a, topics[i]);
    redisReply *r = send_av(dq, &a, timeout_ms);
    if (!r) return DELAYQ_ERR;
    if (r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_ARRAY && !r->elements)) {
        freeReplyObject(r);
        return DELAYQ_OK;
    }
    static const char shape[] = "[topic, id, body, attempts, deadline] per job";
    if (r->type != REDIS_REPLY_ARRAY) return bad_reply(dq, r, "RESERVE", shape);
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *j = r->element[i];
        if (j->type != REDIS_REPLY_ARRAY || j->elements < 5 || !is_str(j->element[0]) ||
            !is_str(j->element[1]) || !is_str(j->element[2]) ||
            j->element[3]->type != REDIS_REPLY_INTEGER ||
            j->element[4]->type != REDIS_REPLY_INTEGER)
            return bad_reply(dq, r, "RESERVE", shape);
    }
    struct delayq_job *out = calloc(r->elements, sizeof *out);
    if (!out) {
        freeReplyObject(r);
        return fail(dq, DELAYQ_E_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < r->elements; i++) {
        redisReply **e = r->element[i]->element;
        struct delayq_job *j = &out[i];
        j->topic = dup_str(e[0]);
        j->id = dup_str(e[1]);
        j->body = dup_str(e[2]);
        j->body_len = e[2]->len;
        j->attempts = e[3]->integer;
        j->deadline = e[4]->integer;
        j->state = DELAYQ_RESERVED;
        if (!j->topic || !j->id || !j->body) {
            delayq_jobs_free(out, r->elements);
            freeReplyObject(r);
            return fail(dq, DELAYQ_E_NOMEM, "out of memory");
        }
    }
    *jobs = out;
    *n = r->elements;
    freeReplyObject(r);
    return DELAYQ_OK;
}

int delayq_nack(delayq *dq, const char *topic, const char *id, int64_t delay_ms,
                enum delayq_state *state) {
    struct argv a;
    if (start_cmd(dq, &a, "NACK", topic, id, true) != DELAYQ_OK) return DELAYQ_ERR;
    if (delay_ms >= 0) av_addll(&a, "DELAY", delay_ms);
    redisReply *r = send_av(dq, &a, 0);
    if (!r) return DELAYQ_ERR;
    if (!is_str(r)) return bad_reply(dq, r, "NACK", "a state");
    if (state) *state = state_of(r->str, r->len);
    freeReplyObject(r);
    return DELAYQ_OK;
}

int delayq_touch(delayq *dq, const char *topic, const char *id, int64_t ttr_ms,
                 int64_t *deadline) {
    struct argv a;
    if (start_cmd(dq, &a, "TOUCH", topic, id, true) != DELAYQ_OK) return DELAYQ_ERR;
    if (ttr_ms >= 0) av_addll(&a, "TTR", ttr_ms);
    return int_reply(dq, &a, "TOUCH", deadline);
}

int delayq_kick(delayq *dq, const char *topic, int64_t count, int64_t *kicked) {
    struct argv a;
    if (start_cmd(dq, &a, "KICK", topic, NULL, false) != DELAYQ_OK) return DELAYQ_ERR;
    if (count >= 0) av_addll(&a, "COUNT", count);
    return int_reply(dq, &a, "KICK", kicked);
}

int delayq_purge(delayq *dq, const char *topic, int64_t *removed) {
    struct argv a;
    if (start_cmd(dq, &a, "PURGE", topic, NULL, false) != DELAYQ_OK) return DELAYQ_ERR;
    return int_reply(dq, &a, "PURGE", removed);
}

/* Copies an array of strings (every element checked to be one). */
static int strings_of(delayq *dq, const redisReply *r, const char *what, char ***out,
                      size_t *n) {
    for (size_t i = 0; i < r->elements; i++)
        if (!is_str(r->element[i])) return bad_reply(dq, NULL, what, "an array of strings");
    char **v = calloc(r->elements ? r->elements : 1, sizeof *v);
    if (!v) return fail(dq, DELAYQ_E_NOMEM, "out of memory");
    for (size_t i = 0; i < r->elements; i++) {
        if (!(v[i] = dup_str(r->element[i]))) {
            delayq_strings_free(v, i);
            return fail(dq, DELAYQ_E_NOMEM, "out of memory");
        }
    }
    *out = v;
    *n = r->elements;
    return DELAYQ_OK;
}

int delayq_list(delayq *dq, const char *topic, const char *state, int64_t count,
                const char *cursor, char ***ids, size_t *n, char **next_cursor) {
    *ids = NULL;
    *n = 0;
    *next_cursor = NULL;
    if (!state || !*state) return fail(dq, DELAYQ_E_ARG, "missing state");
    struct argv a;
    if (start_cmd(dq, &a, "LIST", topic, NULL, false) != DELAYQ_OK) return DELAYQ_ERR;
    av_add(&a, state);
    if (count > 0) av_addll(&a, "COUNT", count);
    if (cursor) av_add(&a, "CURSOR"), av_add(&a, cursor);
    redisReply *r = send_av(dq, &a, 0);
    if (!r) return DELAYQ_ERR;
    static const char shape[] = "[cursor, [id ...]]";
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        !(is_str(r->element[0]) || r->element[0]->type == REDIS_REPLY_INTEGER) ||
        r->element[1]->type != REDIS_REPLY_ARRAY)
        return bad_reply(dq, r, "LIST", shape);
    const redisReply *cur = r->element[0];
    char num[24];
    if (cur->type == REDIS_REPLY_INTEGER) snprintf(num, sizeof num, "%lld", cur->integer);
    char *next = cur->type == REDIS_REPLY_INTEGER ? strdup(num) : dup_str(cur);
    if (!next) {
        freeReplyObject(r);
        return fail(dq, DELAYQ_E_NOMEM, "out of memory");
    }
    int rc = strings_of(dq, r->element[1], "LIST", ids, n);
    freeReplyObject(r);
    if (rc != DELAYQ_OK) {
        free(next);
        return rc;
    }
    *next_cursor = next;
    return DELAYQ_OK;
}

int delayq_topics(delayq *dq, char ***topics, size_t *n) {
    *topics = NULL;
    *n = 0;
    struct argv a;
    av_init(&a);
    av_add(&a, "TOPICS");
    redisReply *r = send_av(dq, &a, 0);
    if (!r) return DELAYQ_ERR;
    if (r->type != REDIS_REPLY_ARRAY) return bad_reply(dq, r, "TOPICS", "an array");
    int rc = strings_of(dq, r, "TOPICS", topics, n);
    freeReplyObject(r);
    return rc;
}

const char *const delayq_stats_fields[DELAYQ_STATS_N] = {
    "jobs_delayed", "jobs_ready", "jobs_reserved", "jobs_dead", "added",   "reserved",
    "acked",        "nacked",     "expired",       "dead",      "deleted", "kicked",
};

int delayq_stats(delayq *dq, const char *topic, struct delayq_stats *st) {
    memset(st, 0, sizeof *st);
    struct argv a;
    av_init(&a);
    av_add(&a, "STATS");
    if (topic) av_add(&a, topic);
    redisReply *r = send_av(dq, &a, 0);
    if (!r) return DELAYQ_ERR;
    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2)
        return bad_reply(dq, r, "STATS", "field/value pairs");
    int64_t *f = (int64_t *)st;
    for (size_t i = 0; i < r->elements; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        if (!is_str(k)) return bad_reply(dq, r, "STATS", "field names");
        if (v->type != REDIS_REPLY_INTEGER) continue;
        for (int s = 0; s < DELAYQ_STATS_N; s++)
            if (!strcmp(k->str, delayq_stats_fields[s])) f[s] = v->integer;
    }
    freeReplyObject(r);
    return DELAYQ_OK;
}

int delayq_ping(delayq *dq, const char *msg, char **reply) {
    if (reply) *reply = NULL;
    struct argv a;
    av_init(&a);
    av_add(&a, "PING");
    if (msg) av_add(&a, msg);
    return str_reply(dq, &a, "PING", reply, NULL);
}

int delayq_info(delayq *dq, const char *section, char **text, size_t *len) {
    *text = NULL;
    struct argv a;
    av_init(&a);
    av_add(&a, "INFO");
    if (section) av_add(&a, section);
    return str_reply(dq, &a, "INFO", text, len);
}
