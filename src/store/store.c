/* store.c -- what every store shares: status codes and the choice by URL. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "store/store.h"

const char *dq_status_code(int status) {
    switch (status) {
    case DQ_EXISTS: return "EXISTS";
    case DQ_BUSY: return "BUSY";
    case DQ_NOTRESERVED: return "NOTRESERVED";
    case DQ_FULL: return "FULL";
    case DQ_UNAVAILABLE: return "UNAVAILABLE";
    case DQ_IOERR: return "IOERR";
    case DQ_TIMEOUT: return "TIMEOUT";
    case DQ_TOOBIG: return "TOOBIG";
    case DQ_NOTFOUND: return "NOTFOUND";
    default: return "ERR";
    }
}

const struct dq_store_ops *dq_store_for_url(const char *url) {
    if (url == NULL || *url == '\0') return &dq_store_embedded;
    if (strncmp(url, "redis://", 8) == 0 ||
        strncmp(url, "redis-cluster://", 16) == 0 ||
        strncmp(url, "redis-sentinel://", 17) == 0)
        return &dq_store_redis;
    return NULL;
}

void dq_info_int(dq_info_emit *emit, void *ud, const char *name, int64_t v) {
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    emit(ud, name, buf);
}
