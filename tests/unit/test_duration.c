/* test_duration.c -- human durations and RFC 3339 times (lib/duration.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lib/duration.h"

static int64_t dur_ok(const char *s) {
    int64_t v = -12345;
    const char *why = NULL;
    int rc = duration_parse(s, &v, &why);
    if (rc != 0) fail_msg("duration_parse(\"%s\") failed: %s", s, why);
    return v;
}

/* Parses s, expects failure, returns the reason. */
static const char *dur_bad(const char *s) {
    int64_t v = -12345;
    const char *why = NULL;
    if (duration_parse(s, &v, &why) == 0)
        fail_msg("duration_parse(\"%s\") accepted it as %lld", s, (long long)v);
    assert_int_equal(v, -12345); /* untouched */
    assert_non_null(why);
    return why;
}

static int64_t time_ok(const char *s) {
    int64_t v = -12345;
    const char *why = NULL;
    if (duration_parse_time(s, &v, &why) != 0)
        fail_msg("duration_parse_time(\"%s\") failed: %s", s, why);
    return v;
}

static const char *time_bad(const char *s) {
    int64_t v = -12345;
    const char *why = NULL;
    if (duration_parse_time(s, &v, &why) == 0)
        fail_msg("duration_parse_time(\"%s\") accepted it as %lld", s,
                 (long long)v);
    assert_int_equal(v, -12345);
    assert_non_null(why);
    return why;
}

static void test_plain_integer_is_ms(void **state) {
    assert_int_equal(dur_ok("0"), 0);
    assert_int_equal(dur_ok("1"), 1);
    assert_int_equal(dur_ok("30000"), 30000);
    assert_int_equal(dur_ok("0042"), 42);
    assert_int_equal(dur_ok("9223372036854775807"), INT64_MAX);
}

static void test_units(void **state) {
    assert_int_equal(dur_ok("500ms"), 500);
    assert_int_equal(dur_ok("30s"), 30000);
    assert_int_equal(dur_ok("30m"), 1800000);
    assert_int_equal(dur_ok("2h"), 7200000);
    assert_int_equal(dur_ok("2d"), 172800000);
    assert_int_equal(dur_ok("0s"), 0);
    assert_int_equal(dur_ok("0ms"), 0);
}

static void test_compound(void **state) {
    assert_int_equal(dur_ok("1h30m"), 5400000);
    assert_int_equal(dur_ok("1m30s"), 90000);
    assert_int_equal(dur_ok("1s500ms"), 1500);
    assert_int_equal(dur_ok("1d2h3m4s5ms"), 93784005);
    assert_int_equal(dur_ok("30m1h"), 5400000); /* any order, summed */
    /* "m" followed by "s" is ms, not minutes then seconds */
    assert_int_equal(dur_ok("5ms"), 5);
    assert_int_equal(dur_ok("5m5s"), 305000);
}

static void test_fractions(void **state) {
    assert_int_equal(dur_ok("1.5s"), 1500);
    assert_int_equal(dur_ok("0.5h"), 1800000);
    assert_int_equal(dur_ok(".25s"), 250);
    assert_int_equal(dur_ok("2.0ms"), 2);
    assert_int_equal(dur_ok("0.001s"), 1);
    assert_int_equal(dur_ok("1.5d"), 129600000);
    assert_string_equal(dur_bad("1.5ms"), "finer than a millisecond");
    assert_string_equal(dur_bad("0.0001s"), "finer than a millisecond");
    assert_string_equal(dur_bad("1.s"), "expected digits after '.'");
    assert_string_equal(dur_bad("1.0000000001s"), "too many decimal places");
}

static void test_rejects(void **state) {
    assert_string_equal(dur_bad(""), "empty duration");
    assert_string_equal(dur_bad(NULL), "empty duration");
    assert_string_equal(dur_bad("-5s"), "negative durations are not allowed");
    assert_string_equal(dur_bad("-5"), "negative durations are not allowed");
    assert_non_null(strstr(dur_bad("5x"), "unknown unit"));
    assert_non_null(strstr(dur_bad("5x"), "ms, s, m, h or d"));
    assert_non_null(strstr(dur_bad("1h30"), "missing unit"));
    assert_non_null(strstr(dur_bad("10us"), "millisecond precision"));
    assert_non_null(strstr(dur_bad("s"), "expected a number"));
    assert_non_null(strstr(dur_bad("1h m"), "sign or space"));
    assert_non_null(strstr(dur_bad("1h 30m"), "sign or space"));
    assert_non_null(strstr(dur_bad("+5s"), "sign or space"));
    assert_non_null(strstr(dur_bad(" 5s"), "sign or space"));
    assert_non_null(strstr(dur_bad("5s "), "sign or space"));
    assert_non_null(strstr(dur_bad("5S"), "unknown unit")); /* units are lower case */
    assert_non_null(strstr(dur_bad("abc"), "expected a number"));
}

static void test_overflow(void **state) {
    assert_string_equal(dur_bad("9223372036854775808"), "too large");
    assert_string_equal(dur_bad("99999999999999999999ms"), "too large");
    assert_string_equal(dur_bad("106751991168d"), "too large");
    assert_string_equal(dur_bad("106751991166d106751991166d"), "too large");
    assert_int_equal(dur_ok("106751991167d"), 106751991167LL * 86400000);
}

static void check_fmt(int64_t ms, const char *want) {
    char buf[DURATION_FMT_MAX];
    assert_string_equal(duration_format(ms, buf, sizeof buf), want);
    if (ms >= 0) assert_int_equal(dur_ok(buf), ms); /* round trip */
}

static void test_format(void **state) {
    check_fmt(0, "0s");
    check_fmt(1, "1ms");
    check_fmt(500, "500ms");
    check_fmt(1000, "1s");
    check_fmt(1500, "1.5s");
    check_fmt(1001, "1.001s");
    check_fmt(1010, "1.01s");
    check_fmt(30000, "30s");
    check_fmt(60000, "1m");
    check_fmt(60500, "1m500ms");
    check_fmt(5400000, "1h30m");
    check_fmt(86400000, "1d");
    check_fmt(90061001, "1d1h1m1.001s");
    check_fmt(86401000, "1d1s");
    check_fmt(-1500, "-1.5s");
    check_fmt(-60000, "-1m");
    check_fmt(INT64_MAX, "106751991167d7h12m55.807s");
    check_fmt(INT64_MIN, "-106751991167d7h12m55.808s");
}

static void test_format_truncates(void **state) {
    char buf[4];
    assert_string_equal(duration_format(5400000, buf, sizeof buf), "1h3");
    char one[1] = {'x'};
    assert_string_equal(duration_format(5400000, one, 1), "");
    assert_ptr_equal(duration_format(5, one, 0), one);
}

static void test_time_utc(void **state) {
    assert_int_equal(time_ok("1970-01-01T00:00:00Z"), 0);
    assert_int_equal(time_ok("2026-11-22T10:00:00Z"), 1795341600000LL);
    assert_int_equal(time_ok("2026-11-22t10:00:00z"), 1795341600000LL);
    assert_int_equal(time_ok("2026-11-22 10:00:00Z"), 1795341600000LL);
    assert_int_equal(time_ok("2000-02-29T23:59:59Z"), 951868799000LL);
    assert_int_equal(time_ok("1969-12-31T23:59:59Z"), -1000);
    assert_int_equal(time_ok("0000-01-01T00:00:00Z"), -62167219200000LL);
    assert_int_equal(time_ok("9999-12-31T23:59:59Z"), 253402300799000LL);
}

static void test_time_fraction(void **state) {
    assert_int_equal(time_ok("1970-01-01T00:00:00.5Z"), 500);
    assert_int_equal(time_ok("1970-01-01T00:00:00.25Z"), 250);
    assert_int_equal(time_ok("1970-01-01T00:00:00.123Z"), 123);
    assert_int_equal(time_ok("1970-01-01T00:00:00.123999999Z"), 123);
    assert_int_equal(time_ok("1970-01-01T00:00:01.000Z"), 1000);
    assert_string_equal(time_bad("1970-01-01T00:00:00.Z"),
                        "expected digits after '.'");
}

static void test_time_offsets(void **state) {
    int64_t utc = time_ok("2026-11-22T10:00:00Z");
    assert_int_equal(time_ok("2026-11-22T15:30:00+05:30"), utc);
    assert_int_equal(time_ok("2026-11-22T02:00:00-08:00"), utc);
    assert_int_equal(time_ok("2026-11-22T10:00:00+00:00"), utc);
    assert_int_equal(time_ok("2026-11-22T10:00:00-00:00"), utc);
    assert_int_equal(time_ok("2026-11-23T09:00:00+23:00"), utc);
    assert_int_equal(time_ok("2026-11-22T18:00:00.250+08:00"), utc + 250);
    assert_int_equal(time_ok("1970-01-01T00:00:00+01:00"), -3600000);
}

static void test_time_leap_second(void **state) {
    assert_int_equal(time_ok("2016-12-31T23:59:60Z"),
                     time_ok("2017-01-01T00:00:00Z"));
}

static void test_time_rejects(void **state) {
    assert_string_equal(time_bad(""), "empty time");
    assert_string_equal(time_bad(NULL), "empty time");
    assert_non_null(strstr(time_bad("2026-11-22"), "missing time of day"));
    assert_non_null(strstr(time_bad("2026-11-22T10:00:00"), "missing time zone"));
    assert_non_null(strstr(time_bad("26-11-22T10:00:00Z"), "expected RFC 3339"));
    assert_non_null(strstr(time_bad("2026/11/22T10:00:00Z"), "expected RFC 3339"));
    assert_non_null(strstr(time_bad("1795341600000"), "expected RFC 3339"));
    assert_non_null(strstr(time_bad("tomorrow"), "expected RFC 3339"));
    assert_string_equal(time_bad("2026-13-01T00:00:00Z"), "month out of range");
    assert_string_equal(time_bad("2026-00-01T00:00:00Z"), "month out of range");
    assert_string_equal(time_bad("2026-02-29T00:00:00Z"),
                        "day out of range for the month");
    assert_string_equal(time_bad("1900-02-29T00:00:00Z"),
                        "day out of range for the month");
    assert_int_equal(time_ok("2000-02-29T00:00:00Z"), 951782400000LL);
    assert_string_equal(time_bad("2026-04-31T00:00:00Z"),
                        "day out of range for the month");
    assert_string_equal(time_bad("2026-04-00T00:00:00Z"),
                        "day out of range for the month");
    assert_string_equal(time_bad("2026-11-22T24:00:00Z"), "hour out of range");
    assert_string_equal(time_bad("2026-11-22T10:60:00Z"), "minute out of range");
    assert_string_equal(time_bad("2026-11-22T10:00:61Z"), "second out of range");
    assert_non_null(strstr(time_bad("2026-11-22X10:00:00Z"), "'T'"));
    assert_non_null(strstr(time_bad("2026-11-22T10:00Z"), "hh:mm:ss"));
    assert_non_null(strstr(time_bad("2026-11-22T1:00:00Z"), "hh:mm:ss"));
    assert_non_null(strstr(time_bad("2026-11-22T10:00:00+0530"), "+hh:mm"));
    assert_non_null(strstr(time_bad("2026-11-22T10:00:00+05"), "+hh:mm"));
    assert_non_null(strstr(time_bad("2026-11-22T10:00:00EST"), "+hh:mm"));
    assert_string_equal(time_bad("2026-11-22T10:00:00+24:00"), "offset out of range");
    assert_string_equal(time_bad("2026-11-22T10:00:00+05:60"), "offset out of range");
    assert_non_null(strstr(time_bad("2026-11-22T10:00:00Zjunk"), "unexpected"));
    assert_non_null(strstr(time_bad("2026-11-22T10:00:00Z "), "unexpected"));
}

static void check_tfmt(int64_t ms, const char *want) {
    char buf[TIMESTAMP_FMT_MAX];
    assert_string_equal(duration_format_time(ms, buf, sizeof buf), want);
}

static void test_time_format(void **state) {
    check_tfmt(0, "1970-01-01T00:00:00Z");
    check_tfmt(1795341600000LL, "2026-11-22T10:00:00Z");
    check_tfmt(1795341600250LL, "2026-11-22T10:00:00.250Z");
    check_tfmt(1795341600007LL, "2026-11-22T10:00:00.007Z");
    check_tfmt(-1, "1969-12-31T23:59:59.999Z");
    check_tfmt(-86400000, "1969-12-31T00:00:00Z");
    check_tfmt(951868799000LL, "2000-02-29T23:59:59Z");
    check_tfmt(253402300799999LL, "9999-12-31T23:59:59.999Z");
    char buf[TIMESTAMP_FMT_MAX];
    duration_format_time(INT64_MAX, buf, sizeof buf); /* must not crash */
    duration_format_time(INT64_MIN, buf, sizeof buf);
    char small[11];
    assert_string_equal(duration_format_time(0, small, sizeof small), "1970-01-01");
}

static void test_time_round_trip(void **state) {
    char buf[TIMESTAMP_FMT_MAX];
    /* every day boundary across a few leap cycles, and odd millisecond values */
    for (int64_t ms = -400LL * 365 * 86400000; ms < 800LL * 365 * 86400000;
         ms += 86400000LL * 7 + 3600000 + 61001) {
        duration_format_time(ms, buf, sizeof buf);
        assert_int_equal(time_ok(buf), ms);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_integer_is_ms),
        cmocka_unit_test(test_units),
        cmocka_unit_test(test_compound),
        cmocka_unit_test(test_fractions),
        cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_format_truncates),
        cmocka_unit_test(test_time_utc),
        cmocka_unit_test(test_time_fraction),
        cmocka_unit_test(test_time_offsets),
        cmocka_unit_test(test_time_leap_second),
        cmocka_unit_test(test_time_rejects),
        cmocka_unit_test(test_time_format),
        cmocka_unit_test(test_time_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
