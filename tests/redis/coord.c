/*
 * Values, groups and queues on Redis (docs/redis-layout.md), against a
 * throwaway redis-server of its own (the cases restart it and kill its
 * clients), with redis-cli as the foreign client:
 *   values    versions and compare-and-set (one winner among racing
 *             clients), monotone across delete and re-create; redis-cli SET
 *             and DEL seen by baton (get and a blocked watcher: with the
 *             server's keyspace notifications off, by the re-read bound;
 *             on, at once); a baton set read by redis-cli GET; a watcher
 *             whose connections are killed (CLIENT KILL) or whose server
 *             restarts still sees the next change
 *   groups    join/list/leave/ELOCKED, a watcher sees joins and leaves, a
 *             SIGKILLed member is gone within its lease + the bound
 *   queues    FIFO take, done, return, fences, ELOCKED/ENOENT on empty,
 *             a SIGKILLed taker's item comes back with a larger fence,
 *             and concurrent takers never hold one item at once
 * Usage: test_redis_coord (workers: test_redis_coord member|taker URI NAME)
 */
#include <baton.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"
#include "../common/testlib.h"

static char g_dir[1024];
static char g_uri[256];
static int g_port;
static char g_tag[32]; /* per-run name prefix */

static const char *nm(char *buf, size_t n, const char *s) {
    snprintf(buf, n, "%s%s", g_tag, s);
    return buf;
}

/* redis-cli, the foreign client: its output (first line) in OUT. */
static int cli(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int cli(char *out, size_t n, const char *fmt, ...) {
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "redis-cli -p %d %s", g_port, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[1024] = "";
    if (!fgets(line, sizeof line, p)) line[0] = 0;
    line[strcspn(line, "\r\n")] = 0;
    int st = pclose(p);
    if (out) snprintf(out, n, "%s", line);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static baton_client *open_client(void) {
    baton_client *c = NULL;
    int rc = baton_client_open(&c, g_uri, NULL);
    if (rc) {
        fprintf(stderr, "FATAL: open %s: %s\n", g_uri, tl_lastmsg());
        exit(1);
    }
    return c;
}

/* ---- values --------------------------------------------------------------------- */

static void value_versions(void) {
    char n[128];
    baton_client *c = open_client();
    baton_value *v = NULL;
    CHECK_RC(baton_value_open(&v, c, nm(n, sizeof n, "ver")), 0);
    baton_value_data d = { 0 };
    CHECK_RC(baton_value_get(v, &d), BATON_ENOENT);
    CHECK(d.version == 0 && d.data == NULL);
    uint64_t v1 = 0, v2 = 0, v3 = 0, v4 = 0;
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
    CHECK_RC(baton_value_delete(v, BATON_VALUE_ANY), BATON_ENOENT);
    CHECK_RC(baton_value_get(v, &d), BATON_ENOENT);
    /* Re-created: a version above every earlier one. */
    CHECK_RC(baton_value_set(v, "three", 5, 0, &v3), 0);
    CHECK(v3 > v2);
    /* Binary content with a NUL inside. */
    CHECK_RC(baton_value_set(v, "a\0b", 3, BATON_VALUE_ANY, &v4), 0);
    CHECK(v4 > v3);
    CHECK_RC(baton_value_get(v, &d), 0);
    CHECK(d.len == 3 && !memcmp(d.data, "a\0b", 3));
    baton_value_data_clear(&d);
    /* A watch that sees no change ends with ETIMEDOUT, not an error */
    CHECK_RC(baton_value_watch(v, v4, &d, 0), BATON_ETIMEDOUT);
    CHECK_RC(baton_value_watch(v, v4, &d, 2500), BATON_ETIMEDOUT);
    CHECK(d.data == NULL);
    /* The largest value there is, byte for byte. */
    char *big = malloc(BATON_VALUE_MAX);
    for (size_t i = 0; big && i < BATON_VALUE_MAX; i++) big[i] = (char)(i * 7 + 1);
    uint64_t vb = 0;
    CHECK_RC(baton_value_set(v, big, BATON_VALUE_MAX, v4, &vb), 0);
    CHECK_RC(baton_value_get(v, &d), 0);
    CHECK(d.len == BATON_VALUE_MAX && d.version == vb && !memcmp(d.data, big, BATON_VALUE_MAX));
    baton_value_data_clear(&d);
    free(big);
    CHECK_RC(baton_value_set(v, "a\0b", 3, vb, &v4), 0);
    /* A value and a lock of one name do not meet. */
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(&l, c, n, NULL), 0);
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    /* A wait longer than the io timeout (2000 ms here) that runs out is
     * ETIMEDOUT (it was EUNAVAILABLE: the last attempt had no time left). */
    baton_client *c2 = open_client();
    baton_lock *l2 = NULL;
    CHECK_RC(baton_lock_open(&l2, c2, n, NULL), 0);
    CHECK_RC(baton_lock_acquire(l2, 2500), BATON_ETIMEDOUT);
    baton_lock_free(l2);
    baton_client_close(c2);
    CHECK_RC(baton_value_get(v, &d), 0);
    CHECK(d.version == v4);
    baton_value_data_clear(&d);
    CHECK_RC(baton_lock_release(l), 0);
    baton_lock_free(l);
    baton_value_free(v);
    baton_client_close(c);
}

typedef struct {
    char name[128];
    uint64_t expect;
    int idx;
    int rc;
    atomic_int *go;
} cas_arg;

static void *cas_thread(void *p) {
    cas_arg *a = p;
    baton_client *c = open_client();
    baton_value *v = NULL;
    char data[32];
    snprintf(data, sizeof data, "writer %d", a->idx);
    a->rc = baton_value_open(&v, c, a->name);
    while (!a->rc && !atomic_load(a->go)) tl_sleep_ms(1);
    if (!a->rc) a->rc = baton_value_set(v, data, strlen(data), a->expect, NULL);
    baton_value_free(v);
    baton_client_close(c);
    return NULL;
}

static void value_cas_race(void) {
    char n[128];
    nm(n, sizeof n, "cas");
    for (int round = 0; round < 2; round++) {
        baton_client *c = open_client();
        baton_value *v = NULL;
        uint64_t base = 0;
        CHECK_RC(baton_value_open(&v, c, n), 0);
        /* round 0: all expect "absent"; round 1: all expect the version now */
        if (round == 1) CHECK_RC(baton_value_set(v, "base", 4, BATON_VALUE_ANY, &base), 0);
        enum { N = 8 };
        pthread_t th[N];
        cas_arg a[N];
        atomic_int go = 0;
        for (int i = 0; i < N; i++) {
            snprintf(a[i].name, sizeof a[i].name, "%s", n);
            a[i].expect = base;
            a[i].idx = i;
            a[i].rc = -1;
            a[i].go = &go;
            pthread_create(&th[i], NULL, cas_thread, &a[i]);
        }
        tl_sleep_ms(200);
        atomic_store(&go, 1);
        int ok = 0, conflict = 0;
        for (int i = 0; i < N; i++) {
            pthread_join(th[i], NULL);
            ok += a[i].rc == 0;
            conflict += a[i].rc == BATON_ECONFLICT;
        }
        fprintf(stderr, "   round %d: %d set, %d conflicts\n", round, ok, conflict);
        CHECK(ok == 1 && conflict == N - 1);
        CHECK_RC(baton_value_delete(v, BATON_VALUE_ANY), 0);
        baton_value_free(v);
        baton_client_close(c);
    }
}

typedef struct {
    char name[128];
    uint64_t known;
    int64_t wait_ms;
    int rc;
    baton_value_data d;
    int64_t took_ms;
    atomic_int started;
} watch_arg;

static void *watch_thread(void *p) {
    watch_arg *a = p;
    baton_client *c = open_client();
    baton_value *v = NULL;
    a->rc = baton_value_open(&v, c, a->name);
    atomic_store(&a->started, 1);
    int64_t t0 = tl_now_ms();
    if (!a->rc) a->rc = baton_value_watch(v, a->known, &a->d, a->wait_ms);
    a->took_ms = tl_now_ms() - t0;
    baton_value_free(v);
    baton_client_close(c);
    return NULL;
}

static void watch_start(pthread_t *t, watch_arg *a, const char *name, uint64_t known, int64_t wait_ms) {
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name);
    a->known = known;
    a->wait_ms = wait_ms;
    pthread_create(t, NULL, watch_thread, a);
    while (!atomic_load(&a->started)) tl_sleep_ms(1);
    tl_sleep_ms(300); /* parked, subscribed */
}

/* The key redis-cli sees for the value NAME (docs/redis-layout.md). */
static const char *vkey(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "'baton_value:{%s}'", name);
    return buf;
}

static void value_redis_cli(void) {
    char n[128], k[200], out[1024];
    nm(n, sizeof n, "cfg");
    vkey(k, sizeof k, n);
    baton_client *c = open_client();
    baton_value *v = NULL;
    uint64_t v1 = 0;
    CHECK_RC(baton_value_open(&v, c, n), 0);
    /* baton set -> redis-cli GET */
    CHECK_RC(baton_value_set(v, "from baton", 10, BATON_VALUE_ANY, &v1), 0);
    CHECK(cli(out, sizeof out, "GET %s", k) == 0 && !strcmp(out, "from baton"));

    /* redis-cli SET -> a blocked watcher, with keyspace notifications off
     * (the default): seen by the re-read (at least every 2 s). */
    cli(out, sizeof out, "CONFIG SET notify-keyspace-events ''");
    pthread_t t;
    watch_arg a;
    watch_start(&t, &a, n, v1, 10000);
    CHECK(cli(out, sizeof out, "SET %s 'from redis-cli'", k) == 0);
    pthread_join(t, NULL);
    CHECK_RC(a.rc, 0);
    CHECK(a.d.version > v1 && a.d.data && !strcmp(a.d.data, "from redis-cli"));
    fprintf(stderr, "   redis-cli SET seen by a watcher after %lld ms (notifications off; bound 2000 ms)\n",
            (long long)a.took_ms);
    CHECK(a.took_ms < 6000); /* the bound is 2 s; slack for a loaded machine */
    uint64_t v2 = a.d.version;
    baton_value_data_clear(&a.d);

    /* get sees it too, and compare-and-set works on the adopted version */
    baton_value_data d = { 0 };
    CHECK_RC(baton_value_get(v, &d), 0);
    CHECK(d.version == v2 && !strcmp(d.data, "from redis-cli"));
    baton_value_data_clear(&d);
    CHECK_RC(baton_value_set(v, "x", 1, v1, NULL), BATON_ECONFLICT);
    uint64_t v3 = 0;
    CHECK_RC(baton_value_set(v, "back to baton", 13, v2, &v3), 0);
    CHECK(v3 > v2);

    /* redis-cli DEL -> the watcher sees "absent" */
    watch_start(&t, &a, n, v3, 10000);
    CHECK(cli(out, sizeof out, "DEL %s", k) == 0);
    pthread_join(t, NULL);
    CHECK_RC(a.rc, 0);
    CHECK(a.d.version == 0 && a.d.data == NULL);
    baton_value_data_clear(&a.d);

    /* With the server's keyspace notifications on, a foreign SET wakes the
     * watcher at once (this is our own test server: baton never sets it). */
    CHECK(cli(out, sizeof out, "CONFIG SET notify-keyspace-events K\\$g") == 0);
    watch_start(&t, &a, n, 0, 10000);
    int64_t t0 = tl_now_ms();
    CHECK(cli(out, sizeof out, "SET %s notified", k) == 0);
    pthread_join(t, NULL);
    CHECK_RC(a.rc, 0);
    CHECK(a.d.version > v3 && a.d.data && !strcmp(a.d.data, "notified"));
    fprintf(stderr, "   redis-cli SET seen after %lld ms with keyspace notifications on\n",
            (long long)(tl_now_ms() - t0));
    baton_value_data_clear(&a.d);
    cli(out, sizeof out, "CONFIG SET notify-keyspace-events ''");

    /* a redis-cli SET of the same content is no change; of another one is */
    CHECK_RC(baton_value_get(v, &d), 0);
    uint64_t v4 = d.version;
    baton_value_data_clear(&d);
    cli(out, sizeof out, "SET %s notified", k);
    CHECK_RC(baton_value_get(v, &d), 0);
    CHECK(d.version == v4);
    baton_value_data_clear(&d);
    cli(out, sizeof out, "SET %s changed", k);
    CHECK_RC(baton_value_get(v, &d), 0);
    CHECK(d.version > v4 && !strcmp(d.data, "changed"));
    baton_value_data_clear(&d);
    baton_value_free(v);
    baton_client_close(c);
}

static void value_watch_faults(void) {
    char n[128], out[256];
    nm(n, sizeof n, "faults");
    baton_client *c = open_client();
    baton_value *v = NULL;
    uint64_t v1 = 0;
    CHECK_RC(baton_value_open(&v, c, n), 0);
    CHECK_RC(baton_value_set(v, "before", 6, BATON_VALUE_ANY, &v1), 0);

    /* Every connection of the watcher killed (its subscriber and its pooled
     * ones); then a baton set from another client: still seen. */
    pthread_t t;
    watch_arg a;
    watch_start(&t, &a, n, v1, 15000);
    cli(out, sizeof out, "CLIENT KILL TYPE pubsub");
    cli(out, sizeof out, "CLIENT KILL TYPE normal");
    tl_sleep_ms(200);
    uint64_t v2 = 0;
    CHECK_RC(baton_value_set(v, "after kill", 10, v1, &v2), 0);
    pthread_join(t, NULL);
    CHECK_RC(a.rc, 0);
    CHECK(a.d.version == v2 && a.d.data && !strcmp(a.d.data, "after kill"));
    fprintf(stderr, "   set after CLIENT KILL seen after %lld ms\n", (long long)a.took_ms);
    baton_value_data_clear(&a.d);

    /* The server restarts (no persistence: the value is gone): the watcher
     * sees "absent", and a watch after it sees the next set. A member and a
     * taken item (60 s leases) are reported lost when the client
     * reconnects, not at their next renewal. */
    baton_group_options go = BATON_GROUP_OPTIONS_INIT;
    go.lease_ms = 60000;
    baton_group *g = NULL;
    baton_queue_options qo = BATON_QUEUE_OPTIONS_INIT;
    qo.lease_ms = 60000;
    baton_queue *q = NULL;
    baton_queue_item *it = NULL;
    char gn[128], qn[128];
    CHECK_RC(baton_group_open(&g, c, nm(gn, sizeof gn, "restart-g"), &go), 0);
    CHECK_RC(baton_group_join(g, "m1", "v"), 0);
    CHECK_RC(baton_queue_open(&q, c, nm(qn, sizeof qn, "restart-q"), &qo), 0);
    CHECK_RC(baton_queue_put(q, "job", 3), 0);
    CHECK_RC(baton_queue_take(q, &it, 0), 0);
    watch_start(&t, &a, n, v2, 15000);
    int64_t tr = tl_now_ms();
    tl_server_restart("redis", g_dir);
    while ((baton_group_is_member(g) || (it && baton_queue_item_held(it))) && tl_now_ms() - tr < 10000)
        tl_sleep_ms(20);
    CHECK(baton_group_is_member(g) == 0);
    CHECK(it && baton_queue_item_held(it) == 0);
    fprintf(stderr, "   member and item lost %lld ms after the restart began (leases 60 s)\n",
            (long long)(tl_now_ms() - tr));
    CHECK_RC(baton_group_leave(g), BATON_ELOST);
    if (it) CHECK_RC(baton_queue_done(it), BATON_ELOST);
    baton_group_free(g);
    baton_queue_free(q);
    pthread_join(t, NULL);
    CHECK_RC(a.rc, 0);
    CHECK(a.d.version == 0 && a.d.data == NULL);
    fprintf(stderr, "   restart seen by the watcher after %lld ms\n", (long long)a.took_ms);
    baton_value_data_clear(&a.d);
    watch_start(&t, &a, n, 0, 15000);
    uint64_t v3 = 0;
    int rc = baton_value_set(v, "after restart", 13, 0, &v3);
    if (rc == BATON_EUNAVAILABLE) rc = baton_value_set(v, "after restart", 13, 0, &v3); /* a pooled conn died */
    CHECK_RC(rc, 0);
    CHECK(v3 > v2); /* versions are drawn above the server clock: still above the lost ones */
    pthread_join(t, NULL);
    CHECK_RC(a.rc, 0);
    CHECK(a.d.version == v3 && a.d.data && !strcmp(a.d.data, "after restart"));
    baton_value_data_clear(&a.d);
    baton_value_free(v);
    baton_client_close(c);
}

/* ---- groups --------------------------------------------------------------------- */

static int has_member(const baton_members *m, const char *id, const char *value) {
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->members[i].id, id) && (!value || !strcmp(m->members[i].value, value))) return 1;
    return 0;
}

static void group_basic(void) {
    char n[128];
    nm(n, sizeof n, "grp");
    baton_client *c = open_client();
    baton_group_options o = BATON_GROUP_OPTIONS_INIT;
    o.lease_ms = 3000;
    baton_group *a = NULL, *b = NULL, *w = NULL, *dup = NULL;
    CHECK_RC(baton_group_open(&a, c, n, &o), 0);
    CHECK_RC(baton_group_open(&b, c, n, &o), 0);
    CHECK_RC(baton_group_open(&dup, c, n, &o), 0);
    CHECK_RC(baton_group_open(&w, c, n, &o), 0);
    baton_members m = { 0 };
    CHECK_RC(baton_group_watch(w, &m, 0), 0); /* the first call answers at once */
    CHECK(m.n == 0);
    baton_members_clear(&m);
    CHECK_RC(baton_group_join(a, "node-a", "10.0.0.1:80"), 0);
    CHECK_RC(baton_group_join(dup, "node-a", "other"), BATON_ELOCKED);
    CHECK_RC(baton_group_watch(w, &m, 5000), 0);
    CHECK(m.n == 1 && has_member(&m, "node-a", "10.0.0.1:80"));
    baton_members_clear(&m);
    CHECK_RC(baton_group_join(b, "node-b", ""), 0);
    CHECK_RC(baton_group_watch(w, &m, 5000), 0);
    CHECK(m.n == 2 && has_member(&m, "node-b", ""));
    baton_members_clear(&m);
    CHECK_RC(baton_group_watch(w, &m, 2500), BATON_ETIMEDOUT);
    /* renewals keep them past their lease */
    tl_sleep_ms(4000);
    CHECK_RC(baton_group_members(w, &m), 0);
    CHECK(m.n == 2);
    baton_members_clear(&m);
    CHECK_RC(baton_group_leave(a), 0);
    CHECK_RC(baton_group_watch(w, &m, 5000), 0);
    CHECK(m.n == 1 && !has_member(&m, "node-a", NULL));
    baton_members_clear(&m);
    CHECK_RC(baton_group_join(dup, "node-a", "other"), 0); /* the id is free again */
    CHECK_RC(baton_group_members(w, &m), 0);
    CHECK(m.n == 2 && has_member(&m, "node-a", "other"));
    baton_members_clear(&m);
    baton_group_free(a);
    baton_group_free(b);
    baton_group_free(dup);
    CHECK_RC(baton_group_members(w, &m), 0);
    CHECK(m.n == 0);
    baton_members_clear(&m);
    baton_group_free(w);
    baton_client_close(c);
}

static int worker_member(const char *uri, const char *name) {
    baton_client *c = NULL;
    if (baton_client_open(&c, uri, NULL)) return 2;
    baton_group_options o = BATON_GROUP_OPTIONS_INIT;
    o.lease_ms = 1500;
    baton_group *g = NULL;
    if (baton_group_open(&g, c, name, &o) || baton_group_join(g, "doomed", "soon gone")) return 3;
    tl_out_line("joined\n");
    tl_wait_for_line("never");
    return 0;
}

static void group_member_killed(void) {
    char n[128], line[128];
    nm(n, sizeof n, "grpkill");
    char *argv[] = { "test_redis_coord", "member", g_uri, n, NULL };
    tl_worker wk;
    CHECK(tl_worker_spawn(&wk, argv) == 0);
    CHECK(tl_expect_line(&wk, "joined", line, sizeof line, 10000) == 0);
    baton_client *c = open_client();
    baton_group *w = NULL;
    CHECK_RC(baton_group_open(&w, c, n, NULL), 0);
    baton_members m = { 0 };
    CHECK_RC(baton_group_watch(w, &m, 0), 0);
    CHECK(m.n == 1 && has_member(&m, "doomed", "soon gone"));
    baton_members_clear(&m);
    kill(wk.pid, SIGKILL);
    int64_t t0 = tl_now_ms();
    tl_worker_reap(&wk, 5000);
    /* Gone within its lease (1.5 s) + the re-check at its deadline. */
    int rc = baton_group_watch(w, &m, 10000);
    CHECK_RC(rc, 0);
    CHECK(m.n == 0);
    fprintf(stderr, "   killed member gone from the watcher's list after %lld ms (lease 1500 ms)\n",
            (long long)(tl_now_ms() - t0));
    CHECK(tl_now_ms() - t0 < 1500 + 4000);
    baton_members_clear(&m);
    baton_group_free(w);
    baton_client_close(c);
}

/* ---- queues --------------------------------------------------------------------- */

typedef struct {
    char name[128];
    int rc;
    char data[64];
    int64_t took_ms;
} take_arg;

/* One waiting take (10 s) on a client of its own; the item is done. */
static void *take_thread(void *p) {
    take_arg *a = p;
    baton_client *c = open_client();
    baton_queue *q = NULL;
    baton_queue_item *it = NULL;
    a->rc = baton_queue_open(&q, c, a->name, NULL);
    int64_t t0 = tl_now_ms();
    if (!a->rc) a->rc = baton_queue_take(q, &it, 10000);
    a->took_ms = tl_now_ms() - t0;
    if (!a->rc) {
        snprintf(a->data, sizeof a->data, "%s", baton_queue_item_data(it, NULL));
        a->rc = baton_queue_done(it);
    }
    baton_queue_free(q);
    baton_client_close(c);
    return NULL;
}

static void queue_basic(void) {
    char n[128];
    nm(n, sizeof n, "q");
    baton_client *c = open_client();
    baton_queue_options o = BATON_QUEUE_OPTIONS_INIT;
    o.lease_ms = 3000;
    baton_queue *q = NULL;
    CHECK_RC(baton_queue_open(&q, c, n, &o), 0);
    baton_queue_item *it = NULL, *it2 = NULL;
    CHECK_RC(baton_queue_take(q, &it, 0), BATON_ENOENT);
    CHECK_RC(baton_queue_put(q, "one", 3), 0);
    CHECK_RC(baton_queue_put(q, "two", 3), 0);
    CHECK_RC(baton_queue_put(q, "three", 5), 0);
    uint64_t waiting = 0;
    CHECK_RC(baton_queue_size(q, &waiting), 0);
    CHECK(waiting == 3);
    CHECK_RC(baton_queue_take(q, &it, 0), 0);
    size_t len = 0;
    CHECK(it && !strcmp(baton_queue_item_data(it, &len), "one") && len == 3);
    uint64_t f1 = baton_queue_item_fence(it);
    CHECK(baton_queue_item_held(it) == 1);
    CHECK_RC(baton_queue_take(q, &it2, 0), 0);
    CHECK(it2 && !strcmp(baton_queue_item_data(it2, NULL), "two"));
    CHECK(baton_queue_item_fence(it2) > f1);
    CHECK_RC(baton_queue_size(q, &waiting), 0);
    CHECK(waiting == 1);
    /* "one" returned: back at the head */
    CHECK_RC(baton_queue_return(it), 0);
    CHECK_RC(baton_queue_take(q, &it, 0), 0);
    CHECK(it && !strcmp(baton_queue_item_data(it, NULL), "one"));
    CHECK(baton_queue_item_fence(it) > baton_queue_item_fence(it2));
    /* held past its lease by renewals */
    tl_sleep_ms(4000);
    CHECK(baton_queue_item_held(it) == 1);
    CHECK_RC(baton_queue_done(it), 0);
    CHECK_RC(baton_queue_done(it2), 0);
    CHECK_RC(baton_queue_take(q, &it, 0), 0);
    CHECK(it && !strcmp(baton_queue_item_data(it, NULL), "three"));
    CHECK_RC(baton_queue_done(it), 0);
    CHECK_RC(baton_queue_take(q, &it, 0), BATON_ENOENT);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_queue_take(q, &it, 300), BATON_ETIMEDOUT);
    CHECK(tl_now_ms() - t0 >= 250);
    CHECK_RC(baton_queue_take(q, &it, 2500), BATON_ETIMEDOUT); /* longer than the io timeout */
    /* a waiting take (another client) is woken by a put */
    pthread_t th;
    take_arg ta;
    memset(&ta, 0, sizeof ta);
    snprintf(ta.name, sizeof ta.name, "%s", n);
    pthread_create(&th, NULL, take_thread, &ta);
    tl_sleep_ms(500);
    CHECK_RC(baton_queue_put(q, "late", 4), 0);
    pthread_join(th, NULL);
    CHECK_RC(ta.rc, 0);
    CHECK(!strcmp(ta.data, "late"));
    fprintf(stderr, "   a waiting take got the put after %lld ms\n", (long long)ta.took_ms);
    baton_queue_free(q);
    baton_client_close(c);
}

static int worker_taker(const char *uri, const char *name) {
    baton_client *c = NULL;
    if (baton_client_open(&c, uri, NULL)) return 2;
    baton_queue_options o = BATON_QUEUE_OPTIONS_INIT;
    o.lease_ms = 1500;
    baton_queue *q = NULL;
    baton_queue_item *it = NULL;
    if (baton_queue_open(&q, c, name, &o) || baton_queue_take(q, &it, 5000)) return 3;
    tl_out_line("took %s %" PRIu64 "\n", baton_queue_item_data(it, NULL), baton_queue_item_fence(it));
    tl_wait_for_line("never");
    return 0;
}

static void queue_taker_killed(void) {
    char n[128], line[128];
    nm(n, sizeof n, "qkill");
    baton_client *c = open_client();
    baton_queue *q = NULL;
    CHECK_RC(baton_queue_open(&q, c, n, NULL), 0);
    CHECK_RC(baton_queue_put(q, "job-1", 5), 0);
    CHECK_RC(baton_queue_put(q, "job-2", 5), 0);
    char *argv[] = { "test_redis_coord", "taker", g_uri, n, NULL };
    tl_worker wk;
    CHECK(tl_worker_spawn(&wk, argv) == 0);
    CHECK(tl_expect_line(&wk, "took job-1 ", line, sizeof line, 10000) == 0);
    uint64_t f1 = strtoull(line + strlen("took job-1 "), NULL, 10);
    kill(wk.pid, SIGKILL);
    int64_t t0 = tl_now_ms();
    tl_worker_reap(&wk, 5000);
    baton_queue_item *it = NULL;
    CHECK_RC(baton_queue_take(q, &it, 0), 0); /* job-2 waits; job-1 is still the dead taker's */
    CHECK(it && !strcmp(baton_queue_item_data(it, NULL), "job-2"));
    baton_queue_item *back = NULL;
    CHECK_RC(baton_queue_take(q, &back, 10000), 0); /* job-1 comes back when its lease runs out */
    CHECK(back && !strcmp(baton_queue_item_data(back, NULL), "job-1"));
    CHECK(back && baton_queue_item_fence(back) > f1);
    fprintf(stderr, "   the killed taker's item taken again after %lld ms (lease 1500 ms)\n",
            (long long)(tl_now_ms() - t0));
    if (it) CHECK_RC(baton_queue_done(it), 0);
    if (back) CHECK_RC(baton_queue_done(back), 0);
    baton_queue_free(q);
    baton_client_close(c);
}

enum { QN = 60, QT = 4 };
static atomic_int q_inflight[QN];
static atomic_int q_done[QN];
static atomic_int q_overlap;
static atomic_int q_returned[QN];

typedef struct {
    char name[128];
} qarg;

static void *taker_thread(void *p) {
    qarg *a = p;
    baton_client *c = open_client();
    baton_queue *q = NULL;
    if (baton_queue_open(&q, c, a->name, NULL)) goto out;
    for (;;) {
        baton_queue_item *it = NULL;
        int rc = baton_queue_take(q, &it, 1000);
        if (rc) break;
        int k = atoi(baton_queue_item_data(it, NULL));
        if (k < 0 || k >= QN || atomic_fetch_add(&q_inflight[k], 1) != 0) atomic_fetch_add(&q_overlap, 1);
        tl_sleep_ms(2);
        if (k >= 0 && k < QN) atomic_fetch_sub(&q_inflight[k], 1);
        /* every third item is given back the first time, then done */
        if (k >= 0 && k < QN && k % 3 == 0 && atomic_fetch_add(&q_returned[k], 1) == 0) {
            baton_queue_return(it);
            continue;
        }
        if (baton_queue_done(it) == 0) atomic_fetch_add(&q_done[k], 1);
    }
out:
    baton_queue_free(q);
    baton_client_close(c);
    return NULL;
}

static void queue_concurrent(void) {
    qarg a;
    nm(a.name, sizeof a.name, "qconc");
    baton_client *c = open_client();
    baton_queue *q = NULL;
    CHECK_RC(baton_queue_open(&q, c, a.name, NULL), 0);
    for (int i = 0; i < QN; i++) {
        char d[16];
        snprintf(d, sizeof d, "%d", i);
        CHECK_RC(baton_queue_put(q, d, strlen(d)), 0);
    }
    pthread_t th[QT];
    for (int i = 0; i < QT; i++) pthread_create(&th[i], NULL, taker_thread, &a);
    for (int i = 0; i < QT; i++) pthread_join(th[i], NULL);
    int once = 0;
    for (int i = 0; i < QN; i++) once += atomic_load(&q_done[i]) == 1;
    fprintf(stderr, "   %d of %d items done exactly once, %d overlaps\n", once, QN, atomic_load(&q_overlap));
    CHECK(once == QN);
    CHECK(atomic_load(&q_overlap) == 0);
    uint64_t waiting = 1;
    CHECK_RC(baton_queue_size(q, &waiting), 0);
    CHECK(waiting == 0);
    baton_queue_free(q);
    baton_client_close(c);
}

/* wait_replicas=1 on a server without replicas: a join and a take are
 * undone (the member leaves, the item goes back) and fail. */
static void replicas_undo(void) {
    char uri[300], gname[128], qname[128];
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0?wait_replicas=1&wait_ms=100", g_port);
    baton_client *c = NULL, *plain = open_client();
    CHECK_RC(baton_client_open(&c, uri, NULL), 0);
    if (!c) return;
    baton_group *g = NULL, *w = NULL;
    nm(gname, sizeof gname, "replicas-g");
    CHECK_RC(baton_group_open(&g, c, gname, NULL), 0);
    CHECK_RC(baton_group_join(g, "m", ""), BATON_EUNAVAILABLE);
    CHECK_RC(baton_group_open(&w, plain, gname, NULL), 0);
    baton_members m = { 0 };
    CHECK_RC(baton_group_members(w, &m), 0);
    CHECK(m.n == 0);
    baton_members_clear(&m);
    baton_queue *q = NULL;
    baton_queue_item *it = NULL;
    uint64_t waiting = 0;
    nm(qname, sizeof qname, "replicas-q");
    CHECK_RC(baton_queue_open(&q, c, qname, NULL), 0);
    CHECK_RC(baton_queue_put(q, "job", 3), 0);
    CHECK_RC(baton_queue_take(q, &it, 0), BATON_EUNAVAILABLE);
    CHECK_RC(baton_queue_size(q, &waiting), 0);
    CHECK(waiting == 1);
    baton_group_free(g);
    baton_group_free(w);
    baton_queue_free(q);
    baton_client_close(c);
    baton_client_close(plain);
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "member")) return worker_member(argv[2], argv[3]);
    if (argc == 4 && !strcmp(argv[1], "taker")) return worker_taker(argv[2], argv[3]);
    signal(SIGPIPE, SIG_IGN);
    if (system("command -v redis-cli >/dev/null 2>&1") != 0) return tl_skip_status("redis-cli is not installed", 1);
    const char *tt = getenv("BATON_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/redis_coord-%ld", tt && *tt ? tt : "/tmp", (long)getpid());
    tl_mkdirs(g_dir);
    g_port = tl_server("redis", "start", g_dir, NULL, 1);
    snprintf(g_uri, sizeof g_uri, "redis://127.0.0.1:%d/0?io_timeout_ms=2000", g_port);
    snprintf(g_tag, sizeof g_tag, "t%ld-", (long)getpid());
    RUN(value_versions);
    RUN(value_cas_race);
    RUN(value_redis_cli);
    RUN(group_basic);
    RUN(group_member_killed);
    RUN(queue_basic);
    RUN(queue_taker_killed);
    RUN(queue_concurrent);
    RUN(replicas_undo);
    RUN(value_watch_faults); /* last: it restarts the server */
    tl_server_stop("redis", g_dir);
    return th_finish();
}
