/* A quorum (RedLock) client built from N open Redis clients.
 * usage: test_quorum REDIS_SH TMPDIR   (starts three redis-servers of its own) */
#include <baton.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../harness.h"
#include "../common/testlib.h"

static const char *redis_sh, *tmp;
static int ports[3];

static int sh(const char *fmt, const char *a, int i, char *out, size_t n)
{
    char cmd[1024];
    FILE *p;
    snprintf(cmd, sizeof cmd, fmt, redis_sh, a, i);
    if (!(p = popen(cmd, "r"))) return -1;
    if (out && (!fgets(out, (int)n, p))) out[0] = 0;
    return pclose(p);
}

int main(int argc, char **argv)
{
    baton_client *m[3] = { 0 }, *q = NULL, *q2 = NULL, *one = NULL, *f = NULL, *odd = NULL;
    baton_lock *l = NULL, *l2 = NULL, *lone = NULL;
    char uri[256], out[64];
    uint64_t f1, f2;
    int rc;

    if (argc != 3) return 2;
    redis_sh = argv[1];
    tmp = argv[2];
    for (int i = 0; i < 3; i++) {
        rc = sh("bash %s start %s/quorum%d 2>/dev/null", tmp, i, out, sizeof out);
        if (rc != 0 || !(ports[i] = atoi(out))) {
            for (int j = 0; j < i; j++) sh("bash %s stop %s/quorum%d", tmp, j, NULL, 0);
            return tl_skip_status("cannot start redis-server", 0);
        }
        snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0", ports[i]);
        CHECK_RC(baton_client_open(&m[i], uri, NULL), 0);
    }
    th_current = "quorum";
    CHECK_RC(baton_client_open_quorum(&q, m, 3, NULL), 0);
    CHECK_RC(baton_client_open_quorum(&q2, m, 3, NULL), 0);
    if (!q || !q2) return th_finish();
    CHECK(!strcmp(baton_client_backend(q), "redlock"));
    CHECK(strstr(baton_client_uri(q), "redlock://") == baton_client_uri(q));

    CHECK_RC(baton_lock_open(&l, q, "quorum-x", NULL), 0);
    CHECK_RC(baton_lock_open(&l2, q2, "quorum-x", NULL), 0);
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    f1 = baton_lock_fence(l);
    CHECK(f1 > 0);
    CHECK_RC(baton_lock_acquire(l2, 0), BATON_ELOCKED);
    /* the key is the SET NX PX layout on each node: a single-node client sees it held */
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0?layout=simple", ports[1]);
    CHECK_RC(baton_client_open(&one, uri, NULL), 0);
    if (one) {
        CHECK_RC(baton_lock_open(&lone, one, "quorum-x", NULL), 0);
        CHECK_RC(baton_lock_acquire(lone, 0), BATON_ELOCKED);
    }
    CHECK_RC(baton_lock_release(l), 0);

    /* one node down: a majority still grants, and the fence still grows */
    sh("bash %s stop %s/quorum%d", tmp, 2, NULL, 0);
    CHECK_RC(baton_lock_acquire(l2, 5000), 0);
    f2 = baton_lock_fence(l2);
    CHECK(f2 > f1);
    CHECK_RC(baton_lock_release(l2), 0);

    /* members that cannot form one quorum */
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/1", ports[0]);
    CHECK_RC(baton_client_open(&odd, uri, NULL), 0);
    if (odd) {
        baton_client *mix[2] = { m[1], odd };
        baton_client *bad = NULL;
        CHECK_RC(baton_client_open_quorum(&bad, mix, 2, NULL), BATON_ENOTSUP);
        CHECK(bad == NULL);
    }
    snprintf(uri, sizeof uri, "file://%s/quorum-files", tmp);
    CHECK_RC(baton_client_open(&f, uri, NULL), 0);
    if (f) {
        baton_client *mix[1] = { f };
        baton_client *bad = NULL;
        CHECK_RC(baton_client_open_quorum(&bad, mix, 1, NULL), BATON_ENOTSUP);
    }
    CHECK_RC(baton_client_open_quorum(NULL, m, 3, NULL), BATON_EINVAL);
    baton_client *none = q2; /* an _open clears its out-parameter even on error */
    CHECK_RC(baton_client_open_quorum(&none, m, 0, NULL), BATON_EINVAL);
    CHECK(none == NULL);

    baton_lock_free(l);
    baton_lock_free(l2);
    baton_lock_free(lone);
    baton_client_close(q);
    baton_client_close(q2);
    baton_client_close(one);
    baton_client_close(odd);
    baton_client_close(f);
    for (int i = 0; i < 3; i++) baton_client_close(m[i]);
    for (int i = 0; i < 2; i++) sh("bash %s stop %s/quorum%d", tmp, i, NULL, 0);
    return th_finish();
}
