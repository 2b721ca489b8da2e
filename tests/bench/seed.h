/* seed.h -- what the bench clients that drive the seed design
 * (seed_client.c, batch_client.c) share: the seed articles' four Lua scripts
 * (docs/redis.md) as they send them, and their clocks.
 *
 *   ADD:   HSET pool topic:id body; ZADD bucket due topic:id
 *   CARRY: ZRANGEBYSCORE bucket -inf now LIMIT 0 n; ZREM; RPUSH ready:<topic>
 *   POP:   LPOP ready:<topic>; HGET pool; ZADD bucket now+ttr (redelivery)
 *   ACK:   HDEL pool; ZREM bucket
 */
#ifndef DQ_SEED_H
#define DQ_SEED_H

#include <time.h>

static const char ADD[] =
    "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])\n"
    "redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])\n"
    "return 1\n";
static const char CARRY[] =
    "local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])\n"
    "for _, id in ipairs(ids) do\n"
    "  redis.call('ZREM', KEYS[1], id)\n"
    "  local topic = string.match(id, '^(.-):')\n"
    "  redis.call('RPUSH', ARGV[3] .. topic, id)\n"
    "end\n"
    "return #ids\n";
static const char POP[] =
    "local id = redis.call('LPOP', KEYS[1])\n"
    "if not id then return false end\n"
    "local body = redis.call('HGET', KEYS[2], id)\n"
    "redis.call('ZADD', KEYS[3], tonumber(ARGV[1]) + tonumber(ARGV[2]), id)\n"
    "return {id, body}\n";
static const char ACK[] =
    "redis.call('HDEL', KEYS[1], ARGV[1])\n"
    "redis.call('ZREM', KEYS[2], ARGV[1])\n"
    "return 1\n";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
