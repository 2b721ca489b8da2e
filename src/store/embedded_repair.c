/* embedded_repair.c -- the embedded store's --repair of far segments
 * (embedded_int.h: em_repair_far), run by the open when tier_check found
 * damaged places: the engine's far jobs are walked for those whose records
 * lie there, each dropped with a DEL record, the log committed, then
 * tier_repair writes the places over.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "lib/buf.h"
#include "lib/log.h"
#include "store/embedded_int.h"
#include "store/tier.h"
#include "store/wal.h"

/* --repair of far segments: the far jobs whose records lie in damaged
 * places are dropped (a DEL record each, so that the log agrees), then the
 * tier writes those places over. Names are gathered first (u16 length, then
 * the bytes): the engine must not change while it is walked. */
struct far_walk {
    const struct tier *tier;
    struct buf *out;
};

static void put_str(struct buf *b, struct dq_str v) {
    uint16_t n = (uint16_t)v.len;
    buf_append(b, &n, sizeof n);
    buf_append(b, v.p, v.len);
}

static struct dq_str get_str(const struct buf *b, size_t *at) {
    uint16_t n;
    memcpy(&n, b->p + *at, sizeof n);
    struct dq_str v = {b->p + *at + sizeof n, n};
    *at += sizeof n + n;
    return v;
}

static void walk_topic_cb(void *ud, struct dq_str topic) {
    put_str(((struct far_walk *)ud)->out, topic);
}

static void walk_far_cb(void *ud, struct dq_str id, uint64_t ref) {
    struct far_walk *w = ud;
    if (tier_damaged(w->tier, ref)) put_str(w->out, id);
}

int em_repair_far(struct dq_store *s, size_t damaged, char *err,
                  size_t errlen) {
    char msg[512];
    for (size_t i = 0; i < damaged; i++) {
        tier_damage(s->tier, i, msg, sizeof msg);
        log_warn("repair: %s", msg);
    }
    struct buf topics = BUF_INIT, ids = BUF_INIT;
    struct far_walk w = {s->tier, &topics};
    engine_topics(s->eng, walk_topic_cb, &w);
    w.out = &ids;
    uint64_t dropped = 0;
    for (size_t at = 0; at < topics.len;) {
        struct dq_str topic = get_str(&topics, &at);
        buf_reset(&ids, 1 << 20);
        uint64_t cursor = 0;
        do {
            cursor = engine_scan_far(s->eng, topic, 4096, cursor, walk_far_cb,
                                     &w);
        } while (cursor);
        for (size_t k = 0; k < ids.len;) {
            struct wal_rec r = {.type = WAL_DEL};
            r.job.topic = topic;
            r.job.id = get_str(&ids, &k);
            if (engine_del(s->eng, topic, r.job.id)) {
                wal_append(s->wal, &r);
                dropped++;
            }
        }
    }
    buf_free(&topics);
    buf_free(&ids);
    em_commit_log(s);
    if (!wal_writable(s->wal)) {
        snprintf(err, errlen, "repair: cannot write the log");
        return -1;
    }
    if (tier_repair(s->tier, err, errlen) != 0) return -1;
    log_warn("repair: dropped %" PRIu64 " far jobs whose records were "
             "damaged; the damaged places are written over with dead "
             "records",
             dropped);
    return 0;
}
