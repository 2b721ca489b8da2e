/* redis_arena.c -- hiredis replies built in an arena (redis_arena.h says
 * why). The functions below make the same redisReply trees as hiredis's
 * own (hiredis.c: createStringObject and the others): strings copied and
 * NUL-terminated, an array's element vector zeroed, every object put in its
 * parent's vector at its index. */
#include <stdalign.h>
#include <stddef.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "lib/xalloc.h"
#include "store/redis_arena.h"

#define CHUNK (32 * 1024) /* most replies fit in one; bigger ones get more */
#define ALIGN alignof(max_align_t)

struct chunk {
    struct chunk *next; /* the one filled before */
    size_t cap, used;
    alignas(max_align_t) char mem[];
};

struct redis_arena {
    struct chunk *head; /* being filled */
    struct chunk *keep; /* the first, kept when the arena is emptied */
};

/* Each object is preceded by its arena: freeObject gets the reply alone. */
struct obj {
    struct redis_arena *a;
    redisReply r;
};

static void *arena_alloc(struct redis_arena *a, size_t n) {
    n = (n + ALIGN - 1) & ~(ALIGN - 1);
    struct chunk *c = a->head;
    if (c->cap - c->used < n) {
        size_t cap = n > CHUNK ? n : CHUNK;
        c = xmalloc(sizeof *c + cap);
        c->cap = cap;
        c->used = 0;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->mem + c->used;
    c->used += n;
    return p;
}

static void arena_empty(struct redis_arena *a) {
    while (a->head != a->keep) {
        struct chunk *c = a->head;
        a->head = c->next;
        dq_free(c);
    }
    a->keep->used = 0;
}

static struct redis_arena *arena_of(const redisReply *r) {
    return ((const struct obj *)((const char *)r - offsetof(struct obj, r)))->a;
}

/* A new object of the given type for task, in its parent's vector. */
static redisReply *object(const redisReadTask *task, int type) {
    struct redis_arena *a = task->parent ? arena_of(task->parent->obj) : task->privdata;
    struct obj *o = arena_alloc(a, sizeof *o);
    o->a = a;
    memset(&o->r, 0, sizeof o->r);
    o->r.type = type;
    if (task->parent) {
        redisReply *parent = task->parent->obj;
        parent->element[task->idx] = &o->r;
    }
    return &o->r;
}

static void *create_string(const redisReadTask *task, char *str, size_t len) {
    redisReply *r = object(task, task->type);
    char *s = arena_alloc(arena_of(r), len + 1);
    memcpy(s, str, len);
    s[len] = '\0';
    r->str = s;
    r->len = len;
    return r;
}

static void *create_array(const redisReadTask *task, int elements) {
    redisReply *r = object(task, REDIS_REPLY_ARRAY);
    if (elements > 0) {
        size_t sz = (size_t)elements * sizeof *r->element;
        r->element = arena_alloc(arena_of(r), sz);
        memset(r->element, 0, sz);
    }
    r->elements = elements > 0 ? (size_t)elements : 0;
    return r;
}

static void *create_integer(const redisReadTask *task, long long value) {
    redisReply *r = object(task, REDIS_REPLY_INTEGER);
    r->integer = value;
    return r;
}

static void *create_nil(const redisReadTask *task) {
    return object(task, REDIS_REPLY_NIL);
}

/* hiredis frees only whole replies (or the one it was reading when the
 * context goes), and there is one at a time: empty the arena. */
static void free_object(void *reply) {
    if (reply) arena_empty(arena_of(reply));
}

static redisReplyObjectFunctions functions = {
    create_string, create_array, create_integer, create_nil, free_object,
};

struct redis_arena *redis_arena_new(void) {
    struct redis_arena *a = xmalloc(sizeof *a);
    a->keep = xmalloc(sizeof *a->keep + CHUNK);
    a->keep->next = NULL;
    a->keep->cap = CHUNK;
    a->keep->used = 0;
    a->head = a->keep;
    return a;
}

void redis_arena_free(struct redis_arena *a) {
    if (!a) return;
    arena_empty(a);
    dq_free(a->keep);
    dq_free(a);
}

void redis_arena_use(redisReader *r, struct redis_arena *a) {
    r->fn = &functions;
    r->privdata = a;
}
