/* log.h -- leveled logging to stderr with file:line.
 *
 * log_warn("disk full writing %s", path) prints
 * "2026-11-22T07:40:01.123Z W wal.c:120 disk full writing ...". Messages
 * below the level set by log_set_level are dropped before formatting.
 */
#ifndef DQ_LOG_H
#define DQ_LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

void log_set_level(enum log_level level);
/* The level named s ("debug", "info", "warn", "error"), or -1. */
int log_level_parse(const char *s);
int log_enabled(enum log_level level);
void log_write(enum log_level level, const char *file, int line,
               const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define log_at(lvl, ...)                                                   \
    do {                                                                   \
        if (log_enabled(lvl)) log_write(lvl, __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)
#define log_debug(...) log_at(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_at(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_at(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_at(LOG_ERROR, __VA_ARGS__)

#endif
