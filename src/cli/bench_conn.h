/* bench_conn.h -- one pipelined benchmark connection for `delayq bench`.
 *
 * A connection speaks RESP (delayq, Redis) or beanstalkd's text protocol over
 * TCP, on a libevent loop, with as many requests in flight as the caller
 * likes. The caller appends requests (bconn_cmd, bconn_raw), each tagged with
 * a small integer `kind` of its own choosing, and calls bconn_flush. Every
 * request is stamped with the monotonic time at which it was handed to the
 * socket; as replies arrive, in order, the reply callback gets each one with
 * the kind of the request it answers and its latency (send to reply).
 *
 * Replies of both protocols are given in one shape (struct bconn_reply):
 *   RESP                          beanstalkd
 *   +status      BR_STATUS        INSERTED id, DELETED, USING t, WATCHING n, OK
 *   -error       BR_ERROR         any other line (NOT_FOUND, JOB_TOO_BIG, ...)
 *   :integer     BR_INTEGER       -
 *   $bulk        BR_STRING        -
 *   $-1, *-1     BR_NIL           TIMED_OUT
 *   *array       BR_ARRAY         RESERVED id bytes + body (one job)
 * For an array whose elements are arrays (RESERVE's [topic, id, body, ...]),
 * `jobs` lists element 1 (id) and the head of element 2 (body) of each.
 *
 * Errors: bconn_open returns NULL and writes a message to err. A connection
 * that fails later (reset, EOF, protocol error) calls the fail callback once
 * and then stays inert until closed; no reply callback follows.
 * Memory: every pointer in a reply is valid only during the reply callback.
 */
#ifndef DQ_BENCH_CONN_H
#define DQ_BENCH_CONN_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct bconn;

enum bconn_proto { BCONN_RESP, BCONN_BEANSTALK };

enum bconn_type { BR_STATUS, BR_ERROR, BR_INTEGER, BR_STRING, BR_NIL, BR_ARRAY };

#define BCONN_HEAD_MAX 64 /* bytes of a job body kept in bconn_job.head */

struct bconn_job {
    const char *id;
    size_t id_len;
    const char *head;  /* the first min(body_len, BCONN_HEAD_MAX) bytes */
    size_t head_len;
    size_t body_len;
};

struct bconn_reply {
    enum bconn_type type;
    const char *text;  /* status/error/string text, or the beanstalk line; */
    size_t text_len;   /* cut at 512 bytes; "" for the other types */
    long long integer; /* BR_INTEGER */
    long long elements;/* BR_ARRAY: element count */
    size_t njobs;
    const struct bconn_job *jobs;
    /* When the kernel received the last bytes of this reply (unix time, us;
     * see bconn_stamp_arrivals), or 0. Unlike the time the callback runs,
     * it does not include this process's own scheduling delays. */
    long long rx_unix_us;
};

struct bconn_handler {
    /* One reply, answering a request of `kind`, latency_ns after it was sent.
     * May append and flush requests on c; must not close c. */
    void (*reply)(struct bconn *c, int kind, const struct bconn_reply *r,
                  uint64_t latency_ns, void *arg);
    /* c has failed for good (why: a message). Must not close c. */
    void (*fail)(struct bconn *c, const char *why, void *arg);
};

/* Asks the kernel to stamp every read with the time the bytes arrived
 * (SO_TIMESTAMPNS), reported in bconn_reply.rx_unix_us. Returns 0, or -1 if
 * the socket refuses. */
int bconn_stamp_arrivals(struct bconn *c);

/* Connects (blocking; loopback connects at once) to host:port, sets
 * TCP_NODELAY and non-blocking mode and registers with base. h must outlive
 * the connection; arg is passed to its callbacks. Returns NULL with a
 * message in err[errlen] on failure. */
struct bconn *bconn_open(struct event_base *base, const char *host, int port,
                         enum bconn_proto proto, const struct bconn_handler *h,
                         void *arg, char *err, size_t errlen);

/* Closes the socket and frees c, dropping requests in flight. Accepts NULL. */
void bconn_close(struct bconn *c);

/* Appends one RESP request (a multibulk of argc arguments). */
void bconn_cmd(struct bconn *c, int kind, int argc, const char *const *argv,
               const size_t *lens);

/* Appends one request given as raw bytes (beanstalk: "put ...\r\nbody\r\n"),
 * in up to three parts (NULL parts are skipped); it must draw one reply. */
void bconn_raw(struct bconn *c, int kind, const void *a, size_t alen,
               const void *b, size_t blen, const void *d, size_t dlen);

/* Stamps the appended requests with the current time and writes what the
 * socket takes; the rest goes when it is writable. Called automatically
 * after each batch of replies, so reply callbacks only need to append. */
void bconn_flush(struct bconn *c);

/* Requests sent or appended whose reply has not arrived. */
size_t bconn_inflight(const struct bconn *c);

/* Monotonic clock in ns, the clock of the latencies. */
uint64_t bconn_now_ns(void);

#endif
