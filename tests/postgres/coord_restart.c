/* Values, groups and queues across a PostgreSQL restart (issue 24's
 * "watcher's connection restarted"), in every mode, on a server of its own
 * ($BATON_TEST_TMP/pg_coord_restart; restarted with its data and port):
 *   - a value watcher, a group watcher and a waiting taker, all blocked
 *     when the server restarts, go on waiting and see the set, the join and
 *     the put made after it, each by its notification (well before the 5 s
 *     re-read: the listener listens again and wakes everyone);
 *   - a member and a taken item are lease rows on disk: both outlive the
 *     restart (still held, still listed, renewals succeed) and end normally.
 * Prints "measure:" lines. */
#include <baton.h>

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "../common/testlib.h"

static char g_dir[1024];
static int g_port;

static void cleanup(void)
{
    if (g_dir[0]) tl_sh("bash '%s/postgres.sh' stop '%s' >/dev/null 2>&1", TL_SERVERS_DIR, g_dir);
}

typedef struct {
    baton_value *v;
    baton_group *g;
    baton_queue *q;
    uint64_t known;
    int rc;
    int64_t done_ms;         /* tl_now_ms() when it returned */
    baton_value_data d;
    baton_members m;
    baton_queue_item *it;
} blocked;

static void *value_main(void *arg)
{
    blocked *b = arg;
    b->rc = baton_value_watch(b->v, b->known, &b->d, 30000);
    b->done_ms = tl_now_ms();
    return NULL;
}

static void *group_main(void *arg)
{
    blocked *b = arg;
    b->rc = baton_group_watch(b->g, &b->m, 30000);
    b->done_ms = tl_now_ms();
    return NULL;
}

static void *take_main(void *arg)
{
    blocked *b = arg;
    b->rc = baton_queue_take(b->q, &b->it, 30000);
    b->done_ms = tl_now_ms();
    return NULL;
}

static void run_mode(const char *mode)
{
    char u[512];
    baton_client *a, *b;
    baton_value *va = NULL, *vb = NULL;
    baton_group *gw = NULL, *gm = NULL, *gj = NULL;
    baton_queue *qa = NULL, *qb = NULL;
    baton_group_options go = BATON_GROUP_OPTIONS_INIT;
    baton_queue_options qo = BATON_QUEUE_OPTIONS_INIT;
    baton_queue_item *held = NULL;
    blocked bv = { 0 }, bg = { 0 }, bq = { 0 };
    pthread_t tv, tg, tq;
    uint64_t ver = 0;
    int64_t t_up, t_set;

    snprintf(u, sizeof u, "postgres://baton:baton-test@127.0.0.1:%d/postgres?mode=%s&table=rs_%s", g_port, mode, mode);
    a = tl_client_open(u);
    b = tl_client_open(u);
    go.lease_ms = 4000;
    qo.lease_ms = 4000;
    CHECK_RC(baton_value_open(&va, a, "conf"), 0);
    CHECK_RC(baton_value_open(&vb, b, "conf"), 0);
    CHECK_RC(baton_group_open(&gw, a, "svc", &go), 0);
    CHECK_RC(baton_group_open(&gm, b, "svc", &go), 0);
    CHECK_RC(baton_group_open(&gj, b, "svc", &go), 0);
    CHECK_RC(baton_queue_open(&qa, a, "jobs", &qo), 0);
    CHECK_RC(baton_queue_open(&qb, b, "jobs", &qo), 0);
    if (!va || !vb || !gw || !gm || !gj || !qa || !qb) return;

    /* before: a value, a member, a taken item; the watchers know them */
    CHECK_RC(baton_value_set(vb, "v1", 2, BATON_VALUE_ANY, &ver), 0);
    CHECK_RC(baton_group_join(gm, "m1", "x"), 0);
    CHECK_RC(baton_queue_put(qb, "kept", 4), 0);
    CHECK_RC(baton_queue_take(qb, &held, 0), 0);
    CHECK_RC(baton_group_watch(gw, &bg.m, 1000), 0);       /* the first: at once */
    CHECK(bg.m.n == 1);
    baton_members_clear(&bg.m);     /* the watch below fills it again */
    bv.v = va;
    bv.known = ver;
    bg.g = gw;
    bq.q = qa;
    pthread_create(&tv, NULL, value_main, &bv);
    pthread_create(&tg, NULL, group_main, &bg);
    pthread_create(&tq, NULL, take_main, &bq);
    tl_sleep_ms(500);

    tl_server_restart("postgres", g_dir);
    t_up = tl_now_ms();
    tl_sleep_ms(1500);              /* the clients find the server back */
    CHECK(bv.done_ms == 0 && bg.done_ms == 0 && bq.done_ms == 0);   /* still waiting */

    /* after: each is seen by its notification */
    t_set = tl_now_ms();
    CHECK_RC(baton_value_set(vb, "v2", 2, BATON_VALUE_ANY, &ver), 0);
    CHECK_RC(baton_group_join(gj, "m2", "y"), 0);
    CHECK_RC(baton_queue_put(qb, "after", 5), 0);
    pthread_join(tv, NULL);
    pthread_join(tg, NULL);
    pthread_join(tq, NULL);
    CHECK_RC(bv.rc, 0);
    CHECK(bv.d.version == ver && bv.d.data && !strcmp(bv.d.data, "v2"));
    CHECK_RC(bg.rc, 0);
    CHECK(bg.m.n == 2);
    CHECK_RC(bq.rc, 0);
    CHECK(bq.it && !strcmp(baton_queue_item_data(bq.it, NULL), "after"));
    fprintf(stderr, "   measure: %s: after a restart (server back %lld ms before the changes): value watch %lld ms, "
            "group watch %lld ms, take %lld ms\n", mode, (long long)(t_set - t_up), (long long)(bv.done_ms - t_set),
            (long long)(bg.done_ms - t_set), (long long)(bq.done_ms - t_set));
    CHECK(bv.done_ms - t_set < 3000 && bg.done_ms - t_set < 3000 && bq.done_ms - t_set < 3000);

    /* the member and the taken item outlived the restart, renewed since */
    tl_sleep_ms(2500);              /* more than a renewal period (lease/3) on the new server */
    CHECK(baton_group_is_member(gm) == 1);
    CHECK(baton_queue_item_held(held) == 1);
    CHECK_RC(baton_queue_done(held), 0);
    CHECK_RC(baton_group_leave(gm), 0);
    CHECK_RC(baton_group_leave(gj), 0);
    if (bq.it) CHECK_RC(baton_queue_done(bq.it), 0);

    baton_value_data_clear(&bv.d);
    baton_members_clear(&bg.m);
    baton_value_free(va);
    baton_value_free(vb);
    baton_group_free(gw);
    baton_group_free(gm);
    baton_group_free(gj);
    baton_queue_free(qa);
    baton_queue_free(qb);
    baton_client_close(a);
    baton_client_close(b);
}

static void test_session(void) { run_mode("session"); }
static void test_lease(void) { run_mode("lease"); }
static void test_row(void) { run_mode("row"); }

int main(void)
{
    const char *tmp = getenv("BATON_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/pg_coord_restart", tmp && *tmp ? tmp : "/tmp");
    tl_sh("bash '%s/postgres.sh' stop '%s' >/dev/null 2>&1; rm -rf '%s'", TL_SERVERS_DIR, g_dir, g_dir);
    atexit(cleanup);
    g_port = tl_server_start("postgres", g_dir, NULL);
    RUN(test_session);
    RUN(test_lease);
    RUN(test_row);
    return th_finish();
}
