/* duration.h -- human durations and RFC 3339 timestamps, in milliseconds.
 *
 * A generic building block (no server header): parses what a person types
 * ("500ms", "30s", "1h30m", "2d", "1.5s", or a plain integer of milliseconds;
 * "2026-11-22T10:00:00Z", "2026-11-22T10:00:00.250+05:30") into int64 ms, and
 * formats ms back into the same forms.
 *
 * Error convention: the parsers return 0 on success and -1 on failure; on
 * failure *why (if why is not NULL) points to a static, lower-case English
 * reason that does not repeat the input, e.g. "unknown unit 'x' (use ms, s,
 * m, h or d)", so the caller can say "invalid --delay '5x': <why>". *out is
 * written only on success. Nothing here allocates or reads the clock.
 */
#ifndef DQ_DURATION_H
#define DQ_DURATION_H

#include <stdint.h>
#include <stddef.h>

/* Buffer sizes large enough for any value the formatters produce. */
#define DURATION_FMT_MAX 48
#define TIMESTAMP_FMT_MAX 48

/* Parses a non-negative duration into milliseconds. Accepted forms: a plain
 * decimal integer (milliseconds), or one or more <number><unit> parts with
 * units ms, s, m, h, d (any order, summed): "500ms", "1h30m", "2d", "1.5s".
 * A fractional number must come to a whole number of milliseconds ("1.5ms"
 * is refused). No sign, no spaces. Fails on overflow of int64. */
int duration_parse(const char *s, int64_t *out, const char **why);

/* Writes ms in the form duration_parse reads back, largest units first with
 * zero parts left out and milliseconds as a fraction of a second: 0 -> "0s",
 * 500 -> "500ms", 1500 -> "1.5s", 5400000 -> "1h30m", 90061001 ->
 * "1d1h1m1.001s". Negative values get a leading '-'. Writes at most size
 * bytes including the NUL (DURATION_FMT_MAX is always enough); returns buf. */
char *duration_format(int64_t ms, char *buf, size_t size);

/* Parses an RFC 3339 date-time ("YYYY-MM-DDThh:mm:ss[.frac](Z|+hh:mm|-hh:mm)";
 * 't', 'z' and a space for 'T' are accepted) into unix milliseconds. Fraction
 * digits beyond milliseconds are truncated; a leap second (ss = 60) counts as
 * the first second of the next minute. Dates must exist (2026-02-30 fails);
 * years are 0000-9999. */
int duration_parse_time(const char *s, int64_t *out, const char **why);

/* Writes unix milliseconds as RFC 3339 in UTC: "2026-11-22T10:00:00Z", with
 * ".mmm" only when the milliseconds are not zero. Writes at most size bytes
 * including the NUL (TIMESTAMP_FMT_MAX is always enough); returns buf. */
char *duration_format_time(int64_t ms, char *buf, size_t size);

#endif
