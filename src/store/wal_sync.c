/* wal_sync.c -- the background sync thread of --fsync everysec. The
 * writer (wal.c) bumps a counter with every commit; about once a second the
 * thread syncs the current segment if the counter moved and publishes the
 * value it synced, which wal_durable compares with a commit's mark. A new
 * segment is handed over as a dup the thread owns: it syncs and closes the
 * old one. A failed sync is left in an atomic for the writer to notice
 * (it breaks the log). The thread touches nothing of the loop's but these
 * atomics and the fsync figures below.
 *
 * Also here: the durations of the log's syncs (delayq_fsync_duration_seconds),
 * measured by whichever thread syncs and handed to the loop in atomics.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "store/wal_int.h"

static void *sync_main(void *arg) {
    struct wal *w = arg;
    struct syncer *s = &w->sync;
    int cur = -1;
    uint64_t synced = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        /* the condition variable runs on CLOCK_MONOTONIC (wl_sync_start) */
        int64_t until = clock_mono_us() + 1000000;
        struct timespec ts = {.tv_sec = until / 1000000,
                              .tv_nsec = until % 1000000 * 1000};
        while (!s->stop && s->next_fd < 0) {
            if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) == ETIMEDOUT)
                break;
        }
        int nfd = s->next_fd;
        bool stop = s->stop;
        s->next_fd = -1;
        pthread_mutex_unlock(&s->mu);
        if (nfd >= 0) {
            if (cur >= 0) {
                if (wl_fdatasync_timed(w, cur) != 0)
                    atomic_store(&s->err, errno);
                close(cur);
            }
            cur = nfd;
        }
        uint64_t wr = atomic_load(&s->written);
        if (cur >= 0 && wr != synced) {
            if (wl_fdatasync_timed(w, cur) != 0) {
                atomic_store(&s->err, errno);
            } else {
                synced = wr;
                atomic_store(&s->synced, wr);
            }
        }
        if (stop) break;
        pthread_mutex_lock(&s->mu);
    }
    if (cur >= 0) close(cur);
    return NULL;
}

/* Gives the thread the current segment (a dup it owns). */
void wl_sync_handover(struct wal *w) {
    struct syncer *s = &w->sync;
    if (!s->running) return;
    int fd = fcntl(w->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        log_warn("cannot hand the log to the sync thread: %s",
                 strerror(errno));
        return;
    }
    pthread_mutex_lock(&s->mu);
    if (s->next_fd >= 0) {
        /* the previous segment was never picked up: sync it here */
        fdatasync(s->next_fd);
        close(s->next_fd);
    }
    s->next_fd = fd;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int wl_sync_start(struct wal *w) {
    struct syncer *s = &w->sync;
    s->next_fd = -1;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&s->thread, NULL, sync_main, w) != 0) return -1;
    s->running = true;
    wl_sync_handover(w);
    return 0;
}

void wl_sync_stop(struct wal *w) {
    struct syncer *s = &w->sync;
    if (!s->running) return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    if (s->next_fd >= 0) close(s->next_fd);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    s->running = false;
}

/* --- how long the syncs take ---------------------------------------------- */

/* Seconds: a sync takes tens of microseconds on a fast SSD's cache, tens of
 * milliseconds on a disk that flushes for real, seconds when it struggles. */
static const double fsync_bounds[WL_FSYNC_BOUNDS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,     2.5,    5};

int wl_fdatasync_timed(struct wal *w, int fd) {
    int64_t t0 = clock_mono_us();
    int rc = wal_io.fdatasync(fd);
    int e = errno;
    int64_t us = clock_mono_us() - t0;
    double sec = (double)us / 1e6;
    int i = 0;
    while (i < WL_FSYNC_BOUNDS && sec > fsync_bounds[i]) i++;
    struct fsync_stats *fs = &w->fsyncs;
    atomic_fetch_add_explicit(&fs->bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&fs->sum_us, (uint64_t)us, memory_order_relaxed);
    errno = e;
    return rc;
}

void wl_fsync_info(const struct wal *w, dq_info_emit *emit, void *ud) {
    const struct fsync_stats *fs = &w->fsyncs;
    char b[WL_FSYNC_BOUNDS * 32 + 32];
    size_t n = 0;
    uint64_t cum = 0;
    for (int i = 0; i <= WL_FSYNC_BOUNDS; i++) {
        cum += atomic_load_explicit(&fs->bucket[i], memory_order_relaxed);
        if (i < WL_FSYNC_BOUNDS)
            n += (size_t)snprintf(b + n, sizeof b - n, "%g=%" PRIu64 ",",
                                  fsync_bounds[i], cum);
        else
            snprintf(b + n, sizeof b - n, "+Inf=%" PRIu64, cum);
    }
    uint64_t sum_us = atomic_load_explicit(&fs->sum_us, memory_order_relaxed);
    char v[32];
    dq_info_int(emit, ud, "log_fsync_seconds_count", (int64_t)cum);
    snprintf(v, sizeof v, "%.6f", (double)sum_us / 1e6);
    emit(ud, "log_fsync_seconds_sum", v);
    emit(ud, "log_fsync_seconds_buckets", b);
}
