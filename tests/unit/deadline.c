/* "Wait a very long time" means a very long time: wait_ms = INT64_MAX (or
 * anything whose deadline would overflow) waits like "forever" instead of
 * timing out at once, for locks, multilocks and semaphores. File engine. */
#include "baton.h"
#include "../harness.h"
#include "../common/testlib.h"

#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <errno.h>

typedef struct {
    baton_lock *l;
    baton_multilock *m;
    baton_semaphore *s;
    int64_t wait_ms;
    int rc;
} arg;

static void *run(void *p) {
    arg *a = p;
    int rc = a->l ? baton_lock_acquire(a->l, a->wait_ms)
           : a->m ? baton_multilock_acquire(a->m, a->wait_ms)
                  : baton_semaphore_acquire(a->s, 1, a->wait_ms);
    __atomic_store_n(&a->rc, rc, __ATOMIC_SEQ_CST);
    return NULL;
}

static const char *uri;

static void one(int64_t wait_ms) {
    baton_client *c1 = NULL, *c2 = NULL;
    CHECK_RC(baton_client_open(&c1, uri, NULL), 0);
    CHECK_RC(baton_client_open(&c2, uri, NULL), 0);
    if (!c1 || !c2) return;
    baton_lock *h = NULL, *w = NULL, *w2 = NULL;
    CHECK_RC(baton_lock_open(&h, c1, "long", NULL), 0);
    CHECK_RC(baton_lock_open(&w, c2, "long", NULL), 0);
    CHECK_RC(baton_lock_acquire(h, 0), 0);

    /* a lock */
    arg a = { w, NULL, NULL, wait_ms, 1 };
    pthread_t t;
    pthread_create(&t, NULL, run, &a);
    tl_sleep_ms(300);
    CHECK(__atomic_load_n(&a.rc, __ATOMIC_SEQ_CST) == 1); /* still waiting */
    CHECK_RC(baton_lock_release(h), 0);
    pthread_join(t, NULL);
    CHECK_RC(a.rc, 0);
    CHECK_RC(baton_lock_release(w), 0);

    /* a multilock */
    CHECK_RC(baton_lock_open(&w2, c2, "long-2", NULL), 0);
    baton_lock *ms[2] = { w, w2 };
    baton_multilock *m = NULL;
    CHECK_RC(baton_multilock_open(&m, ms, 2), 0);
    CHECK_RC(baton_lock_acquire(h, 0), 0);
    arg b = { NULL, m, NULL, wait_ms, 1 };
    pthread_create(&t, NULL, run, &b);
    tl_sleep_ms(300);
    CHECK(__atomic_load_n(&b.rc, __ATOMIC_SEQ_CST) == 1);
    CHECK_RC(baton_lock_release(h), 0);
    pthread_join(t, NULL);
    CHECK_RC(b.rc, 0);
    baton_multilock_free(m);

    /* a semaphore with no permits */
    baton_semaphore *s = NULL, *s2 = NULL;
    CHECK_RC(baton_semaphore_open(&s, c2, "long-sem"), 0);
    (void)s2;
    if (s) {
        int was = 0;
        baton_semaphore_try_set(s, 0, &was);
        baton_semaphore_drain(s, NULL);
        arg d = { NULL, NULL, s, wait_ms, 1 };
        pthread_create(&t, NULL, run, &d);
        tl_sleep_ms(300);
        CHECK(__atomic_load_n(&d.rc, __ATOMIC_SEQ_CST) == 1);
        baton_semaphore *s3 = NULL;
        CHECK_RC(baton_semaphore_open(&s3, c1, "long-sem"), 0);
        if (s3) {
            CHECK_RC(baton_semaphore_release(s3, 1), 0);
            baton_semaphore_free(s3);
        }
        pthread_join(t, NULL);
        CHECK_RC(d.rc, 0);
        baton_semaphore_free(s);
    }

    baton_lock_free(h);
    baton_lock_free(w);
    baton_lock_free(w2);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_int64_max(void) { one(INT64_MAX); }
static void test_overflowing(void) { one(INT64_MAX / 1000 + 12345); }
static void test_a_thousand_years(void) { one(1000LL * 365 * 86400 * 1000); }

static char g_uri[1024];

int main(int argc, char **argv) {
    uri = argc > 1 ? argv[1] : "file://";
    /* "{port}": the port of the test server of the URI's engine */
    if (strstr(uri, "{port}")) {
        if (tl_uri_with_port(g_uri, sizeof g_uri, uri, NULL) != 0)
            return tl_skip_status("no test server for the URI (no port file)", 0);
        uri = g_uri;
    } else if (!strncmp(uri, "file://", 7) && uri[7]) {
        if (tl_sh("mkdir -p '%s'", uri + 7) != 0) return 1;
    }
    RUN(test_int64_max);
    RUN(test_overflowing);
    RUN(test_a_thousand_years);
    return th_finish();
}
