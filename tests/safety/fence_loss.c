/*
 * Fences above every earlier fence when the engine loses its data
 * (docs/fencing.md): a grant hands out max(counter + 1, server clock in µs).
 *
 *   test_safety_fence restart    a holder on a Redis without persistence; the
 *                                server restarts (everything is gone) and a
 *                                new client takes the same names: each of its
 *                                fences is strictly above the old holder's
 *                                (both layouts of the plain lock, the fair
 *                                lock, both sides of the read-write lock), and
 *                                the same on three RedLock nodes restarted empty
 *   test_safety_fence failover   a master and a replica; the replica's link
 *                                is cut (it lags from then on), the holder is
 *                                granted on the master, the replica is
 *                                promoted and a new client takes the names
 *                                there: its fences are strictly above
 *
 * Before the rule, both cases handed the second client the same fence as
 * the first (the counter started again from what the server had).
 */
#include "safety.h"

enum { K_PLAIN, K_SIMPLE, K_FAIR, K_WRITE, K_READ, K_N };
static const char *const kind_name[K_N] = { "plain", "simple", "fair", "rw-write", "rw-read" };

typedef struct {
    baton_lock *l;
    baton_rwlock *rw;
} holder;

typedef struct {
    baton_client *redisson, *simple;
} clients;

static void clients_open(clients *cl, int port) {
    char u[256];
    snprintf(u, sizeof u, "redis://127.0.0.1:%d/0?connect_timeout_ms=500&io_timeout_ms=2000", port);
    cl->redisson = sf_client(u);
    snprintf(u, sizeof u, "redis://127.0.0.1:%d/0?layout=simple&connect_timeout_ms=500&io_timeout_ms=2000", port);
    cl->simple = sf_client(u);
}

static void clients_close(clients *cl) {
    baton_client_close(cl->redisson);
    baton_client_close(cl->simple);
}

static void name_of(char *out, size_t n, int kind) { snprintf(out, n, "job-%s-%ld", kind_name[kind], (long)getpid()); }

/* Takes KIND's lock (try); 0 with *fence, or the error. */
static int take(const clients *cl, int kind, holder *h, uint64_t *fence) {
    char n[128];
    name_of(n, sizeof n, kind);
    memset(h, 0, sizeof *h);
    *fence = 0;
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.fair = kind == K_FAIR;
    int rc;
    if (kind == K_WRITE || kind == K_READ) {
        rc = baton_rwlock_open(&h->rw, cl->redisson, n, &o);
        if (rc) return rc;
        h->l = kind == K_WRITE ? baton_rwlock_write(h->rw) : baton_rwlock_read(h->rw);
    } else {
        rc = baton_lock_open(&h->l, kind == K_SIMPLE ? cl->simple : cl->redisson, n, &o);
        if (rc) return rc;
    }
    rc = baton_lock_acquire(h->l, kind == K_FAIR ? 2000 : 0);
    if (rc) {
        fprintf(stderr, "   %s: acquire %d (%s): %s\n", kind_name[kind], rc, baton_strerror(rc), tl_lastmsg());
        return rc;
    }
    *fence = baton_lock_fence(h->l);
    return 0;
}

static void drop(holder *h) {
    if (h->rw) baton_rwlock_free(h->rw);
    else if (h->l) baton_lock_free(h->l);
    memset(h, 0, sizeof *h);
}

/* ---- restart without persistence -------------------------------------------- */

static void test_restart_redis(void) {
    const char *dir = ft_dir("safety_fence_restart");
    int port = tl_server_start("redis", dir, NULL); /* redis.sh: no RDB, no AOF */
    clients a;
    clients_open(&a, port);
    holder ha[K_N];
    uint64_t fa[K_N];
    for (int k = 0; k < K_N; k++) CHECK_RC(take(&a, k, &ha[k], &fa[k]), 0);
    /* the holders keep holding ("A still runs"); the server loses everything */
    CHECK(tl_server_restart("redis", dir) == port);
    CHECK(sf_int(port, "DBSIZE") == 0);
    clients b;
    clients_open(&b, port);
    for (int k = 0; k < K_N; k++) {
        holder hb;
        uint64_t fb = 0;
        CHECK_RC(take(&b, k, &hb, &fb), 0);
        fprintf(stderr, "   %-8s holder before the restart: fence %llu, new holder: %llu\n", kind_name[k],
                (unsigned long long)fa[k], (unsigned long long)fb);
        CHECK(fb > fa[k]);
        /* the counter holds the new fence, so the next grant goes on above it */
        char n[128], key[200];
        name_of(n, sizeof n, k);
        snprintf(key, sizeof key, "%s:{%s}", k == K_SIMPLE ? "baton_fence" : "redisson_lock_token", n);
        redisReply *r = sf_cmd(port, "GET %s", key);
        char want[32];
        snprintf(want, sizeof want, "%llu", (unsigned long long)fb);
        CHECK(r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, want));
        if (r) freeReplyObject(r);
        drop(&hb);
    }
    for (int k = 0; k < K_N; k++) drop(&ha[k]);
    clients_close(&a);
    clients_close(&b);
    tl_server_stop("redis", dir);
}

/* Three RedLock nodes without persistence, all restarted empty while A holds. */
static void test_restart_redlock(void) {
    char dirs[3][256];
    int port[3];
    for (int i = 0; i < 3; i++) {
        char nm[64];
        snprintf(nm, sizeof nm, "safety_fence_rl%d", i);
        snprintf(dirs[i], sizeof dirs[i], "%s", ft_dir(nm));
        port[i] = tl_server_start("redis", dirs[i], NULL);
    }
    char u[512], n[64];
    snprintf(u, sizeof u, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/0?node_timeout_ms=200", port[0], port[1],
             port[2]);
    snprintf(n, sizeof n, "job-redlock-%ld", (long)getpid());
    baton_client *ca = sf_client(u);
    baton_lock *a = NULL, *b = NULL;
    CHECK_RC(baton_lock_open(&a, ca, n, NULL), 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t fa = baton_lock_fence(a);
    for (int i = 0; i < 3; i++) CHECK(tl_server_restart("redis", dirs[i]) == port[i]);
    baton_client *cb = sf_client(u);
    CHECK_RC(baton_lock_open(&b, cb, n, NULL), 0);
    CHECK_RC(baton_lock_acquire(b, 0), 0);
    uint64_t fb = baton_lock_fence(b);
    fprintf(stderr, "   redlock  holder before the restart: fence %llu, new holder: %llu\n", (unsigned long long)fa,
            (unsigned long long)fb);
    CHECK(fb > fa);
    baton_lock_free(b);
    baton_lock_free(a);
    baton_client_close(cb);
    baton_client_close(ca);
    for (int i = 0; i < 3; i++) tl_server_stop("redis", dirs[i]);
}

/* ---- failover to a lagging replica ------------------------------------------- */

static void test_failover(void) {
    const char *mdir = ft_dir("safety_fence_master"), *rdir = ft_dir("safety_fence_replica");
    int mport = tl_server_start("redis", mdir, NULL);
    char args[64];
    snprintf(args, sizeof args, "--replicaof 127.0.0.1 %d", mport);
    int rport = tl_server_start("redis", rdir, args);
    CHECK(sf_wait_link_up(rport) == 0);

    /* earlier grants, replicated: both servers know the counters */
    clients m;
    clients_open(&m, mport);
    for (int k = 0; k < K_N; k++) {
        holder h;
        uint64_t f;
        CHECK_RC(take(&m, k, &h, &f), 0);
        drop(&h);
    }
    /* (WAIT on a fresh connection would not wait for the clients' writes:
     * compare the counters themselves) */
    int synced = 0;
    for (int64_t end = tl_now_ms() + 10000; !synced && tl_now_ms() < end;) {
        synced = 1;
        for (int k = 0; k < K_N; k++) {
            char n[128], key[200];
            name_of(n, sizeof n, k);
            snprintf(key, sizeof key, "%s:{%s}", k == K_SIMPLE ? "baton_fence" : "redisson_lock_token", n);
            redisReply *x = sf_cmd(mport, "GET %s", key), *y = sf_cmd(rport, "GET %s", key);
            if (!x || !y || x->type != REDIS_REPLY_STRING || y->type != REDIS_REPLY_STRING || strcmp(x->str, y->str))
                synced = 0;
            if (x) freeReplyObject(x);
            if (y) freeReplyObject(y);
        }
        if (!synced) tl_sleep_ms(20);
    }
    CHECK(synced);

    /* the replica stops following: from now on it lags */
    redisReply *r = sf_cmd(rport, "REPLICAOF NO ONE");
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    if (r) freeReplyObject(r);

    /* A is granted on the master only */
    holder ha[K_N];
    uint64_t fa[K_N];
    for (int k = 0; k < K_N; k++) CHECK_RC(take(&m, k, &ha[k], &fa[k]), 0);

    /* the master is lost; the replica (promoted above) serves B */
    clients b;
    clients_open(&b, rport);
    for (int k = 0; k < K_N; k++) {
        holder hb;
        uint64_t fb = 0;
        CHECK_RC(take(&b, k, &hb, &fb), 0);
        fprintf(stderr, "   %-8s holder on the old master: fence %llu, on the promoted replica: %llu\n", kind_name[k],
                (unsigned long long)fa[k], (unsigned long long)fb);
        CHECK(fb > fa[k]);
        drop(&hb);
    }
    for (int k = 0; k < K_N; k++) drop(&ha[k]);
    clients_close(&m);
    clients_close(&b);
    tl_server_stop("redis", rdir);
    tl_server_stop("redis", mdir);
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && !strcmp(argv[1], "restart")) {
        RUN(test_restart_redis);
#ifdef BATON_TEST_HAVE_REDLOCK
        RUN(test_restart_redlock);
#endif
    } else if (argc == 2 && !strcmp(argv[1], "failover")) {
        RUN(test_failover);
    } else {
        fprintf(stderr, "usage: %s restart|failover\n", argv[0]);
        return 2;
    }
    return th_finish();
}
