/*
 * The hash that shortens long lock names on the file engine:
 *
 *   test_file_hash
 *
 * It is SHA-256 (written in baton, so the bare build needs no OpenSSL):
 * the FIPS 180-4 test vectors, fed whole and in odd pieces; a long name maps
 * to its cut prefix plus the first 128 bits of its SHA-256; two long names
 * that differ only past the cut get different files and do not exclude each
 * other, and equal long names do.
 */
#include "ft.h"
#include "backends/file/file_int.h"
#include "util/sha256.h"

static void hex_of(const unsigned char *d, char *out) {
    for (int i = 0; i < BATON_SHA256_SIZE; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

typedef struct {
    const char *msg;   /* NULL: a million 'a' */
    size_t len;        /* 0 with msg: strlen(msg) */
    const char *want;
} vector;

static char g_million[1000000];
static char g_as[120];

static const vector g_vec[] = {
    { "", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
    { "abc", 0, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
    { "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 0,
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
    { "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
      0, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1" },
    { NULL, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0" },
    /* lengths around the padding boundary: 55 fits one block, 56 needs two */
    { g_as, 55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318" },
    { g_as, 56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a" },
    { g_as, 63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34" },
    { g_as, 64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb" },
    { g_as, 119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb" },
};

static void test_vectors(void) {
    memset(g_million, 'a', sizeof g_million);
    memset(g_as, 'a', sizeof g_as);
    for (size_t i = 0; i < sizeof g_vec / sizeof g_vec[0]; i++) {
        const vector *v = &g_vec[i];
        const char *m = v->msg ? v->msg : g_million;
        size_t len = v->len ? v->len : strlen(m);
        unsigned char d[BATON_SHA256_SIZE];
        char hex[65];
        baton__sha256(m, len, d);
        hex_of(d, hex);
        if (strcmp(hex, v->want)) fprintf(stderr, "   vector %zu (%zu bytes): %s, want %s\n", i, len, hex, v->want);
        CHECK(!strcmp(hex, v->want));
        /* the same in pieces of 1, 7, 63, 64 and 65 bytes */
        static const size_t steps[] = { 1, 7, 63, 64, 65 };
        for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
            if (len > 4096 && steps[s] < 63) continue;   /* the million 'a' byte by byte is slow enough */
            baton_sha256_ctx c;
            baton__sha256_init(&c);
            for (size_t off = 0; off < len; off += steps[s])
                baton__sha256_update(&c, m + off, len - off < steps[s] ? len - off : steps[s]);
            baton__sha256_final(&c, d);
            hex_of(d, hex);
            if (strcmp(hex, v->want)) fprintf(stderr, "   vector %zu in %zu-byte pieces: %s\n", i, steps[s], hex);
            CHECK(!strcmp(hex, v->want));
        }
    }
    char h16[33];
    baton__sha256_hex("abc", 16, h16);
    CHECK(!strcmp(h16, "ba7816bf8f01cfea414140de5dae2223"));
}

/* "orders/" + 300 'x' + TAIL */
static void long_name(char *buf, size_t n, const char *tail) {
    char xs[301];
    memset(xs, 'x', 300);
    xs[300] = 0;
    snprintf(buf, n, "orders/%s%s", xs, tail);
}

static const char g_prefix[] = "lock.orders%2F"
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";   /* 143 'x': the cut at 157 bytes */

static void test_long_name_file(void) {
    char name[400], fname[256], want[256];
    long_name(name, sizeof name, "-A");
    CHECK(strlen(g_prefix) == 157);
    baton__file_name(name, fname, sizeof fname);
    snprintf(want, sizeof want, "%s.%s", g_prefix, "92af5aedb44beb6cb5d1a4ee36eeb90f");
    if (strcmp(fname, want)) fprintf(stderr, "   %s\n   want %s\n", fname, want);
    CHECK(!strcmp(fname, want));
    long_name(name, sizeof name, "-B");
    baton__file_name(name, fname, sizeof fname);
    snprintf(want, sizeof want, "%s.%s", g_prefix, "01a55621484d0f1f2ce2a1576ce88bde");
    CHECK(!strcmp(fname, want));
    /* a short name never maps to a long name's file: its '.' would be escaped */
    baton__file_name("a.b", fname, sizeof fname);
    CHECK(!strcmp(fname, "lock.a%2Eb"));
}

/* Through the API: the file a long name locks is the one above; names that
 * differ past the cut are separate locks; equal ones exclude each other. */
static void test_long_names_exclude_only_when_equal(void) {
    baton_client *c1 = client(), *c2 = client();
    char a[400], a2[400], b[400], path[1400], fname[256];
    long_name(a, sizeof a, "-A");
    long_name(a2, sizeof a2, "-A");
    long_name(b, sizeof b, "-B");
    baton_lock *la = NULL, *la2 = NULL, *lb = NULL;
    MUST(baton_lock_open(&la, c1, a, NULL));
    MUST(baton_lock_open(&la2, c2, a2, NULL));
    MUST(baton_lock_open(&lb, c2, b, NULL));
    CHECK_RC(baton_lock_acquire(la, 0), 0);
    snprintf(fname, sizeof fname, "%s.%s", g_prefix, "92af5aedb44beb6cb5d1a4ee36eeb90f");
    struct stat st;
    CHECK(stat(dir_file(path, sizeof path, fname), &st) == 0);
    CHECK_RC(baton_lock_acquire(la2, 0), BATON_ELOCKED);   /* the same name: excluded */
    CHECK_RC(baton_lock_acquire(lb, 0), 0);                /* another name: its own file */
    CHECK_RC(baton_lock_release(la), 0);
    CHECK_RC(baton_lock_acquire(la2, 0), 0);
    CHECK_RC(baton_lock_release(la2), 0);
    CHECK_RC(baton_lock_release(lb), 0);
    baton_lock_free(la);
    baton_lock_free(la2);
    baton_lock_free(lb);
    baton_client_close(c1);
    baton_client_close(c2);
}

int main(void) {
    ft_setup("file_hash");
    RUN(test_vectors);
    RUN(test_long_name_file);
    RUN(test_long_names_exclude_only_when_equal);
    return th_finish();
}
