/* fuzz_http_json.c -- libFuzzer target for the HTTP front end's JSON
 * request decoding (front/http/http_json.c) and base64.
 *
 * The first byte picks the request kind, the rest is the body. Checks the
 * contract: 0 or -1, a message with every -1 and none longer than the
 * buffer, strings inside the parsed document or the decoded body, the
 * fields the kind does not take left unset; and base64: encoding any bytes
 * decodes back to them.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "front/http/http_json.h"
#include "lib/base64.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c) \
    do {         \
        if (!(c)) abort(); \
    } while (0)

static void check_str(struct dq_str s) {
    /* readable to its end (ASan checks) */
    volatile char sink = 0;
    for (size_t i = 0; i < s.len; i++) sink ^= s.p[i];
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    int kind = data[0] % (HJ_NONE + 1);
    size_t n = size - 1;
    char *body = malloc(n ? n : 1); /* exactly sized: overreads are caught */
    CHECK(body != NULL);
    memcpy(body, data + 1, n);
    struct hj_req r;
    char err[200];
    err[0] = '\0';
    int rc = hj_decode(kind, body, n, &r, err, sizeof err);
    CHECK(rc == 0 || rc == -1);
    CHECK(memchr(err, '\0', sizeof err) != NULL);
    if (rc != 0) {
        CHECK(err[0] != '\0');
    } else {
        if (kind == HJ_ADD) {
            check_str(r.add.id);
            check_str(r.add.body);
            CHECK(r.add.id.p != NULL); /* "" is the core's to refuse */
        } else {
            CHECK(r.add.body.p == NULL && r.add.id.p == NULL);
        }
        if (kind == HJ_RESERVE) {
            CHECK(r.ntopics > 0 && r.topics != NULL);
            for (size_t i = 0; i < r.ntopics; i++) check_str(r.topics[i]);
        } else {
            CHECK(r.ntopics == 0 && r.timeout == CORE_UNSET);
        }
        if (kind != HJ_NACK) CHECK(r.delay == CORE_UNSET);
        if (kind != HJ_TOUCH) CHECK(r.ttr == CORE_UNSET);
    }
    hj_free(&r);

    /* base64 round trip of the raw bytes */
    char *enc = malloc(BASE64_ENCODED_LEN(n) + 1);
    char *dec = malloc(BASE64_DECODED_MAX(BASE64_ENCODED_LEN(n)) + 1);
    CHECK(enc && dec);
    size_t elen = base64_encode(body, n, enc);
    CHECK(elen == BASE64_ENCODED_LEN(n));
    long dlen = base64_decode(enc, elen, dec);
    CHECK(dlen == (long)n && memcmp(dec, body, n) == 0);
    /* and decoding arbitrary input stays in bounds */
    char *any = malloc(BASE64_DECODED_MAX(n) + 1);
    CHECK(any != NULL);
    long alen = base64_decode(body, n, any);
    CHECK(alen == -1 || (alen >= 0 && (size_t)alen <= BASE64_DECODED_MAX(n)));
    free(any);
    free(enc);
    free(dec);
    free(body);
    return 0;
}
