/*
 * redis-cluster:// wake-ups and re-checks against a real 3-master +
 * 3-replica cluster of its own (tests/servers/redis-cluster.sh), with lock
 * names whose slot is on a master other than the first seed (where the
 * client's classic subscriber connection goes):
 *   - sharded pub/sub: a waiter SSUBSCRIBEs on the slot's master (PUBSUB
 *     SHARDNUMSUB there says 1), a baton release SPUBLISHes there
 *     (cmdstat_spublish grows) and wakes it, and so does a foreign release
 *     that SPUBLISHes as Redisson in cluster mode does;
 *   - keyspace notifications are node-local: with notify-keyspace-events Kg
 *     on the nodes, a waiter's __keyspace@0__:<key> subscription is on the
 *     key's master (PUBSUB NUMSUB there), and a `redis-cli -c DEL` of a
 *     foreign holder wakes it;
 *   - the reconnect re-check runs when a failover is seen on any master
 *     (MOVED), not only the subscriber's: a lock whose key the new master
 *     does not have is reported lost at once, not at the next renewal; a
 *     waiter SSUBSCRIBEd on the old master moves to the new one when the old
 *     one dies, and is woken by a release there.
 */
#include <baton.h>

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "../common/testlib.h"

static char g_dir[1024];
static char g_uri[512];
static int g_ports[6], g_nports;
static char g_tag[32];

/* redis-cli [-c] -p PORT ARGS: the first line of its output in OUT. */
static int cli(int port, char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int cli(int port, char *out, size_t n, const char *fmt, ...) {
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "redis-cli -p %d %s 2>&1", port, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[4096] = "";
    if (!fgets(line, sizeof line, p)) line[0] = 0;
    char rest[256];
    while (fgets(rest, sizeof rest, p)) {}
    int st = pclose(p);
    line[strcspn(line, "\r\n")] = 0;
    if (out) snprintf(out, n, "%s", line);
    return st;
}

/* The second line of redis-cli's output (PUBSUB [SHARD]NUMSUB's count). */
static long cli_count(int port, const char *what, const char *chan) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "redis-cli -p %d PUBSUB %s '%s' 2>&1 | sed -n 2p", port, what, chan);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[128] = "";
    if (!fgets(line, sizeof line, p)) line[0] = 0;
    pclose(p);
    return atol(line);
}

static int alive(int port) {
    char o[64];
    return cli(port, o, sizeof o, "PING") == 0 && !strcmp(o, "PONG");
}

/* The port of the master that owns KEY's slot now. */
static int owner(const char *key) {
    for (int i = 0; i < g_nports; i++) {
        if (!alive(g_ports[i])) continue;
        char o[512];
        cli(g_ports[i], o, sizeof o, "GET '%s'", key);
        if (!strncmp(o, "MOVED ", 6)) return atoi(strrchr(o, ':') + 1);
        char role[64];
        cli(g_ports[i], role, sizeof role, "ROLE");
        if (!strcmp(role, "master")) return g_ports[i];
    }
    return 0;
}

/* NAME = g_tag + BASE + a number, chosen so its slot is not on the first
 * seed (the client's classic subscriber connection). */
static int pick_name(char *name, size_t n, const char *base) {
    for (int i = 0; i < 64; i++) {
        snprintf(name, n, "%s%s%d", g_tag, base, i);
        int o = owner(name);
        if (o && o != g_ports[0]) return o;
    }
    return 0;
}

static long cmdstat(int port, const char *cmd) {
    char sh[512];
    snprintf(sh, sizeof sh, "redis-cli -p %d INFO commandstats | grep '^cmdstat_%s:' | sed 's/^[^:]*:calls=\\([0-9]*\\).*/\\1/'",
             port, cmd);
    FILE *p = popen(sh, "r");
    if (!p) return -1;
    char line[64] = "";
    if (!fgets(line, sizeof line, p)) line[0] = 0;
    pclose(p);
    return atol(line);
}

static int lost_count;
static void on_lost(baton_lock *l, void *p) {
    (void)l;
    (void)p;
    __atomic_add_fetch(&lost_count, 1, __ATOMIC_SEQ_CST);
}

static baton_lock *lock_on(baton_client *c, const char *name, uint32_t lease) {
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = lease;
    o.on_lost = on_lost;
    baton_lock *l = NULL;
    if (baton_lock_open(&l, c, name, &o) != 0) return NULL;
    return l;
}

typedef struct {
    baton_lock *l;
    int rc;
    int64_t granted_ms;
    atomic_int done;
    pthread_t th;
} waiter;

static void *wait_main(void *p) {
    waiter *w = p;
    w->rc = baton_lock_acquire(w->l, 20000);
    w->granted_ms = tl_now_ms();
    atomic_store(&w->done, 1);
    return NULL;
}

/* Waits (5 s at most) until PUBSUB WHAT CHAN on PORT counts at least 1. */
static long wait_subscribed(int port, const char *what, const char *chan) {
    long n = 0;
    for (int i = 0; i < 100 && (n = cli_count(port, what, chan)) < 1; i++) tl_sleep_ms(50);
    return n;
}

/* ---- sharded pub/sub ---- */

static void test_sharded(void) {
    char name[64], chan[128], o[256];
    int m = pick_name(name, sizeof name, "shard");
    CHECK(m != 0);
    if (!m) return;
    snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}", name);
    baton_client *c1 = tl_client_open(g_uri), *c2 = tl_client_open(g_uri);
    baton_lock *l = lock_on(c1, name, 10000), *wl = lock_on(c2, name, 10000);
    CHECK(l && wl);
    if (!l || !wl) goto out;
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    waiter w = { .l = wl };
    pthread_create(&w.th, NULL, wait_main, &w);
    long n = wait_subscribed(m, "SHARDNUMSUB", chan);
    fprintf(stderr, "   '%s' on %d: SHARDNUMSUB %s = %ld there\n", name, m, chan, n);
    CHECK(n >= 1); /* SSUBSCRIBE on the slot's master */
    long sp0 = cmdstat(m, "spublish");
    CHECK_RC(baton_lock_release(l), 0);
    pthread_join(w.th, NULL);
    CHECK_RC(w.rc, 0);
    long sp1 = cmdstat(m, "spublish");
    fprintf(stderr, "   release: spublish calls on %d %ld -> %ld\n", m, sp0, sp1);
    CHECK(sp1 > sp0); /* the release script SPUBLISHed on the slot's master */
    CHECK_RC(baton_lock_release(wl), 0);

    /* a foreign holder released the way Redisson does in cluster mode: DEL
     * and SPUBLISH on the lock's channel (redis-cli -c routes both) */
    cli(m, o, sizeof o, "-c HSET '%s' foreign:1 1", name);
    cli(m, o, sizeof o, "-c PEXPIRE '%s' 60000", name);
    waiter w2 = { .l = wl };
    pthread_create(&w2.th, NULL, wait_main, &w2);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&w2.done));
    CHECK(wait_subscribed(m, "SHARDNUMSUB", chan) >= 1);
    int64_t t0 = tl_now_ms();
    cli(m, o, sizeof o, "-c DEL '%s'", name);
    cli(m, o, sizeof o, "-c SPUBLISH '%s' 0", chan);
    pthread_join(w2.th, NULL);
    CHECK_RC(w2.rc, 0);
    /* printed, not asserted (timing): without the message the waiter would
     * notice the silent release at its ~1.1 s re-check */
    fprintf(stderr, "   foreign DEL + SPUBLISH: waiter granted after %" PRId64 " ms\n", w2.granted_ms - t0);
    CHECK_RC(baton_lock_release(wl), 0);
out:
    if (l) baton_lock_free(l);
    if (wl) baton_lock_free(wl);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* ---- keyspace notifications, node-local ---- */

static void test_keyspace(void) {
    char name[64], chan[128], o[256], uri[600];
    for (int i = 0; i < g_nports; i++) cli(g_ports[i], o, sizeof o, "CONFIG SET notify-keyspace-events Kg");
    int m = pick_name(name, sizeof name, "ks");
    CHECK(m != 0);
    if (!m) return;
    snprintf(chan, sizeof chan, "__keyspace@0__:%s", name);
    snprintf(uri, sizeof uri, "%s&layout=simple", g_uri);
    baton_client *c = tl_client_open(uri);
    baton_lock *wl = lock_on(c, name, 10000);
    CHECK(wl != NULL);
    if (!wl) goto out;
    /* a foreign holder (redis-py's Lock, node-redlock): SET NX PX */
    cli(m, o, sizeof o, "-c SET '%s' foreign NX PX 60000", name);
    waiter w = { .l = wl };
    pthread_create(&w.th, NULL, wait_main, &w);
    long n = wait_subscribed(m, "NUMSUB", chan);
    fprintf(stderr, "   '%s' on %d: NUMSUB %s = %ld there\n", name, m, chan, n);
    CHECK(n >= 1); /* on the key's master, where its events are */
    tl_sleep_ms(200);
    CHECK(!atomic_load(&w.done));
    int64_t t0 = tl_now_ms();
    CHECK(tl_sh("redis-cli -c -p %d DEL '%s' >/dev/null", g_ports[0], name) == 0);
    pthread_join(w.th, NULL);
    CHECK_RC(w.rc, 0);
    fprintf(stderr, "   redis-cli -c DEL: waiter granted after %" PRId64 " ms\n", w.granted_ms - t0);
    CHECK_RC(baton_lock_release(wl), 0);
out:
    if (wl) baton_lock_free(wl);
    baton_client_close(c);
    for (int i = 0; i < g_nports; i++) cli(g_ports[i], o, sizeof o, "CONFIG SET notify-keyspace-events ''");
}

/* ---- the re-check after a failover on any master ---- */

static void test_recheck_any_master(void) {
    char name[64], other[80], o[512];
    int m = pick_name(name, sizeof name, "rk");
    CHECK(m != 0);
    if (!m) return;
    /* M's replica */
    int r = 0;
    for (int i = 0; i < g_nports && !r; i++) {
        char role[64];
        if (g_ports[i] == m || cli(g_ports[i], role, sizeof role, "ROLE") || strcmp(role, "slave")) continue;
        char sh[256];
        snprintf(sh, sizeof sh, "redis-cli -p %d ROLE | sed -n 3p | grep -qx %d", g_ports[i], m);
        if (system(sh) == 0) r = g_ports[i];
    }
    CHECK(r != 0);
    if (!r) return;
    __atomic_store_n(&lost_count, 0, __ATOMIC_SEQ_CST);
    baton_client *c = tl_client_open(g_uri), *hc = tl_client_open(g_uri), *wc = tl_client_open(g_uri);
    baton_lock *hl = NULL, *wl = NULL;
    baton_lock *l = lock_on(c, name, 60000); /* renewals every 20 s */
    snprintf(other, sizeof other, "{%s}other", name); /* the same slot */
    baton_lock *l2 = lock_on(c, other, 60000);
    CHECK(l && l2);
    if (!l || !l2) goto out;
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    /* a waiter of the same slot, SSUBSCRIBEd on M when the failover comes */
    char held[96], hchan[160];
    snprintf(held, sizeof held, "{%s}held", name);
    snprintf(hchan, sizeof hchan, "redisson_lock__channel:%s", held); /* a tagged name keeps its tag */
    hl = lock_on(hc, held, 60000);
    wl = lock_on(wc, held, 60000);
    CHECK(hl && wl);
    if (!hl || !wl) goto out;
    CHECK_RC(baton_lock_acquire(hl, 0), 0);
    waiter w = { .l = wl };
    pthread_create(&w.th, NULL, wait_main, &w);
    CHECK(wait_subscribed(m, "SHARDNUMSUB", hchan) >= 1);
    cli(m, o, sizeof o, "WAIT 1 2000");
    CHECK(cli(r, o, sizeof o, "CLUSTER FAILOVER") == 0);
    int64_t t0 = tl_now_ms();
    while (owner(name) != r && tl_now_ms() - t0 < 20000) tl_sleep_ms(100);
    CHECK(owner(name) == r);
    CHECK(tl_sh("bash '%s/redis-cluster.sh' wait-ok '%s'", TL_SERVERS_DIR, g_dir) == 0);
    /* the failover lost the grant (as one that had not reached the replica) */
    cli(r, o, sizeof o, "DEL '%s'", name);
    /* any command of this client on the slot meets MOVED (its connection is
     * to the old master): that is the failover seen */
    int64_t t1 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(l2, 0), 0);
    while (!__atomic_load_n(&lost_count, __ATOMIC_SEQ_CST) && tl_now_ms() - t1 < 8000) tl_sleep_ms(50);
    int lost = __atomic_load_n(&lost_count, __ATOMIC_SEQ_CST);
    fprintf(stderr, "   failover %d -> %d seen: lost reported %d after %" PRId64 " ms (renewal due in ~20 s)\n", m,
            r, lost, tl_now_ms() - t1);
    CHECK(lost == 1);
    CHECK(!baton_lock_held(l));
    CHECK_RC(baton_lock_release(l2), 0);
    /* The old master is a replica of the same shard now, and a shard's
     * replicas deliver its sharded messages: the waiter may stay there. */
    fprintf(stderr, "   waiter on '%s' after the failover: SHARDNUMSUB old %ld, new %ld\n", held,
            cli_count(m, "SHARDNUMSUB", hchan), cli_count(r, "SHARDNUMSUB", hchan));
    /* The old master dies: the waiter's subscription moves to the master
     * the map names (rsub_reroute). */
    int mi = -1;
    for (int i = 0; i < g_nports; i++)
        if (g_ports[i] == m) mi = i;
    CHECK(mi >= 0 && tl_sh("kill -KILL $(cat '%s/n%d/pid')", g_dir, mi + 1) == 0);
    long n = 0;
    for (int i = 0; i < 160 && (n = cli_count(r, "SHARDNUMSUB", hchan)) < 1; i++) tl_sleep_ms(50);
    fprintf(stderr, "   old master killed: SHARDNUMSUB on the new master %d = %ld\n", r, n);
    CHECK(n >= 1);
    CHECK(!atomic_load(&w.done));
    int64_t t2 = tl_now_ms();
    CHECK_RC(baton_lock_release(hl), 0);
    pthread_join(w.th, NULL);
    CHECK_RC(w.rc, 0);
    fprintf(stderr, "   release on the new master: waiter granted after %" PRId64 " ms\n", w.granted_ms - t2);
    CHECK_RC(baton_lock_release(wl), 0);
out:
    if (hl) baton_lock_free(hl);
    if (wl) baton_lock_free(wl);
    baton_client_close(hc);
    baton_client_close(wc);
    if (l) baton_lock_free(l);
    if (l2) baton_lock_free(l2);
    baton_client_close(c);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    if (system("command -v redis-cli >/dev/null 2>&1") != 0) return tl_skip_status("redis-cli is not installed", 1);
    const char *tt = getenv("BATON_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/redis_cluster_pubsub-%ld", tt && *tt ? tt : "/tmp", (long)getpid());
    tl_mkdirs(g_dir);
    tl_server("redis-cluster", "start", g_dir, NULL, 1);
    char path[1200];
    snprintf(path, sizeof path, "%s/ports", g_dir);
    FILE *f = fopen(path, "r");
    while (f && g_nports < 6 && fscanf(f, "%d", &g_ports[g_nports]) == 1) g_nports++;
    if (f) fclose(f);
    CHECK(g_nports == 6);
    snprintf(g_uri, sizeof g_uri, "redis-cluster://127.0.0.1:%d?io_timeout_ms=4000", g_ports[0]);
    snprintf(g_tag, sizeof g_tag, "p%ld-", (long)getpid());
    RUN(test_sharded);
    RUN(test_keyspace);
    RUN(test_recheck_any_master); /* last: it fails a master over and kills it */
    tl_server_stop("redis-cluster", g_dir);
    return th_finish();
}
