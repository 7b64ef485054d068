/* TLS: a CA, a server certificate and a client certificate generated here
 * with the openssl CLI; redis-server on a TLS-only port.
 *   right cacert -> works (lock cycle, pub/sub wake-up over TLS)
 *   wrong CA / system store -> BATON_EAUTH (the server is not trusted)
 *   insecure=1 -> works without verification
 *   plain redis:// against the TLS port -> a clean error, no hang
 *   tls-auth-clients yes: with cert=&key= works, without fails cleanly */
#include "faults.h"

static const char *dir;
static int port, mport;
static char uri[2048];

static void gen_certs(void) {
    if (tl_sh("command -v openssl >/dev/null") != 0) tl_skip("the openssl command is not installed", 0);
    int rc = tl_sh(
        "cd '%s' && set -e; "
        "EC='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'; "
        "openssl req -x509 $EC -keyout ca.key -out ca.crt -days 2 -subj '/CN=baton test CA' 2>/dev/null; "
        "openssl req -x509 $EC -keyout wrong.key -out wrong.crt -days 2 -subj '/CN=some other CA' 2>/dev/null; "
        "openssl req $EC -keyout server.key -out server.csr -subj '/CN=127.0.0.1' 2>/dev/null; "
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > server.ext; "
        "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 "
        "  -extfile server.ext 2>/dev/null; "
        "openssl req $EC -keyout client.key -out client.csr -subj '/CN=baton client' 2>/dev/null; "
        "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 2 2>/dev/null; "
        "chmod 644 *.key",
        dir);
    if (rc != 0) { fprintf(stderr, "FAIL: certificate generation\n"); exit(1); }
}

static int try_open(const char *u, baton_client **c) {
    *c = NULL;
    return baton_client_open(c, u, NULL);
}

typedef struct { baton_lock *l; int rc; int64_t at; } wait_arg;
static void *waiter(void *p) {
    wait_arg *a = p;
    a->rc = baton_lock_acquire(a->l, 10000);
    a->at = tl_now_ms();
    return NULL;
}

static void test_right_ca(void) {
    snprintf(uri, sizeof uri, "rediss://127.0.0.1:%d/0?cacert=%s/ca.crt", port, dir);
    baton_client *ca, *cb;
    CHECK_RC(try_open(uri, &ca), 0);
    if (!ca) { fprintf(stderr, "   %s\n", baton_error_last()->message); return; }
    CHECK_RC(try_open(uri, &cb), 0);
    if (!cb) { baton_client_close(ca); return; }
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    baton_lock *la = NULL, *lb = NULL;
    CHECK_RC(baton_lock_open(&la, ca, "tls", &o), 0);
    CHECK_RC(baton_lock_open(&lb, cb, "tls", &o), 0);
    CHECK_RC(baton_lock_acquire(la, 0), 0);
    CHECK_RC(baton_lock_acquire(lb, 0), BATON_ELOCKED);
    wait_arg w = { lb, 1, 0 };
    pthread_t t;
    pthread_create(&t, NULL, waiter, &w);
    tl_sleep_ms(300);
    int64_t rel = tl_now_ms();
    CHECK_RC(baton_lock_release(la), 0);
    pthread_join(t, NULL);
    CHECK_RC(w.rc, 0);
    fprintf(stderr, "   release -> grant over TLS: %lld ms\n", (long long)(w.at - rel));
    CHECK(w.at - rel < 1000);
    baton_lockinfo info;
    memset(&info, 0, sizeof info);
    info.version = BATON_LOCK_INFO_VERSION;
    CHECK_RC(baton_lock_info(ca, "tls", &info), 0);
    CHECK(info.held == 1);
    CHECK(info.fence == baton_lock_fence(lb));
    CHECK_RC(baton_lock_release(lb), 0);
    baton_lock_free(la);
    baton_lock_free(lb);
    baton_client_close(ca);
    baton_client_close(cb);
}

static void test_hostname(void) {
    snprintf(uri, sizeof uri, "rediss://localhost:%d?cacert=%s/ca.crt", port, dir);
    baton_client *c;
    CHECK_RC(try_open(uri, &c), 0);
    if (c) baton_client_close(c);
}

static void test_wrong_ca(void) {
    baton_client *c;
    snprintf(uri, sizeof uri, "rediss://127.0.0.1:%d?cacert=%s/wrong.crt", port, dir);
    int64_t t0 = tl_now_ms();
    CHECK_RC(try_open(uri, &c), BATON_EAUTH);
    CHECK(c == NULL);
    CHECK(tl_now_ms() - t0 < 3000);
    fprintf(stderr, "   wrong CA: %s\n", baton_error_last()->message);
    /* The system store does not know our CA either. */
    snprintf(uri, sizeof uri, "rediss://127.0.0.1:%d", port);
    CHECK_RC(try_open(uri, &c), BATON_EAUTH);
}

static void test_insecure(void) {
    baton_client *c;
    snprintf(uri, sizeof uri, "rediss://127.0.0.1:%d?insecure=1", port);
    CHECK_RC(try_open(uri, &c), 0);
    if (c) baton_client_close(c);
}

static void test_plain_to_tls_port(void) {
    baton_client *c;
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d?io_timeout_ms=1000&connect_timeout_ms=1000", port);
    int64_t t0 = tl_now_ms();
    int rc = try_open(uri, &c);
    CHECK(rc == BATON_EUNAVAILABLE || rc == BATON_EPROTO);
    CHECK(tl_now_ms() - t0 < 3000);
    if (!rc) baton_client_close(c);
}

static void test_bad_files(void) {
    baton_client *c;
    snprintf(uri, sizeof uri, "rediss://127.0.0.1:%d?cacert=%s/nonexistent.crt", port, dir);
    CHECK_RC(try_open(uri, &c), BATON_EINVAL);
    snprintf(uri, sizeof uri, "rediss://127.0.0.1:%d?cacert=%s/ca.crt&cert=%s/client.crt&key=%s/wrong.key",
             port, dir, dir, dir);
    CHECK_RC(try_open(uri, &c), BATON_EINVAL); /* key does not match the certificate */
}

static void test_client_cert(void) {
    baton_client *c;
    snprintf(uri, sizeof uri, "rediss://127.0.0.1:%d?cacert=%s/ca.crt&cert=%s/client.crt&key=%s/client.key",
             mport, dir, dir, dir);
    CHECK_RC(try_open(uri, &c), 0);
    if (c) {
        baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
        baton_lock *l = NULL;
        CHECK_RC(baton_lock_open(&l, c, "mtls", &o), 0);
        CHECK_RC(baton_lock_acquire(l, 0), 0);
        CHECK_RC(baton_lock_release(l), 0);
        baton_lock_free(l);
        baton_client_close(c);
    }
    snprintf(uri, sizeof uri, "rediss://127.0.0.1:%d?cacert=%s/ca.crt&io_timeout_ms=1000", mport, dir);
    int64_t t0 = tl_now_ms();
    int rc = try_open(uri, &c);
    CHECK(rc == BATON_EUNAVAILABLE || rc == BATON_EAUTH);
    CHECK(tl_now_ms() - t0 < 3000);
    if (!rc) baton_client_close(c);
}

int main(void) {
    dir = ft_dir("tls");
    gen_certs();
    char args[4096];
    snprintf(args, sizeof args,
             "--port 0 --tls-port @PORT@ --tls-cert-file '%s/server.crt' --tls-key-file '%s/server.key' "
             "--tls-ca-cert-file '%s/ca.crt' --tls-auth-clients no", dir, dir, dir);
    char sdir[1200], mdir[1200];
    snprintf(sdir, sizeof sdir, "%s/srv", dir);
    snprintf(mdir, sizeof mdir, "%s/mtls", dir);
    port = tl_server_start("redis", sdir, args);
    snprintf(args, sizeof args,
             "--port 0 --tls-port @PORT@ --tls-cert-file '%s/server.crt' --tls-key-file '%s/server.key' "
             "--tls-ca-cert-file '%s/ca.crt' --tls-auth-clients yes", dir, dir, dir);
    mport = tl_server_start("redis", mdir, args);
    RUN(test_right_ca);
    RUN(test_hostname);
    RUN(test_wrong_ca);
    RUN(test_insecure);
    RUN(test_plain_to_tls_port);
    RUN(test_bad_files);
    RUN(test_client_cert);
    tl_server_stop("redis", sdir);
    tl_server_stop("redis", mdir);
    return th_finish();
}
