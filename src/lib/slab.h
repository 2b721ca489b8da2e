/* slab.h -- an allocator for many small objects of a few sizes.
 *
 * Objects are rounded up to a multiple of 8 bytes (no per-object header,
 * unlike malloc's 8 bytes and 16-byte rounding) and carved from aligned
 * pages of SLAB_PAGE bytes, one size per page. A page whose last object is
 * freed waits on a list; slab_release gives such pages back to the
 * operating system a few at a time (unmapping one costs tens of
 * microseconds), so memory follows the number of objects down as well as
 * up without a long pause (one page with room per size is kept for reuse).
 *
 * Not thread-safe (but for slab_reserve's own helper thread). Pages come
 * from mmap; allocation failure returns NULL.
 */
#ifndef DQ_SLAB_H
#define DQ_SLAB_H

#include <stddef.h>
#include <stdint.h>

#define SLAB_PAGE (2u << 20) /* a huge page, where the system allows */
#define SLAB_MAX 512 /* largest object */

struct slab_page;
struct slab_reserve;

struct slab {
    struct slab_page *partial[SLAB_MAX / 8 + 1]; /* pages with room, by size */
    uint64_t pages;   /* pages held */
    uint64_t objects; /* objects allocated */
    struct slab_page *empty; /* emptied pages waiting for slab_release */
    uint64_t nempty;
    struct slab_reserve *rsv; /* slab_reserve */
};

/* A zeroed struct slab is ready to use. */

/* An object of n bytes (1 .. SLAB_MAX), 8-aligned; NULL if no page can be
 * had. */
void *slab_alloc(struct slab *s, size_t n);

/* Frees an object from this slab. Accepts NULL. */
void slab_free(struct slab *s, void *p);

/* Unmaps up to `max` emptied pages; returns how many still wait. */
uint64_t slab_release(struct slab *s, uint64_t max);

/* Ends the reservation and frees the pages left once every object was freed (a page with room is
 * kept for reuse); pages still full of objects are not known here: free the
 * objects first. */
void slab_destroy(struct slab *s);

/* A bulk load is coming: maps a region of about `bytes` that the next new
 * pages are cut from, and starts a thread that faults it in ahead of use
 * (on a virtual machine the first touch of memory costs about as much as a
 * bulk load's own work, so a second core takes it). Ends a reservation
 * under way first. Returns 0, or -1 if it cannot (pages then come one by
 * one, as without it). */
int slab_reserve(struct slab *s, size_t bytes);

/* Ends the reservation (if any): stops and joins its thread, unmaps what
 * was not cut into pages. */
void slab_reserve_end(struct slab *s);

/* Bytes of pages held. */
static inline uint64_t slab_bytes(const struct slab *s) {
    return s->pages * SLAB_PAGE;
}

#endif
