#include <stdbool.h>
/* htab.c -- intrusive chained hash table (see htab.h). */
#include <string.h>

#include "lib/htab.h"
#include "lib/xalloc.h"

#define MIN_SIZE 4
#define REHASH_MOVES 2   /* non-empty buckets moved per insert/remove */
#define REHASH_EMPTY 16  /* empty buckets skipped at most per insert/remove */

/* --- SipHash-1-3 ---------------------------------------------------------- */

static uint64_t sip_k0 = UINT64_C(0x0706050403020100);
static uint64_t sip_k1 = UINT64_C(0x0f0e0d0c0b0a0908);

static uint64_t load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

void htab_set_key(const unsigned char key[16]) {
    sip_k0 = load64(key);
    sip_k1 = load64(key + 8);
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                        \
    do {                                                                \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);       \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                          \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                          \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);       \
    } while (0)

uint64_t htab_hash_bytes(const void *data, size_t len) {
    const unsigned char *p = data;
    uint64_t v0 = UINT64_C(0x736f6d6570736575) ^ sip_k0;
    uint64_t v1 = UINT64_C(0x646f72616e646f6d) ^ sip_k1;
    uint64_t v2 = UINT64_C(0x6c7967656e657261) ^ sip_k0;
    uint64_t v3 = UINT64_C(0x7465646279746573) ^ sip_k1;
    uint64_t b = (uint64_t)len << 56;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t m = load64(p + i);
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    for (size_t k = 0; i + k < len; k++) b |= (uint64_t)p[i + k] << (8 * k);
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* --- table ---------------------------------------------------------------- */

int htab_init(struct htab *t, uint64_t size, htab_hash_fn hash) {
    memset(t, 0, sizeof *t);
    t->b[0] = dq_calloc(size, sizeof *t->b[0]);
    if (!t->b[0]) return -1;
    t->mask[0] = size - 1;
    t->hash = hash;
    return 0;
}

void htab_destroy(struct htab *t) {
    if (!t) return;
    dq_free(t->b[0]);
    dq_free(t->b[1]);
    memset(t, 0, sizeof *t);
}

void htab_clear(struct htab *t) {
    for (int k = 0; k < 2; k++)
        if (t->b[k]) memset(t->b[k], 0, (t->mask[k] + 1) * sizeof *t->b[k]);
    t->count = 0;
}

/* The chain head where a node of hash h is (or goes). */
static struct hnode **chain(const struct htab *t, uint64_t h) {
    uint64_t i = h & t->mask[0];
    if (t->b[1] && i < t->rehash) return &t->b[1][h & t->mask[1]];
    return &t->b[0][i];
}

struct hnode *htab_bucket(const struct htab *t, uint64_t h) {
    return *chain(t, h);
}

void htab_prefetch(const struct htab *t, uint64_t h, int depth) {
    struct hnode **s = chain(t, h);
    if (depth == 0) {
        __builtin_prefetch(s);
        return;
    }
    struct hnode *n = *s;
    while (n && --depth > 0) n = n->next;
    if (n) __builtin_prefetch(n);
}

static void rehash_step(struct htab *t) {
    int moves = REHASH_MOVES, empty = REHASH_EMPTY;
    while (t->rehash <= t->mask[0]) {
        struct hnode *n = t->b[0][t->rehash];
        if (!n) {
            t->rehash++;
            if (--empty == 0) break;
            continue;
        }
        t->b[0][t->rehash++] = NULL;
        while (n) {
            struct hnode *next = n->next;
            struct hnode **s = &t->b[1][t->hash(n) & t->mask[1]];
            n->next = *s;
            *s = n;
            n = next;
        }
        if (--moves == 0) break;
    }
    /* The nodes the next step will move are scattered in memory: start
     * loading them now, so that step does not wait for them. */
    for (uint64_t i = t->rehash, k = 0; i <= t->mask[0] && k < REHASH_MOVES;
         i++) {
        if (t->b[0][i]) {
            __builtin_prefetch(t->b[0][i]);
            k++;
        }
    }
    if (t->rehash > t->mask[0]) {
        dq_free(t->b[0]);
        t->b[0] = t->b[1];
        t->mask[0] = t->mask[1];
        t->b[1] = NULL;
        t->mask[1] = 0;
        t->rehash = 0;
    }
}

/* Grows after an insert, shrinks after a removal (never the other way
 * round, so a table sized ahead by htab_reserve keeps its size while it
 * fills). */
static void maybe_resize(struct htab *t, bool removed) {
    if (t->b[1]) {
        rehash_step(t);
        return;
    }
    uint64_t size = t->mask[0] + 1, want;
    if (t->count > 2 * size) {
        want = size * 2;
    } else if (removed && size > MIN_SIZE && t->count * 8 < size) {
        want = MIN_SIZE;
        while (want < t->count) want *= 2;
    } else {
        return;
    }
    struct hnode **nb = dq_calloc(want, sizeof *nb);
    if (!nb) return; /* keep the current size; retried on a later call */
    t->b[1] = nb;
    t->mask[1] = want - 1;
    t->rehash = 0;
    rehash_step(t);
}

int htab_reserve(struct htab *t, uint64_t n) {
    uint64_t want = MIN_SIZE;
    while (want < n) want *= 2;
    while (t->b[1]) rehash_step(t); /* finish a resize under way */
    if (want <= t->mask[0] + 1) return 0;
    struct hnode **nb = dq_calloc(want, sizeof *nb);
    if (!nb) return -1;
    t->b[1] = nb;
    t->mask[1] = want - 1;
    t->rehash = 0;
    while (t->b[1]) rehash_step(t);
    return 0;
}

void htab_insert(struct htab *t, struct hnode *n, uint64_t h) {
    struct hnode **s = chain(t, h);
    n->next = *s;
    *s = n;
    t->count++;
    maybe_resize(t, false);
}

void htab_remove(struct htab *t, struct hnode *n, uint64_t h) {
    struct hnode **p = chain(t, h);
    while (*p != n) p = &(*p)->next;
    *p = n->next;
    t->count--;
    maybe_resize(t, true);
}

static uint64_t rev64(uint64_t v) {
    v = ((v >> 1) & UINT64_C(0x5555555555555555)) |
        ((v & UINT64_C(0x5555555555555555)) << 1);
    v = ((v >> 2) & UINT64_C(0x3333333333333333)) |
        ((v & UINT64_C(0x3333333333333333)) << 2);
    v = ((v >> 4) & UINT64_C(0x0f0f0f0f0f0f0f0f)) |
        ((v & UINT64_C(0x0f0f0f0f0f0f0f0f)) << 4);
    return __builtin_bswap64(v);
}

/* Increments the cursor's bits under `mask`, most significant first. */
static uint64_t next_cursor(uint64_t v, uint64_t mask) {
    v |= ~mask;
    v = rev64(v);
    v++;
    return rev64(v);
}

static void visit(const struct hnode *n,
                  void (*fn)(void *ud, const struct hnode *n), void *ud) {
    for (; n; n = n->next) fn(ud, n);
}

uint64_t htab_scan(const struct htab *t, uint64_t v, uint32_t count,
                   void (*fn)(void *ud, const struct hnode *n), void *ud) {
    if (!t->b[0]) return 0;
    if (count == 0) count = 1;
    do {
        if (!t->b[1]) {
            visit(t->b[0][v & t->mask[0]], fn, ud);
            v = next_cursor(v, t->mask[0]);
        } else {
            /* Visit the bucket of the smaller table, then every bucket of
             * the larger one that it expands to. */
            int s = t->mask[0] <= t->mask[1] ? 0 : 1, l = 1 - s;
            uint64_t ms = t->mask[s], ml = t->mask[l];
            visit(t->b[s][v & ms], fn, ud);
            do {
                visit(t->b[l][v & ml], fn, ud);
                v = next_cursor(v, ml);
            } while (v & (ms ^ ml));
        }
    } while (v != 0 && --count > 0);
    return v;
}

void htab_foreach(const struct htab *t, void (*fn)(void *ud, struct hnode *n),
                  void *ud) {
    for (int k = 0; k < 2; k++) {
        if (!t->b[k]) continue;
        for (uint64_t i = 0; i <= t->mask[k]; i++) {
            struct hnode *n = t->b[k][i];
            while (n) {
                struct hnode *next = n->next;
                fn(ud, n);
                n = next;
            }
        }
    }
}

uint64_t htab_drain(struct htab *t, uint64_t *pos, uint64_t *visits,
                    void (*fn)(void *ud, struct hnode *n), void *ud) {
    uint64_t n0 = t->mask[0] + 1, n1 = t->b[1] ? t->mask[1] + 1 : 0;
    while (*visits > 0 && *pos < n0 + n1 && t->count) {
        struct hnode **s = *pos < n0 ? &t->b[0][*pos] : &t->b[1][*pos - n0];
        (*visits)--;
        if (!*s) {
            (*pos)++;
            continue;
        }
        struct hnode *n = *s;
        *s = n->next;
        t->count--;
        fn(ud, n);
    }
    return t->count;
}
