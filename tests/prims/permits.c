/*
 * The permit-expirable semaphore suite:
 *
 *   test_prims_permits URI
 *
 * Ids (32 hex digits), release and renewal by id, BATON_ENOTOWNER for
 * unknown, released and expired ids, expired permits returning to the pool
 * by themselves (also to a waiter: no release needed), waits woken by a
 * release, the permit count under N processes, a SIGKILLed holder's permit
 * coming back after its lease; on Redis, the ids are stored as raw 16-byte
 * members (Redisson's layout). "{port}" in URI is the port of its
 * engine's test server. An engine without permit-expirable semaphores is a skip.
 */
#include "prims.h"

static baton_permits *permits_on(baton_client *c, const char *name) {
    baton_permits *p = NULL;
    MUST(baton_permits_open(&p, c, name));
    return p;
}

static uint64_t avail(baton_permits *p) {
    uint64_t v = 999999;
    CHECK_RC(baton_permits_available(p, &v), 0);
    return v;
}

static int is_id(const char *id) {
    return strlen(id) == 32 && strspn(id, "0123456789abcdef") == 32;
}

/* A thread running one permit acquire. */
typedef struct {
    baton_permits *p;
    uint32_t lease;
    int64_t wait_ms;
    int rc;
    char id[BATON_PERMIT_ID_SIZE];
    int64_t t_done;
    atomic_int done;
    pthread_t th;
} permit_thread;

static void *permit_main(void *a) {
    permit_thread *t = a;
    t->rc = baton_permits_acquire(t->p, t->lease, t->wait_ms, t->id);
    t->t_done = tl_now_ms();
    atomic_store(&t->done, 1);
    return NULL;
}

static void permit_start(permit_thread *t, baton_permits *p, uint32_t lease, int64_t wait_ms) {
    memset(t, 0, sizeof *t);
    t->p = p;
    t->lease = lease;
    t->wait_ms = wait_ms;
    atomic_init(&t->done, 0);
    pthread_create(&t->th, NULL, permit_main, t);
}

static int permit_wait_done(permit_thread *t, int ms) {
    int64_t end = tl_now_ms() + ms;
    while (!atomic_load(&t->done) && tl_now_ms() < end) tl_sleep_ms(2);
    return atomic_load(&t->done);
}

static void permit_join(permit_thread *t) {
    if (!atomic_load(&t->done)) baton_permits_cancel(t->p);
    if (!permit_wait_done(t, 10000)) {
        fprintf(stderr, "FATAL: a permit acquire ignores cancel\n");
        th_failed++;
        exit(th_finish());
    }
    pthread_join(t->th, NULL);
}

/* ---- workers ----------------------------------------------------------------------------- */

static int worker_permit(const char *uri, const char *name, const char *file, const char *maxfile, int m) {
    baton_client *c = tl_client_open(uri);
    baton_permits *p = permits_on(c, name);
    int bad = 0;
    for (int i = 0; i < m; i++) {
        char id[BATON_PERMIT_ID_SIZE];
        int rc = baton_permits_acquire(p, 20000, 60000, id);
        if (rc) {
            fprintf(stderr, "worker: acquire %d (%s)\n", rc, baton_strerror(rc));
            bad = 1;
            break;
        }
        tl_counter_add(file, 1, maxfile);
        usleep(3000);
        tl_counter_add(file, -1, NULL);
        if ((rc = baton_permits_release(p, id)) != 0) {
            fprintf(stderr, "worker: release %d (%s)\n", rc, baton_strerror(rc));
            bad = 1;
        }
    }
    baton_permits_free(p);
    baton_client_close(c);
    return bad;
}

/* Takes a permit with LEASE, prints ID <id>, waits for EXIT. */
static int worker_holdpermit(const char *uri, const char *name, uint32_t lease) {
    baton_client *c = tl_client_open(uri);
    baton_permits *p = permits_on(c, name);
    char id[BATON_PERMIT_ID_SIZE];
    int rc = baton_permits_acquire(p, lease, 10000, id);
    if (rc) {
        tl_out_line("ERR %d\n", rc);
        return 2;
    }
    tl_out_line("ID %s\n", id);
    tl_wait_for_line("EXIT");
    baton_permits_free(p);
    baton_client_close(c);
    return 0;
}

/* ---- cases --------------------------------------------------------------------------------- */

static void test_ids(void) {
    char n[256];
    lname(n, sizeof n, "ids");
    baton_client *c1 = client(), *c2 = client();
    baton_permits *p = permits_on(c1, n), *q = permits_on(c2, n);
    char id1[BATON_PERMIT_ID_SIZE], id2[BATON_PERMIT_ID_SIZE], id3[BATON_PERMIT_ID_SIZE];
    CHECK(avail(p) == 0);
    CHECK_RC(baton_permits_acquire(p, 10000, 0, id1), BATON_ELOCKED);
    int set = -1;
    CHECK_RC(baton_permits_try_set(p, 2, &set), 0);
    CHECK(set == 1);
    CHECK_RC(baton_permits_try_set(q, 7, &set), 0);
    CHECK(set == 0);
    CHECK(avail(q) == 2);
    CHECK_RC(baton_permits_acquire(p, 10000, 0, id1), 0);
    CHECK(is_id(id1));
    CHECK_RC(baton_permits_acquire(q, 10000, 0, id2), 0);
    CHECK(is_id(id2));
    CHECK(strcmp(id1, id2) != 0);
    CHECK(avail(p) == 0);
    CHECK_RC(baton_permits_acquire(q, 10000, 0, id3), BATON_ELOCKED);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_permits_acquire(q, 10000, 300, id3), BATON_ETIMEDOUT);
    CHECK(tl_now_ms() - t0 >= 250);
    /* release by id, from any client */
    CHECK_RC(baton_permits_release(q, id1), 0);
    CHECK(avail(p) == 1);
    CHECK_RC(baton_permits_release(p, id1), BATON_ENOTOWNER);  /* already released */
    CHECK_RC(baton_permits_renew(p, id1, 5000), BATON_ENOTOWNER);
    CHECK_RC(baton_permits_release(p, "0123456789abcdef0123456789abcdef"), BATON_ENOTOWNER);
    CHECK_RC(baton_permits_release(p, "not-an-id"), BATON_EINVAL);
    CHECK_RC(baton_permits_release(p, "0123456789ABCDEF0123456789ABCDEF"), BATON_EINVAL);
    CHECK_RC(baton_permits_acquire(p, 0, 0, id3), BATON_EINVAL); /* a permit needs a lease */
    CHECK_RC(baton_permits_renew(p, id2, 10000), 0);
    CHECK(avail(p) == 1);
    CHECK_RC(baton_permits_add(p, 2), 0);
    CHECK(avail(q) == 3);
    CHECK_RC(baton_permits_add(p, -3), 0);
    CHECK(avail(q) == 0);
    CHECK_RC(baton_permits_release(p, id2), 0);
    CHECK(avail(q) == 1);
    baton_permits_free(p);
    baton_permits_free(q);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_expiry(void) {
    if (g_session_ms) {
        /* a session engine's permit lasts as long as its holder's session */
        fprintf(stderr, "   skipped: %s permits end with their session, not a lease\n", g_backend);
        return;
    }
    char n[256];
    lname(n, sizeof n, "expiry");
    baton_client *c = client();
    baton_permits *p = permits_on(c, n);
    int set;
    CHECK_RC(baton_permits_try_set(p, 1, &set), 0);
    char id[BATON_PERMIT_ID_SIZE], id2[BATON_PERMIT_ID_SIZE];
    CHECK_RC(baton_permits_acquire(p, 300, 0, id), 0);
    CHECK(avail(p) == 0);
    tl_sleep_ms(600);
    CHECK(avail(p) == 1);                                   /* back by itself */
    CHECK_RC(baton_permits_release(p, id), BATON_ENOTOWNER); /* expired */
    CHECK_RC(baton_permits_renew(p, id, 1000), BATON_ENOTOWNER);
    CHECK(avail(p) == 1);                                   /* and not counted twice */
    /* renewal keeps a permit past its first lease */
    CHECK_RC(baton_permits_acquire(p, 400, 0, id), 0);
    int64_t end = tl_now_ms() + 1200;
    int renewed = 0, rounds = 0;
    while (tl_now_ms() < end) {
        tl_sleep_ms(150);
        rounds++;
        if (baton_permits_renew(p, id, 400) == 0) renewed++;
    }
    CHECK(renewed == rounds);
    CHECK(avail(p) == 0);
    CHECK_RC(baton_permits_acquire(p, 1000, 0, id2), BATON_ELOCKED);
    CHECK_RC(baton_permits_release(p, id), 0);
    CHECK(avail(p) == 1);
    baton_permits_free(p);
    baton_client_close(c);
}

static void test_waits(void) {
    char n[256];
    lname(n, sizeof n, "waits");
    baton_client *c1 = client(), *c2 = client();
    baton_permits *p = permits_on(c1, n), *q = permits_on(c2, n);
    int set;
    CHECK_RC(baton_permits_try_set(p, 1, &set), 0);
    char id[BATON_PERMIT_ID_SIZE];
    /* a waiter gets the permit when the holder's lease runs out: nobody
     * releases, nobody publishes */
    CHECK_RC(baton_permits_acquire(p, 500, 0, id), 0);
    permit_thread t;
    int64_t t0 = tl_now_ms();
    permit_start(&t, q, 10000, 5000);
    if (g_session_ms) {
        /* no lease to run out: the holder gives it back */
        tl_sleep_ms(400);
        CHECK(!atomic_load(&t.done));
        CHECK_RC(baton_permits_release(p, id), 0);
    }
    CHECK(permit_wait_done(&t, 6000));
    int64_t el = t.t_done - t0;
    fprintf(stderr, "   the waiter got the permit after %lld ms (lease 500 ms)\n", (long long)el);
    CHECK(el >= 300 && el < 2500);
    permit_join(&t);
    CHECK_RC(t.rc, 0);
    CHECK(is_id(t.id));
    /* a waiter woken by a release (t's permit has a 10 s lease) */
    permit_thread t2;
    permit_start(&t2, p, 10000, 10000);
    tl_sleep_ms(200);
    CHECK(!atomic_load(&t2.done));
    t0 = tl_now_ms();
    CHECK_RC(baton_permits_release(q, t.id), 0);
    CHECK(permit_wait_done(&t2, 5000));
    CHECK(t2.t_done - t0 < 1500);
    permit_join(&t2);
    CHECK_RC(t2.rc, 0);
    CHECK_RC(baton_permits_release(p, t2.id), 0);
    CHECK(avail(p) == 1);
    /* cancel */
    CHECK_RC(baton_permits_acquire(p, 10000, 0, id), 0);
    permit_start(&t2, q, 10000, -1);
    tl_sleep_ms(200);
    t0 = tl_now_ms();
    CHECK_RC(baton_permits_cancel(q), 0);
    CHECK(permit_wait_done(&t2, 3000));
    CHECK(t2.t_done - t0 < 1000);
    permit_join(&t2);
    CHECK_RC(t2.rc, BATON_ECANCELED);
    CHECK_RC(baton_permits_release(p, id), 0);
    baton_permits_free(p);
    baton_permits_free(q);
    baton_client_close(c1);
    baton_client_close(c2);
}

#define PERMITS 2
#define PROCS 4
#define ITERS 8

static void test_processes(void) {
    char n[256], file[1200], maxfile[1200], m[16];
    lname(n, sizeof n, "procs");
    snprintf(file, sizeof file, "%s/inside", g_tmp);
    snprintf(maxfile, sizeof maxfile, "%s/inside.max", g_tmp);
    snprintf(m, sizeof m, "%d", ITERS);
    tl_counter_init(file, 0);
    tl_counter_init(maxfile, 0);
    baton_client *c = client();
    baton_permits *p = permits_on(c, n);
    int set;
    CHECK_RC(baton_permits_try_set(p, PERMITS, &set), 0);
    tl_worker w[PROCS];
    for (int i = 0; i < PROCS; i++) {
        char *argv[] = { "test_prims_permits", "--worker", "permit", g_uri, n, file, maxfile, m, NULL };
        CHECK(tl_worker_spawn(&w[i], argv) == 0);
    }
    for (int i = 0; i < PROCS; i++) CHECK(tl_exited_ok(tl_worker_reap(&w[i], 120000)));
    long mx = tl_counter_read(maxfile);
    fprintf(stderr, "   at most %ld of %d processes held a permit at once (%d permits)\n", mx, PROCS, PERMITS);
    CHECK(mx >= 1 && mx <= PERMITS);
    CHECK(avail(p) == PERMITS);
    baton_permits_free(p);
    baton_client_close(c);
}

static void test_killed_holder(void) {
    char n[256], line[128];
    lname(n, sizeof n, "killed");
    const uint32_t lease = expire_ms(800);
    baton_client *c = client();
    baton_permits *p = permits_on(c, n);
    int set;
    CHECK_RC(baton_permits_try_set(p, 1, &set), 0);
    tl_worker w;
    char ls[16];
    snprintf(ls, sizeof ls, "%u", lease);
    char *argv[] = { "test_prims_permits", "--worker", "holdpermit", g_uri, n, ls, NULL };
    CHECK(tl_worker_spawn(&w, argv) == 0);
    CHECK(tl_expect_line(&w, "ID ", line, sizeof line, 15000) == 0);
    char wid[BATON_PERMIT_ID_SIZE];
    snprintf(wid, sizeof wid, "%.32s", line + 3);
    CHECK(is_id(wid));
    char id[BATON_PERMIT_ID_SIZE];
    CHECK_RC(baton_permits_acquire(p, 10000, 0, id), BATON_ELOCKED);
    kill(w.pid, SIGKILL);
    int64_t t0 = tl_now_ms();
    CHECK(WIFSIGNALED(tl_worker_reap(&w, 10000)));
    CHECK_RC(baton_permits_acquire(p, 10000, lease + 5000, id), 0);
    CHECK(tl_now_ms() - t0 < lease + 2500);
    CHECK_RC(baton_permits_release(p, wid), BATON_ENOTOWNER); /* the dead holder's id is gone */
    CHECK_RC(baton_permits_release(p, id), 0);
    baton_permits_free(p);
    baton_client_close(c);
}

/* Redis: Redisson stores ids as raw 16-byte zset members. */
static void test_raw_ids(void) {
    if (!g_redis_port) return;
    char n[256];
    lname(n, sizeof n, "raw");
    baton_client *c = client();
    baton_permits *p = permits_on(c, n);
    int set;
    CHECK_RC(baton_permits_try_set(p, 1, &set), 0);
    char id[BATON_PERMIT_ID_SIZE];
    CHECK_RC(baton_permits_acquire(p, 10000, 0, id), 0);
    rcli r;
    CHECK(rcli_open(&r, g_redis_port) == 0);
    char key[1200];
    snprintf(key, sizeof key, "{%s}:timeout", n);
    const char *argv[4] = { "ZRANGE", key, "0", "-1" };
    char *rep = rcli_cmd(&r, 4, argv, NULL);
    /* *1\r\n$16\r\n<16 bytes>\r\n */
    CHECK(rep && !strncmp(rep, "*1\r\n$16\r\n", 9));
    if (rep && !strncmp(rep, "*1\r\n$16\r\n", 9)) {
        char hex[33];
        for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)rep[9 + i]);
        CHECK(!strcmp(hex, id));
    }
    free(rep);
    const char *g[2] = { "GET", n };
    rep = rcli_cmd(&r, 2, g, NULL);
    CHECK(rep && !strcmp(rep, "$1\r\n0\r\n"));
    free(rep);
    rcli_close(&r);
    CHECK_RC(baton_permits_release(p, id), 0);
    baton_permits_free(p);
    baton_client_close(c);
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && !strcmp(argv[1], "--worker")) {
        if (argc == 8 && !strcmp(argv[2], "permit")) return worker_permit(argv[3], argv[4], argv[5], argv[6], atoi(argv[7]));
        if (argc == 6 && !strcmp(argv[2], "holdpermit")) return worker_holdpermit(argv[3], argv[4], (uint32_t)atoi(argv[5]));
        fprintf(stderr, "bad worker arguments\n");
        return 2;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s URI\n", argv[0]);
        return 2;
    }
    int rc = pr_setup("permits", argv[1]);
    if (rc) return rc;
    {
        baton_client *c = client();
        baton_permits *p = NULL;
        rc = baton_permits_open(&p, c, "probe");
        baton_permits_free(p);
        baton_client_close(c);
        if (rc == BATON_ENOTSUP) return tl_skip_status("this engine has no permit-expirable semaphore", 1);
    }
    RUN(test_ids);
    RUN(test_expiry);
    RUN(test_waits);
    RUN(test_processes);
    RUN(test_killed_holder);
    RUN(test_raw_ids);
    return th_finish();
}
