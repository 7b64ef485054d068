/*
 * Values, groups and queues on MySQL/MariaDB (issue 24), on the "mysql"
 * fixture, in the mode the URI names (ctest runs it once per mode):
 *
 *   test_mysql_coord URI
 *
 *   - values: ENOENT when absent; create-only (expect 0), compare-and-set
 *     and delete with a stale version are ECONFLICT; versions strictly
 *     increase across delete and re-create (the tombstone); bytes with NULs
 *     and the empty value round-trip; counters added by 4 clients at once
 *     end on the exact sum (compare-and-set is atomic); a watcher on
 *     another client ends on the last value of a burst;
 *   - groups: members of two clients listed with their values; a second
 *     live member with one id is ELOCKED; leave; a member process SIGKILLed
 *     is gone within its lease (+ the poll bound), and a watcher is told; one
 *     SIGSTOPped past its lease is not listed, and told it lost when resumed;
 *   - queues: FIFO, fences increasing per take, a try on an empty queue is
 *     ENOENT, a returned item is taken again, done removes it; a taker
 *     process SIGKILLed mid-item gives the item back within its lease (with
 *     a larger fence); 4 takers on 4 clients share 40 items, each taken and
 *     done exactly once, never held by two at once;
 *   - (test_mysql_coord restart, a server of its own) a value watcher and a
 *     group watcher outlive a server crash (down 1 s) and restart and see the change made after
 *     it; so does a waiting take; a member and a taken item with 20 s leases stay ours;
 *   - what the core builds on them: a count-down latch (values), a double
 *     barrier of 3 (groups + values).
 *
 * Worker modes (spawned by the cases above):
 *   test_mysql_coord member URI GROUP ID LEASE_MS   joins, says "joined", waits
 *   test_mysql_coord taker URI QUEUE LEASE_MS       takes, says "took DATA FENCE", waits
 */
#include <baton.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../harness.h"
#include "../common/testlib.h"

static char g_uri[1024];
static char g_tag[32];         /* names of this run: several modes share the fixture */

static void name_of(char *out, size_t n, const char *what)
{
    snprintf(out, n, "coord-%s-%s", g_tag, what);
}

/* ---- values ---------------------------------------------------------------- */

static void values_basics(void)
{
    baton_client *c = tl_client_open(g_uri);
    baton_value *v = NULL;
    baton_value_data d = { 0 };
    uint64_t v1 = 0, v2 = 0, v3 = 0, v4 = 0;
    char name[128];
    static const char bin[] = { 'a', 0, 'b', 0, 'c' };

    name_of(name, sizeof name, "val");
    MUST(baton_value_open(&v, c, name));
    CHECK_RC(baton_value_get(v, &d), BATON_ENOENT);
    CHECK(d.data == NULL && d.version == 0);
    CHECK_RC(baton_value_delete(v, BATON_VALUE_ANY), BATON_ENOENT);
    CHECK_RC(baton_value_set(v, "one", 3, 0, &v1), 0);
    CHECK(v1 > 0);
    CHECK_RC(baton_value_set(v, "again", 5, 0, NULL), BATON_ECONFLICT);
    CHECK_RC(baton_value_set(v, "two", 3, v1, &v2), 0);
    CHECK(v2 > v1);
    CHECK_RC(baton_value_set(v, "stale", 5, v1, NULL), BATON_ECONFLICT);
    CHECK_RC(baton_value_get(v, &d), 0);
    CHECK(d.version == v2 && d.len == 3 && !strcmp(d.data, "two"));
    baton_value_data_clear(&d);
    CHECK_RC(baton_value_delete(v, v1), BATON_ECONFLICT);
    CHECK_RC(baton_value_delete(v, v2), 0);
    CHECK_RC(baton_value_get(v, &d), BATON_ENOENT);
    CHECK_RC(baton_value_delete(v, BATON_VALUE_ANY), BATON_ENOENT);
    /* re-created: past every version before the delete */
    CHECK_RC(baton_value_set(v, bin, sizeof bin, 0, &v3), 0);
    CHECK(v3 > v2);
    CHECK_RC(baton_value_get(v, &d), 0);
    CHECK(d.len == sizeof bin && !memcmp(d.data, bin, sizeof bin) && d.version == v3);
    baton_value_data_clear(&d);
    CHECK_RC(baton_value_set(v, "", 0, BATON_VALUE_ANY, &v4), 0);
    CHECK(v4 > v3);
    CHECK_RC(baton_value_get(v, &d), 0);
    CHECK(d.len == 0 && d.data && d.data[0] == 0 && d.version == v4);
    baton_value_data_clear(&d);
    /* the largest value */
    {
        char *big = malloc(BATON_VALUE_MAX);
        for (size_t i = 0; big && i < BATON_VALUE_MAX; i++) big[i] = (char)(i * 7 + 3);
        CHECK(big != NULL);
        if (big) {
            CHECK_RC(baton_value_set(v, big, BATON_VALUE_MAX, v4, &v4), 0);
            CHECK_RC(baton_value_get(v, &d), 0);
            CHECK(d.len == BATON_VALUE_MAX && d.data && !memcmp(d.data, big, BATON_VALUE_MAX) && d.version == v4);
            baton_value_data_clear(&d);
        }
        free(big);
    }
    /* a watch that is told of nothing times out; one that knows an old version answers at once */
    CHECK_RC(baton_value_watch(v, v4, &d, 300), BATON_ETIMEDOUT);
    CHECK_RC(baton_value_watch(v, v3, &d, 0), 0);
    CHECK(d.version == v4 && d.len == BATON_VALUE_MAX);
    baton_value_data_clear(&d);
    baton_value_free(v);
    baton_client_close(c);
}

#define ADDERS 4
#define ADDS 25

static void *adder(void *arg)
{
    const char *name = arg;
    baton_client *c = tl_client_open(g_uri);
    baton_counter *k = NULL;
    MUST(baton_counter_open(&k, c, name));
    for (int i = 0; i < ADDS; i++) MUST(baton_counter_add(k, 1, NULL));
    baton_counter_free(k);
    baton_client_close(c);
    return NULL;
}

static void values_counter_race(void)
{
    pthread_t t[ADDERS];
    char name[128];
    baton_client *c = tl_client_open(g_uri);
    baton_counter *k = NULL;
    int64_t n = -1;

    name_of(name, sizeof name, "counter");
    for (int i = 0; i < ADDERS; i++) pthread_create(&t[i], NULL, adder, name);
    for (int i = 0; i < ADDERS; i++) pthread_join(t[i], NULL);
    MUST(baton_counter_open(&k, c, name));
    CHECK_RC(baton_counter_get(k, &n, NULL), 0);
    CHECK(n == ADDERS * ADDS);
    if (n != ADDERS * ADDS) fprintf(stderr, "   counter = %lld, want %d\n", (long long)n, ADDERS * ADDS);
    baton_counter_free(k);
    baton_client_close(c);
}

typedef struct {
    const char *name;
    atomic_int ready;
    char last[64];
    uint64_t version;
    int rc;
} watcher_arg;

/* Watches on a client of its own (no local wake-up: the poll must see it)
 * until the value is "last". */
static void *watcher(void *arg)
{
    watcher_arg *a = arg;
    baton_client *c = tl_client_open(g_uri);
    baton_value *v = NULL;
    baton_value_data d = { 0 };
    uint64_t known = 0;
    MUST(baton_value_open(&v, c, a->name));
    if (baton_value_get(v, &d) == 0) known = d.version;
    baton_value_data_clear(&d);
    atomic_store(&a->ready, 1);
    for (int i = 0; i < 200; i++) {
        if ((a->rc = baton_value_watch(v, known, &d, 10000))) break;
        known = d.version;
        snprintf(a->last, sizeof a->last, "%s", d.data ? d.data : "");
        a->version = d.version;
        baton_value_data_clear(&d);
        if (!strcmp(a->last, "last")) break;
    }
    baton_value_free(v);
    baton_client_close(c);
    return NULL;
}

static void values_watch_burst(void)
{
    baton_client *c = tl_client_open(g_uri);
    baton_value *v = NULL;
    watcher_arg a = { 0 };
    pthread_t t;
    char name[128], buf[32];
    uint64_t ver = 0;

    name_of(name, sizeof name, "watched");
    a.name = name;
    MUST(baton_value_open(&v, c, name));
    MUST(baton_value_set(v, "first", 5, BATON_VALUE_ANY, NULL));
    pthread_create(&t, NULL, watcher, &a);
    while (!atomic_load(&a.ready)) tl_sleep_ms(5);
    for (int i = 0; i < 30; i++) {
        snprintf(buf, sizeof buf, "v%d", i);
        MUST(baton_value_set(v, buf, strlen(buf), BATON_VALUE_ANY, NULL));
    }
    MUST(baton_value_set(v, "last", 4, BATON_VALUE_ANY, &ver));
    pthread_join(t, NULL);
    CHECK_RC(a.rc, 0);
    CHECK(!strcmp(a.last, "last") && a.version == ver);
    baton_value_free(v);
    baton_client_close(c);
}

/* ---- groups ---------------------------------------------------------------- */

static int has(const baton_members *m, const char *id, const char *value)
{
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->members[i].id, id)) return !value || !strcmp(m->members[i].value, value);
    return 0;
}

static void groups_basics(void)
{
    baton_client *c1 = tl_client_open(g_uri), *c2 = tl_client_open(g_uri);
    baton_group *a = NULL, *b = NULL, *dup = NULL, *obs = NULL;
    baton_members m = { 0 };
    char name[128];

    name_of(name, sizeof name, "grp");
    MUST(baton_group_open(&a, c1, name, NULL));
    MUST(baton_group_open(&b, c2, name, NULL));
    MUST(baton_group_open(&dup, c2, name, NULL));
    MUST(baton_group_open(&obs, c2, name, NULL));
    CHECK_RC(baton_group_members(obs, &m), 0);
    CHECK(m.n == 0);
    CHECK_RC(baton_group_join(a, "node-a", "10.0.0.1:80"), 0);
    CHECK_RC(baton_group_join(b, "node-b", ""), 0);
    CHECK_RC(baton_group_join(dup, "node-a", "other"), BATON_ELOCKED);
    CHECK(baton_group_is_member(a) && baton_group_is_member(b));
    CHECK_RC(baton_group_members(obs, &m), 0);
    CHECK(m.n == 2 && has(&m, "node-a", "10.0.0.1:80") && has(&m, "node-b", ""));
    baton_members_clear(&m);
    /* the first watch answers at once, the next when something changes */
    CHECK_RC(baton_group_watch(obs, &m, 0), 0);
    baton_members_clear(&m);
    CHECK_RC(baton_group_watch(obs, &m, 300), BATON_ETIMEDOUT);
    CHECK_RC(baton_group_leave(a), 0);
    CHECK_RC(baton_group_watch(obs, &m, 5000), 0);
    CHECK(m.n == 1 && has(&m, "node-b", ""));
    baton_members_clear(&m);
    /* the id is free again */
    CHECK_RC(baton_group_join(dup, "node-a", "other"), 0);
    CHECK_RC(baton_group_members(obs, &m), 0);
    CHECK(m.n == 2 && has(&m, "node-a", "other"));
    baton_members_clear(&m);
    baton_group_free(a);
    baton_group_free(b);
    baton_group_free(dup);
    CHECK_RC(baton_group_members(obs, &m), 0);
    CHECK(m.n == 0);
    baton_members_clear(&m);
    baton_group_free(obs);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* A member process (LEASE_MS) killed with SIGKILL: listed before, gone
 * within its lease and the poll bound after, and a watcher is told. */
static void groups_member_killed(void)
{
    const int lease = 2000;
    baton_client *c = tl_client_open(g_uri);
    baton_group *obs = NULL;
    baton_members m = { 0 };
    tl_worker w;
    char name[128], lease_s[16], line[256];
    int64_t t0, gone_ms = -1;

    name_of(name, sizeof name, "killed");
    snprintf(lease_s, sizeof lease_s, "%d", lease);
    char *argv[] = { "test_mysql_coord", "member", g_uri, name, "victim", lease_s, NULL };
    MUST(baton_group_open(&obs, c, name, NULL));
    if (tl_worker_spawn(&w, argv)) {
        CHECK(!"spawn");
        return;
    }
    CHECK(tl_expect_line(&w, "joined", line, sizeof line, 10000) == 0);
    CHECK_RC(baton_group_members(obs, &m), 0);
    CHECK(m.n == 1 && has(&m, "victim", "alive"));
    baton_members_clear(&m);
    /* renewed: still there after one and a half leases */
    tl_sleep_ms(lease * 3 / 2);
    CHECK_RC(baton_group_members(obs, &m), 0);
    CHECK(m.n == 1 && has(&m, "victim", "alive"));
    baton_members_clear(&m);
    CHECK_RC(baton_group_watch(obs, &m, 0), 0);  /* the watch's first answer: the member */
    baton_members_clear(&m);
    kill(w.pid, SIGKILL);
    t0 = tl_now_ms();
    tl_worker_reap(&w, 5000);
    /* the watch is told within the lease + the poll bound (+ slack for a busy machine) */
    for (;;) {
        int rc = baton_group_watch(obs, &m, lease + 5000);
        if (rc) {
            CHECK_RC(rc, 0);
            break;
        }
        if (!has(&m, "victim", NULL)) {
            gone_ms = tl_now_ms() - t0;
            break;
        }
        baton_members_clear(&m);
    }
    baton_members_clear(&m);
    CHECK(gone_ms >= 0);
    fprintf(stderr, "   killed member gone from the watch after %lld ms (lease %d ms)\n", (long long)gone_ms, lease);
    CHECK_RC(baton_group_members(obs, &m), 0);
    CHECK(m.n == 0);
    baton_members_clear(&m);
    baton_group_free(obs);
    baton_client_close(c);
}

static void member_lost(baton_group *g, void *payload)
{
    (void)g;
    (void)payload;
    tl_out_line("lost\n");
}

static int member_worker(const char *uri, const char *group, const char *id, int lease)
{
    baton_client *c = tl_client_open(uri);
    baton_group_options o = BATON_GROUP_OPTIONS_INIT;
    baton_group *g = NULL;
    o.lease_ms = (uint32_t)lease;
    o.on_lost = member_lost;
    MUST(baton_group_open(&g, c, group, &o));
    MUST(baton_group_join(g, id, "alive"));
    tl_out_line("joined\n");
    for (;;) pause();
}

/* A member process stopped (SIGSTOP) past its lease: no longer listed; resumed,
 * it is told it lost its membership (on_lost) and is not listed again. */
static void groups_member_stopped(void)
{
    const int lease = 1500;
    baton_client *c = tl_client_open(g_uri);
    baton_group *obs = NULL;
    baton_members m = { 0 };
    tl_worker w;
    char name[128], lease_s[16], line[256];

    name_of(name, sizeof name, "stopped");
    snprintf(lease_s, sizeof lease_s, "%d", lease);
    char *argv[] = { "test_mysql_coord", "member", g_uri, name, "sleeper", lease_s, NULL };
    MUST(baton_group_open(&obs, c, name, NULL));
    if (tl_worker_spawn(&w, argv)) {
        CHECK(!"spawn");
        return;
    }
    CHECK(tl_expect_line(&w, "joined", line, sizeof line, 10000) == 0);
    kill(w.pid, SIGSTOP);
    tl_sleep_ms(lease + 500);
    CHECK_RC(baton_group_members(obs, &m), 0);
    CHECK(m.n == 0);
    baton_members_clear(&m);
    kill(w.pid, SIGCONT);
    CHECK(tl_expect_line(&w, "lost", line, sizeof line, 10000) == 0);
    CHECK_RC(baton_group_members(obs, &m), 0);
    CHECK(m.n == 0);
    baton_members_clear(&m);
    kill(w.pid, SIGKILL);
    tl_worker_reap(&w, 5000);
    baton_group_free(obs);
    baton_client_close(c);
}

/* ---- built by the core on values and groups ---------------------------------- */

static void latch_on_values(void)
{
    baton_client *c1 = tl_client_open(g_uri), *c2 = tl_client_open(g_uri);
    baton_latch *a = NULL, *b = NULL;
    uint64_t n = 9;
    int set = 0;
    char name[128];

    name_of(name, sizeof name, "latch");
    MUST(baton_latch_open(&a, c1, name));
    MUST(baton_latch_open(&b, c2, name));
    CHECK_RC(baton_latch_try_set(a, 2, &set), 0);
    CHECK(set == 1);
    CHECK_RC(baton_latch_try_set(b, 5, &set), 0);
    CHECK(set == 0);
    CHECK_RC(baton_latch_await(b, 200), BATON_ETIMEDOUT);
    CHECK_RC(baton_latch_count_down(a), 0);
    CHECK_RC(baton_latch_count(b, &n), 0);
    CHECK(n == 1);
    CHECK_RC(baton_latch_count_down(a), 0);
    CHECK_RC(baton_latch_await(b, 5000), 0);
    baton_latch_free(a);
    baton_latch_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

#define PARTIES 3

static atomic_int g_entered, g_early;

static void *party(void *arg)
{
    const char *name = arg;
    baton_client *c = tl_client_open(g_uri);
    baton_barrier *b = NULL;
    MUST(baton_barrier_open(&b, c, name, PARTIES, NULL));
    atomic_fetch_add(&g_entered, 1);
    MUST(baton_barrier_enter(b, 20000));
    /* nobody passes the entry before all have come */
    if (atomic_load(&g_entered) != PARTIES) atomic_fetch_add(&g_early, 1);
    /* at once: the last party leaves again before a 250 ms poll of the
     * others can see it among the members (the ready mark must do) */
    MUST(baton_barrier_leave(b, 20000));
    baton_barrier_free(b);
    baton_client_close(c);
    return NULL;
}

static void barrier_on_groups(void)
{
    pthread_t t[PARTIES];
    char name[128];
    name_of(name, sizeof name, "barrier");
    for (int i = 0; i < PARTIES; i++) {
        pthread_create(&t[i], NULL, party, name);
        tl_sleep_ms(300);
    }
    for (int i = 0; i < PARTIES; i++) pthread_join(t[i], NULL);
    CHECK(atomic_load(&g_early) == 0);
}

/* ---- queues ---------------------------------------------------------------- */

static void queue_basics(void)
{
    baton_client *c = tl_client_open(g_uri);
    baton_queue *q = NULL;
    baton_queue_item *it = NULL, *it2 = NULL;
    uint64_t n = 99, f1 = 0, f2 = 0;
    char name[128];

    name_of(name, sizeof name, "q");
    MUST(baton_queue_open(&q, c, name, NULL));
    CHECK_RC(baton_queue_take(q, &it, 0), BATON_ENOENT);
    CHECK_RC(baton_queue_put(q, "one", 3), 0);
    CHECK_RC(baton_queue_put(q, "two", 3), 0);
    CHECK_RC(baton_queue_put(q, "three", 5), 0);
    CHECK_RC(baton_queue_size(q, &n), 0);
    CHECK(n == 3);
    CHECK_RC(baton_queue_take(q, &it, 0), 0);
    CHECK(it && !strcmp(baton_queue_item_data(it, NULL), "one"));
    f1 = baton_queue_item_fence(it);
    CHECK(f1 > 0 && baton_queue_item_held(it));
    CHECK_RC(baton_queue_size(q, &n), 0);
    CHECK(n == 2);
    /* given back: taken again, first (it keeps its place), with a larger fence */
    CHECK_RC(baton_queue_return(it), 0);
    CHECK_RC(baton_queue_take(q, &it, 0), 0);
    CHECK(it && !strcmp(baton_queue_item_data(it, NULL), "one"));
    f2 = baton_queue_item_fence(it);
    CHECK(f2 > f1);
    CHECK_RC(baton_queue_take(q, &it2, 0), 0);
    CHECK(it2 && !strcmp(baton_queue_item_data(it2, NULL), "two"));
    CHECK(baton_queue_item_fence(it2) > f2);
    CHECK_RC(baton_queue_done(it), 0);
    CHECK_RC(baton_queue_done(it2), 0);
    CHECK_RC(baton_queue_take(q, &it, 0), 0);
    CHECK(it && !strcmp(baton_queue_item_data(it, NULL), "three"));
    CHECK_RC(baton_queue_done(it), 0);
    CHECK_RC(baton_queue_size(q, &n), 0);
    CHECK(n == 0);
    CHECK_RC(baton_queue_take(q, &it, 0), BATON_ENOENT);
    CHECK_RC(baton_queue_take(q, &it, 200), BATON_ETIMEDOUT);
    baton_queue_free(q);
    /* the largest item, bytes with NULs */
    {
        char *big = malloc(BATON_QUEUE_ITEM_MAX);
        size_t len = 0;
        for (size_t i = 0; big && i < BATON_QUEUE_ITEM_MAX; i++) big[i] = (char)(i * 5);
        MUST(baton_queue_open(&q, c, name, NULL));
        if (big && baton_queue_put(q, big, BATON_QUEUE_ITEM_MAX) == 0 && baton_queue_take(q, &it, 0) == 0) {
            const char *got = baton_queue_item_data(it, &len);
            CHECK(len == BATON_QUEUE_ITEM_MAX && !memcmp(got, big, len));
            CHECK_RC(baton_queue_done(it), 0);
        } else {
            CHECK(!"the largest item");
        }
        free(big);
        baton_queue_free(q);
    }
    /* the longest name (1024 bytes): its take counter's row still fits the value table */
    {
        char longname[1025];
        name_of(longname, sizeof longname, "qlong-");
        size_t n = strlen(longname);
        memset(longname + n, 'z', 1024 - n);
        longname[1024] = 0;
        MUST(baton_queue_open(&q, c, longname, NULL));
        CHECK_RC(baton_queue_put(q, "x", 1), 0);
        CHECK_RC(baton_queue_take(q, &it, 0), 0);
        if (it) CHECK_RC(baton_queue_done(it), 0);
        baton_queue_free(q);
    }
    baton_client_close(c);
}

/* A taker process killed mid-item: the item comes back within its lease, to
 * a taker that was waiting, with a larger fence. */
static void queue_taker_killed(void)
{
    const int lease = 2000;
    baton_client *c = tl_client_open(g_uri);
    baton_queue *q = NULL;
    baton_queue_item *it = NULL;
    tl_worker w;
    char name[128], lease_s[16], line[256];
    unsigned long long fence = 0;
    int64_t t0;

    name_of(name, sizeof name, "qkill");
    snprintf(lease_s, sizeof lease_s, "%d", lease);
    char *argv[] = { "test_mysql_coord", "taker", g_uri, name, lease_s, NULL };
    MUST(baton_queue_open(&q, c, name, NULL));
    MUST(baton_queue_put(q, "job-1", 5));
    if (tl_worker_spawn(&w, argv)) {
        CHECK(!"spawn");
        return;
    }
    CHECK(tl_expect_line(&w, "took job-1 ", line, sizeof line, 10000) == 0);
    sscanf(line, "took job-1 %llu", &fence);
    CHECK(fence > 0);
    /* held by the worker, renewed past its lease: nothing for us */
    CHECK_RC(baton_queue_take(q, &it, 0), BATON_ENOENT);
    tl_sleep_ms(lease * 3 / 2);
    CHECK_RC(baton_queue_take(q, &it, 0), BATON_ENOENT);
    kill(w.pid, SIGKILL);
    t0 = tl_now_ms();
    tl_worker_reap(&w, 5000);
    CHECK_RC(baton_queue_take(q, &it, lease + 5000), 0);
    if (it) {
        CHECK(!strcmp(baton_queue_item_data(it, NULL), "job-1"));
        CHECK(baton_queue_item_fence(it) > fence);
        fprintf(stderr, "   item back %lld ms after its taker was killed (lease %d ms)\n",
                (long long)(tl_now_ms() - t0), lease);
        CHECK_RC(baton_queue_done(it), 0);
    }
    baton_queue_free(q);
    baton_client_close(c);
}

static int taker_worker(const char *uri, const char *queue, int lease)
{
    baton_client *c = tl_client_open(uri);
    baton_queue_options o = BATON_QUEUE_OPTIONS_INIT;
    baton_queue *q = NULL;
    baton_queue_item *it = NULL;
    o.lease_ms = (uint32_t)lease;
    MUST(baton_queue_open(&q, c, queue, &o));
    MUST(baton_queue_take(q, &it, 10000));
    tl_out_line("took %s %llu\n", baton_queue_item_data(it, NULL), (unsigned long long)baton_queue_item_fence(it));
    for (;;) pause();
}

#define TAKERS 4
#define ITEMS 40

static atomic_int g_busy[ITEMS];     /* held by a taker now */
static atomic_int g_done[ITEMS];     /* times done */
static atomic_int g_overlap;         /* an item held by two at once */

static void *taker(void *arg)
{
    const char *name = arg;
    baton_client *c = tl_client_open(g_uri);
    baton_queue *q = NULL;
    MUST(baton_queue_open(&q, c, name, NULL));
    for (;;) {
        baton_queue_item *it = NULL;
        int k, rc = baton_queue_take(q, &it, 1000);
        if (rc == BATON_ETIMEDOUT) break;
        MUST(rc);
        k = atoi(baton_queue_item_data(it, NULL));
        if (k < 0 || k >= ITEMS || atomic_fetch_add(&g_busy[k], 1) != 0) atomic_fetch_add(&g_overlap, 1);
        tl_sleep_ms(2);
        if (k >= 0 && k < ITEMS) atomic_fetch_sub(&g_busy[k], 1);
        /* every fifth is given back once before it is done: it is taken again */
        if (k % 5 == 0 && atomic_load(&g_done[k]) == 0 && baton_queue_item_fence(it) % 2 == 0) {
            MUST(baton_queue_return(it));
            continue;
        }
        if (k >= 0 && k < ITEMS) atomic_fetch_add(&g_done[k], 1);
        MUST(baton_queue_done(it));
    }
    baton_queue_free(q);
    baton_client_close(c);
    return NULL;
}

static void queue_takers_race(void)
{
    baton_client *c = tl_client_open(g_uri);
    baton_queue *q = NULL;
    pthread_t t[TAKERS];
    char name[128], buf[16];
    int once = 0;

    name_of(name, sizeof name, "qrace");
    MUST(baton_queue_open(&q, c, name, NULL));
    for (int i = 0; i < TAKERS; i++) pthread_create(&t[i], NULL, taker, name);
    for (int i = 0; i < ITEMS; i++) {
        snprintf(buf, sizeof buf, "%d", i);
        MUST(baton_queue_put(q, buf, strlen(buf)));
    }
    for (int i = 0; i < TAKERS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < ITEMS; i++) once += atomic_load(&g_done[i]) == 1;
    CHECK(once == ITEMS);
    CHECK(atomic_load(&g_overlap) == 0);
    baton_queue_free(q);
    baton_client_close(c);
}

/* ---- a server restart under watchers (a server of its own) ---------------------- */

typedef struct {
    const char *name;
    atomic_int ready;
    int vrc, grc, qrc;
    char value[32], item[32];
    size_t members;
} restart_arg;

static void *queue_waiter(void *arg)
{
    restart_arg *a = arg;
    baton_client *c = tl_client_open(g_uri);
    baton_queue *q = NULL;
    baton_queue_item *it = NULL;
    MUST(baton_queue_open(&q, c, a->name, NULL));
    atomic_fetch_add(&a->ready, 1);
    a->qrc = baton_queue_take(q, &it, 60000);
    if (!a->qrc) {
        snprintf(a->item, sizeof a->item, "%s", baton_queue_item_data(it, NULL));
        a->qrc = baton_queue_done(it);
    }
    baton_queue_free(q);
    baton_client_close(c);
    return NULL;
}

static void *value_waiter(void *arg)
{
    restart_arg *a = arg;
    baton_client *c = tl_client_open(g_uri);
    baton_value *v = NULL;
    baton_value_data d = { 0 };
    MUST(baton_value_open(&v, c, a->name));
    MUST(baton_value_get(v, &d));
    uint64_t known = d.version;
    baton_value_data_clear(&d);
    atomic_fetch_add(&a->ready, 1);
    a->vrc = baton_value_watch(v, known, &d, 60000);
    snprintf(a->value, sizeof a->value, "%s", d.data ? d.data : "");
    baton_value_data_clear(&d);
    baton_value_free(v);
    baton_client_close(c);
    return NULL;
}

static void *group_waiter(void *arg)
{
    restart_arg *a = arg;
    baton_client *c = tl_client_open(g_uri);
    baton_group *g = NULL;
    baton_members m = { 0 };
    MUST(baton_group_open(&g, c, a->name, NULL));
    MUST(baton_group_watch(g, &m, 0));
    baton_members_clear(&m);
    atomic_fetch_add(&a->ready, 1);
    a->grc = baton_group_watch(g, &m, 60000);
    a->members = m.n;
    baton_members_clear(&m);
    baton_group_free(g);
    baton_client_close(c);
    return NULL;
}

/* A value watcher and a group watcher wait while the server restarts: both
 * see the change made after it; a member (lease 20 s) stays a member. */
static int restart_case(void)
{
    char dir[1024], name[128];
    const char *tmp = getenv("BATON_TEST_TMP");
    restart_arg a = { 0 };
    pthread_t tv, tg, tq;
    baton_queue *q = NULL;
    baton_queue_item *held = NULL;
    baton_queue_options qo = BATON_QUEUE_OPTIONS_INIT;
    baton_client *c, *c2;
    baton_value *v = NULL;
    baton_group *member = NULL, *other = NULL;
    baton_group_options o = BATON_GROUP_OPTIONS_INIT;
    baton_members m = { 0 };
    int port;

    snprintf(dir, sizeof dir, "%s/mysql_coord_restart", tmp ? tmp : "/tmp");
    tl_server_stop("mysql", dir);
    port = tl_server("mysql", "start", dir, NULL, 1);
    snprintf(g_uri, sizeof g_uri, "mysql://baton:baton-test@127.0.0.1:%d/baton?mode=lease", port);
    snprintf(name, sizeof name, "restart");
    a.name = name;
    c = tl_client_open(g_uri);
    MUST(baton_value_open(&v, c, name));
    MUST(baton_value_set(v, "before", 6, BATON_VALUE_ANY, NULL));
    o.lease_ms = 20000;
    qo.lease_ms = 20000;
    MUST(baton_group_open(&member, c, name, &o));
    MUST(baton_group_join(member, "steady", "x"));
    MUST(baton_queue_open(&q, c, name, &qo));
    MUST(baton_queue_put(q, "held", 4));
    MUST(baton_queue_take(q, &held, 0));
    pthread_create(&tv, NULL, value_waiter, &a);
    pthread_create(&tg, NULL, group_waiter, &a);
    pthread_create(&tq, NULL, queue_waiter, &a);
    while (atomic_load(&a.ready) < 3) tl_sleep_ms(10);
    /* the fixture flushes its redo log once a second: what a kill may lose */
    tl_sleep_ms(2000);
    /* a crash, and the server away for a second (many polls) before it is back */
    tl_server("mysql", "kill", dir, NULL, 1);
    tl_sleep_ms(1000);
    tl_server("mysql", "restart", dir, NULL, 1);
    tl_sleep_ms(600);   /* the watchers meet the restarted server */
    c2 = tl_client_open(g_uri);
    MUST(baton_group_open(&other, c2, name, NULL));
    MUST(baton_group_join(other, "newcomer", "y"));
    MUST(baton_value_set(v, "after", 5, BATON_VALUE_ANY, NULL));
    MUST(baton_queue_put(q, "new", 3));
    pthread_join(tv, NULL);
    pthread_join(tg, NULL);
    pthread_join(tq, NULL);
    /* the waiting take outlived the restart; the item taken before it is still ours */
    CHECK_RC(a.qrc, 0);
    CHECK(!strcmp(a.item, "new"));
    CHECK(baton_queue_item_held(held));
    CHECK_RC(baton_queue_done(held), 0);
    baton_queue_free(q);
    CHECK_RC(a.vrc, 0);
    CHECK(!strcmp(a.value, "after"));
    CHECK_RC(a.grc, 0);
    CHECK(a.members == 2);
    CHECK(baton_group_is_member(member));
    CHECK_RC(baton_group_members(other, &m), 0);
    CHECK(m.n == 2 && has(&m, "steady", "x") && has(&m, "newcomer", "y"));
    baton_members_clear(&m);
    baton_group_free(other);
    baton_group_free(member);
    baton_value_free(v);
    baton_client_close(c2);
    baton_client_close(c);
    tl_server_stop("mysql", dir);
    return th_finish();
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "restart")) return restart_case();
    if (argc == 6 && !strcmp(argv[1], "member")) {
        char uri[1024];
        tl_uri_with_port(uri, sizeof uri, argv[2], NULL);
        return member_worker(uri, argv[3], argv[4], atoi(argv[5]));
    }
    if (argc == 5 && !strcmp(argv[1], "taker")) {
        char uri[1024];
        tl_uri_with_port(uri, sizeof uri, argv[2], NULL);
        return taker_worker(uri, argv[3], atoi(argv[4]));
    }
    if (argc != 2) {
        fprintf(stderr, "usage: test_mysql_coord URI\n");
        return 2;
    }
    if (tl_uri_with_port(g_uri, sizeof g_uri, argv[1], NULL)) tl_skip("no mysql fixture server", 1);
    snprintf(g_tag, sizeof g_tag, "%d-%lld", (int)getpid(), (long long)tl_now_ms() % 100000);
    /* COORD_ONLY=substring runs only the cases whose name has it */
#undef RUN
#define RUN(fn) do { \
        const char *only_ = getenv("COORD_ONLY"); \
        if (!only_ || strstr(#fn, only_)) { th_current = #fn; fprintf(stderr, "-- %s\n", #fn); fn(); } \
    } while (0)
    RUN(values_basics);
    RUN(values_counter_race);
    RUN(values_watch_burst);
    RUN(groups_basics);
    RUN(groups_member_killed);
    RUN(groups_member_stopped);
    RUN(latch_on_values);
    RUN(barrier_on_groups);
    RUN(queue_basics);
    RUN(queue_taker_killed);
    RUN(queue_takers_race);
    return th_finish();
}
