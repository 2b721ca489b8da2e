/* redis_url.h -- the --store URL of the Redis store, and key slots.
 *
 *   redis://[[user]:password@]host[:port][/db][?prefix=p&shards=K]
 *   redis-cluster://[[user]:password@]host:port[,host:port...][?prefix=p&shards=K]
 *   redis-sentinel://[[user]:password@]host:port[,host:port...]/master-name[?prefix=p&shards=K]
 *
 * Every scheme also takes replicas=N (0..100): each change waits (WAIT) until
 * N replicas have it before it is acknowledged, and far=S (0..86400 s,
 * default 60): jobs added due in a bucket of S seconds that starts more
 * than S s ahead are kept compact until then (docs/redis.md); 0 = never.
 * For redis-sentinel:// the hosts are Sentinels, the password is the
 * master's.
 *
 * The port defaults to 6379, db to 0, prefix to "delayq", shards to 0
 * ("not given": 1 for redis://, the number of masters for a cluster).
 * Hosts may be names, IPv4 addresses or bracketed IPv6 addresses.
 *
 * Also here, because the store and its tests share them: the Redis Cluster
 * key slot (CRC16-CCITT/XMODEM of the key or of its {hash tag}, mod 16384)
 * and the hash that picks a job's shard from its id.
 *
 * Nothing here allocates or does I/O.
 */
#ifndef DQ_REDIS_URL_H
#define DQ_REDIS_URL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REDIS_URL_MAX_HOSTS 16
#define REDIS_URL_HOST_MAX 255
#define REDIS_PREFIX_MAX 64
#define REDIS_SHARDS_MAX 1024
#define REDIS_SLOTS 16384
#define REDIS_REPLICAS_MAX 100
#define REDIS_FAR_DEFAULT 60 /* s: the far tier's bucket width and horizon */
#define REDIS_FAR_MAX 86400
#define REDIS_MASTER_NAME_MAX 127

struct redis_url {
    bool cluster;
    bool sentinel;      /* hosts are Sentinels watching `master` */
    char master[REDIS_MASTER_NAME_MAX + 1];
    int replicas;       /* WAIT for this many replicas; 0 = do not wait */
    int far;            /* s: jobs due beyond 2 x far are kept compact
                         * until far s before their bucket; 0 = never */
    size_t nhosts;
    struct {
        char host[REDIS_URL_HOST_MAX + 1];
        int port;
    } hosts[REDIS_URL_MAX_HOSTS];
    int db;
    char prefix[REDIS_PREFIX_MAX + 1];
    unsigned shards; /* 0 = not given */
    char user[128];
    char password[256]; /* "" = no AUTH */
};

/* Parses url into *out. Returns 0, or -1 with a message naming the part
 * that is wrong in err. The prefix may hold any printable ASCII but braces
 * and spaces (it becomes part of every key and of the hash tag). */
int redis_url_parse(const char *url, struct redis_url *out, char *err,
                    size_t errlen);

/* CRC16 as Redis Cluster uses it (XMODEM: poly 0x1021, init 0). */
uint16_t redis_crc16(const void *p, size_t len);

/* The cluster slot of a key: of the part between the first '{' and the
 * next '}' if that part is not empty, else of the whole key. */
unsigned redis_keyslot(const void *key, size_t len);

/* The shard (0 .. nshards-1) of a job id: FNV-1a 64 of the id modulo
 * nshards. The same on every instance and every platform. */
unsigned redis_id_shard(const void *id, size_t len, unsigned nshards);

/* Writes the hash tag of shard `shard` of `topic` (without braces) into
 * out[0..cap) and returns its length, or 0 if cap is too small.
 *
 * Standalone (cluster false): "<prefix>:<topic>:<shard>".
 * Cluster: "<prefix>:<topic>:<shard>:<salt>" with the smallest salt that puts
 * the tag's slot in a window of 128 slots starting at
 * crc16(topic) + shard * 16384 / nshards, so the shards of one topic sit at
 * evenly spaced slots, hence on different masters of an evenly split
 * cluster, while different topics start at different places. */
size_t redis_shard_tag(char *out, size_t cap, const char *prefix,
                       const char *topic, size_t topiclen, unsigned shard,
                       unsigned nshards, bool cluster);

#endif
