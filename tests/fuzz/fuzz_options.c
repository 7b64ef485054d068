/*
 * Every engine's URI options, through baton_client_open: the first byte of
 * the fuzz input picks a scheme, the rest is appended to a URI of it that
 * reaches no server (127.0.0.1:1, refused at once; a temp directory for
 * file:// and sqlite://): "path?options" for the network engines, the
 * options alone for file and sqlite. Whatever the options say, the open
 * must end with a client or an error code with its message, and a client
 * must describe itself and close.
 *
 * Inputs that would leave the sandbox are skipped: a '/' anywhere (absolute
 * file names in cacert=, passfile=, ... could name /dev/zero or a FIFO), and
 * an option named like a timeout, a delay or *_ms above 200 (a connect
 * timeout is a wait the user asked for, not a hang).
 *
 * Where the core parses every engine's options against its declarative
 * spec (issue #23's contract: src/core/spec.h, src/core/options.c), the
 * URI also goes straight to that parser, baton__opts_parse(e, u, &opts)
 * with e = baton_engine_find(scheme), for every engine built or not: a
 * refusal is an error code with its message and no options, an acceptance
 * options to free.
 */
#include <baton.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"

/* the core's option parser, where the tree has one */
#if defined(__has_include)
#if __has_include("core/spec.h")
#define FUZZ_CORE_OPTIONS 1
#endif
#endif

#define EXPECT(c) do { if (!(c)) { fprintf(stderr, "fuzz_options: %s:%d: %s\n", __FILE__, __LINE__, #c); abort(); } } while (0)

/* scheme, the URI before the input, and whether the input is options only */
static const struct {
    const char *scheme, *base;
    int opts_only;
} schemes[] = {
    { "file", "file://%s/file", 1 },
    { "sqlite", "sqlite://%s/db.sqlite", 1 },
    { "redis", "redis://127.0.0.1:1/", 0 },
    { "rediss", "rediss://127.0.0.1:1/", 0 },
    { "redlock", "redlock://127.0.0.1:1,127.0.0.1:1,127.0.0.1:1/", 0 },
    { "zk", "zk://127.0.0.1:1/", 0 },
    { "postgres", "postgres://fuzz:fuzz@127.0.0.1:1/", 0 },
    { "mysql", "mysql://fuzz:fuzz@127.0.0.1:1/", 0 },
    { "etcd", "etcd://127.0.0.1:1/", 0 },
    { "etcds", "etcds://127.0.0.1:1/", 0 },
};
#define NSCHEMES (sizeof schemes / sizeof schemes[0])

static char g_dir[4096];

#ifdef FUZZ_CORE_OPTIONS
static void core_options(const char *uri)
{
    baton_uri *u = NULL;
    baton_opts *o = (baton_opts *)&o;   /* not NULL: the parser must set it */
    if (baton__uri_parse(uri, &u)) return;
    const baton_engine_info *e = baton_engine_find(u->scheme);
    EXPECT(e);
    int rc = baton__opts_parse(e, u, &o);
    if (rc) EXPECT(rc < 0 && !o && baton_error_last()->code == rc && baton_error_last()->message);
    else EXPECT(o);
    baton__opts_free(o);
    baton__uri_free(u);
}
#endif

/* One URI: the core's option parser where there is one, then an open. */
static void options_one(const char *uri)
{
    baton_client *c = NULL;
    baton_client_options o = BATON_CLIENT_OPTIONS_INIT;
    char buf[512];
#ifdef FUZZ_CORE_OPTIONS
    core_options(uri);
#endif
    o.connect_timeout_ms = 100;
    o.io_timeout_ms = 100;
    int rc = baton_client_open(&c, uri, &o);
    if (rc) {
        EXPECT(rc < 0 && !c && baton_error_last()->code == rc && baton_error_last()->message);
        return;
    }
    EXPECT(c && baton_client_backend(c) && baton_client_uri(c));
    rc = baton_client_describe(c, buf, sizeof buf);
    EXPECT(rc <= 0);
    baton_client_close(c);
}

/* 1 when U asks for a wait longer than 200 ms (see above). */
static int long_wait(const char *uri)
{
    baton_uri *u = NULL;
    int bad = 0;
    if (baton__uri_parse(uri, &u)) return 0;
    for (size_t i = 0; i < u->nparams && !bad; i++) {
        const char *k = u->params[i].key;
        size_t kl = strlen(k);
        if (strstr(k, "timeout") || strstr(k, "delay") || strstr(k, "after") || (kl > 3 && !strcmp(k + kl - 3, "_ms")))
            bad = strtoll(u->params[i].value, NULL, 10) > 200;
    }
    baton__uri_free(u);
    return bad;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *uri;
    size_t n;
    if (size < 1) return 0;
    if (!g_dir[0]) {
        const char *t = getenv("BATON_TEST_TMP");
        snprintf(g_dir, sizeof g_dir, "%s/fuzz_options", t && *t ? t : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp"));
        mkdir(g_dir, 0700);
    }
    if (memchr(data + 1, '/', size - 1)) return 0;
    const int s = data[0] % NSCHEMES;
    n = strlen(schemes[s].base) + strlen(g_dir) + size + 8;
    if (!(uri = malloc(n))) return 0;
    int at = snprintf(uri, n, schemes[s].base, g_dir);
    if (schemes[s].opts_only) uri[at++] = '?';
    memcpy(uri + at, data + 1, size - 1);
    uri[at + size - 1] = 0;
    if (!long_wait(uri)) options_one(uri);
    free(uri);
    return 0;
}
