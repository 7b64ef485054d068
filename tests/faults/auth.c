/* AUTH: an ACL user with the right and a wrong password, the default user's
 * password from the options and from the environment, and a waiter whose
 * subscriber connection must authenticate too. */
#include "faults.h"

static int port;
static char uri[512];

static int open_uri(const char *u, const char *password, baton_client **c) {
    baton_client_options o = BATON_CLIENT_OPTIONS_INIT;
    o.password = password;
    *c = NULL;
    return baton_client_open(c, u, &o);
}

static void lock_cycle(baton_client *c) {
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(&l, c, "auth", &o), 0);
    if (!l) return;
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    CHECK(baton_lock_fence(l) > 0);
    CHECK_RC(baton_lock_release(l), 0);
    baton_lock_free(l);
}

static void test_acl_user_good(void) {
    snprintf(uri, sizeof uri, "redis://alice:s3cret%%21@127.0.0.1:%d/0", port); /* password "s3cret!" */
    baton_client *c;
    CHECK_RC(open_uri(uri, NULL, &c), 0);
    if (c) { lock_cycle(c); baton_client_close(c); }
}

static void test_acl_user_bad(void) {
    snprintf(uri, sizeof uri, "redis://alice:wrong@127.0.0.1:%d/0", port);
    baton_client *c;
    CHECK_RC(open_uri(uri, NULL, &c), BATON_EAUTH);
    CHECK(c == NULL);
    CHECK(strstr(baton_error_last()->message, "wrong") == NULL); /* never echo the password */
    snprintf(uri, sizeof uri, "redis://nobody:s3cret%%21@127.0.0.1:%d/0", port);
    CHECK_RC(open_uri(uri, NULL, &c), BATON_EAUTH);
}

static void test_no_password(void) {
    unsetenv("BATON_REDIS_PASSWORD");
    unsetenv("REDISCLI_AUTH");
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", port);
    baton_client *c;
    CHECK_RC(open_uri(uri, NULL, &c), BATON_EAUTH);
}

static void test_default_password_sources(void) {
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", port);
    baton_client *c;
    /* options */
    CHECK_RC(open_uri(uri, "defpass", &c), 0);
    if (c) { lock_cycle(c); baton_client_close(c); }
    /* options win over the URI */
    char u2[512];
    snprintf(u2, sizeof u2, "redis://:bad@127.0.0.1:%d", port);
    CHECK_RC(open_uri(u2, "defpass", &c), 0);
    if (c) baton_client_close(c);
    CHECK_RC(open_uri(u2, NULL, &c), BATON_EAUTH);
    /* environment */
    setenv("BATON_REDIS_PASSWORD", "defpass", 1);
    CHECK_RC(open_uri(uri, NULL, &c), 0);
    if (c) baton_client_close(c);
    setenv("REDISCLI_AUTH", "nope", 1);              /* BATON_REDIS_PASSWORD comes first */
    CHECK_RC(open_uri(uri, NULL, &c), 0);
    if (c) baton_client_close(c);
    unsetenv("BATON_REDIS_PASSWORD");
    CHECK_RC(open_uri(uri, NULL, &c), BATON_EAUTH); /* REDISCLI_AUTH=nope */
    setenv("REDISCLI_AUTH", "defpass", 1);
    CHECK_RC(open_uri(uri, NULL, &c), 0);
    if (c) baton_client_close(c);
    unsetenv("REDISCLI_AUTH");
}

typedef struct { baton_lock *l; int rc; int64_t at; } wait_arg;
static void *waiter(void *p) {
    wait_arg *a = p;
    a->rc = baton_lock_acquire(a->l, 10000);
    a->at = tl_now_ms();
    return NULL;
}

/* The subscriber connection authenticates as alice: the release wakes the waiter at once. */
static void test_waiter_woken_with_acl(void) {
    snprintf(uri, sizeof uri, "redis://alice:s3cret%%21@127.0.0.1:%d/0", port);
    baton_client *ca, *cb;
    CHECK_RC(open_uri(uri, NULL, &ca), 0);
    CHECK_RC(open_uri(uri, NULL, &cb), 0);
    if (!ca || !cb) return;
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 20000;
    baton_lock *la = NULL, *lb = NULL;
    CHECK_RC(baton_lock_open(&la, ca, "auth-wait", &o), 0);
    CHECK_RC(baton_lock_open(&lb, cb, "auth-wait", &o), 0);
    CHECK_RC(baton_lock_acquire(la, 0), 0);
    wait_arg w = { lb, 1, 0 };
    pthread_t t;
    pthread_create(&t, NULL, waiter, &w);
    tl_sleep_ms(300);
    int64_t rel = tl_now_ms();
    CHECK_RC(baton_lock_release(la), 0);
    pthread_join(t, NULL);
    CHECK_RC(w.rc, 0);
    fprintf(stderr, "   release -> grant: %lld ms\n", (long long)(w.at - rel));
    CHECK(w.at - rel < 1000);
    CHECK_RC(baton_lock_release(lb), 0);
    baton_lock_free(la);
    baton_lock_free(lb);
    baton_client_close(ca);
    baton_client_close(cb);
}

int main(void) {
    const char *dir = ft_dir("auth");
    port = tl_server_start("redis", dir, "--requirepass defpass");
    if (tl_sh("redis-cli -p %d -a defpass --no-auth-warning ACL SETUSER alice on '>s3cret!' '~*' '&*' '+@all' >/dev/null",
              port) != 0) {
        fprintf(stderr, "FAIL: ACL SETUSER\n");
        tl_server_stop("redis", dir);
        return 1;
    }
    unsetenv("BATON_REDIS_PASSWORD");
    unsetenv("REDISCLI_AUTH");
    RUN(test_acl_user_good);
    RUN(test_acl_user_bad);
    RUN(test_no_password);
    RUN(test_default_password_sources);
    RUN(test_waiter_woken_with_acl);
    tl_server_stop("redis", dir);
    return th_finish();
}
