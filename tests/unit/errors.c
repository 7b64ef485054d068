/* The error list: baton_strerror, baton_error_last, baton_error_clear, and
 * clean failures on NULL / misuse through the public API. */
#include <baton.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"

static const int codes[] = {
#define X(name, value, msg) BATON_##name,
    BATON_ERRORS(X)
#undef X
};
static const char *const names[] = {
#define X(name, value, msg) #name,
    BATON_ERRORS(X)
#undef X
};
#define NCODES ((int)(sizeof codes / sizeof codes[0]))

static void test_strerror_all(void) {
    for (int i = 0; i < NCODES; i++) {
        const char *s = baton_strerror(codes[i]);
        CHECK(s != NULL);
        if (!s) continue;
        CHECK(s[0] != 0);
        for (int j = 0; j < i; j++) {
            const char *t = baton_strerror(codes[j]);
            if (t && !strcmp(s, t)) {
                fprintf(stderr, "   %s and %s share \"%s\"\n", names[i], names[j], s);
                th_failed++;
            }
        }
    }
    /* values are fixed: never renumbered */
    CHECK(BATON_OK == 0);
    CHECK(BATON_ELOCKED == -1);
    CHECK(BATON_ETIMEDOUT == -2);
    CHECK(BATON_ELOST == -3);
    CHECK(BATON_EINVAL == -9);
    CHECK(BATON_ECANCELED == -10);
    CHECK(BATON_EDEADLK == -13);
    CHECK(BATON_ENOTHELD == -15);
    /* codes are distinct and negative (but OK) */
    for (int i = 0; i < NCODES; i++) {
        if (codes[i] != 0) CHECK(codes[i] < 0);
        for (int j = 0; j < i; j++) CHECK(codes[i] != codes[j]);
    }
}

static void test_strerror_unknown(void) {
    const int odd[] = { 1, 42, -16, -1000, 1 << 30, -(1 << 30) };
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        const char *s = baton_strerror(odd[i]);
        CHECK(s != NULL && s[0] != 0);
    }
}

static void test_error_last(void) {
    baton_error_clear();
    const baton_error *e = baton_error_last();
    CHECK(e != NULL);
    if (!e) return;
    CHECK(e->code == 0);

    baton_client *c = NULL;
    int rc = baton_client_open(&c, "nope://x", NULL);
    CHECK_RC(rc, BATON_EINVAL);
    CHECK(c == NULL);
    e = baton_error_last();
    CHECK(e != NULL && e->code == BATON_EINVAL);
    CHECK(e != NULL && e->message != NULL && e->message[0] != 0);
    if (e && e->message) fprintf(stderr, "   message: %s\n", e->message);

    baton_error_clear();
    e = baton_error_last();
    CHECK(e != NULL && e->code == 0);
}

static int g_other_code = 12345;
static void *other_thread(void *p) {
    (void)p;
    g_other_code = baton_error_last()->code;
    return NULL;
}

static void test_error_thread_local(void) {
    baton_client *c = NULL;
    CHECK_RC(baton_client_open(&c, "nope://x", NULL), BATON_EINVAL);
    pthread_t t;
    pthread_create(&t, NULL, other_thread, NULL);
    pthread_join(t, NULL);
    CHECK(g_other_code == 0);
    CHECK(baton_error_last()->code == BATON_EINVAL);
}

static void test_version(void) {
    const char *v = baton_version();
    CHECK(v != NULL && !strcmp(v, BATON_VERSION_STRING));
}

/* NULL and misuse: a clear code, never a crash. */
static void test_null_args(void) {
    baton_client *c = NULL;
    CHECK_RC(baton_client_open(NULL, NULL, NULL), BATON_EINVAL);
    baton_client_close(NULL);
    CHECK_RC(baton_client_open(&c, NULL, NULL), 0); /* $BATON_DIR, set by ctest */
    if (!c) return;
    CHECK(!strcmp(baton_client_backend(c), "file"));
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(NULL, c, "x", NULL), BATON_EINVAL);
    CHECK_RC(baton_lock_open(&l, NULL, "x", NULL), BATON_EINVAL);
    CHECK(l == NULL);
    CHECK_RC(baton_lock_open(&l, c, NULL, NULL), BATON_EINVAL);
    CHECK(l == NULL);
    CHECK_RC(baton_lock_open(&l, c, "", NULL), BATON_EINVAL);
    CHECK(l == NULL);
    CHECK_RC(baton_lock_acquire(NULL, 0), BATON_EINVAL);
    CHECK_RC(baton_lock_release(NULL), BATON_EINVAL);
    CHECK_RC(baton_lock_cancel(NULL), BATON_EINVAL);
    CHECK(baton_lock_fence(NULL) == 0);
    CHECK(baton_lock_held(NULL) == 0);
    baton_lock_free(NULL);
    baton_lockinfo info;
    memset(&info, 0, sizeof info);
    info.version = BATON_LOCK_INFO_VERSION;
    CHECK_RC(baton_lock_info(NULL, "x", &info), BATON_EINVAL);
    CHECK_RC(baton_lock_info(c, NULL, &info), BATON_EINVAL);

    /* options with a version this library does not know */
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.version = 0;
    CHECK_RC(baton_lock_open(&l, c, "x", &o), BATON_EINVAL);
    /* release of a lock never acquired */
    CHECK_RC(baton_lock_open(&l, c, "never", NULL), 0);
    if (l) {
        CHECK_RC(baton_lock_release(l), BATON_ENOTHELD);
        CHECK(baton_lock_held(l) == 0);
        CHECK(baton_lock_fence(l) == 0);
        baton_lock_free(l);
    }
    baton_client_close(c);
}

/* Every _open clears its out-parameter before any check, so a caller that
 * goes on after an error (a NULL client after a failed connect) holds NULL,
 * never an uninitialised handle. */
static void test_open_clears_out(void) {
    baton_lock *l = (baton_lock *)&l;
    CHECK_RC(baton_lock_open(&l, NULL, "x", NULL), BATON_EINVAL);
    CHECK(l == NULL);
    baton_rwlock *rw = (baton_rwlock *)&rw;
    CHECK_RC(baton_rwlock_open(&rw, NULL, "x", NULL), BATON_EINVAL);
    CHECK(rw == NULL);
    baton_semaphore *s = (baton_semaphore *)&s;
    CHECK(baton_semaphore_open(&s, NULL, "x") != 0);
    CHECK(s == NULL);
    baton_multilock *m = (baton_multilock *)&m;
    CHECK_RC(baton_multilock_open(&m, NULL, 1), BATON_EINVAL);
    CHECK(m == NULL);
    baton_client *c = (baton_client *)&c;
    CHECK(baton_client_open(&c, "nope://x", NULL) != 0);
    CHECK(c == NULL);
}

/* baton_client_options of version 1 (no lease_ms) are read only up to
 * their own end: a caller built against the old header passes the smaller
 * struct, and nothing past it may be read (ASan sees an over-read of the
 * heap copy below). Unknown versions are refused. */
static void test_client_options_v1(void) {
    typedef struct { unsigned int version; int connect_timeout_ms; int io_timeout_ms; const char *password; } v1;
    v1 *o = malloc(sizeof *o);
    baton_client *c = NULL;
    if (!o) return;
    *o = (v1){ 1, 2000, 5000, NULL };
    CHECK_RC(baton_client_open(&c, NULL, (const baton_client_options *)(void *)o), 0);
    baton_client_close(c);
    c = NULL;
    o->version = 99;
    CHECK_RC(baton_client_open(&c, NULL, (const baton_client_options *)(void *)o), BATON_EINVAL);
    free(o);
    baton_client_options o2 = BATON_CLIENT_OPTIONS_INIT;
    o2.lease_ms = 2000;
    CHECK_RC(baton_client_open(&c, NULL, &o2), 0);
    baton_client_close(c);
}

int main(void) {
    RUN(test_open_clears_out);
    RUN(test_client_options_v1);
    RUN(test_strerror_all);
    RUN(test_strerror_unknown);
    RUN(test_error_last);
    RUN(test_error_thread_local);
    RUN(test_version);
    RUN(test_null_args);
    return th_finish();
}
