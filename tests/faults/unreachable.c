/* Unreachable engines (loopback only):
 *   a closed port -> BATON_EUNAVAILABLE at once (native ECONNREFUSED);
 *   a listener that accepts and never answers -> BATON_EUNAVAILABLE within
 *   the I/O timeout (native ETIMEDOUT), no hang;
 *   a server that stops answering while a lock is held -> release and
 *   renewal fail within the I/O timeout. */
#include "faults.h"

static char uri[512];

static void test_closed_port(void) {
    int port;
    int fd = ft_listen(&port);
    close(fd); /* now nothing listens there */
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", port);
    baton_client *c = NULL;
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_client_open(&c, uri, NULL), BATON_EUNAVAILABLE);
    CHECK(c == NULL);
    CHECK(baton_error_last()->native == ECONNREFUSED);
    CHECK(tl_now_ms() - t0 < 1000);
}

static void test_silent_listener(void) {
    int port;
    int fd = ft_listen(&port); /* the kernel completes the handshake; nobody ever reads or answers */
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d?io_timeout_ms=300&connect_timeout_ms=300", port);
    baton_client *c = NULL;
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_client_open(&c, uri, NULL), BATON_EUNAVAILABLE);
    int64_t took = tl_now_ms() - t0;
    fprintf(stderr, "   silent listener: failed after %lld ms: %s\n", (long long)took, baton_error_last()->message);
    CHECK(took >= 250 && took < 2000);
    CHECK(baton_error_last()->native == ETIMEDOUT);

    /* The client options give the timeout when the URI does not. */
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", port);
    baton_client_options o = BATON_CLIENT_OPTIONS_INIT;
    o.io_timeout_ms = 200;
    o.connect_timeout_ms = 200;
    t0 = tl_now_ms();
    CHECK_RC(baton_client_open(&c, uri, &o), BATON_EUNAVAILABLE);
    took = tl_now_ms() - t0;
    CHECK(took < 1500);
    close(fd);
}

/* SIGSTOP the server while a lock is held: calls fail within the I/O timeout. */
static void test_frozen_server(void) {
    const char *dir = ft_dir("unreachable");
    int port = tl_server_start("redis", dir, NULL);
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d?io_timeout_ms=400&connect_timeout_ms=400", port);
    baton_client *c = NULL;
    CHECK_RC(baton_client_open(&c, uri, NULL), 0);
    if (!c) { tl_server_stop("redis", dir); return; }
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(&l, c, "frozen", &o), 0);
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    CHECK(tl_sh("kill -STOP $(cat '%s/pid')", dir) == 0);
    int64_t t0 = tl_now_ms();
    baton_lockinfo info;
    memset(&info, 0, sizeof info);
    info.version = BATON_LOCK_INFO_VERSION;
    CHECK_RC(baton_lock_info(c, "frozen", &info), BATON_EUNAVAILABLE);
    int64_t took = tl_now_ms() - t0;
    fprintf(stderr, "   frozen server: info failed after %lld ms\n", (long long)took);
    CHECK(took < 2000);
    int rc = baton_lock_release(l);
    CHECK(rc == BATON_EUNAVAILABLE || rc == BATON_ELOST);
    CHECK(tl_sh("kill -CONT $(cat '%s/pid')", dir) == 0);
    baton_lock_free(l);
    baton_client_close(c);
    tl_server_stop("redis", dir);
}

/* A waiting acquire against a server that dies and never comes back ends at
 * its deadline; it does not hang. */
static void test_wait_while_down(void) {
    const char *dir = ft_dir("unreachable_wait");
    int port = tl_server_start("redis", dir, NULL);
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d?io_timeout_ms=300&connect_timeout_ms=300", port);
    baton_client *ca = NULL, *cb = NULL;
    CHECK_RC(baton_client_open(&ca, uri, NULL), 0);
    CHECK_RC(baton_client_open(&cb, uri, NULL), 0);
    if (!ca || !cb) { tl_server_stop("redis", dir); return; }
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    baton_lock *la = NULL, *lb = NULL;
    CHECK_RC(baton_lock_open(&la, ca, "down", &o), 0);
    CHECK_RC(baton_lock_open(&lb, cb, "down", &o), 0);
    CHECK_RC(baton_lock_acquire(la, 0), 0);
    tl_server_stop("redis", dir);
    int64_t t0 = tl_now_ms();
    int rc = baton_lock_acquire(lb, 1000);
    int64_t took = tl_now_ms() - t0;
    fprintf(stderr, "   acquire(1000) with the server down: %d after %lld ms\n", rc, (long long)took);
    CHECK(rc == BATON_EUNAVAILABLE || rc == BATON_ETIMEDOUT);
    CHECK(took < 2500);
    baton_lock_free(lb);
    baton_lock_free(la);
    baton_client_close(ca);
    baton_client_close(cb);
}

int main(void) {
    RUN(test_closed_port);
    RUN(test_silent_listener);
    RUN(test_frozen_server);
    RUN(test_wait_while_down);
    return th_finish();
}
