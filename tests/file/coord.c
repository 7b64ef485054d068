/*
 * Values, groups and queues on the embedded engines (file, SQLite), through
 * the public API:
 *
 *   test_file_coord              the file engine, in a fresh lock dir
 *   test_sqlite_coord URI        another engine (sqlite:///tmp/x.db): the same
 *                                checks but the file engine's own files
 *
 * values: absent reads BATON_ENOENT; create-only (expect 0), compare-and-set
 * and delete answer BATON_ECONFLICT on a stale version; versions strictly
 * increase across a delete and a re-create; a damaged value file restarts
 * above every earlier version; a watcher is woken by another process's set
 * and, after a burst of sets from another process, ends on the last value;
 * counters added to by two processes at once lose no add (the CAS is atomic
 * across processes).
 * groups: a duplicate live id is BATON_ELOCKED; a dead member's file does
 * not block its id; a member in another process that is SIGKILLed leaves the
 * list a watcher sees (woken, within the engine's 1 s re-list bound + slack).
 * queues: FIFO, increasing fences, a given-back item is taken again first, a
 * taker SIGKILLed while it holds an item gives it back at once, and four
 * taker processes draining 120 items never hold one item at once and do
 * each exactly once.
 *
 * Workers are this binary re-executed (never a fork of a threaded process).
 * Their members and takers have 1 s leases, so on a lease engine a killed
 * one is gone within about a second too.
 */
#include "ft.h"

#include <signal.h>
#include <sys/wait.h>

static int g_file = 1;      /* the file engine: its files may be damaged on purpose */
static char g_marks[1100];  /* where drain workers leave their marker files */

static baton_value *value_on(baton_client *c, const char *name) {
    baton_value *v = NULL;
    MUST(baton_value_open(&v, c, name));
    return v;
}

static void test_value_versions(void) {
    baton_client *c = client();
    baton_value *v = value_on(c, "cfg/app"), *other = value_on(c, "cfg/app2");
    baton_value_data d = { 0 };
    uint64_t v1 = 0, v2 = 0, v3 = 0, v4 = 0;
    CHECK_RC(baton_value_get(v, &d), BATON_ENOENT);
    CHECK(d.data == NULL && d.version == 0);
    CHECK_RC(baton_value_delete(v, BATON_VALUE_ANY), BATON_ENOENT);
    CHECK_RC(baton_value_set(v, "one", 3, 0, &v1), 0);
    CHECK(v1 > 0);
    CHECK_RC(baton_value_set(v, "again", 5, 0, &v2), BATON_ECONFLICT);
    CHECK_RC(baton_value_set(v, "two", 3, v1 + 1, &v2), BATON_ECONFLICT);
    CHECK_RC(baton_value_set(v, "two", 3, v1, &v2), 0);
    CHECK(v2 > v1);
    CHECK_RC(baton_value_set(v, "stale", 5, v1, NULL), BATON_ECONFLICT);
    CHECK_RC(baton_value_get(v, &d), 0);
    CHECK(d.data && d.len == 3 && !strcmp(d.data, "two") && d.version == v2);
    baton_value_data_clear(&d);
    /* the other name is untouched */
    CHECK_RC(baton_value_get(other, &d), BATON_ENOENT);
    CHECK_RC(baton_value_delete(v, v1), BATON_ECONFLICT);
    CHECK_RC(baton_value_delete(v, v2), 0);
    CHECK_RC(baton_value_get(v, &d), BATON_ENOENT);
    CHECK_RC(baton_value_delete(v, BATON_VALUE_ANY), BATON_ENOENT);
    CHECK_RC(baton_value_set(v, "three", 5, v2, NULL), BATON_ECONFLICT);
    CHECK_RC(baton_value_set(v, "three", 5, 0, &v3), 0);
    CHECK(v3 > v2);   /* the tombstone kept the count */
    /* binary bytes and an empty value */
    CHECK_RC(baton_value_set(v, "a\0b", 3, BATON_VALUE_ANY, &v4), 0);
    CHECK_RC(baton_value_get(v, &d), 0);
    CHECK(d.len == 3 && !memcmp(d.data, "a\0b", 3) && d.version == v4 && v4 > v3);
    baton_value_data_clear(&d);
    CHECK_RC(baton_value_set(v, "", 0, v4, &v4), 0);
    CHECK_RC(baton_value_get(v, &d), 0);
    CHECK(d.len == 0 && d.data && !d.data[0]);
    baton_value_data_clear(&d);
    /* a damaged file (a power loss): get says so, a set restarts above every version */
    if (g_file) {
        char p[1200];
        put_bytes(dir_file(p, sizeof p, "values/v.cfg%2Fapp"), "junk", 4);
        CHECK_RC(baton_value_get(v, &d), BATON_EPROTO);
        CHECK_RC(baton_value_set(v, "after", 5, BATON_VALUE_ANY, &v1), 0);
        CHECK(v1 > v4);
        CHECK_RC(baton_value_get(v, &d), 0);
        CHECK(d.version == v1 && !strcmp(d.data, "after"));
        baton_value_data_clear(&d);
    }
    /* values and locks of one name do not meet */
    {
        baton_lock *l = NULL;
        MUST(baton_lock_open(&l, c, "cfg/app", NULL));
        CHECK_RC(baton_lock_acquire(l, 0), 0);
        CHECK_RC(baton_value_set(v, "x", 1, BATON_VALUE_ANY, NULL), 0);
        CHECK_RC(baton_lock_release(l), 0);
        baton_lock_free(l);
    }
    baton_value_free(v);
    baton_value_free(other);
    baton_client_close(c);
}

static void spawn(tl_worker *w, char *const argv[]) {
    if (tl_worker_spawn(w, argv)) {
        perror("spawn");
        exit(1);
    }
}

static int line(tl_worker *w, char *buf, size_t n) { return tl_read_line(w->from, buf, n, 20000); }

static int reap(tl_worker *w) {
    int st = 0;
    close(w->to);
    close(w->from);
    waitpid(w->pid, &st, 0);
    return st;
}

static void test_value_watch(void) {
    baton_client *c = client();
    baton_value *v = value_on(c, "watched");
    baton_value_data d = { 0 };
    uint64_t ver = 0;
    tl_worker w;
    char buf[256];
    CHECK_RC(baton_value_set(v, "start", 5, BATON_VALUE_ANY, &ver), 0);
    CHECK_RC(baton_value_watch(v, ver, &d, 0), BATON_ETIMEDOUT);
    CHECK_RC(baton_value_watch(v, ver, &d, 100), BATON_ETIMEDOUT);
    CHECK_RC(baton_value_watch(v, ver - 1, &d, 0), 0);   /* differs already: at once */
    baton_value_data_clear(&d);
    /* another process sets 50 values in a burst; the watcher ends on the last */
    spawn(&w, (char *[]){ "test_file_coord", "burst", g_uri, "watched", "50", NULL });
    for (int i = 0; i < 200; i++) {
        int rc = baton_value_watch(v, ver, &d, 10000);
        CHECK_RC(rc, 0);
        if (rc) break;
        ver = d.version;
        if (d.data && !strcmp(d.data, "v49")) break;
        baton_value_data_clear(&d);
    }
    CHECK(d.data && !strcmp(d.data, "v49"));
    baton_value_data_clear(&d);
    CHECK(line(&w, buf, sizeof buf) > 0 && !strcmp(buf, "done"));
    CHECK(reap(&w) == 0);
    CHECK_RC(baton_value_watch(v, ver, &d, 0), BATON_ETIMEDOUT);
    /* a delete wakes a watcher with version 0 */
    spawn(&w, (char *[]){ "test_file_coord", "delete", g_uri, "watched", NULL });
    CHECK_RC(baton_value_watch(v, ver, &d, 10000), 0);
    CHECK(d.version == 0 && d.data == NULL);
    CHECK(reap(&w) == 0);
    /* the folder moved away under a watcher and made anew (a cleaner, a
     * hand): the watcher follows the new folder (it parked on the old one) */
    if (g_file) {
        int got = 0;
        int64_t t0 = tl_now_ms();
        CHECK_RC(baton_value_set(v, "old", 3, BATON_VALUE_ANY, &ver), 0);
        spawn(&w, (char *[]){ "test_file_coord", "mvset", g_uri, "watched", g_dir, NULL });
        /* woken, not found by the read the core makes at the deadline
         * (20 s: far beyond any wake-up, however loaded the machine) */
        for (int i = 0; i < 10 && !got; i++) {
            int rc = baton_value_watch(v, ver, &d, 20000);
            CHECK_RC(rc, 0);
            if (rc) break;
            ver = d.version;
            got = d.data && !strcmp(d.data, "fresh");
            baton_value_data_clear(&d);
        }
        CHECK(got);
        CHECK(tl_now_ms() - t0 < 15000);
        CHECK(reap(&w) == 0);
    }
    baton_value_free(v);
    baton_client_close(c);
}

static void test_counter_two_processes(void) {
    baton_client *c = client();
    baton_counter *k = NULL;
    tl_worker a, b;
    char buf[64];
    int64_t n = -1;
    MUST(baton_counter_open(&k, c, "hits"));
    spawn(&a, (char *[]){ "test_file_coord", "adder", g_uri, "hits", "150", NULL });
    spawn(&b, (char *[]){ "test_file_coord", "adder", g_uri, "hits", "150", NULL });
    CHECK(line(&a, buf, sizeof buf) > 0 && !strcmp(buf, "done"));
    CHECK(line(&b, buf, sizeof buf) > 0 && !strcmp(buf, "done"));
    CHECK(reap(&a) == 0 && reap(&b) == 0);
    CHECK_RC(baton_counter_get(k, &n, NULL), 0);
    CHECK(n == 300);
    baton_counter_free(k);
    baton_client_close(c);
}

static int has_member(const baton_members *m, const char *id, const char *value) {
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->members[i].id, id)) return !value || !strcmp(m->members[i].value, value);
    return 0;
}

static void test_group(void) {
    baton_client *c = client();
    baton_group *g = NULL, *dup = NULL, *watcher = NULL;
    baton_members m = { 0 };
    tl_worker w;
    char buf[256];
    MUST(baton_group_open(&g, c, "cluster", NULL));
    MUST(baton_group_open(&dup, c, "cluster", NULL));
    MUST(baton_group_open(&watcher, c, "cluster", NULL));
    baton_members_clear(&m);
    CHECK_RC(baton_group_members(g, &m), 0);
    CHECK(m.n == 0);
    CHECK_RC(baton_group_join(g, "node-1", "10.0.0.1:80"), 0);
    CHECK(baton_group_is_member(g));
    CHECK_RC(baton_group_join(dup, "node-1", "other"), BATON_ELOCKED);
    baton_members_clear(&m);
    CHECK_RC(baton_group_watch(watcher, &m, 0), 0);   /* the first answers at once */
    CHECK(m.n == 1 && has_member(&m, "node-1", "10.0.0.1:80"));
    /* a member in another process joins, then is SIGKILLed */
    spawn(&w, (char *[]){ "test_file_coord", "member", g_uri, "cluster", "node-2", NULL });
    CHECK(line(&w, buf, sizeof buf) > 0 && !strcmp(buf, "joined"));
    baton_members_clear(&m);
    CHECK_RC(baton_group_watch(watcher, &m, 10000), 0);
    CHECK(m.n == 2 && has_member(&m, "node-2", "pid-value"));
    kill(w.pid, SIGKILL);
    {
        int64_t t0 = tl_now_ms();
        baton_members_clear(&m);
        CHECK_RC(baton_group_watch(watcher, &m, 10000), 0);
        fprintf(stderr, "   killed member left the watcher's list after %lld ms\n", (long long)(tl_now_ms() - t0));
    }
    CHECK(m.n == 1 && has_member(&m, "node-1", NULL) && !has_member(&m, "node-2", NULL));
    reap(&w);
    /* the dead member's id is free again */
    CHECK_RC(baton_group_join(dup, "node-2", "reborn"), 0);
    baton_members_clear(&m);
    CHECK_RC(baton_group_members(g, &m), 0);
    CHECK(m.n == 2 && has_member(&m, "node-2", "reborn"));
    CHECK_RC(baton_group_leave(g), 0);
    CHECK_RC(baton_group_leave(g), BATON_ENOTHELD);
    baton_members_clear(&m);
    CHECK_RC(baton_group_watch(watcher, &m, 10000), 0);
    CHECK(m.n == 1 && has_member(&m, "node-2", NULL));
    /* a group and a queue of one name do not meet */
    {
        baton_queue *q = NULL;
        MUST(baton_queue_open(&q, c, "cluster", NULL));
        CHECK_RC(baton_queue_put(q, "x", 1), 0);
        baton_members_clear(&m);
    CHECK_RC(baton_group_members(g, &m), 0);
        CHECK(m.n == 1);
        baton_queue_free(q);
    }
    baton_members_clear(&m);
    baton_group_free(g);
    baton_group_free(dup);
    baton_group_free(watcher);
    baton_client_close(c);
}

static void test_queue_basics(void) {
    baton_client *c = client();
    baton_queue *q = NULL;
    baton_queue_item *a = NULL, *b = NULL, *x = NULL;
    uint64_t n = 99;
    MUST(baton_queue_open(&q, c, "jobs", NULL));
    CHECK_RC(baton_queue_take(q, &a, 0), BATON_ENOENT);
    CHECK_RC(baton_queue_put(q, "one", 3), 0);
    CHECK_RC(baton_queue_put(q, "two", 3), 0);
    CHECK_RC(baton_queue_put(q, "three", 5), 0);
    CHECK_RC(baton_queue_size(q, &n), 0);
    CHECK(n == 3);
    CHECK_RC(baton_queue_take(q, &a, 0), 0);
    CHECK_RC(baton_queue_take(q, &b, 0), 0);
    CHECK(a && b && !strcmp(baton_queue_item_data(a, NULL), "one") && !strcmp(baton_queue_item_data(b, NULL), "two"));
    CHECK(baton_queue_item_fence(b) > baton_queue_item_fence(a));
    CHECK(baton_queue_item_held(a));
    CHECK_RC(baton_queue_size(q, &n), 0);
    CHECK(n == 1);
    /* given back: first in line again */
    CHECK_RC(baton_queue_return(a), 0);
    CHECK_RC(baton_queue_take(q, &x, 0), 0);
    CHECK(x && !strcmp(baton_queue_item_data(x, NULL), "one") && baton_queue_item_fence(x) > baton_queue_item_fence(b));
    CHECK_RC(baton_queue_done(x), 0);
    CHECK_RC(baton_queue_done(b), 0);
    CHECK_RC(baton_queue_take(q, &x, 0), 0);
    CHECK(x && !strcmp(baton_queue_item_data(x, NULL), "three"));
    baton_queue_item_free(x);   /* freed undone: given back */
    CHECK_RC(baton_queue_take(q, &x, 0), 0);
    CHECK(x && !strcmp(baton_queue_item_data(x, NULL), "three"));
    CHECK_RC(baton_queue_done(x), 0);
    CHECK_RC(baton_queue_size(q, &n), 0);
    CHECK(n == 0);
    CHECK_RC(baton_queue_take(q, &x, 0), BATON_ENOENT);
    CHECK_RC(baton_queue_take(q, &x, 100), BATON_ETIMEDOUT);
    baton_queue_free(q);
    baton_client_close(c);
}

static void test_queue_taker_killed(void) {
    baton_client *c = client();
    baton_queue *q = NULL;
    baton_queue_item *it = NULL;
    tl_worker w;
    char buf[256];
    MUST(baton_queue_open(&q, c, "killq", NULL));
    CHECK_RC(baton_queue_put(q, "precious", 8), 0);
    spawn(&w, (char *[]){ "test_file_coord", "taker", g_uri, "killq", NULL });
    CHECK(line(&w, buf, sizeof buf) > 0 && !strcmp(buf, "took precious"));
    CHECK_RC(baton_queue_take(q, &it, 0), BATON_ENOENT);   /* held by the worker */
    kill(w.pid, SIGKILL);
    reap(&w);
    CHECK_RC(baton_queue_take(q, &it, 10000), 0);
    CHECK(it && !strcmp(baton_queue_item_data(it, NULL), "precious"));
    if (it) CHECK_RC(baton_queue_done(it), 0);
    /* a waiting taker is woken by a put from another process */
    spawn(&w, (char *[]){ "test_file_coord", "put", g_uri, "killq", "late", NULL });
    CHECK_RC(baton_queue_take(q, &it, 10000), 0);
    CHECK(it && !strcmp(baton_queue_item_data(it, NULL), "late"));
    if (it) CHECK_RC(baton_queue_done(it), 0);
    CHECK(reap(&w) == 0);
    baton_queue_free(q);
    baton_client_close(c);
}

#define DRAIN_ITEMS 120
#define DRAIN_WORKERS 4

static void test_queue_no_double_take(void) {
    baton_client *c = client();
    baton_queue *q = NULL;
    tl_worker w[DRAIN_WORKERS];
    int seen[DRAIN_ITEMS] = { 0 }, doubles = 0, total = 0;
    char buf[256];
    MUST(baton_queue_open(&q, c, "drain", NULL));
    for (int i = 0; i < DRAIN_ITEMS; i++) {
        snprintf(buf, sizeof buf, "%d", i);
        CHECK_RC(baton_queue_put(q, buf, strlen(buf)), 0);
    }
    for (int i = 0; i < DRAIN_WORKERS; i++)
        spawn(&w[i], (char *[]){ "test_file_coord", "drain", g_uri, "drain", g_marks, NULL });
    for (int i = 0; i < DRAIN_WORKERS; i++) {
        while (line(&w[i], buf, sizeof buf) > 0 && strcmp(buf, "end")) {
            int k;
            if (!strcmp(buf, "DOUBLE")) doubles++;
            else if (sscanf(buf, "did %d", &k) == 1 && k >= 0 && k < DRAIN_ITEMS) seen[k]++, total++;
        }
        CHECK(reap(&w[i]) == 0);
    }
    CHECK(doubles == 0);
    CHECK(total == DRAIN_ITEMS);
    for (int i = 0; i < DRAIN_ITEMS; i++) CHECK(seen[i] == 1);
    baton_queue_free(q);
    baton_client_close(c);
}

/* ---- worker roles ---- */

static int worker(int argc, char **argv) {
    const char *role = argv[1], *uri = argv[2], *name = argv[3];
    baton_client *c = NULL;
    char buf[256];
    if (baton_client_open(&c, uri, NULL)) return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(role, "burst") && argc > 4) {
        baton_value *v = NULL;
        if (baton_value_open(&v, c, name)) return 2;
        tl_sleep_ms(100);
        for (int i = 0, n = atoi(argv[4]); i < n; i++) {
            int len = snprintf(buf, sizeof buf, "v%d", i);
            if (baton_value_set(v, buf, (size_t)len, BATON_VALUE_ANY, NULL)) return 3;
        }
        printf("done\n");
        baton_value_free(v);
    } else if (!strcmp(role, "delete")) {
        baton_value *v = NULL;
        if (baton_value_open(&v, c, name)) return 2;
        tl_sleep_ms(100);
        if (baton_value_delete(v, BATON_VALUE_ANY)) return 3;
        baton_value_free(v);
    } else if (!strcmp(role, "mvset") && argc > 4) {
        baton_value *v = NULL;
        char from[1200], to[1200];
        if (baton_value_open(&v, c, name)) return 2;
        tl_sleep_ms(200);
        snprintf(from, sizeof from, "%s/values", argv[4]);
        snprintf(to, sizeof to, "%s/values.old", argv[4]);
        if (rename(from, to)) return 4;
        tl_sleep_ms(100);
        if (baton_value_set(v, "fresh", 5, BATON_VALUE_ANY, NULL)) return 3;
        baton_value_free(v);
    } else if (!strcmp(role, "adder") && argc > 4) {
        baton_counter *k = NULL;
        if (baton_counter_open(&k, c, name)) return 2;
        for (int i = 0, n = atoi(argv[4]); i < n; i++)
            if (baton_counter_add(k, 1, NULL)) return 3;
        printf("done\n");
        baton_counter_free(k);
    } else if (!strcmp(role, "member") && argc > 4) {
        baton_group *g = NULL;
        baton_group_options go = BATON_GROUP_OPTIONS_INIT;
        go.lease_ms = 1000;
        if (baton_group_open(&g, c, name, &go) || baton_group_join(g, argv[4], "pid-value")) return 3;
        printf("joined\n");
        while (read(0, buf, sizeof buf) > 0) {}
        baton_group_free(g);
    } else if (!strcmp(role, "taker")) {
        baton_queue *q = NULL;
        baton_queue_item *it = NULL;
        baton_queue_options qo = BATON_QUEUE_OPTIONS_INIT;
        qo.lease_ms = 1000;
        if (baton_queue_open(&q, c, name, &qo) || baton_queue_take(q, &it, 10000)) return 3;
        printf("took %s\n", baton_queue_item_data(it, NULL));
        while (read(0, buf, sizeof buf) > 0) {}
        baton_queue_item_free(it);
        baton_queue_free(q);
    } else if (!strcmp(role, "put") && argc > 4) {
        baton_queue *q = NULL;
        if (baton_queue_open(&q, c, name, NULL)) return 2;
        tl_sleep_ms(200);
        if (baton_queue_put(q, argv[4], strlen(argv[4]))) return 3;
        baton_queue_free(q);
    } else if (!strcmp(role, "drain") && argc > 4) {
        /* take and do until the queue stays empty; while an item is held, a
         * marker file only its holder may create proves nobody else has it */
        baton_queue *q = NULL;
        baton_queue_item *it = NULL;
        if (baton_queue_open(&q, c, name, NULL)) return 2;
        while (baton_queue_take(q, &it, 500) == 0) {
            char mark[1200], data[64];
            const char *dir = argv[4];
            snprintf(data, sizeof data, "%s", baton_queue_item_data(it, NULL));
            snprintf(mark, sizeof mark, "%s/held.%s", dir, data);
            int fd = open(mark, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
            if (fd < 0) printf("DOUBLE\n");
            else close(fd);
            usleep(1000);
            if (fd >= 0) unlink(mark);
            if (baton_queue_done(it) == 0) printf("did %s\n", data);
            it = NULL;
        }
        printf("end\n");
        baton_queue_free(q);
    } else {
        return 2;
    }
    baton_client_close(c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 3) return worker(argc, argv);
    if (argc == 2) {
        const char *tt = getenv("BATON_TEST_TMP");
        snprintf(g_uri, sizeof g_uri, "%s", argv[1]);
        g_file = !strncmp(g_uri, "file:", 5);
        snprintf(g_dir, sizeof g_dir, "%s/coord-%ld", tt && *tt ? tt : "/tmp", (long)getpid());
        tl_mkdirs(g_dir);
        /* a fresh database: nothing left by an earlier run */
        if (!strncmp(g_uri, "sqlite://", 9)) {
            char *q = strchr(g_uri + 9, '?');
            if (q) *q = 0;
            unlink(g_uri + 9);
            if (q) *q = '?';
        }
        fprintf(stderr, "coord: %s\n", g_uri);
    } else {
        ft_setup("file_coord");
    }
    snprintf(g_marks, sizeof g_marks, "%s", g_dir);
    RUN(test_value_versions);
    RUN(test_value_watch);
    RUN(test_counter_two_processes);
    RUN(test_group);
    RUN(test_queue_basics);
    RUN(test_queue_taker_killed);
    RUN(test_queue_no_double_take);
    return th_finish();
}
