/* xalloc.h -- the allocation seam.
 *
 * Every allocation of the server goes through these, so tests can make them
 * fail on purpose (xalloc_fail_after) and so a failure of the few callers that
 * cannot recover is one clear abort. The plain functions return NULL on
 * failure; the x-prefixed ones abort with a message instead.
 */
#ifndef DQ_XALLOC_H
#define DQ_XALLOC_H

#include <stddef.h>

void *dq_malloc(size_t n);
void *dq_calloc(size_t n, size_t size);
void *dq_realloc(void *p, size_t n);
void dq_free(void *p);

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrndup(const char *s, size_t n);

/* For allocators built on other sources (lib/slab.c): 1 if the seam says
 * this allocation fails, counted like a dq_* allocation. */
int dq_alloc_fails(void);

/* Test seam: after `n` more successful dq_* allocations, every one fails
 * until called again with n < 0 (the default: never fail). */
void xalloc_fail_after(long n);

#endif
