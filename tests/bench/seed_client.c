/* seed_client.c -- the seeds' Redis delay queue, driven directly: the
 * baseline that delayqd over Redis is measured against (docs/redis.md,
 * docs/benchmarks.md).
 *
 * The design of the seed articles (job pool hash, one bucket sorted set,
 * a ready list per topic), with the four Lua scripts they describe, made as
 * fast as a client can make them: EVALSHA, pipelined (--pipeline requests
 * in flight on one connection), carry in batches of 1000.
 *
 *   add:   HSET pool topic:id body; ZADD bucket due topic:id
 *   carry: ZRANGEBYSCORE bucket -inf now LIMIT 0 n; ZREM; RPUSH ready:<topic>
 *   pop:   LPOP ready:<topic>; HGET pool; ZADD bucket now+ttr (redelivery)
 *   ack:   HDEL pool; ZREM bucket
 *
 * End to end: add N jobs due now, carry them, pop and ack each one. Prints
 * the phases and jobs per second for the whole.
 *
 * Build and run (not part of make):
 *   cc -O2 -o build/seed_client tests/bench/seed_client.c -lhiredis
 *   build/seed_client -p 6379 -n 200000 -P 64 -d 100
 */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "seed.h"

static redisContext *rc;

static void check(redisReply *r, const char *what) {
    if (!r || r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "seed_client: %s: %s\n", what, r ? r->str : rc->errstr);
        exit(1);
    }
}

static void load(const char *src, char *sha) {
    redisReply *r = redisCommand(rc, "SCRIPT LOAD %s", src);
    check(r, "SCRIPT LOAD");
    snprintf(sha, 41, "%s", r->str);
    freeReplyObject(r);
}

int main(int argc, char **argv) {
    const char *host = "127.0.0.1";
    int port = 6379, pipeline = 64, size = 100;
    long n = 200000;
    int opt;
    while ((opt = getopt(argc, argv, "h:p:n:P:d:")) != -1) {
        switch (opt) {
        case 'h': host = optarg; break;
        case 'p': port = atoi(optarg); break;
        case 'n': n = atol(optarg); break;
        case 'P': pipeline = atoi(optarg); break;
        case 'd': size = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: seed_client [-h host] [-p port] [-n jobs] [-P pipeline] [-d size]\n");
            return 2;
        }
    }
    rc = redisConnect(host, port);
    if (!rc || rc->err) {
        fprintf(stderr, "seed_client: cannot connect: %s\n", rc ? rc->errstr : "oom");
        return 1;
    }
    char add[41], carry[41], pop[41], ack[41];
    load(ADD, add);
    load(CARRY, carry);
    load(POP, pop);
    load(ACK, ack);
    char tag[32], pool[64], bucket[64], ready[96], readyp[64];
    snprintf(tag, sizeof tag, "seed%lld", now_ms());
    snprintf(pool, sizeof pool, "%s:pool", tag);
    snprintf(bucket, sizeof bucket, "%s:bucket", tag);
    snprintf(readyp, sizeof readyp, "%s:ready:", tag);
    snprintf(ready, sizeof ready, "%sbench", readyp);
    char *body = malloc((size_t)size + 1);
    memset(body, 'x', (size_t)size);
    body[size] = '\0';
    char id[64], due[32];

    /* add */
    double t0 = now_s();
    long sent = 0, got = 0;
    snprintf(due, sizeof due, "%lld", now_ms());
    while (got < n) {
        while (sent < n && sent - got < pipeline) {
            snprintf(id, sizeof id, "bench:j%ld", sent);
            redisAppendCommand(rc, "EVALSHA %s 2 %s %s %s %s %s", add, pool, bucket, id,
                               body, due);
            sent++;
        }
        redisReply *r;
        if (redisGetReply(rc, (void **)&r) != REDIS_OK) check(NULL, "add");
        check(r, "add");
        freeReplyObject(r);
        got++;
    }
    double t1 = now_s();

    /* carry */
    for (;;) {
        redisReply *r = redisCommand(rc, "EVALSHA %s 1 %s %lld 1000 %s", carry, bucket,
                                     now_ms(), readyp);
        check(r, "carry");
        long moved = (long)r->integer;
        freeReplyObject(r);
        if (moved == 0) break;
    }
    double t2 = now_s();

    /* pop + ack, pipelined: a pop's reply sends its ack */
    long popped = 0, acked = 0, inflight = 0, pops_sent = 0;
    char ttr[] = "30000";
    while (acked < n) {
        while (pops_sent < n && inflight < pipeline) {
            redisAppendCommand(rc, "EVALSHA %s 3 %s %s %s %lld %s", pop, ready, pool, bucket,
                               now_ms(), ttr);
            pops_sent++;
            inflight++;
        }
        redisReply *r;
        if (redisGetReply(rc, (void **)&r) != REDIS_OK) check(NULL, "pop/ack");
        check(r, "pop/ack");
        inflight--;
        if (r->type == REDIS_REPLY_ARRAY) {
            popped++;
            redisAppendCommand(rc, "EVALSHA %s 2 %s %s %b", ack, pool, bucket,
                               r->element[0]->str, (size_t)r->element[0]->len);
            inflight++;
        } else if (r->type == REDIS_REPLY_INTEGER) {
            acked++;
        } else if (r->type == REDIS_REPLY_NIL) {
            fprintf(stderr, "seed_client: ready list ran dry after %ld\n", popped);
            return 1;
        }
        freeReplyObject(r);
    }
    double t3 = now_s();
    printf("seed design over Redis: %ld jobs, pipeline %d, %d-byte bodies\n", n, pipeline, size);
    printf("  add        %9.0f jobs/s  (%.3f s)\n", n / (t1 - t0), t1 - t0);
    printf("  carry      %9.0f jobs/s  (%.3f s)\n", n / (t2 - t1), t2 - t1);
    printf("  pop+ack    %9.0f jobs/s  (%.3f s)\n", n / (t3 - t2), t3 - t2);
    printf("  end to end %9.0f jobs/s  (%.3f s)\n", n / (t3 - t0), t3 - t0);
    redisCommand(rc, "DEL %s %s %s", pool, bucket, ready);
    redisFree(rc);
    free(body);
    return 0;
}
