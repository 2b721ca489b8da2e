/* duration.c -- human durations and RFC 3339 timestamps (see duration.h). */
#include <stdio.h>

#include "duration.h"

#define MS_S 1000LL
#define MS_M (60 * MS_S)
#define MS_H (60 * MS_M)
#define MS_D (24 * MS_H)

#define UNITS_HINT "(use ms, s, m, h or d)"
#define FRAC_DIGITS_MAX 9

static int fail(const char **why, const char *reason) {
    if (why) *why = reason;
    return -1;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* The unit at s: its length in *len and its size in ms, or 0 if none. */
static int64_t unit_at(const char *s, size_t *len) {
    if (s[0] == 'm' && s[1] == 's') { *len = 2; return 1; }
    *len = 1;
    switch (s[0]) {
    case 's': return MS_S;
    case 'm': return MS_M;
    case 'h': return MS_H;
    case 'd': return MS_D;
    default: *len = 0; return 0;
    }
}

int duration_parse(const char *s, int64_t *out, const char **why) {
    if (!s || !*s) return fail(why, "empty duration");
    if (*s == '-') return fail(why, "negative durations are not allowed");

    const char *p = s;
    while (is_digit(*p)) p++;
    if (*p == '\0') { /* a plain integer: milliseconds */
        int64_t v = 0;
        for (p = s; *p; p++)
            if (__builtin_mul_overflow(v, 10, &v) ||
                __builtin_add_overflow(v, *p - '0', &v))
                return fail(why, "too large");
        *out = v;
        return 0;
    }

    int64_t total = 0;
    for (p = s; *p;) {
        int64_t whole = 0, frac = 0, denom = 1;
        int digits = 0;
        for (; is_digit(*p); p++, digits++)
            if (__builtin_mul_overflow(whole, 10, &whole) ||
                __builtin_add_overflow(whole, *p - '0', &whole))
                return fail(why, "too large");
        if (*p == '.') {
            p++;
            int fdigits = 0;
            for (; is_digit(*p); p++, fdigits++) {
                if (fdigits == FRAC_DIGITS_MAX)
                    return fail(why, "too many decimal places");
                frac = frac * 10 + (*p - '0');
                denom *= 10;
            }
            if (fdigits == 0) return fail(why, "expected digits after '.'");
            digits += fdigits;
        }
        if (digits == 0) {
            if (*p == '+' || *p == ' ' || *p == '\t')
                return fail(why, "unexpected sign or space");
            return fail(why, "expected a number like 500ms, 30s or 1h30m");
        }
        size_t ulen;
        int64_t unit = unit_at(p, &ulen);
        if (unit == 0) {
            if (*p == '\0') return fail(why, "missing unit after the last number " UNITS_HINT);
            if (*p == 'u' || *p == 'n')
                return fail(why, "durations have millisecond precision " UNITS_HINT);
            return fail(why, "unknown unit " UNITS_HINT);
        }
        p += ulen;
        int64_t part, fpart = frac * unit; /* frac < 1e9, unit <= 8.64e7 */
        if (fpart % denom != 0)
            return fail(why, "finer than a millisecond");
        if (__builtin_mul_overflow(whole, unit, &part) ||
            __builtin_add_overflow(part, fpart / denom, &part) ||
            __builtin_add_overflow(total, part, &total))
            return fail(why, "too large");
    }
    *out = total;
    return 0;
}

char *duration_format(int64_t ms, char *buf, size_t size) {
    if (size == 0) return buf;
    /* At most "-" + 20 digits of days + "23h59m59.999s": fits in tmp. */
    char tmp[DURATION_FMT_MAX];
    int n = 0;
    unsigned long long u = ms < 0 ? -(unsigned long long)ms : (unsigned long long)ms;
    unsigned long long d = u / MS_D, h = u / MS_H % 24, m = u / MS_M % 60,
                       s = u / MS_S % 60, f = u % MS_S;
    if (ms < 0) tmp[n++] = '-';
    if (d) n += sprintf(tmp + n, "%llud", d);
    if (h) n += sprintf(tmp + n, "%lluh", h);
    if (m) n += sprintf(tmp + n, "%llum", m);
    if (s && f) {
        n += sprintf(tmp + n, "%llu.%03llu", s, f);
        while (tmp[n - 1] == '0') n--;
        tmp[n++] = 's';
    } else if (s || u == 0) {
        n += sprintf(tmp + n, "%llus", s);
    } else if (f) {
        n += sprintf(tmp + n, "%llums", f);
    }
    tmp[n] = '\0';
    snprintf(buf, size, "%s", tmp);
    return buf;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant). */
static int64_t days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d) {
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static int days_in_month(int64_t y, int m) {
    static const int dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 ? 28 + leap : dim[m - 1];
}

/* Reads exactly n digits at *p into *v and advances; -1 if not digits. */
static int digits(const char **p, int n, int *v) {
    *v = 0;
    for (int i = 0; i < n; i++, (*p)++) {
        if (!is_digit(**p)) return -1;
        *v = *v * 10 + (**p - '0');
    }
    return 0;
}

int duration_parse_time(const char *s, int64_t *out, const char **why) {
    if (!s || !*s) return fail(why, "empty time");
    const char *p = s;
    int y, mo, d, h, mi, sec;
    if (digits(&p, 4, &y) || *p++ != '-' || digits(&p, 2, &mo) ||
        *p++ != '-' || digits(&p, 2, &d))
        return fail(why, "expected RFC 3339 like 2026-11-22T10:00:00Z");
    if (mo < 1 || mo > 12) return fail(why, "month out of range");
    if (d < 1 || d > days_in_month(y, mo))
        return fail(why, "day out of range for the month");
    if (*p == '\0')
        return fail(why, "missing time of day (like 2026-11-22T10:00:00Z)");
    if (*p != 'T' && *p != 't' && *p != ' ')
        return fail(why, "expected 'T' between date and time");
    p++;
    if (digits(&p, 2, &h) || *p++ != ':' || digits(&p, 2, &mi) ||
        *p++ != ':' || digits(&p, 2, &sec))
        return fail(why, "expected time of day as hh:mm:ss");
    if (h > 23) return fail(why, "hour out of range");
    if (mi > 59) return fail(why, "minute out of range");
    if (sec > 60) return fail(why, "second out of range");
    int ms = 0;
    if (*p == '.') {
        p++;
        if (!is_digit(*p)) return fail(why, "expected digits after '.'");
        for (int i = 0; is_digit(*p); p++, i++)
            if (i < 3) ms += (*p - '0') * (i == 0 ? 100 : i == 1 ? 10 : 1);
    }
    int off = 0; /* minutes east of UTC */
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int sign = *p++ == '-' ? -1 : 1, oh, om;
        if (digits(&p, 2, &oh) || *p++ != ':' || digits(&p, 2, &om))
            return fail(why, "expected offset as Z, +hh:mm or -hh:mm");
        if (oh > 23 || om > 59) return fail(why, "offset out of range");
        off = sign * (oh * 60 + om);
    } else if (*p == '\0') {
        return fail(why, "missing time zone (add Z for UTC, or +hh:mm)");
    } else {
        return fail(why, "expected offset as Z, +hh:mm or -hh:mm");
    }
    if (*p != '\0') return fail(why, "unexpected characters after the time");
    int64_t secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 +
                   sec - off * 60;
    *out = secs * 1000 + ms;
    return 0;
}

char *duration_format_time(int64_t ms, char *buf, size_t size) {
    int64_t days = ms / MS_D, rem = ms % MS_D;
    if (rem < 0) rem += MS_D, days--;
    int64_t y;
    int m, d;
    civil_from_days(days, &y, &m, &d);
    int h = (int)(rem / MS_H), mi = (int)(rem / MS_M % 60),
        s = (int)(rem / MS_S % 60), f = (int)(rem % MS_S);
    if (f)
        snprintf(buf, size, "%04lld-%02d-%02dT%02d:%02d:%02d.%03dZ",
                 (long long)y, m, d, h, mi, s, f);
    else
        snprintf(buf, size, "%04lld-%02d-%02dT%02d:%02d:%02dZ", (long long)y,
                 m, d, h, mi, s);
    return buf;
}
