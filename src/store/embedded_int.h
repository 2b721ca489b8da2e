/* embedded_int.h -- what the embedded store's files share (embedded.c: the
 * operations, the batch and its commit, timing, loading far segments, open
 * and close; embedded_mem.c: giving memory back; embedded_repair.c: the far
 * jobs' --repair walk). Private to those files. */
#ifndef DQ_EMBEDDED_INT_H
#define DQ_EMBEDDED_INT_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "lib/buf.h"
#include "store/result.h"
#include "store/store.h"

/* An operation waiting for the batch to complete. */
struct pending {
    dq_store_cb *cb;
    void *pd;
    bool change; /* a state-changing operation: fails if the log write does */
    struct res r;
};

/* The completions of one loop iteration and the data of their results. */
struct batch {
    struct pending *items;
    size_t n, cap;
    struct res_set set;
};

struct ready_note {
    size_t off, len; /* topic name in ready_names */
    int64_t hint;
    bool push; /* about push jobs: for on_push_ready */
};

struct dq_store {
    struct dq_store_config cfg;
    struct engine_config ec;
    struct engine *eng;
    struct wal *wal;
    struct tier *tier;   /* far segments; NULL when nothing is far */
    struct event *load_ev;
    int64_t load_at;     /* when load_ev fires; INT64_MAX when not armed */
    bool unlink_pending; /* loaded segments wait for unlink_mark to be durable */
    uint64_t unlink_mark;
    struct buf far_body; /* GET of a far job: its record */
    bool recovering; /* the engine is being rebuilt: hooks do nothing */
    struct event *commit_ev;
    struct event *timer_ev;
    struct event *trim_ev;
    struct event *reap_ev; /* frees purged jobs between I/O */
    int64_t reap_us_max;   /* longest step */
    uint64_t trim_peak;  /* most jobs in RAM since the last trim */
    bool trim_armed;
    uint64_t trims;
    int64_t trim_us, trim_us_max; /* the last trim and the longest */
    int64_t timer_at; /* INT64_MAX when not armed */
    struct batch cur;
    /* ready notifications waiting for the engine call to return */
    struct ready_note *notes;
    size_t nnotes, notes_cap;
    struct buf ready_names;
    int in_engine;
    /* ids for "*" */
    int64_t id_ms;
    uint64_t id_seq;
    struct dq_job jobs[DQ_COUNT_MAX]; /* reserve's scratch */
};

/* --- embedded.c ------------------------------------------------------------ */

/* Writes the log for everything in the batch; if that fails, fails the
 * batch's changes and rebuilds the engine. */
void em_commit_log(struct dq_store *s);

/* --- embedded_mem.c -------------------------------------------------------- */

/* s->trim_ev's callback: hands the heap's free pages back to the kernel. */
void em_trim_cb(evutil_socket_t fd, short what, void *arg);
/* After every change: arms the trim after a large drop of jobs in RAM. */
void em_note_count(struct dq_store *s);
/* Arms s->reap_ev if purged jobs or emptied pages wait to be freed. */
void em_reap_soon(struct dq_store *s);
/* s->reap_ev's callback: one budgeted step of freeing them. */
void em_reap_cb(evutil_socket_t fd, short what, void *arg);
/* INFO's memory_trim* and purge_free* fields. */
void em_mem_info(struct dq_store *s, dq_info_emit *emit, void *ud);

/* --- embedded_repair.c ----------------------------------------------------- */

/* --repair of far segments at open: drops the far jobs whose records lie in
 * the `damaged` places tier_check found and has the tier write those places
 * over. 0, or -1 with err filled. */
int em_repair_far(struct dq_store *s, size_t damaged, char *err,
                  size_t errlen);

#endif
