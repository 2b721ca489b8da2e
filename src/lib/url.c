/* url.c -- see url.h. */
#include "lib/url.h"

#include <fnmatch.h>
#include <string.h>
#include <strings.h>

static bool has_prefix(const char *p, size_t len, const char *pre) {
    size_t n = strlen(pre);
    return len >= n && strncasecmp(p, pre, n) == 0;
}

const char *url_split(const char *p, size_t len, struct url_parts *out) {
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)p[i] <= ' ' || (unsigned char)p[i] >= 127)
            return "a URL holds printable ASCII only, without spaces";
    size_t at;
    if (has_prefix(p, len, "https://")) {
        out->https = true;
        at = 8;
    } else if (has_prefix(p, len, "http://")) {
        at = 7;
    } else {
        return "expected an absolute http:// or https:// URL";
    }
    size_t end = at;
    while (end < len && p[end] != '/' && p[end] != '?' && p[end] != '#') end++;
    /* authority = [userinfo@]host[:port] */
    const char *a = p + at;
    size_t alen = end - at;
    const char *amp = memrchr(a, '@', alen);
    if (amp) {
        alen -= (size_t)(amp + 1 - a);
        a = amp + 1;
    }
    const char *port = NULL;
    size_t hlen;
    if (alen && a[0] == '[') {
        const char *rb = memchr(a, ']', alen);
        if (!rb) return "unclosed '[' in the URL's host";
        out->host = a + 1;
        out->host_len = (size_t)(rb - a - 1);
        hlen = (size_t)(rb - a + 1);
        if (hlen < alen) {
            if (a[hlen] != ':') return "bad characters after the URL's host";
            port = a + hlen + 1;
        }
    } else {
        const char *colon = memchr(a, ':', alen);
        hlen = colon ? (size_t)(colon - a) : alen;
        out->host = a;
        out->host_len = hlen;
        if (colon) port = colon + 1;
    }
    if (out->host_len == 0) return "the URL has no host";
    if (port) {
        size_t plen = (size_t)(a + alen - port);
        unsigned v = 0;
        if (plen == 0 || plen > 5) return "bad port in the URL";
        for (size_t i = 0; i < plen; i++) {
            if (port[i] < '0' || port[i] > '9') return "bad port in the URL";
            v = v * 10 + (unsigned)(port[i] - '0');
        }
        if (v == 0 || v > 65535) return "bad port in the URL";
    }
    return NULL;
}

bool url_host_allowed(const char *patterns, const char *host, size_t len) {
    if (!patterns || !*patterns) return true;
    char h[256], pat[256];
    if (len >= sizeof h) return false;
    memcpy(h, host, len);
    h[len] = '\0';
    for (const char *p = patterns; *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        while (n && *p == ' ') p++, n--;
        while (n && p[n - 1] == ' ') n--;
        if (n && n < sizeof pat) {
            memcpy(pat, p, n);
            pat[n] = '\0';
            if (fnmatch(pat, h, FNM_CASEFOLD) == 0) return true;
        }
        if (!comma) break;
        p = comma + 1;
    }
    return false;
}
