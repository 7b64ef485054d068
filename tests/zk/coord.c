/*
 * Values, groups and queues on ZooKeeper: what is particular to this engine
 * (the shared conformance suite covers the common behaviour).
 *
 *   test_zk_coord   starts its own server (tests/servers/zk.sh) in
 *                   $BATON_TEST_TMP/zk_coord, and a link (tests/servers/link.sh)
 *                   in front of it, and stops both at exit
 *
 *   (a) values: versions are the node's mzxid (grow across delete and
 *       re-create), compare-and-set (two clients expecting one version: one
 *       wins, every round), a node made empty by a foreign client reads as "";
 *   (b) a watcher after a burst of sets ends on the last value;
 *   (c) a watcher whose server restarts (its session survives) sees a set
 *       made after the restart;
 *   (d) a watcher whose session expires under it (its link frozen past the
 *       session timeout) sees the set made meanwhile once the link thaws;
 *   (e) a group member in a child process killed with SIGKILL is gone from
 *       the list (and a watcher is woken) within the session timeout; a
 *       second join with a live member's id is BATON_ELOCKED;
 *   (f) a taker killed mid-item: the item comes back and is taken again,
 *       with a larger fence; FIFO order; two takers never hold one item;
 *   (d2) a member and a taker behind a frozen link: on_lost once each, the
 *       member is gone and the item taken again (larger fence) once the
 *       server expires the session; leave and done then answer BATON_ELOST;
 *   (g) roots that are equal are refused; a nested value name's parent is
 *       an empty value that outlives its child; a lock, value, group and
 *       queue of one NAME do not meet.
 *
 * Worker mode (the suite re-executes itself):
 *   --worker member URI GROUP ID VALUE   joins, says "JOINED", waits for EOF
 *   --worker take URI QUEUE              takes, says "TOOK <data> <fence>", waits
 */
#include "zkt.h"

#include <signal.h>
#include <sys/wait.h>

#define T_MS 3000        /* the session timeout of most clients */
#define T_LONG_MS 12000  /* clients that must outlive a server restart */
#define MARGIN_MS 8000   /* slack on a bound that is a session timeout (see session.c) */

static char g_dir[1024], g_srv[1200], g_link_dir[1200], g_hosts[64];
static int g_port, g_link;

static const char *uri_t(char *buf, size_t n, int session_ms) { return zkt_uri(buf, n, g_hosts, session_ms); }

static baton_client *client(int session_ms)
{
    char uri[256];
    baton_client *c = NULL;
    MUST(baton_client_open(&c, uri_t(uri, sizeof uri, session_ms), NULL));
    return c;
}

static const char *name(const char *what)
{
    static char buf[8][128];
    static int n;
    return zkt_name(buf[n++ % 8], sizeof buf[0], "coord", what);
}

/* ---- (a) versions and compare-and-set ------------------------------------- */

typedef struct {
    baton_value *v;
    uint64_t expect;
    pthread_barrier_t *go;
    int rc;
} cas_arg;

static void *cas_main(void *p)
{
    cas_arg *a = p;
    pthread_barrier_wait(a->go);
    a->rc = baton_value_set(a->v, "x", 1, a->expect, NULL);
    return NULL;
}

static void test_value_versions(void)
{
    baton_client *a = client(T_MS), *b = client(T_MS);
    baton_value *va = NULL, *vb = NULL;
    baton_value_data d = { 0 };
    uint64_t v1 = 0, v2 = 0, v3 = 0;
    const char *n = name("val");

    MUST(baton_value_open(&va, a, n));
    MUST(baton_value_open(&vb, b, n));
    CHECK_RC(baton_value_get(va, &d), BATON_ENOENT);
    CHECK(d.version == 0 && d.data == NULL);
    CHECK_RC(baton_value_set(va, "one", 3, 0, &v1), 0);
    CHECK(v1 > 0);
    CHECK_RC(baton_value_set(vb, "two", 3, 0, NULL), BATON_ECONFLICT);
    CHECK_RC(baton_value_get(vb, &d), 0);
    CHECK(d.version == v1 && d.len == 3 && !strcmp(d.data, "one"));
    baton_value_data_clear(&d);
    CHECK_RC(baton_value_set(vb, "two", 3, v1, &v2), 0);
    CHECK(v2 > v1);
    CHECK_RC(baton_value_set(va, "three", 5, v1, NULL), BATON_ECONFLICT);
    CHECK_RC(baton_value_delete(va, v1), BATON_ECONFLICT);
    CHECK_RC(baton_value_delete(va, v2), 0);
    CHECK_RC(baton_value_delete(va, BATON_VALUE_ANY), BATON_ENOENT);
    CHECK_RC(baton_value_get(vb, &d), BATON_ENOENT);
    /* re-created: a version larger than any before (zxids only grow) */
    CHECK_RC(baton_value_set(vb, "four", 4, BATON_VALUE_ANY, &v3), 0);
    CHECK(v3 > v2);

    /* two clients expecting one version: exactly one wins, every round */
    int both = 0, none = 0;
    for (int round = 0; round < 20; round++) {
        pthread_barrier_t go;
        uint64_t cur = 0;
        CHECK_RC(baton_value_get(va, &d), 0);
        cur = d.version;
        baton_value_data_clear(&d);
        pthread_barrier_init(&go, NULL, 2);
        cas_arg x = { va, cur, &go, -100 }, y = { vb, cur, &go, -100 };
        pthread_t tx, ty;
        pthread_create(&tx, NULL, cas_main, &x);
        pthread_create(&ty, NULL, cas_main, &y);
        pthread_join(tx, NULL);
        pthread_join(ty, NULL);
        pthread_barrier_destroy(&go);
        if (x.rc == 0 && y.rc == 0) both++;
        if (x.rc != 0 && y.rc != 0) none++;
        CHECK(x.rc == 0 || x.rc == BATON_ECONFLICT);
        CHECK(y.rc == 0 || y.rc == BATON_ECONFLICT);
    }
    CHECK(both == 0);
    CHECK(none == 0);
    CHECK_RC(baton_value_delete(va, BATON_VALUE_ANY), 0);
    baton_value_free(va);
    baton_value_free(vb);
    baton_client_close(a);
    baton_client_close(b);
}

/* ---- (b) a burst of sets ---------------------------------------------------- */

typedef struct {
    baton_value *v;
    uint64_t known;
    int64_t wait_ms;
    char last[64];
    uint64_t version;
    int rc, wakes;
} watch_arg;

/* Watches until the value reads WANT (or an error / timeout). */
static void *watch_until(void *p)
{
    watch_arg *a = p;
    for (;;) {
        baton_value_data d = { 0 };
        a->rc = baton_value_watch(a->v, a->known, &d, a->wait_ms);
        if (a->rc) break;
        a->wakes++;
        a->known = d.version;
        a->version = d.version;
        snprintf(a->last, sizeof a->last, "%s", d.data ? d.data : "");
        baton_value_data_clear(&d);
        if (!strcmp(a->last, "last")) break;
    }
    return NULL;
}

static void test_value_burst(void)
{
    baton_client *a = client(T_MS), *b = client(T_MS);
    baton_value *va = NULL, *vb = NULL;
    const char *n = name("burst");
    uint64_t ver = 0;
    pthread_t t;

    MUST(baton_value_open(&va, a, n));
    MUST(baton_value_open(&vb, b, n));
    watch_arg w = { va, 0, 20000, "", 0, -100, 0 };
    pthread_create(&t, NULL, watch_until, &w);
    tl_sleep_ms(200);
    for (int i = 0; i < 50; i++) {
        char buf[16];
        snprintf(buf, sizeof buf, "%d", i);
        CHECK_RC(baton_value_set(vb, buf, strlen(buf), BATON_VALUE_ANY, NULL), 0);
    }
    CHECK_RC(baton_value_set(vb, "last", 4, BATON_VALUE_ANY, &ver), 0);
    pthread_join(t, NULL);
    CHECK_RC(w.rc, 0);
    CHECK(!strcmp(w.last, "last"));
    CHECK(w.version == ver);
    fprintf(stderr, "   measure: %d wake-ups for 51 sets\n", w.wakes);
    /* nothing changes: the watch times out */
    baton_value_data d = { 0 };
    CHECK_RC(baton_value_watch(va, ver, &d, 300), BATON_ETIMEDOUT);
    baton_value_data_clear(&d);
    CHECK_RC(baton_value_delete(vb, BATON_VALUE_ANY), 0);
    baton_value_free(va);
    baton_value_free(vb);
    baton_client_close(a);
    baton_client_close(b);
}

/* ---- (c) the watcher's server restarts ---------------------------------------- */

static void test_value_watch_restart(void)
{
    baton_client *a = client(T_LONG_MS), *b = client(T_LONG_MS);
    baton_value *va = NULL, *vb = NULL;
    const char *n = name("restart");
    uint64_t v0 = 0, v1 = 0;
    pthread_t t;

    MUST(baton_value_open(&va, a, n));
    MUST(baton_value_open(&vb, b, n));
    CHECK_RC(baton_value_set(vb, "before", 6, BATON_VALUE_ANY, &v0), 0);
    watch_arg w = { va, v0, 60000, "", 0, -100, 0 };
    pthread_create(&t, NULL, watch_until, &w);
    tl_sleep_ms(300);
    CHECK(zkt_srv("restart", g_srv) == 0);
    /* a set after the restart (the setter retries while the server starts) */
    int rc = -1;
    for (int i = 0; i < 100 && rc; i++) {
        rc = baton_value_set(vb, "last", 4, BATON_VALUE_ANY, &v1);
        if (rc) tl_sleep_ms(200);
    }
    CHECK_RC(rc, 0);
    pthread_join(t, NULL);
    CHECK_RC(w.rc, 0);
    CHECK(!strcmp(w.last, "last"));
    CHECK(w.version == v1 && v1 > v0);
    CHECK_RC(baton_value_delete(vb, BATON_VALUE_ANY), 0);
    baton_value_free(va);
    baton_value_free(vb);
    baton_client_close(a);
    baton_client_close(b);
}

/* ---- (d) the watcher's session expires -------------------------------------- */

static int link_cmd(const char *cmd)
{
    return tl_sh("bash '%s/link.sh' %s '%s' >/dev/null 2>&1", TL_SERVERS_DIR, cmd, g_link_dir);
}

static void test_value_watch_expired(void)
{
    char uri[256];
    baton_client *a = NULL, *b = client(T_MS);
    baton_value *va = NULL, *vb = NULL;
    const char *n = name("expire");
    uint64_t v0 = 0, v1 = 0;
    pthread_t t;

    snprintf(uri, sizeof uri, "zk://127.0.0.1:%d?session_timeout_ms=%d", g_link, T_MS);
    MUST(baton_client_open(&a, uri, NULL));
    MUST(baton_value_open(&va, a, n));
    MUST(baton_value_open(&vb, b, n));
    CHECK_RC(baton_value_set(vb, "before", 6, BATON_VALUE_ANY, &v0), 0);
    watch_arg w = { va, v0, 60000, "", 0, -100, 0 };
    pthread_create(&t, NULL, watch_until, &w);
    tl_sleep_ms(300);
    CHECK(link_cmd("freeze") == 0);
    CHECK_RC(baton_value_set(vb, "last", 4, BATON_VALUE_ANY, &v1), 0);
    /* past the session timeout: the server expires the watcher's session */
    tl_sleep_ms(2 * T_MS + 1000);
    CHECK(w.rc == -100); /* still waiting: nothing reached it */
    CHECK(link_cmd("thaw") == 0);
    pthread_join(t, NULL);
    CHECK_RC(w.rc, 0);
    CHECK(!strcmp(w.last, "last"));
    CHECK(w.version == v1);
    CHECK_RC(baton_value_delete(vb, BATON_VALUE_ANY), 0);
    baton_value_free(va);
    baton_value_free(vb);
    baton_client_close(a);
    baton_client_close(b);
}

/* ---- (d2) a member and a taker whose session is lost ---------------------------- */

static atomic_int g_member_lost, g_item_lost;
static void member_lost_cb(baton_group *g, void *p) { (void)g, (void)p; atomic_fetch_add(&g_member_lost, 1); }
static void item_lost_cb(baton_queue_item *it, void *p) { (void)it, (void)p; atomic_fetch_add(&g_item_lost, 1); }

static void test_session_lost(void)
{
    char uri[256];
    baton_client *a = NULL, *b = client(T_MS);
    baton_group *ga = NULL, *gb = NULL;
    baton_queue *qa = NULL, *qb = NULL;
    baton_queue_item *ia = NULL, *ib = NULL;
    baton_members m = { 0 };
    baton_group_options go = BATON_GROUP_OPTIONS_INIT;
    baton_queue_options qo = BATON_QUEUE_OPTIONS_INIT;
    const char *gn = name("lostgroup"), *qn = name("lostqueue");

    go.on_lost = member_lost_cb;
    qo.on_lost = item_lost_cb;
    snprintf(uri, sizeof uri, "zk://127.0.0.1:%d?session_timeout_ms=%d", g_link, T_MS);
    MUST(baton_client_open(&a, uri, NULL));
    MUST(baton_group_open(&ga, a, gn, &go));
    MUST(baton_group_open(&gb, b, gn, NULL));
    MUST(baton_queue_open(&qa, a, qn, &qo));
    MUST(baton_queue_open(&qb, b, qn, NULL));
    CHECK_RC(baton_group_join(ga, "cut-off", "v"), 0);
    CHECK_RC(baton_queue_put(qb, "item", 4), 0);
    CHECK_RC(baton_queue_take(qa, &ia, 5000), 0);
    uint64_t fa = ia ? baton_queue_item_fence(ia) : 0;
    CHECK(link_cmd("freeze") == 0);
    int64_t t0 = tl_now_ms();
    while ((atomic_load(&g_member_lost) == 0 || atomic_load(&g_item_lost) == 0) && tl_now_ms() - t0 < T_MS + MARGIN_MS)
        tl_sleep_ms(20);
    CHECK(atomic_load(&g_member_lost) == 1);
    CHECK(atomic_load(&g_item_lost) == 1);
    CHECK(!baton_group_is_member(ga));
    CHECK(ia && !baton_queue_item_held(ia));
    /* the server expires the session: the member leaves, the item comes back */
    CHECK_RC(baton_queue_take(qb, &ib, T_MS + MARGIN_MS), 0);
    CHECK(ib && !strcmp(baton_queue_item_data(ib, NULL), "item"));
    CHECK(ib && baton_queue_item_fence(ib) > fa);
    CHECK_RC(baton_group_members(gb, &m), 0);
    CHECK(m.n == 0);
    CHECK(link_cmd("thaw") == 0);
    CHECK_RC(baton_queue_done(ia), BATON_ELOST);
    CHECK_RC(baton_group_leave(ga), BATON_ELOST);
    CHECK(atomic_load(&g_member_lost) == 1 && atomic_load(&g_item_lost) == 1);
    CHECK_RC(baton_queue_done(ib), 0);
    baton_members_clear(&m);
    baton_group_free(ga);
    baton_group_free(gb);
    baton_queue_free(qa);
    baton_queue_free(qb);
    baton_client_close(a);
    baton_client_close(b);
}

/* ---- (g) layout: roots, nesting, one NAME of four kinds ------------------------ */

static void test_layout(void)
{
    char uri[256];
    baton_client *c = client(T_MS), *x = NULL;
    baton_value *ab = NULL, *a = NULL;
    baton_lock *l = NULL;
    baton_group *g = NULL;
    baton_queue *q = NULL;
    baton_value_data d = { 0 };
    const char *n = name("nest"), *one = name("one");
    char abn[160];

    snprintf(uri, sizeof uri, "zk://%s?value_root=/baton", g_hosts);
    CHECK_RC(baton_client_open(&x, uri, NULL), BATON_EINVAL);
    snprintf(uri, sizeof uri, "zk://%s?group_root=/q&queue_root=/q", g_hosts);
    CHECK_RC(baton_client_open(&x, uri, NULL), BATON_EINVAL);

    /* a nested name: ZooKeeper needs its parent, an empty value (kazoo's
     * ensure_path makes the same), which stays when the child goes */
    snprintf(abn, sizeof abn, "%s/b", n);
    MUST(baton_value_open(&ab, c, abn));
    MUST(baton_value_open(&a, c, n));
    CHECK_RC(baton_value_set(ab, "b", 1, BATON_VALUE_ANY, NULL), 0);
    CHECK_RC(baton_value_get(a, &d), 0);
    CHECK(d.len == 0 && d.version > 0);
    baton_value_data_clear(&d);
    CHECK_RC(baton_value_set(a, "a", 1, BATON_VALUE_ANY, NULL), 0);
    CHECK_RC(baton_value_delete(a, BATON_VALUE_ANY), BATON_EINVAL); /* values below it */
    CHECK_RC(baton_value_delete(ab, BATON_VALUE_ANY), 0);
    tl_sleep_ms(200);
    CHECK_RC(baton_value_get(a, &d), 0);
    CHECK(d.data && !strcmp(d.data, "a"));
    baton_value_data_clear(&d);
    CHECK_RC(baton_value_delete(a, BATON_VALUE_ANY), 0);

    /* a lock, a value, a group and a queue of one NAME do not meet */
    MUST(baton_lock_open(&l, c, one, NULL));
    MUST(baton_group_open(&g, c, one, NULL));
    MUST(baton_queue_open(&q, c, one, NULL));
    baton_value_free(a);
    MUST(baton_value_open(&a, c, one));
    CHECK_RC(baton_lock_acquire(l, 5000), 0);
    CHECK_RC(baton_value_set(a, "v", 1, 0, NULL), 0);
    CHECK_RC(baton_group_join(g, "m", "x"), 0);
    CHECK_RC(baton_queue_put(q, "i", 1), 0);
    CHECK_RC(baton_lock_release(l), 0); /* it writes its fence into the lock's node */
    CHECK_RC(baton_value_get(a, &d), 0);
    CHECK(d.data && !strcmp(d.data, "v"));
    baton_value_data_clear(&d);
    baton_members m = { 0 };
    CHECK_RC(baton_group_members(g, &m), 0);
    CHECK(m.n == 1);
    baton_members_clear(&m);
    uint64_t waiting = 0;
    CHECK_RC(baton_queue_size(q, &waiting), 0);
    CHECK(waiting == 1);
    baton_queue_item *it = NULL;
    CHECK_RC(baton_queue_take(q, &it, 0), 0);
    CHECK_RC(baton_queue_done(it), 0);
    CHECK_RC(baton_group_leave(g), 0);
    CHECK_RC(baton_value_delete(a, BATON_VALUE_ANY), 0);
    baton_lock_free(l);
    baton_group_free(g);
    baton_queue_free(q);
    baton_value_free(a);
    baton_value_free(ab);
    baton_client_close(c);
}

/* ---- (e) a member killed ------------------------------------------------------ */

static int worker_member(const char *uri, const char *group, const char *id, const char *value)
{
    baton_client *c = NULL;
    baton_group *g = NULL;
    char line[64];
    int rc;
    if ((rc = baton_client_open(&c, uri, NULL)) || (rc = baton_group_open(&g, c, group, NULL)) ||
        (rc = baton_group_join(g, id, value))) {
        tl_out_line("ERR %d %s\n", rc, tl_lastmsg());
        return 2;
    }
    tl_out_line("JOINED\n");
    while (tl_read_line(0, line, sizeof line, 600000) >= 0) {
    }
    baton_group_free(g);
    baton_client_close(c);
    return 0;
}

static const char *member_value(const baton_members *m, const char *id)
{
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->members[i].id, id)) return m->members[i].value;
    return NULL;
}

static void test_member_killed(void)
{
    char uri[256];
    baton_client *c = client(T_MS);
    baton_group *g = NULL, *g2 = NULL;
    baton_members m = { 0 };
    const char *n = name("group");
    tl_worker w;

    MUST(baton_group_open(&g, c, n, NULL));
    MUST(baton_group_open(&g2, c, n, NULL));
    char *argv[] = { "zk-worker", "--worker", "member", (char *)uri_t(uri, sizeof uri, T_MS), (char *)n, "w1",
                     "10.0.0.1:80", NULL };
    MUST(tl_worker_spawn(&w, argv));
    char line[256];
    CHECK(tl_expect_line(&w, "JOINED", line, sizeof line, 15000) == 0);
    CHECK_RC(baton_group_join(g, "me", "here"), 0);
    CHECK_RC(baton_group_join(g2, "w1", "again"), BATON_ELOCKED);
    CHECK_RC(baton_group_members(g, &m), 0);
    CHECK(m.n == 2);
    CHECK(member_value(&m, "w1") && !strcmp(member_value(&m, "w1"), "10.0.0.1:80"));
    CHECK(member_value(&m, "me") && !strcmp(member_value(&m, "me"), "here"));
    /* the watch's first call answers at once, with the members now */
    baton_members_clear(&m); /* the calls zero *out, they do not free it */
    CHECK_RC(baton_group_watch(g2, &m, 5000), 0);
    CHECK(m.n == 2);

    int64_t t0 = tl_now_ms();
    CHECK(kill(w.pid, SIGKILL) == 0);
    tl_worker_reap(&w, 5000);
    int gone = 0;
    while (!gone && tl_now_ms() - t0 < T_MS + MARGIN_MS) {
        baton_members_clear(&m);
        if (baton_group_watch(g2, &m, T_MS + MARGIN_MS) != 0) break;
        gone = member_value(&m, "w1") == NULL;
    }
    int64_t took = tl_now_ms() - t0;
    CHECK(gone);
    CHECK(member_value(&m, "me") != NULL);
    fprintf(stderr, "   measure: a killed member was gone after %lld ms (session %d ms)\n", (long long)took, T_MS);
    CHECK(took <= T_MS + MARGIN_MS);
    /* its id is free again */
    CHECK_RC(baton_group_join(g2, "w1", "again"), 0);
    CHECK_RC(baton_group_leave(g2), 0);
    CHECK_RC(baton_group_leave(g), 0);
    baton_members_clear(&m);
    CHECK_RC(baton_group_members(g, &m), 0);
    CHECK(m.n == 0);
    baton_members_clear(&m);
    baton_group_free(g);
    baton_group_free(g2);
    baton_client_close(c);
}

/* ---- (f) a taker killed mid-item ------------------------------------------------ */

static int worker_take(const char *uri, const char *queue)
{
    baton_client *c = NULL;
    baton_queue *q = NULL;
    baton_queue_item *it = NULL;
    char line[64];
    int rc;
    if ((rc = baton_client_open(&c, uri, NULL)) || (rc = baton_queue_open(&q, c, queue, NULL)) ||
        (rc = baton_queue_take(q, &it, 10000))) {
        tl_out_line("ERR %d %s\n", rc, tl_lastmsg());
        return 2;
    }
    tl_out_line("TOOK %s %llu\n", baton_queue_item_data(it, NULL), (unsigned long long)baton_queue_item_fence(it));
    while (tl_read_line(0, line, sizeof line, 600000) >= 0) {
    }
    baton_queue_item_free(it);
    baton_queue_free(q);
    baton_client_close(c);
    return 0;
}

static void test_taker_killed(void)
{
    char uri[256], line[256];
    baton_client *c = client(T_MS);
    baton_queue *q = NULL;
    baton_queue_item *i1 = NULL, *i2 = NULL, *i3 = NULL;
    const char *n = name("queue");
    uint64_t waiting = 99;
    tl_worker w;

    MUST(baton_queue_open(&q, c, n, NULL));
    CHECK_RC(baton_queue_take(q, &i1, 0), BATON_ENOENT);
    CHECK_RC(baton_queue_put(q, "a", 1), 0);
    CHECK_RC(baton_queue_put(q, "b", 1), 0);
    CHECK_RC(baton_queue_put(q, "c", 1), 0);
    char *argv[] = { "zk-worker", "--worker", "take", (char *)uri_t(uri, sizeof uri, T_MS), (char *)n, NULL };
    MUST(tl_worker_spawn(&w, argv));
    CHECK(tl_expect_line(&w, "TOOK ", line, sizeof line, 15000) == 0);
    CHECK(!strncmp(line, "TOOK a ", 7)); /* FIFO: the oldest */
    uint64_t fw = strtoull(line + 7, NULL, 10);
    CHECK(fw > 0);
    CHECK_RC(baton_queue_size(q, &waiting), 0);
    CHECK(waiting == 2);
    /* "a" is held: the next take gets "b", and a third "c" */
    CHECK_RC(baton_queue_take(q, &i1, 0), 0);
    CHECK(i1 && !strcmp(baton_queue_item_data(i1, NULL), "b"));
    CHECK(i1 && baton_queue_item_fence(i1) > fw);
    CHECK_RC(baton_queue_take(q, &i2, 0), 0);
    CHECK(i2 && !strcmp(baton_queue_item_data(i2, NULL), "c"));
    CHECK_RC(baton_queue_take(q, &i3, 0), BATON_ENOENT);

    int64_t t0 = tl_now_ms();
    CHECK(kill(w.pid, SIGKILL) == 0);
    tl_worker_reap(&w, 5000);
    /* "a" comes back when the killed taker's session ends */
    CHECK_RC(baton_queue_take(q, &i3, T_MS + MARGIN_MS), 0);
    int64_t took = tl_now_ms() - t0;
    CHECK(i3 && !strcmp(baton_queue_item_data(i3, NULL), "a"));
    CHECK(i3 && baton_queue_item_fence(i3) > baton_queue_item_fence(i2));
    fprintf(stderr, "   measure: a killed taker's item was taken again after %lld ms (session %d ms)\n",
            (long long)took, T_MS);
    CHECK(took <= T_MS + MARGIN_MS);
    /* given back: at once again, to the next take */
    uint64_t f1 = i1 ? baton_queue_item_fence(i1) : 0;
    CHECK_RC(baton_queue_return(i1), 0);
    CHECK_RC(baton_queue_take(q, &i1, 0), 0);
    CHECK(i1 && !strcmp(baton_queue_item_data(i1, NULL), "b"));
    CHECK(i1 && baton_queue_item_fence(i1) > f1);
    CHECK_RC(baton_queue_done(i1), 0);
    CHECK_RC(baton_queue_done(i2), 0);
    CHECK_RC(baton_queue_done(i3), 0);
    CHECK_RC(baton_queue_size(q, &waiting), 0);
    CHECK(waiting == 0);
    CHECK_RC(baton_queue_take(q, &i1, 0), BATON_ENOENT);
    baton_queue_free(q);
    baton_client_close(c);
}

static void show_log(int level, const char *message, void *payload)
{
    (void)payload;
    if (level <= BATON_LOG_INFO) fprintf(stderr, "   [baton] %s\n", message);
}

int main(int argc, char **argv)
{
    baton_log_set(show_log, NULL);
    if (argc >= 2 && !strcmp(argv[1], "--worker")) {
        if (argc == 7 && !strcmp(argv[2], "member")) return worker_member(argv[3], argv[4], argv[5], argv[6]);
        if (argc == 5 && !strcmp(argv[2], "take")) return worker_take(argv[3], argv[4]);
        fprintf(stderr, "bad worker arguments\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(g_dir, sizeof g_dir, "%s", zkt_dir("coord"));
    snprintf(g_srv, sizeof g_srv, "%s/srv", g_dir);
    snprintf(g_link_dir, sizeof g_link_dir, "%s/link", g_dir);
    zkt_cleanup_at_exit(g_dir);
    g_port = tl_server("zk", "start", g_srv, NULL, 1);
    snprintf(g_hosts, sizeof g_hosts, "127.0.0.1:%d", g_port);
    {
        char cmd[2048], out[64] = "";
        snprintf(cmd, sizeof cmd, "bash '%s/link.sh' start '%s' %d", TL_SERVERS_DIR, g_link_dir, g_port);
        FILE *p = popen(cmd, "r");
        if (p && !fgets(out, sizeof out, p)) out[0] = 0;
        if (p) pclose(p);
        g_link = atoi(out);
    }
    fprintf(stderr, "zk coord: server on %s, link on %d\n", g_hosts, g_link);

    RUN(test_layout);
    RUN(test_value_versions);
    RUN(test_value_burst);
    RUN(test_member_killed);
    RUN(test_taker_killed);
    if (g_link > 0) {
        RUN(test_value_watch_expired);
        RUN(test_session_lost);
    } else {
        CHECK(!"link.sh start (socat)");
    }
    RUN(test_value_watch_restart);

    link_cmd("stop");
    zkt_srv("stop", g_srv);
    return th_finish();
}
