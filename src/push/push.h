/* push.h -- push delivery (DESIGN §9): delayqd POSTs due jobs to their URL.
 *
 * The pusher is a consumer of the core like any front end: told by the core
 * which topics may hold ready push jobs, it reserves them (core_reserve_push,
 * lease = the job's TTR), POSTs each body to its URL through libcurl's multi
 * interface driven by the server's libevent loop (curl_multi_socket_action;
 * no thread, no blocking call), and settles the job by the answer:
 *
 *   2xx                          ACK
 *   429 or 503 with Retry-After  NACK with that delay (at most the backoff max)
 *   410 Gone                     dead at once
 *   other status, timeout,       NACK with the job's backoff
 *   connection or TLS error
 *   (retries exhausted)          dead (the NACK makes it so); logged once
 *
 * At most cfg->concurrency jobs of one topic are in the pusher's hands at a
 * time (from the reserve to the ACK/NACK), so a receiver that never answers
 * holds back only its own topic. Connections are kept alive and reused by
 * the multi handle. At most 256 transfers to one receiver (host:port) are
 * in curl at once; more wait in the pusher's queue for that receiver, their
 * timeout running. Redirects are not followed.
 *
 * Error convention: pusher_new returns NULL with a message; the rest cannot
 * fail (a failed delivery is an outcome, not an error).
 */
#ifndef DQ_PUSH_H
#define DQ_PUSH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct core;
struct event_base;
struct pusher;

struct pusher_config {
    const char *secrets;     /* --push-secret: comma-separated, NULL = none */
    const char *ca_file;     /* --push-ca: CA bundle for https, NULL = system */
    int64_t timeout_ms;      /* --push-timeout; capped by each job's TTR */
    uint32_t concurrency;    /* --push-concurrency: jobs per topic */
};

/* Starts pushing the core's push jobs on base (and looks once at every
 * topic, for jobs that were ready before it started). Strings in cfg must
 * outlive the pusher. NULL with a message in err (a bad secret, libcurl
 * or libcrypto failing to start). */
struct pusher *pusher_new(struct event_base *base, struct core *core,
                          const struct pusher_config *cfg, char *err,
                          size_t errlen);
/* Reserves nothing more; deliveries in flight go on. */
void pusher_stop(struct pusher *p);
/* True when nothing is in flight: no delivery, and no call to the core
 * (a reserve's jobs are delivered after pusher_stop). */
bool pusher_idle(const struct pusher *p);
/* Abandons what is in flight (those jobs come back when their lease ends)
 * and frees the pusher. Calls it made that the core completes later (the
 * core closes after it) find it gone and only free their own state.
 * Accepts NULL. */
void pusher_free(struct pusher *p);

/* Standard Webhooks signature of one message, for tests: writes
 * "v1,BASE64(HMAC-SHA256(key, id "." ts "." body))" (NUL-terminated) to
 * out, which has room for PUSH_SIG_MAX bytes. Returns 0, or -1. */
#define PUSH_SIG_MAX 64
int push_sign(const void *key, size_t keylen, const char *id, size_t idlen,
              int64_t ts, const void *body, size_t bodylen, char *out);

/* The seconds of a Retry-After value (delta-seconds or an HTTP date, as
 * of now_s), or -1 if it is neither. */
int64_t push_retry_after(const char *value, int64_t now_s);

#endif
