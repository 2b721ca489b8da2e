/* test_dashboard.c -- src/front/dashboard: the embedded files, the query of
 * GET /v1/overview and its top-N page over a snapshot of many topics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "core/core.h"
#include "front/dashboard/dashboard.h"

static void test_assets_are_embedded(void **state) {
    const struct dash_asset *page = dashboard_find("/");
    assert_non_null(page);
    assert_string_equal(page->content_type, "text/html; charset=utf-8");
    assert_true(page->len > 100);
    assert_int_equal(page->data[page->len], '\0');
    assert_non_null(strstr(page->data, "/dashboard/app.js"));
    assert_ptr_equal(dashboard_find("/index.html")->data, page->data);
    const struct dash_asset *js = dashboard_find("/dashboard/app.js");
    assert_non_null(js);
    assert_int_equal(strlen(js->data), js->len);
    assert_non_null(strstr(js->content_type, "javascript"));
    assert_non_null(dashboard_find("/dashboard/style.css"));
    assert_null(dashboard_find("/dashboard/nosuch.js"));
    assert_null(dashboard_find("/dashboard/"));
    assert_null(dashboard_find(""));
}

static void test_query_defaults_and_values(void **state) {
    struct dash_query q;
    char err[200];
    assert_int_equal(dashboard_query(&q, NULL, err, sizeof err), 0);
    assert_int_equal(q.sort, DASH_SORT_READY);
    assert_int_equal(q.limit, 50);
    assert_int_equal(q.offset, 0);
    assert_string_equal(q.match, "");
    assert_int_equal(dashboard_query(&q, "sort=dead&limit=7&offset=20&match=or%3Ad&topic=x",
                                     err, sizeof err), 0);
    assert_int_equal(q.sort, DASH_SORT_DEAD);
    assert_int_equal(q.limit, 7);
    assert_int_equal(q.offset, 20);
    assert_string_equal(q.match, "or:d");
    assert_string_equal(q.topic, "x");
}

static void bad(const char *query, const char *word) {
    struct dash_query q;
    char err[200] = "";
    assert_int_equal(dashboard_query(&q, query, err, sizeof err), -1);
    if (!strstr(err, word)) fail_msg("error '%s' for '%s' does not name '%s'", err, query, word);
}

static void test_query_errors_name_the_parameter(void **state) {
    bad("sort=size", "sort");
    bad("limit=0", "limit");
    bad("limit=1001", "limit");
    bad("limit=-1", "limit");
    bad("limit=5x", "limit");
    bad("offset=-3", "offset");
    bad("offset=", "offset");
    bad("colour=red", "colour");
    char longq[400];
    snprintf(longq, sizeof longq, "match=%0300d", 1);
    bad(longq, "match");
}

/* A snapshot of n topics "t00000".. with ready = i % 7, dead = i % 3. */
static struct core_snapshot *fake(size_t n, struct core_topic_stats *ts, char (*names)[8]) {
    static struct core_snapshot s;
    memset(&s, 0, sizeof s);
    for (size_t i = 0; i < n; i++) {
        snprintf(names[i], sizeof names[i], "t%05zu", i);
        memset(&ts[i], 0, sizeof ts[i]);
        ts[i].topic = (struct dq_str){names[i], strlen(names[i])};
        ts[i].stats.jobs[DQ_READY] = i % 7;
        ts[i].stats.jobs[DQ_DEAD] = i % 3;
        ts[i].stats.added = i;
        ts[i].stats.oldest_ready = i % 7 ? 1000 + (int64_t)i : 0;
    }
    s.topics = ts;
    s.ntopics = n;
    return &s;
}

#define NT 10000
static struct core_topic_stats ts[NT];
static char names[NT][8];

static const char *topic_at(json_t *o, size_t i) {
    return json_string_value(json_object_get(json_array_get(json_object_get(o, "topics"), i), "topic"));
}

static void test_overview_is_a_sorted_page(void **state) {
    struct core_snapshot *s = fake(NT, ts, names);
    struct dash_query q;
    char err[200];
    assert_int_equal(dashboard_query(&q, "limit=3", err, sizeof err), 0);
    json_t *o = dashboard_overview_json(s, &q, 5000);
    assert_int_equal(json_integer_value(json_object_get(o, "ntopics")), NT);
    assert_int_equal(json_integer_value(json_object_get(o, "matched")), NT);
    assert_int_equal(json_array_size(json_object_get(o, "topics")), 3);
    /* the biggest backlog (6) first, ties by name */
    assert_string_equal(topic_at(o, 0), "t00006");
    assert_string_equal(topic_at(o, 1), "t00013");
    assert_string_equal(topic_at(o, 2), "t00020");
    json_t *t0 = json_array_get(json_object_get(o, "topics"), 0);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(t0, "jobs"), "ready")), 6);
    assert_int_equal(json_integer_value(json_object_get(t0, "oldest_ready")), 1006);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(t0, "counters"), "added")), 6);
    json_decref(o);

    /* filter, then page past the end */
    assert_int_equal(dashboard_query(&q, "sort=name&match=t0999&offset=8", err, sizeof err), 0);
    o = dashboard_overview_json(s, &q, 5000);
    assert_int_equal(json_integer_value(json_object_get(o, "matched")), 10);
    assert_int_equal(json_array_size(json_object_get(o, "topics")), 2);
    assert_string_equal(topic_at(o, 0), "t09998");
    json_decref(o);
    assert_int_equal(dashboard_query(&q, "offset=20000", err, sizeof err), 0);
    o = dashboard_overview_json(s, &q, 5000);
    assert_int_equal(json_array_size(json_object_get(o, "topics")), 0);
    json_decref(o);

    /* one topic by name; none when absent; a topic without ready jobs has
     * no oldest_ready */
    assert_int_equal(dashboard_query(&q, "topic=t00007", err, sizeof err), 0);
    o = dashboard_overview_json(s, &q, 5000);
    assert_int_equal(json_array_size(json_object_get(o, "topics")), 1);
    assert_true(json_is_null(json_object_get(json_array_get(json_object_get(o, "topics"), 0),
                                             "oldest_ready")));
    json_decref(o);
    assert_int_equal(dashboard_query(&q, "topic=t0000", err, sizeof err), 0);
    o = dashboard_overview_json(s, &q, 5000);
    assert_int_equal(json_integer_value(json_object_get(o, "matched")), 0);
    json_decref(o);

    /* sorted by dead: 2 dead first */
    assert_int_equal(dashboard_query(&q, "sort=dead&limit=1", err, sizeof err), 0);
    o = dashboard_overview_json(s, &q, 5000);
    assert_string_equal(topic_at(o, 0), "t00002");
    json_decref(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_assets_are_embedded),
        cmocka_unit_test(test_query_defaults_and_values),
        cmocka_unit_test(test_query_errors_name_the_parameter),
        cmocka_unit_test(test_overview_is_a_sorted_page),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
