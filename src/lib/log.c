/* log.c -- leveled logging (see log.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

#include "log.h"

static enum log_level min_level = LOG_INFO;
static const char level_char[] = {'D', 'I', 'W', 'E'};
static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_set_level(enum log_level level) { min_level = level; }

int log_level_parse(const char *s) {
    for (int i = 0; i < 4; i++)
        if (strcasecmp(s, level_names[i]) == 0) return i;
    return -1;
}

int log_enabled(enum log_level level) { return level >= min_level; }

void log_write(enum log_level level, const char *file, int line,
               const char *fmt, ...) {
    struct timeval tv;
    struct tm tm;
    char ts[32];
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    const char *base = strrchr(file, '/');
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s.%03dZ %c %s:%d %s\n", ts, (int)(tv.tv_usec / 1000),
            level_char[level], base ? base + 1 : file, line, msg);
}
