/* src/util/base64: the RFC 4648 test vectors in both alphabets, with and
 * without padding; decoding round-trips every byte value and refuses what is
 * not the padded standard encoding; the MySQL engine's long-name key length. */
#include <baton.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/base64.h"
#include "../harness.h"

static void test_rfc4648_vectors(void) {
    static const char *const in[] = { "", "f", "fo", "foo", "foob", "fooba", "foobar" };
    static const char *const padded[] = { "", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy" };
    static const char *const bare[] = { "", "Zg", "Zm8", "Zm9v", "Zm9vYg", "Zm9vYmE", "Zm9vYmFy" };
    char out[16];
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        size_t n = strlen(in[i]);
        char *m = baton__base64(in[i], n);
        CHECK(m && !strcmp(m, padded[i]));
        free(m);
        CHECK(baton__base64_encode(out, in[i], n, 0) == strlen(padded[i]) && !strcmp(out, padded[i]));
        CHECK(baton__base64_len(n, 0) == strlen(padded[i]));
        CHECK(baton__base64_encode(out, in[i], n, BATON_B64_NOPAD) == strlen(bare[i]) && !strcmp(out, bare[i]));
        CHECK(baton__base64_len(n, BATON_B64_NOPAD) == strlen(bare[i]));
    }
}

/* The two alphabets differ in the last two letters only. */
static void test_url_alphabet(void) {
    static const unsigned char b[] = { 0xfb, 0xff, 0xbf };
    char out[8];
    baton__base64_encode(out, b, 3, 0);
    CHECK(!strcmp(out, "+/+/"));
    baton__base64_encode(out, b, 3, BATON_B64_URL);
    CHECK(!strcmp(out, "-_-_"));
    baton__base64_encode(out, b, 2, BATON_B64_URL);
    CHECK(!strcmp(out, "-_8="));
    baton__base64_encode(out, b, 2, BATON_B64_URL | BATON_B64_NOPAD);
    CHECK(!strcmp(out, "-_8"));
}

static void test_round_trip(void) {
    unsigned char b[300];
    for (int i = 0; i < (int)sizeof b; i++) b[i] = (unsigned char)(i * 7 + 3);
    for (size_t n = 0; n <= sizeof b; n++) {
        char *e = baton__base64(b, n), *d = NULL;
        size_t len = 0;
        CHECK(e != NULL);
        if (!e) return;
        CHECK(baton__unbase64(e, &d, &len) == 0 && len == n && d && !memcmp(d, b, n) && d[n] == 0);
        free(e);
        free(d);
    }
}

static void test_decode_refuses(void) {
    static const char *const bad[] = { "Zg=", "Z===", "Zg=a", "Zg==Zg==", "Zm9v!A==", "=AAA", "Zm9", "Zm8\n",
                                       "-_8=" /* the URL alphabet is not decoded */ };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *d = (char *)1;
        size_t len = 0;
        CHECK(baton__unbase64(bad[i], &d, &len) == -1 && d == NULL);
    }
    char *d = NULL;
    size_t len = 1;
    CHECK(baton__unbase64("", &d, &len) == 0 && len == 0 && d && !*d);
    free(d);
}

/* The MySQL engine's key: "sha256:" + 43 characters fit GET_LOCK's 64. */
static void test_digest_length(void) {
    unsigned char d[32];
    char out[64];
    memset(d, 0xff, sizeof d);
    CHECK(baton__base64_len(32, BATON_B64_URL | BATON_B64_NOPAD) == 43);
    CHECK(baton__base64_encode(out, d, 32, BATON_B64_URL | BATON_B64_NOPAD) == 43);
    CHECK(strspn(out, "_") == 42 && out[42] == '8' && out[43] == 0);
}

int main(void) {
    RUN(test_rfc4648_vectors);
    RUN(test_url_alphabet);
    RUN(test_round_trip);
    RUN(test_decode_refuses);
    RUN(test_digest_length);
    return th_finish();
}
