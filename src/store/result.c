/* result.c -- the results a store builds before it completes them. */
#include <string.h>

#include "store/result.h"

/* Structs in items stay 8-aligned: every one of them is a multiple of 8. */
_Static_assert(sizeof(struct dq_job) % 8 == 0, "dq_job size");
_Static_assert(sizeof(struct dq_str) % 8 == 0, "dq_str size");
_Static_assert(sizeof(struct dq_stats) % 8 == 0, "dq_stats size");

/* Copies v's bytes to the end of bytes (the caller reserved room) and
 * returns v as an offset in them. */
static struct dq_str put_str(struct buf *bytes, struct dq_str v) {
    struct dq_str o = {(const char *)(uintptr_t)bytes->len, v.len};
    if (v.len) {
        memcpy(bytes->p + bytes->len, v.p, v.len);
        bytes->len += v.len;
    }
    return o;
}

static void fix_str(struct dq_str *v, const char *base) {
    v->p = base + (uintptr_t)v->p;
}

static void start_list(struct res_set *set, struct res *r,
                       enum res_kind kind) {
    if (r->kind == kind) return;
    r->kind = kind;
    r->off = set->items.len;
    r->cnt = 0;
}

void res_id(struct res_set *set, struct res *r, struct dq_str id) {
    r->kind = RES_ID;
    r->off = set->bytes.len;
    r->cnt = id.len;
    buf_append(&set->bytes, id.p, id.len);
}

void res_jobs(struct res_set *set, struct res *r) {
    start_list(set, r, RES_JOBS);
}

void res_job(struct res_set *set, struct res *r, const struct dq_job *j) {
    start_list(set, r, RES_JOBS);
    buf_reserve(&set->bytes, j->topic.len + j->id.len + j->body.len +
                                 j->url.len + j->content_type.len);
    struct dq_job *c =
        (struct dq_job *)buf_reserve(&set->items, sizeof *c);
    *c = *j;
    c->topic = put_str(&set->bytes, j->topic);
    c->id = put_str(&set->bytes, j->id);
    c->body = put_str(&set->bytes, j->body);
    c->url = put_str(&set->bytes, j->url);
    c->content_type = put_str(&set->bytes, j->content_type);
    set->items.len += sizeof *c;
    r->cnt++;
}

void res_strs(struct res_set *set, struct res *r) {
    start_list(set, r, RES_STRS);
}

void res_str(struct res_set *set, struct res *r, struct dq_str v) {
    start_list(set, r, RES_STRS);
    buf_reserve(&set->bytes, v.len);
    struct dq_str o = put_str(&set->bytes, v);
    buf_append(&set->items, &o, sizeof o);
    r->cnt++;
}

void res_stats(struct res_set *set, struct res *r,
               const struct dq_stats *st) {
    r->kind = RES_STATS;
    r->off = set->items.len;
    r->cnt = 1;
    buf_append(&set->items, st, sizeof *st);
}

void res_clear(struct res *r) { r->kind = RES_NONE; }

void res_fire(struct res_set *set, struct res *r, dq_store_cb *cb,
              void *pd) {
    const char *base = set->bytes.p ? set->bytes.p : ""; /* all empty */
    char *items = set->items.p + r->off;
    struct dq_result out = {
        .status = r->status, .errmsg = r->errmsg, .n = r->n,
        .cursor = r->cursor,
    };
    switch (r->kind) {
    case RES_NONE:
        break;
    case RES_ID:
        out.id = (struct dq_str){base + r->off, r->cnt};
        break;
    case RES_JOBS: {
        struct dq_job *jobs = r->cnt ? (struct dq_job *)items : NULL;
        for (size_t i = 0; i < r->cnt; i++) {
            fix_str(&jobs[i].topic, base);
            fix_str(&jobs[i].id, base);
            fix_str(&jobs[i].body, base);
            fix_str(&jobs[i].url, base);
            fix_str(&jobs[i].content_type, base);
        }
        out.jobs = jobs;
        out.njobs = r->cnt;
        break;
    }
    case RES_STRS: {
        struct dq_str *strs = r->cnt ? (struct dq_str *)items : NULL;
        for (size_t i = 0; i < r->cnt; i++) fix_str(&strs[i], base);
        out.strs = strs;
        out.nstrs = r->cnt;
        break;
    }
    case RES_STATS:
        out.stats = (const struct dq_stats *)items;
        break;
    }
    cb(pd, &out);
}

void res_reset(struct res_set *set, size_t keep) {
    buf_reset(&set->bytes, keep);
    buf_reset(&set->items, keep);
}

void res_free(struct res_set *set) {
    buf_free(&set->bytes);
    buf_free(&set->items);
}
