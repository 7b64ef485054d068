/* engine_ops on etcd (what `baton bench` counts a handoff with): the
 * server's grpc_server_msg_received_total from /metrics, per method.
 *   - a first read reports the methods baton has used (leasegrant, txn);
 *   - N acquire/release pairs add at least 2N txn (a grant and a release are
 *     one txn each) — other tests share the fixture server, so only a lower
 *     bound holds;
 *   - counts never go down between two reads;
 *   - every member of the URI is read: the fixture listed twice counts each
 *     method twice (as a quorum's members add up). */
#include <baton.h>
#include <baton/sys/stats.h>

#include <string.h>

#include "../harness.h"
#include "../common/testlib.h"
#include "../common/opcounts.h"

#define PAIRS 20

int main(void) {
    int port = tl_fixture_port("etcd");
    char u[256], name[64];
    baton_client *c = NULL, *twice = NULL;
    baton_lock *l = NULL;
    tl_ops a, b, d;

    if (port <= 0) {
        printf("no etcd fixture: skip\n");
        return 77;
    }
    snprintf(u, sizeof u, "etcd://127.0.0.1:%d", port);
    snprintf(name, sizeof name, "ops-%d", (int)getpid());
    CHECK_RC(baton_client_open(&c, u, NULL), 0);
    if (!c) return 1;
    CHECK_RC(baton_lock_open(&l, c, name, NULL), 0);
    /* a first pair: the client's lease is granted by now */
    CHECK_RC(baton_lock_acquire(l, 5000), 0);
    CHECK_RC(baton_lock_release(l), 0);

    CHECK_RC(tl_ops_read(c, &a), 0);
    CHECK(a.calls > 0);
    CHECK(tl_ops_get(&a, "leasegrant") >= 1);
    CHECK(tl_ops_get(&a, "txn") >= 2);
    for (int i = 0; i < a.k; i++) {
        /* lower-case method names, no labels or quotes */
        for (const char *p = a.op[i]; *p; p++) CHECK((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9'));
    }
    for (int i = 0; i < PAIRS; i++) {
        CHECK_RC(baton_lock_acquire(l, 5000), 0);
        CHECK_RC(baton_lock_release(l), 0);
    }
    CHECK_RC(tl_ops_read(c, &b), 0);
    printf("   txn %lld -> %lld over %d pairs\n", tl_ops_get(&a, "txn"), tl_ops_get(&b, "txn"), PAIRS);
    CHECK(tl_ops_get(&b, "txn") - tl_ops_get(&a, "txn") >= 2 * PAIRS);
    for (int i = 0; i < a.k; i++) CHECK(tl_ops_get(&b, a.op[i]) >= (long long)a.n[i]);

    /* the same member twice in the URI: its counts come twice */
    snprintf(u, sizeof u, "etcd://127.0.0.1:%d,127.0.0.1:%d", port, port);
    CHECK_RC(baton_client_open(&twice, u, NULL), 0);
    if (twice) {
        /* twice's own lease grant first (opening grants nothing yet) */
        baton_lock *l2 = NULL;
        CHECK_RC(baton_lock_open(&l2, twice, name, NULL), 0);
        CHECK_RC(baton_lock_acquire(l2, 5000), 0);
        CHECK_RC(baton_lock_release(l2), 0);
        baton_lock_free(l2);
        CHECK_RC(tl_ops_read(c, &b), 0);
        CHECK_RC(tl_ops_read(twice, &d), 0);
        /* each member's count is at least the one read just before */
        printf("   leasegrant %lld once, %lld through the member listed twice\n", tl_ops_get(&b, "leasegrant"),
               tl_ops_get(&d, "leasegrant"));
        CHECK(tl_ops_get(&d, "leasegrant") >= 2 * tl_ops_get(&b, "leasegrant"));
        baton_client_close(twice);
    }
    baton_lock_free(l);
    baton_client_close(c);
    return th_finish();
}
