/*
 * redis-cluster:// against a real 3-master + 3-replica cluster of its own
 * (tests/servers/redis-cluster.sh):
 *   - reshard: the slot of a held lock migrates (MIGRATING/IMPORTING, MIGRATE,
 *     SETSLOT NODE) while it is held: the holder renews through ASK and then
 *     MOVED, a contender is refused throughout (never granted on the emptied
 *     source), the release works and the next fence is larger;
 *   - failover: the master of a held lock's slot is SIGKILLed while another
 *     client waits: its replica takes over, and either the holder keeps the
 *     lock (renewals reach the new master) and the waiter gets it only after
 *     the release, or the loss is reported; fences never go back;
 *   - a name whose keys would span hash slots answers BATON_ENOTSUP, and a
 *     database other than 0 BATON_EINVAL.
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

/* redis-cli -p PORT ARGS: the first line of its output in OUT; the exit status. */
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

static int node_index(int port) {
    for (int i = 0; i < g_nports; i++)
        if (g_ports[i] == port) return i;
    return -1;
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

/* ---- resharding a held lock's slot ---- */

static void test_reshard_held(void) {
    char name[64], o[512], srcid[64], dstid[64];
    snprintf(name, sizeof name, "%sreshard", g_tag);
    baton_client *c1 = tl_client_open(g_uri), *c2 = tl_client_open(g_uri);
    baton_lock *l = lock_on(c1, name, 5000), *x = lock_on(c2, name, 5000);
    CHECK(l && x);
    if (!l || !x) return;
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    uint64_t f1 = baton_lock_fence(l);
    int src = owner(name), dst = 0;
    for (int i = 0; i < g_nports && !dst; i++) {
        char role[64];
        cli(g_ports[i], role, sizeof role, "ROLE");
        if (g_ports[i] != src && !strcmp(role, "master")) dst = g_ports[i];
    }
    CHECK(src && dst);
    cli(src, o, sizeof o, "CLUSTER KEYSLOT '%s'", name);
    int slot = atoi(o);
    cli(src, srcid, sizeof srcid, "CLUSTER MYID");
    cli(dst, dstid, sizeof dstid, "CLUSTER MYID");
    fprintf(stderr, "   '%s': slot %d, %d -> %d\n", name, slot, src, dst);
    CHECK(cli(dst, o, sizeof o, "CLUSTER SETSLOT %d IMPORTING %s", slot, srcid) == 0 && !strcmp(o, "OK"));
    CHECK(cli(src, o, sizeof o, "CLUSTER SETSLOT %d MIGRATING %s", slot, dstid) == 0 && !strcmp(o, "OK"));
    /* migrating, keys still on the source */
    CHECK_RC(baton_lock_extend(l, 5000), 0);
    CHECK_RC(baton_lock_acquire(x, 0), BATON_ELOCKED);
    /* move every key of the slot: the source now answers ASK */
    CHECK(tl_sh("keys=$(redis-cli -p %d CLUSTER GETKEYSINSLOT %d 100 | tr '\\n' ' '); "
                "[ -n \"$keys\" ] && redis-cli -p %d MIGRATE 127.0.0.1 %d '' 0 5000 KEYS $keys | grep -q OK",
                src, slot, src, dst) == 0);
    cli(src, o, sizeof o, "CLUSTER COUNTKEYSINSLOT %d", slot);
    CHECK(!strcmp(o, "0"));
    CHECK_RC(baton_lock_extend(l, 5000), 0);
    CHECK_RC(baton_lock_acquire(x, 0), BATON_ELOCKED);
    CHECK(baton_lock_held(l));
    /* the slot is the target's: MOVED from now on */
    for (int i = 0; i < g_nports; i++) {
        char role[64];
        cli(g_ports[i], role, sizeof role, "ROLE");
        if (!strcmp(role, "master")) cli(g_ports[i], o, sizeof o, "CLUSTER SETSLOT %d NODE %s", slot, dstid);
    }
    CHECK(owner(name) == dst);
    CHECK_RC(baton_lock_extend(l, 5000), 0);
    CHECK_RC(baton_lock_acquire(x, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(l), 0);
    CHECK_RC(baton_lock_acquire(x, 0), 0);
    CHECK(baton_lock_fence(x) > f1);
    CHECK_RC(baton_lock_release(x), 0);
    CHECK(__atomic_load_n(&lost_count, __ATOMIC_SEQ_CST) == 0);
    baton_lock_free(l);
    baton_lock_free(x);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* ---- a master failover while a lock is held and waited on ---- */

typedef struct {
    baton_lock *l;
    int rc;
    uint64_t fence;
    int64_t granted_ns;
    atomic_int done;
    pthread_t th;
} waiter;

static void *wait_main(void *p) {
    waiter *w = p;
    w->rc = baton_lock_acquire(w->l, 60000);
    w->granted_ns = baton_now_ns();
    w->fence = baton_lock_fence(w->l);
    atomic_store(&w->done, 1);
    return NULL;
}

static void test_failover_held(void) {
    char name[64], o[512];
    snprintf(name, sizeof name, "%sfailover", g_tag);
    __atomic_store_n(&lost_count, 0, __ATOMIC_SEQ_CST);
    baton_client *c1 = tl_client_open(g_uri), *c2 = tl_client_open(g_uri);
    baton_lock *l = lock_on(c1, name, 3000);
    baton_lock_options wo = BATON_LOCK_OPTIONS_INIT;
    wo.lease_ms = 3000;
    baton_lock *wl = NULL;
    CHECK_RC(baton_lock_open(&wl, c2, name, &wo), 0);
    CHECK(l && wl);
    if (!l || !wl) return;
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    uint64_t f1 = baton_lock_fence(l);
    int victim = owner(name);
    /* the replica has the grant before its master dies (without this the
     * failover may lose it: then the holder must be told) */
    cli(victim, o, sizeof o, "WAIT 1 2000");
    fprintf(stderr, "   '%s' held (fence %" PRIu64 ") on %d, replicas that have it: %s\n", name, f1, victim, o);
    waiter w = { .l = wl };
    pthread_create(&w.th, NULL, wait_main, &w);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&w.done));
    int vi = node_index(victim);
    CHECK(vi >= 0);
    CHECK(tl_sh("kill -KILL $(cat '%s/n%d/pid')", g_dir, vi + 1) == 0);
    int64_t t0 = tl_now_ms();
    /* the replica takes over after cluster-node-timeout (1 s) and an election */
    int now_owner = victim;
    while ((now_owner = owner(name)) == victim && tl_now_ms() - t0 < 30000) tl_sleep_ms(100);
    CHECK(tl_sh("bash '%s/redis-cluster.sh' wait-ok '%s'", TL_SERVERS_DIR, g_dir) == 0);
    fprintf(stderr, "   master killed; %d owns the slot after %" PRId64 " ms\n", now_owner, tl_now_ms() - t0);
    CHECK(now_owner && now_owner != victim);
    /* a few renewals on the new master (lease 3 s: one a second) */
    tl_sleep_ms(2500);
    int lost = __atomic_load_n(&lost_count, __ATOMIC_SEQ_CST);
    int held = baton_lock_held(l);
    fprintf(stderr, "   after the failover: held %d, lost reported %d, waiter done %d\n", held, lost,
            atomic_load(&w.done));
    CHECK(held || lost); /* kept, or told */
    if (held) CHECK(!atomic_load(&w.done)); /* no two holders */
    int64_t released_ns = baton_now_ns();
    int rrc = baton_lock_release(l);
    CHECK(rrc == 0 || (rrc == BATON_ELOST && lost));
    pthread_join(w.th, NULL);
    CHECK_RC(w.rc, 0);
    if (held && rrc == 0) CHECK(w.granted_ns >= released_ns);
    CHECK(w.fence > f1); /* fences never go back, across the failover too */
    CHECK_RC(baton_lock_release(wl), 0);
    baton_lock_free(l);
    baton_lock_free(wl);
    baton_client_close(c1);
    baton_client_close(c2);
    /* a new client, from the URI's seeds (one of them is dead now) */
    baton_client *c3 = tl_client_open(g_uri);
    baton_lock *l3 = lock_on(c3, name, 3000);
    CHECK(l3 != NULL);
    if (l3) {
        CHECK_RC(baton_lock_acquire(l3, 5000), 0);
        CHECK(baton_lock_fence(l3) > w.fence);
        CHECK_RC(baton_lock_release(l3), 0);
        baton_lock_free(l3);
    }
    baton_client_close(c3);
}

/* ---- what a cluster cannot do ---- */

static void test_enotsup(void) {
    baton_client *c = tl_client_open(g_uri);
    /* an empty hash tag: the lock key hashes whole, its side keys do not */
    baton_lock *l = lock_on(c, "a{}b", 3000);
    CHECK(l != NULL);
    if (l) {
        int rc = baton_lock_acquire(l, 0);
        CHECK_RC(rc, BATON_ENOTSUP);
        const char *m = baton_error_last()->message;
        fprintf(stderr, "   %s\n", m ? m : "");
        CHECK(m && strstr(m, "hash slot"));
        baton_lock_free(l);
    }
    /* a quorum (RedLock) of cluster clients */
    baton_client *q = NULL;
    CHECK_RC(baton_client_open_quorum(&q, &c, 1, NULL), BATON_ENOTSUP);
    if (q) baton_client_close(q);
    baton_client_close(c);
    char uri[600];
    snprintf(uri, sizeof uri, "redis-cluster://127.0.0.1:%d/1", g_ports[0]);
    baton_client *bad = NULL;
    CHECK_RC(baton_client_open(&bad, uri, NULL), BATON_EINVAL);
    if (bad) baton_client_close(bad);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    if (system("command -v redis-cli >/dev/null 2>&1") != 0) return tl_skip_status("redis-cli is not installed", 1);
    const char *tt = getenv("BATON_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/redis_cluster-%ld", tt && *tt ? tt : "/tmp", (long)getpid());
    tl_mkdirs(g_dir);
    tl_server("redis-cluster", "start", g_dir, NULL, 1);
    char path[1200];
    snprintf(path, sizeof path, "%s/ports", g_dir);
    FILE *f = fopen(path, "r");
    while (f && g_nports < 6 && fscanf(f, "%d", &g_ports[g_nports]) == 1) g_nports++;
    if (f) fclose(f);
    CHECK(g_nports == 6);
    /* three seeds: the client still opens when one of them is down */
    snprintf(g_uri, sizeof g_uri, "redis-cluster://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d?io_timeout_ms=4000",
             g_ports[0], g_ports[1], g_ports[2]);
    snprintf(g_tag, sizeof g_tag, "t%ld-", (long)getpid());
    RUN(test_enotsup);
    RUN(test_reshard_held);
    RUN(test_failover_held); /* last: it kills a master */
    tl_server_stop("redis-cluster", g_dir);
    return th_finish();
}
