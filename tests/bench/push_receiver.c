/* push_receiver.c -- the webhook receiver of scripts/push-bench.
 *
 * A libevent evhttp server on 127.0.0.1:PORT that answers every POST with
 * 200 at once (mode "ok") or never (mode "hang"), and records for each
 * request its arrival time and its delayq-due header. After `expect`
 * requests (or on SIGTERM) it prints one line of JSON and exits:
 *   {"count":N,"first_us":...,"last_us":...,"rate":per-second,
 *    "lag_ms":{"p50":..,"p99":..,"max":..},"connections":C}
 * lag = arrival - due: an upper bound of "POST sent - due".
 *
 * Usage: push_receiver PORT ok|hang [expect]
 */
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct event_base *base;
static bool hang;
static long expect;
static long count, cap;
static double *lags;
static int64_t first_us, last_us;
static long conns; /* distinct connections seen (up to 4096) */
static struct evhttp_connection *seen[4096];

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double p) {
    if (count == 0) return 0;
    long i = (long)(p * (double)(count - 1) + 0.5);
    return lags[i];
}

static void report(void) {
    qsort(lags, (size_t)count, sizeof *lags, cmp);
    double secs = (double)(last_us - first_us) / 1e6;
    printf("{\"count\":%ld,\"first_us\":%lld,\"last_us\":%lld,\"rate\":%.0f,"
           "\"lag_ms\":{\"p50\":%.3f,\"p99\":%.3f,\"p999\":%.3f,\"max\":%.3f},"
           "\"connections\":%ld}\n",
           count, (long long)first_us, (long long)last_us,
           secs > 0 ? (double)(count - 1) / secs : 0, pct(0.5), pct(0.99),
           pct(0.999), count ? lags[count - 1] : 0, conns);
    fflush(stdout);
}

static void on_request(struct evhttp_request *req, void *arg) {
    int64_t t = now_us();
    const char *due = evhttp_find_header(evhttp_request_get_input_headers(req),
                                         "delayq-due");
    if (count == cap) {
        cap = cap ? cap * 2 : 1 << 16;
        lags = realloc(lags, (size_t)cap * sizeof *lags);
    }
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    bool known = false;
    for (long i = 0; i < conns && !known; i++) known = seen[i] == c;
    if (!known && conns < 4096) seen[conns++] = c;
    if (!first_us) first_us = t;
    last_us = t;
    lags[count++] = due ? (double)t / 1000.0 - (double)atoll(due) : 0;
    if (!hang) {
        struct evbuffer *b = evbuffer_new();
        evbuffer_add(b, "ok", 2);
        evhttp_send_reply(req, 200, "OK", b);
        evbuffer_free(b);
    }
    if (expect && count >= expect) event_base_loopexit(base, NULL);
}

static void on_term(evutil_socket_t s, short w, void *a) {
    event_base_loopexit(base, NULL);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s PORT ok|hang [expect]\n", argv[0]);
        return 2;
    }
    hang = strcmp(argv[2], "hang") == 0;
    expect = argc > 3 ? atol(argv[3]) : 0;
    base = event_base_new();
    struct evhttp *h = evhttp_new(base);
    evhttp_set_gencb(h, on_request, NULL);
    evhttp_set_timeout(h, 3600);
    if (evhttp_bind_socket(h, "127.0.0.1", (ev_uint16_t)atoi(argv[1])) != 0) {
        fprintf(stderr, "cannot bind port %s\n", argv[1]);
        return 1;
    }
    struct event *term = evsignal_new(base, SIGTERM, on_term, NULL);
    evsignal_add(term, NULL);
    fprintf(stderr, "ready\n");
    event_base_dispatch(base);
    report();
    return 0;
}
