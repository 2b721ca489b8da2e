/* slab.c -- small objects in aligned pages (see slab.h).
 *
 * A page starts with its header; objects follow. Free objects of a page are
 * chained through their first 8 bytes; objects never handed out yet are
 * taken from `bump` first, so a new page is not touched beyond what is used.
 * Every page that has room is on its size's `partial` list (doubly linked);
 * a page is found from an object by masking the address (pages are aligned
 * to their size).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
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

/* 64: a 32-byte object never straddles two cache lines */
#define HDR ((sizeof(struct slab_page) + 63) & ~(size_t)63)

struct slab_reserve {
    char *first;      /* the region: the thread reads only this ... */
    char *next, *end; /* ... the owner cuts pages from next up to end */
    pthread_t thread;
    atomic_bool stop;
};

/* `pages` pages aligned to their size, with huge pages where allowed. */
static char *map_pages(size_t pages) {
    /* one page more, then cut to an aligned range */
    size_t len = (pages + 1) * (size_t)SLAB_PAGE;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    uintptr_t a = ((uintptr_t)m + SLAB_PAGE - 1) & ~(uintptr_t)(SLAB_PAGE - 1);
    char *p = (char *)a, *end = m + len, *want = p + pages * (size_t)SLAB_PAGE;
    if (p > m) munmap(m, (size_t)(p - m));
    if (end > want) munmap(want, (size_t)(end - want));
    /* fewer TLB misses walking millions of small objects, where
     * transparent huge pages are on for this process */
    madvise(p, pages * (size_t)SLAB_PAGE, MADV_HUGEPAGE);
    return p;
}

static struct slab_page *page_new(struct slab *s, uint32_t cls) {
    char *p;
    if (s->rsv && s->rsv->next < s->rsv->end) {
        p = s->rsv->next;
        s->rsv->next += SLAB_PAGE;
    } else if (!(p = map_pages(1))) {
        return NULL;
    }
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
        if (!(g = page_new(s, cls))) return NULL;
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

/* The reservation's thread: faults its pages in, in the order they are
 * handed out (MADV_POPULATE_WRITE leaves their contents alone, so it does
 * not race with the owner writing into a page already handed out). */
static void *reserve_main(void *arg) {
    struct slab_reserve *r = arg;
    for (char *p = r->first; p < r->end; p += SLAB_PAGE) {
        if (atomic_load_explicit(&r->stop, memory_order_relaxed)) break;
        if (madvise(p, SLAB_PAGE, MADV_POPULATE_WRITE) != 0) break;
    }
    return NULL;
}

int slab_reserve(struct slab *s, size_t bytes) {
    slab_reserve_end(s);
    size_t pages = (bytes + SLAB_PAGE - 1) / SLAB_PAGE;
    struct slab_reserve *r = dq_calloc(1, sizeof *r);
    if (!r) return -1;
    if (!pages || !(r->next = map_pages(pages))) {
        dq_free(r);
        return -1;
    }
    r->first = r->next;
    r->end = r->next + pages * (size_t)SLAB_PAGE;
    atomic_init(&r->stop, false);
    if (pthread_create(&r->thread, NULL, reserve_main, r) != 0) {
        munmap(r->next, (size_t)(r->end - r->next));
        dq_free(r);
        return -1;
    }
    s->rsv = r;
    return 0;
}

void slab_reserve_end(struct slab *s) {
    struct slab_reserve *r = s->rsv;
    if (!r) return;
    atomic_store(&r->stop, true);
    pthread_join(r->thread, NULL);
    if (r->next < r->end) munmap(r->next, (size_t)(r->end - r->next));
    dq_free(r);
    s->rsv = NULL;
}

void slab_destroy(struct slab *s) {
    slab_reserve_end(s);
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
