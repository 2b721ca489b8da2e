/* fuzz_wal.c -- libFuzzer target for the log reader (src/store/wal.c).
 *
 * Each input is scanned as a file image (wal_scan), then put in a scratch
 * data directory as segment 1 or, if its header's kind field says so,
 * snapshot 1, and recovered into an engine
 * with wal_open, without and then with --repair. A far segment (header kind
 * 3) goes to far/00000.far instead and is loaded and compacted by the tier
 * (store/tier.c) into an engine, and read back record by record. Whatever the bytes, the
 * reader must stay inside them, recovery must either fail with a message or
 * produce an engine that a second recovery reproduces, and nothing may leak.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "lib/log.h"
#include "lib/buf.h"
#include "store/store.h"
#include "store/tier.h"
#include "store/wal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static int no_sync(int fd) {
    (void)fd;
    return 0;
}

static void clear_path(const char *path) {
    DIR *d = opendir(path);
    struct dirent *de;
    char p[512];
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", path, de->d_name);
        unlink(p);
    }
    if (d) closedir(d);
}

static void clear_dir(void) {
    char p[128];
    snprintf(p, sizeof p, "%s/" TIER_DIR, dir);
    clear_path(p);
    rmdir(p);
    clear_path(dir);
}

/* The tier's loading: every record it hands over is a whole job, which the
 * engine has as a far job (put there first) and takes in. */
static int load_far(void *ud, const struct dq_job *j, uint64_t ref) {
    struct engine *e = ud;
    if (j->id.len < 1 || j->topic.len < 1) abort();
    struct dq_add a = {.topic = j->topic, .id = j->id, .due = j->due};
    uint64_t have;
    if (!engine_far_ref(e, j->topic, j->id, &have)) {
        if (engine_add_far(e, 0, &a, ref) < 0) return 0;
        have = ref;
    }
    return have == ref ? engine_load(e, 0, j, ref) : 0;
}

/* far/DAMAGED naming the segment: tier_check reads it through. */
static void name_damaged(void) {
    char p[160];
    snprintf(p, sizeof p, "%s/" TIER_DIR "/DAMAGED", dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, "00000.far\n", 10) != 10) abort();
    close(fd);
}

static void fuzz_far(const uint8_t *data, size_t size) {
    char p[160];
    snprintf(p, sizeof p, "%s/" TIER_DIR, dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/" TIER_DIR "/00000.far", dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    close(fd);
    struct tier_config tc = {.dir = dir, .horizon_ms = 0,
                             .fsync_mode = DQ_FSYNC_NO};
    struct tier *t;
    char err[512] = "";
    if (tier_open(&t, &tc, err, sizeof err) != 0) {
        if (!err[0]) abort();
        return;
    }
    /* the check at start (of a segment named in far/DAMAGED: read through):
     * every damaged place described; --repair writes them over, and then
     * the segment reads clean (a ref at offset 32 makes a torn tail there
     * count) */
    name_damaged();
    tier_recount_begin(t);
    tier_recount(t, 32);
    tier_recount_end(t);
    size_t nd = tier_check(t);
    for (size_t i = 0; i < nd; i++) {
        char msg[512];
        tier_damage(t, i, msg, sizeof msg);
        if (!strstr(msg, "00000.far") || !strstr(msg, "offset")) abort();
    }
    if (nd && tier_repair(t, err, sizeof err) == 0) {
        tier_close(t);
        if (tier_open(&t, &tc, err, sizeof err) != 0) abort();
        tier_recount_begin(t);
        tier_recount(t, 32);
        tier_recount_end(t);
        name_damaged();
        if (tier_check(t) != 0) abort();
    }
    struct engine *e = engine_new(NULL, 0);
    if (!e) abort();
    /* every record read back at its own offset */
    struct buf scratch = BUF_INIT;
    for (int steps = 0; tier_load_step(t, 0, 7, load_far, NULL, e); steps++)
        if (steps > (int)size + 10) abort(); /* must make progress */
    struct dq_job j;
    tier_read(t, 32, (struct dq_str){"t", 1}, (struct dq_str){"i", 1},
              &scratch, &j);
    buf_free(&scratch);
    tier_unlink_loaded(t);
    tier_close(t);
    engine_free(e);
}

static int count_rec(void *ud, const struct wal_rec *r, uint64_t off) {
    (void)off;
    if (r->type < WAL_JOB || r->type > WAL_MOVE) abort();
    (*(uint64_t *)ud)++;
    return 0;
}

static void sum_job(void *ud, const struct dq_job *j) {
    uint64_t *h = ud;
    *h = *h * 31 + j->body.len + (uint64_t)j->state * 7 + j->attempts;
}

/* Recovers the directory; returns 0 and a digest of the jobs, or -1. */
static int recover(bool repair, uint64_t *digest) {
    struct engine *e = engine_new(NULL, 0);
    if (!e) return -1;
    struct wal_config cfg = {.dir = dir, .fsync_mode = DQ_FSYNC_NO,
                             .repair = repair};
    struct wal *w;
    char err[512];
    int rc = wal_open(&w, &cfg, e, 1763800000000, NULL, err, sizeof err);
    if (rc == 0) {
        *digest = engine_count(e);
        engine_foreach(e, sum_job, digest);
        wal_close(w);
    } else if (!err[0]) {
        abort(); /* a failure always says why */
    }
    engine_free(e);
    return rc;
}

static void remove_dir(void) {
    clear_dir();
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz_wal.XXXXXX");
        if (!mkdtemp(dir)) abort();
        atexit(remove_dir);
        log_set_level(LOG_ERROR);
        wal_io.fdatasync = no_sync;
    }
    uint64_t n = 0;
    struct wal_scan sc;
    wal_scan(data, size, count_rec, &n, &sc);
    if (sc.good > size || sc.nrec != n) abort();
    if (sc.end == WAL_END_CLEAN && sc.good < size)
        for (size_t i = sc.good; i < size; i++)
            if (data[i]) abort(); /* only zeros may follow a clean end */

    clear_dir();
    if (size > 10 && data[10] == WAL_KIND_FAR) {
        fuzz_far(data, size);
        return 0;
    }
    bool snap = size > 10 && data[10] == WAL_KIND_SNAPSHOT;
    char p[128];
    snprintf(p, sizeof p, "%s/%08d.%s", dir, 1, snap ? "snap" : "log");
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    close(fd);

    uint64_t d1 = 0, d2 = 0;
    if (recover(false, &d1) == 0) {
        /* what one recovery left behind, the next reads the same */
        if (recover(false, &d2) != 0 || d1 != d2) abort();
    } else if (recover(true, &d1) == 0) {
        if (recover(false, &d2) != 0 || d1 != d2) abort();
    }
    return 0;
}
