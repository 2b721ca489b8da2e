/* push_note.c -- the last failed push attempt of each job, for GET and the
 * dashboard. The pusher writes a note when an attempt fails and forgets it
 * when one succeeds; DEL and PURGE forget theirs. Notes live in memory only
 * (a restart forgets them) and at most PUSH_NOTES_MAX are kept: past that a
 * new failure is not noted. */
#include <string.h>

#include "core/core_int.h"
#include "lib/htab.h"
#include "lib/xalloc.h"

#define PUSH_NOTES_MAX 100000

struct note {
    struct hnode hn;
    uint64_t hash;
    struct core_push_note n;
    size_t tlen, ilen;
    char key[]; /* topic then id */
};

struct push_notes {
    struct htab t;
};

static uint64_t note_hash(const struct hnode *n) {
    return ((const struct note *)n)->hash;
}

static uint64_t key_hash(struct dq_str topic, struct dq_str id) {
    return htab_hash_bytes(topic.p, topic.len) * 31 ^ htab_hash_bytes(id.p, id.len);
}

static struct note *find(const struct push_notes *pn, struct dq_str topic,
                         struct dq_str id, uint64_t h) {
    for (struct hnode *n = htab_bucket(&pn->t, h); n; n = n->next) {
        struct note *e = (struct note *)n;
        if (e->hash == h && e->tlen == topic.len && e->ilen == id.len &&
            memcmp(e->key, topic.p, topic.len) == 0 &&
            memcmp(e->key + topic.len, id.p, id.len) == 0)
            return e;
    }
    return NULL;
}

struct push_notes *push_notes_new(void) {
    struct push_notes *pn = xcalloc(1, sizeof *pn);
    htab_init(&pn->t, 16, note_hash);
    return pn;
}

static void free_note(void *ud, struct hnode *n) { dq_free(n); }

void push_notes_free(struct push_notes *pn) {
    if (!pn) return;
    htab_foreach(&pn->t, free_note, NULL);
    htab_destroy(&pn->t);
    dq_free(pn);
}

void core_push_note(struct core *c, struct dq_str topic, struct dq_str id,
                    const struct core_push_note *n) {
    struct push_notes *pn = c->notes;
    if (!n && htab_count(&pn->t) == 0) return;
    uint64_t h = key_hash(topic, id);
    struct note *e = find(pn, topic, id, h);
    if (!n) {
        if (e) {
            htab_remove(&pn->t, &e->hn, h);
            dq_free(e);
        }
        return;
    }
    if (!e) {
        if (htab_count(&pn->t) >= PUSH_NOTES_MAX) return;
        e = xcalloc(1, sizeof *e + topic.len + id.len);
        e->hash = h;
        e->tlen = topic.len;
        e->ilen = id.len;
        memcpy(e->key, topic.p, topic.len);
        memcpy(e->key + topic.len, id.p, id.len);
        htab_insert(&pn->t, &e->hn, h);
    }
    e->n = *n;
}

const struct core_push_note *core_push_note_get(const struct core *c,
                                                struct dq_str topic,
                                                struct dq_str id) {
    if (htab_count(&c->notes->t) == 0) return NULL;
    struct note *e = find(c->notes, topic, id, key_hash(topic, id));
    return e ? &e->n : NULL;
}

struct drop_ctx {
    struct push_notes *pn;
    struct dq_str topic;
    struct note **gone;
    size_t n;
};

static void collect_topic(void *ud, struct hnode *n) {
    struct drop_ctx *d = ud;
    struct note *e = (struct note *)n;
    if (e->tlen == d->topic.len && memcmp(e->key, d->topic.p, e->tlen) == 0)
        d->gone[d->n++] = e;
}

void push_notes_drop_topic(struct core *c, struct dq_str topic) {
    struct push_notes *pn = c->notes;
    size_t count = htab_count(&pn->t);
    if (count == 0) return;
    struct drop_ctx d = {pn, topic, xmalloc(count * sizeof *d.gone), 0};
    htab_foreach(&pn->t, collect_topic, &d);
    for (size_t i = 0; i < d.n; i++) {
        htab_remove(&pn->t, &d.gone[i]->hn, d.gone[i]->hash);
        dq_free(d.gone[i]);
    }
    dq_free(d.gone);
}
