/* Multilock: all-or-nothing over locks of any engines, no deadlock between
 * overlapping sets taken in different orders, fences of every member.
 * usage: test_multilock FILE_URI [REDIS_URI]   ("{port}" = the fixture's port) */
#include <baton.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../harness.h"
#include "../common/testlib.h"

static char uris[2][512];
static int nuris;
static long shared_counter;

static void test_all_or_nothing(void)
{
    baton_client *c[2] = { NULL, NULL }, *other = NULL;
    baton_lock *a, *b, *blocker, *members[2];
    baton_multilock *m;
    uint64_t f[2] = { 0, 0 };
    const char *ub = uris[nuris - 1];

    CHECK_RC(baton_client_open(&c[0], uris[0], NULL), 0);
    CHECK_RC(baton_client_open(&c[1], ub, NULL), 0);
    CHECK_RC(baton_client_open(&other, ub, NULL), 0);
    if (!c[0] || !c[1] || !other) return;
    baton_lock_open(&a, c[0], "ml-a", NULL);
    baton_lock_open(&b, c[1], "ml-b", NULL);
    baton_lock_open(&blocker, other, "ml-b", NULL);
    members[0] = a;
    members[1] = b;
    CHECK_RC(baton_multilock_open(&m, members, 2), 0);

    CHECK_RC(baton_lock_acquire(blocker, 0), 0);
    CHECK_RC(baton_multilock_acquire(m, 0), BATON_ELOCKED);
    CHECK(!baton_lock_held(a));                /* what was taken was given back */
    CHECK_RC(baton_multilock_acquire(m, 200), BATON_ETIMEDOUT);
    CHECK(!baton_lock_held(a));
    CHECK_RC(baton_lock_release(blocker), 0);

    CHECK_RC(baton_multilock_acquire(m, 2000), 0);
    CHECK(baton_multilock_held(m));
    CHECK(baton_multilock_fences(m, f, 2) == 2);
    CHECK(f[0] > 0 && f[1] > 0);
    CHECK(f[0] == baton_lock_fence(a) && f[1] == baton_lock_fence(b));
    CHECK_RC(baton_lock_acquire(blocker, 0), BATON_ELOCKED);
    CHECK_RC(baton_multilock_release(m), 0);
    CHECK(!baton_multilock_held(m));
    CHECK_RC(baton_multilock_release(m), BATON_ENOTHELD);
    CHECK_RC(baton_lock_acquire(blocker, 0), 0);
    baton_lock_release(blocker);

    baton_multilock_free(m);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_lock_free(blocker);
    baton_client_close(c[0]);
    baton_client_close(c[1]);
    baton_client_close(other);
}

static void test_bad_input(void)
{
    baton_client *c;
    baton_lock *a, *a2, *members[2];
    baton_multilock *m = NULL;
    CHECK_RC(baton_client_open(&c, uris[0], NULL), 0);
    baton_lock_open(&a, c, "ml-dup", NULL);
    baton_lock_open(&a2, c, "ml-dup", NULL);
    members[0] = a;
    members[1] = a2;
    CHECK_RC(baton_multilock_open(&m, members, 2), BATON_EINVAL);   /* would wait for itself */
    CHECK_RC(baton_multilock_open(&m, members, 0), BATON_EINVAL);
    members[1] = NULL;
    CHECK_RC(baton_multilock_open(&m, members, 2), BATON_EINVAL);
    CHECK_RC(baton_multilock_acquire(NULL, 0), BATON_EINVAL);
    baton_lock_free(a);
    baton_lock_free(a2);
    baton_client_close(c);
}

/* Two threads take overlapping sets given in opposite orders, many times:
 * the global order means they never deadlock, and the counter is exact. */
typedef struct { int reverse, rounds, fails; } dl_arg;

static void *dl_main(void *p)
{
    dl_arg *d = p;
    baton_client *c[2];
    baton_lock *x, *y, *z, *set[3];
    baton_multilock *m;
    baton_client_open(&c[0], uris[0], NULL);
    baton_client_open(&c[1], uris[nuris - 1], NULL);
    baton_lock_open(&x, c[0], "ml-x", NULL);
    baton_lock_open(&y, c[1], "ml-y", NULL);
    baton_lock_open(&z, c[0], d->reverse ? "ml-z1" : "ml-z2", NULL);
    if (d->reverse) { set[0] = z; set[1] = y; set[2] = x; }
    else { set[0] = x; set[1] = z; set[2] = y; }
    if (baton_multilock_open(&m, set, 3)) { d->fails = d->rounds; return NULL; }
    for (int i = 0; i < d->rounds; i++) {
        if (baton_multilock_acquire(m, 10000)) { d->fails++; continue; }
        long v = shared_counter;
        usleep(100);
        shared_counter = v + 1;
        baton_multilock_release(m);
    }
    baton_multilock_free(m);
    baton_lock_free(x); baton_lock_free(y); baton_lock_free(z);
    baton_client_close(c[0]);
    baton_client_close(c[1]);
    return NULL;
}

static void test_no_deadlock(void)
{
    pthread_t t[2];
    dl_arg d[2] = { { 0, 100, 0 }, { 1, 100, 0 } };
    shared_counter = 0;
    pthread_create(&t[0], NULL, dl_main, &d[0]);
    pthread_create(&t[1], NULL, dl_main, &d[1]);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    CHECK(d[0].fails == 0 && d[1].fails == 0);
    CHECK(shared_counter == 200);
}

int main(int argc, char **argv)
{
    if (argc < 2) { fprintf(stderr, "usage: %s FILE_URI [REDIS_URI]\n", argv[0]); return 2; }
    for (int i = 1; i < argc && i <= 2; i++) {
        if (tl_uri_with_port(uris[nuris], sizeof uris[nuris], argv[i], NULL) != 0) {
            fprintf(stderr, "no server for %s\n", argv[i]);
            return tl_skip_status("no test server for the URI (no port file)", 0);
        }
        nuris++;
    }
    RUN(test_bad_input);
    RUN(test_all_or_nothing);
    RUN(test_no_deadlock);
    return th_finish();
}
