/*
 * SHA-256 (FIPS 180-4), wherever a lock name must be shortened or turned
 * into a number: the file engine's long lock names, the PostgreSQL advisory
 * lock key, the MySQL GET_LOCK name of a long name. Where someone else can
 * choose the names, two of them must not be craftable to share one lock, so
 * the hash must be collision-resistant, and the bare build cannot lean on
 * OpenSSL for one.
 */
#ifndef BATON_UTIL_SHA256_H
#define BATON_UTIL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define BATON_SHA256_SIZE 32

typedef struct {
    uint32_t h[8];
    uint64_t total;          /* bytes hashed so far */
    unsigned char buf[64];   /* a block not yet full */
    size_t nbuf;
} baton_sha256_ctx;

void baton__sha256_init(baton_sha256_ctx *c);
void baton__sha256_update(baton_sha256_ctx *c, const void *data, size_t n);
void baton__sha256_final(baton_sha256_ctx *c, unsigned char out[BATON_SHA256_SIZE]);
/* The whole digest of one buffer. */
void baton__sha256(const void *data, size_t n, unsigned char out[BATON_SHA256_SIZE]);
/* The first nbytes of the digest of the string s, as 2*nbytes lowercase hex digits. */
void baton__sha256_hex(const char *s, size_t nbytes, char *hex);

#endif
