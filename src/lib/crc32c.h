/* crc32c.h -- CRC-32C (Castagnoli), the checksum of the log's records.
 *
 * Polynomial 0x82F63B78 (reflected), initial value and final xor 0xFFFFFFFF,
 * as in iSCSI, ext4 and LevelDB: crc32c("123456789") = 0xE3069283. Uses the
 * SSE4.2 crc32 instruction when the CPU has it (8 bytes per instruction),
 * a table otherwise; both give the same answer.
 */
#ifndef DQ_CRC32C_H
#define DQ_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of p[0..n). */
uint32_t crc32c(const void *p, size_t n);
/* The same, always by table (for tests of the fast path). */
uint32_t crc32c_portable(const void *p, size_t n);

#endif
