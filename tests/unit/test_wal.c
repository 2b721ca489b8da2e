/* test_wal.c -- the append-only log (src/store/wal.c): format round trips,
 * the reader's verdicts on torn and corrupt files, recovery into an engine,
 * group commit failures through the seams, reload, compaction. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tmpdir.h"
#include "lib/crc32c.h"

#include "engine/engine.h"
#include "lib/buf.h"
#include "lib/log.h"
#include "lib/xalloc.h"
#include "store/store.h"
#include "store/wal.h"

#define T0 INT64_C(1763800000000)

static struct dq_str S(const char *s) { return (struct dq_str){s, strlen(s)}; }

/* --- a temporary data directory --------------------------------------------- */

static char dir[256];

static int setup(void **state) {
    snprintf(dir, sizeof dir, "/tmp/test_wal.XXXXXX");
    assert_non_null(mkdtemp(dir));
    wal_io = wal_io_default;
    return 0;
}

static int teardown(void **state) {
    rm_rf(dir);
    wal_io = wal_io_default;
    xalloc_fail_after(-1);
    return 0;
}

static char *path_of(const char *name) {
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static long fsize(const char *name) {
    struct stat st;
    return stat(path_of(name), &st) == 0 ? (long)st.st_size : -1;
}

static bool exists(const char *name) { return fsize(name) >= 0; }

static long dir_bytes(void) {
    DIR *dd = opendir(dir);
    long n = 0;
    struct dirent *de;
    while ((de = readdir(dd)))
        if (de->d_name[0] != '.') n += fsize(de->d_name);
    closedir(dd);
    return n;
}

static size_t read_file(const char *name, uint8_t **out) {
    FILE *f = fopen(path_of(name), "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc((size_t)n + 1);
    assert_int_equal(fread(*out, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return (size_t)n;
}

static void write_file(const char *name, const uint8_t *p, size_t n) {
    FILE *f = fopen(path_of(name), "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* --- a logged engine: what the embedded store does -------------------------- */

struct tl {
    struct engine *e;
    struct wal *w;
    int64_t now;
    int fsync_mode;
    uint64_t compact_min;
};

static void on_expire(void *ud, const struct dq_job *j, bool dead) {
    struct tl *t = ud;
    if (!t->w) return; /* recovering */
    struct wal_rec r = {.type = WAL_EXPIRE, .job = *j};
    wal_append(t->w, &r);
}

static struct engine *new_engine(struct tl *t) {
    struct engine_config ec = {.hooks = {.on_expire = on_expire, .ud = t}};
    struct engine *e = engine_new(&ec, 0);
    assert_non_null(e);
    return e;
}

static int tl_open_rc(struct tl *t, bool repair, char *err, size_t errlen) {
    t->w = NULL;
    t->e = new_engine(t);
    struct wal_config cfg = {
        .dir = dir, .fsync_mode = t->fsync_mode, .repair = repair,
        .compact_min = t->compact_min, .probe_ms = 1,
    };
    struct wal *w;
    int rc = wal_open(&w, &cfg, t->e, t->now, NULL, err, errlen);
    if (rc == 0) t->w = w;
    else {
        engine_free(t->e);
        t->e = NULL;
    }
    return rc;
}

static void tl_open(struct tl *t) {
    char err[512] = "";
    int rc = tl_open_rc(t, false, err, sizeof err);
    if (rc != 0) fail_msg("wal_open: %s", err);
}

static void tl_close(struct tl *t) {
    wal_close(t->w);
    engine_free(t->e);
    t->w = NULL;
    t->e = NULL;
}

static void tl_commit(struct tl *t) { assert_int_equal(wal_commit(t->w), 0); }

static void log_job(struct tl *t, const struct dq_job *j) {
    struct wal_rec r = {.type = WAL_JOB, .job = *j};
    wal_append(t->w, &r);
}

static int tl_add(struct tl *t, const char *topic, const char *id,
                  const char *body, int64_t delay) {
    struct dq_add a = {
        .topic = S(topic), .id = S(id), .body = S(body),
        .due = t->now + delay, .ttr = 1000, .retries = 1,
        .backoff = {DQ_BACKOFF_EXP, 100, 1000},
    };
    struct dq_job v;
    int rc = engine_add(t->e, t->now, &a, &v);
    if (rc >= 0) log_job(t, &v);
    return rc;
}

static void log_key(struct tl *t, int type, const char *topic,
                    const char *id) {
    struct wal_rec r = {.type = type};
    r.job.topic = S(topic);
    r.job.id = S(id);
    wal_append(t->w, &r);
}

static int tl_del(struct tl *t, const char *topic, const char *id) {
    int n = engine_del(t->e, S(topic), S(id));
    if (n) log_key(t, WAL_DEL, topic, id);
    return n;
}

static int tl_ack(struct tl *t, const char *topic, const char *id) {
    int n = engine_ack(t->e, S(topic), S(id));
    if (n) log_key(t, WAL_ACK, topic, id);
    return n;
}

/* A transition record: the job's state after the change. */
static void log_state(struct tl *t, int type, const char *topic,
                      const char *id) {
    struct wal_rec r = {.type = type};
    assert_true(engine_get(t->e, S(topic), S(id), &r.job));
    wal_append(t->w, &r);
}

static int tl_reserve(struct tl *t, const char *topic, int count) {
    struct dq_job out[16];
    struct dq_str tp = S(topic);
    int n = engine_reserve(t->e, t->now, &tp, 1, (uint32_t)count, out);
    for (int i = 0; i < n; i++) {
        struct wal_rec r = {.type = WAL_RESERVE, .job = out[i]};
        wal_append(t->w, &r);
    }
    return n;
}

static int tl_nack(struct tl *t, const char *topic, const char *id,
                   int64_t delay) {
    int st = engine_nack(t->e, t->now, S(topic), S(id), delay);
    if (st >= 0) log_state(t, WAL_NACK, topic, id);
    return st;
}

static void tl_touch(struct tl *t, const char *topic, const char *id) {
    int64_t d;
    if (engine_touch(t->e, t->now, S(topic), S(id), 0, &d) == 0)
        log_state(t, WAL_TOUCH, topic, id);
}

static void tl_release(struct tl *t, const char *topic, const char *id) {
    if (engine_release(t->e, S(topic), S(id)))
        log_state(t, WAL_RELEASE, topic, id);
}

static void tl_kickall(struct tl *t, const char *topic) {
    int64_t n = engine_kick(t->e, t->now, S(topic), 0);
    if (n > 0) {
        struct wal_rec r = {.type = WAL_KICKALL, .count = (uint64_t)n};
        r.job.topic = S(topic);
        r.job.due = t->now;
        wal_append(t->w, &r);
    }
}

static void tl_purge(struct tl *t, const char *topic) {
    int64_t n = engine_purge(t->e, S(topic));
    if (n > 0) {
        struct wal_rec r = {.type = WAL_PURGE, .count = (uint64_t)n};
        r.job.topic = S(topic);
        wal_append(t->w, &r);
    }
}

static void tl_advance(struct tl *t, int64_t to) {
    t->now = to;
    while (engine_advance(t->e, t->now, 1000)) {
    }
}

/* --- comparing engine states ------------------------------------------------- */

struct dump {
    char **lines;
    size_t n, cap;
};

static void dump_cb(void *ud, const struct dq_job *j) {
    struct dump *d = ud;
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 64;
        d->lines = realloc(d->lines, d->cap * sizeof *d->lines);
    }
    char *l = malloc(1024);
    /* ready and delayed are one state here: replay puts ready jobs back
     * through the wheel, and which of the two a job is in depends on when
     * the engine last advanced */
    int st = j->state == DQ_READY ? DQ_DELAYED : (int)j->state;
    snprintf(l, 1024,
             "%.*s/%.*s st=%d body=%.*s due=%lld created=%lld dl=%lld ttr=%u "
             "ret=%u att=%u bo=%d/%u/%u",
             (int)j->topic.len, j->topic.p, (int)j->id.len, j->id.p, st,
             (int)j->body.len, j->body.p, (long long)j->due,
             (long long)j->created, (long long)j->deadline, j->ttr,
             j->retries, j->attempts, j->backoff.kind, j->backoff.base,
             j->backoff.max);
    d->lines[d->n++] = l;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void dump_engine(const struct engine *e, struct dump *d) {
    memset(d, 0, sizeof *d);
    engine_foreach(e, dump_cb, d);
    if (d->n) qsort(d->lines, d->n, sizeof *d->lines, cmp_str);
}

static void dump_free(struct dump *d) {
    for (size_t i = 0; i < d->n; i++) free(d->lines[i]);
    free(d->lines);
}

static void assert_same(const struct engine *a, const struct engine *b) {
    struct dump da, db;
    dump_engine(a, &da);
    dump_engine(b, &db);
    for (size_t i = 0; i < da.n && i < db.n; i++)
        if (strcmp(da.lines[i], db.lines[i]) != 0)
            fail_msg("job %zu differs:\n  %s\n  %s", i, da.lines[i],
                     db.lines[i]);
    assert_int_equal(da.n, db.n);
    dump_free(&da);
    dump_free(&db);
    struct dq_stats sa, sb;
    engine_stats(a, (struct dq_str){NULL, 0}, &sa);
    engine_stats(b, (struct dq_str){NULL, 0}, &sb);
    assert_int_equal(sa.added, sb.added);
    assert_int_equal(sa.reserved, sb.reserved);
    assert_int_equal(sa.acked, sb.acked);
    assert_int_equal(sa.nacked, sb.nacked);
    assert_int_equal(sa.expired, sb.expired);
    assert_int_equal(sa.dead, sb.dead);
    assert_int_equal(sa.deleted, sb.deleted);
    assert_int_equal(sa.kicked, sb.kicked);
}

/* Reopens the directory into a fresh engine and compares with t's. */
static void assert_recovers(struct tl *t) {
    struct tl u = {.now = t->now, .fsync_mode = t->fsync_mode,
                   .compact_min = t->compact_min};
    /* the directory is locked by t: copy it aside */
    char cmd[2048], saved[sizeof dir];
    memcpy(saved, dir, sizeof dir);
    assert_true(strlen(dir) + 6 <= sizeof dir);
    strcat(dir, ".copy");
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s && rm -f %s/LOCK",
             dir, saved, dir, dir);
    assert_int_equal(system(cmd), 0);
    tl_open(&u);
    assert_same(t->e, u.e);
    tl_close(&u);
    rm_rf(dir);
    memcpy(dir, saved, sizeof dir);
}

/* --- format round trips ------------------------------------------------------- */

static int collect_cb(void *ud, const struct wal_rec *r, uint64_t off) {
    struct wal_rec *out = ud;
    int i = 0;
    while (out[i].type) i++;
    out[i] = *r;
    return 0;
}

static void test_roundtrip(void **state) {
    struct buf b = BUF_INIT;
    wal_encode_header(&b, WAL_KIND_LOG, 7);
    struct wal_rec in[14];
    memset(in, 0, sizeof in);
    for (int t = WAL_JOB; t <= WAL_SNAPEND; t++) {
        struct wal_rec *r = &in[t - 1];
        r->type = t;
        r->job.topic = S("orders");
        if (t != WAL_KICKALL && t != WAL_PURGE) r->job.id = S("o-1");
        if (t == WAL_COUNTERS || t == WAL_SNAPEND) r->job.topic = r->job.id = S("");
        switch (t) {
        case WAL_JOB:
            r->job.body = S("hello\0world");
            r->job.body.len = 11;
            r->job.state = DQ_RESERVED;
            r->job.due = T0 + 5;
            r->job.created = T0;
            r->job.deadline = T0 + 30000;
            r->job.ttr = 30000;
            r->job.retries = 3;
            r->job.attempts = 2;
            r->job.backoff = (struct dq_backoff){DQ_BACKOFF_FIXED, 500, 0};
            break;
        case WAL_RESERVE:
        case WAL_TOUCH:
            r->job.state = DQ_RESERVED;
            r->job.attempts = 4;
            r->job.due = T0 + 1;
            r->job.deadline = T0 + 9;
            break;
        case WAL_NACK:
        case WAL_EXPIRE:
            r->job.state = DQ_DEAD;
            r->job.attempts = 3;
            r->job.due = T0 + 77;
            break;
        case WAL_RELEASE:
        case WAL_KICK:
            r->job.state = DQ_READY;
            r->job.attempts = 1;
            r->job.due = T0 + 5;
            break;
        case WAL_KICKALL: r->job.due = T0 + 99; break;
        case WAL_COUNTERS:
            r->counters = (struct dq_stats){
                .added = 1, .reserved = 2, .acked = 3, .nacked = 4,
                .expired = 5, .dead = 6, .deleted = 7, .kicked = 8};
            break;
        case WAL_SNAPEND: r->count = 42; break;
        }
        assert_true(wal_encode(&b, r) > 0);
    }
    struct wal_rec out[16];
    memset(out, 0, sizeof out);
    struct wal_scan sc;
    assert_int_equal(wal_scan(b.p, b.len, collect_cb, out, &sc), 0);
    assert_int_equal(sc.end, WAL_END_CLEAN);
    assert_int_equal(sc.kind, WAL_KIND_LOG);
    assert_int_equal(sc.seq, 7);
    assert_int_equal(sc.nrec, 13);
    assert_int_equal(sc.good, b.len);
    for (int i = 0; i < 13; i++) {
        const struct wal_rec *a = &in[i], *o = &out[i];
        assert_int_equal(a->type, o->type);
        assert_int_equal(a->job.topic.len, o->job.topic.len);
        if (a->job.topic.len)
            assert_memory_equal(a->job.topic.p, o->job.topic.p,
                                a->job.topic.len);
        assert_int_equal(a->job.id.len, o->job.id.len);
        assert_int_equal(a->job.body.len, o->job.body.len);
        if (a->job.body.len)
            assert_memory_equal(a->job.body.p, o->job.body.p, a->job.body.len);
        assert_int_equal(a->job.state, o->job.state);
        assert_int_equal(a->job.due, o->job.due);
        assert_int_equal(a->job.created, o->job.created);
        assert_int_equal(a->job.deadline, o->job.deadline);
        assert_int_equal(a->job.ttr, o->job.ttr);
        assert_int_equal(a->job.retries, o->job.retries);
        assert_int_equal(a->job.attempts, o->job.attempts);
        assert_int_equal(a->job.backoff.kind, o->job.backoff.kind);
        assert_int_equal(a->job.backoff.base, o->job.backoff.base);
        assert_memory_equal(&a->counters.added, &o->counters.added,
                            8 * sizeof(uint64_t));
        assert_int_equal(a->count, o->count);
        assert_string_not_equal(wal_type_name(a->type), "?");
    }
    buf_free(&b);
}

/* A log of n ADD records; offsets of the record boundaries in *bounds. */
static void make_log(struct buf *b, int n, size_t *bounds) {
    wal_encode_header(b, WAL_KIND_LOG, 1);
    bounds[0] = b->len;
    for (int i = 0; i < n; i++) {
        char id[16];
        snprintf(id, sizeof id, "j%d", i);
        struct wal_rec r = {.type = WAL_JOB};
        r.job.topic = S("t");
        r.job.id = S(id);
        r.job.body = S("some body bytes");
        r.job.ttr = 1000;
        r.job.due = T0 + i;
        wal_encode(b, &r);
        bounds[i + 1] = b->len;
    }
}

static void test_scan_torn_every_cut(void **state) {
    struct buf b = BUF_INIT;
    size_t bounds[9];
    make_log(&b, 8, bounds);
    for (size_t cut = 0; cut <= b.len; cut++) {
        struct wal_scan sc;
        wal_scan(b.p, cut, NULL, NULL, &sc);
        if (cut < WAL_HEADER_SIZE) {
            assert_int_equal(sc.end, WAL_END_TORN);
            assert_int_equal(sc.good, 0);
            continue;
        }
        size_t k = 0;
        while (k < 8 && bounds[k + 1] <= cut) k++;
        assert_int_equal(sc.nrec, k);
        assert_int_equal(sc.good, bounds[k]);
        assert_int_equal(sc.end, bounds[k] == cut ? WAL_END_CLEAN
                                                  : WAL_END_TORN);
    }
    buf_free(&b);
}

static void test_scan_corrupt_middle(void **state) {
    struct buf b = BUF_INIT;
    size_t bounds[9];
    make_log(&b, 8, bounds);
    /* every byte of record 3 flipped in turn: corrupt, found at record 3,
     * with record 4 named as the valid data after it */
    for (size_t at = bounds[3]; at < bounds[4]; at++) {
        b.p[at] ^= 0x40;
        struct wal_scan sc;
        wal_scan(b.p, b.len, NULL, NULL, &sc);
        assert_int_equal(sc.end, WAL_END_CORRUPT);
        assert_int_equal(sc.good, bounds[3]);
        assert_int_equal(sc.nrec, 3);
        assert_true(sc.next_valid > bounds[3] && sc.next_valid <= bounds[4]);
        b.p[at] ^= 0x40;
    }
    /* damage in the last record is a torn tail */
    b.p[bounds[8] - 1] ^= 1;
    struct wal_scan sc;
    wal_scan(b.p, b.len, NULL, NULL, &sc);
    assert_int_equal(sc.end, WAL_END_TORN);
    assert_int_equal(sc.good, bounds[7]);
    b.p[bounds[8] - 1] ^= 1;
    /* trailing zeros are a clean end */
    size_t len = b.len;
    memset(buf_reserve(&b, 4096), 0, 4096);
    wal_scan(b.p, len + 4096, NULL, NULL, &sc);
    assert_int_equal(sc.end, WAL_END_CLEAN);
    assert_int_equal(sc.good, len);
    /* a zeroed block in the middle is corruption */
    memset(b.p + bounds[2], 0, bounds[3] - bounds[2]);
    wal_scan(b.p, len, NULL, NULL, &sc);
    assert_int_equal(sc.end, WAL_END_CORRUPT);
    assert_int_equal(sc.good, bounds[2]);
    buf_free(&b);
}

static void test_scan_bad_records(void **state) {
    /* a record whose CRC holds but whose fields are wrong: corrupt even at
     * the tail (no torn write produces it) */
    struct buf b = BUF_INIT;
    wal_encode_header(&b, WAL_KIND_LOG, 1);
    uint8_t rec[8 + 1 + 2 + 1 + 2 + 1] = {0};
    rec[4] = sizeof rec - 8;
    rec[8] = WAL_DEL;
    rec[9] = 1;
    rec[11] = 'x';
    rec[12] = 0; /* id length 0: invalid */
    uint32_t crc = crc32c(rec + 4, 4 + rec[4]);
    memcpy(rec, &crc, 4);
    buf_append(&b, rec, sizeof rec);
    struct wal_scan sc;
    wal_scan(b.p, b.len, NULL, NULL, &sc);
    assert_int_equal(sc.end, WAL_END_CORRUPT);
    assert_int_equal(sc.next_valid, 0);
    assert_non_null(strstr(sc.why, "del"));
    /* an unknown type */
    b.len = WAL_HEADER_SIZE;
    rec[8] = 99;
    crc = crc32c(rec + 4, 4 + rec[4]);
    memcpy(rec, &crc, 4);
    buf_append(&b, rec, sizeof rec);
    wal_scan(b.p, b.len, NULL, NULL, &sc);
    assert_int_equal(sc.end, WAL_END_CORRUPT);
    assert_non_null(strstr(sc.why, "unknown"));
    /* headers */
    b.len = WAL_HEADER_SIZE;
    b.p[8] = 2; /* version 2 */
    wal_scan(b.p, b.len, NULL, NULL, &sc);
    assert_int_equal(sc.end, WAL_END_BADHEADER);
    b.p[8] = 1;
    b.p[1] = 'X';
    wal_scan(b.p, b.len, NULL, NULL, &sc);
    assert_int_equal(sc.end, WAL_END_BADHEADER);
    assert_non_null(strstr(sc.why, "not a delayq log"));
    memset(b.p, 0, b.len);
    wal_scan(b.p, b.len, NULL, NULL, &sc);
    assert_int_equal(sc.end, WAL_END_TORN);
    buf_free(&b);
}

/* --- recovery ------------------------------------------------------------------ */

/* Every kind of change, logged; returns with t open. */
static void workload(struct tl *t) {
    t->now = T0;
    tl_open(t);
    assert_int_equal(tl_add(t, "a", "1", "one", 0), DQ_READY);
    assert_int_equal(tl_add(t, "a", "2", "two", 0), DQ_READY);
    assert_int_equal(tl_add(t, "a", "3", "three", 0), DQ_READY);
    assert_int_equal(tl_add(t, "b", "x", "later", 30LL * 86400 * 1000),
                     DQ_DELAYED);
    assert_int_equal(tl_add(t, "c", "p", "purged", 0), DQ_READY);
    assert_int_equal(tl_add(t, "a", "gone", "deleted", 0), DQ_READY);
    tl_commit(t);
    assert_int_equal(tl_del(t, "a", "gone"), 1);
    assert_int_equal(tl_reserve(t, "a", 3), 3);
    tl_commit(t);
    t->now += 10;
    assert_int_equal(tl_ack(t, "a", "1"), 1);
    assert_int_equal(tl_nack(t, "a", "2", 50), DQ_DELAYED);
    tl_touch(t, "a", "3");
    tl_purge(t, "c");
    tl_commit(t);
    tl_advance(t, t->now + 100); /* a/2 due again */
    assert_int_equal(tl_reserve(t, "a", 1), 1); /* a/2, attempt 2 */
    tl_commit(t);
    tl_advance(t, t->now + 5000); /* both leases end: a/2 dead, a/3 ready */
    tl_commit(t);
    struct dq_job v;
    assert_true(engine_get(t->e, S("a"), S("2"), &v));
    assert_int_equal(v.state, DQ_DEAD);
    assert_true(engine_get(t->e, S("a"), S("3"), &v));
    assert_int_equal(v.state, DQ_READY);
    tl_kickall(t, "a");
    assert_int_equal(tl_reserve(t, "a", 1), 1);
    tl_commit(t);
    assert_true(engine_get(t->e, S("a"), S("3"), &v));
    assert_int_equal(v.state, DQ_RESERVED);
    tl_release(t, "a", "3");
    tl_commit(t);
    assert_int_equal(tl_reserve(t, "a", 1), 1);
    tl_commit(t);
}

static void test_recover_everything(void **state) {
    struct tl t = {.fsync_mode = DQ_FSYNC_ALWAYS};
    workload(&t);
    assert_true(exists("00000001.log"));
    assert_recovers(&t);
    tl_close(&t);
    /* and again through a real close and open */
    struct tl u = {.now = t.now, .fsync_mode = DQ_FSYNC_NO};
    tl_open(&u);
    struct dq_job v;
    assert_true(engine_get(u.e, S("b"), S("x"), &v));
    assert_int_equal(v.state, DQ_DELAYED);
    assert_int_equal(v.due, T0 + 30LL * 86400 * 1000);
    assert_memory_equal(v.body.p, "later", 5);
    assert_false(engine_get(u.e, S("a"), S("1"), NULL));
    assert_false(engine_get(u.e, S("a"), S("gone"), NULL));
    assert_false(engine_get(u.e, S("c"), S("p"), NULL));
    /* leases survive: the reserved job keeps its attempts and deadline */
    assert_true(engine_get(u.e, S("a"), S("3"), &v));
    assert_int_equal(v.state, DQ_RESERVED);
    assert_int_equal(v.attempts, 2);
    assert_int_equal(v.deadline, t.now + 1000);
    assert_true(engine_get(u.e, S("a"), S("2"), &v));
    assert_int_equal(v.attempts, 0); /* kicked */
    tl_close(&u);
}

static void test_empty_dir_and_lock(void **state) {
    struct tl t = {.now = T0};
    tl_open(&t);
    assert_int_equal(fsize("00000001.log"), WAL_HEADER_SIZE);
    struct tl u = {.now = T0};
    char err[512];
    assert_int_equal(tl_open_rc(&u, false, err, sizeof err), -1);
    assert_non_null(strstr(err, "in use"));
    tl_close(&t);
    tl_open(&u);
    assert_int_equal(engine_count(u.e), 0);
    tl_close(&u);
}

static void test_torn_tail_on_disk(void **state) {
    struct tl t = {.now = T0};
    tl_open(&t);
    for (int i = 0; i < 20; i++) {
        char id[16];
        snprintf(id, sizeof id, "%02d", i);
        tl_add(&t, "q", id, "body", 0);
        tl_commit(&t);
    }
    tl_close(&t);
    uint8_t *p;
    size_t n = read_file("00000001.log", &p);
    /* cut in the middle of the last record, then add garbage */
    size_t cut = n - 5;
    write_file("00000001.log", p, cut);
    struct tl u = {.now = T0};
    tl_open(&u);
    assert_int_equal(engine_count(u.e), 19);
    assert_true(fsize("00000001.log") < (long)cut);
    /* the log goes on from the cut */
    tl_add(&u, "q", "new", "body", 0);
    tl_commit(&u);
    tl_close(&u);
    tl_open(&u);
    assert_int_equal(engine_count(u.e), 20);
    assert_true(engine_get(u.e, S("q"), S("new"), NULL));
    tl_close(&u);
    free(p);
}

static void test_corrupt_middle_on_disk(void **state) {
    struct tl t = {.now = T0};
    tl_open(&t);
    for (int i = 0; i < 20; i++) {
        char id[16];
        snprintf(id, sizeof id, "%02d", i);
        tl_add(&t, "q", id, "body", 0);
        tl_commit(&t);
    }
    tl_close(&t);
    uint8_t *p;
    size_t n = read_file("00000001.log", &p);
    size_t rec = (n - WAL_HEADER_SIZE) / 20;
    size_t at = WAL_HEADER_SIZE + 7 * rec + 12; /* inside record 7 */
    p[at] ^= 0xff;
    write_file("00000001.log", p, n);
    struct tl u = {.now = T0};
    char err[512];
    assert_int_equal(tl_open_rc(&u, false, err, sizeof err), -1);
    char want[64];
    snprintf(want, sizeof want, "offset %zu", WAL_HEADER_SIZE + 7 * rec);
    assert_non_null(strstr(err, "00000001.log"));
    assert_non_null(strstr(err, want));
    assert_non_null(strstr(err, "--repair"));
    /* the file was not touched */
    assert_int_equal(fsize("00000001.log"), (long)n);
    assert_int_equal(tl_open_rc(&u, true, err, sizeof err), 0);
    assert_int_equal(engine_count(u.e), 7);
    assert_int_equal(fsize("00000001.log"), (long)(WAL_HEADER_SIZE + 7 * rec));
    tl_close(&u);
    tl_open(&u); /* repaired for good */
    assert_int_equal(engine_count(u.e), 7);
    tl_close(&u);
    free(p);
}

static void test_incomplete_header(void **state) {
    /* a crash right after creating a segment */
    write_file("00000001.log", (const uint8_t *)"\x89" "DQ", 3);
    struct tl t = {.now = T0};
    tl_open(&t);
    assert_int_equal(fsize("00000001.log"), WAL_HEADER_SIZE);
    tl_close(&t);
    write_file("00000001.log", (const uint8_t *)"garbage!", 8);
    char err[512];
    assert_int_equal(tl_open_rc(&t, false, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a delayq log"));
}

/* --- failures through the seams ---------------------------------------------- */

static int fail_writes;
static int fail_syncs;
static int write_calls;

static ssize_t bad_pwrite(int fd, const void *p, size_t n, off_t off) {
    write_calls++;
    if (fail_writes) {
        fail_writes--;
        if (n > 1) return wal_io_default.pwrite(fd, p, n / 2, off); /* short */
        errno = ENOSPC;
        return -1;
    }
    return wal_io_default.pwrite(fd, p, n, off);
}

static int bad_fdatasync(int fd) {
    if (fail_syncs) {
        fail_syncs--;
        errno = EIO;
        return -1;
    }
    return wal_io_default.fdatasync(fd);
}

static void test_write_failure_and_reload(void **state) {
    struct tl t = {.now = T0, .fsync_mode = DQ_FSYNC_ALWAYS};
    tl_open(&t);
    tl_add(&t, "q", "kept", "body", 0);
    tl_add(&t, "q", "leased", "body", 0);
    tl_commit(&t);
    tl_reserve(&t, "q", 1); /* "kept" */
    tl_commit(&t);
    long good = fsize("00000001.log");
    wal_io.pwrite = bad_pwrite;
    fail_writes = 1000; /* the disk is full */
    tl_add(&t, "q", "lost", "body", 0);
    tl_del(&t, "q", "leased");
    assert_int_equal(wal_commit(t.w), -1);
    assert_int_equal(wal_last_error(t.w), ENOSPC);
    assert_false(wal_writable(t.w));
    /* the partial write was cut off */
    assert_int_equal(fsize("00000001.log"), good);
    /* the store reloads its engine: back to what the log holds */
    struct engine *e2 = new_engine(&t);
    char err[256];
    assert_int_equal(wal_reload(t.w, e2, t.now, err, sizeof err), 0);
    engine_free(t.e);
    t.e = e2;
    struct dq_job v;
    assert_true(engine_get(t.e, S("q"), S("kept"), &v));
    assert_int_equal(v.state, DQ_RESERVED);
    assert_true(engine_get(t.e, S("q"), S("leased"), NULL));
    assert_false(engine_get(t.e, S("q"), S("lost"), NULL));
    /* while broken, the lease expiry is kept, not written */
    tl_advance(&t, t.now + 2000);
    assert_true(wal_pending(t.w));
    assert_int_equal(wal_commit(t.w), 0);
    assert_true(wal_pending(t.w));
    usleep(3000);
    assert_false(wal_tick(t.w)); /* probe fails: still full */
    assert_false(wal_writable(t.w));
    assert_int_equal(fsize("00000001.log"), good);
    /* space returns: the probe writes what waited */
    fail_writes = 0;
    usleep(3000);
    assert_true(wal_tick(t.w));
    assert_true(wal_writable(t.w));
    assert_false(wal_pending(t.w));
    tl_add(&t, "q", "after", "body", 0);
    tl_commit(&t);
    assert_recovers(&t);
    tl_close(&t);
}

static void test_fsync_failure(void **state) {
    struct tl t = {.now = T0, .fsync_mode = DQ_FSYNC_ALWAYS};
    tl_open(&t);
    tl_add(&t, "q", "kept", "body", 0);
    tl_commit(&t);
    long good = fsize("00000001.log");
    wal_io.fdatasync = bad_fdatasync;
    fail_syncs = 1;
    tl_add(&t, "q", "lost", "body", 0);
    assert_int_equal(wal_commit(t.w), -1);
    assert_int_equal(wal_last_error(t.w), EIO);
    /* written, but not synced: taken back */
    assert_int_equal(fsize("00000001.log"), good);
    struct engine *e2 = new_engine(&t);
    char err[256];
    assert_int_equal(wal_reload(t.w, e2, t.now, err, sizeof err), 0);
    engine_free(t.e);
    t.e = e2;
    assert_false(engine_get(t.e, S("q"), S("lost"), NULL));
    usleep(3000);
    assert_true(wal_tick(t.w));
    tl_add(&t, "q", "again", "body", 0);
    tl_commit(&t);
    assert_recovers(&t);
    tl_close(&t);
}

/* INFO lines of the log, for the fsync figures. */
struct info_lines {
    char count[32], sum[32], buckets[512];
};

static void info_line(void *ud, const char *name, const char *value) {
    struct info_lines *il = ud;
    if (!strcmp(name, "log_fsync_seconds_count"))
        snprintf(il->count, sizeof il->count, "%s", value);
    else if (!strcmp(name, "log_fsync_seconds_sum"))
        snprintf(il->sum, sizeof il->sum, "%s", value);
    else if (!strcmp(name, "log_fsync_seconds_buckets"))
        snprintf(il->buckets, sizeof il->buckets, "%s", value);
}

static int slow_fdatasync(int fd) {
    usleep(3000);
    return bad_fdatasync(fd);
}

/* Every group commit's sync is timed under --fsync always, a failed one
 * too, each in the bucket its duration says. */
static void test_fsync_durations(void **state) {
    struct tl t = {.now = T0, .fsync_mode = DQ_FSYNC_ALWAYS};
    tl_open(&t);
    struct info_lines il;
    wal_info(t.w, info_line, &il);
    assert_string_equal(il.count, "0");
    assert_string_equal(il.sum, "0.000000");
    assert_non_null(strstr(il.buckets, "0.0001=0,"));
    tl_add(&t, "q", "a", "body", 0);
    tl_commit(&t);
    tl_add(&t, "q", "b", "body", 0);
    tl_commit(&t);
    wal_io.fdatasync = slow_fdatasync; /* >= 3 ms each, the second fails */
    tl_add(&t, "q", "c", "body", 0);
    tl_commit(&t);
    fail_syncs = 1;
    tl_add(&t, "q", "d", "body", 0);
    assert_int_equal(wal_commit(t.w), -1);
    wal_io.fdatasync = wal_io_default.fdatasync;
    wal_info(t.w, info_line, &il);
    assert_string_equal(il.count, "4");
    assert_true(strtod(il.sum, NULL) >= 0.006);
    /* cumulative: the two slow ones are above 2.5 ms, all four by 5 s */
    char *le25 = strstr(il.buckets, ",0.0025=");
    assert_non_null(le25);
    assert_true(strtoul(le25 + 8, NULL, 10) <= 2);
    assert_non_null(strstr(il.buckets, ",5=4,+Inf=4"));
    tl_close(&t);
}

static void test_alloc_failure(void **state) {
    struct tl t = {.now = T0, .fsync_mode = DQ_FSYNC_NO};
    tl_open(&t);
    tl_add(&t, "q", "kept", "body", 0);
    tl_commit(&t);
    /* the batch buffer cannot grow */
    char big[6000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    struct dq_add a = {.topic = S("q"), .id = S("big"), .body = S(big),
                       .due = T0, .ttr = 1000};
    struct dq_job v;
    assert_true(engine_add(t.e, t.now, &a, &v) >= 0);
    xalloc_fail_after(0);
    log_job(&t, &v);
    xalloc_fail_after(-1);
    assert_true(wal_pending(t.w));
    assert_int_equal(wal_commit(t.w), -1);
    /* not a disk problem: the log stays writable */
    assert_true(wal_writable(t.w));
    struct engine *e2 = new_engine(&t);
    char err[256];
    assert_int_equal(wal_reload(t.w, e2, t.now, err, sizeof err), 0);
    engine_free(t.e);
    t.e = e2;
    assert_false(engine_get(t.e, S("q"), S("big"), NULL));
    tl_add(&t, "q", "next", "body", 0);
    tl_commit(&t);
    assert_recovers(&t);
    tl_close(&t);
}

/* --- compaction ----------------------------------------------------------------- */

static void wait_compaction(struct tl *t) {
    for (int i = 0; i < 5000 && wal_compacting(t->w); i++) {
        usleep(1000);
        wal_tick(t->w);
    }
    assert_false(wal_compacting(t->w));
}

static void test_compaction_unpinned(void **state) {
    struct tl t = {.now = T0, .fsync_mode = DQ_FSYNC_EVERYSEC,
                   .compact_min = 64 << 10};
    tl_open(&t);
    tl_add(&t, "far", "x", "due in 30 days", 30LL * 86400 * 1000);
    tl_commit(&t);
    char body[201];
    memset(body, 'b', 200);
    body[200] = 0;
    int started = 0;
    for (int i = 0; i < 20000; i++) {
        char id[16];
        snprintf(id, sizeof id, "%d", i);
        tl_add(&t, "q", id, body, 0);
        tl_commit(&t);
        tl_ack(&t, "q", id);
        tl_commit(&t);
        if (wal_maybe_compact(t.w, t.e, false) == 1) {
            started++;
            /* each one to its end: on a loaded machine the helper thread's
             * sync could otherwise outlast the loop, starting fewer */
            wait_compaction(&t);
        }
        wal_tick(t.w);
    }
    wait_compaction(&t);
    assert_true(started >= 10);
    /* 20000 x ~300 bytes went through; what is kept is a snapshot of one
     * job and the segment written since the last compaction began */
    long kept = dir_bytes();
    if (kept >= 2 << 20) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "ls -l %s >&2", dir);
        (void)system(cmd);
        fail_msg("directory holds %ld bytes", kept);
    }
    assert_false(exists("00000001.log")); /* the 30-day job's segment */
    assert_recovers(&t);
    tl_close(&t);
    struct tl u = {.now = T0};
    tl_open(&u);
    assert_int_equal(engine_count(u.e), 1);
    struct dq_job v;
    assert_true(engine_get(u.e, S("far"), S("x"), &v));
    assert_int_equal(v.due, T0 + 30LL * 86400 * 1000);
    struct dq_stats st;
    engine_stats(u.e, (struct dq_str){NULL, 0}, &st);
    assert_int_equal(st.added, 20001);
    assert_int_equal(st.acked, 20000);
    tl_close(&u);
}

static void test_compaction_everything(void **state) {
    struct tl t = {.fsync_mode = DQ_FSYNC_ALWAYS};
    workload(&t);
    assert_int_equal(wal_maybe_compact(t.w, t.e, true), 1);
    /* changes go on while the snapshot is written */
    tl_add(&t, "d", "during", "x", 0);
    tl_commit(&t);
    wait_compaction(&t);
    assert_true(exists("00000001.snap"));
    assert_false(exists("00000001.log"));
    assert_true(exists("00000002.log"));
    tl_add(&t, "d", "after", "x", 0);
    tl_commit(&t);
    assert_recovers(&t);
    /* a second compaction replaces the first snapshot */
    assert_int_equal(wal_maybe_compact(t.w, t.e, true), 1);
    wait_compaction(&t);
    assert_false(exists("00000001.snap"));
    assert_true(exists("00000002.snap"));
    assert_recovers(&t);
    tl_close(&t);
}

static void test_compaction_sync_fails(void **state) {
    struct tl t = {.fsync_mode = DQ_FSYNC_NO};
    workload(&t);
    wal_io.fdatasync = bad_fdatasync;
    fail_syncs = 1000; /* the snapshot's sync fails */
    assert_int_equal(wal_maybe_compact(t.w, t.e, true), 1);
    wait_compaction(&t);
    assert_false(exists("00000001.snap"));
    assert_false(exists("00000001.snap.tmp"));
    assert_true(exists("00000001.log"));
    fail_syncs = 0;
    wal_io.fdatasync = wal_io_default.fdatasync;
    assert_recovers(&t);
    tl_close(&t);
}

static void test_leftovers_and_gaps(void **state) {
    struct tl t = {.fsync_mode = DQ_FSYNC_NO};
    workload(&t);
    assert_int_equal(wal_maybe_compact(t.w, t.e, true), 1);
    wait_compaction(&t);
    tl_add(&t, "z", "1", "x", 0);
    tl_commit(&t);
    tl_close(&t);
    /* a compaction that died before renaming, and a stale segment */
    write_file("00000009.snap.tmp", (const uint8_t *)"partial", 7);
    write_file("00000001.log", (const uint8_t *)"stale", 5);
    struct tl u = {.now = t.now};
    tl_open(&u);
    assert_false(exists("00000009.snap.tmp"));
    assert_false(exists("00000001.log"));
    assert_true(engine_get(u.e, S("z"), S("1"), NULL));
    tl_close(&u);
    /* a missing segment */
    uint8_t *p;
    size_t n = read_file("00000002.log", &p);
    p[16] = 4; /* make it claim number 4 */
    write_file("00000004.log", p, n);
    free(p);
    char err[512];
    /* (its header now disagrees with nothing: the gap is found first) */
    assert_int_equal(tl_open_rc(&u, false, err, sizeof err), -1);
    assert_non_null(strstr(err, "00000003.log is missing"));
    assert_int_equal(tl_open_rc(&u, true, err, sizeof err), 0);
    assert_false(exists("00000004.log"));
    assert_true(engine_get(u.e, S("z"), S("1"), NULL));
    tl_close(&u);
}

static void test_ready_order_after_restart(void **state) {
    /* jobs become ready in due order; a snapshot stores them in hash order;
     * after a restart they come out by due time again */
    struct tl t = {.now = T0, .fsync_mode = DQ_FSYNC_NO};
    tl_open(&t);
    for (int i = 0; i < 200; i++) {
        char id[16];
        snprintf(id, sizeof id, "j%03d", i);
        tl_add(&t, "q", id, "b", (int64_t)((i * 7919) % 200));
    }
    tl_commit(&t);
    tl_advance(&t, T0 + 1000);
    assert_int_equal(wal_maybe_compact(t.w, t.e, true), 1);
    wait_compaction(&t);
    tl_close(&t);
    struct tl u = {.now = T0 + 2000};
    tl_open(&u);
    tl_advance(&u, u.now);
    int64_t last = 0;
    for (int i = 0; i < 200; i++) {
        struct dq_job v;
        struct dq_str q = S("q");
        assert_int_equal(engine_reserve(u.e, u.now, &q, 1, 1, &v), 1);
        assert_true(v.due >= last);
        last = v.due;
    }
    tl_close(&u);
}

/* Random changes of every kind between the slices of a compaction: the
 * snapshot sees jobs before or after their changes, the new segment has
 * the changes, and recovery must end exactly where the engine is. */
static void random_op(struct tl *t, unsigned *seed) {
    char id[16];
    const char *topics[] = {"a", "b", "c"};
    const char *topic = topics[rand_r(seed) % 3];
    snprintf(id, sizeof id, "%u", rand_r(seed) % 3000);
    switch (rand_r(seed) % 12) {
    case 0: case 1: case 2:
        tl_add(t, topic, id, "fresh", (int64_t)(rand_r(seed) % 50));
        break;
    case 3: tl_del(t, topic, id); break;
    case 4: tl_ack(t, topic, id); break;
    case 5: case 6: tl_reserve(t, topic, 1 + (int)(rand_r(seed) % 3)); break;
    case 7: tl_nack(t, topic, id, (int64_t)(rand_r(seed) % 30) - 1); break;
    case 8: tl_touch(t, topic, id); break;
    case 9: tl_release(t, topic, id); break;
    case 10:
        if (rand_r(seed) % 20 == 0) tl_purge(t, topic);
        else tl_kickall(t, topic);
        break;
    case 11: tl_advance(t, t->now + (int64_t)(rand_r(seed) % 400)); break;
    }
}

static void test_compaction_while_changing(void **state) {
    for (unsigned round = 0; round < 4; round++) {
        unsigned seed = 42 + round;
        struct tl t = {.now = T0, .fsync_mode = DQ_FSYNC_NO};
        tl_open(&t);
        for (int i = 0; i < 6000; i++) {
            random_op(&t, &seed);
            if (i % 50 == 0) tl_commit(&t);
        }
        tl_commit(&t);
        assert_int_equal(wal_maybe_compact(t.w, t.e, true), 1);
        int steps = 0;
        while (wal_compacting(t.w)) {
            for (int k = 0; k < 40; k++) random_op(&t, &seed);
            tl_commit(&t);
            wal_tick(t.w);
            steps++;
        }
        assert_true(steps >= 2); /* it did run in slices */
        for (int k = 0; k < 200; k++) random_op(&t, &seed);
        tl_commit(&t);
        assert_recovers(&t);
        tl_close(&t);
        rm_rf(dir);
        assert_int_equal(mkdir(dir, 0700), 0);
    }
}

static void test_large_file_recovery(void **state) {
    /* over the size where a helper thread checks CRCs ahead of the replay */
    struct tl t = {.now = T0, .fsync_mode = DQ_FSYNC_NO};
    tl_open(&t);
    char body[1001];
    memset(body, 'z', 1000);
    body[1000] = 0;
    for (int i = 0; i < 12000; i++) {
        char id[16];
        snprintf(id, sizeof id, "%05d", i);
        tl_add(&t, "big", id, body, 1000);
        if (i % 100 == 0) tl_commit(&t);
    }
    tl_commit(&t);
    assert_recovers(&t);
    tl_close(&t);
    assert_true(fsize("00000001.log") > (10 << 20));
    /* a torn last record and a corrupt one in the middle, read by the
     * helper-assisted scan */
    uint8_t *p;
    size_t n = read_file("00000001.log", &p);
    write_file("00000001.log", p, n - 100);
    struct tl u = {.now = T0};
    tl_open(&u);
    assert_int_equal(engine_count(u.e), 11999);
    tl_close(&u);
    free(p);
    n = read_file("00000001.log", &p);
    p[n / 2] ^= 0x55;
    write_file("00000001.log", p, n);
    char err[512];
    assert_int_equal(tl_open_rc(&u, false, err, sizeof err), -1);
    assert_non_null(strstr(err, "corrupt record"));
    free(p);
}

static void test_reload_after_compaction_and_rotation(void **state) {
    struct tl t = {.fsync_mode = DQ_FSYNC_ALWAYS};
    workload(&t);
    assert_int_equal(wal_maybe_compact(t.w, t.e, true), 1);
    tl_add(&t, "r", "1", "x", 0);
    tl_commit(&t);
    /* reload while a compaction runs (it stops it): two segments */
    struct engine *e2 = new_engine(&t);
    char err[256];
    assert_int_equal(wal_reload(t.w, e2, t.now, err, sizeof err), 0);
    assert_same(t.e, e2);
    engine_free(e2);
    wait_compaction(&t);
    e2 = new_engine(&t);
    assert_int_equal(wal_reload(t.w, e2, t.now, err, sizeof err), 0);
    assert_same(t.e, e2);
    engine_free(e2);
    tl_close(&t);
}

int main(void) {
    log_set_level(getenv("WAL_TEST_LOG") ? LOG_DEBUG : LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_scan_torn_every_cut),
        cmocka_unit_test(test_scan_corrupt_middle),
        cmocka_unit_test(test_scan_bad_records),
        cmocka_unit_test_setup_teardown(test_recover_everything, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_empty_dir_and_lock, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_torn_tail_on_disk, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_middle_on_disk, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_incomplete_header, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_write_failure_and_reload, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fsync_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fsync_durations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alloc_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compaction_unpinned, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_compaction_everything, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_compaction_sync_fails, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_leftovers_and_gaps, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_ready_order_after_restart, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_reload_after_compaction_and_rotation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compaction_while_changing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_large_file_recovery, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
