/* test_redis_url.c -- the Redis store's URL parser, key slots, id shards
 * and shard tags (store/redis_url.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "store/redis_url.h"

static void test_standalone_defaults(void **state) {
    struct redis_url u;
    char err[256] = "";
    assert_int_equal(redis_url_parse("redis://127.0.0.1", &u, err, sizeof err), 0);
    assert_false(u.cluster);
    assert_int_equal(u.nhosts, 1);
    assert_string_equal(u.hosts[0].host, "127.0.0.1");
    assert_int_equal(u.hosts[0].port, 6379);
    assert_int_equal(u.db, 0);
    assert_string_equal(u.prefix, "delayq");
    assert_int_equal(u.shards, 0);
    assert_string_equal(u.password, "");
}

static void test_standalone_full(void **state) {
    struct redis_url u;
    char err[256] = "";
    assert_int_equal(redis_url_parse("redis://:s3cret@localhost:6380/3?prefix=app:q&shards=4",
                                     &u, err, sizeof err), 0);
    assert_string_equal(u.hosts[0].host, "localhost");
    assert_int_equal(u.hosts[0].port, 6380);
    assert_int_equal(u.db, 3);
    assert_string_equal(u.prefix, "app:q");
    assert_int_equal(u.shards, 4);
    assert_int_equal(u.far, REDIS_FAR_DEFAULT);
    assert_string_equal(u.user, "");
    assert_string_equal(u.password, "s3cret");

    assert_int_equal(redis_url_parse("redis://h?far=0", &u, err, sizeof err), 0);
    assert_int_equal(u.far, 0);
    assert_int_equal(redis_url_parse("redis://h?far=86400&prefix=p", &u, err, sizeof err), 0);
    assert_int_equal(u.far, 86400);

    assert_int_equal(redis_url_parse("redis://bob:pw@h:1/", &u, err, sizeof err), 0);
    assert_string_equal(u.user, "bob");
    assert_string_equal(u.password, "pw");
    assert_int_equal(u.db, 0);

    assert_int_equal(redis_url_parse("redis://[::1]:7000?prefix=x", &u, err, sizeof err), 0);
    assert_string_equal(u.hosts[0].host, "::1");
    assert_int_equal(u.hosts[0].port, 7000);
    assert_string_equal(u.prefix, "x");
}

static void test_cluster(void **state) {
    struct redis_url u;
    char err[256] = "";
    assert_int_equal(redis_url_parse("redis-cluster://a:7000,b:7001,c?shards=3",
                                     &u, err, sizeof err), 0);
    assert_true(u.cluster);
    assert_int_equal(u.nhosts, 3);
    assert_string_equal(u.hosts[1].host, "b");
    assert_int_equal(u.hosts[1].port, 7001);
    assert_int_equal(u.hosts[2].port, 6379);
    assert_int_equal(u.shards, 3);
}

static void bad(const char *url, const char *word) {
    struct redis_url u;
    char err[256] = "";
    assert_int_equal(redis_url_parse(url, &u, err, sizeof err), -1);
    if (!strstr(err, word)) fail_msg("error for %s is '%s', expected '%s'", url, err, word);
}

static void test_bad_urls(void **state) {
    bad("http://x", "scheme");
    bad("redis://", "host");
    bad("redis://h:0", "port");
    bad("redis://h:65536", "port");
    bad("redis://h:12x", "port");
    bad("redis://a:1,b:2", "redis-cluster");
    bad("redis://h/x", "database");
    bad("redis-cluster://h:1/2", "database");
    bad("redis://h?prefix=", "prefix");
    bad("redis://h?prefix=a{b}", "prefix");
    bad("redis://h?prefix=a b", "prefix");
    bad("redis://h?shards=0", "shards");
    bad("redis://h?shards=1025", "shards");
    bad("redis://h?color=red", "color");
    bad("redis://h?prefix", "prefix");
    bad("redis-cluster://a:1,", "empty host");
    bad("redis://[::1", "IPv6");
    bad("redis://h?replicas=101", "replicas");
    bad("redis://h?replicas=x", "replicas");
    bad("redis://h?far=86401", "far");
    bad("redis://h?far=1.5", "far");
    bad("redis-sentinel://a:26379", "master name");
    bad("redis-sentinel://a:26379/", "master name");
    bad("redis-sentinel://a:26379/?prefix=p", "master name");
    bad("redis-sentinel://a:26379/my master", "master name");
}

static void test_sentinel_and_replicas(void **state) {
    struct redis_url u;
    char err[256] = "";
    assert_int_equal(redis_url_parse("redis-sentinel://a:26379,b:26380,c/mymaster?prefix=p&replicas=1",
                                     &u, err, sizeof err), 0);
    assert_true(u.sentinel);
    assert_false(u.cluster);
    assert_int_equal(u.nhosts, 3);
    assert_string_equal(u.hosts[1].host, "b");
    assert_int_equal(u.hosts[1].port, 26380);
    assert_string_equal(u.master, "mymaster");
    assert_string_equal(u.prefix, "p");
    assert_int_equal(u.replicas, 1);
    assert_int_equal(redis_url_parse("redis-sentinel://:pw@a:26379/m", &u, err, sizeof err), 0);
    assert_string_equal(u.master, "m");
    assert_string_equal(u.password, "pw");
    assert_int_equal(u.replicas, 0);
    assert_int_equal(redis_url_parse("redis-cluster://a:1?replicas=2", &u, err, sizeof err), 0);
    assert_int_equal(u.replicas, 2);
    assert_false(u.sentinel);
}

static void test_crc16_and_slots(void **state) {
    /* the check value of CRC16/XMODEM, and examples from the cluster spec */
    assert_int_equal(redis_crc16("123456789", 9), 0x31C3);
    assert_int_equal(redis_keyslot("123456789", 9), 0x31C3 % 16384);
    assert_int_equal(redis_keyslot("foo", 3), 12182);
    assert_int_equal(redis_keyslot("bar", 3), 5061);
    /* hash tags */
    assert_int_equal(redis_keyslot("{user1000}.following", 20),
                     redis_keyslot("user1000", 8));
    assert_int_equal(redis_keyslot("foo{}{bar}", 10), redis_keyslot("foo{}{bar}", 10));
    assert_int_equal(redis_keyslot("foo{{bar}}zap", 13), redis_keyslot("{bar", 4));
    assert_int_equal(redis_keyslot("foo{bar}{zap}", 13), redis_keyslot("bar", 3));
    /* an empty tag hashes the whole key */
    assert_int_equal(redis_keyslot("foo{}{bar}", 10),
                     redis_crc16("foo{}{bar}", 10) & 16383);
}

static void test_id_shard(void **state) {
    assert_int_equal(redis_id_shard("x", 1, 1), 0);
    assert_int_equal(redis_id_shard("x", 1, 0), 0);
    /* stable values: a change here would strand jobs of running fleets */
    assert_int_equal(redis_id_shard("order-1", 7, 3), redis_id_shard("order-1", 7, 3));
    unsigned hist[4] = {0, 0, 0, 0};
    char id[32];
    for (int i = 0; i < 4000; i++) {
        int n = snprintf(id, sizeof id, "job-%d", i);
        hist[redis_id_shard(id, (size_t)n, 4)]++;
    }
    for (int i = 0; i < 4; i++) {
        assert_true(hist[i] > 800);
        assert_true(hist[i] < 1200);
    }
}

static void test_shard_tags(void **state) {
    char tag[512];
    size_t n = redis_shard_tag(tag, sizeof tag, "dq", "orders", 6, 2, 4, false);
    assert_int_equal(n, strlen("dq:orders:2"));
    assert_memory_equal(tag, "dq:orders:2", n);
    assert_int_equal(redis_shard_tag(tag, 5, "dq", "orders", 6, 2, 4, false), 0);
    /* cluster: the shards of a topic land on distinct thirds of the slots
     * (the masters of an evenly split 3-master cluster), for most topics */
    int spread = 0, topics = 200;
    for (int t = 0; t < topics; t++) {
        char name[32];
        int nl = snprintf(name, sizeof name, "topic-%d", t);
        int third[3] = {0, 0, 0};
        for (unsigned s = 0; s < 3; s++) {
            n = redis_shard_tag(tag, sizeof tag, "dq", name, (size_t)nl, s, 3, true);
            assert_true(n > 0);
            /* deterministic */
            char again[512];
            size_t m = redis_shard_tag(again, sizeof again, "dq", name, (size_t)nl, s, 3, true);
            assert_int_equal(m, n);
            assert_memory_equal(again, tag, n);
            unsigned slot = redis_keyslot(tag, n);
            third[slot * 3 / 16384]++;
        }
        if (third[0] == 1 && third[1] == 1 && third[2] == 1) spread++;
    }
    /* a shard window may straddle a boundary now and then */
    assert_true(spread >= topics * 9 / 10);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_standalone_defaults),
        cmocka_unit_test(test_standalone_full),
        cmocka_unit_test(test_cluster),
        cmocka_unit_test(test_bad_urls),
        cmocka_unit_test(test_sentinel_and_replicas),
        cmocka_unit_test(test_crc16_and_slots),
        cmocka_unit_test(test_id_shard),
        cmocka_unit_test(test_shard_tags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
