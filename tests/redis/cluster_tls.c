/*
 * rediss-cluster:// against a TLS-only cluster of its own
 * (tests/servers/redis-cluster.sh with REDIS_CLUSTER_TLS=1: 3 masters + 3
 * replicas, tls-port only, tls-cluster and tls-replication yes):
 *   - the conformance suite (CONFORMANCE, the test_conformance binary) on
 *     rediss-cluster://...?cacert=CA;
 *   - a failover (every replica takes over: CLUSTER FAILOVER FORCE) while a
 *     lock is held and another client waits: the holder keeps it (renewals
 *     reach the new master over TLS) or is told LOST, never both; the
 *     waiter is not granted while the holder holds; its fence is larger;
 *   - a CA that did not sign the nodes' certificates: BATON_EAUTH and "not
 *     trusted" (as on rediss://), a plain redis-cluster:// client refused.
 *
 *   test_redis_cluster_tls SCRIPT CONFORMANCE
 */
#include <baton.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "../common/testlib.h"

static const char *script, *conformance;
static char dir[1024], uri[2048];
static int port;

typedef struct {
    baton_client *c;
    int rc;
    uint64_t fence;
    atomic_int done;
} waiter_t;

static void *waiter_main(void *p) {
    waiter_t *w = p;
    baton_lock *l = NULL;
    w->rc = baton_lock_open(&l, w->c, "tls-fo", NULL);
    int64_t end = tl_now_ms() + 60000;
    if (!w->rc)
        while ((w->rc = baton_lock_acquire(l, end - tl_now_ms())) == BATON_EUNAVAILABLE && tl_now_ms() < end)
            tl_sleep_ms(100);
    if (!w->rc) w->fence = baton_lock_fence(l);
    atomic_store(&w->done, 1);
    if (!w->rc) baton_lock_release(l);
    baton_lock_free(l);
    return NULL;
}

/* Every node's role ("master"/"slave"), in DIR/ports order, over TLS. */
static void roles(char *out, size_t n) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "for p in $(cat '%s/ports'); do redis-cli --tls --cacert '%s/tls/ca.crt' -p $p ROLE "
             "2>/dev/null | head -1; done | paste -sd,", dir, dir);
    out[0] = 0;
    FILE *f = popen(cmd, "r");
    if (f) {
        if (!fgets(out, (int)n, f)) out[0] = 0;
        pclose(f);
    }
    out[strcspn(out, "\n")] = 0;
}

static void conformance_suite(void) {
    CHECK(tl_sh("'%s' '%s' >'%s/conformance.log' 2>&1 || { tail -30 '%s/conformance.log' >&2; exit 1; }", conformance,
                uri, dir, dir) == 0);
}

static void failover_held(void) {
    baton_client *ca = tl_client_open(uri), *cb = tl_client_open(uri);
    atomic_int lost = 0;
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    lo.lease_ms = 6000; /* renewed every ~2 s */
    lo.on_lost = tl_count_lost;
    lo.on_lost_payload = &lost;
    baton_lock *a = NULL;
    CHECK_RC(baton_lock_open(&a, ca, "tls-fo", &lo), 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t fa = baton_lock_fence(a);
    waiter_t w = { .c = cb };
    pthread_t wt;
    pthread_create(&wt, NULL, waiter_main, &w);
    tl_sleep_ms(300);
    char before[256], after[256];
    roles(before, sizeof before);
    CHECK(tl_sh("bash '%s' failover '%s' && bash '%s' wait-ok '%s'", script, dir, script, dir) == 0);
    for (int i = 0; i < 100; i++) { /* the replicas take over within ~2 s */
        roles(after, sizeof after);
        if (strcmp(before, after) != 0) break;
        tl_sleep_ms(100);
    }
    fprintf(stderr, "   roles before %s, after %s\n", before, after);
    CHECK(strstr(before, "master") && strcmp(before, after) != 0);
    /* a few renewals on the new masters */
    int64_t t0 = tl_now_ms();
    int both = 0;
    while (tl_now_ms() - t0 < 8000) {
        if (baton_lock_held(a) && atomic_load(&w.done) && w.rc == 0) both = 1;
        tl_sleep_ms(10);
    }
    int held = baton_lock_held(a), nlost = atomic_load(&lost);
    fprintf(stderr, "   after the failover: held %d, told LOST %d, waiter granted %d\n", held, nlost,
            atomic_load(&w.done));
    CHECK(!both);
    CHECK(!(held && nlost));
    CHECK(held || nlost);
    if (held) CHECK(!atomic_load(&w.done));
    if (held) CHECK_RC(baton_lock_release(a), 0);
    pthread_join(wt, NULL);
    CHECK_RC(w.rc, 0);
    CHECK(w.fence > fa);
    baton_lock_free(a);
    baton_client_close(ca);
    baton_client_close(cb);
}

static void refused(void) {
    char u[2048];
    baton_client *c = NULL;
    snprintf(u, sizeof u, "rediss-cluster://127.0.0.1:%d?connect_timeout_ms=1000&cacert=%s/tls/wrong.crt", port, dir);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_client_open(&c, u, NULL), BATON_EAUTH);
    fprintf(stderr, "   wrong CA: %s\n", baton_error_last()->message);
    CHECK(strstr(baton_error_last()->message, "not trusted") != NULL);
    baton_client_close(c);
    c = NULL;
    snprintf(u, sizeof u, "redis-cluster://127.0.0.1:%d?connect_timeout_ms=1000&io_timeout_ms=1000", port);
    int rc = baton_client_open(&c, u, NULL);
    fprintf(stderr, "   plain client: %s\n", baton_error_last()->message);
    CHECK(rc == BATON_EUNAVAILABLE || rc == BATON_EPROTO);
    baton_client_close(c);
    CHECK(tl_now_ms() - t0 < 20000);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s redis-cluster.sh test_conformance\n", argv[0]);
        return 2;
    }
    script = argv[1];
    conformance = argv[2];
    const char *srv = getenv("BATON_TEST_SRV");
    snprintf(dir, sizeof dir, "%s/cluster-tls", srv ? srv : "/tmp");
    tl_sh("mkdir -p '%s'", dir);
    setenv("REDIS_CLUSTER_TLS", "1", 1);
    tl_server_script(script, "stop", dir, NULL, 1);
    port = tl_server_script(script, "start", dir, NULL, 1);
    snprintf(uri, sizeof uri, "rediss-cluster://127.0.0.1:%d?cacert=%s/tls/ca.crt", port, dir);
    RUN(refused);
    RUN(conformance_suite);
    RUN(failover_held);
    tl_server_script(script, "stop", dir, NULL, 0);
    return th_finish();
}
