/*
 * baton values and etcdctl on one etcd (the "etcd" fixture): the value NAME
 * is the plain key NAME (under the URI's prefix), its version the key's
 * mod_revision.
 *
 *   test_etcdctl_values URI       ("{port}" = the fixture's client port)
 *
 *   - `etcdctl put K v` wakes a baton watcher waiting on the absent value,
 *     which reads "v" at version = etcdctl's mod_revision;
 *   - baton_value_set is read by `etcdctl get K --print-value-only`, and seen
 *     by an `etcdctl watch K` started before it;
 *   - a version read by baton, then `etcdctl put`: baton's compare-and-set on
 *     the old version is BATON_ECONFLICT;
 *   - `etcdctl del K` wakes a baton watcher with "absent" (version 0);
 *   - with a URI prefix (etcd://host/app): the value NAME is the key
 *     "app/NAME" for etcdctl.
 */
#include <baton.h>

#include <pthread.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "../common/testlib.h"

static char g_uri[1024];
static char g_key[128];
static int g_port;

#define ECTL "ETCDCTL_API=3 timeout 20 etcdctl --endpoints=127.0.0.1:%d "

/* The stdout of a shell command (its first line, without '\n') into OUT;
 * its exit status. */
static int sh_out(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int sh_out(char *out, size_t n, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    out[0] = 0;
    if (fgets(out, (int)n, p)) out[strcspn(out, "\n")] = 0;
    while (fgetc(p) != EOF) {
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* etcdctl's mod_revision of KEY (0 when absent or unreadable). */
static unsigned long long ectl_modrev(const char *key)
{
    char out[64];
    if (sh_out(out, sizeof out, ECTL "get '%s' -w fields | sed -n 's/^\"ModRevision\" : //p'", g_port, key)) return 0;
    return strtoull(out, NULL, 10);
}

typedef struct {
    baton_value *v;
    uint64_t known;
    int rc;
    baton_value_data d;
} watcher;

static void *watch_main(void *a)
{
    watcher *w = a;
    w->rc = baton_value_watch(w->v, w->known, &w->d, 20000);
    return NULL;
}

static void put_wakes_watcher(void)
{
    baton_client *c = tl_client_open(g_uri);
    baton_value *v;
    pthread_t th;
    MUST(baton_value_open(&v, c, g_key));
    CHECK_RC(baton_value_delete(v, BATON_VALUE_ANY), BATON_ENOENT);
    watcher w = { .v = v, .known = 0 };
    pthread_create(&th, NULL, watch_main, &w);
    tl_sleep_ms(500);
    CHECK(tl_sh(ECTL "put '%s' 'hello from etcdctl' >/dev/null", g_port, g_key) == 0);
    pthread_join(th, NULL);
    CHECK_RC(w.rc, 0);
    CHECK(w.d.data && !strcmp(w.d.data, "hello from etcdctl"));
    CHECK(w.d.version > 0 && w.d.version == ectl_modrev(g_key));
    fprintf(stderr, "   version %llu, etcdctl's mod_revision %llu\n", (unsigned long long)w.d.version,
            ectl_modrev(g_key));
    baton_value_data_clear(&w.d);
    baton_value_free(v);
    baton_client_close(c);
}

static void set_seen_by_etcdctl(void)
{
    baton_client *c = tl_client_open(g_uri);
    baton_value *v;
    char out[256], log[1024], pidf[1100];
    uint64_t ver = 0;
    const char *tmp = getenv("BATON_TEST_TMP");
    snprintf(log, sizeof log, "%s/etcdctl_values_%d.watch", tmp ? tmp : "/tmp", (int)getpid());
    snprintf(pidf, sizeof pidf, "%s.pid", log);
    MUST(baton_value_open(&v, c, g_key));
    CHECK_RC(baton_value_set(v, "from baton", 10, BATON_VALUE_ANY, &ver), 0);
    CHECK(sh_out(out, sizeof out, ECTL "get '%s' --print-value-only", g_port, g_key) == 0);
    CHECK(!strcmp(out, "from baton"));
    CHECK(ver == ectl_modrev(g_key));
    /* an etcdctl watch, started before the set (timeout ends it if we cannot) */
    CHECK(tl_sh("ETCDCTL_API=3 timeout 30 etcdctl --endpoints=127.0.0.1:%d watch '%s' >'%s' 2>&1 </dev/null & "
                "echo $! >'%s'",
                g_port, g_key, log, pidf) == 0);
    tl_sleep_ms(1000);
    CHECK_RC(baton_value_set(v, "second from baton", 17, ver, NULL), 0);
    int seen = 0;
    for (int i = 0; i < 200 && !seen; i++) {
        seen = tl_sh("grep -qx 'second from baton' '%s'", log) == 0;
        if (!seen) tl_sleep_ms(100);
    }
    CHECK(seen);
    /* the timeout that runs it passes the TERM on */
    tl_sh("kill \"$(cat '%s')\" 2>/dev/null; rm -f '%s' '%s'", pidf, log, pidf);
    baton_value_free(v);
    baton_client_close(c);
}

static void cas_against_etcdctl(void)
{
    baton_client *c = tl_client_open(g_uri);
    baton_value *v;
    baton_value_data d = { 0 };
    MUST(baton_value_open(&v, c, g_key));
    CHECK_RC(baton_value_get(v, &d), 0);
    CHECK(tl_sh(ECTL "put '%s' 'changed by etcdctl' >/dev/null", g_port, g_key) == 0);
    CHECK_RC(baton_value_set(v, "stale", 5, d.version, NULL), BATON_ECONFLICT);
    baton_value_data_clear(&d);
    CHECK_RC(baton_value_get(v, &d), 0);
    CHECK(d.data && !strcmp(d.data, "changed by etcdctl"));
    baton_value_data_clear(&d);
    baton_value_free(v);
    baton_client_close(c);
}

static void del_wakes_watcher(void)
{
    baton_client *c = tl_client_open(g_uri);
    baton_value *v;
    baton_value_data d = { 0 };
    pthread_t th;
    MUST(baton_value_open(&v, c, g_key));
    CHECK_RC(baton_value_get(v, &d), 0);
    watcher w = { .v = v, .known = d.version };
    baton_value_data_clear(&d);
    pthread_create(&th, NULL, watch_main, &w);
    tl_sleep_ms(500);
    CHECK(tl_sh(ECTL "del '%s' >/dev/null", g_port, g_key) == 0);
    pthread_join(th, NULL);
    CHECK_RC(w.rc, 0);
    CHECK(w.d.version == 0 && w.d.data == NULL);
    baton_value_free(v);
    baton_client_close(c);
}

static void uri_prefix(void)
{
    char puri[1100], out[256], name[160];
    const char *q = strchr(g_uri, '?');
    /* etcd://127.0.0.1:P/app?... : the value NAME is the key "app/NAME" */
    snprintf(puri, sizeof puri, "%.*s/app-%d%s", q ? (int)(q - g_uri) : (int)strlen(g_uri), g_uri, (int)getpid(),
             q ? q : "");
    baton_client *c = tl_client_open(puri);
    baton_value *v;
    baton_value_data d = { 0 };
    snprintf(name, sizeof name, "app-%d/cfg", (int)getpid());
    MUST(baton_value_open(&v, c, "cfg"));
    CHECK_RC(baton_value_set(v, "prefixed", 8, BATON_VALUE_ANY, NULL), 0);
    CHECK(sh_out(out, sizeof out, ECTL "get '%s' --print-value-only", g_port, name) == 0);
    CHECK(!strcmp(out, "prefixed"));
    CHECK(tl_sh(ECTL "put '%s' 'back' >/dev/null", g_port, name) == 0);
    CHECK_RC(baton_value_get(v, &d), 0);
    CHECK(d.data && !strcmp(d.data, "back"));
    baton_value_data_clear(&d);
    CHECK_RC(baton_value_delete(v, BATON_VALUE_ANY), 0);
    baton_value_free(v);
    baton_client_close(c);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_etcdctl_values URI\n");
        return 2;
    }
    if (tl_uri_with_port(g_uri, sizeof g_uri, argv[1], "etcd")) tl_skip("no etcd fixture", 1);
    if (tl_sh("command -v etcdctl >/dev/null") != 0) tl_skip("etcdctl is not installed", 1);
    g_port = tl_fixture_port("etcd");
    snprintf(g_key, sizeof g_key, "etcdctl-values-%d/config", (int)getpid());
    RUN(put_wakes_watcher);
    RUN(set_seen_by_etcdctl);
    RUN(cas_against_etcdctl);
    RUN(del_wakes_watcher);
    RUN(uri_prefix);
    return th_finish();
}
