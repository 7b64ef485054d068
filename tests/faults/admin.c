/* The operator's calls (baton_lock_list, baton_lock_break; issue 22) end by
 * their bound on a frozen link, and work as the contract says once it thaws:
 *
 *  - Redis: with the link frozen, list and break return an error within the
 *    client's io timeout (not when the link thaws); thawed, list names the
 *    holder, break removes it (0), the fence it gives is above the holder's
 *    and is what baton_lock_info reports, the holder's renewal and release
 *    answer BATON_ELOST, and the next grant's fence is above it.
 *  - RedLock, one node of three frozen: list and break still answer within
 *    the io timeout, from the majority.
 *
 * Lease renewals are the core's; the holder here renews every 300 ms. */
#include "faults.h"

#define IO_MS 1500
#define SLACK_MS 1500

static int link_start(const char *link, int port)
{
    char cmd[2400], out[64] = "";
    int lport = 0;
    snprintf(cmd, sizeof cmd, "bash %s/link.sh start '%s' %d", TL_SERVERS_DIR, link, port);
    FILE *f = popen(cmd, "r");
    if (f && fgets(out, sizeof out, f)) lport = atoi(out);
    if (f) pclose(f);
    if (lport <= 0) tl_skip("cannot start tests/servers/link.sh (socat missing?)", 1);
    return lport;
}

typedef struct {
    int n;
    char names[8][128];
} seen;

static int collect(void *p, const char *name)
{
    seen *s = p;
    if (s->n < 8) snprintf(s->names[s->n], sizeof s->names[0], "%s", name);
    s->n++;
    return 0;
}

static int stop_at_first(void *p, const char *name)
{
    (void)name;
    (*(int *)p)++;
    return 1;
}

static void test_redis(const char *dir, int port)
{
    char uri[256], direct[256], link[1200];
    baton_client *c = NULL, *h = NULL;
    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    baton_lock *hl = NULL, *other = NULL, *next = NULL;
    baton_lockinfo li = BATON_LOCK_INFO_INIT;
    seen s;
    uint64_t fence = 0, f0;
    int rc, calls = 0;
    int64_t t0, el;

    snprintf(link, sizeof link, "%s/link", dir);
    int lport = link_start(link, port);
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0?prefix=adm:", lport);
    snprintf(direct, sizeof direct, "redis://127.0.0.1:%d/0?prefix=adm:", port);
    co.io_timeout_ms = IO_MS;
    lo.lease_ms = 900;   /* renewed every 300 ms */
    MUST(baton_client_open(&h, direct, NULL));
    MUST(baton_client_open(&c, uri, &co));
    MUST(baton_lock_open(&hl, h, "job/1", &lo));
    MUST(baton_lock_open(&other, h, "job/2", NULL));
    CHECK_RC(baton_lock_acquire(hl, 0), 0);
    CHECK_RC(baton_lock_acquire(other, 0), 0);
    f0 = baton_lock_fence(hl);

    memset(&s, 0, sizeof s);
    CHECK_RC(baton_lock_list(c, "job/", collect, &s), 0);   /* the link works; a connection is pooled */
    CHECK(s.n == 2);
    CHECK_RC(baton_lock_list(c, "job/", stop_at_first, &calls), 0);
    CHECK(calls == 1);   /* FN's nonzero answer stops the walk, and list answers 0 */

    CHECK(tl_sh("bash %s/link.sh freeze '%s'", TL_SERVERS_DIR, link) == 0);
    t0 = tl_now_ms();
    rc = baton_lock_list(c, "", collect, &s);
    el = tl_now_ms() - t0;
    fprintf(stderr, "   list on a frozen link: rc %d (%s) after %lld ms\n", rc, baton_strerror(rc), (long long)el);
    CHECK(rc == BATON_EUNAVAILABLE);
    CHECK(el <= IO_MS + SLACK_MS);
    t0 = tl_now_ms();
    rc = baton_lock_break(c, "job/1", &fence);
    el = tl_now_ms() - t0;
    fprintf(stderr, "   break on a frozen link: rc %d (%s) after %lld ms\n", rc, baton_strerror(rc), (long long)el);
    CHECK(rc == BATON_EUNAVAILABLE);
    CHECK(el <= IO_MS + SLACK_MS);
    CHECK(tl_sh("bash %s/link.sh thaw '%s'", TL_SERVERS_DIR, link) == 0);
    /* the break may have reached the server while the link thawed: the
     * holder is then gone already */
    tl_sleep_ms(200);
    if (!baton_lock_held(hl)) {
        fprintf(stderr, "   (the frozen break was applied at the thaw; taking the lock again)\n");
        baton_lock_release(hl);
        CHECK_RC(baton_lock_acquire(hl, 2000), 0);
        f0 = baton_lock_fence(hl);
    }

    memset(&s, 0, sizeof s);
    CHECK_RC(baton_lock_list(c, "job/", collect, &s), 0);
    CHECK(s.n == 2);
    CHECK((s.n >= 1 && !strcmp(s.names[0], "job/1")) || (s.n >= 2 && !strcmp(s.names[1], "job/1")));
    fence = 0;
    CHECK_RC(baton_lock_break(c, "job/1", &fence), 0);
    fprintf(stderr, "   holder's fence %llu, the break's %llu\n", (unsigned long long)f0, (unsigned long long)fence);
    CHECK(fence > f0);
    CHECK_RC(baton_lock_info(c, "job/1", &li), 0);
    CHECK(!li.held);
    CHECK(li.fence == fence);
    memset(&s, 0, sizeof s);
    CHECK_RC(baton_lock_list(c, "job/", collect, &s), 0);
    CHECK(s.n == 1 && !strcmp(s.names[0], "job/2"));
    /* the holder learns it at its next renewal (every 300 ms) */
    for (int i = 0; i < 100 && baton_lock_held(hl); i++) tl_sleep_ms(20);
    CHECK(baton_lock_held(hl) == 0);
    CHECK_RC(baton_lock_release(hl), BATON_ELOST);
    MUST(baton_lock_open(&next, c, "job/1", NULL));
    CHECK_RC(baton_lock_acquire(next, 2000), 0);
    CHECK(baton_lock_fence(next) > fence);
    CHECK_RC(baton_lock_release(next), 0);
    /* nobody holds it now: ENOTHELD, the fence bumped all the same */
    uint64_t f2 = 0;
    CHECK_RC(baton_lock_break(c, "job/1", &f2), BATON_ENOTHELD);
    CHECK(f2 > baton_lock_fence(next));
    CHECK_RC(baton_lock_release(other), 0);
    baton_lock_free(next);
    baton_lock_free(hl);
    baton_lock_free(other);
    baton_client_close(c);
    baton_client_close(h);
    tl_sh("bash %s/link.sh stop '%s'", TL_SERVERS_DIR, link);
}

static void test_redlock(const char *dir)
{
    char d[3][1100], link[1200], uri[512], direct[512];
    int port[3];
    baton_client *c = NULL, *h = NULL;
    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
    baton_lock *hl = NULL;
    uint64_t fence = 0, f0;
    seen s;
    int rc;
    int64_t t0, el;

    for (int i = 0; i < 3; i++) {
        snprintf(d[i], sizeof d[i], "%s/rl%d", dir, i);
        port[i] = tl_server_start("redis", d[i], NULL);
    }
    snprintf(link, sizeof link, "%s/rllink", dir);
    int lport = link_start(link, port[0]);
    snprintf(uri, sizeof uri, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", lport, port[1], port[2]);
    snprintf(direct, sizeof direct, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", port[0], port[1], port[2]);
    co.io_timeout_ms = IO_MS;
    MUST(baton_client_open(&h, direct, NULL));
    MUST(baton_client_open(&c, uri, &co));
    MUST(baton_lock_open(&hl, h, "rl/1", NULL));
    CHECK_RC(baton_lock_acquire(hl, 0), 0);
    f0 = baton_lock_fence(hl);
    memset(&s, 0, sizeof s);
    CHECK_RC(baton_lock_list(c, "rl/", collect, &s), 0);   /* a connection to every node is pooled */

    CHECK(tl_sh("bash %s/link.sh freeze '%s'", TL_SERVERS_DIR, link) == 0);
    memset(&s, 0, sizeof s);
    t0 = tl_now_ms();
    rc = baton_lock_list(c, "rl/", collect, &s);
    el = tl_now_ms() - t0;
    fprintf(stderr, "   redlock list, one node frozen: rc %d, %d names, after %lld ms\n", rc, s.n, (long long)el);
    CHECK(rc == 0);
    CHECK(s.n == 1 && !strcmp(s.names[0], "rl/1"));
    CHECK(el <= IO_MS + SLACK_MS);
    t0 = tl_now_ms();
    rc = baton_lock_break(c, "rl/1", &fence);
    el = tl_now_ms() - t0;
    fprintf(stderr, "   redlock break, one node frozen: rc %d, fence %llu (holder's %llu), after %lld ms\n", rc,
            (unsigned long long)fence, (unsigned long long)f0, (long long)el);
    CHECK(rc == 0);
    CHECK(fence > f0);
    CHECK(el <= IO_MS + SLACK_MS);
    CHECK_RC(baton_lock_release(hl), BATON_ELOST);
    CHECK_RC(baton_lock_acquire(hl, 2000), 0);
    CHECK(baton_lock_fence(hl) > fence);
    CHECK_RC(baton_lock_release(hl), 0);
    CHECK(tl_sh("bash %s/link.sh thaw '%s'", TL_SERVERS_DIR, link) == 0);
    baton_lock_free(hl);
    baton_client_close(c);
    baton_client_close(h);
    tl_sh("bash %s/link.sh stop '%s'", TL_SERVERS_DIR, link);
    for (int i = 0; i < 3; i++) tl_server_stop("redis", d[i]);
}

int main(void)
{
    const char *dir = ft_dir("admin");
    int port = tl_server_start("redis", dir, NULL);
    th_current = "redis";
    fprintf(stderr, "-- redis\n");
    test_redis(dir, port);
    tl_server_stop("redis", dir);
    th_current = "redlock";
    fprintf(stderr, "-- redlock\n");
    test_redlock(dir);
    return th_finish();
}
