/*
 * The read-write lock suite:
 *
 *   test_prims_rwlock URI
 *
 * Shared readers / exclusive writer, fences, downgrade (write -> read), no
 * upgrade (BATON_EDEADLK), reentrancy, a waiting writer is not starved by new
 * readers, a writer that gives up or is killed while waiting no longer holds
 * readers back, lease expiry of a SIGSTOPped reader and writer, renewal of
 * both sides, and readers/writers in N processes. "{port}" in URI is the port
 * of its engine's test server (Redis, ZooKeeper). An engine without read-write locks is a skip.
 */
#include "prims.h"

static baton_rwlock *rw_on(baton_client *c, const char *name, const baton_lock_options *o) {
    baton_rwlock *rw = NULL;
    MUST(baton_rwlock_open(&rw, c, name, o));
    return rw;
}

/* Waiting writers recorded by the engine (Redis: the writer-intent zset);
 * elsewhere a pause. */
static void wait_writer_queued(const char *name, long n) {
    if (!g_redis_port) {
        tl_sleep_ms(250);
        return;
    }
    char key[1200];
    snprintf(key, sizeof key, strchr(name, '{') ? "baton_rwlock_writers:%s" : "baton_rwlock_writers:{%s}", name);
    const char *argv[2] = { "ZCARD", key };
    int64_t end = tl_now_ms() + 10000;
    for (;;) {
        rcli c;
        long long v = -1;
        if (!rcli_open(&c, g_redis_port)) {
            v = rcli_int(&c, 2, argv);
            rcli_close(&c);
        }
        if (v == n || tl_now_ms() > end) {
            if (v != n) fprintf(stderr, "   waiting writers of %s never reached %ld\n", name, n);
            return;
        }
        tl_sleep_ms(5);
    }
}

/* ---- workers ------------------------------------------------------------------ */

static void worker_on_lost(baton_lock *l, void *payload) {
    (void)l;
    (void)payload;
    static const char msg[] = "LOST\n";
    if (write(1, msg, sizeof msg - 1) < 0) _exit(3);
}

/* Holds SIDE (read|write) and obeys RELEASE, HELD? on stdin; EOF = exit. */
static int worker_hold(const char *uri, const char *name, const char *side, uint32_t lease) {
    baton_client *c = tl_client_open(uri);
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = lease;
    o.on_lost = worker_on_lost;
    baton_rwlock *rw = rw_on(c, name, &o);
    baton_lock *l = !strcmp(side, "read") ? baton_rwlock_read(rw) : baton_rwlock_write(rw);
    int rc = baton_lock_acquire(l, 10000);
    if (rc) {
        tl_out_line("ERR acquire %d\n", rc);
        return 2;
    }
    tl_out_line("HELD %llu\n", (unsigned long long)baton_lock_fence(l));
    char line[64];
    for (;;) {
        if (tl_read_line(0, line, sizeof line, 600000) < 0) break;
        if (!strcmp(line, "RELEASE")) tl_out_line("RELEASE %d\n", baton_lock_release(l));
        else if (!strcmp(line, "HELD?")) tl_out_line("HELD? %d\n", baton_lock_held(l));
    }
    baton_rwlock_free(rw);
    baton_client_close(c);
    return 0;
}

/* Prints WAITING, waits for the write side forever, prints GOT, then holds
 * until RELEASE / EOF. */
static int worker_waitw(const char *uri, const char *name, uint32_t lease) {
    baton_client *c = tl_client_open(uri);
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = lease;
    baton_rwlock *rw = rw_on(c, name, &o);
    tl_out_line("WAITING\n");
    int rc = baton_lock_acquire(baton_rwlock_write(rw), -1);
    tl_out_line(rc ? "ERR %d\n" : "GOT %d\n", rc);
    tl_wait_for_line("RELEASE");
    baton_rwlock_free(rw);
    baton_client_close(c);
    return 0;
}

/* M rounds. writer: under the write lock, FILE goes v -> v+1 (odd: a write
 * in progress) -> v+2. reader: under the read lock, FILE must be even and
 * stay unchanged. Exit 1 on any violation. */
static int worker_rw(const char *uri, const char *name, const char *file, const char *mode, int m) {
    baton_client *c = tl_client_open(uri);
    baton_rwlock *rw = rw_on(c, name, NULL);
    int writer = !strcmp(mode, "writer"), bad = 0;
    baton_lock *l = writer ? baton_rwlock_write(rw) : baton_rwlock_read(rw);
    int fd = open(file, O_RDWR | O_CLOEXEC);
    if (fd < 0) return 2;
    for (int i = 0; i < m; i++) {
        int rc = baton_lock_acquire(l, 60000);
        if (rc) {
            fprintf(stderr, "worker: acquire %d (%s)\n", rc, baton_strerror(rc));
            bad = 1;
            break;
        }
        char buf[32] = { 0 };
        ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
        long v = r > 0 ? strtol(buf, NULL, 10) : 0;
        if (writer) {
            int len = snprintf(buf, sizeof buf, "%ld\n", v + 1);
            if (pwrite(fd, buf, (size_t)len, 0) != len) bad = 1;
            usleep(500);
            len = snprintf(buf, sizeof buf, "%ld\n", v + 2);
            if (pwrite(fd, buf, (size_t)len, 0) != len) bad = 1;
        } else {
            if (v % 2) {
                fprintf(stderr, "worker: a reader saw a write in progress (%ld)\n", v);
                bad = 1;
            }
            usleep(500);
            memset(buf, 0, sizeof buf);
            r = pread(fd, buf, sizeof buf - 1, 0);
            if ((r > 0 ? strtol(buf, NULL, 10) : 0) != v) {
                fprintf(stderr, "worker: the value changed under a read lock\n");
                bad = 1;
            }
        }
        if (baton_lock_release(l)) bad = 1;
    }
    close(fd);
    baton_rwlock_free(rw);
    baton_client_close(c);
    return bad;
}

/* ---- cases ------------------------------------------------------------------------- */

static void test_shared_exclusive(void) {
    char n[256];
    lname(n, sizeof n, "basic");
    baton_client *c1 = client(), *c2 = client(), *c3 = client();
    baton_rwlock *a = rw_on(c1, n, NULL), *b = rw_on(c2, n, NULL), *w = rw_on(c3, n, NULL);
    /* two readers at once */
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(a), 0), 0);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(b), 0), 0);
    uint64_t fa = baton_lock_fence(baton_rwlock_read(a)), fb = baton_lock_fence(baton_rwlock_read(b));
    CHECK(fa > 0 && fb > fa);
    CHECK(baton_lock_held(baton_rwlock_read(a)) && baton_lock_held(baton_rwlock_read(b)));
    /* no writer while they read */
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(w), 0), BATON_ELOCKED);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(w), 300), BATON_ETIMEDOUT);
    CHECK(tl_now_ms() - t0 >= 250);
    baton_lockinfo info;
    memset(&info, 0, sizeof info);
    CHECK_RC(baton_lock_info(c3, n, &info), 0);
    CHECK(info.held == 1);
    CHECK_RC(baton_lock_release(baton_rwlock_read(a)), 0);
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(w), 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(baton_rwlock_read(b)), 0);
    CHECK_RC(baton_lock_release(baton_rwlock_read(b)), BATON_ENOTHELD);
    /* the last reader gone: the writer */
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(w), 0), 0);
    uint64_t fw = baton_lock_fence(baton_rwlock_write(w));
    CHECK(fw > fb);
    CHECK_RC(baton_lock_info(c1, n, &info), 0);
    CHECK(info.held == 1);
    char pid[32];
    snprintf(pid, sizeof pid, " %ld ", (long)getpid());
    CHECK(strstr(info.holder, pid) != NULL);
    /* no reader, no other writer while it writes */
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(a), 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(b), 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(b), 200), BATON_ETIMEDOUT);
    /* a reader waiting for the writer is woken by its release */
    acq_thread t;
    acq_start(&t, baton_rwlock_read(a), 10000);
    tl_sleep_ms(150);
    CHECK(!atomic_load(&t.done));
    t0 = tl_now_ms();
    CHECK_RC(baton_lock_release(baton_rwlock_write(w)), 0);
    CHECK(acq_wait(&t, 5000));
    CHECK(t.t_done - t0 < 1500);
    acq_join(&t);
    CHECK_RC(t.rc, 0);
    CHECK(t.fence > fw);
    baton_rwlock_free(a);
    baton_rwlock_free(b);
    baton_rwlock_free(w);
    baton_client_close(c1);
    baton_client_close(c2);
    baton_client_close(c3);
}

static void test_downgrade_no_upgrade(void) {
    char n[256];
    lname(n, sizeof n, "downgrade");
    baton_client *c1 = client(), *c2 = client();
    baton_rwlock *a = rw_on(c1, n, NULL), *b = rw_on(c2, n, NULL), *x = rw_on(c2, n, NULL);
    baton_lock *ar = baton_rwlock_read(a), *aw = baton_rwlock_write(a);
    CHECK_RC(baton_lock_acquire(aw, 0), 0);
    CHECK_RC(baton_lock_acquire(ar, 0), 0);       /* downgrade: the writer takes the read side */
    CHECK(baton_lock_fence(ar) > baton_lock_fence(aw));
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(b), 0), BATON_ELOCKED); /* still writing */
    CHECK_RC(baton_lock_release(aw), 0);           /* now only reading */
    CHECK(baton_lock_held(ar) == 1 && baton_lock_held(aw) == 0);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(b), 0), 0); /* readers may join */
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(x), 0), BATON_ELOCKED);
    /* no upgrade: the reader asking for the write side is refused at once */
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(aw, 5000), BATON_EDEADLK);
    CHECK_RC(baton_lock_acquire(aw, -1), BATON_EDEADLK);
    CHECK(tl_now_ms() - t0 < 1500);
    CHECK_RC(baton_lock_release(baton_rwlock_read(b)), 0);
    CHECK_RC(baton_lock_release(ar), 0);
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(x), 0), 0);
    CHECK_RC(baton_lock_release(baton_rwlock_write(x)), 0);
    /* a downgraded holder that releases the read side first keeps writing */
    CHECK_RC(baton_lock_acquire(aw, 0), 0);
    CHECK_RC(baton_lock_acquire(ar, 0), 0);
    CHECK_RC(baton_lock_release(ar), 0);
    CHECK(baton_lock_held(aw) == 1);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(b), 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(aw), 0);
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(x), 0), 0);
    baton_rwlock_free(x); /* releases */
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(b), 0), 0);
    baton_rwlock_free(a);
    baton_rwlock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_reentrant(void) {
    char n[256];
    lname(n, sizeof n, "reentrant");
    baton_client *c1 = client(), *c2 = client();
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.reentrant = 1;
    baton_rwlock *a = rw_on(c1, n, &o), *b = rw_on(c2, n, NULL);
    baton_lock *ar = baton_rwlock_read(a), *aw = baton_rwlock_write(a);
    CHECK_RC(baton_lock_acquire(aw, 0), 0);
    CHECK_RC(baton_lock_acquire(aw, 1000), 0);
    CHECK_RC(baton_lock_release(aw), 0);
    CHECK(baton_lock_held(aw) == 1);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(b), 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(aw), 0);
    CHECK_RC(baton_lock_acquire(ar, 0), 0);
    CHECK_RC(baton_lock_acquire(ar, 0), 0);
    CHECK_RC(baton_lock_release(ar), 0);
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(b), 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(ar), 0);
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(b), 0), 0);
    CHECK_RC(baton_lock_release(baton_rwlock_write(b)), 0);
    /* not reentrant: a second acquire of a held side fails fast */
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(b), 0), 0);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(b), 2000), BATON_EDEADLK);
    CHECK_RC(baton_lock_release(baton_rwlock_read(b)), 0);
    baton_rwlock_free(a);
    baton_rwlock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* A waiting writer holds back new readers; it is granted when the readers
 * that were there leave, before the readers that came after it. */
static void test_writer_not_starved(void) {
    char n[256];
    lname(n, sizeof n, "starve");
    baton_client *c1 = client(), *c2 = client(), *c3 = client();
    baton_rwlock *r1 = rw_on(c1, n, NULL), *w = rw_on(c2, n, NULL), *r2 = rw_on(c3, n, NULL), *r3 = rw_on(c3, n, NULL);
    atomic_int ctr;
    atomic_init(&ctr, 0);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(r1), 0), 0);
    acq_thread tw, t2, t3;
    acq_start_ex(&tw, baton_rwlock_write(w), 10000, 1, 0, &ctr);
    wait_writer_queued(n, 1);
    /* new readers wait now, although only readers hold the lock */
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(r2), 0), BATON_ELOCKED);
    acq_start_ex(&t2, baton_rwlock_read(r2), 10000, 1, 0, &ctr);
    acq_start_ex(&t3, baton_rwlock_read(r3), 10000, 1, 0, &ctr);
    tl_sleep_ms(200);
    CHECK(!atomic_load(&t2.done) && !atomic_load(&t3.done) && !atomic_load(&tw.done));
    CHECK_RC(baton_lock_release(baton_rwlock_read(r1)), 0);
    CHECK(acq_wait(&tw, 5000));
    CHECK_RC(tw.rc, 0);
    tl_sleep_ms(150);
    CHECK(!atomic_load(&t2.done) && !atomic_load(&t3.done));
    atomic_store(&tw.release_now, 1);
    CHECK(acq_wait(&t2, 5000) && acq_wait(&t3, 5000));
    CHECK(tw.order == 1);
    CHECK_RC(t2.rc, 0);
    CHECK_RC(t3.rc, 0);
    acq_join(&tw);
    acq_join(&t2);
    acq_join(&t3);
    baton_rwlock_free(r1);
    baton_rwlock_free(w);
    baton_rwlock_free(r2);
    baton_rwlock_free(r3);
    baton_client_close(c1);
    baton_client_close(c2);
    baton_client_close(c3);
}

/* A writer that times out or is cancelled stops holding readers back. */
static void test_writer_gives_up(void) {
    char n[256];
    lname(n, sizeof n, "giveup");
    baton_client *c1 = client(), *c2 = client();
    baton_rwlock *r1 = rw_on(c1, n, NULL), *w = rw_on(c2, n, NULL), *r2 = rw_on(c2, n, NULL);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(r1), 0), 0);
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(w), 300), BATON_ETIMEDOUT);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(r2), 0), 0);
    CHECK_RC(baton_lock_release(baton_rwlock_read(r2)), 0);
    acq_thread t;
    acq_start(&t, baton_rwlock_write(w), 30000);
    wait_writer_queued(n, 1);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(r2), 0), BATON_ELOCKED);
    acq_thread t2;
    acq_start(&t2, baton_rwlock_read(r2), 10000);
    tl_sleep_ms(100);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_cancel(baton_rwlock_write(w)), 0);
    CHECK(acq_wait(&t, 5000));
    CHECK_RC(t.rc, BATON_ECANCELED);
    CHECK(acq_wait(&t2, 5000));      /* the blocked reader is woken, not left to its timeout */
    CHECK(t2.t_done - t0 < 1500);
    CHECK_RC(t2.rc, 0);
    acq_join(&t);
    acq_join(&t2);
    CHECK_RC(baton_lock_release(baton_rwlock_read(r1)), 0);
    baton_rwlock_free(r1);
    baton_rwlock_free(w);
    baton_rwlock_free(r2);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* A writer killed while waiting holds readers back for its lease at most. */
static void test_killed_waiting_writer(void) {
    char n[256], line[128];
    lname(n, sizeof n, "killedw");
    const uint32_t lease = expire_ms(1000);
    baton_client *c1 = client(), *c2 = client();
    baton_rwlock *r1 = rw_on(c1, n, NULL), *r2 = rw_on(c2, n, NULL);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(r1), 0), 0);
    tl_worker w;
    char ls[16];
    snprintf(ls, sizeof ls, "%u", lease);
    char *argv[] = { "test_prims_rwlock", "--worker", "waitw", g_uri, n, ls, NULL };
    CHECK(tl_worker_spawn(&w, argv) == 0);
    CHECK(tl_expect_line(&w, "WAITING", line, sizeof line, 15000) == 0);
    wait_writer_queued(n, 1);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(r2), 0), BATON_ELOCKED);
    kill(w.pid, SIGKILL);
    int64_t t0 = tl_now_ms();
    CHECK(WIFSIGNALED(tl_worker_reap(&w, 10000)));
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(r2), lease + 5000), 0);
    int64_t el = tl_now_ms() - t0;
    fprintf(stderr, "   the next reader got in %lld ms after the waiting writer died (lease %u ms)\n", (long long)el, lease);
    CHECK(el < lease + 2500);
    CHECK_RC(baton_lock_release(baton_rwlock_read(r2)), 0);
    CHECK_RC(baton_lock_release(baton_rwlock_read(r1)), 0);
    baton_rwlock_free(r1);
    baton_rwlock_free(r2);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* A SIGSTOPped holder of SIDE loses it after its lease; the stale holder's
 * release never touches the new holder. */
static void sigstop_case(const char *side) {
    char n[256], line[128];
    snprintf(line, sizeof line, "sigstop-%s", side);
    lname(n, sizeof n, line);
    const uint32_t lease = expire_ms(1000);
    tl_worker w;
    char ls[16];
    snprintf(ls, sizeof ls, "%u", lease);
    char *argv[] = { "test_prims_rwlock", "--worker", "hold", g_uri, n, (char *)side, ls, NULL };
    CHECK(tl_worker_spawn(&w, argv) == 0);
    if (tl_expect_line(&w, "HELD", line, sizeof line, 15000) != 0) {
        CHECK(0);
        tl_worker_reap(&w, 1000);
        return;
    }
    uint64_t f1 = strtoull(line + 5, NULL, 10);
    baton_client *c = client(), *c2 = client();
    baton_rwlock *x = rw_on(c, n, NULL), *y = rw_on(c2, n, NULL);
    if (!strcmp(side, "read")) {
        CHECK_RC(baton_lock_acquire(baton_rwlock_read(y), 0), 0); /* shared */
        CHECK_RC(baton_lock_release(baton_rwlock_read(y)), 0);
    }
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(x), 0), BATON_ELOCKED);
    kill(w.pid, SIGSTOP);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(x), lease + 5000), 0);
    int64_t el = tl_now_ms() - t0;
    fprintf(stderr, "   %s side: the writer got in %lld ms after SIGSTOP (lease %u ms)\n", side, (long long)el, lease);
    CHECK(el < lease + 2500);
    uint64_t fx = baton_lock_fence(baton_rwlock_write(x));
    CHECK(fx > f1);
    tl_sleep_ms(300);
    kill(w.pid, SIGCONT);
    CHECK(tl_expect_line(&w, "LOST", line, sizeof line, 3000) == 0);
    tl_send_line(&w, "HELD?\n");
    CHECK(tl_expect_line(&w, "HELD? 0", line, sizeof line, 5000) == 0);
    tl_send_line(&w, "RELEASE\n");
    char want[32];
    snprintf(want, sizeof want, "RELEASE %d", BATON_ELOST);
    CHECK(tl_expect_line(&w, want, line, sizeof line, 5000) == 0);
    CHECK(baton_lock_held(baton_rwlock_write(x)) == 1);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(y), 0), BATON_ELOCKED);
    close(w.to);
    w.to = -1;
    CHECK(tl_exited_ok(tl_worker_reap(&w, 10000)));
    CHECK_RC(baton_lock_release(baton_rwlock_write(x)), 0);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(y), 0), 0);
    baton_rwlock_free(x);
    baton_rwlock_free(y);
    baton_client_close(c);
    baton_client_close(c2);
}

static void test_sigstop_holders(void) {
    sigstop_case("write");
    sigstop_case("read");
}

static void test_renewal(void) {
    char n[256];
    lname(n, sizeof n, "renewal");
    baton_client *c1 = client(), *c2 = client();
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 600;
    baton_rwlock *a = rw_on(c1, n, &o), *b = rw_on(c2, n, NULL);
    baton_lock *ar = baton_rwlock_read(a), *aw = baton_rwlock_write(a);
    CHECK_RC(baton_lock_acquire(aw, 0), 0);
    CHECK_RC(baton_lock_acquire(ar, 0), 0);
    int64_t end = tl_now_ms() + 1500;
    int rounds = 0, ok = 0;
    while (tl_now_ms() < end) {
        tl_sleep_ms(250);
        rounds++;
        if (baton_lock_held(aw) && baton_lock_held(ar) && baton_lock_acquire(baton_rwlock_read(b), 0) == BATON_ELOCKED &&
            baton_lock_acquire(baton_rwlock_write(b), 0) == BATON_ELOCKED)
            ok++;
    }
    CHECK(ok == rounds);
    CHECK_RC(baton_lock_release(aw), 0);
    /* the read side alone keeps renewing */
    end = tl_now_ms() + 1000;
    rounds = ok = 0;
    while (tl_now_ms() < end) {
        tl_sleep_ms(250);
        rounds++;
        if (baton_lock_held(ar) && baton_lock_acquire(baton_rwlock_write(b), 0) == BATON_ELOCKED) ok++;
    }
    CHECK(ok == rounds);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(b), 0), 0);
    CHECK_RC(baton_lock_release(baton_rwlock_read(b)), 0);
    CHECK_RC(baton_lock_release(ar), 0);
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(b), 0), 0);
    baton_rwlock_free(a);
    baton_rwlock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

#define WRITERS 2
#define READERS 3
#define ROUNDS 15

static void test_processes(void) {
    char n[256], file[1200], m[16];
    lname(n, sizeof n, "procs");
    snprintf(file, sizeof file, "%s/rwcounter", g_tmp);
    snprintf(m, sizeof m, "%d", ROUNDS);
    tl_counter_init(file, 0);
    tl_worker w[WRITERS + READERS];
    for (int i = 0; i < WRITERS + READERS; i++) {
        char *argv[] = { "test_prims_rwlock", "--worker", "rw", g_uri, n, file, i < WRITERS ? "writer" : "reader", m, NULL };
        CHECK(tl_worker_spawn(&w[i], argv) == 0);
    }
    for (int i = 0; i < WRITERS + READERS; i++) CHECK(tl_exited_ok(tl_worker_reap(&w[i], 120000)));
    long v = tl_counter_read(file);
    CHECK(v == 2L * WRITERS * ROUNDS);
    if (v != 2L * WRITERS * ROUNDS) fprintf(stderr, "   counter %ld, want %d\n", v, 2 * WRITERS * ROUNDS);
}

/* Redis: Redisson's layout. A Redisson reader (hash K mode=read, its field,
 * its timeout key) shares with baton readers and holds baton writers off;
 * Redisson's unlock message wakes a waiting baton writer, whose hold is a
 * Redisson write hold. */
static void test_redisson_layout(void) {
    if (!g_redis_port) return;
    char n[256], tk[600], ch[400];
    lname(n, sizeof n, "redisson");
    const char *field = "2a1c6e0e-5c7e-4b0e-9a53-0d2b7f1f3c11:77";
    snprintf(tk, sizeof tk, "{%s}:%s:rwlock_timeout:1", n, field);
    snprintf(ch, sizeof ch, "redisson_rwlock:{%s}", n);
    free(redis_raw(g_redis_port, "HSET", n, "mode", "read", field, "1", NULL));
    free(redis_raw(g_redis_port, "SET", tk, "1", "PX", "30000", NULL));
    free(redis_raw(g_redis_port, "PEXPIRE", n, "30000", NULL));
    baton_client *c = client();
    baton_rwlock *a = rw_on(c, n, NULL), *w = rw_on(c, n, NULL);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(a), 0), 0);
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(w), 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(baton_rwlock_read(a)), 0);
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(w), 0), BATON_ELOCKED); /* the Redisson reader is alive */
    acq_thread t;
    acq_start(&t, baton_rwlock_write(w), 10000);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    int64_t t0 = tl_now_ms();
    free(redis_raw(g_redis_port, "DEL", n, tk, NULL));
    free(redis_raw(g_redis_port, redis_publish_cmd(), ch, "0", NULL));
    CHECK(acq_wait(&t, 5000));
    CHECK(t.t_done - t0 < 1500);
    CHECK_RC(t.rc, 0);
    char *r = redis_raw(g_redis_port, "HGET", n, "mode", NULL);
    CHECK(r && !strcmp(r, "$5\r\nwrite\r\n"));
    free(r);
    r = redis_raw(g_redis_port, "HKEYS", n, NULL);
    CHECK(r && strstr(r, ":write\r\n"));
    free(r);
    acq_join(&t);
    r = redis_raw(g_redis_port, "EXISTS", n, NULL);
    CHECK(r && !strcmp(r, ":0\r\n"));
    free(r);
    baton_rwlock_free(a);
    baton_rwlock_free(w);
    baton_client_close(c);
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && !strcmp(argv[1], "--worker")) {
        if (argc == 7 && !strcmp(argv[2], "hold")) return worker_hold(argv[3], argv[4], argv[5], (uint32_t)atoi(argv[6]));
        if (argc == 6 && !strcmp(argv[2], "waitw")) return worker_waitw(argv[3], argv[4], (uint32_t)atoi(argv[5]));
        if (argc == 8 && !strcmp(argv[2], "rw")) return worker_rw(argv[3], argv[4], argv[5], argv[6], atoi(argv[7]));
        fprintf(stderr, "bad worker arguments\n");
        return 2;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s URI\n", argv[0]);
        return 2;
    }
    int rc = pr_setup("rwlock", argv[1]);
    if (rc) return rc;
    {
        baton_client *c = client();
        baton_rwlock *rw = NULL;
        rc = baton_rwlock_open(&rw, c, "probe", NULL);
        baton_rwlock_free(rw);
        baton_client_close(c);
        if (rc == BATON_ENOTSUP) return tl_skip_status("this engine has no read-write lock", 1);
    }
    RUN(test_shared_exclusive);
    RUN(test_downgrade_no_upgrade);
    RUN(test_reentrant);
    RUN(test_writer_not_starved);
    RUN(test_writer_gives_up);
    RUN(test_killed_waiting_writer);
    if (strcmp(g_backend, "file")) {   /* leases: the file engine has none (the kernel frees on exit) */
        /* PostgreSQL's session locks live on the holder's connection, which
         * a stopped process keeps open: nothing ends them */
        if (strcmp(g_backend, "postgres")) RUN(test_sigstop_holders);
        RUN(test_renewal);
    }
    RUN(test_processes);
    RUN(test_redisson_layout);
    return th_finish();
}
