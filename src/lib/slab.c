/* slab.c -- small objects in aligned pages (see slab.h).
 *
 * A page starts with its header; objects follow. Free objects of a page are
 * chained through their first 8 bytes; objects never handed out yet are
 * taken from `bump` first, so a new page is not touched beyond what is used.
 * Every page that has room is on its size's `partial` list (doubly linked);
 * a page is found from an object by masking the address (pages are aligned
 * to their size).
 */
#include <string.h>
#include <sys/mman.h>

#include "lib/slab.h"
#include "lib/xalloc.h"

/* Under AddressSanitizer, free objects and unused page space are poisoned,
 * so a use after free is caught as with malloc (until the slot is reused). */
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

struct slab_page {
    struct slab_page *next, *prev; /* on the partial list while it has room */
    void *free;                    /* chain of freed objects */
    uint32_t bump;                 /* offset of the first never-used object */
    uint32_t used;                 /* objects handed out */
    uint32_t cls;                  /* object size / 8 */
    uint32_t on_list;
};

#define HDR ((sizeof(struct slab_page) + 7) & ~(size_t)7)

static struct slab_page *page_new(uint32_t cls) {
    /* twice the size, then cut to an aligned page */
    char *m = mmap(NULL, 2 * (size_t)SLAB_PAGE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    uintptr_t a = ((uintptr_t)m + SLAB_PAGE - 1) & ~(uintptr_t)(SLAB_PAGE - 1);
    char *p = (char *)a;
    if (p > m) munmap(m, (size_t)(p - m));
    char *end = m + 2 * (size_t)SLAB_PAGE;
    if (end > p + SLAB_PAGE) munmap(p + SLAB_PAGE, (size_t)(end - (p + SLAB_PAGE)));
    /* fewer TLB misses walking millions of small objects, where
     * transparent huge pages are on for this process */
    madvise(p, SLAB_PAGE, MADV_HUGEPAGE);
    struct slab_page *g = (struct slab_page *)p;
    memset(g, 0, sizeof *g);
    g->bump = (uint32_t)HDR;
    g->cls = cls;
    POISON(p + HDR, SLAB_PAGE - HDR);
    return g;
}

static void list_add(struct slab *s, struct slab_page *g) {
    g->prev = NULL;
    g->next = s->partial[g->cls];
    if (g->next) g->next->prev = g;
    s->partial[g->cls] = g;
    g->on_list = 1;
}

static void list_del(struct slab *s, struct slab_page *g) {
    if (g->prev) g->prev->next = g->next;
    else s->partial[g->cls] = g->next;
    if (g->next) g->next->prev = g->prev;
    g->next = g->prev = NULL;
    g->on_list = 0;
}

static int page_full(const struct slab_page *g) {
    return !g->free && g->bump + g->cls * 8 > SLAB_PAGE;
}

void *slab_alloc(struct slab *s, size_t n) {
    if (n == 0 || n > SLAB_MAX || dq_alloc_fails()) return NULL;
    uint32_t cls = (uint32_t)((n + 7) / 8);
    struct slab_page *g = s->partial[cls];
    if (!g) {
        if (!(g = page_new(cls))) return NULL;
        s->pages++;
        list_add(s, g);
    }
    void *p;
    if (g->free) {
        p = g->free;
        UNPOISON(p, cls * 8);
        memcpy(&g->free, p, sizeof g->free);
    } else {
        p = (char *)g + g->bump;
        g->bump += cls * 8;
        UNPOISON(p, cls * 8);
    }
    g->used++;
    s->objects++;
    if (page_full(g)) list_del(s, g);
    return p;
}

void slab_free(struct slab *s, void *p) {
    if (!p) return;
    struct slab_page *g =
        (struct slab_page *)((uintptr_t)p & ~(uintptr_t)(SLAB_PAGE - 1));
    s->objects--;
    if (--g->used == 0) {
        if (s->partial[g->cls] == g && !g->next) {
            /* the size's only page with room: kept, so that one object
             * coming and going does not map and unmap a page each time */
            g->free = NULL;
            g->bump = (uint32_t)HDR;
            POISON((char *)g + HDR, SLAB_PAGE - HDR);
            return;
        }
        if (g->on_list) list_del(s, g);
        g->next = s->empty; /* unmapped by slab_release */
        s->empty = g;
        s->nempty++;
        return;
    }
    memcpy(p, &g->free, sizeof g->free);
    POISON(p, g->cls * 8);
    g->free = p;
    if (!g->on_list) list_add(s, g);
}

uint64_t slab_release(struct slab *s, uint64_t max) {
    while (s->empty && max-- > 0) {
        struct slab_page *g = s->empty;
        s->empty = g->next;
        s->nempty--;
        UNPOISON(g, SLAB_PAGE); /* the range may be mapped again */
        munmap(g, SLAB_PAGE);
        s->pages--;
    }
    return s->nempty;
}

void slab_destroy(struct slab *s) {
    slab_release(s, UINT64_MAX);
    /* Full pages are on no list: they go as their objects are freed. */
    for (size_t c = 0; c <= SLAB_MAX / 8; c++) {
        struct slab_page *g = s->partial[c];
        while (g) {
            struct slab_page *next = g->next;
            UNPOISON(g, SLAB_PAGE); /* the range may be mapped again */
            munmap(g, SLAB_PAGE);
            s->pages--;
            g = next;
        }
        s->partial[c] = NULL;
    }
}
