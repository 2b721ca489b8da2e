/* redis_lua.h -- the Lua script of the Redis store.
 *
 * One script holds every job transition (add, del/ack, get, reserve, nack,
 * touch, release, kick, list, purge, stats, carry); a call runs a batch of
 * requests, each of them whole, atomically. docs/redis.md describes the key
 * layout, the record format and each transition; the source is the
 * reference.
 */
#ifndef DQ_REDIS_LUA_H
#define DQ_REDIS_LUA_H

/* NUL-terminated Lua source, starting with the "#!lua" shebang (Redis 7:
 * refused up front under maxmemory pressure instead of failing halfway). */
extern const char redis_lua_source[];

#endif
