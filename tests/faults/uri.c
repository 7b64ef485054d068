/* Malformed Redis URIs and options -> BATON_EINVAL, before any network I/O
 * (the port used here has no listener: a URI that slipped through would give
 * BATON_EUNAVAILABLE instead). */
#include "faults.h"

static int closed_port;

/* FMT may hold one %d for the closed port. */
static void expect_einval(const char *fmt) {
    char uri[512];
    if (strstr(fmt, "%d")) snprintf(uri, sizeof uri, fmt, closed_port);
    else snprintf(uri, sizeof uri, "%s", fmt);
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    if (rc != BATON_EINVAL) fprintf(stderr, "   %s -> %d (%s)\n", uri, rc, baton_error_last()->message);
    CHECK_RC(rc, BATON_EINVAL);
    CHECK(c == NULL);
    CHECK(baton_error_last()->message && baton_error_last()->message[0]);
    if (c) baton_client_close(c);
}

static void test_bad_port(void) {
    expect_einval("redis://127.0.0.1:99999");
    expect_einval("redis://127.0.0.1:-1");
    expect_einval("redis://127.0.0.1:abc");
}

static void test_bad_options(void) {
    expect_einval("redis://127.0.0.1:%d?bogus=1");
    expect_einval("redis://127.0.0.1:%d?layout=weird");
    expect_einval("redis://127.0.0.1:%d?layout=");
    expect_einval("redis://127.0.0.1:%d?connect_timeout_ms=0");
    expect_einval("redis://127.0.0.1:%d?io_timeout_ms=abc");
    expect_einval("redis://127.0.0.1:%d?io_timeout_ms=-5");
    expect_einval("redis://127.0.0.1:%d?cacert=/etc/ssl/certs/ca-certificates.crt"); /* TLS option on redis:// */
    expect_einval("redis://127.0.0.1:%d?insecure=1");
    expect_einval("rediss://127.0.0.1:%d?insecure=maybe");
    expect_einval("rediss://127.0.0.1:%d?cacert=/nonexistent/ca.crt");
    expect_einval("rediss://127.0.0.1:%d?key=/nonexistent/client.key");
}

static void test_bad_db_and_hosts(void) {
    expect_einval("redis://127.0.0.1:%d/abc");
    expect_einval("redis://127.0.0.1:%d/-1");
    expect_einval("redis://127.0.0.1:%d/0/1");
    expect_einval("redis://127.0.0.1:%d,127.0.0.1:1");
    expect_einval("redis://");
}

/* Well-formed URIs get as far as the network: EUNAVAILABLE on the closed port. */
static void test_good_uris_reach_network(void) {
    static const char *good[] = {
        "redis://127.0.0.1:%d",
        "redis://127.0.0.1:%d/3?layout=simple&prefix=app:",
        "redis://user:pw@127.0.0.1:%d/0?layout=redisson&connect_timeout_ms=200&io_timeout_ms=200",
        "rediss://127.0.0.1:%d?insecure=1",
        "rediss://127.0.0.1:%d?insecure=0&cacert=/etc/ssl/certs/ca-certificates.crt",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char uri[512];
        if (strstr(good[i], "ca-certificates") && access("/etc/ssl/certs/ca-certificates.crt", R_OK) != 0) continue;
        snprintf(uri, sizeof uri, good[i], closed_port);
        baton_client *c = NULL;
        int rc = baton_client_open(&c, uri, NULL);
        if (rc != BATON_EUNAVAILABLE) fprintf(stderr, "   %s -> %d (%s)\n", uri, rc, baton_error_last()->message);
        CHECK_RC(rc, BATON_EUNAVAILABLE);
        CHECK(strstr(baton_error_last()->message, "pw") == NULL);
    }
}

int main(void) {
    int fd = ft_listen(&closed_port);
    close(fd);
    RUN(test_bad_port);
    RUN(test_bad_options);
    RUN(test_bad_db_and_hosts);
    RUN(test_good_uris_reach_network);
    return th_finish();
}
