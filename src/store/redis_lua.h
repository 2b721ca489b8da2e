/* redis_lua.h -- the Lua script of the Redis store.
 *
 * One script (src/store/lua/delayq.lua, and far.lua, its far tier, appended)
 * holds every job transition (add, del/ack, get, reserve, nack, touch,
 * release, kick, list, purge, stats, carry); a call runs a batch of
 * requests, each of them whole, atomically. docs/redis.md describes the key
 * layout, the record format and each transition; the source is the
 * reference. The Makefile joins the .lua files and turns them into C at
 * build time (scripts/embed).
 */
#ifndef DQ_REDIS_LUA_H
#define DQ_REDIS_LUA_H

#include <stddef.h>

/* NUL-terminated Lua source, starting with the "#!lua" shebang (Redis 7:
 * refused up front under maxmemory pressure instead of failing halfway). */
extern const char asset_store_lua_delayq_lua[];
extern const size_t asset_store_lua_delayq_lua_len;

#endif
