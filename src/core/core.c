/* core.c -- requests: validation, defaults, the clock, the store call.
 *
 * Each request function checks its fields, fills what the client left out,
 * and calls the store with a `struct call` as privdata; the call records
 * the command's duration in the metrics table (and, for RESERVE, how late
 * each job was handed out) before the front end's callback sees the result.
 * Calls are kept for reuse: a pipeline of ADDs would otherwise cost a malloc
 * and a free per request.
 */
#include <event2/event.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core_int.h"
#include "lib/clock.h"
#include "lib/url.h"
#include "lib/xalloc.h"

/* --- calls -------------------------------------------------------------- */

struct call {
    struct call *next; /* in the free list */
    struct core *core;
    core_cb *cb;
    void *pd;
    int64_t start_us;
    int cmd; /* enum metrics_cmd */
};

#define CALL_CACHE_MAX 4096

static struct call *call_new(struct core *c, int cmd, core_cb *cb, void *pd) {
    struct call *k = c->calls;
    if (k) {
        c->calls = k->next;
        c->ncalls--;
    } else {
        k = xmalloc(sizeof *k);
    }
    k->core = c;
    k->cb = cb;
    k->pd = pd;
    k->cmd = cmd;
    k->start_us = clock_mono_us();
    return k;
}

static void call_free(struct call *k) {
    struct core *c = k->core;
    if (c->ncalls < CALL_CACHE_MAX) {
        k->next = c->calls;
        c->calls = k;
        c->ncalls++;
    } else {
        dq_free(k);
    }
}

/* The store's completion: metrics, then the front end's callback. */
static void call_done(void *pd, const struct dq_result *res) {
    struct call *k = pd;
    core_cb *cb = k->cb;
    void *upd = k->pd;
    metrics_command(k->core->metrics, k->cmd, clock_mono_us() - k->start_us,
                    res->status);
    core_note_store(k->core, res->status);
    call_free(k);
    cb(upd, res);
}

/* --- validation ----------------------------------------------------------- */

/* Completes the request with `status` and a message naming the field. */
static void fail(struct core *c, core_cb *cb, void *pd, int status,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void fail(struct core *c, core_cb *cb, void *pd, int status,
                 const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errbuf, sizeof c->errbuf, fmt, ap);
    va_end(ap);
    struct dq_result res = {.status = status, .errmsg = c->errbuf};
    cb(pd, &res);
}

static int clip(size_t len) { return (int)(len > 40 ? 40 : len); }

static bool check_topic(struct core *c, struct dq_str t, core_cb *cb,
                        void *pd) {
    bool ok = t.len >= 1 && t.len <= DQ_TOPIC_MAX;
    for (size_t i = 0; ok && i < t.len; i++) {
        unsigned char ch = (unsigned char)t.p[i];
        ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
             (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == ':' ||
             ch == '-';
    }
    if (!ok)
        fail(c, cb, pd, DQ_INVALID,
             "invalid topic '%.*s': expected 1-%d characters of "
             "[A-Za-z0-9._:-]",
             clip(t.len), t.p, DQ_TOPIC_MAX);
    return ok;
}

/* Whether v is min..max bytes of printable ASCII, the space included only
 * if `space`. */
static bool printable(struct dq_str v, size_t min, size_t max, bool space) {
    if (v.len < min || v.len > max) return false;
    char lo = space ? ' ' : ' ' + 1;
    for (size_t i = 0; i < v.len; i++)
        if (v.p[i] < lo || v.p[i] >= 127) return false;
    return true;
}

static bool check_id(struct core *c, struct dq_str id, core_cb *cb, void *pd) {
    bool ok = printable(id, 1, DQ_ID_MAX, false);
    if (!ok)
        fail(c, cb, pd, DQ_INVALID,
             "invalid id: expected 1-%d printable ASCII characters without "
             "spaces",
             DQ_ID_MAX);
    return ok;
}

static bool check_key(struct core *c, struct dq_str topic,
                      const struct dq_str *ids, size_t nids, core_cb *cb,
                      void *pd) {
    if (!check_topic(c, topic, cb, pd)) return false;
    for (size_t i = 0; i < nids; i++)
        if (!check_id(c, ids[i], cb, pd)) return false;
    return true;
}

/* v (unless unset) in [min, max], else an error naming `what`. */
static bool check_range(struct core *c, int64_t v, const char *what,
                        int64_t min, int64_t max, core_cb *cb, void *pd) {
    if (v == CORE_UNSET || (v >= min && v <= max)) return true;
    fail(c, cb, pd, DQ_INVALID,
         "invalid %s %" PRId64 ": expected an integer from %" PRId64
         " to %" PRId64,
         what, v, min, max);
    return false;
}

/* The push fields of an ADD: an absolute http(s) URL whose host
 * --push-allow admits, and a printable content type. */
static bool check_push(struct core *c, const struct core_add *a, core_cb *cb,
                       void *pd) {
    if (a->url.len == 0) {
        if (a->content_type.len == 0) return true;
        fail(c, cb, pd, DQ_INVALID, "content-type needs a url");
        return false;
    }
    if (!c->ops->reserve_push) {
        fail(c, cb, pd, DQ_INVALID,
             "url: push delivery is not available with the %s store",
             c->ops->name);
        return false;
    }
    struct url_parts u;
    const char *why = a->url.len > DQ_URL_MAX
                          ? "longer than 2048 bytes"
                          : url_split(a->url.p, a->url.len, &u);
    if (why) {
        fail(c, cb, pd, DQ_INVALID, "invalid url '%.*s': %s",
             clip(a->url.len), a->url.p, why);
        return false;
    }
    if (!core_push_allowed(c, (struct dq_str){u.host, u.host_len})) {
        fail(c, cb, pd, DQ_INVALID,
             "url: host '%.*s' is not allowed by --push-allow",
             clip(u.host_len), u.host);
        return false;
    }
    bool ok = printable(a->content_type, 0, DQ_CTYPE_MAX, true);
    if (!ok)
        fail(c, cb, pd, DQ_INVALID,
             "invalid content-type: expected up to %d printable ASCII "
             "characters",
             DQ_CTYPE_MAX);
    return ok;
}

bool core_push_allowed(const struct core *c, struct dq_str host) {
    return url_host_allowed(c->cfg.push_allow, host.p, host.len);
}

/* --- requests ------------------------------------------------------------- */

void core_add(struct core *c, const struct core_add *a, core_cb *cb,
              void *pd) {
    bool gen = a->id.len == 1 && a->id.p[0] == '*';
    if (!check_topic(c, a->topic, cb, pd) ||
        (!gen && !check_id(c, a->id, cb, pd)))
        return;
    if (a->body.len > c->cfg.max_body) {
        fail(c, cb, pd, DQ_TOOBIG, "body is %zu bytes, --max-body is %" PRIu64,
             a->body.len, c->cfg.max_body);
        return;
    }
    int64_t now = clock_ms();
    if (!check_range(c, a->delay, "delay", 0, DQ_DUE_AHEAD_MAX, cb, pd) ||
        !check_range(c, a->at, "at", 0, now + DQ_DUE_AHEAD_MAX, cb, pd) ||
        !check_range(c, a->ttr, "ttr", 1, DQ_TTR_MAX, cb, pd) ||
        !check_range(c, a->retries, "retries", 0, DQ_RETRIES_MAX, cb, pd))
        return;
    if (!check_push(c, a, cb, pd)) return;
    if (a->delay != CORE_UNSET && a->at != CORE_UNSET) {
        fail(c, cb, pd, DQ_INVALID, "delay and at cannot be used together");
        return;
    }
    struct dq_add r = {
        .topic = a->topic,
        .id = a->id,
        .body = a->body,
        .due = now,
        .ttr = a->ttr == CORE_UNSET ? DQ_TTR_DEFAULT : (uint32_t)a->ttr,
        .retries = a->retries == CORE_UNSET ? DQ_RETRIES_DEFAULT
                                            : (uint32_t)a->retries,
        .backoff = {DQ_BACKOFF_EXP, DQ_BACKOFF_BASE_DEFAULT,
                    DQ_BACKOFF_MAX_DEFAULT},
        .replace = a->replace,
        .now = now,
        .url = a->url,
        .content_type = a->content_type,
    };
    if (a->delay != CORE_UNSET) r.due = now + a->delay;
    if (a->at != CORE_UNSET && a->at > now) r.due = a->at;
    if (a->backoff_kind == DQ_BACKOFF_FIXED) {
        if (!check_range(c, a->backoff_base, "backoff fixed", 0,
                         DQ_BACKOFF_LIMIT, cb, pd))
            return;
        r.backoff = (struct dq_backoff){DQ_BACKOFF_FIXED,
                                        (uint32_t)a->backoff_base, 0};
    } else if (a->backoff_kind == DQ_BACKOFF_EXP) {
        if (a->backoff_base == CORE_UNSET || a->backoff_max == CORE_UNSET) {
            fail(c, cb, pd, DQ_INVALID,
                 "backoff exp needs a base and a max (ms)");
            return;
        }
        if (!check_range(c, a->backoff_base, "backoff exp base", 1,
                         DQ_BACKOFF_LIMIT, cb, pd) ||
            !check_range(c, a->backoff_max, "backoff exp max", a->backoff_base,
                         DQ_BACKOFF_LIMIT, cb, pd))
            return;
        r.backoff = (struct dq_backoff){DQ_BACKOFF_EXP,
                                        (uint32_t)a->backoff_base,
                                        (uint32_t)a->backoff_max};
    } else if (a->backoff_kind != -1) {
        fail(c, cb, pd, DQ_INVALID, "invalid backoff: expected exp or fixed");
        return;
    }
    c->ops->add(c->store, &r, call_done, call_new(c, M_ADD, cb, pd));
}

void core_del(struct core *c, struct dq_str topic, const struct dq_str *ids,
              size_t nids, core_cb *cb, void *pd) {
    if (!check_key(c, topic, ids, nids, cb, pd)) return;
    for (size_t i = 0; i < nids; i++) core_push_note(c, topic, ids[i], NULL);
    c->ops->del(c->store, topic, ids, nids, call_done,
                call_new(c, M_DEL, cb, pd));
}

void core_get(struct core *c, struct dq_str topic, struct dq_str id,
              core_cb *cb, void *pd) {
    if (!check_key(c, topic, &id, 1, cb, pd)) return;
    c->ops->get(c->store, topic, id, call_done, call_new(c, M_GET, cb, pd));
}

void core_ack(struct core *c, struct dq_str topic, const struct dq_str *ids,
              size_t nids, core_cb *cb, void *pd) {
    if (!check_key(c, topic, ids, nids, cb, pd)) return;
    c->ops->ack(c->store, topic, ids, nids, call_done,
                call_new(c, M_ACK, cb, pd));
}

void core_nack(struct core *c, struct dq_str topic, struct dq_str id,
               int64_t delay, core_cb *cb, void *pd) {
    if (!check_key(c, topic, &id, 1, cb, pd) ||
        !check_range(c, delay, "delay", 0, DQ_DUE_AHEAD_MAX, cb, pd))
        return;
    c->ops->nack(c->store, topic, id, delay == CORE_UNSET ? -1 : delay,
                 call_done, call_new(c, M_NACK, cb, pd));
}

void core_bury(struct core *c, struct dq_str topic, struct dq_str id,
               core_cb *cb, void *pd) {
    if (!check_key(c, topic, &id, 1, cb, pd)) return;
    c->ops->nack(c->store, topic, id, DQ_NACK_DEAD, call_done,
                 call_new(c, M_NACK, cb, pd));
}

void core_touch(struct core *c, struct dq_str topic, struct dq_str id,
                int64_t ttr, core_cb *cb, void *pd) {
    if (!check_key(c, topic, &id, 1, cb, pd) ||
        !check_range(c, ttr, "ttr", 1, DQ_TTR_MAX, cb, pd))
        return;
    c->ops->touch(c->store, topic, id, ttr == CORE_UNSET ? 0 : (uint32_t)ttr,
                  call_done, call_new(c, M_TOUCH, cb, pd));
}

void core_kick(struct core *c, struct dq_str topic, int64_t count, core_cb *cb,
               void *pd) {
    if (!check_topic(c, topic, cb, pd) ||
        !check_range(c, count, "count", 1, INT64_MAX, cb, pd))
        return;
    c->ops->kick(c->store, topic, count == CORE_UNSET ? 0 : (uint64_t)count,
                 call_done, call_new(c, M_KICK, cb, pd));
}

void core_kick_job(struct core *c, struct dq_str topic, struct dq_str id,
                   core_cb *cb, void *pd) {
    if (!check_key(c, topic, &id, 1, cb, pd)) return;
    c->ops->kick_job(c->store, topic, id, call_done,
                     call_new(c, M_KICK, cb, pd));
}

void core_list(struct core *c, struct dq_str topic, struct dq_str state,
               int64_t count, uint64_t cursor, core_cb *cb, void *pd) {
    if (!check_topic(c, topic, cb, pd)) return;
    int st = dq_state_parse(state.p, state.len);
    if (st < 0) {
        fail(c, cb, pd, DQ_INVALID,
             "invalid state '%.*s': expected delayed, ready, reserved or dead",
             clip(state.len), state.p);
        return;
    }
    if (!check_range(c, count, "count", 1, DQ_COUNT_MAX, cb, pd)) return;
    c->ops->list(c->store, topic, st,
                 count == CORE_UNSET ? 10 : (uint32_t)count, cursor, call_done,
                 call_new(c, M_LIST, cb, pd));
}

void core_purge(struct core *c, struct dq_str topic, core_cb *cb, void *pd) {
    if (!check_topic(c, topic, cb, pd)) return;
    push_notes_drop_topic(c, topic);
    c->ops->purge(c->store, topic, call_done, call_new(c, M_PURGE, cb, pd));
}

/* STATS: the store's figures and the pusher's (from the metrics). */
struct stats_call {
    struct core *core;
    core_cb *cb;
    void *pd;
    size_t len;
    char topic[DQ_TOPIC_MAX];
};

static void stats_done(void *pd, const struct dq_result *res) {
    struct stats_call *sc = pd;
    struct dq_result r = *res;
    struct dq_stats st;
    if (res->status == DQ_OK && res->stats) {
        st = *res->stats;
        metrics_push_counts(sc->core->metrics,
                            (struct dq_str){sc->topic, sc->len}, &st.pushed,
                            &st.push_failed);
        r.stats = &st;
    }
    core_cb *cb = sc->cb;
    void *upd = sc->pd;
    dq_free(sc);
    cb(upd, &r);
}

void core_stats(struct core *c, struct dq_str topic, core_cb *cb, void *pd) {
    if (topic.len && !check_topic(c, topic, cb, pd)) return;
    struct stats_call *sc = xmalloc(sizeof *sc);
    *sc = (struct stats_call){.core = c, .cb = cb, .pd = pd, .len = topic.len};
    memcpy(sc->topic, topic.p, topic.len);
    c->ops->stats(c->store, topic, call_done,
                  call_new(c, M_STATS, stats_done, sc));
}

void core_topics(struct core *c, core_cb *cb, void *pd) {
    c->ops->topics(c->store, call_done, call_new(c, M_TOPICS, cb, pd));
}

struct core_wait *core_reserve(struct core *c, const struct dq_str *topics,
                               size_t ntopics, int64_t count,
                               int64_t timeout_ms, core_cb *cb, void *pd) {
    if (ntopics == 0) {
        fail(c, cb, pd, DQ_INVALID, "reserve needs at least one topic");
        return NULL;
    }
    for (size_t i = 0; i < ntopics; i++)
        if (!check_topic(c, topics[i], cb, pd)) return NULL;
    if (!check_range(c, count, "count", 1, DQ_COUNT_MAX, cb, pd) ||
        !check_range(c, timeout_ms, "timeout", 0, DQ_DUE_AHEAD_MAX, cb, pd))
        return NULL;
    if (timeout_ms == CORE_UNSET) timeout_ms = -1;
    if (c->stopping) timeout_ms = 0;
    return wait_reserve(c, topics, ntopics,
                        count == CORE_UNSET ? 1 : (uint32_t)count, timeout_ms,
                        cb, pd);
}

bool core_can_push(const struct core *c) { return c->ops->reserve_push != NULL; }

void core_reserve_push(struct core *c, struct dq_str topic, uint32_t count,
                       core_cb *cb, void *pd) {
    if (!c->ops->reserve_push) {
        fail(c, cb, pd, DQ_INVALID, "this store has no push delivery");
        return;
    }
    if (count > DQ_COUNT_MAX) count = DQ_COUNT_MAX;
    c->ops->reserve_push(c->store, topic, count, call_done,
                         call_new(c, M_RESERVE, cb, pd));
}

void core_set_push_ready(struct core *c,
                         void (*fn)(void *ud, struct dq_str topic,
                                    int64_t hint),
                         void *ud) {
    c->push_ready = fn;
    c->push_ud = ud;
}

/* Called by wait.c for every batch of jobs handed to a client. */
void core_handed_out(struct core *c, const struct dq_result *res) {
    if (res->njobs == 0) return;
    int64_t now_us = clock_us();
    for (size_t i = 0; i < res->njobs; i++)
        metrics_fire_lag(c->metrics, res->jobs[i].topic,
                         now_us - res->jobs[i].due * 1000);
}

/* --- the store and the loop ------------------------------------------------ */

static void on_ready(void *ud, struct dq_str topic, int64_t hint) {
    wait_on_ready(ud, topic, hint);
}

static void on_push_ready(void *ud, struct dq_str topic, int64_t hint) {
    struct core *c = ud;
    if (c->push_ready) c->push_ready(c->push_ud, topic, hint);
}

int core_open(struct core **out, const struct core_config *cfg, char *err,
              size_t errlen) {
    struct core *c = xcalloc(1, sizeof *c);
    c->cfg = *cfg;
    c->base = cfg->base;
    c->ops = cfg->ops;
    c->metrics = metrics_new(cfg->metrics_max_topics);
    c->waits = wait_table_new();
    c->notes = push_notes_new();
    struct dq_store_config sc = cfg->store;
    sc.base = cfg->base;
    sc.on_ready = on_ready;
    sc.on_push_ready = on_push_ready;
    sc.ud = c;
    if (c->ops->open(&c->store, &sc, err, errlen) != 0) {
        core_close(c);
        return -1;
    }
    *out = c;
    return 0;
}

void core_stop(struct core *c) {
    c->stopping = true;
    wait_wake_all(c);
}

void core_close(struct core *c) {
    if (!c) return;
    wait_wake_all(c);
    if (c->store) c->ops->close(c->store);
    c->store = NULL;
    wait_table_free(c->waits);
    push_notes_free(c->notes);
    metrics_free(c->metrics);
    while (c->calls) {
        struct call *k = c->calls;
        c->calls = k->next;
        dq_free(k);
    }
    dq_free(c);
}

uint64_t core_blocked(const struct core *c) { return wait_count(c); }

const char *core_status_message(int status) {
    static const char *const msgs[] = {
        [DQ_EXISTS] = "a job with this id already exists in the topic",
        [DQ_BUSY] = "the job is reserved and cannot be replaced",
        [DQ_NOTRESERVED] = "the job does not exist or is not reserved",
        [DQ_FULL] = "--max-jobs reached: delete or ack jobs first",
        [DQ_UNAVAILABLE] = "the store cannot be reached; nothing was changed",
        [DQ_IOERR] = "the write failed; nothing was changed",
        [DQ_NOMEM] = "out of memory; nothing was changed",
        [DQ_TIMEOUT] = "the store did not answer in time; the change may "
                       "or may not have happened",
        [DQ_NOTFOUND] = "no such job",
    };
    const char *m = status > 0 && status < (int)(sizeof msgs / sizeof msgs[0])
                        ? msgs[status] : NULL;
    return m ? m : "failed";
}

void core_store_info(struct core *c, dq_info_emit *emit, void *ud) {
    if (c->ops->info) c->ops->info(c->store, emit, ud);
}

const char *core_store_name(const struct core *c) { return c->ops->name; }

void core_push(struct core *c) {
    if (c->ops->push) c->ops->push(c->store);
}

void core_prefetch(struct core *c, const struct dq_str *keys, size_t n) {
    if (c->ops->prefetch) c->ops->prefetch(c->store, keys, n);
}

bool core_can_prefetch(const struct core *c) { return c->ops->prefetch != NULL; }

struct metrics *core_metrics(struct core *c) { return c->metrics; }

void core_note_store(struct core *c, int status) {
    c->store_down = status == DQ_UNAVAILABLE || status == DQ_TIMEOUT;
}

int64_t core_store_up(const struct core *c) { return c->store_down ? 0 : 1; }
