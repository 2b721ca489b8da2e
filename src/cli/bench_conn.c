/* bench_conn.c -- one pipelined benchmark connection (see bench_conn.h).
 *
 * RESP replies are parsed by hiredis's reader with our own object functions:
 * instead of building redisReply trees (a malloc per element), they note
 * what the bench needs (the type, the text, the ids and body heads of the
 * jobs in a RESERVE reply) in the connection, so a reply costs no
 * allocation. beanstalkd's replies are lines, one of which (RESERVED) is
 * followed by a body; that parser is below.
 */
#include "cli/bench_conn.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include <event2/event.h>
#include <hiredis/read.h>

#include "lib/buf.h"
#include "lib/xalloc.h"
#include "proto/resp.h"

#define TEXT_MAX 512
#define READ_CHUNK (256 * 1024)

struct pending {
    uint64_t sent_ns; /* 0 until flushed */
    int kind;
};

/* A job of the reply being parsed, as offsets into conn.scratch (which may
 * move while the reply is parsed). */
struct job_off {
    size_t id_off, id_len, head_off, head_len, body_len;
};

struct bconn {
    int fd;
    enum bconn_proto proto;
    const struct bconn_handler *h;
    void *arg;
    struct event *rev, *wev;
    int wev_on;
    int dead;

    struct buf out;

    /* Ring of requests in flight, oldest at head; [head, stamped) have been
     * flushed, [stamped, tail) only appended. Positions grow without bound
     * and are taken modulo cap (a power of two). */
    struct pending *ring;
    size_t cap, head, stamped, tail;

    /* Reply being parsed. */
    redisReader *reader;
    struct buf in;         /* beanstalk: bytes received, not yet parsed */
    struct bconn_reply cur;
    size_t text_off, text_len;
    struct buf scratch;
    struct job_off *joff;
    size_t njobs, jcap;
    struct bconn_job *jobs;
    size_t jobs_cap;

    int stamps;         /* bconn_stamp_arrivals was called */
    long long rx_us;    /* the kernel's stamp of the last read */
};

uint64_t bconn_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- requests in flight ---------------------------------------------- */

static void ring_push(struct bconn *c, int kind) {
    if (c->tail - c->head == c->cap) {
        size_t ncap = c->cap ? c->cap * 2 : 256;
        struct pending *n = xmalloc(ncap * sizeof *n);
        for (size_t i = c->head; i < c->tail; i++)
            n[i & (ncap - 1)] = c->ring[i & (c->cap - 1)];
        free(c->ring);
        c->ring = n;
        c->cap = ncap;
    }
    struct pending *p = &c->ring[c->tail++ & (c->cap - 1)];
    p->kind = kind;
    p->sent_ns = 0;
}

size_t bconn_inflight(const struct bconn *c) {
    return c->tail - c->head;
}

/* ---- failure ---------------------------------------------------------- */

static void conn_fail(struct bconn *c, const char *why) {
    if (c->dead)
        return;
    c->dead = 1;
    event_del(c->rev);
    event_del(c->wev);
    c->wev_on = 0;
    c->h->fail(c, why, c->arg);
}

/* ---- reply delivery ---------------------------------------------------- */

static void reply_reset(struct bconn *c) {
    memset(&c->cur, 0, sizeof c->cur);
    c->text_off = c->text_len = 0;
    c->njobs = 0;
    c->scratch.off = c->scratch.len = 0;
}

/* Hands the parsed reply to the callback, as the answer to the oldest
 * request in flight. */
static void deliver(struct bconn *c, uint64_t now) {
    if (c->head == c->tail) {
        conn_fail(c, "reply without a request");
        return;
    }
    struct pending p = c->ring[c->head++ & (c->cap - 1)];
    if (c->njobs > c->jobs_cap) {
        c->jobs_cap = c->njobs * 2;
        c->jobs = xrealloc(c->jobs, c->jobs_cap * sizeof *c->jobs);
    }
    const char *base = c->scratch.p;
    for (size_t i = 0; i < c->njobs; i++) {
        c->jobs[i].id = base + c->joff[i].id_off;
        c->jobs[i].id_len = c->joff[i].id_len;
        c->jobs[i].head = base + c->joff[i].head_off;
        c->jobs[i].head_len = c->joff[i].head_len;
        c->jobs[i].body_len = c->joff[i].body_len;
    }
    c->cur.text = c->text_len ? base + c->text_off : "";
    c->cur.text_len = c->text_len;
    c->cur.njobs = c->njobs;
    c->cur.jobs = c->jobs;
    c->cur.rx_unix_us = c->rx_us;
    uint64_t lat = p.sent_ns && now > p.sent_ns ? now - p.sent_ns : 0;
    c->h->reply(c, p.kind, &c->cur, lat, c->arg);
    reply_reset(c);
}

static size_t scratch_put(struct bconn *c, const char *s, size_t n) {
    size_t off = c->scratch.len;
    buf_append(&c->scratch, s, n);
    return off;
}

static void set_text(struct bconn *c, const char *s, size_t n) {
    if (n > TEXT_MAX)
        n = TEXT_MAX;
    c->text_off = scratch_put(c, s, n);
    c->text_len = n;
}

static struct job_off *new_job(struct bconn *c) {
    if (c->njobs == c->jcap) {
        c->jcap = c->jcap ? c->jcap * 2 : 16;
        c->joff = xrealloc(c->joff, c->jcap * sizeof *c->joff);
    }
    struct job_off *j = &c->joff[c->njobs++];
    memset(j, 0, sizeof *j);
    return j;
}

/* ---- RESP, through hiredis's reader ------------------------------------ */

static struct bconn *task_conn(const redisReadTask *t, int *depth) {
    int d = 0;
    while (t->parent) {
        t = t->parent;
        d++;
    }
    *depth = d;
    return t->privdata;
}

static void *on_string(const redisReadTask *t, char *s, size_t len) {
    int depth;
    struct bconn *c = task_conn(t, &depth);
    if (depth == 0) {
        c->cur.type = t->type == REDIS_REPLY_ERROR    ? BR_ERROR
                      : t->type == REDIS_REPLY_STATUS ? BR_STATUS
                                                      : BR_STRING;
        set_text(c, s, len);
    } else if (depth == 2 && c->njobs > 0 && t->parent->idx + 1 == (int)c->njobs) {
        struct job_off *j = &c->joff[c->njobs - 1];
        if (t->idx == 1) {
            j->id_off = scratch_put(c, s, len);
            j->id_len = len;
        } else if (t->idx == 2) {
            size_t h = len < BCONN_HEAD_MAX ? len : BCONN_HEAD_MAX;
            j->head_off = scratch_put(c, s, h);
            j->head_len = h;
            j->body_len = len;
        }
    }
    return c;
}

static void *on_array(const redisReadTask *t, int elements) {
    int depth;
    struct bconn *c = task_conn(t, &depth);
    if (depth == 0) {
        c->cur.type = BR_ARRAY;
        c->cur.elements = elements;
    } else if (depth == 1) {
        new_job(c);
    }
    return c;
}

static void *on_integer(const redisReadTask *t, long long v) {
    int depth;
    struct bconn *c = task_conn(t, &depth);
    if (depth == 0) {
        c->cur.type = BR_INTEGER;
        c->cur.integer = v;
    }
    return c;
}

static void *on_nil(const redisReadTask *t) {
    int depth;
    struct bconn *c = task_conn(t, &depth);
    if (depth == 0)
        c->cur.type = BR_NIL;
    return c;
}

static void on_free(void *obj) {
    (void)obj; /* nothing was allocated */
}

static redisReplyObjectFunctions resp_fns = {
    on_string, on_array, on_integer, on_nil, on_free,
};

static void resp_input(struct bconn *c, const char *p, size_t n, uint64_t now) {
    if (redisReaderFeed(c->reader, p, n) != REDIS_OK) {
        conn_fail(c, "out of memory");
        return;
    }
    for (;;) {
        void *obj = NULL;
        if (redisReaderGetReply(c->reader, &obj) != REDIS_OK) {
            char msg[200];
            snprintf(msg, sizeof msg, "protocol error: %s", c->reader->errstr);
            conn_fail(c, msg);
            return;
        }
        if (obj == NULL)
            return;
        deliver(c, now);
        if (c->dead)
            return;
    }
}

/* ---- beanstalkd's text protocol ----------------------------------------- */

static int word_is(const char *p, size_t n, const char *w) {
    size_t wl = strlen(w);
    return n >= wl && memcmp(p, w, wl) == 0 && (n == wl || p[wl] == ' ');
}

/* Parses one reply at c->in; returns bytes taken, 0 if incomplete, -1 bad. */
static long beanstalk_one(struct bconn *c) {
    const char *p = c->in.p + c->in.off;
    size_t n = buf_unread(&c->in);
    const char *eol = memmem(p, n, "\r\n", 2);
    if (!eol)
        return n > 4096 ? -1 : 0;
    size_t ll = (size_t)(eol - p);
    size_t took = ll + 2;

    if (word_is(p, ll, "RESERVED") || word_is(p, ll, "FOUND") || word_is(p, ll, "OK")) {
        /* "RESERVED <id> <bytes>", "FOUND <id> <bytes>", "OK <bytes>" */
        char line[128];
        if (ll >= sizeof line)
            return -1;
        memcpy(line, p, ll);
        line[ll] = '\0';
        char id[64] = "";
        unsigned long long bytes;
        int ok = p[0] == 'O' ? sscanf(line, "OK %llu", &bytes) == 1
                             : sscanf(line, "%*s %63s %llu", id, &bytes) == 2;
        if (!ok)
            return -1;
        if (n < took + bytes + 2)
            return 0;
        const char *body = p + took;
        if (body[bytes] != '\r' || body[bytes + 1] != '\n')
            return -1;
        if (p[0] == 'O') {
            c->cur.type = BR_STRING;
            set_text(c, body, bytes);
        } else {
            c->cur.type = BR_ARRAY;
            c->cur.elements = 1;
            set_text(c, p, ll);
            struct job_off *j = new_job(c);
            j->id_len = strlen(id);
            j->id_off = scratch_put(c, id, j->id_len);
            j->head_len = bytes < BCONN_HEAD_MAX ? bytes : BCONN_HEAD_MAX;
            j->head_off = scratch_put(c, body, j->head_len);
            j->body_len = bytes;
        }
        return (long)(took + bytes + 2);
    }
    if (word_is(p, ll, "TIMED_OUT"))
        c->cur.type = BR_NIL;
    else if (word_is(p, ll, "INSERTED") || word_is(p, ll, "DELETED") ||
             word_is(p, ll, "USING") || word_is(p, ll, "WATCHING") ||
             word_is(p, ll, "TOUCHED") || word_is(p, ll, "RELEASED") ||
             word_is(p, ll, "KICKED"))
        c->cur.type = BR_STATUS;
    else
        c->cur.type = BR_ERROR;
    set_text(c, p, ll);
    return (long)took;
}

static void beanstalk_input(struct bconn *c, const char *p, size_t n, uint64_t now) {
    buf_append(&c->in, p, n);
    while (buf_unread(&c->in) > 0) {
        long took = beanstalk_one(c);
        if (took < 0) {
            conn_fail(c, "protocol error: malformed beanstalkd reply");
            return;
        }
        if (took == 0)
            break;
        buf_consume(&c->in, (size_t)took);
        deliver(c, now);
        if (c->dead)
            return;
    }
    if (c->in.off > 0)
        buf_compact(&c->in);
}

/* ---- socket I/O ---------------------------------------------------------- */

static void write_some(struct bconn *c) {
    while (buf_unread(&c->out) > 0) {
        ssize_t w = send(c->fd, c->out.p + c->out.off, buf_unread(&c->out), MSG_NOSIGNAL);
        if (w > 0) {
            buf_consume(&c->out, (size_t)w);
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        char msg[160];
        snprintf(msg, sizeof msg, "write: %s", strerror(errno));
        conn_fail(c, msg);
        return;
    }
    int want = buf_unread(&c->out) > 0;
    if (want && !c->wev_on)
        event_add(c->wev, NULL);
    else if (!want && c->wev_on)
        event_del(c->wev);
    c->wev_on = want;
}

void bconn_flush(struct bconn *c) {
    if (c->dead)
        return;
    if (c->stamped != c->tail) {
        uint64_t now = bconn_now_ns();
        for (size_t i = c->stamped; i < c->tail; i++)
            c->ring[i & (c->cap - 1)].sent_ns = now;
        c->stamped = c->tail;
    }
    if (!c->wev_on)
        write_some(c);
}

int bconn_stamp_arrivals(struct bconn *c) {
    int on = 1;
    if (setsockopt(c->fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on) != 0)
        return -1;
    c->stamps = 1;
    return 0;
}

/* recv, and with stamps on the kernel's arrival time of what was read (for
 * TCP, of the last segment taken: a stamp that is never early). */
static ssize_t read_stamped(struct bconn *c, char *p, size_t n) {
    if (!c->stamps) return recv(c->fd, p, n, 0);
    union {
        char buf[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {p, n};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1,
                       .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    ssize_t r = recvmsg(c->fd, &m, 0);
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); r > 0 && cm;
         cm = CMSG_NXTHDR(&m, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(cm), sizeof ts);
            c->rx_us = (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
        }
    }
    return r;
}

static void on_readable(evutil_socket_t fd, short what, void *arg) {
    struct bconn *c = arg;
    static char chunk[READ_CHUNK];
    ssize_t r = read_stamped(c, chunk, sizeof chunk);
    if (r == 0) {
        conn_fail(c, "connection closed by the server");
        return;
    }
    if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return;
        char msg[160];
        snprintf(msg, sizeof msg, "read: %s", strerror(errno));
        conn_fail(c, msg);
        return;
    }
    uint64_t now = bconn_now_ns();
    if (c->proto == BCONN_RESP)
        resp_input(c, chunk, (size_t)r, now);
    else
        beanstalk_input(c, chunk, (size_t)r, now);
    if (!c->dead && c->stamped != c->tail)
        bconn_flush(c);
}

static void on_writable(evutil_socket_t fd, short what, void *arg) {
    struct bconn *c = arg;
    c->wev_on = 1; /* the event is pending (persistent) */
    write_some(c);
}

/* ---- requests ------------------------------------------------------------ */

void bconn_cmd(struct bconn *c, int kind, int argc, const char *const *argv,
               const size_t *lens) {
    resp_array(&c->out, (size_t)argc);
    for (int i = 0; i < argc; i++) resp_bulk(&c->out, argv[i], lens[i]);
    ring_push(c, kind);
}

void bconn_raw(struct bconn *c, int kind, const void *a, size_t alen,
               const void *b, size_t blen, const void *d, size_t dlen) {
    if (a)
        buf_append(&c->out, a, alen);
    if (b)
        buf_append(&c->out, b, blen);
    if (d)
        buf_append(&c->out, d, dlen);
    ring_push(c, kind);
}

/* ---- life cycle ------------------------------------------------------------ */

struct bconn *bconn_open(struct event_base *base, const char *host, int port,
                         enum bconn_proto proto, const struct bconn_handler *h,
                         void *arg, char *err, size_t errlen) {
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, portstr, &hints, &ai);
    if (rc != 0) {
        snprintf(err, errlen, "%s:%d: %s", host, port, gai_strerror(rc));
        return NULL;
    }
    int fd = -1, saved = 0;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        snprintf(err, errlen, "connect %s:%d: %s", host, port, strerror(saved));
        return NULL;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);

    struct bconn *c = xcalloc(1, sizeof *c);
    c->fd = fd;
    c->proto = proto;
    c->h = h;
    c->arg = arg;
    c->rev = event_new(base, fd, EV_READ | EV_PERSIST, on_readable, c);
    c->wev = event_new(base, fd, EV_WRITE | EV_PERSIST, on_writable, c);
    if (proto == BCONN_RESP) {
        c->reader = redisReaderCreateWithFunctions(&resp_fns);
        if (c->reader)
            c->reader->privdata = c;
    }
    if (!c->rev || !c->wev || (proto == BCONN_RESP && !c->reader)) {
        snprintf(err, errlen, "out of memory");
        bconn_close(c);
        return NULL;
    }
    event_add(c->rev, NULL);
    return c;
}

void bconn_close(struct bconn *c) {
    if (!c)
        return;
    if (c->rev)
        event_free(c->rev);
    if (c->wev)
        event_free(c->wev);
    if (c->reader)
        redisReaderFree(c->reader);
    close(c->fd);
    buf_free(&c->out);
    buf_free(&c->in);
    buf_free(&c->scratch);
    free(c->ring);
    free(c->joff);
    free(c->jobs);
    free(c);
}
