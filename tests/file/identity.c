/*
 * The file engine's identity (what a multilock orders its members by):
 *
 *   test_file_identity
 *
 * Every spelling of one lock directory ("/./", "/../", a trailing slash,
 * localhost, a symlinked parent, BATON_DIR) gives the same "file:<realpath>",
 * different directories give different ones, and a path too long for the
 * identity buffer still gives a distinct, stable one.
 */
#include "ft.h"
#include "core/client.h"

#include <limits.h>

static char g_real[PATH_MAX];   /* realpath of g_dir/a */

/* The identity of a client of URI ("" when it cannot be opened). */
static void ident_of(const char *uri, char *out, size_t n) {
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    out[0] = 0;
    if (rc) {
        fprintf(stderr, "   open %s: %d (%s): %s\n", uri, rc, baton_strerror(rc), baton_error_last()->message);
        CHECK_RC(rc, 0);
        return;
    }
    snprintf(out, n, "%s", c->ident);
    baton_client_close(c);
}

static void test_spellings(void) {
    char want[PATH_MAX + 8], got[512], uri[2400];
    snprintf(want, sizeof want, "file:%s", g_real);
    const char *forms[] = { "file://%s/a", "file://%s/a/", "file://%s/./a", "file://%s/a/./",
                            "file://%s/b/../a", "file://%s//a", "file://localhost%s/a", "file://%s/alias/../a",
                            "file://%s/link/inner/..", NULL };
    for (int i = 0; forms[i]; i++) {
        snprintf(uri, sizeof uri, forms[i], g_dir);
        ident_of(uri, got, sizeof got);
        if (strcmp(got, want)) fprintf(stderr, "   %s: identity \"%s\", want \"%s\"\n", uri, got, want);
        CHECK(!strcmp(got, want));
    }
    /* the default directory, from BATON_DIR */
    char env[1200];
    snprintf(env, sizeof env, "%s/b/../a/.", g_dir);
    setenv("BATON_DIR", env, 1);
    ident_of("file://", got, sizeof got);
    CHECK(!strcmp(got, want));
    ident_of(NULL, got, sizeof got);
    CHECK(!strcmp(got, want));
    unsetenv("BATON_DIR");
    /* another directory is another engine */
    snprintf(uri, sizeof uri, "file://%s/b", g_dir);
    ident_of(uri, got, sizeof got);
    CHECK(got[0] && strcmp(got, want) != 0);
}

/* Two directories whose real paths differ only past what the identity
 * buffer holds. */
static void test_long_paths(void) {
    char deep[1200], u1[1400], u2[1400], i1[512], i2[512], i1b[512];
    int n = snprintf(deep, sizeof deep, "%s", g_dir);
    while (n < 600) n += snprintf(deep + n, sizeof deep - (size_t)n, "/%s", "a-rather-long-directory-name");
    snprintf(u1, sizeof u1, "file://%s/one", deep);
    snprintf(u2, sizeof u2, "file://%s/two", deep);
    char d1[1300], d2[1300];
    snprintf(d1, sizeof d1, "%s/one", deep);
    snprintf(d2, sizeof d2, "%s/two", deep);
    tl_mkdirs(d1);
    tl_mkdirs(d2);
    ident_of(u1, i1, sizeof i1);
    ident_of(u2, i2, sizeof i2);
    snprintf(u1, sizeof u1, "file://%s/../one/.", d2);
    ident_of(u1, i1b, sizeof i1b);
    CHECK(!strncmp(i1, "file:/", 6));
    CHECK(strlen(i1) < 256);
    CHECK(strcmp(i1, i2) != 0);
    CHECK(!strcmp(i1, i1b));
}

int main(void) {
    ft_setup("file_identity");
    char a[1200], b[1200], link[1200], path[1200];
    snprintf(a, sizeof a, "%s/a", g_dir);
    snprintf(b, sizeof b, "%s/b", g_dir);
    snprintf(path, sizeof path, "%s/a/inner", g_dir);
    tl_mkdirs(a);
    tl_mkdirs(b);
    tl_mkdirs(path);
    /* alias: a symlinked parent; link -> a */
    snprintf(link, sizeof link, "%s/link", g_dir);
    if (symlink(a, link) && errno != EEXIST) perror(link);
    snprintf(path, sizeof path, "%s/alias", g_dir);
    if (symlink(b, path) && errno != EEXIST) perror(path);
    if (!realpath(a, g_real)) {
        perror(a);
        return 1;
    }
    RUN(test_spellings);
    RUN(test_long_paths);
    return th_finish();
}
