/*
 * The zk backend's clean failures:
 *
 *   test_zk_badinput           starts its own server in $BATON_TEST_TMP/zk_badinput
 *
 *   - an unreachable ensemble (closed ports) -> BATON_EUNAVAILABLE within the
 *     connect timeout (plus slack), at open or at the first call;
 *   - wrong digest credentials -> BATON_EAUTH. ZooKeeper accepts any digest
 *     credential at addauth time (it only derives the identity
 *     "user:base64(sha1(user:password))" from it), so a wrong password shows
 *     as ZNOAUTH on a node whose ACL names another identity. The setup, with
 *     the official C client: user "alice" with password "secret" creates
 *     /baton/NAME with the creator-only ACL; baton as alice:wrong (and with no
 *     credential at all) cannot create its lock node under it -> BATON_EAUTH;
 *     baton as alice:secret can (the control);
 *   - lock names ZooKeeper rejects as paths (empty, "." or ".." segments, a
 *     trailing "/", control and reserved characters) -> BATON_EINVAL, while
 *     hierarchical and non-ASCII names work;
 *   - malformed URIs and options -> BATON_EINVAL before any network I/O (a
 *     closed port: a URI that slipped through would answer EUNAVAILABLE).
 */
#include "zkt.h"

#ifdef BATON_TEST_ZK_RAW
#include <zookeeper/zookeeper.h>
#endif

/* Slack on "within the connect timeout": thread start-up and scheduling on a
 * busy 2-core machine; an engine that retried forever would blow far past it. */
#define MARGIN_MS 4000

static char g_dir[1024];
static char g_srv[1200];
static int g_port;
static int g_closed;

/* ---- unreachable ------------------------------------------------------------ */

/* Opens URI with CONNECT_MS and tries one lock: the first failure must be
 * EUNAVAILABLE, within CONNECT_MS + MARGIN_MS. */
static void expect_unavailable(const char *uri, int connect_ms) {
    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
    co.connect_timeout_ms = connect_ms;
    co.io_timeout_ms = connect_ms;
    baton_client *c = NULL;
    int64_t t0 = tl_now_ms();
    int rc = baton_client_open(&c, uri, &co);
    const char *where = "open";
    if (rc == 0) {
        /* a lazy engine: the first call that needs the ensemble fails */
        baton_lock *l = NULL;
        rc = baton_lock_open(&l, c, "unreachable", NULL);
        where = "lock_open";
        if (rc == 0) {
            rc = baton_lock_acquire(l, 0);
            where = "acquire";
            baton_lock_free(l);
        }
        baton_client_close(c);
    }
    int64_t took = tl_now_ms() - t0;
    fprintf(stderr, "   %s: %s = %d (%s) after %lld ms: %s\n", uri, where, rc, baton_strerror(rc),
            (long long)took, tl_lastmsg());
    CHECK_RC(rc, BATON_EUNAVAILABLE);
    CHECK(took <= connect_ms + MARGIN_MS);
}

static void test_unreachable(void) {
    char uri[256];
    snprintf(uri, sizeof uri, "zk://127.0.0.1:%d", g_closed);
    expect_unavailable(uri, 1000);
    int p2 = zkt_closed_port(), p3 = zkt_closed_port();
    snprintf(uri, sizeof uri, "zk://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d?session_timeout_ms=4000", g_closed, p2,
             p3);
    expect_unavailable(uri, 1500);
}

/* ---- digest credentials ------------------------------------------------------- */

#ifdef BATON_TEST_ZK_RAW
static void raw_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
    (void)zh, (void)type, (void)state, (void)path, (void)ctx;
}

static atomic_int g_auth_done;
static atomic_int g_auth_rc;
static void auth_done(int rc, const void *data) {
    (void)data;
    atomic_store(&g_auth_rc, rc);
    atomic_store(&g_auth_done, 1);
}

/* As alice:secret, creates /baton and /baton/NAME, the latter readable and
 * writable by alice only (ZOO_CREATOR_ALL_ACL). Returns 0 on success. */
static int raw_setup_acl(const char *name) {
    static FILE *devnull;
    if (!devnull) devnull = fopen("/dev/null", "w");
    if (devnull) zoo_set_log_stream(devnull);
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    char hosts[64];
    snprintf(hosts, sizeof hosts, "127.0.0.1:%d", g_port);
    zhandle_t *zh = zookeeper_init(hosts, raw_watcher, 10000, NULL, NULL, 0);
    if (!zh) return -1;
    int64_t end = tl_now_ms() + 15000;
    while (zoo_state(zh) != ZOO_CONNECTED_STATE && tl_now_ms() < end) tl_sleep_ms(20);
    int rc = -1;
    if (zoo_state(zh) != ZOO_CONNECTED_STATE) goto out;
    atomic_store(&g_auth_done, 0);
    const char *cred = "alice:secret";
    if (zoo_add_auth(zh, "digest", cred, (int)strlen(cred), auth_done, NULL) != ZOK) goto out;
    while (!atomic_load(&g_auth_done) && tl_now_ms() < end) tl_sleep_ms(10);
    if (!atomic_load(&g_auth_done) || atomic_load(&g_auth_rc) != ZOK) goto out;
    int r = zoo_create(zh, "/baton", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    if (r != ZOK && r != ZNODEEXISTS) {
        fprintf(stderr, "   create /baton: %s\n", zerror(r));
        goto out;
    }
    char path[512];
    snprintf(path, sizeof path, "/baton/%s", name);
    r = zoo_create(zh, path, NULL, -1, &ZOO_CREATOR_ALL_ACL, 0, NULL, 0);
    if (r != ZOK) {
        fprintf(stderr, "   create %s: %s\n", path, zerror(r));
        goto out;
    }
    rc = 0;
out:
    zookeeper_close(zh);
    return rc;
}
#endif

/* Opens USERINFO@server (USERINFO "" = none; PASSWORD for the options, or
 * NULL) and acquires NAME once; returns the first failure or 0. */
static int try_as(const char *userinfo, const char *password, const char *name, long *native) {
    char uri[512];
    snprintf(uri, sizeof uri, "zk://%s%s127.0.0.1:%d?session_timeout_ms=4000", userinfo, *userinfo ? "@" : "",
             g_port);
    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
    co.password = password;
    baton_client *c = NULL;
    *native = 0;
    int rc = baton_client_open(&c, uri, &co);
    if (rc == 0) {
        baton_lock *l = NULL;
        rc = baton_lock_open(&l, c, name, NULL);
        if (rc == 0) {
            rc = baton_lock_acquire(l, 0);
            if (rc == 0) CHECK_RC(baton_lock_release(l), 0);
            baton_lock_free(l);
        }
    }
    if (rc) {
        *native = baton_error_last()->native;
        fprintf(stderr, "   as '%s'%s: %d (%s), native %ld: %s\n", userinfo, password ? " (+options.password)" : "",
                rc, baton_strerror(rc), *native, tl_lastmsg());
        /* the message never shows a password */
        CHECK(strstr(tl_lastmsg(), "secret") == NULL && strstr(tl_lastmsg(), "wrong") == NULL);
    }
    if (c) baton_client_close(c);
    return rc;
}

static void test_wrong_digest(void) {
#ifndef BATON_TEST_ZK_RAW
    fprintf(stderr, "   skipped: built without the ZooKeeper C client headers\n");
#else
    char name[128];
    zkt_name(name, sizeof name, "badinput", "acl");
    if (raw_setup_acl(name) != 0) {
        CHECK(!"ACL setup with the raw ZooKeeper client");
        return;
    }
    long native = 0;
    CHECK_RC(try_as("alice:wrong", NULL, name, &native), BATON_EAUTH);
    CHECK(native == ZNOAUTH);
    CHECK_RC(try_as("bob:secret", NULL, name, &native), BATON_EAUTH);
    CHECK_RC(try_as("", NULL, name, &native), BATON_EAUTH);
    CHECK(native == ZNOAUTH);
    /* the control: the right credential, in the URI or in the options */
    CHECK_RC(try_as("alice:secret", NULL, name, &native), 0);
    CHECK_RC(try_as("alice", "secret", name, &native), 0);
    /* the options' password overrides the URI's */
    CHECK_RC(try_as("alice:wrong", "secret", name, &native), 0);
    CHECK_RC(try_as("alice:secret", "wrong", name, &native), BATON_EAUTH);
#endif
}

/* ---- names ----------------------------------------------------------------------- */

static int acquire_name(baton_client *c, const char *name) {
    baton_lock *l = NULL;
    int rc = baton_lock_open(&l, c, name, NULL);
    if (rc == 0) {
        rc = baton_lock_acquire(l, 0);
        if (rc == 0) CHECK_RC(baton_lock_release(l), 0);
        baton_lock_free(l);
    }
    return rc;
}

static void test_names(void) {
    char uri[256];
    snprintf(uri, sizeof uri, "zk://127.0.0.1:%d?session_timeout_ms=4000", g_port);
    baton_client *c = tl_client_open(uri);
    /* ZooKeeper's path rules (PathUtils.validatePath): no empty segment, no
     * "." or ".." segment, no trailing "/", no U+0001-U+001F, U+007F-U+009F,
     * U+D800-U+F8FF, U+FFF0-U+FFFF. */
    static const char *bad[] = {
        "a//b", "a/", "a/./b", "a/../b", ".", "..", "x/..", "a\x01" "b", "tab\there", "a\x7f",
        "a\xc2\x80" "b",       /* U+0080 */
        "a\xee\x80\x80" "b",   /* U+E000 (private use) */
        "a\xef\xbf\xb0" "b",   /* U+FFF0 */
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = acquire_name(c, bad[i]);
        if (rc != BATON_EINVAL) fprintf(stderr, "   name #%zu \"%s\": %d (%s)\n", i, bad[i], rc, baton_strerror(rc));
        CHECK_RC(rc, BATON_EINVAL);
    }
    char ok1[128], ok2[128], ok3[128], ok4[128];
    zkt_name(ok1, sizeof ok1, "badinput", "orders/42");
    zkt_name(ok2, sizeof ok2, "badinput", "a.b..c");
    zkt_name(ok3, sizeof ok3, "badinput", "n\xc3\xbc" "rnberg-\xe6\x97\xa5\xe6\x9c\xac");
    zkt_name(ok4, sizeof ok4, "badinput", "with space:colon@at");
    const char *good[] = { ok1, ok2, ok3, ok4 };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int rc = acquire_name(c, good[i]);
        if (rc) fprintf(stderr, "   name \"%s\": %d (%s): %s\n", good[i], rc, baton_strerror(rc), tl_lastmsg());
        CHECK_RC(rc, 0);
    }
    baton_client_close(c);
}

/* ---- URIs and options ------------------------------------------------------------- */

static void expect_einval(const char *fmt) {
    char uri[512];
    if (strstr(fmt, "%d")) snprintf(uri, sizeof uri, fmt, g_closed);
    else snprintf(uri, sizeof uri, "%s", fmt);
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    if (rc != BATON_EINVAL) fprintf(stderr, "   %s -> %d (%s): %s\n", uri, rc, baton_strerror(rc), tl_lastmsg());
    CHECK_RC(rc, BATON_EINVAL);
    CHECK(c == NULL);
    CHECK(tl_lastmsg()[0] != 0);
    if (c) baton_client_close(c);
}

static void test_bad_uris(void) {
    expect_einval("zk://");
    expect_einval("zk://127.0.0.1:99999");
    expect_einval("zk://127.0.0.1:-1");
    expect_einval("zk://127.0.0.1:abc");
    expect_einval("zk://127.0.0.1:%d,");            /* an empty member */
    expect_einval("zk://127.0.0.1:%d,,127.0.0.1:1");
    expect_einval("zk://127.0.0.1:%d?bogus=1");
    expect_einval("zk://127.0.0.1:%d?session_timeout_ms=abc");
    expect_einval("zk://127.0.0.1:%d?session_timeout_ms=0");
    expect_einval("zk://127.0.0.1:%d?session_timeout_ms=-5");
    expect_einval("zk://127.0.0.1:%d?session_timeout_ms=");
    expect_einval("zk://127.0.0.1:%d/a//b");        /* a root path ZooKeeper rejects */
}

static void test_bad_options(void) {
    char uri[256];
    snprintf(uri, sizeof uri, "zk://127.0.0.1:%d?session_timeout_ms=4000", g_port);
    baton_client *c = tl_client_open(uri);
    baton_lock *l = NULL;
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.version = 0;
    CHECK_RC(baton_lock_open(&l, c, "opts", &o), BATON_EINVAL);
    o = (baton_lock_options)BATON_LOCK_OPTIONS_INIT;
    o.version = 999;
    CHECK_RC(baton_lock_open(&l, c, "opts", &o), BATON_EINVAL);
    CHECK_RC(baton_lock_open(NULL, c, "opts", NULL), BATON_EINVAL);
    baton_election *e = NULL;
    baton_election_options eo = BATON_ELECTION_OPTIONS_INIT;
    eo.version = 999;
    CHECK_RC(baton_election_open(&e, c, "opts", &eo), BATON_EINVAL);
    CHECK_RC(baton_election_open(&e, c, "a//b", NULL), BATON_EINVAL);
    /* an over-long election value */
    CHECK_RC(baton_election_open(&e, c, "opts-election", NULL), 0);
    if (e) {
        char *big = malloc(BATON_ELECTION_VALUE_MAX + 2);
        memset(big, 'v', BATON_ELECTION_VALUE_MAX + 1);
        big[BATON_ELECTION_VALUE_MAX + 1] = 0;
        CHECK_RC(baton_election_campaign(e, big, 0), BATON_EINVAL);
        CHECK_RC(baton_election_campaign(e, NULL, 0), BATON_EINVAL);
        free(big);
        baton_election_free(e);
    }
    baton_client_close(c);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(g_dir, sizeof g_dir, "%s", zkt_dir("badinput"));
    snprintf(g_srv, sizeof g_srv, "%s/srv", g_dir);
    zkt_cleanup_at_exit(g_dir);
    g_closed = zkt_closed_port();

    RUN(test_unreachable);
    RUN(test_bad_uris);

    g_port = tl_server("zk", "start", g_srv, NULL, 1);
    fprintf(stderr, "zk badinput: server on 127.0.0.1:%d\n", g_port);
    RUN(test_wrong_digest);
    RUN(test_names);
    RUN(test_bad_options);

    zkt_srv("stop", g_srv);
    return th_finish();
}
