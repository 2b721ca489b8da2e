/* http_json.c -- decoding JSON request bodies, rendering stats; see
 * http_json.h. */
#include "front/http/http_json.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "lib/base64.h"
#include "lib/duration.h"
#include "lib/xalloc.h"

/* The fields each kind accepts, in the order error messages list them. */
static const char *const fields[][12] = {
    [HJ_ADD] = {"id", "body", "body_base64", "delay", "at", "ttr", "retries",
                "backoff", "replace", "url", "content_type", NULL},
    [HJ_RESERVE] = {"topics", "timeout", "count", NULL},
    [HJ_NACK] = {"delay", NULL},
    [HJ_TOUCH] = {"ttr", NULL},
    [HJ_KICK] = {"count", NULL},
    [HJ_NONE] = {NULL},
};

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a fractional number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* An integer field. */
static int get_int(const char *name, const json_t *v, int64_t *out, char *err,
                   size_t errlen) {
    if (!json_is_integer(v) || json_integer_value(v) == CORE_UNSET)
        return fail(err, errlen, "invalid %s: expected an integer, got %s",
                    name, type_name(v));
    *out = json_integer_value(v);
    return 0;
}

/* Milliseconds as an integer, or a duration string ("30m"). */
static int get_duration(const char *name, const json_t *v, int64_t *out,
                        char *err, size_t errlen) {
    if (json_is_string(v)) {
        const char *why = "";
        if (strlen(json_string_value(v)) != json_string_length(v) ||
            duration_parse(json_string_value(v), out, &why) != 0)
            return fail(err, errlen, "invalid %s '%.40s': %s", name,
                        json_string_value(v), why);
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) == CORE_UNSET)
        return fail(err, errlen,
                    "invalid %s: expected milliseconds (an integer) or a "
                    "duration such as \"30s\", got %s",
                    name, type_name(v));
    *out = json_integer_value(v);
    return 0;
}

/* Unix milliseconds as an integer, or an RFC 3339 string. */
static int get_time(const char *name, const json_t *v, int64_t *out, char *err,
                    size_t errlen) {
    if (json_is_string(v)) {
        const char *why = "";
        if (strlen(json_string_value(v)) != json_string_length(v) ||
            duration_parse_time(json_string_value(v), out, &why) != 0)
            return fail(err, errlen, "invalid %s '%.40s': %s", name,
                        json_string_value(v), why);
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) == CORE_UNSET)
        return fail(err, errlen,
                    "invalid %s: expected unix milliseconds (an integer) or "
                    "an RFC 3339 time, got %s",
                    name, type_name(v));
    *out = json_integer_value(v);
    return 0;
}

static int get_str(const char *name, const json_t *v, struct dq_str *out,
                   char *err, size_t errlen) {
    if (!json_is_string(v))
        return fail(err, errlen, "invalid %s: expected a string, got %s", name,
                    type_name(v));
    out->p = json_string_value(v);
    out->len = json_string_length(v);
    return 0;
}

/* backoff: {"exp": [base, max]} or {"fixed": ms}. */
static int get_backoff(const json_t *v, struct core_add *a, char *err,
                       size_t errlen) {
    static const char usage[] =
        "expected {\"exp\": [base-ms, max-ms]} or {\"fixed\": ms}";
    if (!json_is_object(v) || json_object_size(v) != 1)
        return fail(err, errlen, "invalid backoff: %s", usage);
    const json_t *exp = json_object_get(v, "exp");
    const json_t *fixed = json_object_get(v, "fixed");
    if (fixed) {
        a->backoff_kind = DQ_BACKOFF_FIXED;
        return get_duration("backoff fixed", fixed, &a->backoff_base, err,
                            errlen);
    }
    if (!exp || !json_is_array(exp) || json_array_size(exp) != 2)
        return fail(err, errlen, "invalid backoff: %s", usage);
    a->backoff_kind = DQ_BACKOFF_EXP;
    if (get_duration("backoff exp base", json_array_get(exp, 0),
                     &a->backoff_base, err, errlen) ||
        get_duration("backoff exp max", json_array_get(exp, 1),
                     &a->backoff_max, err, errlen))
        return -1;
    return 0;
}

static int get_topics(const json_t *v, struct hj_req *r, char *err,
                      size_t errlen) {
    if (!json_is_array(v) || json_array_size(v) == 0)
        return fail(err, errlen,
                    "invalid topics: expected a non-empty array of topic "
                    "names");
    size_t n = json_array_size(v);
    if (n > 1024)
        return fail(err, errlen, "invalid topics: at most 1024, got %zu", n);
    r->topics = xcalloc(n, sizeof *r->topics);
    r->ntopics = n;
    for (size_t i = 0; i < n; i++)
        if (get_str("topics", json_array_get(v, i), &r->topics[i], err,
                    errlen))
            return -1;
    return 0;
}

static int get_body(const json_t *v, bool b64, struct hj_req *r, char *err,
                    size_t errlen) {
    struct dq_str s;
    if (get_str(b64 ? "body_base64" : "body", v, &s, err, errlen)) return -1;
    if (!b64) {
        r->add.body = s;
        return 0;
    }
    r->body_buf = xmalloc(BASE64_DECODED_MAX(s.len) + 1);
    long n = base64_decode(s.p, s.len, r->body_buf);
    if (n < 0)
        return fail(err, errlen,
                    "invalid body_base64: not base64 (RFC 4648, padded, no "
                    "line breaks)");
    r->add.body = (struct dq_str){r->body_buf, (size_t)n};
    return 0;
}

static int field(int kind, const char *k, const json_t *v, struct hj_req *r,
                 char *err, size_t errlen) {
    struct core_add *a = &r->add;
    if (kind == HJ_ADD) {
        if (!strcmp(k, "id")) return get_str(k, v, &a->id, err, errlen);
        if (!strcmp(k, "body")) return get_body(v, false, r, err, errlen);
        if (!strcmp(k, "body_base64")) return get_body(v, true, r, err, errlen);
        if (!strcmp(k, "delay")) return get_duration(k, v, &a->delay, err, errlen);
        if (!strcmp(k, "at")) return get_time(k, v, &a->at, err, errlen);
        if (!strcmp(k, "ttr")) return get_duration(k, v, &a->ttr, err, errlen);
        if (!strcmp(k, "retries")) return get_int(k, v, &a->retries, err, errlen);
        if (!strcmp(k, "backoff")) return get_backoff(v, a, err, errlen);
        if (!strcmp(k, "url")) return get_str(k, v, &a->url, err, errlen);
        if (!strcmp(k, "content_type"))
            return get_str(k, v, &a->content_type, err, errlen);
        if (!strcmp(k, "replace")) {
            if (!json_is_boolean(v))
                return fail(err, errlen,
                            "invalid replace: expected a boolean, got %s",
                            type_name(v));
            a->replace = json_is_true(v);
            return 0;
        }
    }
    if (!strcmp(k, "topics")) return get_topics(v, r, err, errlen);
    if (!strcmp(k, "timeout")) return get_duration(k, v, &r->timeout, err, errlen);
    if (!strcmp(k, "count")) return get_int(k, v, &r->count, err, errlen);
    if (!strcmp(k, "delay")) return get_duration(k, v, &r->delay, err, errlen);
    if (!strcmp(k, "ttr")) return get_duration(k, v, &r->ttr, err, errlen);
    return fail(err, errlen, "unknown field '%s'", k); /* not reached */
}

static int unknown_field(int kind, const char *k, char *err, size_t errlen) {
    char list[160] = "";
    size_t n = 0;
    for (int i = 0; fields[kind][i]; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "",
                              fields[kind][i]);
    if (kind == HJ_ADD && !strcmp(k, "url"))
        return fail(err, errlen,
                    "unknown field 'url': push delivery is not available in "
                    "this server");
    return fail(err, errlen, "unknown field '%.40s' (%s%s)", k,
                n ? "expected: " : "this request takes no fields", list);
}

int hj_decode(int kind, const char *data, size_t len, struct hj_req *out,
              char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->add = (struct core_add)CORE_ADD_INIT;
    out->timeout = out->count = out->delay = out->ttr = CORE_UNSET;
    if (len == 0) {
        if (kind == HJ_ADD || kind == HJ_RESERVE)
            return fail(err, errlen, "a JSON object is required");
        return 0;
    }
    json_error_t je;
    json_t *doc = json_loadb(data, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
                             &je);
    if (!doc)
        return fail(err, errlen, "malformed JSON at line %d column %d: %s",
                    je.line, je.column, je.text);
    out->doc = doc;
    if (!json_is_object(doc))
        return fail(err, errlen, "expected a JSON object, got %s",
                    type_name(doc));
    const char *k;
    json_t *v;
    json_object_foreach(doc, k, v) {
        bool known = false;
        for (int i = 0; fields[kind][i] && !known; i++)
            known = !strcmp(k, fields[kind][i]);
        if (!known) return unknown_field(kind, k, err, errlen);
        if (field(kind, k, v, out, err, errlen)) return -1;
    }
    if (kind == HJ_ADD) {
        bool b = json_object_get(doc, "body") != NULL;
        bool b64 = json_object_get(doc, "body_base64") != NULL;
        if (b && b64)
            return fail(err, errlen,
                        "body and body_base64 cannot be used together");
        if (!b && !b64)
            return fail(err, errlen, "missing body (or body_base64)");
        if (!out->add.id.p) out->add.id = (struct dq_str){"*", 1};
    }
    if (kind == HJ_RESERVE && !out->topics)
        return fail(err, errlen, "missing topics: expected a non-empty array "
                                 "of topic names");
    return 0;
}

void hj_free(struct hj_req *r) {
    if (r->doc) json_decref(r->doc);
    dq_free(r->body_buf);
    dq_free(r->topics);
    memset(r, 0, sizeof *r);
}

/* --- stats ----------------------------------------------------------------- */

/* The counters of STATS, in the order every document lists them. */
static const struct {
    const char *name;
    size_t off;
} counters[] = {
#define C(f) {#f, offsetof(struct dq_stats, f)}
    C(added), C(reserved), C(acked), C(nacked), C(expired), C(dead),
    C(deleted), C(kicked), C(pushed), C(push_failed),
#undef C
};

void *hj_stats(const struct dq_stats *s, int shape) {
    json_t *o = json_object();
    if (!o) return NULL;
    if (shape != HJ_STATS_COUNTERS) {
        uint64_t total = 0;
        for (int i = 0; i < DQ_NSTATES; i++) {
            char name[32];
            snprintf(name, sizeof name, "%s%s",
                     shape == HJ_STATS_FLAT ? "jobs_" : "", dq_state_name(i));
            json_object_set_new(o, name, json_integer((json_int_t)s->jobs[i]));
            total += s->jobs[i];
        }
        if (shape == HJ_STATS_JOBS) {
            json_object_set_new(o, "total", json_integer((json_int_t)total));
            return o;
        }
    }
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        uint64_t v;
        memcpy(&v, (const char *)s + counters[i].off, sizeof v);
        json_object_set_new(o, counters[i].name, json_integer((json_int_t)v));
    }
    return o;
}
