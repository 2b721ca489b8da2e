/* redis_rec.c -- the Redis store's job record (the pool hash's value; the
 * layout is in redis_rec.h, and lua/delayq.lua reads it too): written for an
 * ADD, read back for GET and RESERVE. */
#include <string.h>
#include "store/redis_rec.h"

static void put32(unsigned char *p, uint32_t v);
static void putdouble(unsigned char *p, int64_t v);
static uint32_t le32(const unsigned char *p);
static int64_t ledouble(const unsigned char *p);

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void putdouble(unsigned char *p, int64_t v) {
    double d = (double)v;
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(u >> (8 * i));
}

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static int64_t ledouble(const unsigned char *p) {
    uint64_t u = 0;
    for (int i = 7; i >= 0; i--) u = u << 8 | p[i];
    double d;
    memcpy(&d, &u, sizeof d);
    return (int64_t)d;
}

uint64_t rs_rec_ord(int64_t ms, uint64_t seq) {
    uint64_t t = ms > REC_ORD_EPOCH ? (uint64_t)(ms - REC_ORD_EPOCH) : 0;
    return (t << 22 | (seq & 0x3fffff)) & ~((uint64_t)REC_PUSH << 56);
}

size_t rs_rec_size(const struct dq_add *a) {
    size_t n = REC_HDR + a->body.len;
    if (a->url.len) n += REC_PUSH_EXT + a->url.len + a->content_type.len;
    return n;
}

void rs_rec_write(unsigned char *out, const struct dq_add *a, int64_t now,
                  uint64_t ord) {
    unsigned char *h = out;
    h[0] = a->due <= now ? DQ_READY : DQ_DELAYED;
    put32(h + 1, 0);
    put32(h + 5, a->ttr);
    put32(h + 9, a->retries);
    h[13] = a->backoff.kind;
    put32(h + 14, a->backoff.base);
    put32(h + 18, a->backoff.max);
    putdouble(h + 22, a->due);
    putdouble(h + 30, now);
    putdouble(h + 38, 0);
    for (int i = 0; i < 8; i++) h[REC_ORD + i] = (unsigned char)(ord >> (56 - 8 * i));
    unsigned char *p = out + REC_HDR;
    if (a->url.len) {
        h[REC_ORD] |= REC_PUSH;
        p[0] = (unsigned char)(a->url.len & 0xff);
        p[1] = (unsigned char)(a->url.len >> 8);
        p[2] = (unsigned char)a->content_type.len;
        p += REC_PUSH_EXT;
        memcpy(p, a->url.p, a->url.len);
        p += a->url.len;
        if (a->content_type.len) memcpy(p, a->content_type.p, a->content_type.len);
        p += a->content_type.len;
    }
    if (a->body.len) memcpy(p, a->body.p, a->body.len);
}

int rs_rec_read(const unsigned char *rec, size_t len, struct dq_job *j,
                struct rec_view *v) {
    if (len < REC_HDR) return -1;
    const unsigned char *h = rec;
    j->state = (enum dq_state)h[0];
    j->attempts = le32(h + 1);
    j->ttr = le32(h + 5);
    j->retries = le32(h + 9);
    j->backoff.kind = h[13];
    j->backoff.base = le32(h + 14);
    j->backoff.max = le32(h + 18);
    j->due = ledouble(h + 22);
    j->created = ledouble(h + 30);
    j->deadline = ledouble(h + 38);
    memset(v, 0, sizeof *v);
    size_t off = REC_HDR;
    if (h[REC_ORD] & REC_PUSH) {
        if (len < REC_HDR + REC_PUSH_EXT) return -1;
        v->ulen = (size_t)rec[off] | (size_t)rec[off + 1] << 8;
        v->clen = rec[off + 2];
        off += REC_PUSH_EXT;
        if (v->ulen == 0 || len - off < v->ulen + v->clen) return -1;
        v->url = off;
        v->ct = off + v->ulen;
        off += v->ulen + v->clen;
    }
    v->body = off;
    v->blen = len - off;
    return 0;
}
