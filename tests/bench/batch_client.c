/* batch_client.c -- end to end add -> reserve -> ack, the same way for the
 * seed design run directly on Redis and for delayqd: a neutral harness
 * (hiredis, not delayq's own bench or client library) for docs/benchmarks.md
 * ("The Redis store beside the seed design").
 *
 * Each client is its own process with its own topic and connection. Two
 * pipelining shapes, the same code for both targets:
 *
 *   batch (default): send B commands, read the B replies, send the next B
 *     -- what redis-py and hiredis pipelines do;
 *   window (-w): keep B requests in flight; a reserve's reply sends its ack.
 *
 * Phases: add N jobs due now (B at a time); seed only: carry them to the
 * ready list (its carry script, 1000 at a time, as its poller would);
 * then reserve and ack every job.
 *
 *   seed    (-t seed, -p = Redis): the seed articles' four scripts by EVALSHA
 *           (the same as seed_client.c and scripts/redis-bench):
 *           add HSET+ZADD, carry ZRANGEBYSCORE+ZREM+RPUSH, pop LPOP+HGET+ZADD,
 *           ack HDEL+ZREM
 *   delayqd (-t delayqd, -p = delayqd): ADD t id body;
 *           RESERVE TIMEOUT 0 COUNT k FROM t; ACK t id (one per job)
 *
 * Prints jobs/s = all clients' jobs / wall time from the moment all clients
 * are connected to the last one's end.
 *
 * Build and run (not part of make):
 *   cc -O2 -o build/batch_client tests/bench/batch_client.c -lhiredis
 *   build/batch_client -t seed -p 6380 -c 4 -n 50000
 *   build/batch_client -t delayqd -p 7730 -c 4 -n 50000
 */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "seed.h"

struct opts {
    const char *host;
    int port, clients, batch, count, size, window, seed;
    long n;
};

static redisContext *rc;
static char sha_add[41], sha_carry[41], sha_pop[41], sha_ack[41];
static char pool[64], bucket[64], readyp[64], ready[96], topic[32];
static char *body;

static void die(const char *what, redisReply *r) {
    fprintf(stderr, "batch_client: %s: %s\n", what, r ? r->str : rc->errstr);
    exit(1);
}

static redisReply *get(const char *what) {
    redisReply *r;
    if (redisGetReply(rc, (void **)&r) != REDIS_OK || !r) die(what, NULL);
    if (r->type == REDIS_REPLY_ERROR) die(what, r);
    return r;
}

static void load(const char *src, char *sha) {
    redisReply *r = redisCommand(rc, "SCRIPT LOAD %s", src);
    if (!r || r->type != REDIS_REPLY_STRING) die("SCRIPT LOAD", r);
    snprintf(sha, 41, "%s", r->str);
    freeReplyObject(r);
}

static void send_add(const struct opts *o, long i, const char *due) {
    char id[64];
    if (o->seed) {
        snprintf(id, sizeof id, "%s:j%ld", topic, i);
        redisAppendCommand(rc, "EVALSHA %s 2 %s %s %s %s %s", sha_add, pool, bucket, id, body,
                           due);
    } else {
        snprintf(id, sizeof id, "j%ld", i);
        redisAppendCommand(rc, "ADD %s %s %s", topic, id, body);
    }
}

static void send_reserve(const struct opts *o) {
    if (o->seed)
        redisAppendCommand(rc, "EVALSHA %s 3 %s %s %s %lld 30000", sha_pop, ready, pool, bucket,
                           now_ms());
    else
        redisAppendCommand(rc, "RESERVE TIMEOUT 0 COUNT %d FROM %s", o->count, topic);
}

static void send_ack(const struct opts *o, const redisReply *id) {
    if (o->seed)
        redisAppendCommand(rc, "EVALSHA %s 2 %s %s %b", sha_ack, pool, bucket, id->str, id->len);
    else
        redisAppendCommand(rc, "ACK %s %b", topic, id->str, id->len);
}

/* the ids a reserve reply holds: seed {id, body} or nil; delayqd an array
 * of [topic, id, body, ...] per job, or nil */
static int reply_ids(const struct opts *o, const redisReply *r, const redisReply **ids, int max) {
    int k = 0;
    if (r->type != REDIS_REPLY_ARRAY) return 0;
    if (o->seed) {
        ids[k++] = r->element[0];
        return k;
    }
    for (size_t i = 0; i < r->elements && k < max; i++) {
        const redisReply *job = r->element[i];
        if (job->type == REDIS_REPLY_ARRAY && job->elements >= 2) ids[k++] = job->element[1];
    }
    return k;
}

static void add_phase(const struct opts *o) {
    char due[32];
    snprintf(due, sizeof due, "%lld", now_ms());
    long sent = 0, got = 0;
    while (got < o->n) {
        while (sent < o->n && sent - got < o->batch) send_add(o, sent++, due);
        if (!o->window) /* batch: read all but the last reply of the batch here */
            for (; got < sent - 1; got++) freeReplyObject(get("add"));
        freeReplyObject(get("add"));
        got++;
    }
    if (o->seed) {
        for (;;) {
            redisReply *r = redisCommand(rc, "EVALSHA %s 1 %s %lld 1000 %s", sha_carry, bucket,
                                         now_ms(), readyp);
            if (!r || r->type != REDIS_REPLY_INTEGER) die("carry", r);
            long moved = (long)r->integer;
            freeReplyObject(r);
            if (moved == 0) break;
        }
    }
}

static void consume_batch(const struct opts *o) {
    long acked = 0;
    int max = o->batch * (o->seed ? 1 : o->count);
    const redisReply **ids = malloc(sizeof *ids * (size_t)max);
    redisReply **reps = malloc(sizeof *reps * (size_t)o->batch);
    while (acked < o->n) {
        for (int i = 0; i < o->batch; i++) send_reserve(o);
        int k = 0;
        for (int i = 0; i < o->batch; i++) {
            reps[i] = get("reserve");
            k += reply_ids(o, reps[i], ids + k, max - k);
        }
        if (k == 0) {
            fprintf(stderr, "batch_client: no job ready with %ld of %ld acked\n", acked, o->n);
            exit(1);
        }
        for (int i = 0; i < k; i++) send_ack(o, ids[i]);
        for (int i = 0; i < o->batch; i++) freeReplyObject(reps[i]);
        for (int i = 0; i < k; i++) freeReplyObject(get("ack"));
        acked += k;
    }
    free(ids);
    free(reps);
}

static void consume_window(const struct opts *o) {
    long acked = 0, reserved = 0, res_inflight = 0, inflight = 0;
    int per = o->seed ? 1 : o->count;
    const redisReply **ids = malloc(sizeof *ids * (size_t)per);
    while (acked < o->n) {
        while (reserved + res_inflight * per < o->n && inflight < o->batch) {
            send_reserve(o);
            res_inflight++;
            inflight++;
        }
        redisReply *r = get("reserve/ack");
        inflight--;
        if (r->type == REDIS_REPLY_INTEGER) {
            acked += r->integer;
        } else if (r->type == REDIS_REPLY_ARRAY) {
            res_inflight--;
            int k = reply_ids(o, r, ids, per);
            for (int i = 0; i < k; i++) send_ack(o, ids[i]);
            inflight += k;
            reserved += k;
        } else {
            fprintf(stderr, "batch_client: no job ready with %ld of %ld acked\n", acked, o->n);
            exit(1);
        }
        freeReplyObject(r);
    }
    free(ids);
}

static int client(const struct opts *o, int i, int go, int ready_fd) {
    rc = redisConnect(o->host, o->port);
    if (!rc || rc->err) {
        fprintf(stderr, "batch_client: cannot connect: %s\n", rc ? rc->errstr : "oom");
        return 1;
    }
    snprintf(topic, sizeof topic, "b%lld%d", now_ms() % 1000000, i);
    if (o->seed) {
        load(ADD, sha_add);
        load(CARRY, sha_carry);
        load(POP, sha_pop);
        load(ACK, sha_ack);
        snprintf(pool, sizeof pool, "%s:pool", topic);
        snprintf(bucket, sizeof bucket, "%s:bucket", topic);
        snprintf(readyp, sizeof readyp, "%s:ready:", topic);
        snprintf(ready, sizeof ready, "%s%s", readyp, topic);
    }
    char c = 'r';
    if (write(ready_fd, &c, 1) != 1) return 1;
    close(ready_fd);
    if (read(go, &c, 1) != 1) return 1; /* every client connected: start */
    double t0 = now_s();
    add_phase(o);
    double t1 = now_s();
    if (o->window)
        consume_window(o);
    else
        consume_batch(o);
    if (i == 0 && getenv("BATCH_PHASES")) /* where one client's time goes */
        fprintf(stderr, "client 0: add (and carry) %.1f us/job, reserve+ack %.1f us/job\n",
                (t1 - t0) * 1e6 / o->n, (now_s() - t1) * 1e6 / o->n);
    redisFree(rc);
    return 0;
}

int main(int argc, char **argv) {
    struct opts o = {"127.0.0.1", 6379, 1, 64, 1, 100, 0, 0, 100000};
    int opt;
    while ((opt = getopt(argc, argv, "t:h:p:c:n:b:k:d:w")) != -1) {
        switch (opt) {
        case 't': o.seed = strcmp(optarg, "seed") == 0; break;
        case 'h': o.host = optarg; break;
        case 'p': o.port = atoi(optarg); break;
        case 'c': o.clients = atoi(optarg); break;
        case 'n': o.n = atol(optarg); break;
        case 'b': o.batch = atoi(optarg); break;
        case 'k': o.count = atoi(optarg); break;
        case 'd': o.size = atoi(optarg); break;
        case 'w': o.window = 1; break;
        default:
            fprintf(stderr, "usage: batch_client -t seed|delayqd [-h host] [-p port] [-c clients] "
                            "[-n jobs per client] [-b batch] [-k count] [-d size] [-w]\n");
            return 2;
        }
    }
    if (o.clients < 1 || o.batch < 1 || o.count < 1 || o.n < 1 || o.size < 0) {
        fprintf(stderr, "batch_client: -c, -b, -k and -n must be positive, -d at least 0\n");
        return 2;
    }
    body = malloc((size_t)o.size + 1);
    memset(body, 'x', (size_t)o.size);
    body[o.size] = '\0';
    int gp[2], rp[2];
    if (pipe(gp) || pipe(rp)) return 1;
    for (int i = 0; i < o.clients; i++) {
        if (fork() == 0) {
            close(gp[1]);
            close(rp[0]);
            _exit(client(&o, i, gp[0], rp[1]));
        }
    }
    close(gp[0]);
    close(rp[1]);
    char c; /* every client connected and loaded its scripts */
    for (int i = 0; i < o.clients; i++)
        if (read(rp[0], &c, 1) != 1) {
            fprintf(stderr, "batch_client: a client could not connect\n");
            return 1;
        }
    double t0 = now_s();
    char go[1024];
    memset(go, 'g', sizeof go);
    for (int left = o.clients; left > 0; left -= (int)sizeof go)
        if (write(gp[1], go, (size_t)(left < (int)sizeof go ? left : (int)sizeof go)) < 0) return 1;
    int failed = 0, st;
    while (wait(&st) > 0)
        if (!WIFEXITED(st) || WEXITSTATUS(st)) failed = 1;
    double took = now_s() - t0;
    if (failed) {
        fprintf(stderr, "batch_client: a client failed\n");
        return 1;
    }
    long total = o.n * o.clients;
    printf("%s: %d clients, %s %d, COUNT %d, %d-byte bodies: %ld jobs end to end "
           "(add -> reserve -> ack) in %.2f s = %.0f jobs/s\n",
           o.seed ? "seed" : "delayqd", o.clients, o.window ? "window" : "batches of", o.batch,
           o.seed ? 1 : o.count, o.size, total, took, total / took);
    return 0;
}
