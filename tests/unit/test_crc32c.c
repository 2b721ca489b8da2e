/* test_crc32c.c -- CRC-32C known answers, and the fast path against the
 * table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lib/crc32c.h"

static void test_known_answers(void **state) {
    assert_int_equal(crc32c("123456789", 9), 0xE3069283u);
    assert_int_equal(crc32c_portable("123456789", 9), 0xE3069283u);
    assert_int_equal(crc32c("", 0), 0);
    unsigned char zeros[32] = {0};
    assert_int_equal(crc32c(zeros, 32), 0x8A9136AAu); /* RFC 3720 B.4 */
    unsigned char ones[32];
    memset(ones, 0xFF, sizeof ones);
    assert_int_equal(crc32c(ones, 32), 0x62A8AB43u);
}

static void test_fast_equals_table(void **state) {
    unsigned char buf[1000];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof buf; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (unsigned char)(x >> 16);
    }
    for (size_t off = 0; off < 9; off++)
        for (size_t n = 0; n + off <= sizeof buf; n += 37)
            assert_int_equal(crc32c(buf + off, n),
                             crc32c_portable(buf + off, n));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_answers),
        cmocka_unit_test(test_fast_equals_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
