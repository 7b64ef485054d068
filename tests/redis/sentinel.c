/*
 * Redis behind Sentinel, failing over while a lock is held and waited on
 * (tests/servers/redis-sentinel.sh: 1 master + 2 replicas + 3 sentinels).
 *
 *   test_redis_sentinel SCRIPT [tls [CONFORMANCE]]
 *
 * With "tls" the deployment speaks TLS only (REDIS_SENTINEL_TLS=1: sentinels,
 * data nodes and replication) and the client uses rediss-sentinel:// with
 * the test's CA; the conformance suite runs on it (CONFORMANCE, the
 * test_conformance binary), then the SENTINEL FAILOVER case, a wrong CA
 * (refused with BATON_EAUTH, as on rediss://) and a plain client (refused).
 *
 * Four cases: SENTINEL FAILOVER and a SIGKILLed master, each without and with
 * wait_replicas=1. In each a holder A holds a renewed lock, a waiter B (another
 * client) waits for it, and a prober C takes and gives back another lock
 * every 10 ms. After the failover A is either still holding (its renewals
 * reach the new master) or was told LOST, never both; with wait_replicas it
 * must still hold. B is never granted while A holds, and B's fence is larger
 * than A's (fences never go back). Measured: the longest gap between C's
 * successes (the outage a client sees) and between A's lease extensions.
 */
#include "baton.h"
#include "../harness.h"
#include "../common/testlib.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *script;
static char dir[1024], sentinels[512];
static int tls;
static const char *conformance;
static char tls_opt[1200]; /* "&cacert=DIR/tls/ca.crt" in TLS mode */

typedef struct {
    baton_client *c;
    const char *name;
    int rc;
    uint64_t fence;
    atomic_int done;
    int64_t granted_ms;
} waiter_t;

static void *waiter_main(void *p) {
    waiter_t *w = p;
    baton_lock *l = NULL;
    w->rc = baton_lock_open(&l, w->c, w->name, NULL);
    int64_t end = tl_now_ms() + 90000;
    /* With wait_replicas a grant too few replicas acknowledged is undone
     * and the acquire ends (EUNAVAILABLE): a new master may have none yet. */
    if (!w->rc)
        while ((w->rc = baton_lock_acquire(l, end - tl_now_ms())) == BATON_EUNAVAILABLE && tl_now_ms() < end)
            tl_sleep_ms(100);
    if (!w->rc) {
        w->fence = baton_lock_fence(l);
        w->granted_ms = tl_now_ms();
    }
    atomic_store(&w->done, 1);
    if (!w->rc) baton_lock_release(l);
    baton_lock_free(l);
    return NULL;
}

typedef struct {
    baton_client *c;
    const char *name;
    atomic_int stop;
    int64_t max_gap_ms;      /* the longest time without a successful cycle */
    long ok;
} prober_t;

static void *prober_main(void *p) {
    prober_t *pr = p;
    baton_lock *l = NULL;
    if (baton_lock_open(&l, pr->c, pr->name, NULL)) return NULL;
    int64_t last = tl_now_ms();
    while (!atomic_load(&pr->stop)) {
        if (baton_lock_acquire(l, 0) == 0) {
            baton_lock_release(l);
            int64_t now = tl_now_ms();
            if (now - last > pr->max_gap_ms) pr->max_gap_ms = now - last;
            last = now;
            pr->ok++;
        }
        tl_sleep_ms(10);
    }
    baton_lock_free(l);
    return NULL;
}

/* UNREPLICATED: the lock's key is deleted on the replicas before the
 * failover (as if its grant never reached them): A must be told LOST. */
static void run_case(const char *action, int wait_replicas, int unreplicated) {
    char uri[2048], name[64], probe[64];
    snprintf(uri, sizeof uri, "redis%s-sentinel://%s/0?master=mymaster&prefix=sf-%s-&connect_timeout_ms=1000%s%s",
             tls ? "s" : "", sentinels, action, wait_replicas ? "&wait_replicas=1" : "", tls_opt);
    snprintf(name, sizeof name, "L-%d-%d", wait_replicas, unreplicated);
    snprintf(probe, sizeof probe, "probe-%d-%d", wait_replicas, unreplicated);
    fprintf(stderr, "   %s, wait_replicas=%d%s\n", action, wait_replicas, unreplicated ? ", grant not replicated" : "");
    baton_client *ca = tl_client_open(uri), *cb = tl_client_open(uri), *cc = tl_client_open(uri);
    atomic_int lost = 0;
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    lo.lease_ms = 10000; /* renewed every ~3.3 s */
    lo.on_lost = tl_count_lost;
    lo.on_lost_payload = &lost;
    baton_lock *a = NULL;
    CHECK_RC(baton_lock_open(&a, ca, name, &lo), 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t fa = baton_lock_fence(a);
    waiter_t w = { .c = cb, .name = name };
    prober_t pr = { .c = cc, .name = probe };
    pthread_t wt, pt;
    pthread_create(&wt, NULL, waiter_main, &w);
    pthread_create(&pt, NULL, prober_main, &pr);
    tl_sleep_ms(500);
    if (unreplicated)
        CHECK(tl_sh("for p in $(cat '%s/data_ports'); do redis-cli -p $p ROLE | head -1 | grep -q slave || continue; "
                    "redis-cli -p $p CONFIG SET replica-read-only no >/dev/null && redis-cli -p $p DEL 'sf-%s-%s' "
                    ">/dev/null && redis-cli -p $p CONFIG SET replica-read-only yes >/dev/null || exit 1; done",
                    dir, action, name) == 0);

    /* the failover, while A holds and B waits; A's lease extensions watched */
    int64_t t0 = tl_now_ms(), dl0 = 0, last_ext = t0, max_ext_gap = 0;
    int64_t dl;
    baton_lock_deadline(a, &dl0);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "bash '%s' %s '%s' >/dev/null &", script, action, dir);
    CHECK(system(cmd) == 0);
    /* 15 s: the failover (a kill waits out down-after) and a few renewals */
    int64_t lost_at = 0;
    while (tl_now_ms() - t0 < 15000) {
        if (!lost_at && atomic_load(&lost)) lost_at = tl_now_ms();
        if (baton_lock_held(a) && baton_lock_deadline(a, &dl) == 0 && dl > dl0 + 50000000) {
            int64_t now = tl_now_ms();
            if (now - last_ext > max_ext_gap) max_ext_gap = now - last_ext;
            last_ext = now;
            dl0 = dl;
        }
        tl_sleep_ms(5);
    }
    int held = baton_lock_held(a), nlost = atomic_load(&lost);
    fprintf(stderr, "   A: held %d, told LOST %d; B granted meanwhile %d; client outage %lld ms (%ld probes), "
            "longest gap between A's lease extensions %lld ms\n", held, nlost, atomic_load(&w.done),
            (long long)pr.max_gap_ms, pr.ok, (long long)max_ext_gap);
    printf("measure %s wait_replicas=%d unreplicated=%d: client_outage_ms=%lld holder_renew_gap_ms=%lld held=%d lost=%d\n", action,
           wait_replicas, unreplicated, (long long)pr.max_gap_ms, (long long)max_ext_gap, held, nlost);
    if (nlost)
        printf("measure %s unreplicated=%d: holder_told_lost_after_ms=%lld waiter_granted_after_ms=%lld\n", action,
               unreplicated, (long long)(lost_at - t0), (long long)(atomic_load(&w.done) ? w.granted_ms - t0 : -1));
    CHECK(!(held && nlost));           /* LOST means not held */
    CHECK(held || nlost);              /* a lock gone is reported */
    /* WAIT 1 of 2 replicas: the lock survives when the replica Sentinel
     * promotes is one that acknowledged it, which is the usual case (it
     * picks the most advanced one) but not a promise: under load it was once
     * the other one. Then the holder must be told (checked above), never
     * overlapped (below). */
    if (wait_replicas && !held)
        fprintf(stderr, "   (wait_replicas=%d: the promoted replica had not acknowledged the grant; LOST reported)\n",
                wait_replicas);
    if (unreplicated) CHECK(!held && nlost);
    if (held) CHECK(!atomic_load(&w.done)); /* no two holders */
    CHECK(pr.ok > 0);

    int64_t rel = tl_now_ms();
    if (held) CHECK_RC(baton_lock_release(a), 0);
    pthread_join(wt, NULL);
    CHECK_RC(w.rc, 0);
    CHECK(w.fence > fa);               /* fences never go back */
    if (held) fprintf(stderr, "   B granted %lld ms after A's release\n", (long long)(w.granted_ms - rel));
    atomic_store(&pr.stop, 1);
    pthread_join(pt, NULL);
    baton_lock_free(a);
    baton_client_close(ca);
    baton_client_close(cb);
    baton_client_close(cc);
    tl_sh("bash '%s' revive '%s' && bash '%s' settle '%s'", script, dir, script, dir);
}

static void failover_plain(void) { run_case("failover", 0, 0); }
static void failover_wait_replicas(void) { run_case("failover", 1, 0); }
static void failover_unreplicated(void) { run_case("failover", 0, 1); }
static void kill_plain(void) { run_case("kill", 0, 0); }
static void kill_wait_replicas(void) { run_case("kill", 1, 0); }
static void kill_unreplicated(void) { run_case("kill", 0, 1); }

/* TLS mode: a CA that did not sign the servers' certificates is refused
 * with BATON_EAUTH (the sentinels' certificate is checked first), and so is
 * a plain redis-sentinel:// client (no answer in plain text), neither hangs. */
static void tls_refused(void) {
    char uri[2048];
    baton_client *c = NULL;
    snprintf(uri, sizeof uri, "rediss-sentinel://%s/0?master=mymaster&connect_timeout_ms=1000&cacert=%s/tls/wrong.crt",
             sentinels, dir);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_client_open(&c, uri, NULL), BATON_EAUTH);
    fprintf(stderr, "   wrong CA: %s\n", baton_error_last()->message);
    CHECK(strstr(baton_error_last()->message, "not trusted") != NULL);
    baton_client_close(c);
    c = NULL;
    snprintf(uri, sizeof uri, "redis-sentinel://%s/0?master=mymaster&connect_timeout_ms=1000&io_timeout_ms=1000",
             sentinels);
    int rc = baton_client_open(&c, uri, NULL);
    fprintf(stderr, "   plain client: %s\n", baton_error_last()->message);
    CHECK(rc == BATON_EUNAVAILABLE || rc == BATON_EPROTO);
    baton_client_close(c);
    CHECK(tl_now_ms() - t0 < 20000);
}

static void tls_conformance(void) {
    char uri[2048];
    snprintf(uri, sizeof uri, "rediss-sentinel://%s/0?master=mymaster%s", sentinels, tls_opt);
    CHECK(tl_sh("'%s' '%s' >'%s/conformance.log' 2>&1 || { tail -30 '%s/conformance.log' >&2; exit 1; }", conformance,
                uri, dir, dir) == 0);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s redis-sentinel.sh [tls]\n", argv[0]);
        return 2;
    }
    script = argv[1];
    tls = argc > 2 && strcmp(argv[2], "tls") == 0;
    const char *srv = getenv("BATON_TEST_SRV");
    snprintf(dir, sizeof dir, "%s/sentinel-%s", srv ? srv : "/tmp", tls ? "tls" : "faults");
    if (tls) {
        setenv("REDIS_SENTINEL_TLS", "1", 1);
        snprintf(tls_opt, sizeof tls_opt, "&cacert=%s/tls/ca.crt", dir);
    }
    tl_server_script(script, "stop", dir, NULL, 1);
    tl_server_script(script, "start", dir, NULL, 1);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "bash '%s' sentinels '%s'", script, dir);
    FILE *p = popen(cmd, "r");
    if (!p || !fgets(sentinels, sizeof sentinels, p)) {
        fprintf(stderr, "FATAL: no sentinel list\n");
        return 1;
    }
    pclose(p);
    sentinels[strcspn(sentinels, "\n")] = 0;
    if (tls) {
        conformance = argc > 3 ? argv[3] : NULL;
        if (conformance) RUN(tls_conformance);
        RUN(failover_plain);
        RUN(tls_refused);
        tl_server_script(script, "stop", dir, NULL, 0);
        return th_finish();
    }
    RUN(failover_plain);
    RUN(failover_wait_replicas);
    RUN(kill_plain);
    RUN(kill_wait_replicas);
    RUN(failover_unreplicated);
    RUN(kill_unreplicated);
    tl_server_script(script, "stop", dir, NULL, 0);
    return th_finish();
}
