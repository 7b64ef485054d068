/*
 * Base64 (RFC 4648): the standard alphabet with padding, as etcd's JSON
 * gateway and protobuf JSON mapping want for bytes, and the URL-safe one
 * without padding, which keeps the MySQL GET_LOCK name of a long lock name
 * within its 64 characters.
 */
#ifndef BATON_UTIL_BASE64_H
#define BATON_UTIL_BASE64_H

#include <stddef.h>

#define BATON_B64_URL 1u     /* '-' and '_' for '+' and '/' (RFC 4648 section 5) */
#define BATON_B64_NOPAD 2u   /* no trailing '=' */

/* The length of the encoding of N bytes, without the NUL. */
size_t baton__base64_len(size_t n, unsigned flags);
/* Encodes N bytes of IN into OUT (baton__base64_len + 1 bytes, NUL-terminated);
 * returns the length written, without the NUL. */
size_t baton__base64_encode(char *out, const void *in, size_t n, unsigned flags);
/* The standard padded encoding, malloc'd; NULL when out of memory. */
char *baton__base64(const void *in, size_t n);
/* Decodes the standard padded encoding S into a malloc'd buffer (*out, *len
 * bytes, plus a NUL after them). -1 with *out NULL when S is not that
 * encoding or memory ran out. */
int baton__unbase64(const char *s, char **out, size_t *len);

#endif
