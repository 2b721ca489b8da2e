/* fuzz_resp.c -- libFuzzer target for the RESP request parser.
 *
 * Feeds the input to resp_parse() as a connection would, request after
 * request until RESP_NEED or RESP_BAD, and checks its contract: bytes taken
 * within the input, argc within max_args, arguments within the request and
 * max_bulk, a message with every RESP_BAD. Each request is also parsed again
 * from an exactly sized copy of its own bytes (same result) and of all but
 * its last byte (RESP_NEED), which is what makes byte-by-byte reading work.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/resp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct resp_limits lim = {.max_args = 8, .max_bulk = 64, .max_inline = 128};

#define CHECK(c) \
    do {         \
        if (!(c)) abort(); \
    } while (0)

/* Parses a fresh, exactly sized copy of src[0..n). *copy receives it (the
 * caller frees it) so argv can be compared. */
static ssize_t reparse(const uint8_t *src, size_t n, char **copy,
                       struct resp_arg *argv, size_t *argc, const char **err) {
    *copy = malloc(n ? n : 1);
    CHECK(*copy != NULL);
    memcpy(*copy, src, n);
    return resp_parse(*copy, n, &lim, argv, argc, err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size ? size : 1);
    struct resp_arg *argv = malloc(lim.max_args * sizeof *argv);
    struct resp_arg *argv2 = malloc(lim.max_args * sizeof *argv2);
    CHECK(buf && argv && argv2);
    memcpy(buf, data, size);

    size_t off = 0;
    for (;;) {
        size_t left = size - off, argc = 0, argc2 = 0;
        const char *err = NULL, *err2 = NULL;
        char *copy;
        ssize_t r = resp_parse(buf + off, left, &lim, argv, &argc, &err);

        if (r == RESP_NEED) break;
        if (r == RESP_BAD) {
            CHECK(err != NULL && err[0] != '\0');
            /* No prefix of a bad request may be complete. */
            if (left > 1) {
                ssize_t r2 = reparse(data + off, left - 1, &copy, argv2, &argc2, &err2);
                CHECK(r2 == RESP_NEED || r2 == RESP_BAD);
                free(copy);
            }
            break;
        }
        CHECK(r > 0 && (size_t)r <= left);
        CHECK(argc <= lim.max_args);
        for (size_t i = 0; i < argc; i++) {
            CHECK(argv[i].p >= buf + off && argv[i].len <= lim.max_bulk);
            CHECK(argv[i].p + argv[i].len <= buf + off + (size_t)r);
        }

        /* Exactly the request's bytes: the same request. */
        ssize_t r2 = reparse(data + off, (size_t)r, &copy, argv2, &argc2, &err2);
        CHECK(r2 == r && argc2 == argc);
        for (size_t i = 0; i < argc; i++) {
            CHECK(argv2[i].len == argv[i].len);
            CHECK(memcmp(argv2[i].p, argv[i].p, argv[i].len) == 0);
            CHECK(argv2[i].p - copy == argv[i].p - (buf + off));
        }
        free(copy);
        /* One byte less: not complete yet. */
        r2 = reparse(data + off, (size_t)r - 1, &copy, argv2, &argc2, &err2);
        CHECK(r2 == RESP_NEED);
        free(copy);

        off += (size_t)r;
    }

    free(argv2);
    free(argv);
    free(buf);
    return 0;
}
