/* url.h -- the little push delivery needs to know about a URL (§9).
 *
 * A building block: no server header, no allocation. url_split checks that
 * a string is an absolute http or https URL and finds its host;
 * url_host_allowed matches a host against an allow-list of shell patterns.
 */
#ifndef DQ_URL_H
#define DQ_URL_H

#include <stdbool.h>
#include <stddef.h>

struct url_parts {
    bool https;
    const char *host; /* into the URL; without brackets for IPv6 */
    size_t host_len;
};

/* Splits p[0..len): "http://" or "https://" (any case), an authority with
 * a non-empty host (optionally user@ before it and :port after it, port
 * 1-65535), then nothing or a path/query/fragment starting with '/', '?' or
 * '#'. Only printable ASCII without spaces is accepted. Returns NULL and
 * fills *out, or a message saying what is wrong. */
const char *url_split(const char *p, size_t len, struct url_parts *out);

/* Whether host matches one of the comma-separated fnmatch(3) patterns
 * (case-insensitive; "*.example.com", "10.0.0.*", "localhost"). NULL or ""
 * patterns allow every host. */
bool url_host_allowed(const char *patterns, const char *host, size_t len);

#endif
