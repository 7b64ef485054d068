/*
 * A plain lock and the read-write lock of the same name exclude each other,
 * in both orders (baton(1) promises it):
 *
 *   test_zk_mixed URI       ("{port}" = the port of the URI's fixture server)
 *
 * Built twice: as test_zk_mixed (tests/zk) and test_etcd_mixed (tests/etcd):
 * the cases are the same on both engines, only the layouts differ (ZooKeeper:
 * "-lock-", "__READ__" and "__WRIT__" nodes in one directory; etcd: the
 * concurrency.Mutex key "<name>/<lease hex>" and recipe.RWMutex's
 * "<name>/read/..." and "<name>/write/..." keys).
 *
 * For each pair (plain then reader, plain then writer, reader then plain,
 * writer then plain), client A holds the first and client B asks for the
 * second: a try answers BATON_ELOCKED; a waiter is not granted while A
 * holds, and is granted once A releases, with a higher fence. And with a
 * reader holding and a plain lock waiting, a new reader queues behind the
 * plain waiter (a try answers BATON_ELOCKED) rather than joining the
 * reader: the plain lock is not starved by readers.
 *
 * Timing: only "not granted while held" is asserted over a pause (400 ms);
 * the grant after the release has a generous bound (GRANT_MS).
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

#define GRANT_MS 10000

static char g_uri[1024];
static char g_prefix[96];

enum { PLAIN, READ, WRITE };
static const char *const kind_name[] = { "plain", "reader", "writer" };

/* One handle of KIND on a client of its own. */
typedef struct {
    baton_client *c;
    baton_lock *plain;
    baton_rwlock *rw;
    baton_lock *l;           /* what is acquired */
} side;

static void side_open(side *s, int kind, const char *name)
{
    memset(s, 0, sizeof *s);
    s->c = tl_client_open(g_uri);
    if (kind == PLAIN) {
        MUST(baton_lock_open(&s->plain, s->c, name, NULL));
        s->l = s->plain;
    } else {
        MUST(baton_rwlock_open(&s->rw, s->c, name, NULL));
        s->l = kind == READ ? baton_rwlock_read(s->rw) : baton_rwlock_write(s->rw);
    }
}

static void side_close(side *s)
{
    if (s->plain) baton_lock_free(s->plain);
    if (s->rw) baton_rwlock_free(s->rw);
    baton_client_close(s->c);
}

typedef struct {
    baton_lock *l;
    int64_t wait_ms;
    int rc;
    atomic_int done;
    pthread_t th;
} acq;

static void *acq_main(void *p)
{
    acq *a = p;
    a->rc = baton_lock_acquire(a->l, a->wait_ms);
    atomic_store(&a->done, 1);
    return NULL;
}

static void acq_start(acq *a, baton_lock *l, int64_t wait_ms)
{
    memset(a, 0, sizeof *a);
    a->l = l;
    a->wait_ms = wait_ms;
    atomic_init(&a->done, 0);
    pthread_create(&a->th, NULL, acq_main, a);
}

static int acq_wait(acq *a, int timeout_ms)
{
    int64_t end = tl_now_ms() + timeout_ms;
    while (!atomic_load(&a->done) && tl_now_ms() < end) tl_sleep_ms(10);
    return atomic_load(&a->done);
}

static void acq_join(acq *a)
{
    if (!acq_wait(a, 0)) {
        baton_lock_cancel(a->l);
        if (!acq_wait(a, 15000)) {
            fprintf(stderr, "FATAL: an acquire ignores cancel\n");
            th_failed++;
            exit(th_finish());
        }
    }
    pthread_join(a->th, NULL);
}

/* FIRST held by one client, SECOND asked for by another. */
static void pair(int first, int second)
{
    char name[256];
    side a, b;
    acq w;
    snprintf(name, sizeof name, "%s%s-then-%s", g_prefix, kind_name[first], kind_name[second]);
    fprintf(stderr, "   %s held, %s asks\n", kind_name[first], kind_name[second]);
    side_open(&a, first, name);
    side_open(&b, second, name);

    CHECK_RC(baton_lock_acquire(a.l, 5000), 0);
    uint64_t fa = baton_lock_fence(a.l);
    CHECK_RC(baton_lock_acquire(b.l, 0), BATON_ELOCKED);
    CHECK(!baton_lock_held(b.l));

    acq_start(&w, b.l, GRANT_MS + 20000);
    tl_sleep_ms(400);
    CHECK(!atomic_load(&w.done)); /* not granted beside the holder */
    CHECK(baton_lock_held(a.l));
    CHECK_RC(baton_lock_release(a.l), 0);
    CHECK(acq_wait(&w, GRANT_MS));
    acq_join(&w);
    CHECK_RC(w.rc, 0);
    CHECK(baton_lock_held(b.l));
    CHECK(baton_lock_fence(b.l) > fa);
    /* and now the first kind waits for the second */
    CHECK_RC(baton_lock_acquire(a.l, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(b.l), 0);
    CHECK_RC(baton_lock_acquire(a.l, 5000), 0);
    CHECK_RC(baton_lock_release(a.l), 0);
    side_close(&b);
    side_close(&a);
}

static void test_plain_then_reader(void) { pair(PLAIN, READ); }
static void test_plain_then_writer(void) { pair(PLAIN, WRITE); }
static void test_reader_then_plain(void) { pair(READ, PLAIN); }
static void test_writer_then_plain(void) { pair(WRITE, PLAIN); }

/* A reader holds, a plain lock waits: a new reader does not slip in beside
 * the first one ahead of the plain waiter. */
static void test_plain_waiter_holds_back_readers(void)
{
    char name[256];
    side r1, p, r2;
    acq w;
    snprintf(name, sizeof name, "%sno-starvation", g_prefix);
    side_open(&r1, READ, name);
    side_open(&p, PLAIN, name);
    side_open(&r2, READ, name);
    CHECK_RC(baton_lock_acquire(r1.l, 5000), 0);
    acq_start(&w, p.l, GRANT_MS + 20000);
    tl_sleep_ms(400);
    CHECK(!atomic_load(&w.done));
    CHECK_RC(baton_lock_acquire(r2.l, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(r1.l), 0);
    CHECK(acq_wait(&w, GRANT_MS));
    acq_join(&w);
    CHECK_RC(w.rc, 0);
    CHECK_RC(baton_lock_acquire(r2.l, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(p.l), 0);
    CHECK_RC(baton_lock_acquire(r2.l, 5000), 0);
    CHECK_RC(baton_lock_release(r2.l), 0);
    side_close(&r2);
    side_close(&p);
    side_close(&r1);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 2) {
        fprintf(stderr, "usage: %s URI\n", argv[0]);
        return 2;
    }
    if (tl_uri_with_port(g_uri, sizeof g_uri, argv[1], NULL) != 0)
        return tl_skip_status("no test server for this URI (no port file)", 1);
    snprintf(g_prefix, sizeof g_prefix, "mixed-test/%ld-%ld/", (long)getpid(), (long)(time(NULL) % 100000));
    fprintf(stderr, "plain vs read-write: %s (names %s*)\n", g_uri, g_prefix);
    RUN(test_plain_then_reader);
    RUN(test_plain_then_writer);
    RUN(test_reader_then_plain);
    RUN(test_writer_then_plain);
    RUN(test_plain_waiter_holds_back_readers);
    return th_finish();
}
