/* redis_arena.h -- hiredis replies built in one arena per connection.
 *
 * hiredis's reader makes every element of a reply with allocations of its
 * own (the object, and a copy of each string) and frees them one by one
 * after the reply's callback: the reply of a script call that reserved 64
 * jobs is about 330 allocations, then as many frees. Here the reader puts a
 * reply's objects and strings in an arena, and freeing the reply empties
 * it. That holds because an async context frees each reply before it reads
 * the next one (redisProcessCallbacks), and because nothing here keeps a
 * reply, or a pointer into one, past its callback. The replies are plain
 * redisReply trees for the code that reads them. */
#ifndef DQ_REDIS_ARENA_H
#define DQ_REDIS_ARENA_H

#include <hiredis/read.h>

struct redis_arena;

struct redis_arena *redis_arena_new(void);
/* Frees a and what it holds. Accepts NULL. */
void redis_arena_free(struct redis_arena *a);
/* Makes reader r build its replies in a, which must outlive r: hiredis
 * frees a reply it was reading when it frees the reader. A reply is freed
 * with r->fn->freeObject (as hiredis's async context does), never with
 * freeReplyObject. */
void redis_arena_use(redisReader *r, struct redis_arena *a);

#endif
