/* redis_url.c -- the Redis store's URL, key slots and shard tags (see
 * redis_url.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/redis_url.h"

#define TAG_WINDOW 128 /* slots a cluster shard tag may land in */

__attribute__((format(printf, 3, 4)))
static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *scheme(const struct redis_url *u) {
    return u->sentinel ? "redis-sentinel://" : u->cluster ? "redis-cluster://" : "redis://";
}

/* Parses a decimal in [lo, hi] from p[0..len). */
static int parse_uint(const char *p, size_t len, long lo, long hi, long *out) {
    if (len == 0 || len > 9) return -1;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        v = v * 10 + (p[i] - '0');
    }
    if (v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* One "host[:port]" or "[v6]:port" from p[0..len). */
static int parse_hostport(const char *p, size_t len, struct redis_url *u,
                          char *err, size_t errlen) {
    char tmp[REDIS_URL_HOST_MAX + 16];
    if (u->nhosts == REDIS_URL_MAX_HOSTS)
        return fail(err, errlen, "too many hosts in %s URL (at most 16)",
                    scheme(u));
    if (len == 0 || len >= sizeof tmp)
        return fail(err, errlen, "missing or overlong host in %s URL",
                    scheme(u));
    memcpy(tmp, p, len);
    tmp[len] = '\0';
    const char *host = tmp, *port = NULL;
    size_t hostlen;
    if (tmp[0] == '[') {
        char *close = strchr(tmp, ']');
        if (!close) return fail(err, errlen, "unterminated IPv6 address '%s'", tmp);
        host = tmp + 1;
        hostlen = (size_t)(close - host);
        if (close[1] == ':') port = close + 2;
        else if (close[1] != '\0')
            return fail(err, errlen, "bad host '%s'", tmp);
    } else {
        char *colon = strchr(tmp, ':');
        hostlen = colon ? (size_t)(colon - tmp) : len;
        if (colon) port = colon + 1;
    }
    if (hostlen == 0 || hostlen > REDIS_URL_HOST_MAX)
        return fail(err, errlen, "missing host in '%s'", tmp);
    for (size_t i = 0; i < hostlen; i++) {
        char c = host[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '-' || c == ':' ||
              c == '_'))
            return fail(err, errlen, "bad character in host '%s'", tmp);
    }
    long portv = 6379;
    if (port && parse_uint(port, strlen(port), 1, 65535, &portv) != 0)
        return fail(err, errlen, "bad port in '%s' (expected 1..65535)", tmp);
    memcpy(u->hosts[u->nhosts].host, host, hostlen);
    u->hosts[u->nhosts].host[hostlen] = '\0';
    u->hosts[u->nhosts].port = (int)portv;
    u->nhosts++;
    return 0;
}

static int parse_query(const char *q, struct redis_url *u, char *err,
                       size_t errlen) {
    while (*q) {
        const char *amp = strchr(q, '&');
        size_t len = amp ? (size_t)(amp - q) : strlen(q);
        const char *eq = memchr(q, '=', len);
        if (!eq) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(len < 60 ? len : 60), q);
            return fail(err, errlen, "URL parameter '%s' has no value", name);
        }
        size_t nlen = (size_t)(eq - q), vlen = len - nlen - 1;
        const char *v = eq + 1;
        if (nlen == 6 && memcmp(q, "prefix", 6) == 0) {
            if (vlen == 0 || vlen > REDIS_PREFIX_MAX)
                return fail(err, errlen, "bad prefix in URL: %s",
                            "expected 1..64 characters");
            for (size_t i = 0; i < vlen; i++)
                if (v[i] <= ' ' || v[i] > '~' || v[i] == '{' || v[i] == '}')
                    return fail(err, errlen, "bad prefix in URL: %s",
                                "no spaces, braces or control characters");
            memcpy(u->prefix, v, vlen);
            u->prefix[vlen] = '\0';
        } else if (nlen == 6 && memcmp(q, "shards", 6) == 0) {
            long k;
            if (parse_uint(v, vlen, 1, REDIS_SHARDS_MAX, &k) != 0)
                return fail(err, errlen, "bad shards in URL: %s",
                            "expected 1..1024");
            u->shards = (unsigned)k;
        } else if (nlen == 8 && memcmp(q, "replicas", 8) == 0) {
            long k;
            if (parse_uint(v, vlen, 0, REDIS_REPLICAS_MAX, &k) != 0)
                return fail(err, errlen, "bad replicas in URL: %s",
                            "expected 0..100");
            u->replicas = (int)k;
        } else if (nlen == 3 && memcmp(q, "far", 3) == 0) {
            long k;
            if (parse_uint(v, vlen, 0, REDIS_FAR_MAX, &k) != 0)
                return fail(err, errlen, "bad far in URL: %s",
                            "expected 0..86400 seconds");
            u->far = (int)k;
        } else {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(nlen < 60 ? nlen : 60), q);
            return fail(err, errlen,
                        "unknown URL parameter '%s' (known: prefix, shards, replicas, far)",
                        name);
        }
        q += len;
        if (*q == '&') q++;
    }
    return 0;
}

int redis_url_parse(const char *url, struct redis_url *u, char *err,
                    size_t errlen) {
    memset(u, 0, sizeof *u);
    strcpy(u->prefix, "delayq");
    u->far = REDIS_FAR_DEFAULT;
    if (url == NULL) return fail(err, errlen, "%s", "no URL");
    const char *p;
    if (strncmp(url, "redis://", 8) == 0) {
        p = url + 8;
    } else if (strncmp(url, "redis-cluster://", 16) == 0) {
        u->cluster = true;
        p = url + 16;
    } else if (strncmp(url, "redis-sentinel://", 17) == 0) {
        u->sentinel = true;
        p = url + 17;
    } else {
        return fail(err, errlen, "unknown store URL scheme in '%s'", url);
    }
    /* authority ends at '/', '?' or the end */
    size_t alen = strcspn(p, "/?");
    const char *rest = p + alen;
    const char *at = NULL;
    for (size_t i = 0; i < alen; i++)
        if (p[i] == '@') at = p + i; /* the last '@' */
    const char *hosts = p;
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        size_t ulen = colon ? (size_t)(colon - p) : (size_t)(at - p);
        const char *pw = colon ? colon + 1 : NULL;
        size_t pwlen = colon ? (size_t)(at - pw) : 0;
        if (!colon) { /* "password@host" is what people mean */
            pw = p;
            pwlen = ulen;
            ulen = 0;
        }
        if (ulen >= sizeof u->user || pwlen >= sizeof u->password)
            return fail(err, errlen, "%s", "user or password too long in URL");
        memcpy(u->user, p, ulen);
        memcpy(u->password, pw, pwlen);
        hosts = at + 1;
    }
    size_t hlen = (size_t)(rest - hosts);
    if (hlen == 0) return fail(err, errlen, "no host in '%s'", url);
    while (hlen > 0) {
        const char *comma = memchr(hosts, ',', hlen);
        size_t one = comma ? (size_t)(comma - hosts) : hlen;
        if (!u->cluster && !u->sentinel && comma)
            return fail(err, errlen, "%s",
                        "several hosts need redis-cluster:// (redis:// takes one)");
        if (parse_hostport(hosts, one, u, err, errlen) != 0) return -1;
        hosts += one;
        hlen -= one;
        if (comma) {
            hosts++;
            hlen--;
            if (hlen == 0) return fail(err, errlen, "empty host after ',' in '%s'", url);
        }
    }
    if (u->sentinel) { /* "/master-name" */
        size_t mlen = *rest == '/' ? strcspn(rest + 1, "?") : 0;
        if (mlen == 0)
            return fail(err, errlen, "no master name in '%s' (redis-sentinel://"
                        "host:port[,host:port...]/master-name)", url);
        if (mlen >= sizeof u->master)
            return fail(err, errlen, "%s", "master name too long in URL");
        for (size_t i = 0; i < mlen; i++)
            if (rest[1 + i] <= ' ' || rest[1 + i] > '~')
                return fail(err, errlen, "%s", "bad character in the master name");
        memcpy(u->master, rest + 1, mlen);
        u->master[mlen] = '\0';
        rest += 1 + mlen;
    } else if (*rest == '/') {
        rest++;
        size_t dlen = strcspn(rest, "?");
        if (dlen > 0) {
            long db;
            if (u->cluster)
                return fail(err, errlen, "%s", "a cluster has no database number");
            if (parse_uint(rest, dlen, 0, 1000000, &db) != 0)
                return fail(err, errlen, "bad database number in '%s'", url);
            u->db = (int)db;
        }
        rest += dlen;
    }
    if (*rest == '?') return parse_query(rest + 1, u, err, errlen);
    return 0;
}

uint16_t redis_crc16(const void *p, size_t len) {
    const unsigned char *b = p;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(b[i] << 8);
        for (int k = 0; k < 8; k++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021)
                                 : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned redis_keyslot(const void *key, size_t len) {
    const char *k = key;
    const char *open = memchr(k, '{', len);
    if (open) {
        size_t after = len - (size_t)(open - k) - 1;
        const char *close = memchr(open + 1, '}', after);
        if (close && close > open + 1)
            return redis_crc16(open + 1, (size_t)(close - open - 1)) &
                   (REDIS_SLOTS - 1);
    }
    return redis_crc16(k, len) & (REDIS_SLOTS - 1);
}

unsigned redis_id_shard(const void *id, size_t len, unsigned nshards) {
    const unsigned char *b = id;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return nshards <= 1 ? 0 : (unsigned)(h % nshards);
}

size_t redis_shard_tag(char *out, size_t cap, const char *prefix,
                       const char *topic, size_t topiclen, unsigned shard,
                       unsigned nshards, bool cluster) {
    int n = snprintf(out, cap, "%s:%.*s:%u", prefix, (int)topiclen, topic,
                     shard);
    if (n < 0 || (size_t)n >= cap) return 0;
    if (!cluster) return (size_t)n;
    if (nshards == 0) nshards = 1;
    unsigned start = (redis_crc16(topic, topiclen) +
                      (unsigned)((uint64_t)shard * REDIS_SLOTS / nshards)) &
                     (REDIS_SLOTS - 1);
    size_t base = (size_t)n;
    unsigned best_salt = 0, best_dist = REDIS_SLOTS;
    for (unsigned salt = 0; salt < (1u << 20); salt++) {
        int m = snprintf(out + base, cap - base, ":%u", salt);
        if (m < 0 || base + (size_t)m >= cap) return 0;
        unsigned slot = redis_crc16(out, base + (size_t)m) & (REDIS_SLOTS - 1);
        unsigned dist = (slot - start) & (REDIS_SLOTS - 1);
        if (dist < TAG_WINDOW) return base + (size_t)m;
        if (dist < best_dist) {
            best_dist = dist;
            best_salt = salt;
        }
    }
    int m = snprintf(out + base, cap - base, ":%u", best_salt);
    return base + (size_t)m;
}
