/* embedded.c -- the embedded store: the engine on the server's loop.
 *
 * Every operation runs on the engine at once, in arrival order, so the
 * engine always holds the newest state. Its completion is not called yet:
 * the result is copied into the current batch, and the batch completes from
 * the commit event, which runs at the end of the loop iteration (it is
 * activated with no fd, so libevent queues it behind every I/O callback that
 * was already active). That is where the log's group commit goes: one write
 * (and with --fsync always one fdatasync) for every change of the iteration,
 * then every reply of the iteration.
 *
 * Timed transitions (due times, lease ends) run from one timer armed at the
 * engine's next expiry, so the loop sleeps exactly until then. A large burst
 * is applied in budgeted steps with I/O served in between.
 *
 * Ready notifications from the engine are queued and handed to the server
 * after the engine call returns, because the server answers them by calling
 * reserve, which must not run inside the engine.
 *
 * The log (store/wal.h): every change appends records describing the
 * engine's new state; the commit event writes them (wal_commit) before it
 * completes the batch. If that write fails, every change of the batch fails
 * with DQ_IOERR and the engine is rebuilt from the log, so memory never holds
 * what the log does not; while the log stays unwritable, changes are refused
 * at once and reads go on.
 *
 * Far jobs (store/tier.h): an ADD due beyond the memory horizon writes the
 * whole job to its window's far segment and keeps only its id in the
 * engine (a FAR record in the log). The commit writes the segments first,
 * then the log. A loading event reads the segments of windows that opened
 * into the engine, a few thousand records per loop turn, logging each job
 * as a LOAD record; a segment read to its end is deleted after a commit
 * once the log is synced.
 *
 * Two side jobs live in their own files, sharing embedded_int.h: giving
 * memory back (embedded_mem.c: freeing purged jobs between I/O, trimming
 * the heap) and the far jobs' --repair walk at open (embedded_repair.c).
 */
#include <event2/event.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "lib/xalloc.h"
#include "store/embedded_int.h"
#include "store/result.h"
#include "store/store.h"
#include "store/tier.h"
#include "store/wal.h"

#define ADVANCE_BUDGET 8192 /* jobs moved per timer callback */
#define LOAD_BUDGET 512     /* far records read per loading step (~0.2 ms) */

static int64_t now_ms(struct dq_store *s) {
    return s->cfg.clock ? s->cfg.clock(s->cfg.ud) : clock_ms();
}

/* --- the batch ---------------------------------------------------------- */

/* Queues a completion in the current batch; returns its result to fill. */
static struct res *pend_push(struct dq_store *s, dq_store_cb *cb, void *pd,
                             int status) {
    struct batch *b = &s->cur;
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 64;
        b->items = xrealloc(b->items, b->cap * sizeof *b->items);
    }
    struct pending *p = &b->items[b->n++];
    p->cb = cb;
    p->pd = pd;
    p->change = false;
    res_start(&p->r, status);
    if (b->n == 1) event_active(s->commit_ev, 0, 0);
    return &p->r;
}

static void arm_timer(struct dq_store *s);
static void arm_load(struct dq_store *s);
static void unlink_check(struct dq_store *s);
static void after_change(struct dq_store *s);

/* Rebuilds the engine from the log after a failed commit. Without it memory
 * would hold changes the log does not; if even that fails, the process
 * cannot go on consistently, and a restart recovers from the log. */
static void reload(struct dq_store *s) {
    char err[512] = "out of memory";
    struct engine *e = engine_new(&s->ec, 0);
    s->recovering = true;
    tier_recount_begin(s->tier);
    int rc = e ? wal_reload(s->wal, e, now_ms(s), err, sizeof err) : -1;
    s->recovering = false;
    if (rc != 0) {
        log_error("cannot rebuild the engine from the log: %s", err);
        abort();
    }
    engine_free(s->eng);
    s->eng = e;
    event_del(s->timer_ev);
    s->timer_at = INT64_MAX;
    arm_timer(s);
    tier_rewind(s->tier); /* loads that were not logged are redone */
    tier_recount_end(s->tier);
    arm_load(s);
    em_reap_soon(s);
}

/* Writes the log for everything in the batch; if that fails, fails the
 * batch's changes and rebuilds the engine. */
void em_commit_log(struct dq_store *s) {
    if (!s->wal || !wal_pending(s->wal)) return;
    /* far segments first: a FAR record in the log names a written record */
    if (tier_write(s->tier) != 0)
        wal_fail_batch(s->wal, errno);
    else if (wal_commit(s->wal) == 0) {
        wal_maybe_compact(s->wal, s->eng, false);
        if (tier_created(s->tier)) arm_load(s);
        unlink_check(s);
        return;
    }
    const char *msg = wal_last_error(s->wal) == ENOMEM
                          ? "out of memory writing the log; nothing was "
                            "changed"
                          : "the log write failed (disk full or I/O error); "
                            "nothing was changed";
    for (size_t i = 0; i < s->cur.n; i++) {
        struct pending *p = &s->cur.items[i];
        if (!p->change) continue;
        res_clear(&p->r);
        p->r.n = 0;
        p->r.status = DQ_IOERR;
        p->r.errmsg = msg;
    }
    reload(s);
}

/* Completes the current batch. Callbacks may issue new operations: those go
 * into a fresh batch, completed by the next commit event. */
static void commit(struct dq_store *s) {
    em_commit_log(s);
    if (s->cur.n == 0) return;
    struct batch b = s->cur;
    memset(&s->cur, 0, sizeof s->cur);
    for (size_t i = 0; i < b.n; i++)
        res_fire(&b.set, &b.items[i].r, b.items[i].cb, b.items[i].pd);
    /* keep the larger buffers for the next batch if it is still empty */
    if (s->cur.n == 0 && s->cur.cap == 0 && s->cur.set.bytes.cap == 0 &&
        s->cur.set.items.cap == 0) {
        b.n = 0;
        res_reset(&b.set, 1 << 20);
        s->cur = b;
    } else {
        dq_free(b.items);
        res_free(&b.set);
    }
}

static void commit_cb(evutil_socket_t fd, short what, void *arg) {
    commit(arg);
}

static void emb_prefetch(struct dq_store *s, const struct dq_str *keys,
                         size_t n) {
    engine_prefetch(s->eng, keys, n);
}

/* The commit event would run later in this loop turn anyway; running it now
 * costs one more pwrite and lets the replies go out sooner. Under --fsync
 * always it would cost one more fdatasync, so the batch waits. */
static void emb_push(struct dq_store *s) {
    if (s->cfg.fsync_mode != DQ_FSYNC_ALWAYS) commit(s);
}

/* --- timing and ready notifications ------------------------------------- */

static void flush_ready(struct dq_store *s) {
    if (s->nnotes == 0 || s->in_engine || !s->cfg.on_ready) return;
    /* Take the list: the server's reserve calls may queue new notes. */
    struct ready_note *notes = s->notes;
    size_t n = s->nnotes, cap = s->notes_cap;
    struct buf names = s->ready_names;
    s->notes = NULL;
    s->nnotes = s->notes_cap = 0;
    memset(&s->ready_names, 0, sizeof s->ready_names);
    for (size_t i = 0; i < n; i++) {
        struct dq_str t = {names.p + notes[i].off, notes[i].len};
        if (!notes[i].push)
            s->cfg.on_ready(s->cfg.ud, t, notes[i].hint);
        else if (s->cfg.on_push_ready)
            s->cfg.on_push_ready(s->cfg.ud, t, notes[i].hint);
    }
    if (s->notes_cap == 0 && s->ready_names.cap == 0) {
        /* nothing new was queued: keep the memory for next time */
        s->notes = notes;
        s->notes_cap = cap;
        buf_reset(&names, 1 << 16);
        s->ready_names = names;
    } else {
        dq_free(notes);
        buf_free(&names);
    }
}

static void note_ready(void *ud, struct dq_str topic, uint64_t ready,
                       bool push) {
    struct dq_store *s = ud;
    if (s->recovering) return;
    if (s->nnotes == s->notes_cap) {
        s->notes_cap = s->notes_cap ? s->notes_cap * 2 : 16;
        s->notes = xrealloc(s->notes, s->notes_cap * sizeof *s->notes);
    }
    struct ready_note *n = &s->notes[s->nnotes++];
    n->off = s->ready_names.len;
    n->len = topic.len;
    n->hint = (int64_t)ready;
    n->push = push;
    buf_append(&s->ready_names, topic.p, topic.len);
}

static void on_engine_ready(void *ud, struct dq_str topic, uint64_t ready) {
    note_ready(ud, topic, ready, false);
}

static void on_engine_push_ready(void *ud, struct dq_str topic,
                                 uint64_t ready) {
    note_ready(ud, topic, ready, true);
}

static void on_engine_expire(void *ud, const struct dq_job *job, bool dead) {
    struct dq_store *s = ud;
    (void)dead;
    if (s->recovering || !s->wal) return;
    struct wal_rec r = {.type = WAL_EXPIRE, .job = *job};
    wal_append(s->wal, &r);
    event_active(s->commit_ev, 0, 0); /* even if no operation is pending */
}

/* Far hooks keep each segment's count of live jobs, in recovery too. */
static void on_engine_far_drop(void *ud, uint64_t ref) {
    struct dq_store *s = ud;
    tier_drop(s->tier, ref);
}

static void on_engine_far_restore(void *ud, uint64_t ref) {
    struct dq_store *s = ud;
    tier_recount(s->tier, ref);
}

static void arm_timer(struct dq_store *s) {
    int64_t next = engine_next_expiry(s->eng);
    if (next == s->timer_at) return;
    if (next == INT64_MAX) {
        event_del(s->timer_ev);
        s->timer_at = INT64_MAX;
        return;
    }
    int64_t wait_us = next * 1000 - clock_us();
    if (s->cfg.clock) wait_us = (next - now_ms(s)) * 1000;
    if (wait_us < 0) wait_us = 0;
    struct timeval tv = {wait_us / 1000000, wait_us % 1000000};
    event_add(s->timer_ev, &tv);
    s->timer_at = next;
}

static void timer_cb(evutil_socket_t fd, short what, void *arg) {
    struct dq_store *s = arg;
    s->timer_at = INT64_MAX;
    s->in_engine = 1;
    bool more = engine_advance(s->eng, now_ms(s), ADVANCE_BUDGET);
    s->in_engine = 0;
    flush_ready(s);
    if (more) {
        /* Serve I/O before the next step: a zero timeout queues us behind
         * what the next poll finds. */
        struct timeval tv = {0, 0};
        event_add(s->timer_ev, &tv);
        s->timer_at = INT64_MIN;
    } else {
        arm_timer(s);
    }
}

/* --- loading far segments ------------------------------------------------- */

static int load_one(void *ud, const struct dq_job *j, uint64_t ref) {
    struct dq_store *s = ud;
    int rc = engine_load(s->eng, now_ms(s), j, ref);
    if (rc == 1) {
        struct wal_rec r = {.type = WAL_LOAD, .job = *j};
        wal_append(s->wal, &r);
    } else if (rc < 0) {
        log_error("out of memory loading a far job; it stays on disk");
    }
    return rc;
}

/* Compaction of a far segment: the job's record goes to a new place. */
static int move_one(void *ud, const struct dq_job *j, uint64_t from) {
    struct dq_store *s = ud;
    uint64_t ref, to;
    if (!engine_far_ref(s->eng, j->topic, j->id, &ref) || ref != from)
        return 0;
    if (tier_place(s->tier, j, &to) != 0) return 0;
    engine_far_move(s->eng, j->topic, j->id, from, to);
    struct wal_rec r = {.type = WAL_MOVE, .ref = to};
    r.job.topic = j->topic;
    r.job.id = j->id;
    wal_append(s->wal, &r);
    return 1;
}

/* Loaded (or compacted) segments are deleted once the records that made
 * them useless are durable: the sync thread's work, never an fdatasync on
 * the loop. Called after commits and from the loading event. */
static void unlink_check(struct dq_store *s) {
    if (!s->tier) return;
    if (s->unlink_pending && wal_durable(s->wal, s->unlink_mark) &&
        tier_unlink_ready(s->tier)) {
        tier_unlink_loaded(s->tier);
        s->unlink_pending = false;
    }
    if (!s->unlink_pending && !wal_pending(s->wal) &&
        tier_unlink_waiting(s->tier)) {
        tier_unlink_mark(s->tier);
        s->unlink_mark = wal_commit_mark(s->wal);
        s->unlink_pending = true;
        arm_load(s); /* to look again */
    }
}

static void arm_load(struct dq_store *s) {
    if (!s->tier || !s->load_ev) return;
    int64_t now = now_ms(s);
    int64_t at = tier_load_at(s->tier, now);
    if (s->unlink_pending && at > now + 250) at = now + 250; /* look again */
    if (at == s->load_at) return;
    event_del(s->load_ev);
    s->load_at = at;
    if (at == INT64_MAX) return;
    int64_t wait = at > now ? at - now : 0;
    struct timeval tv = {wait / 1000, (wait % 1000) * 1000};
    event_add(s->load_ev, &tv);
}

/* A loading step: a few thousand records, then the loop serves I/O. While
 * the log cannot be written nothing is loaded (LOAD records could not be
 * logged). */
static void load_cb(evutil_socket_t fd, short what, void *arg) {
    struct dq_store *s = arg;
    s->load_at = INT64_MAX;
    bool more = false;
    if (wal_writable(s->wal)) {
        s->in_engine = 1;
        more = tier_load_step(s->tier, now_ms(s), LOAD_BUDGET, load_one,
                              move_one, s);
        if (wal_pending(s->wal)) event_active(s->commit_ev, 0, 0);
        unlink_check(s);
        after_change(s);
    }
    if (more) {
        struct timeval tv = {0, 0};
        event_add(s->load_ev, &tv);
        s->load_at = INT64_MIN;
    } else if (!wal_writable(s->wal)) {
        struct timeval tv = {1, 0};
        event_add(s->load_ev, &tv);
        s->load_at = INT64_MIN;
    } else {
        arm_load(s);
    }
}

/* Applies transitions already due before an operation that depends on the
 * ready order, so a job due now queues before one added now. Leaves the
 * engine flag set for the operation that follows. */
static void catch_up(struct dq_store *s, int64_t now) {
    s->in_engine = 1;
    if (s->timer_at <= now && s->timer_at != INT64_MIN &&
        !engine_advance(s->eng, now, ADVANCE_BUDGET))
        s->timer_at = INT64_MAX; /* re-armed by after_change */
}

/* After every engine call that changes state. */
static void after_change(struct dq_store *s) {
    s->in_engine = 0;
    em_note_count(s);
    em_reap_soon(s);
    if (s->timer_at != INT64_MIN) arm_timer(s);
    flush_ready(s);
}

/* --- open and close ----------------------------------------------------- */

static void emb_close(struct dq_store *s) {
    if (!s) return;
    commit(s);
    commit(s);
    wal_close(s->wal);
    tier_close(s->tier);
    if (s->load_ev) event_free(s->load_ev);
    if (s->trim_ev) event_free(s->trim_ev);
    if (s->reap_ev) event_free(s->reap_ev);
    buf_free(&s->far_body);
    if (s->commit_ev) event_free(s->commit_ev);
    if (s->timer_ev) event_free(s->timer_ev);
    engine_free(s->eng);
    dq_free(s->cur.items);
    res_free(&s->cur.set);
    dq_free(s->notes);
    buf_free(&s->ready_names);
    dq_free(s);
}

static int emb_open(struct dq_store **out, const struct dq_store_config *cfg,
                    char *err, size_t errlen) {
    struct dq_store *s = dq_calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->cfg = *cfg;
    s->timer_at = INT64_MAX;
    s->load_at = INT64_MAX;
    s->ec = (struct engine_config){
        .max_jobs = cfg->max_jobs,
        .hooks = {.on_ready = on_engine_ready,
                  .on_push_ready = on_engine_push_ready,
                  .on_expire = on_engine_expire,
                  .on_far_drop = on_engine_far_drop,
                  .on_far_restore = on_engine_far_restore,
                  .ud = s},
    };
    /* The wheel starts at time 0, so the jobs recovery puts back line up by
     * due time when it first advances. */
    s->eng = engine_new(&s->ec, 0);
    s->commit_ev = event_new(cfg->base, -1, 0, commit_cb, s);
    s->timer_ev = evtimer_new(cfg->base, timer_cb, s);
    s->load_ev = evtimer_new(cfg->base, load_cb, s);
    s->trim_ev = evtimer_new(cfg->base, em_trim_cb, s);
    s->reap_ev = evtimer_new(cfg->base, em_reap_cb, s);
    if (!s->eng || !s->commit_ev || !s->timer_ev || !s->load_ev ||
        !s->trim_ev || !s->reap_ev) {
        snprintf(err, errlen, "out of memory");
        emb_close(s);
        return -1;
    }
    struct wal_config wc = {
        .dir = cfg->data_dir && *cfg->data_dir ? cfg->data_dir
                                               : "delayq-data",
        .fsync_mode = cfg->fsync_mode,
        .repair = cfg->repair,
        .base = cfg->base,
    };
    /* the far segments first: replaying the log counts their live jobs */
    struct tier_config tc = {
        .dir = wc.dir,
        .horizon_ms = cfg->memory_horizon_ms > 0 ? cfg->memory_horizon_ms : 0,
        .fsync_mode = cfg->fsync_mode,
    };
    if (tier_open(&s->tier, &tc, err, errlen) != 0) {
        emb_close(s);
        return -1;
    }
    s->recovering = true;
    tier_recount_begin(s->tier);
    int rc = wal_open(&s->wal, &wc, s->eng, now_ms(s), NULL, err, errlen);
    s->recovering = false;
    if (rc != 0) {
        s->wal = NULL;
        emb_close(s);
        return -1;
    }
    tier_recount_end(s->tier);
    size_t damaged = tier_check(s->tier);
    if (damaged && !cfg->repair) {
        char msg[512];
        tier_damage(s->tier, 0, msg, sizeof msg);
        snprintf(err, errlen,
                 "%s%s (start with --repair to drop the far jobs whose "
                 "records are damaged)",
                 msg, damaged > 1 ? ", and more" : "");
        emb_close(s);
        return -1;
    }
    if (damaged && em_repair_far(s, damaged, err, errlen) != 0) {
        emb_close(s);
        return -1;
    }
    if (!s->tier && engine_far_count(s->eng) > 0) {
        snprintf(err, errlen,
                 "the log names %" PRIu64 " far jobs but %s/%s is missing",
                 engine_far_count(s->eng), wc.dir, TIER_DIR);
        emb_close(s);
        return -1;
    }
    tier_check_background(s->tier);
    arm_timer(s);
    arm_load(s);
    em_reap_soon(s);
    *out = s;
    return 0;
}

/* --- operations --------------------------------------------------------- */

/* Logs a whole job, or a transition (the job's state after it). */
static void log_job(struct dq_store *s, int type, const struct dq_job *j) {
    struct wal_rec r = {.type = type, .job = *j};
    wal_append(s->wal, &r);
}

static void log_state(struct dq_store *s, int type, struct dq_str topic,
                      struct dq_str id) {
    struct wal_rec r = {.type = type};
    if (engine_get(s->eng, topic, id, &r.job)) wal_append(s->wal, &r);
}

static void log_key(struct dq_store *s, int type, struct dq_str topic,
                    struct dq_str id) {
    struct wal_rec r = {.type = type};
    r.job.topic = topic;
    r.job.id = id;
    wal_append(s->wal, &r);
}

/* KICKALL, PURGE: n jobs moved or removed. */
static void log_topic(struct dq_store *s, int type, struct dq_str topic,
                      int64_t due, int64_t n) {
    struct wal_rec r = {.type = type, .count = (uint64_t)n};
    r.job.topic = topic;
    r.job.due = due;
    wal_append(s->wal, &r);
}

/* Every change starts here: refused at once (true) while the log cannot be
 * written, so nothing changes that could not be made durable. */
static bool refuse_change(struct dq_store *s, dq_store_cb *cb, void *pd) {
    if (wal_writable(s->wal)) return false;
    pend_push(s, cb, pd, DQ_IOERR)->errmsg =
        "the log cannot be written (disk full or I/O error); changes are "
        "refused until it can";
    return true;
}

static struct res *pend_change(struct dq_store *s, dq_store_cb *cb,
                               void *pd, int status) {
    struct res *r = pend_push(s, cb, pd, status);
    s->cur.items[s->cur.n - 1].change = true;
    return r;
}

static int engine_status(int rc) {
    switch (rc) {
    case ENGINE_EEXISTS: return DQ_EXISTS;
    case ENGINE_EBUSY: return DQ_BUSY;
    case ENGINE_ENOTRESERVED: return DQ_NOTRESERVED;
    case ENGINE_EFULL: return DQ_FULL;
    default: return DQ_NOMEM;
    }
}

#define NO_ROOM_FAR (ENGINE_ENOMEM - 100)

/* ADD of a job due beyond the horizon: its record to its far segment, its
 * id to the engine, a FAR record to the log. NO_ROOM_FAR if it cannot go
 * far (then it goes to RAM). */
static int add_far(struct dq_store *s, int64_t now, const struct dq_add *a) {
    struct dq_job j = {
        .topic = a->topic, .id = a->id, .body = a->body,
        .state = DQ_DELAYED, .due = a->due, .created = now,
        .ttr = a->ttr, .retries = a->retries, .backoff = a->backoff,
        .url = a->url, .content_type = a->content_type,
    };
    uint64_t ref;
    if (tier_place(s->tier, &j, &ref) != 0) return NO_ROOM_FAR;
    int rc = engine_add_far(s->eng, now, a, ref);
    if (rc < 0) {
        tier_unplace(s->tier);
        return rc;
    }
    struct wal_rec r = {.type = WAL_FAR, .ref = ref};
    r.job.topic = a->topic;
    r.job.id = a->id;
    wal_append(s->wal, &r);
    return rc;
}

static void emb_add(struct dq_store *s, const struct dq_add *a,
                    dq_store_cb *cb, void *pd) {
    int64_t now = a->now ? a->now : now_ms(s);
    struct dq_add req = *a;
    char idbuf[48];
    bool gen = a->id.len == 1 && a->id.p[0] == '*';
    int rc;
    struct dq_job v;
    if (refuse_change(s, cb, pd)) return;
    catch_up(s, now);
    bool far = tier_far(s->tier, now, a->due);
    for (int tries = 0;; tries++) {
        if (gen) {
            if (now > s->id_ms) {
                s->id_ms = now;
                s->id_seq = 0;
            } else {
                s->id_seq++;
            }
            int n = snprintf(idbuf, sizeof idbuf, "%" PRId64 "-%" PRIu64,
                             s->id_ms, s->id_seq);
            req.id = (struct dq_str){idbuf, (size_t)n};
        }
        if (far) {
            rc = add_far(s, now, &req);
            if (rc == NO_ROOM_FAR) { /* in RAM after all */
                far = false;
                rc = engine_add(s->eng, now, &req, &v);
            }
        } else {
            rc = engine_add(s->eng, now, &req, &v);
        }
        if (!(gen && rc == ENGINE_EEXISTS && tries < 1000)) break;
    }
    if (rc < 0) {
        pend_change(s, cb, pd, engine_status(rc));
    } else {
        if (!far) log_job(s, WAL_JOB, &v);
        res_id(&s->cur.set, pend_change(s, cb, pd, DQ_OK), req.id);
    }
    after_change(s);
}

/* DEL and ACK: remove jobs in any state, logging each one removed. */
static void remove_ids(struct dq_store *s, struct dq_str topic,
                       const struct dq_str *ids, size_t nids, bool ack,
                       dq_store_cb *cb, void *pd) {
    int64_t n = 0;
    if (refuse_change(s, cb, pd)) return;
    s->in_engine = 1;
    for (size_t i = 0; i < nids; i++) {
        int gone = ack ? engine_ack(s->eng, topic, ids[i])
                       : engine_del(s->eng, topic, ids[i]);
        if (gone) {
            log_key(s, ack ? WAL_ACK : WAL_DEL, topic, ids[i]);
            n++;
        }
    }
    pend_change(s, cb, pd, DQ_OK)->n = n;
    after_change(s);
}

static void emb_del(struct dq_store *s, struct dq_str topic,
                    const struct dq_str *ids, size_t nids, dq_store_cb *cb,
                    void *pd) {
    remove_ids(s, topic, ids, nids, false, cb, pd);
}

static void emb_get(struct dq_store *s, struct dq_str topic, struct dq_str id,
                    dq_store_cb *cb, void *pd) {
    struct dq_job j;
    uint64_t ref;
    struct res *r = pend_push(s, cb, pd, DQ_OK);
    res_jobs(&s->cur.set, r); /* njobs = 0 if absent */
    if (engine_get(s->eng, topic, id, &j)) {
        res_job(&s->cur.set, r, &j);
    } else if (engine_far_ref(s->eng, topic, id, &ref)) {
        if (tier_read(s->tier, ref, topic, id, &s->far_body, &j)) {
            res_job(&s->cur.set, r, &j);
        } else {
            res_clear(r);
            r->status = DQ_IOERR;
            r->errmsg = "the job is kept on disk and its record cannot be "
                        "read (see the server log)";
        }
    }
}

static void emb_reserve(struct dq_store *s, const struct dq_str *topics,
                        size_t ntopics, uint32_t count, dq_store_cb *cb,
                        void *pd) {
    if (count > DQ_COUNT_MAX) count = DQ_COUNT_MAX;
    if (refuse_change(s, cb, pd)) return;
    int64_t now = now_ms(s);
    catch_up(s, now);
    int n = engine_reserve(s->eng, now, topics, ntopics, count, s->jobs);
    for (int i = 0; i < n; i++) log_job(s, WAL_RESERVE, &s->jobs[i]);
    struct res *r = pend_change(s, cb, pd, DQ_OK);
    res_jobs(&s->cur.set, r);
    for (int i = 0; i < n; i++) res_job(&s->cur.set, r, &s->jobs[i]);
    after_change(s);
}

static void emb_reserve_push(struct dq_store *s, struct dq_str topic,
                             uint32_t count, dq_store_cb *cb, void *pd) {
    if (count > DQ_COUNT_MAX) count = DQ_COUNT_MAX;
    if (refuse_change(s, cb, pd)) return;
    int64_t now = now_ms(s);
    catch_up(s, now);
    int n = engine_reserve_push(s->eng, now, topic, count, s->jobs);
    for (int i = 0; i < n; i++) log_job(s, WAL_RESERVE, &s->jobs[i]);
    struct res *r = pend_change(s, cb, pd, DQ_OK);
    res_jobs(&s->cur.set, r);
    for (int i = 0; i < n; i++) res_job(&s->cur.set, r, &s->jobs[i]);
    after_change(s);
}

static void emb_ack(struct dq_store *s, struct dq_str topic,
                    const struct dq_str *ids, size_t nids, dq_store_cb *cb,
                    void *pd) {
    remove_ids(s, topic, ids, nids, true, cb, pd);
}

static void emb_nack(struct dq_store *s, struct dq_str topic, struct dq_str id,
                     int64_t delay, dq_store_cb *cb, void *pd) {
    if (refuse_change(s, cb, pd)) return;
    s->in_engine = 1;
    int rc = engine_nack(s->eng, now_ms(s), topic, id, delay);
    if (rc >= 0) log_state(s, WAL_NACK, topic, id);
    if (rc < 0) pend_change(s, cb, pd, engine_status(rc));
    else pend_change(s, cb, pd, DQ_OK)->n = rc;
    after_change(s);
}

static void emb_touch(struct dq_store *s, struct dq_str topic,
                      struct dq_str id, uint32_t ttr, dq_store_cb *cb,
                      void *pd) {
    int64_t deadline = 0;
    if (refuse_change(s, cb, pd)) return;
    s->in_engine = 1;
    int rc = engine_touch(s->eng, now_ms(s), topic, id, ttr, &deadline);
    if (rc >= 0) log_state(s, WAL_TOUCH, topic, id);
    if (rc < 0) pend_change(s, cb, pd, engine_status(rc));
    else pend_change(s, cb, pd, DQ_OK)->n = deadline;
    after_change(s);
}

static void emb_release(struct dq_store *s, struct dq_str topic,
                        struct dq_str id, dq_store_cb *cb, void *pd) {
    if (refuse_change(s, cb, pd)) return;
    s->in_engine = 1;
    int rc = engine_release(s->eng, topic, id);
    if (rc == 1) log_state(s, WAL_RELEASE, topic, id);
    pend_change(s, cb, pd, DQ_OK)->n = rc;
    after_change(s);
}

static void emb_kick_job(struct dq_store *s, struct dq_str topic,
                         struct dq_str id, dq_store_cb *cb, void *pd) {
    if (refuse_change(s, cb, pd)) return;
    s->in_engine = 1;
    int rc = engine_kick_job(s->eng, now_ms(s), topic, id);
    struct dq_job v;
    if (rc == 1 && engine_get(s->eng, topic, id, &v)) log_job(s, WAL_KICK, &v);
    pend_change(s, cb, pd, DQ_OK)->n = rc;
    after_change(s);
}

static void collect_id(void *ud, struct dq_str id) {
    struct buf *b = ud;
    uint16_t len = (uint16_t)id.len;
    buf_append(b, &len, sizeof len);
    buf_append(b, id.p, id.len);
}

/* KICK. All of a topic's dead jobs: one KICKALL record. Some of them: the
 * engine picks the oldest, so the dead ids are listed first and those that
 * moved are logged one by one. */
static void emb_kick(struct dq_store *s, struct dq_str topic, uint64_t count,
                     dq_store_cb *cb, void *pd) {
    if (refuse_change(s, cb, pd)) return;
    int64_t now = now_ms(s);
    struct dq_stats st;
    engine_stats(s->eng, topic, &st);
    s->in_engine = 1;
    int64_t n;
    if (count == 0 || count >= st.jobs[DQ_DEAD]) {
        n = engine_kick(s->eng, now, topic, 0);
        if (n > 0) log_topic(s, WAL_KICKALL, topic, now, n);
    } else {
        struct buf dead = BUF_INIT;
        uint64_t cursor = 0;
        do cursor = engine_list(s->eng, topic, DQ_DEAD, 1024, cursor,
                                collect_id, &dead);
        while (cursor != 0);
        n = engine_kick(s->eng, now, topic, count);
        for (size_t off = 0; off < dead.len;) {
            uint16_t len;
            memcpy(&len, dead.p + off, sizeof len);
            struct dq_str id = {dead.p + off + sizeof len, len};
            off += sizeof len + len;
            struct dq_job v;
            if (engine_get(s->eng, topic, id, &v) && v.state != DQ_DEAD)
                log_job(s, WAL_KICK, &v);
        }
        buf_free(&dead);
    }
    pend_change(s, cb, pd, DQ_OK)->n = n;
    after_change(s);
}

struct strs_ctx {
    struct res_set *set;
    struct res *r;
};

static void collect_str(void *ud, struct dq_str v) {
    struct strs_ctx *c = ud;
    res_str(c->set, c->r, v);
}

static void emb_list(struct dq_store *s, struct dq_str topic, int state,
                     uint32_t count, uint64_t cursor, dq_store_cb *cb,
                     void *pd) {
    struct strs_ctx c = {&s->cur.set, pend_push(s, cb, pd, DQ_OK)};
    res_strs(c.set, c.r);
    c.r->cursor =
        engine_list(s->eng, topic, state, count, cursor, collect_str, &c);
}

static void emb_purge(struct dq_store *s, struct dq_str topic,
                      dq_store_cb *cb, void *pd) {
    if (refuse_change(s, cb, pd)) return;
    s->in_engine = 1;
    int64_t n = engine_purge(s->eng, topic);
    if (n > 0) log_topic(s, WAL_PURGE, topic, 0, n);
    em_reap_soon(s); /* its jobs are freed between I/O */
    pend_change(s, cb, pd, DQ_OK)->n = n;
    after_change(s);
}

static void emb_stats(struct dq_store *s, struct dq_str topic,
                      dq_store_cb *cb, void *pd) {
    struct dq_stats st;
    engine_stats(s->eng, topic, &st);
    res_stats(&s->cur.set, pend_push(s, cb, pd, DQ_OK), &st);
}

static void emb_topics(struct dq_store *s, dq_store_cb *cb, void *pd) {
    struct strs_ctx c = {&s->cur.set, pend_push(s, cb, pd, DQ_OK)};
    res_strs(c.set, c.r);
    engine_topics(s->eng, collect_str, &c);
}

static void emb_info(struct dq_store *s, dq_info_emit *emit, void *ud) {
    emit(ud, "store", "embedded");
    dq_info_int(emit, ud, "jobs", (int64_t)(engine_count(s->eng)));
    dq_info_int(emit, ud, "jobs_in_ram",
                (int64_t)(engine_count(s->eng) - engine_far_count(s->eng)));
    dq_info_int(emit, ud, "jobs_on_disk", (int64_t)engine_far_count(s->eng));
    tier_info(s->tier, emit, ud);
    em_mem_info(s, emit, ud);
    if (s->wal) wal_info(s->wal, emit, ud);
}

const struct dq_store_ops dq_store_embedded = {
    .name = "embedded",
    .open = emb_open,
    .close = emb_close,
    .add = emb_add,
    .del = emb_del,
    .get = emb_get,
    .reserve = emb_reserve,
    .reserve_push = emb_reserve_push,
    .ack = emb_ack,
    .nack = emb_nack,
    .touch = emb_touch,
    .release = emb_release,
    .kick = emb_kick,
    .kick_job = emb_kick_job,
    .list = emb_list,
    .purge = emb_purge,
    .stats = emb_stats,
    .topics = emb_topics,
    .prefetch = emb_prefetch,
    .push = emb_push,
    .info = emb_info,
};
