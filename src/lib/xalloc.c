/* xalloc.c -- the allocation seam (see xalloc.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xalloc.h"

static long fail_after = -1;

void xalloc_fail_after(long n) { fail_after = n; }

static int should_fail(void) {
    if (fail_after < 0) return 0;
    if (fail_after == 0) return 1;
    fail_after--;
    return 0;
}

int dq_alloc_fails(void) { return should_fail(); }

void *dq_malloc(size_t n) { return should_fail() ? NULL : malloc(n); }
void *dq_calloc(size_t n, size_t size) {
    return should_fail() ? NULL : calloc(n, size);
}
void *dq_realloc(void *p, size_t n) {
    return should_fail() ? NULL : realloc(p, n);
}
void dq_free(void *p) { free(p); }

static void *oom(size_t n) {
    fprintf(stderr, "delayq: out of memory allocating %zu bytes\n", n);
    abort();
}

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    return p ? p : oom(n);
}
void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    return p ? p : oom(n * size);
}
void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    return q ? q : oom(n);
}
char *xstrndup(const char *s, size_t n) {
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}
