/* render.h -- how bin/delayq shows what the server said: text made safe for
 * a terminal, times relative to now, aligned tables, and JSON (--json).
 *
 * Strings returned by the functions below are malloc'd and owned by the
 * caller; a table owns the cells given to table_row.
 */
#ifndef DQ_CLI_RENDER_H
#define DQ_CLI_RENDER_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* Bytes made safe for a terminal: control characters and invalid UTF-8
 * become \n, \t, \r or \xNN; valid UTF-8 is kept. */
char *escaped(const char *s, size_t n);

/* "2026-11-22T10:00:00Z (in 29m59s)" for a unix time in ms. */
char *when(int64_t ms);

char *xstr(const char *s);
char *fmt_ll(long long v);

/* A table of strings printed with aligned columns (the last one unpadded),
 * at most 16 columns: struct table t = {.ncols = 3}; table_row(&t, a, b, c);
 * table_print(&t); table_free(&t). */
struct table {
    int ncols;
    size_t nrows, cap;
    char **cells; /* owned, nrows * ncols */
};

void table_row(struct table *t, ...); /* takes ncols char *, owns them */
void table_print(const struct table *t);
void table_free(struct table *t);

/* Prints j to stdout (indented on a terminal) and releases it. */
void emit_json(json_t *j);

/* Sets "body" (valid UTF-8) or "body_base64" (anything else) on obj. */
void json_set_body(json_t *obj, const char *s, size_t n);

/* A string from the server (topic, id, cursor): UTF-8 as is, else base64. */
json_t *json_str(const char *s);

#endif
