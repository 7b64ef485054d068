/*
 * SHA-256 after FIPS 180-4, written for baton (see sha256.h for why). Plain
 * and portable rather than fast: it hashes lock names of at most a few
 * kilobytes, once per lock handle.
 */
#include "sha256.h"

#include <string.h>

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

/* One 64-byte block into the state st. */
static void block(uint32_t st[8], const unsigned char *p)
{
    uint32_t w[64], a, b, c, d, e, f, g, h;
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = st[0]; b = st[1]; c = st[2]; d = st[3]; e = st[4]; f = st[5]; g = st[6]; h = st[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g; g = f; f = e; e = d + t1;
        d = c; c = b; b = a; a = t1 + t2;
    }
    st[0] += a; st[1] += b; st[2] += c; st[3] += d; st[4] += e; st[5] += f; st[6] += g; st[7] += h;
}

void baton__sha256_init(baton_sha256_ctx *c)
{
    static const uint32_t iv[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
    memcpy(c->h, iv, sizeof iv);
    c->total = 0;
    c->nbuf = 0;
}

void baton__sha256_update(baton_sha256_ctx *c, const void *data, size_t n)
{
    const unsigned char *p = data;
    c->total += n;
    if (c->nbuf) {
        size_t take = 64 - c->nbuf < n ? 64 - c->nbuf : n;
        memcpy(c->buf + c->nbuf, p, take);
        c->nbuf += take;
        p += take;
        n -= take;
        if (c->nbuf < 64) return;
        block(c->h, c->buf);
        c->nbuf = 0;
    }
    for (; n >= 64; p += 64, n -= 64) block(c->h, p);
    memcpy(c->buf, p, n);
    c->nbuf = n;
}

void baton__sha256_final(baton_sha256_ctx *c, unsigned char out[BATON_SHA256_SIZE])
{
    uint64_t bits = c->total * 8;
    /* 0x80, zeros up to 56 mod 64, then the length in bits, big-endian */
    c->buf[c->nbuf++] = 0x80;
    if (c->nbuf > 56) {
        memset(c->buf + c->nbuf, 0, 64 - c->nbuf);
        block(c->h, c->buf);
        c->nbuf = 0;
    }
    memset(c->buf + c->nbuf, 0, 56 - c->nbuf);
    for (int i = 0; i < 8; i++) c->buf[56 + i] = (unsigned char)(bits >> (56 - 8 * i));
    block(c->h, c->buf);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (unsigned char)(c->h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(c->h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(c->h[i] >> 8);
        out[4 * i + 3] = (unsigned char)c->h[i];
    }
    memset(c, 0, sizeof *c);
}

void baton__sha256(const void *data, size_t n, unsigned char out[BATON_SHA256_SIZE])
{
    baton_sha256_ctx c;
    baton__sha256_init(&c);
    baton__sha256_update(&c, data, n);
    baton__sha256_final(&c, out);
}

void baton__sha256_hex(const char *s, size_t nbytes, char *hex)
{
    static const char hx[] = "0123456789abcdef";
    unsigned char d[BATON_SHA256_SIZE];
    if (nbytes > sizeof d) nbytes = sizeof d;
    baton__sha256(s, strlen(s), d);
    for (size_t i = 0; i < nbytes; i++) {
        hex[2 * i] = hx[d[i] >> 4];
        hex[2 * i + 1] = hx[d[i] & 15];
    }
    hex[2 * nbytes] = 0;
}
