/*
 * Fences of the file engine after the damage a power loss leaves behind:
 *
 *   test_file_fence
 *
 * The lock file's counter is written without fsync, so after a crash it can
 * be empty, cut short, zeroed or garbage. Whatever is left, the next grant's
 * fence must still be above every fence handed out before (it restarts from
 * the wall clock in microseconds, never from 0), on plain and read-write
 * locks, and an intact counter that runs ahead of the clock is still obeyed.
 * Also: a lock file removed while a waiter sleeps on it must not hand that
 * waiter a lock that excludes nobody.
 */
#include "ft.h"

/* Takes and releases NAME once; returns the fence of the grant (0 on failure). */
static uint64_t grant_once(baton_lock *l) {
    int rc = baton_lock_acquire(l, 2000);
    CHECK_RC(rc, 0);
    if (rc) return 0;
    uint64_t f = baton_lock_fence(l);
    CHECK_RC(baton_lock_release(l), 0);
    return f;
}

typedef struct {
    const char *what;
    const char *data;
    size_t len;   /* 0: strlen(data) */
} damage;

/* What a power loss (or a stray writer) can leave in the lock file. */
static const char zeros[256];
static const damage g_damage[] = {
    { "empty", "", 0 },
    { "cut inside the counter", "baton-lock 1\nfence 0000000", 0 },
    { "cut after the counter's digits", "baton-lock 1\nfence 00000000000000000001", 0 },
    { "zeros", zeros, sizeof zeros },
    { "garbage", "\x7f" "ELF not a lock file at all\n", 0 },
    { "a counter with a letter in it", "baton-lock 1\nfence 0000000000000000x001\nheld 0\n", 0 },
    { "a counter past 2^64", "baton-lock 1\nfence 99999999999999999999\nheld 0\n", 0 },
};

static void test_lost_counter(void) {
    baton_client *c = client();
    for (size_t k = 0; k < sizeof g_damage / sizeof g_damage[0]; k++) {
        char name[64], path[1300], fname[80];
        snprintf(name, sizeof name, "lost-%zu", k);
        snprintf(fname, sizeof fname, "lock.%s", name);
        baton_lock *l = NULL;
        MUST(baton_lock_open(&l, c, name, NULL));
        uint64_t f1 = grant_once(l);
        uint64_t f1b = grant_once(l);
        CHECK(f1b > f1);
        const damage *d = &g_damage[k];
        put_bytes(dir_file(path, sizeof path, fname), d->data, d->len ? d->len : strlen(d->data));
        uint64_t before = tl_wall_us();
        int rc = baton_lock_acquire(l, 0);
        CHECK_RC(rc, 0);
        uint64_t f2 = baton_lock_fence(l);
        if (!(f2 > f1b) || f2 < before)
            fprintf(stderr, "   counter %s: fence %llu after %llu (clock %llu)\n", g_damage[k].what,
                    (unsigned long long)f2, (unsigned long long)f1b, (unsigned long long)before);
        CHECK(f2 > f1b);
        CHECK(f2 >= before);
        if (rc == 0) CHECK_RC(baton_lock_release(l), 0);
        /* the counter was written back whole: the next grant continues above */
        uint64_t f3 = grant_once(l);
        CHECK(f3 > f2);
        baton_lock_free(l);
    }
    baton_client_close(c);
}

/* A counter ahead of the clock (a burst of grants, or a clock that stepped
 * back a little) is obeyed: the fence is counter + 1, not the clock. */
static void test_counter_ahead_of_clock(void) {
    baton_client *c = client();
    baton_lock *l = NULL;
    char path[1300], rec[128];
    MUST(baton_lock_open(&l, c, "ahead", NULL));
    grant_once(l);
    uint64_t ahead = tl_wall_us() + 1000000000000ull;   /* some 11 days ahead */
    int n = snprintf(rec, sizeof rec, "baton-lock 1\nfence %020llu\nheld 0\nholder \n", (unsigned long long)ahead);
    put_bytes(dir_file(path, sizeof path, "lock.ahead"), rec, (size_t)n);
    uint64_t f = grant_once(l);
    CHECK(f == ahead + 1);
    CHECK(grant_once(l) == ahead + 2);
    baton_lock_free(l);
    baton_client_close(c);
}

/* The read-write lock's grants share the file and its counter. */
static void test_rwlock_lost_counter(void) {
    baton_client *c = client();
    baton_rwlock *rw = NULL;
    char path[1300];
    MUST(baton_rwlock_open(&rw, c, "rw-lost", NULL));
    baton_lock *r = baton_rwlock_read(rw), *w = baton_rwlock_write(rw);
    uint64_t fw = grant_once(w);
    put_bytes(dir_file(path, sizeof path, "lock.rw-lost"), "", 0);
    uint64_t fr = grant_once(r);
    CHECK(fr > fw);
    put_bytes(path, zeros, sizeof zeros);
    uint64_t fw2 = grant_once(w);
    CHECK(fw2 > fr);
    /* downgrade: the read grant taken under the write side bumps it too */
    CHECK_RC(baton_lock_acquire(w, 0), 0);
    uint64_t fw3 = baton_lock_fence(w);
    CHECK(fw3 > fw2);
    CHECK_RC(baton_lock_acquire(r, 0), 0);
    CHECK(baton_lock_fence(r) > fw3);
    CHECK_RC(baton_lock_release(w), 0);
    CHECK_RC(baton_lock_release(r), 0);
    baton_rwlock_free(rw);
    baton_client_close(c);
}

/* A thread that waits for a lock. */
typedef struct {
    baton_lock *l;
    int64_t wait_ms;
    int rc;
    atomic_int done;
    pthread_t th;
} waiter;

static void *waiter_main(void *a) {
    waiter *x = a;
    x->rc = baton_lock_acquire(x->l, x->wait_ms);
    atomic_store(&x->done, 1);
    return NULL;
}

/* A waits on the lock file held by H; the file is removed and C takes the
 * name afresh (a new file). When H lets go, the old file's lock that A was
 * queued on excludes nobody: A must not come back holding it while C does. */
static void replaced_while_waiting(int rwlock) {
    baton_client *ch = client(), *ca = client(), *cc = client();
    baton_lock *h = NULL, *a = NULL, *cl = NULL;
    baton_rwlock *rh = NULL, *ra = NULL, *rc_ = NULL;
    const char *name = rwlock ? "replaced-rw" : "replaced";
    char path[1300], fname[64];
    snprintf(fname, sizeof fname, "lock.%s", name);
    if (rwlock) {
        MUST(baton_rwlock_open(&rh, ch, name, NULL));
        MUST(baton_rwlock_open(&ra, ca, name, NULL));
        MUST(baton_rwlock_open(&rc_, cc, name, NULL));
        h = baton_rwlock_write(rh);
        a = baton_rwlock_write(ra);
        cl = baton_rwlock_write(rc_);
    } else {
        MUST(baton_lock_open(&h, ch, name, NULL));
        MUST(baton_lock_open(&a, ca, name, NULL));
        MUST(baton_lock_open(&cl, cc, name, NULL));
    }
    CHECK_RC(baton_lock_acquire(h, 0), 0);
    waiter w = { .l = a, .wait_ms = 1500 };
    atomic_init(&w.done, 0);
    pthread_create(&w.th, NULL, waiter_main, &w);
    tl_sleep_ms(200);                                   /* A is queued on the old file */
    CHECK(!atomic_load(&w.done));
    CHECK(unlink(dir_file(path, sizeof path, fname)) == 0);
    CHECK_RC(baton_lock_acquire(cl, 0), 0);          /* a new file: C holds the name */
    CHECK_RC(baton_lock_release(h), 0);              /* A's old file is free now */
    pthread_join(w.th, NULL);
    if (w.rc == 0) fprintf(stderr, "   %s: the waiter was granted a removed lock file while another holds the name\n", name);
    CHECK_RC(w.rc, BATON_ETIMEDOUT);
    CHECK(!(baton_lock_held(a) && baton_lock_held(cl)));
    if (w.rc == 0) baton_lock_release(a);
    CHECK_RC(baton_lock_release(cl), 0);
    CHECK_RC(baton_lock_acquire(a, 2000), 0);        /* and it works on the new file */
    CHECK_RC(baton_lock_release(a), 0);
    if (rwlock) {
        baton_rwlock_free(rh);
        baton_rwlock_free(ra);
        baton_rwlock_free(rc_);
    } else {
        baton_lock_free(h);
        baton_lock_free(a);
        baton_lock_free(cl);
    }
    baton_client_close(ch);
    baton_client_close(ca);
    baton_client_close(cc);
}

static void test_replaced_while_waiting(void) { replaced_while_waiting(0); }
static void test_replaced_while_waiting_rw(void) { replaced_while_waiting(1); }

int main(void) {
    ft_setup("file_fence");
    RUN(test_lost_counter);
    RUN(test_counter_ahead_of_clock);
    RUN(test_rwlock_lost_counter);
    RUN(test_replaced_while_waiting);
    RUN(test_replaced_while_waiting_rw);
    return th_finish();
}
