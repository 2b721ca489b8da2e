/* base64.h -- standard base64 (RFC 4648 §4, with '=' padding).
 *
 * A building block (no server header). Nothing here allocates: the caller
 * sizes the output with the macros below.
 */
#ifndef DQ_BASE64_H
#define DQ_BASE64_H

#include <stddef.h>

/* Bytes base64_encode writes for n input bytes (no NUL). */
#define BASE64_ENCODED_LEN(n) (((n) + 2) / 3 * 4)
/* An upper bound of the bytes base64_decode writes for n input chars. */
#define BASE64_DECODED_MAX(n) ((n) / 4 * 3 + 3)

/* Writes the encoding of src[0..n) to out; returns the length written. */
size_t base64_encode(const void *src, size_t n, char *out);
/* Decodes src[0..n) into out. The input must be padded to a multiple of
 * four characters with no spaces or line breaks. Returns the length
 * written, or -1 if the input is not valid base64. */
long base64_decode(const char *src, size_t n, void *out);

#endif
