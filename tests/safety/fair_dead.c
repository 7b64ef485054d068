/*
 * A fair release (or a waiter leaving the queue) must not hand the lock to a
 * dead waiter whose queue entry already expired: every script that hands the
 * lock to the queue's head drops the expired entries first.
 *
 *   test_safety_fair_dead release   end to end: A holds a fair lock (lease
 *                                   2 s); a waiter W queues in another process
 *                                   and is SIGKILLed; once W's entry is past its
 *                                   deadline A releases, and C, who asks right
 *                                   after, gets the lock at once (before the
 *                                   purge, the release handed it to the dead W
 *                                   and C waited W's whole lease, ~2 s)
 *   test_safety_fair_dead scripts   the release and leave scripts themselves
 *                                   (EVAL of scripts.h) on a queue whose head
 *                                   entry expired: the next live entry gets it
 *
 * The end-to-end case needs the C side to pass the timeout zset to the fair
 * release script as KEYS[3] (locks.c, baton__redis_fair_release).
 *
 * Worker (re-executed from /proc/self/exe):
 *   test_safety_fair_dead --worker wait URI NAME LEASE_MS   waits for the fair lock
 */
#include "safety.h"
#include "backends/redis/scripts.h"

static int g_port;
static char g_uri[256];

static baton_lock *fair_lock(baton_client *c, const char *name, uint32_t lease_ms) {
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.fair = 1;
    o.lease_ms = lease_ms;
    baton_lock *l = NULL;
    int rc = baton_lock_open(&l, c, name, &o);
    if (rc) {
        fprintf(stderr, "FATAL: baton_lock_open(%s) = %d: %s\n", name, rc, tl_lastmsg());
        exit(1);
    }
    return l;
}

static int worker_wait(const char *uri, const char *name, uint32_t lease_ms) {
    baton_client *c = sf_client(uri);
    baton_lock *l = fair_lock(c, name, lease_ms);
    int rc = baton_lock_acquire(l, 60000);
    fprintf(stderr, "worker: acquire %d\n", rc);
    return rc == 0 ? 0 : 1;
}

/* ---- end to end --------------------------------------------------------------------- */

static void test_release_skips_dead_waiter(void) {
    char n[128], q[200], tq[200];
    snprintf(n, sizeof n, "fair-dead-%ld", (long)getpid());
    snprintf(q, sizeof q, "redisson_lock_queue:{%s}", n);
    snprintf(tq, sizeof tq, "redisson_lock_timeout:{%s}", n);
    baton_client *ca = sf_client(g_uri), *cc = sf_client(g_uri);
    baton_lock *a = fair_lock(ca, n, 2000), *c = fair_lock(cc, n, 2000);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t fa = baton_lock_fence(a);

    char lease[16];
    snprintf(lease, sizeof lease, "2000");
    char *argv[] = { "test_safety_fair_dead", "--worker", "wait", g_uri, n, lease, NULL };
    pid_t w = tl_spawn_self(argv, NULL);
    CHECK(w > 0);
    int queued = 0;
    for (int64_t end = tl_now_ms() + 10000; !queued && tl_now_ms() < end;) {
        queued = sf_int(g_port, "LLEN %s", q) == 1;
        if (!queued) tl_sleep_ms(10);
    }
    CHECK(queued);
    kill(w, SIGKILL);
    int st;
    waitpid(w, &st, 0);
    int64_t killed = tl_now_ms();

    /* W's entry expires at most one entry lease (2 s) after its last refresh */
    int expired = 0;
    for (int64_t end = tl_now_ms() + 5000; !expired && tl_now_ms() < end;) {
        redisReply *r = sf_cmd(g_port, "ZRANGE %s 0 0 WITHSCORES", tq);
        long long now = sf_server_ms(g_port);
        expired = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && atoll(r->element[1]->str) < now - 50;
        if (r) freeReplyObject(r);
        if (!expired) tl_sleep_ms(20);
    }
    CHECK(expired);
    fprintf(stderr, "   W's entry expired %lld ms after the kill\n", (long long)(tl_now_ms() - killed));
    CHECK(sf_int(g_port, "LLEN %s", q) == 1); /* nobody ran an acquire since: the dead entry is still there */
    CHECK(baton_lock_held(a) == 1);

    CHECK_RC(baton_lock_release(a), 0);
    int64_t t0 = tl_now_ms();
    int rc = baton_lock_acquire(c, 5000);
    int64_t took = tl_now_ms() - t0;
    fprintf(stderr, "   release -> C granted: %lld ms (rc %d)\n", (long long)took, rc);
    CHECK_RC(rc, 0);
    CHECK(took < 1000);
    CHECK(baton_lock_fence(c) > fa);
    CHECK(sf_int(g_port, "LLEN %s", q) == 0);
    baton_lock_free(c);
    baton_lock_free(a);
    baton_client_close(cc);
    baton_client_close(ca);
}

/* ---- the scripts ----------------------------------------------------------------------- */

typedef struct {
    char k[128], q[200], t[200], ch[200];
    char dead[256], live[256];
} fixture;

/* Queue: [dead W (deadline passed), live C]. */
static void fixture_make(fixture *f, const char *tag) {
    snprintf(f->k, sizeof f->k, "fd-%s-%ld", tag, (long)getpid());
    snprintf(f->q, sizeof f->q, "redisson_lock_queue:{%s}", f->k);
    snprintf(f->t, sizeof f->t, "redisson_lock_timeout:{%s}", f->k);
    snprintf(f->ch, sizeof f->ch, "redisson_lock__channel:{%s}", f->k);
    snprintf(f->dead, sizeof f->dead, "wuuid:1|101|2000|host 1 1");
    snprintf(f->live, sizeof f->live, "cuuid:1|102|2000|host 2 2");
    long long now = sf_server_ms(g_port);
    freeReplyObject(sf_cmd(g_port, "DEL %s %s %s", f->k, f->q, f->t));
    freeReplyObject(sf_cmd(g_port, "RPUSH %s %s %s", f->q, f->dead, f->live));
    freeReplyObject(sf_cmd(g_port, "ZADD %s %lld %s %lld %s", f->t, now - 1000, f->dead, now + 60000, f->live));
}

static long long eval(const char *body, int nkeys, const char **keys, int nargs, const char **args) {
    const char *argv[16];
    char nk[8];
    snprintf(nk, sizeof nk, "%d", nkeys);
    int n = 0;
    argv[n++] = "EVAL";
    argv[n++] = body;
    argv[n++] = nk;
    for (int i = 0; i < nkeys; i++) argv[n++] = keys[i];
    for (int i = 0; i < nargs; i++) argv[n++] = args[i];
    redisReply *r = sf_cmdv(g_port, n, argv);
    long long v = LLONG_MIN;
    if (r && r->type == REDIS_REPLY_INTEGER) v = r->integer;
    else fprintf(stderr, "   EVAL: %s\n", r && r->str ? r->str : "no reply");
    if (r) freeReplyObject(r);
    return v;
}

/* The live entry holds the lock (with its ticket), the dead one does not,
 * both entries are gone from the queue and the dead one from the zset. */
static void check_handed_to_live(const fixture *f) {
    redisReply *r = sf_cmd(g_port, "HGET %s cuuid:1", f->k);
    CHECK(r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "102"));
    if (r) freeReplyObject(r);
    CHECK(sf_int(g_port, "HEXISTS %s wuuid:1", f->k) == 0);
    CHECK(sf_int(g_port, "LLEN %s", f->q) == 0);
    r = sf_cmd(g_port, "ZSCORE %s %s", f->t, f->dead);
    CHECK(r && r->type == REDIS_REPLY_NIL);
    if (r) freeReplyObject(r);
}

static void test_release_script(void) {
    fixture f;
    fixture_make(&f, "rel");
    freeReplyObject(sf_cmd(g_port, "HSET %s auuid:1 1 baton:holder a", f.k));
    const char *keys[3] = { f.k, f.q, f.t };
    const char *args[2] = { "auuid:1", f.ch };
    CHECK(eval(BATON_LUA_FAIR_REL, 3, keys, 2, args) == 1);
    check_handed_to_live(&f);

    /* called the old way (two keys, no timeout zset): still a release */
    fixture_make(&f, "rel2");
    freeReplyObject(sf_cmd(g_port, "HSET %s auuid:1 1 baton:holder a", f.k));
    const char *keys2[2] = { f.k, f.q };
    CHECK(eval(BATON_LUA_FAIR_REL, 2, keys2, 2, args) == 1);
    CHECK(sf_int(g_port, "HEXISTS %s auuid:1", f.k) == 0);
    CHECK(sf_int(g_port, "EXISTS %s", f.k) == 1); /* handed to the head */
    freeReplyObject(sf_cmd(g_port, "DEL %s %s %s", f.k, f.q, f.t));
}

static void test_leave_script(void) {
    /* L was handed the lock and gives up: it passes the lock on */
    fixture f;
    fixture_make(&f, "leave");
    freeReplyObject(sf_cmd(g_port, "HSET %s luuid:1 100 baton:holder l", f.k));
    const char *keys[3] = { f.k, f.q, f.t };
    const char *args[5] = { "luuid:1", "100", "2000", "host 3 3", f.ch };
    CHECK(eval(BATON_LUA_FAIR_LEAVE, 3, keys, 5, args) == 2);
    check_handed_to_live(&f);

    /* L is the head of a free lock and gives up: the next live entry gets it */
    fixture_make(&f, "leave2");
    freeReplyObject(sf_cmd(g_port, "LPUSH %s %s", f.q, "luuid:1|100|2000|host 3 3"));
    freeReplyObject(sf_cmd(g_port, "ZADD %s %lld %s", f.t, sf_server_ms(g_port) + 60000, "luuid:1|100|2000|host 3 3"));
    CHECK(eval(BATON_LUA_FAIR_LEAVE, 3, keys, 5, args) == 1);
    check_handed_to_live(&f);
    freeReplyObject(sf_cmd(g_port, "DEL %s %s %s", f.k, f.q, f.t));
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 6 && !strcmp(argv[1], "--worker") && !strcmp(argv[2], "wait"))
        return worker_wait(argv[3], argv[4], (uint32_t)atoi(argv[5]));
    if (argc != 2 || (strcmp(argv[1], "release") && strcmp(argv[1], "scripts"))) {
        fprintf(stderr, "usage: %s release|scripts\n", argv[0]);
        return 2;
    }
    char name[64];
    snprintf(name, sizeof name, "safety_fair_dead_%s", argv[1]);
    const char *dir = ft_dir(name);
    g_port = tl_server_start("redis", dir, NULL);
    snprintf(g_uri, sizeof g_uri, "redis://127.0.0.1:%d/0", g_port);
    if (!strcmp(argv[1], "release")) {
        RUN(test_release_skips_dead_waiter);
    } else {
        RUN(test_release_script);
        RUN(test_leave_script);
    }
    tl_server_stop("redis", dir);
    return th_finish();
}
