/* URI parsing through the public API: baton_client_open with good and
 * malformed URIs, baton_client_backend, baton_client_uri (no password). */
#include <baton.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"
#include "../common/testlib.h"

static char g_tmp[1024];

/* Opens URI and expects WANT; the message must be set and never show a
 * password ("s3cret" is the password used by these tests). */
static void expect_open(const char *uri, int want) {
    baton_client *c = NULL;
    baton_error_clear();
    int rc = baton_client_open(&c, uri, NULL);
    if (rc != want) {
        th_failed++;
        fprintf(stderr, "FAIL [%s]: open(\"%s\") = %d (%s), want %d (%s): %s\n", th_current, uri, rc,
                baton_strerror(rc), want, baton_strerror(want),
                baton_error_last()->message ? baton_error_last()->message : "(no message)");
    } else {
        th_passed++;
    }
    if (rc != 0) {
        CHECK(c == NULL);
        const baton_error *e = baton_error_last();
        CHECK(e->code == rc);
        CHECK(e->message != NULL && e->message[0] != 0);
        CHECK(e->message == NULL || strstr(e->message, "s3cret") == NULL);
    }
    if (c) baton_client_close(c);
}

static void test_unknown_and_malformed(void) {
    const char *bad[] = {
        "nope://x", "nope:///abs", "NOPE", "x", "://x", "redis", "redis:", "redis:/",
        "file", "file:", "file:relative", "file://relative", "file://relative/dir",
        "file://host/abs", "ftp://h/x",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) expect_open(bad[i], BATON_EINVAL);
#ifndef BATON_TEST_HAVE_ETCD
    expect_open("etcd://127.0.0.1:2379", BATON_EDISABLED);
    expect_open("etcds://127.0.0.1:2379", BATON_EDISABLED);
#else
    /* built: the URI and its options are checked before anything is sent */
    expect_open("etcd://127.0.0.1:1?nosuch=1", BATON_EINVAL);
    expect_open("etcd://127.0.0.1:1?ttl=0", BATON_EINVAL);
    expect_open("etcd://127.0.0.1:1?ttl=abc", BATON_EINVAL);
    expect_open("etcd://127.0.0.1:1?connect_timeout_ms=", BATON_EINVAL);
    expect_open("etcd://127.0.0.1:1?cacert=/etc/ssl/x.pem", BATON_EINVAL);   /* TLS options need etcds:// */
    expect_open("etcds://127.0.0.1:1?cacert=", BATON_EINVAL);
    expect_open("etcd:///prefix", BATON_EINVAL);                             /* no member */
#endif
#ifndef BATON_TEST_HAVE_ZK
    /* written, but not built here */
    expect_open("zk://127.0.0.1:2181", BATON_EDISABLED);
#endif
#ifndef BATON_TEST_HAVE_SQLITE
    expect_open("sqlite:///tmp/x.db", BATON_EDISABLED);
#else
    /* built: the URI and its options are checked before the file is touched */
    expect_open("sqlite://", BATON_EINVAL);                     /* no file */
    expect_open("sqlite:///", BATON_EINVAL);
    expect_open("sqlite://x.db", BATON_EINVAL);                 /* relative: a host, not a path */
    expect_open("sqlite://otherhost/tmp/x.db", BATON_EINVAL);   /* one host only */
    expect_open("sqlite://user@localhost/tmp/x.db", BATON_EINVAL);
    expect_open("sqlite://localhost:1/tmp/x.db", BATON_EINVAL);
    expect_open("sqlite:///tmp/dir/", BATON_EINVAL);            /* a directory */
    expect_open("sqlite:///nonexistent-baton-dir/x.db?nosuch=1", BATON_EINVAL);
    expect_open("sqlite:///nonexistent-baton-dir/x.db?busy_timeout_ms=-1", BATON_EINVAL);
    expect_open("sqlite:///nonexistent-baton-dir/x.db?busy_timeout_ms=", BATON_EINVAL);
    expect_open("sqlite:///nonexistent-baton-dir/x.db?recheck_ms=99999999999", BATON_EINVAL);
    expect_open("sqlite:///nonexistent-baton-dir/x.db?table=1abc", BATON_EINVAL);
    expect_open("sqlite:///nonexistent-baton-dir/x.db?table=a%22b", BATON_EINVAL);
    expect_open("sqlite:///nonexistent-baton-dir/x.db?mode=bogus", BATON_EINVAL);
    expect_open("sqlite:///nonexistent-baton-dir/x.db?mode=row", BATON_ENOTSUP);
    expect_open("sqlite:///nonexistent-baton-dir/x.db?mode=session", BATON_ENOTSUP);
    /* well-formed, but the directory is missing */
    expect_open("sqlite:///nonexistent-baton-dir/x.db", BATON_EUNAVAILABLE);
    expect_open("sqlite://localhost/nonexistent-baton-dir/x.db?mode=lease", BATON_EUNAVAILABLE);
#endif
#ifndef BATON_TEST_HAVE_POSTGRES
    expect_open("postgres://h/db", BATON_EDISABLED);
    expect_open("postgresql://h/db", BATON_EDISABLED);
#else
    /* built: a bad option is refused before any connection */
    expect_open("postgres://127.0.0.1:1/db?nosuch=1", BATON_EINVAL);
    expect_open("postgres://127.0.0.1:1/db?mode=bogus", BATON_EINVAL);
    expect_open("postgresql://127.0.0.1:1/db?table=t23456789012345678901234567890123456789012345678901234567890",
                BATON_EINVAL);   /* 58 bytes: no room for row mode's "<table>_fence" */
#endif
#ifndef BATON_TEST_HAVE_MYSQL
    expect_open("mysql://h/db", BATON_EDISABLED);
    expect_open("mariadb://h/db", BATON_EDISABLED);
#else
    /* built: bad options are refused before any connection */
    expect_open("mysql://127.0.0.1:1/db?nosuch=1", BATON_EINVAL);
    expect_open("mariadb://127.0.0.1:1/db?mode=bogus", BATON_EINVAL);
    expect_open("mysql://127.0.0.1:1/db?mode=row&ssl-mode=sometimes", BATON_EINVAL);
    expect_open("mysql://127.0.0.1:1/db?ssl_verify_server_cert=2", BATON_EINVAL);
    expect_open("mysql://127.0.0.1:1/db?connect_timeout_ms=0", BATON_EINVAL);
    expect_open("mysql://127.0.0.1:1/db?connect_timeout_ms=abc", BATON_EINVAL);
    expect_open("mysql://127.0.0.1:1/", BATON_EINVAL);        /* no database */
    expect_open("mysql://127.0.0.1:1", BATON_EINVAL);
    expect_open("mysql://127.0.0.1:1/a/b", BATON_EINVAL);
    expect_open("mysql://h1:1,h2:2/db", BATON_EINVAL);       /* one host */
    expect_open("mysql://127.0.0.1:1/db?passfile=/nonexistent/baton-pw", BATON_EINVAL);
    expect_open("mysql://127.0.0.1:1/db?table=t2345678901234567890123456789012345678901234567890123456789",
                BATON_EINVAL);   /* 59 bytes: no room for row mode's "<table>_fence" */
    expect_open("mysql://127.0.0.1:1/db?table=", BATON_EINVAL);
#endif
}

static void test_default_file(void) {
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/default", g_tmp);
    setenv("BATON_DIR", dir, 1);
    baton_client *c = NULL;
    CHECK_RC(baton_client_open(&c, NULL, NULL), 0);
    if (c) {
        CHECK(!strcmp(baton_client_backend(c), "file"));
        CHECK(baton_client_uri(c) != NULL);
        baton_client_close(c);
    }
    c = NULL;
    CHECK_RC(baton_client_open(&c, "", NULL), 0);
    if (c) {
        CHECK(!strcmp(baton_client_backend(c), "file"));
        /* a lock under the default dir lands in $BATON_DIR */
        baton_lock *l = NULL;
        CHECK_RC(baton_lock_open(&l, c, "default-dir-probe", NULL), 0);
        if (l) {
            CHECK_RC(baton_lock_acquire(l, 0), 0);
            struct stat st;
            CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
            CHECK((st.st_mode & 077) == 0); /* created 0700 */
            baton_lock_free(l);
        }
        baton_client_close(c);
    }
}

static void test_file_uri(void) {
    char dir[1100], uri[1400];
    snprintf(dir, sizeof dir, "%s/fileuri", g_tmp);
    tl_mkdirs(dir);
    snprintf(uri, sizeof uri, "file://%s", dir);
    baton_client *c = NULL;
    CHECK_RC(baton_client_open(&c, uri, NULL), 0);
    if (c) {
        CHECK(!strcmp(baton_client_backend(c), "file"));
        const char *u = baton_client_uri(c);
        CHECK(u != NULL && !strncmp(u, "file://", 7) && strstr(u, dir) != NULL);
        baton_client_close(c);
    }
    /* the file engine reads no credentials */
    {
        baton_client *c3 = NULL;
        const char *var = "x";
        char *secret = (char *)"x";
        CHECK_RC(baton_client_open(&c3, uri, NULL), 0);
        if (c3) {
            CHECK_RC(baton_client_secret(c3, &var, &secret), 0);
            CHECK(var == NULL && secret == NULL);
            baton_client_close(c3);
        }
        CHECK_RC(baton_client_secret(NULL, &var, &secret), BATON_EINVAL);
    }
    /* a trailing slash is the same dir */
    snprintf(uri, sizeof uri, "file://%s/", dir);
    expect_open(uri, 0);
    /* a regular file where the dir should be */
    char f[1300];
    snprintf(f, sizeof f, "%s/plainfile", dir);
    FILE *fp = fopen(f, "w");
    if (fp) fclose(fp);
    snprintf(uri, sizeof uri, "file://%s", f);
    baton_client *c2 = NULL;
    int rc = baton_client_open(&c2, uri, NULL);
    if (rc == 0) { /* lazy: the first lock must fail then */
        baton_lock *l = NULL;
        rc = baton_lock_open(&l, c2, "x", NULL);
        if (rc == 0) {
            rc = baton_lock_acquire(l, 0);
            baton_lock_free(l);
        }
        baton_client_close(c2);
    }
    CHECK(rc != 0 && rc != BATON_ELOCKED);
}

#ifdef BATON_TEST_HAVE_REDIS
static void test_redis_malformed(void) {
    const char *bad[] = {
        "redis://:bad",            /* empty host, non-numeric port */
        "redis://h:99999",         /* port out of range */
        "redis://h:65536",
        "redis://h:-1",
        "redis://h:12x",
        "redis://h:6379/notadb",   /* db is a number */
        "redis://h:6379/-1",
        "redis://[::1",            /* unterminated IPv6 literal */
        "redis://h:6379/0?layout=bogus",
        "redis://h:6379/0?prefix=a%zz", /* bad percent escape */
        "redis://user:s3cret@:6379",     /* password, but no host */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        baton_client *c = NULL;
        baton_error_clear();
        int rc = baton_client_open(&c, bad[i], NULL);
        if (rc != BATON_EINVAL) {
            th_failed++;
            fprintf(stderr, "FAIL [%s]: open(\"%s\") = %d (%s), want EINVAL: %s\n", th_current, bad[i], rc,
                    baton_strerror(rc), baton_error_last()->message ? baton_error_last()->message : "");
        } else {
            th_passed++;
        }
        if (rc != 0) CHECK(strstr(baton_error_last()->message ? baton_error_last()->message : "", "s3cret") == NULL);
        if (c) baton_client_close(c);
    }
    /* a prefix is bounded (1,024 bytes, as a name) so that every key name
     * derived from prefix + name has a known size */
    char uri[1200] = "redis://127.0.0.1:1/0?prefix=";
    size_t n = strlen(uri);
    memset(uri + n, 'p', 1025);
    uri[n + 1025] = 0;
    baton_client *c = NULL;
    CHECK_RC(baton_client_open(&c, uri, NULL), BATON_EINVAL);
    CHECK(strstr(baton_error_last()->message, "prefix") != NULL);
    if (c) baton_client_close(c), c = NULL;
    uri[n + 1024] = 0;
    int rc = baton_client_open(&c, uri, NULL);
    CHECK(rc != BATON_EINVAL);
    if (c) baton_client_close(c);
}

/* Well-formed URIs to a closed port: parsing succeeds, so the result is 0
 * (lazy connect) or BATON_EUNAVAILABLE (eager connect), never EINVAL, and
 * quickly (connection refused is immediate). */
static void test_redis_wellformed(void) {
    const char *good[] = {
        "redis://127.0.0.1:1",
        "redis://127.0.0.1:1/0",
        "redis://127.0.0.1:1/15",
        "redis://localhost:1/2",
        "redis://[::1]:1/0",
        "redis://:s3cret@127.0.0.1:1/0",
        "redis://user:s3cret@127.0.0.1:1/0?layout=simple",
        "redis://us%40er:s3%3Acret@127.0.0.1:1/0",
        "redis://127.0.0.1:1/0?layout=redisson&prefix=app%3A",
        "redis://127.0.0.1:1?layout=simple",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        baton_client *c = NULL;
        int64_t t0 = tl_now_ms();
        int rc = baton_client_open(&c, good[i], NULL);
        int64_t el = tl_now_ms() - t0;
        if (rc != 0 && rc != BATON_EUNAVAILABLE) {
            th_failed++;
            fprintf(stderr, "FAIL [%s]: open(\"%s\") = %d (%s): %s\n", th_current, good[i], rc, baton_strerror(rc),
                    baton_error_last()->message ? baton_error_last()->message : "");
        } else {
            th_passed++;
        }
        CHECK(el < 2000 + 2000);
        if (rc != 0) {
            const char *m = baton_error_last()->message;
            CHECK(m == NULL || strstr(m, "s3cret") == NULL);
            continue;
        }
        CHECK(!strcmp(baton_client_backend(c), "redis"));
        const char *u = baton_client_uri(c);
        CHECK(u != NULL && strstr(u, "s3cret") == NULL && strstr(u, "s3%3Acret") == NULL);
        CHECK(u != NULL && (strstr(u, "127.0.0.1") != NULL || strstr(good[i], "127.0.0.1") == NULL));
        /* a lock on an unreachable engine fails cleanly */
        baton_lock *l = NULL;
        rc = baton_lock_open(&l, c, "x", NULL);
        if (rc == 0) {
            t0 = tl_now_ms();
            rc = baton_lock_acquire(l, 0);
            CHECK_RC(rc, BATON_EUNAVAILABLE);
            CHECK(tl_now_ms() - t0 < 2000 + 2000);
            const char *m = baton_error_last()->message;
            CHECK(m == NULL || strstr(m, "s3cret") == NULL);
            baton_lock_free(l);
        } else {
            CHECK_RC(rc, BATON_EUNAVAILABLE);
        }
        baton_client_close(c);
    }
    /* the URI's password for a child process: in the variable the engine
     * reads, decoded, never in the URI (baton_client_secret) */
    {
        baton_client *c = NULL;
        int rc = baton_client_open(&c, "redis://:p%40ss@127.0.0.1:1/0", NULL);
        CHECK(rc == 0 || rc == BATON_EUNAVAILABLE);
        if (c) {
            const char *var = NULL;
            char *secret = NULL;
            CHECK_RC(baton_client_secret(c, &var, &secret), 0);
            CHECK(var && !strcmp(var, "BATON_REDIS_PASSWORD"));
            CHECK(secret && !strcmp(secret, "p@ss"));
            CHECK(strstr(baton_client_uri(c), "p@ss") == NULL && strstr(baton_client_uri(c), "p%40ss") == NULL);
            free(secret);
            baton_client_close(c);
        }
    }
    /* a password from the options, not the URI, is not shown either */
    baton_client_options o = BATON_CLIENT_OPTIONS_INIT;
    o.password = "s3cret";
    baton_client *c = NULL;
    int rc = baton_client_open(&c, "redis://127.0.0.1:1/0", &o);
    CHECK(rc == 0 || rc == BATON_EUNAVAILABLE);
    if (c) {
        CHECK(strstr(baton_client_uri(c), "s3cret") == NULL);
        baton_client_close(c);
    }
}

/* Against the test server when there is one: the db and layout options work. */
static void test_redis_live(void) {
    int port = tl_fixture_port("redis");
    if (port <= 0) {
        fprintf(stderr, "   (no test redis server; skipped)\n");
        return;
    }
    char uri[256];
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/3?layout=simple&prefix=unit%%3A", port);
    baton_client *c = NULL;
    CHECK_RC(baton_client_open(&c, uri, NULL), 0);
    if (!c) return;
    CHECK(!strcmp(baton_client_backend(c), "redis"));
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(&l, c, "uri-live", NULL), 0);
    if (l) {
        CHECK_RC(baton_lock_acquire(l, 0), 0);
        CHECK(baton_lock_fence(l) > 0);
        CHECK_RC(baton_lock_release(l), 0);
        baton_lock_free(l);
    }
    baton_client_close(c);
}
#else
/* The redis backend is compiled out: its schemes answer EDISABLED, never
 * "unknown scheme". */
static void test_redis_disabled(void) {
    expect_open("redis://127.0.0.1:6379/0", BATON_EDISABLED);
    expect_open("rediss://127.0.0.1:6379/0", BATON_EDISABLED);
}
#endif

int main(void) {
    const char *tt = getenv("BATON_TEST_TMP");
    snprintf(g_tmp, sizeof g_tmp, "%s/unit_uri", tt ? tt : ".");
    tl_mkdirs(g_tmp);
    RUN(test_unknown_and_malformed);
    RUN(test_default_file);
    RUN(test_file_uri);
#ifdef BATON_TEST_HAVE_REDIS
    RUN(test_redis_malformed);
    RUN(test_redis_wellformed);
    RUN(test_redis_live);
#else
    RUN(test_redis_disabled);
#endif
    return th_finish();
}
