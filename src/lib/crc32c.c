/* crc32c.c -- CRC-32C (see crc32c.h). */
#include <stdbool.h>
#include <string.h>

#include "lib/crc32c.h"

#define POLY 0x82F63B78u

static uint32_t table[256];

static void make_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        table[i] = c;
    }
}

static uint32_t crc_table(uint32_t c, const unsigned char *p, size_t n) {
    while (n--) c = table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t
crc_hw(uint32_t c, const unsigned char *p, size_t n) {
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
    }
    c = (uint32_t)c64;
    while (n--) c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

static bool have_hw;

/* Runs before main, so threads never race to set things up. */
__attribute__((constructor)) static void init(void) {
    make_table();
#if defined(__x86_64__)
    __builtin_cpu_init();
    have_hw = __builtin_cpu_supports("sse4.2");
#endif
}

uint32_t crc32c(const void *p, size_t n) {
#if defined(__x86_64__)
    if (have_hw) return ~crc_hw(0xFFFFFFFFu, p, n);
#endif
    return ~crc_table(0xFFFFFFFFu, p, n);
}

uint32_t crc32c_portable(const void *p, size_t n) {
    return ~crc_table(0xFFFFFFFFu, p, n);
}
