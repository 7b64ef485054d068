/*
 * The etcd permit line (src/backends/etcd/permits.c), on the "etcd" fixture:
 *
 *   test_etcd_permits URI      ("{port}" = the fixture's client port)
 *
 * Waiters watch one key each (a waiting predecessor) except the first, which
 * watches the whole name. These cases fail if a waiter misses its turn:
 *   - a release that is not the first waiter's predecessor (with 2 permits,
 *     the older holder leaves) still lets it in;
 *   - a count raised by 2 lets the first two waiters in, one after the
 *     other (the first one's grant wakes the second), and not the third;
 *   - a waiter that gives up (cancel) in the middle of the line hands its
 *     place on: the one behind it moves up and gets in on the next release.
 * Each grant is expected within a bound far above the round trips it needs
 * (5 s; a missed wake-up would wait for the 30 s acquire timeout).
 */
#include <baton.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"
#include "../common/testlib.h"

#define GRANT_MS 5000

static char g_uri[1024];
static char g_prefix[96];

typedef struct {
    baton_client *c;
    baton_permits *p;
    int rc;
    char id[BATON_PERMIT_ID_SIZE];
    atomic_int done;
    pthread_t th;
} waiter;

static void *wait_main(void *a)
{
    waiter *w = a;
    w->rc = baton_permits_acquire(w->p, 10000, 30000, w->id);
    atomic_store(&w->done, 1);
    return NULL;
}

/* Starts a waiter on a client of its own, and lets it queue (its key is
 * made before the next one's: the order of the line). */
static void wait_start(waiter *w, const char *name)
{
    memset(w, 0, sizeof *w);
    w->c = tl_client_open(g_uri);
    MUST(baton_permits_open(&w->p, w->c, name));
    atomic_init(&w->done, 0);
    pthread_create(&w->th, NULL, wait_main, w);
    tl_sleep_ms(300);
}

static int done_within(waiter *w, int ms)
{
    int64_t end = tl_now_ms() + ms;
    while (!atomic_load(&w->done) && tl_now_ms() < end) tl_sleep_ms(5);
    return atomic_load(&w->done);
}

static void wait_end(waiter *w)
{
    if (!atomic_load(&w->done)) baton_permits_cancel(w->p);
    pthread_join(w->th, NULL);
    if (w->rc == 0) baton_permits_release(w->p, w->id);
    baton_permits_free(w->p);
    baton_client_close(w->c);
}

static void test_not_the_predecessor(void)
{
    char n[160], a[BATON_PERMIT_ID_SIZE], b[BATON_PERMIT_ID_SIZE];
    int set;
    waiter w1, w2;
    snprintf(n, sizeof n, "%snotpred", g_prefix);
    baton_client *c = tl_client_open(g_uri);
    baton_permits *p = NULL;
    MUST(baton_permits_open(&p, c, n));
    CHECK_RC(baton_permits_try_set(p, 2, &set), 0);
    CHECK_RC(baton_permits_acquire(p, 10000, 0, a), 0);
    CHECK_RC(baton_permits_acquire(p, 10000, 0, b), 0);
    wait_start(&w1, n);
    wait_start(&w2, n);
    CHECK(!atomic_load(&w1.done) && !atomic_load(&w2.done));
    /* a, the older holder, leaves: w1 (just behind b) gets in, w2 waits */
    CHECK_RC(baton_permits_release(p, a), 0);
    CHECK(done_within(&w1, GRANT_MS));
    CHECK_RC(w1.rc, 0);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&w2.done));
    /* one more permit: w2, now first in line, gets in */
    CHECK_RC(baton_permits_add(p, 1), 0);
    CHECK(done_within(&w2, GRANT_MS));
    CHECK_RC(w2.rc, 0);
    wait_end(&w1);
    wait_end(&w2);
    CHECK_RC(baton_permits_release(p, b), 0);
    uint64_t av = 0;
    CHECK_RC(baton_permits_available(p, &av), 0);
    CHECK(av == 3);
    baton_permits_free(p);
    baton_client_close(c);
}

static void test_count_raised(void)
{
    char n[160], h[BATON_PERMIT_ID_SIZE];
    int set;
    waiter w[3];
    snprintf(n, sizeof n, "%sraised", g_prefix);
    baton_client *c = tl_client_open(g_uri);
    baton_permits *p = NULL;
    MUST(baton_permits_open(&p, c, n));
    CHECK_RC(baton_permits_try_set(p, 1, &set), 0);
    CHECK_RC(baton_permits_acquire(p, 10000, 0, h), 0);
    for (int i = 0; i < 3; i++) wait_start(&w[i], n);
    CHECK_RC(baton_permits_add(p, 2), 0);
    CHECK(done_within(&w[0], GRANT_MS) && done_within(&w[1], GRANT_MS));
    CHECK_RC(w[0].rc, 0);
    CHECK_RC(w[1].rc, 0);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&w[2].done));
    CHECK_RC(baton_permits_release(p, h), 0);
    CHECK(done_within(&w[2], GRANT_MS));
    CHECK_RC(w[2].rc, 0);
    for (int i = 0; i < 3; i++) wait_end(&w[i]);
    baton_permits_free(p);
    baton_client_close(c);
}

static void test_gives_up_mid_line(void)
{
    char n[160], h[BATON_PERMIT_ID_SIZE];
    int set;
    waiter w[3];
    snprintf(n, sizeof n, "%sgiveup", g_prefix);
    baton_client *c = tl_client_open(g_uri);
    baton_permits *p = NULL;
    MUST(baton_permits_open(&p, c, n));
    CHECK_RC(baton_permits_try_set(p, 1, &set), 0);
    CHECK_RC(baton_permits_acquire(p, 10000, 0, h), 0);
    for (int i = 0; i < 3; i++) wait_start(&w[i], n);
    /* the first waiter leaves: the second is first now */
    CHECK_RC(baton_permits_cancel(w[0].p), 0);
    CHECK(done_within(&w[0], GRANT_MS));
    CHECK_RC(w[0].rc, BATON_ECANCELED);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&w[1].done) && !atomic_load(&w[2].done));
    CHECK_RC(baton_permits_release(p, h), 0);
    CHECK(done_within(&w[1], GRANT_MS));
    CHECK_RC(w[1].rc, 0);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&w[2].done));
    CHECK_RC(baton_permits_release(w[1].p, w[1].id), 0);
    w[1].rc = -1; /* released */
    CHECK(done_within(&w[2], GRANT_MS));
    CHECK_RC(w[2].rc, 0);
    for (int i = 0; i < 3; i++) wait_end(&w[i]);
    baton_permits_free(p);
    baton_client_close(c);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 2) {
        fprintf(stderr, "usage: %s URI\n", argv[0]);
        return 2;
    }
    if (tl_uri_with_port(g_uri, sizeof g_uri, argv[1], NULL) != 0)
        return tl_skip_status("no test etcd server (no port file)", 1);
    snprintf(g_prefix, sizeof g_prefix, "permits-test/%ld-%ld/", (long)getpid(), (long)(time(NULL) % 100000));
    fprintf(stderr, "etcd permits: %s (names %s*)\n", g_uri, g_prefix);
    RUN(test_not_the_predecessor);
    RUN(test_count_raised);
    RUN(test_gives_up_mid_line);
    return th_finish();
}
