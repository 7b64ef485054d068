/*
 * The permit-expirable semaphore on the file engine (one lock file per slot):
 *
 *   test_file_permits
 *
 * N permits and no more (the N+1th try is BATON_ELOCKED, also across
 * processes), distinct 32-hex-digit ids, release and renewal by id
 * (BATON_ENOTOWNER for unknown, released and other handles' ids), a
 * SIGKILLed holder's permit free again at once, waits woken by a release and
 * ended by a deadline or a cancel from another thread, a count lowered below
 * the permits in use, and what `baton run --permits N` does: try_set(N), then
 * acquire with a lease, renew it, release. The lease itself is ignored on
 * this engine (a permit lasts until released or its holder dies): checked
 * too, so a change to that is a decision, not an accident.
 */
#include "ft.h"

#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>

static baton_permits *permits_on(baton_client *c, const char *name) {
    baton_permits *p = NULL;
    MUST(baton_permits_open(&p, c, name));
    return p;
}

static int64_t avail(baton_permits *p) {
    uint64_t v = 999999;
    int rc = baton_permits_available(p, &v);
    CHECK_RC(rc, 0);
    return rc ? -1 : (int64_t)v;
}

static int is_id(const char *id) {
    return strlen(id) == 32 && strspn(id, "0123456789abcdef") == 32;
}

/* A thread running one permit acquire. */
typedef struct {
    baton_permits *p;
    int64_t wait_ms;
    int rc;
    char id[BATON_PERMIT_ID_SIZE];
    int64_t t_done;
    atomic_int done;
    pthread_t th;
} acq_thread;

static void *acq_main(void *a) {
    acq_thread *t = a;
    t->rc = baton_permits_acquire(t->p, 30000, t->wait_ms, t->id);
    t->t_done = tl_now_ms();
    atomic_store(&t->done, 1);
    return NULL;
}

static void acq_start(acq_thread *t, baton_permits *p, int64_t wait_ms) {
    memset(t, 0, sizeof *t);
    t->p = p;
    t->wait_ms = wait_ms;
    atomic_init(&t->done, 0);
    pthread_create(&t->th, NULL, acq_main, t);
}

static int acq_wait_done(acq_thread *t, int ms) {
    int64_t end = tl_now_ms() + ms;
    while (!atomic_load(&t->done) && tl_now_ms() < end) tl_sleep_ms(2);
    return atomic_load(&t->done);
}

static void acq_join(acq_thread *t) {
    if (!atomic_load(&t->done)) baton_permits_cancel(t->p);
    if (!acq_wait_done(t, 10000)) {
        fprintf(stderr, "FATAL: a permit acquire ignores cancel\n");
        th_failed++;
        exit(th_finish());
    }
    pthread_join(t->th, NULL);
}

/* N permits: N tries succeed with distinct ids, the next is refused. */
static void test_n_and_no_more(void) {
    enum { N = 3 };
    baton_client *c = client();
    baton_permits *p = permits_on(c, "n"), *q = permits_on(c, "n");
    char id[N + 1][BATON_PERMIT_ID_SIZE];
    int set = -1;
    CHECK(avail(p) == 0);
    CHECK_RC(baton_permits_acquire(p, 10000, 0, id[0]), BATON_ELOCKED);   /* never set: no permits */
    CHECK_RC(baton_permits_try_set(p, N, &set), 0);
    CHECK(set == 1);
    CHECK_RC(baton_permits_try_set(q, 7, &set), 0);
    CHECK(set == 0);
    CHECK(avail(q) == N);
    for (int i = 0; i < N; i++) {
        CHECK_RC(baton_permits_acquire(i % 2 ? q : p, 10000, 0, id[i]), 0);
        CHECK(is_id(id[i]));
        CHECK(avail(p) == N - 1 - i);
    }
    CHECK(strcmp(id[0], id[1]) && strcmp(id[0], id[2]) && strcmp(id[1], id[2]));
    CHECK_RC(baton_permits_acquire(p, 10000, 0, id[N]), BATON_ELOCKED);
    CHECK_RC(baton_permits_acquire(q, 10000, 0, id[N]), BATON_ELOCKED);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_permits_acquire(q, 10000, 300, id[N]), BATON_ETIMEDOUT);
    CHECK(tl_now_ms() - t0 >= 290);
    CHECK(tl_now_ms() - t0 < 1500);
    /* status shows what is free */
    baton_lockinfo info;
    CHECK_RC(baton_lock_info(c, "n", &info), 0);
    CHECK(info.permits == 0);
    CHECK_RC(baton_permits_release(p, id[0]), 0);
    CHECK(avail(q) == 1);
    CHECK_RC(baton_lock_info(c, "n", &info), 0);
    CHECK(info.permits == 1);
    CHECK_RC(baton_permits_acquire(q, 10000, 0, id[N]), 0);
    CHECK(avail(p) == 0);
    CHECK_RC(baton_permits_release(q, id[1]), 0);
    CHECK_RC(baton_permits_release(p, id[2]), 0);
    CHECK_RC(baton_permits_release(q, id[N]), 0);
    CHECK(avail(p) == N);
    baton_permits_free(p);
    baton_permits_free(q);
    baton_client_close(c);
}

/* Release and renewal by id. */
static void test_ids(void) {
    baton_client *c1 = client(), *c2 = client();
    baton_permits *p = permits_on(c1, "ids"), *q = permits_on(c2, "ids");
    char a[BATON_PERMIT_ID_SIZE], b[BATON_PERMIT_ID_SIZE];
    const char *unknown = "0123456789abcdef0123456789abcdef";
    CHECK_RC(baton_permits_try_set(p, 2, NULL), 0);
    CHECK_RC(baton_permits_acquire(p, 10000, 0, a), 0);
    CHECK_RC(baton_permits_acquire(q, 10000, 0, b), 0);
    CHECK_RC(baton_permits_renew(p, a, 10000), 0);
    CHECK_RC(baton_permits_renew(q, b, 10000), 0);
    CHECK_RC(baton_permits_release(p, unknown), BATON_ENOTOWNER);
    CHECK_RC(baton_permits_renew(p, unknown, 10000), BATON_ENOTOWNER);
    /* another handle's permit: its lock belongs to that handle's open file */
    CHECK_RC(baton_permits_release(p, b), BATON_ENOTOWNER);
    CHECK_RC(baton_permits_renew(p, b, 10000), BATON_ENOTOWNER);
    CHECK(avail(p) == 0);                       /* and nothing was given back */
    CHECK_RC(baton_permits_release(p, "not-an-id"), BATON_EINVAL);
    CHECK_RC(baton_permits_release(p, a), 0);
    CHECK_RC(baton_permits_release(p, a), BATON_ENOTOWNER);   /* already released */
    CHECK_RC(baton_permits_renew(p, a, 10000), BATON_ENOTOWNER);
    CHECK(avail(p) == 1);                       /* not counted twice */
    CHECK_RC(baton_permits_release(q, b), 0);
    CHECK(avail(q) == 2);
    /* ids stay distinct over many grants of the same slots */
    enum { K = 200 };
    static char seen[K][BATON_PERMIT_ID_SIZE];
    int dup = 0, bad = 0;
    for (int i = 0; i < K; i++) {
        if (baton_permits_acquire(i % 2 ? p : q, 10000, 0, seen[i]) != 0 || !is_id(seen[i])) bad++;
        for (int j = 0; j < i; j++)
            if (!strcmp(seen[i], seen[j])) dup++;
        if (baton_permits_release(i % 2 ? p : q, seen[i]) != 0) bad++;
    }
    CHECK(bad == 0);
    CHECK(dup == 0);
    /* freeing a handle hands back what it holds */
    CHECK_RC(baton_permits_acquire(p, 10000, 0, a), 0);
    CHECK_RC(baton_permits_acquire(p, 10000, 0, b), 0);
    CHECK(avail(q) == 0);
    baton_permits_free(p);
    CHECK(avail(q) == 2);
    baton_permits_free(q);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* A forked holder that is SIGKILLed gives its permit back at once: the
 * kernel drops its lock as the process dies, no lease to wait out. */
static void test_killed_holder(void) {
    baton_client *c = client();
    baton_permits *p = permits_on(c, "killed");
    char mine[BATON_PERMIT_ID_SIZE], id[BATON_PERMIT_ID_SIZE];
    CHECK_RC(baton_permits_try_set(p, 2, NULL), 0);
    CHECK_RC(baton_permits_acquire(p, 60000, 0, mine), 0);
    for (int round = 0; round < 2; round++) {
        int pfd[2];
        if (pipe(pfd)) { perror("pipe"); exit(1); }
        pid_t pid = fork();
        if (pid == 0) {
            close(pfd[0]);
            baton_client *cc = NULL;
            baton_permits *cp = NULL;
            char cid[BATON_PERMIT_ID_SIZE];
            if (baton_client_open(&cc, g_uri, NULL) || baton_permits_open(&cp, cc, "killed") ||
                baton_permits_acquire(cp, 60000, 5000, cid))
                _exit(2);
            if (write(pfd[1], cid, 32) != 32) _exit(3);
            for (;;) pause();
        }
        close(pfd[1]);
        char cid[BATON_PERMIT_ID_SIZE] = "";
        struct pollfd pl = { pfd[0], POLLIN, 0 };
        CHECK(poll(&pl, 1, 10000) == 1 && read(pfd[0], cid, 32) == 32);
        close(pfd[0]);
        CHECK(is_id(cid));
        CHECK(avail(p) == 0);
        CHECK_RC(baton_permits_acquire(p, 60000, 0, id), BATON_ELOCKED);
        if (round == 0) {
            /* nobody waiting: right after the kill, a try gets it */
            kill(pid, SIGKILL);
            int st;
            CHECK(waitpid(pid, &st, 0) == pid && WIFSIGNALED(st));
            CHECK(avail(p) == 1);
            CHECK_RC(baton_permits_acquire(p, 60000, 0, id), 0);
        } else {
            /* a waiter: gets it within a poll period of the kill */
            acq_thread t;
            acq_start(&t, p, 10000);
            tl_sleep_ms(300);
            CHECK(!atomic_load(&t.done));
            int64_t t0 = tl_now_ms();
            kill(pid, SIGKILL);
            int st;
            waitpid(pid, &st, 0);
            CHECK(acq_wait_done(&t, 5000));
            fprintf(stderr, "   a waiter got the killed holder's permit %lld ms after the kill\n",
                    (long long)(t.t_done - t0));
            CHECK(t.t_done - t0 < 1000);
            acq_join(&t);
            CHECK_RC(t.rc, 0);
            memcpy(id, t.id, sizeof id);
        }
        CHECK_RC(baton_permits_release(p, cid), BATON_ENOTOWNER);   /* the dead holder's id */
        CHECK_RC(baton_permits_release(p, id), 0);
    }
    CHECK_RC(baton_permits_release(p, mine), 0);
    CHECK(avail(p) == 2);
    baton_permits_free(p);
    baton_client_close(c);
}

/* Waits: woken by a release, ended by a cancel from another thread. */
static void test_waits(void) {
    baton_client *c1 = client(), *c2 = client();
    baton_permits *p = permits_on(c1, "waits"), *q = permits_on(c2, "waits");
    char id[BATON_PERMIT_ID_SIZE];
    CHECK_RC(baton_permits_try_set(p, 1, NULL), 0);
    CHECK_RC(baton_permits_acquire(p, 10000, 0, id), 0);
    acq_thread t;
    acq_start(&t, q, 10000);
    tl_sleep_ms(400);                                   /* its backoff has reached the cap */
    CHECK(!atomic_load(&t.done));
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_permits_release(p, id), 0);
    CHECK(acq_wait_done(&t, 5000));
    fprintf(stderr, "   a waiter got a released permit after %lld ms\n", (long long)(t.t_done - t0));
    /* within one poll (capped at 100 ms); 1.5 s leaves room for a loaded
     * machine and still fails a waiter that sits out its 10 s */
    CHECK(t.t_done - t0 < 1500);
    acq_join(&t);
    CHECK_RC(t.rc, 0);
    CHECK(is_id(t.id));
    /* cancel, waiting forever */
    acq_thread t2;
    acq_start(&t2, p, -1);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t2.done));
    t0 = tl_now_ms();
    CHECK_RC(baton_permits_cancel(p), 0);
    CHECK(acq_wait_done(&t2, 3000));
    CHECK(t2.t_done - t0 < 1000);   /* at once; generous for load, far below "never" */
    acq_join(&t2);
    CHECK_RC(t2.rc, BATON_ECANCELED);
    CHECK(t2.id[0] == 0);
    /* a cancel is not sticky: the next acquire waits again */
    CHECK_RC(baton_permits_release(q, t.id), 0);
    CHECK_RC(baton_permits_acquire(p, 10000, 1000, id), 0);
    CHECK_RC(baton_permits_release(p, id), 0);
    baton_permits_free(p);
    baton_permits_free(q);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* The lease is ignored: a permit lasts until it is released. */
static void test_lease_ignored(void) {
    baton_client *c = client();
    baton_permits *p = permits_on(c, "lease");
    char id[BATON_PERMIT_ID_SIZE], id2[BATON_PERMIT_ID_SIZE];
    CHECK_RC(baton_permits_try_set(p, 1, NULL), 0);
    CHECK_RC(baton_permits_acquire(p, 100, 0, id), 0);
    tl_sleep_ms(400);
    CHECK(avail(p) == 0);
    CHECK_RC(baton_permits_acquire(p, 10000, 0, id2), BATON_ELOCKED);
    CHECK_RC(baton_permits_renew(p, id, 100), 0);
    CHECK_RC(baton_permits_release(p, id), 0);
    baton_permits_free(p);
    baton_client_close(c);
}

/* A count lowered below the permits in use grants nobody until enough
 * holders have left; raised again, it grants at once. */
static void test_count_changes(void) {
    baton_client *c = client();
    baton_permits *p = permits_on(c, "count");
    char a[BATON_PERMIT_ID_SIZE], b[BATON_PERMIT_ID_SIZE], x[BATON_PERMIT_ID_SIZE];
    CHECK_RC(baton_permits_try_set(p, 0, NULL), 0);
    CHECK_RC(baton_permits_acquire(p, 10000, 0, x), BATON_ELOCKED);       /* a count of 0 */
    CHECK_RC(baton_permits_add(p, 2), 0);
    CHECK(avail(p) == 2);
    CHECK_RC(baton_permits_acquire(p, 10000, 0, a), 0);
    CHECK_RC(baton_permits_acquire(p, 10000, 0, b), 0);
    CHECK_RC(baton_permits_add(p, -1), 0);                                /* 1 permit, 2 in use */
    CHECK(avail(p) == 0);
    CHECK_RC(baton_permits_release(p, a), 0);                             /* slot 0 (or 1) is free ... */
    CHECK(avail(p) == 0);
    CHECK_RC(baton_permits_acquire(p, 10000, 0, x), BATON_ELOCKED);       /* ... but the count is used up */
    CHECK_RC(baton_permits_release(p, b), 0);
    CHECK(avail(p) == 1);
    CHECK_RC(baton_permits_acquire(p, 10000, 0, a), 0);
    CHECK_RC(baton_permits_acquire(p, 10000, 0, x), BATON_ELOCKED);
    CHECK_RC(baton_permits_add(p, 1), 0);
    CHECK_RC(baton_permits_acquire(p, 10000, 0, b), 0);
    CHECK_RC(baton_permits_release(p, a), 0);
    CHECK_RC(baton_permits_release(p, b), 0);
    CHECK(avail(p) == 2);
    int set = -1;
    CHECK_RC(baton_permits_try_set(p, 5, &set), 0);
    CHECK(set == 0);
    baton_permits *r = permits_on(c, "count-range");
    CHECK_RC(baton_permits_try_set(r, 2000000, NULL), BATON_EINVAL);
    CHECK_RC(baton_permits_add(r, 2000000), BATON_EINVAL);
    baton_permits_free(r);
    baton_permits_free(p);
    baton_client_close(c);
}

/* What `baton run --permits N NAME` does in each process: try_set(N) (only
 * the first sets it), acquire with a lease while waiting, renew the lease
 * now and then, release at exit. N processes at most inside at once. */
#define PROCS 5
#define ITERS 12
#define NPERM 2

static void inside_add(const char *path, const char *maxpath, int delta) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    char buf[32] = { 0 };
    if (fd < 0) _exit(4);
    while (flock(fd, LOCK_EX) && errno == EINTR) {
    }
    ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
    long v = (r > 0 ? strtol(buf, NULL, 10) : 0) + delta;
    int n = snprintf(buf, sizeof buf, "%ld\n", v);
    if (ftruncate(fd, 0) || pwrite(fd, buf, (size_t)n, 0) != n) _exit(4);
    if (maxpath) {
        int mf = open(maxpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        char mb[32] = { 0 };
        if (mf < 0) _exit(4);
        r = pread(mf, mb, sizeof mb - 1, 0);
        if ((r > 0 ? strtol(mb, NULL, 10) : 0) < v) {
            n = snprintf(mb, sizeof mb, "%ld\n", v);
            if (ftruncate(mf, 0) || pwrite(mf, mb, (size_t)n, 0) != n) _exit(4);
        }
        close(mf);
    }
    flock(fd, LOCK_UN);
    close(fd);
}

static int run_like_cli(const char *inside, const char *maxfile) {
    int bad = 0;
    for (int i = 0; i < ITERS; i++) {
        baton_client *c = NULL;
        baton_permits *p = NULL;
        char id[BATON_PERMIT_ID_SIZE];
        if (baton_client_open(&c, g_uri, NULL) || baton_permits_open(&p, c, "cli")) return 10;
        if (baton_permits_try_set(p, NPERM, NULL)) bad++;
        int rc = baton_permits_acquire(p, 30000, 20000, id);
        if (rc) {
            fprintf(stderr, "   child %ld: acquire %d (%s)\n", (long)getpid(), rc, baton_error_last()->message);
            return 11;
        }
        inside_add(inside, maxfile, 1);
        for (int k = 0; k < 3; k++) {
            usleep(1000);
            if (baton_permits_renew(p, id, 30000)) bad++;
        }
        inside_add(inside, NULL, -1);
        if (baton_permits_release(p, id)) bad++;
        baton_permits_free(p);
        baton_client_close(c);
    }
    return bad ? 12 : 0;
}

static void test_like_baton_run(void) {
    char inside[1200], maxfile[1200];
    snprintf(inside, sizeof inside, "%s/inside", g_dir);
    snprintf(maxfile, sizeof maxfile, "%s/inside.max", g_dir);
    unlink(inside);
    unlink(maxfile);
    pid_t pids[PROCS];
    for (int i = 0; i < PROCS; i++) {
        pids[i] = fork();
        if (pids[i] == 0) _exit(run_like_cli(inside, maxfile));
    }
    int ok = 0;
    for (int i = 0; i < PROCS; i++) {
        int st = 0;
        waitpid(pids[i], &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) ok++;
        else fprintf(stderr, "   child %d: status %#x\n", i, st);
    }
    CHECK(ok == PROCS);
    FILE *f = fopen(maxfile, "r");
    long mx = -1;
    if (f) {
        if (fscanf(f, "%ld", &mx) != 1) mx = -1;
        fclose(f);
    }
    fprintf(stderr, "   at most %ld of %d processes held a permit at once (%d permits)\n", mx, PROCS, NPERM);
    CHECK(mx >= 1 && mx <= NPERM);
    baton_client *c = client();
    baton_permits *p = permits_on(c, "cli");
    CHECK(avail(p) == NPERM);
    baton_permits_free(p);
    baton_client_close(c);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    ft_setup("file_permits");
    RUN(test_n_and_no_more);
    RUN(test_ids);
    RUN(test_killed_holder);
    RUN(test_waits);
    RUN(test_lease_ignored);
    RUN(test_count_changes);
    RUN(test_like_baton_run);
    return th_finish();
}
