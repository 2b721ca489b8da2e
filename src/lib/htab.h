/* htab.h -- an intrusive chained hash table with incremental rehashing.
 *
 * The caller embeds a struct hnode in its objects and supplies the hashes;
 * the table only allocates its bucket arrays (through lib/xalloc.h). Bucket
 * counts are powers of two. The table grows (x2) when it holds more than two
 * nodes per bucket and shrinks when it holds fewer than one per eight; the
 * move to the new array is spread over the following inserts and removes (a
 * few buckets each), so no single call stalls. If a larger array cannot be
 * allocated the table keeps working with longer chains: insert never fails.
 *
 * Lookup is done by the caller: walk htab_bucket(t, h) through ->next and
 * compare keys. htab_scan is Redis's SCAN (reverse-binary cursor): every node
 * present for the whole scan is visited at least once, however the table is
 * resized between calls.
 *
 * Hashes come from htab_hash_bytes (SipHash-1-3 with a process-wide key; call
 * htab_set_key once at startup with random bytes to resist hash flooding).
 */
#ifndef DQ_HTAB_H
#define DQ_HTAB_H

#include <stddef.h>
#include <stdint.h>

struct hnode {
    struct hnode *next;
};

/* Recomputes the hash of a node (used when rehashing). */
typedef uint64_t (*htab_hash_fn)(const struct hnode *n);

struct htab {
    struct hnode **b[2]; /* b[1] != NULL while rehashing from b[0] to b[1] */
    uint64_t mask[2];    /* bucket count - 1 */
    uint64_t count;      /* nodes held */
    uint64_t rehash;     /* buckets of b[0] below this have moved to b[1] */
    htab_hash_fn hash;
};

/* Initialises t with `size` buckets (a power of two >= 1). Returns 0, or -1
 * if the buckets cannot be allocated (t is then zeroed; htab_destroy is a
 * no-op on it). */
int htab_init(struct htab *t, uint64_t size, htab_hash_fn hash);

/* Frees the bucket arrays (not the nodes). Accepts a zeroed table. */
void htab_destroy(struct htab *t);

/* Sizes the table for n nodes at one per bucket, at once (a bulk load then
 * inserts without rehashing). Returns 0, or -1 if the buckets cannot be
 * allocated (the table is unchanged). */
int htab_reserve(struct htab *t, uint64_t n);

/* Forgets every node (not freeing them), keeping the buckets. */
void htab_clear(struct htab *t);

/* First node of the chain where a node of hash h is (NULL if none). */
struct hnode *htab_bucket(const struct htab *t, uint64_t h);

/* Starts loading the chain of hash h into the cache: depth 0 the bucket,
 * depth k the k-th node (reading the links before it, which earlier calls
 * at lower depths should have brought in). Does nothing past the chain's
 * end. For callers that know several keys ahead of using them. */
void htab_prefetch(const struct htab *t, uint64_t h, int depth);
/* Links n, of hash h. The caller checks uniqueness first. */
void htab_insert(struct htab *t, struct hnode *n, uint64_t h);

/* Unlinks n, of hash h, which must be in t. */
void htab_remove(struct htab *t, struct hnode *n, uint64_t h);

static inline uint64_t htab_count(const struct htab *t) { return t->count; }

/* The bucket count - 1 of the table's newest bucket array: h & htab_mask(t)
 * orders hashes by where their chains lie, so that a caller with many nodes
 * to insert can sort them by it and fill the buckets in memory order. */
static inline uint64_t htab_mask(const struct htab *t) {
    return t->b[1] ? t->mask[1] : t->mask[0];
}

/* Visits the nodes of about `count` buckets starting at `cursor` (0 to
 * start) and returns the next cursor, 0 when the scan is complete. fn must
 * not change the table. */
uint64_t htab_scan(const struct htab *t, uint64_t cursor, uint32_t count,
                   void (*fn)(void *ud, const struct hnode *n), void *ud);

/* Calls fn for every node. fn may free the node it is given but must not
 * otherwise change the table. */
void htab_foreach(const struct htab *t, void (*fn)(void *ud, struct hnode *n),
                  void *ud);

/* Takes the table apart a little at a time: looks at up to *visits
 * buckets and nodes (counting them down) from *pos (0 to start; the caller
 * keeps it), unlinking
 * each node found and handing it to fn (which may free it). No resizing
 * happens meanwhile; the table must not be used otherwise until it is
 * empty. Returns the nodes left (0: done; htab_destroy it). */
uint64_t htab_drain(struct htab *t, uint64_t *pos, uint64_t *visits,
                    void (*fn)(void *ud, struct hnode *n), void *ud);

/* SipHash-1-3 of p[0..len) under the process-wide key. */
uint64_t htab_hash_bytes(const void *p, size_t len);

/* Sets the process-wide hash key. Call before any table holds nodes. */
void htab_set_key(const unsigned char key[16]);

#endif
