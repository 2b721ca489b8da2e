/* wal_sync.c -- the background sync thread of --fsync everysec. The
 * writer (wal.c) bumps a counter with every commit; about once a second the
 * thread syncs the current segment if the counter moved and publishes the
 * value it synced, which wal_durable compares with a commit's mark. A new
 * segment is handed over as a dup the thread owns: it syncs and closes the
 * old one. A failed sync is left in an atomic for the writer to notice
 * (it breaks the log). The thread never touches the loop's state.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/log.h"
#include "store/wal_int.h"

static void *sync_main(void *arg) {
    struct wal *w = arg;
    struct syncer *s = &w->sync;
    int cur = -1;
    uint64_t synced = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += 1;
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
                if (wal_io.fdatasync(cur) != 0) atomic_store(&s->err, errno);
                close(cur);
            }
            cur = nfd;
        }
        uint64_t wr = atomic_load(&s->written);
        if (cur >= 0 && wr != synced) {
            if (wal_io.fdatasync(cur) != 0) {
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
