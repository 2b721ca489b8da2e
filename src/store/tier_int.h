/* tier_int.h -- what the far-segment files share (tier.c: segments,
 * writing, loading, compaction; tier_check.c: checking and repairing them).
 * Private to those two files. */
#ifndef DQ_TIER_INT_H
#define DQ_TIER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "lib/buf.h"
#include "lib/htab.h"
#include "store/tier.h"
#include "store/wal.h"


#define SLOTS 65536
#define SEG_MAX (UINT32_MAX - 1) /* offsets are 32-bit */
#define SYNC_MS 1000             /* everysec: how often segments are synced */

enum seg_state { SEG_FAR, SEG_LOADING, SEG_LOADED, SEG_KEPT, SEG_COMPACTING,
                 SEG_SYNCING };

#define COMPACT_MIN (64u << 10) /* a segment smaller than this is left alone */
#define COMPACT_LIVE 4          /* compacted when live * this < records */

struct seg {
    struct hnode hnode;   /* t->open: writable segments by window start */
    uint32_t slot;
    int64_t start;        /* window start, unix ms */
    int fd;
    uint64_t size;        /* bytes in the file (written) */
    struct buf pend;      /* records not yet written */
    bool writable, dirty;
    int state;            /* enum seg_state */
    uint64_t live;        /* far jobs whose record is here */
    uint64_t recs;        /* records in it (estimated for older files) */
    uint64_t last_ref;    /* the highest offset tier_recount saw */
    size_t idx;           /* in t->segs */
    /* loading */
    const uint8_t *map;
    size_t maplen;
    uint64_t at;          /* offset of the next record to read */
    uint64_t loaded;      /* jobs loaded from it */
};

struct syncq {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool running, stop;
    int *fds;             /* dup'ed descriptors to sync, then close */
    size_t n, cap;
    uint64_t queued;      /* rounds of writes queued ... */
    _Atomic uint64_t done;/* ... and synced */
};

/* The check at start (tier_check_end): a damaged place in a segment. */
struct damage {
    uint32_t slot;
    uint64_t from, to;    /* bytes [from, to) */
    bool tail;            /* a torn tail: nothing valid after it */
    char why[128];
};

struct check {
    pthread_t thread;
    bool running;
    atomic_bool stop;
    struct check_seg { uint32_t slot; int fd; uint64_t size; } *segs;
    size_t nsegs;
    struct damage *d;     /* the background thread's while it runs */
    size_t nd, dcap;
    bool nomem;
    uint64_t bytes;
    _Atomic uint64_t found; /* by the background check */
};

struct tier {
    struct tier_config cfg;
    char *path;           /* dir/far */
    int dirfd;
    struct seg **slot;    /* SLOTS entries */
    struct seg **segs;    /* every segment, dense */
    size_t nsegs, segs_cap;
    uint32_t next_slot;
    struct htab open;     /* writable segments by window start */
    int64_t opened;       /* the latest window start that opened */
    struct seg *last;     /* last tier_place: its segment and old length */
    size_t last_len;
    uint64_t bytes;       /* in all segment files */
    uint64_t loads_done, load_records, unlinked;
    bool created;         /* a segment was created since tier_created */
    bool compact_check;   /* a segment may have become mostly dead */
    struct seg *compacting;
    uint64_t compactions, moved;
    uint64_t unlink_round;  /* segment writes queued when the mark was taken */
    struct syncq sync;
    struct check check;
};

/* Writes n bytes at off in full; 0, or -1 with errno. */
int tr_write_all(int fd, const void *p, size_t n, uint64_t off);
/* The slot of a segment file's name ("00042.far" -> 42), or SLOTS if it is none. */
uint32_t tr_parse_slot(const char *name);
/* Stops the background check and waits for its thread (tier_close). */
void tr_check_stop(struct tier *t);

#endif
