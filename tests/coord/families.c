/* The coordination conformance suite: groups, barriers and queues (and the
 * worker processes their kill cases use). See coord.c. */
#include "coord.h"

#include <signal.h>
#include <string.h>

/* harness.h's counters are static: this file's CHECKs count here, and
 * coord.c's main adds them to its own. */
void families_enter(const char *name) { th_current = name; }

void families_totals(int *passed, int *failed) {
    *passed = th_passed;
    *failed = th_failed;
}

/* ---- workers ---------------------------------------------------------------- */

static void say_lost(void) {
    static const char msg[] = "LOST\n";
    if (write(1, msg, sizeof msg - 1) < 0) _exit(3);
}

static void member_lost(baton_group *g, void *payload) {
    (void)g;
    (void)payload;
    say_lost();
}

/* Joins NAME as ID, says JOINED, stays until stdin closes. */
int worker_member(const char *uri, const char *name, const char *id, uint32_t lease_ms) {
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    if (rc) {
        tl_out_line("ERR open %d\n", rc);
        return 2;
    }
    baton_group_options o = BATON_GROUP_OPTIONS_INIT;
    o.lease_ms = lease_ms;
    o.on_lost = member_lost;
    baton_group *g = NULL;
    if ((rc = baton_group_open(&g, c, name, &o)) != 0 || (rc = baton_group_join(g, id, "worker")) != 0) {
        tl_out_line("ERR join %d\n", rc);
        return 2;
    }
    tl_out_line("JOINED\n");
    tl_wait_for_line("EXIT");
    baton_group_free(g);
    baton_client_close(c);
    return 0;
}

static void item_lost(baton_queue_item *it, void *payload) {
    (void)it;
    (void)payload;
    say_lost();
}

/* Takes one item of NAME, says TAKEN FENCE DATA, obeys HELD? and DONE;
 * stdin closed = exit. */
int worker_take(const char *uri, const char *name, uint32_t lease_ms) {
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    if (rc) {
        tl_out_line("ERR open %d\n", rc);
        return 2;
    }
    baton_queue_options o = BATON_QUEUE_OPTIONS_INIT;
    o.lease_ms = lease_ms;
    o.on_lost = item_lost;
    baton_queue *q = NULL;
    baton_queue_item *it = NULL;
    if ((rc = baton_queue_open(&q, c, name, &o)) != 0 || (rc = baton_queue_take(q, &it, 15000)) != 0) {
        tl_out_line("ERR take %d\n", rc);
        return 2;
    }
    tl_out_line("TAKEN %llu %s\n", (unsigned long long)baton_queue_item_fence(it), baton_queue_item_data(it, NULL));
    char line[64];
    for (;;) {
        if (tl_read_line(0, line, sizeof line, 600000) < 0) break;
        if (!strcmp(line, "HELD?")) {
            tl_out_line("HELD? %d\n", it ? baton_queue_item_held(it) : 0);
        } else if (!strcmp(line, "DONE") && it) {
            rc = baton_queue_done(it);
            it = NULL;
            tl_out_line("DONE %d\n", rc);
        }
    }
    if (it) baton_queue_item_free(it);
    baton_queue_free(q);
    baton_client_close(c);
    return 0;
}

/* ---- groups ------------------------------------------------------------------- */

static baton_group *group_on(baton_client *c, const char *name) {
    baton_group_options o = BATON_GROUP_OPTIONS_INIT;
    o.lease_ms = CO_LEASE_MS;
    baton_group *g = NULL;
    MUST(baton_group_open(&g, c, name, &o));
    return g;
}

/* The members of M as "id=value,id=value" (sorted as given). */
static const char *members_str(const baton_members *m) {
    static _Thread_local char buf[2048];
    size_t off = 0;
    buf[0] = 0;
    for (size_t i = 0; i < m->n && off < sizeof buf; i++)
        off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%s=%s", i ? "," : "", m->members[i].id,
                                m->members[i].value ? m->members[i].value : "(null)");
    return buf;
}

static int listed(const baton_members *m, const char *id) {
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->members[i].id, id)) return 1;
    return 0;
}

/* Lists G until ID is (WANT 1) or is not (WANT 0) among the members, at
 * most TIMEOUT_MS; returns 1 when it was so, with the time taken. */
static int await_member(baton_group *g, const char *id, int want, int timeout_ms, int64_t *took) {
    int64_t t0 = tl_now_ms(), end = t0 + timeout_ms;
    baton_members m = { 0 };
    int ok = 0;
    for (;;) {
        if (co_members(g, &m) == 0 && listed(&m, id) == want) {
            ok = 1;
            break;
        }
        if (tl_now_ms() > end) break;
        tl_sleep_ms(50);
    }
    if (took) *took = tl_now_ms() - t0;
    baton_members_clear(&m);
    return ok;
}

void test_group_basic(void) {
    char n[256];
    co_name(n, sizeof n, "group-basic");
    baton_client *c = co_client();
    baton_group *g = group_on(c, n), *o = group_on(c, n);
    baton_members m = { 0 };
    CHECK(baton_group_id(g) == NULL);
    CHECK(baton_group_is_member(g) == 0);
    CHECK_RC(baton_group_leave(g), BATON_ENOTHELD);
    CHECK_RC(co_members(o, &m), 0);
    CHECK(m.n == 0);
    CHECK_RC(baton_group_join(g, "alpha", "10.0.0.1:80"), 0);
    CHECK(baton_group_is_member(g) == 1);
    CHECK(baton_group_id(g) && !strcmp(baton_group_id(g), "alpha"));
    CHECK_RC(baton_group_join(g, "beta", ""), BATON_EDEADLK);   /* a member already */
    int64_t dl = 0;
    CHECK_RC(baton_group_deadline(g, &dl), 0);
    CHECK(dl > 0);
    CHECK_RC(co_members(o, &m), 0);
    CHECK(m.n == 1 && !strcmp(members_str(&m), "alpha=10.0.0.1:80"));
    CHECK_RC(baton_group_leave(g), 0);
    CHECK(baton_group_is_member(g) == 0);
    CHECK_RC(baton_group_leave(g), BATON_ENOTHELD);
    CHECK_RC(co_members(o, &m), 0);
    CHECK(m.n == 0);
    /* a random id */
    CHECK_RC(baton_group_join(g, NULL, ""), 0);
    const char *id = baton_group_id(g);
    CHECK(id && *id && strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == strlen(id));
    CHECK_RC(co_members(o, &m), 0);
    CHECK(m.n == 1 && id && listed(&m, id) && !strcmp(m.members[0].value, ""));
    /* joins again after leaving, the same id */
    CHECK_RC(baton_group_leave(g), 0);
    CHECK_RC(baton_group_join(g, "alpha", "v2"), 0);
    CHECK_RC(co_members(o, &m), 0);
    CHECK(!strcmp(members_str(&m), "alpha=v2"));
    /* free leaves */
    baton_group_free(g);
    CHECK_RC(co_members(o, &m), 0);
    CHECK(m.n == 0);
    baton_members_clear(&m);
    baton_members_clear(&m);   /* safe twice */
    baton_group_free(o);
    baton_client_close(c);
}

void test_group_two_clients(void) {
    char n[256];
    co_name(n, sizeof n, "group-two");
    baton_client *c1 = co_client(), *c2 = co_client(), *c3 = co_client();
    baton_group *g1 = group_on(c1, n), *g2 = group_on(c2, n), *g3 = group_on(c3, n);
    baton_members m = { 0 };
    CHECK_RC(baton_group_join(g2, "node-b", "b:2"), 0);
    CHECK_RC(baton_group_join(g1, "node-a", "a:1"), 0);
    CHECK_RC(co_members(g1, &m), 0);
    CHECK(!strcmp(members_str(&m), "node-a=a:1,node-b=b:2"));   /* sorted by id */
    CHECK_RC(co_members(g2, &m), 0);
    CHECK(!strcmp(members_str(&m), "node-a=a:1,node-b=b:2"));
    /* a live member's id is taken */
    CHECK_RC(baton_group_join(g3, "node-a", "x"), BATON_ELOCKED);
    CHECK(baton_group_is_member(g3) == 0);
    CHECK_RC(co_members(g3, &m), 0);
    CHECK(!strcmp(members_str(&m), "node-a=a:1,node-b=b:2"));   /* unchanged */
    CHECK_RC(baton_group_leave(g1), 0);
    CHECK_RC(baton_group_join(g3, "node-a", "c:3"), 0);
    CHECK_RC(co_members(g2, &m), 0);
    CHECK(!strcmp(members_str(&m), "node-a=c:3,node-b=b:2"));
    baton_members_clear(&m);
    baton_group_free(g1);
    baton_group_free(g2);
    baton_group_free(g3);
    baton_client_close(c1);
    baton_client_close(c2);
    baton_client_close(c3);
}

typedef struct {
    baton_group *g;
    int64_t wait_ms;
    int rc;
    baton_members m;
} gwatch_arg;

static void *gwatch_main(void *p) {
    gwatch_arg *w = p;
    w->rc = co_group_watch(w->g, &w->m, w->wait_ms);
    return NULL;
}

static int group_cancel(void *g) { return baton_group_cancel(g); }

void test_group_watch(void) {
    char n[256];
    co_name(n, sizeof n, "group-watch");
    baton_client *c1 = co_client(), *c2 = co_client();
    baton_group *w = group_on(c1, n), *g = group_on(c2, n);
    baton_members m = { 0 };
    CHECK_RC(co_group_watch(w, &m, 5000), 0);   /* the first call answers at once */
    CHECK(m.n == 0);
    CHECK_RC(co_group_watch(w, &m, 300), BATON_ETIMEDOUT);
    /* a join from another client wakes it */
    gwatch_arg a = { w, 15000, -100, { 0 } };
    co_thread t;
    co_start(&t, gwatch_main, &a);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    CHECK_RC(baton_group_join(g, "m1", "v1"), 0);
    co_join(&t, 15000, group_cancel, w);
    CHECK_RC(a.rc, 0);
    CHECK(!strcmp(members_str(&a.m), "m1=v1"));
    /* and a leave */
    co_start(&t, gwatch_main, &a);
    tl_sleep_ms(200);
    CHECK_RC(baton_group_leave(g), 0);
    co_join(&t, 15000, group_cancel, w);
    CHECK_RC(a.rc, 0);
    CHECK(a.m.n == 0);
    /* a change made while nobody watched is reported by the next watch */
    CHECK_RC(baton_group_join(g, "m2", ""), 0);
    CHECK_RC(co_group_watch(w, &m, 10000), 0);
    CHECK(!strcmp(members_str(&m), "m2="));
    /* a member's own handle watches the others (a barrier does) */
    CHECK_RC(baton_group_leave(g), 0);
    CHECK_RC(baton_group_join(w, "self", ""), 0);
    CHECK_RC(co_group_watch(w, &m, 10000), 0);
    CHECK(!strcmp(members_str(&m), "self="));
    a.wait_ms = 15000;
    co_start(&t, gwatch_main, &a);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_group_join(g, "other", ""), 0);
    co_join(&t, 15000, group_cancel, w);
    CHECK_RC(a.rc, 0);
    CHECK(!strcmp(members_str(&a.m), "other=,self="));
    CHECK(tl_now_ms() - t0 < 10000);   /* woken by the join, not by the wait's end */
    CHECK_RC(baton_group_leave(w), 0);
    CHECK_RC(co_group_watch(w, &m, 10000), 0);   /* its own leave is a change */
    CHECK(!strcmp(members_str(&m), "other="));
    /* cancel */
    a.wait_ms = -1;
    co_start(&t, gwatch_main, &a);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    CHECK_RC(baton_group_cancel(w), 0);
    co_join(&t, 5000, NULL, NULL);
    CHECK_RC(a.rc, BATON_ECANCELED);
    baton_members_clear(&a.m);
    baton_members_clear(&m);
    baton_group_free(w);
    baton_group_free(g);
    baton_client_close(c1);
    baton_client_close(c2);
}

void test_group_closed_client(void) {
    char n[256];
    co_name(n, sizeof n, "group-closed");
    baton_client *c1 = co_client(), *c2 = co_client();
    baton_group *w = group_on(c1, n), *g = group_on(c2, n);
    CHECK_RC(baton_group_join(g, "leaving", ""), 0);
    CHECK(await_member(w, "leaving", 1, 1000, NULL));
    baton_client_close(c2);   /* releases what the client holds: the membership */
    CHECK(baton_group_is_member(g) == 0);
    int64_t took = 0;
    CHECK(await_member(w, "leaving", 0, 5000, &took));
    CHECK_RC(baton_group_leave(g), BATON_ECANCELED);   /* the client is closed */
    baton_group_free(g);
    baton_group_free(w);
    baton_client_close(c1);
}

static int spawn_member(tl_worker *wk, const char *name, const char *id) {
    char lease[16];
    snprintf(lease, sizeof lease, "%d", CO_LEASE_MS);
    char *argv[] = { "test_coord", "--worker", "member", g_uri, (char *)name, (char *)id, lease, NULL };
    if (tl_worker_spawn(wk, argv) != 0) return -1;
    char line[128];
    return tl_expect_line(wk, "JOINED", line, sizeof line, 20000);
}

void test_group_killed_member(void) {
    char n[256];
    co_name(n, sizeof n, "group-killed");
    baton_client *c = co_client();
    baton_group *w = group_on(c, n), *g = group_on(c, n);
    tl_worker wk;
    int ok = spawn_member(&wk, n, "victim") == 0;
    CHECK(ok);
    if (!ok) {
        tl_worker_reap(&wk, 1000);
        goto out;
    }
    CHECK(await_member(w, "victim", 1, 2000, NULL));
    CHECK_RC(baton_group_join(g, "victim", ""), BATON_ELOCKED);
    kill(wk.pid, SIGKILL);
    int st = tl_worker_reap(&wk, 10000);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    int64_t took = 0;
    int gone = await_member(w, "victim", 0, co_dead_bound_ms(), &took);
    CHECK(gone);
    fprintf(stderr, "   a SIGKILLed member %s after %lld ms (bound %d ms)\n", gone ? "left" : "was still listed",
            (long long)took, co_dead_bound_ms());
    /* its id is free again */
    CHECK_RC(baton_group_join(g, "victim", "new"), 0);
    CHECK_RC(baton_group_leave(g), 0);
out:
    baton_group_free(g);
    baton_group_free(w);
    baton_client_close(c);
}

void test_group_bad_ids(void) {
    char n[256];
    co_name(n, sizeof n, "group-bad");
    baton_client *c = co_client();
    baton_group *g = group_on(c, n);
    char id[BATON_MEMBER_ID_MAX + 2];
    static const char *const bad[] = { "", "a/b", "a b", "a:b", "caf\xc3\xa9", "a\nb", NULL };
    for (int i = 0; bad[i]; i++) {
        CHECK_RC(baton_group_join(g, bad[i], ""), BATON_EINVAL);
        CHECK(baton_group_is_member(g) == 0);
    }
    memset(id, 'x', sizeof id);
    id[BATON_MEMBER_ID_MAX + 1] = 0;   /* one byte too long */
    CHECK_RC(baton_group_join(g, id, ""), BATON_EINVAL);
    id[BATON_MEMBER_ID_MAX] = 0;       /* the longest */
    CHECK_RC(baton_group_join(g, id, "v"), 0);
    CHECK_RC(baton_group_leave(g), 0);
    char *val = malloc(BATON_MEMBER_VALUE_MAX + 2);
    if (!val) exit(1);
    memset(val, 'v', BATON_MEMBER_VALUE_MAX + 1);
    val[BATON_MEMBER_VALUE_MAX + 1] = 0;
    CHECK_RC(baton_group_join(g, "ok-id", val), BATON_EINVAL);
    val[BATON_MEMBER_VALUE_MAX] = 0;
    CHECK_RC(baton_group_join(g, "ok-id", val), 0);
    baton_members m = { 0 };
    CHECK_RC(co_members(g, &m), 0);
    CHECK(m.n == 1 && strlen(m.members[0].value) == BATON_MEMBER_VALUE_MAX);
    baton_members_clear(&m);
    CHECK_RC(baton_group_leave(g), 0);
    free(val);
    baton_group_free(g);
    baton_client_close(c);
}

/* ---- barrier ------------------------------------------------------------------- */

#define BAR_N 3

#define BAR_WAIT_MS 20000

typedef struct {
    const char *name;
    int idx;
    atomic_int *entering, *leaving;
    int enter_rc, leave_rc, entered_seen, left_seen;
    int64_t enter_ms, leave_ms;      /* how long each call took */
    _Atomic(baton_barrier *) b;      /* for a cancel from the test's thread */
} bar_arg;

static void *bar_main(void *p) {
    bar_arg *x = p;
    baton_client *c = co_client();
    baton_group_options o = BATON_GROUP_OPTIONS_INIT;
    o.lease_ms = CO_LEASE_MS;
    baton_barrier *b = NULL;
    x->enter_rc = x->leave_rc = -100;
    if (baton_barrier_open(&b, c, x->name, BAR_N, &o) != 0) goto out;
    atomic_store(&x->b, b);
    tl_sleep_ms(300 * x->idx);   /* arrive one by one */
    atomic_fetch_add(x->entering, 1);
    int64_t t0 = tl_now_ms();
    x->enter_rc = baton_barrier_enter(b, BAR_WAIT_MS);
    x->enter_ms = tl_now_ms() - t0;
    x->entered_seen = atomic_load(x->entering);
    tl_sleep_ms(200 * x->idx);   /* leave one by one */
    atomic_fetch_add(x->leaving, 1);
    t0 = tl_now_ms();
    x->leave_rc = baton_barrier_leave(b, BAR_WAIT_MS);
    x->leave_ms = tl_now_ms() - t0;
    x->left_seen = atomic_load(x->leaving);
    atomic_store(&x->b, NULL);
    baton_barrier_free(b);
out:
    baton_client_close(c);
    return NULL;
}

typedef struct {
    baton_barrier *b;
    int rc;
    int64_t ms;
} short_arg;

static void *short_main(void *p) {
    short_arg *x = p;
    int64_t t0 = tl_now_ms();
    x->rc = baton_barrier_enter(x->b, 500);
    x->ms = tl_now_ms() - t0;
    return NULL;
}

static int short_cancel(void *b) { return baton_barrier_cancel(b); }

static int bar_cancel(void *p) {
    baton_barrier *b = atomic_load(&((bar_arg *)p)->b);
    return b ? baton_barrier_cancel(b) : 0;
}

void test_barrier(void) {
    char n[256];
    co_name(n, sizeof n, "barrier");
    atomic_int entering, leaving;
    atomic_init(&entering, 0);
    atomic_init(&leaving, 0);
    bar_arg a[BAR_N];
    co_thread t[BAR_N];
    for (int i = 0; i < BAR_N; i++) {
        memset(&a[i], 0, sizeof a[i]);
        a[i] = (bar_arg){ .name = n, .idx = i, .entering = &entering, .leaving = &leaving };
        atomic_init(&a[i].b, NULL);
        co_start(&t[i], bar_main, &a[i]);
    }
    for (int i = 0; i < BAR_N; i++) co_join(&t[i], 2 * BAR_WAIT_MS + 10000, bar_cancel, &a[i]);
    for (int i = 0; i < BAR_N; i++) {
        CHECK_RC(a[i].enter_rc, 0);
        CHECK(a[i].entered_seen == BAR_N);   /* nobody proceeded before the last came */
        CHECK_RC(a[i].leave_rc, 0);
        CHECK(a[i].left_seen == BAR_N);      /* nobody left before the last went */
        /* woken when the last came or went, not at the end of the wait */
        CHECK(a[i].enter_ms < BAR_WAIT_MS && a[i].leave_ms < BAR_WAIT_MS);
        if (a[i].enter_ms >= BAR_WAIT_MS || a[i].leave_ms >= BAR_WAIT_MS)
            fprintf(stderr, "   member %d: enter %d after %lld ms, leave %d after %lld ms\n", i, a[i].enter_rc,
                    (long long)a[i].enter_ms, a[i].leave_rc, (long long)a[i].leave_ms);
    }
    /* too few: the wait runs out and the entry is withdrawn */
    char n2[256];
    co_name(n2, sizeof n2, "barrier-short");
    baton_client *c = co_client();
    baton_barrier *b = NULL;
    baton_group_options o = BATON_GROUP_OPTIONS_INIT;
    o.lease_ms = CO_LEASE_MS;
    MUST(baton_barrier_open(&b, c, n2, 2, &o));
    short_arg sa = { b, -100, 0 };
    co_thread st;
    co_start(&st, short_main, &sa);
    if (!co_wait(&st, 500 + 5000)) fprintf(stderr, "   a barrier's enter(500) is still waiting after 5.5 s\n");
    co_join(&st, 0, short_cancel, b);
    CHECK_RC(sa.rc, BATON_ETIMEDOUT);
    CHECK(sa.ms < 500 + 5000);   /* the wait is bounded */
    baton_barrier_free(b);
    baton_client_close(c);
}

/* ---- queues ---------------------------------------------------------------------- */

static baton_queue *queue_on(baton_client *c, const char *name) {
    baton_queue_options o = BATON_QUEUE_OPTIONS_INIT;
    o.lease_ms = CO_LEASE_MS;
    baton_queue *q = NULL;
    MUST(baton_queue_open(&q, c, name, &o));
    return q;
}

static int item_is(baton_queue_item *it, const char *want) {
    size_t len = 0;
    const char *d = it ? baton_queue_item_data(it, &len) : NULL;
    return d && len == strlen(want) && !strcmp(d, want);
}

void test_queue_fifo(void) {
    char n[256];
    co_name(n, sizeof n, "queue-fifo");
    baton_client *c1 = co_client(), *c2 = co_client();
    baton_queue *q = queue_on(c1, n), *p = queue_on(c2, n);
    baton_queue_item *it = NULL;
    CHECK_RC(baton_queue_take(q, &it, 0), BATON_ENOENT);
    CHECK(it == NULL);
    CHECK_RC(baton_queue_put(p, "first", 5), 0);
    CHECK_RC(baton_queue_put(p, "second", 6), 0);
    CHECK_RC(baton_queue_put(q, "third", 5), 0);
    uint64_t waiting = 0;
    int rc = baton_queue_size(p, &waiting);
    CHECK(rc == 0 || rc == BATON_ENOTSUP);
    if (rc == 0) CHECK(waiting == 3);
    uint64_t last = 0;
    static const char *const want[] = { "first", "second", "third" };
    for (int i = 0; i < 3; i++) {
        CHECK_RC(baton_queue_take(q, &it, 0), 0);
        CHECK(item_is(it, want[i]));
        CHECK(baton_queue_item_held(it) == 1);
        uint64_t f = it ? baton_queue_item_fence(it) : 0;
        CHECK(f > last);
        last = f;
        int64_t dl = 0;
        if (it) CHECK_RC(baton_queue_item_deadline(it, &dl), 0);
        if (i == 0 && rc == 0) {
            CHECK_RC(baton_queue_size(p, &waiting), 0);
            CHECK(waiting == 2);   /* a taken item is not waiting */
        }
        if (it) CHECK_RC(baton_queue_done(it), 0);
        it = NULL;
    }
    CHECK_RC(baton_queue_take(p, &it, 0), BATON_ENOENT);
    if (rc == 0) {
        CHECK_RC(baton_queue_size(q, &waiting), 0);
        CHECK(waiting == 0);
    }
    baton_queue_free(q);
    baton_queue_free(p);
    baton_client_close(c1);
    baton_client_close(c2);
}

typedef struct {
    baton_queue *q;
    int64_t wait_ms;
    int rc;
    baton_queue_item *it;
} take_arg;

static void *take_main(void *p) {
    take_arg *a = p;
    a->rc = baton_queue_take(a->q, &a->it, a->wait_ms);
    return NULL;
}

static int queue_cancel(void *q) { return baton_queue_cancel(q); }

void test_queue_wait_put(void) {
    char n[256];
    co_name(n, sizeof n, "queue-wait");
    baton_client *c1 = co_client(), *c2 = co_client();
    baton_queue *q = queue_on(c1, n), *p = queue_on(c2, n);
    baton_queue_item *it = NULL;
    CHECK_RC(baton_queue_take(q, &it, 300), BATON_ETIMEDOUT);
    /* a waiting take is woken by a put from another client */
    take_arg a = { q, 15000, -100, NULL };
    co_thread t;
    co_start(&t, take_main, &a);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    CHECK_RC(baton_queue_put(p, "wake", 4), 0);
    co_join(&t, 15000, queue_cancel, q);
    CHECK_RC(a.rc, 0);
    CHECK(item_is(a.it, "wake"));
    if (a.it) CHECK_RC(baton_queue_done(a.it), 0);
    /* cancel */
    a = (take_arg){ q, -1, -100, NULL };
    co_start(&t, take_main, &a);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    CHECK_RC(baton_queue_cancel(q), 0);
    co_join(&t, 5000, NULL, NULL);
    CHECK_RC(a.rc, BATON_ECANCELED);
    CHECK(a.it == NULL);
    baton_queue_free(q);
    baton_queue_free(p);
    baton_client_close(c1);
    baton_client_close(c2);
}

void test_queue_return_done(void) {
    char n[256];
    co_name(n, sizeof n, "queue-return");
    baton_client *c1 = co_client(), *c2 = co_client();
    baton_queue *q = queue_on(c1, n), *p = queue_on(c2, n);
    baton_queue_item *a = NULL, *b = NULL;
    CHECK_RC(baton_queue_put(p, "only", 4), 0);
    CHECK_RC(baton_queue_take(q, &a, 0), 0);
    uint64_t fa = a ? baton_queue_item_fence(a) : 0;
    /* held by a live taker: nobody else gets it */
    CHECK_RC(baton_queue_take(p, &b, 0), BATON_ENOENT);
    CHECK_RC(baton_queue_take(p, &b, 300), BATON_ETIMEDOUT);
    /* given back: taken again at once, with a new fence */
    if (a) CHECK_RC(baton_queue_return(a), 0);
    CHECK_RC(baton_queue_take(p, &b, 0), 0);
    CHECK(item_is(b, "only"));
    CHECK(b && baton_queue_item_fence(b) > fa);
    /* freeing an item neither done nor returned gives it back */
    if (b) baton_queue_item_free(b);
    b = NULL;
    CHECK_RC(baton_queue_take(q, &a, 5000), 0);
    CHECK(item_is(a, "only"));
    /* done removes it for good */
    if (a) CHECK_RC(baton_queue_done(a), 0);
    CHECK_RC(baton_queue_take(p, &b, 0), BATON_ENOENT);
    CHECK_RC(baton_queue_take(p, &b, 300), BATON_ETIMEDOUT);
    /* an item outlives its queue handle */
    CHECK_RC(baton_queue_put(p, "later", 5), 0);
    CHECK_RC(baton_queue_take(q, &a, 0), 0);
    baton_queue_free(q);
    CHECK(item_is(a, "later"));
    if (a) CHECK_RC(baton_queue_done(a), 0);
    CHECK_RC(baton_queue_take(p, &b, 0), BATON_ENOENT);
    baton_queue_free(p);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* N takers x M items, concurrently with the puts: every item done exactly
 * once, never held by two takers at once (an owner per item, set at take
 * and cleared before the item is given back or done). */
#define QC_TAKERS 4
#define QC_ITEMS 60

typedef struct {
    const char *name;
    int idx;
    atomic_int *owner;            /* [QC_ITEMS]: taker + 1, 0 = nobody */
    atomic_int *done;             /* [QC_ITEMS] */
    atomic_int *done_total;
    atomic_int *overlaps;
    int errors, takes, returns, fence_back;
} qc_arg;

static void *qc_taker(void *p) {
    qc_arg *x = p;
    baton_client *c = co_client();
    baton_queue *q = queue_on(c, x->name);
    uint64_t last = 0;
    int64_t end = tl_now_ms() + 90000;
    while (atomic_load(x->done_total) < QC_ITEMS && tl_now_ms() < end) {
        baton_queue_item *it = NULL;
        int rc = baton_queue_take(q, &it, 1000);
        if (rc == BATON_ETIMEDOUT || rc == BATON_ENOENT) continue;
        if (rc != 0) {
            if (x->errors++ < 3) fprintf(stderr, "   taker %d: take %d (%s)\n", x->idx, rc, baton_strerror(rc));
            tl_sleep_ms(50);
            continue;
        }
        x->takes++;
        uint64_t f = baton_queue_item_fence(it);
        if (f <= last) x->fence_back++;
        last = f;
        int k = atoi(baton_queue_item_data(it, NULL) + 5);   /* "item-K" */
        if (k < 0 || k >= QC_ITEMS) {
            x->errors++;
            baton_queue_item_free(it);
            continue;
        }
        int none = 0;
        if (!atomic_compare_exchange_strong(&x->owner[k], &none, x->idx + 1)) atomic_fetch_add(x->overlaps, 1);
        tl_sleep_ms(1);
        if (!baton_queue_item_held(it)) x->errors++;
        atomic_store(&x->owner[k], 0);
        if (x->takes % 7 == 0) {
            x->returns++;
            if (baton_queue_return(it) != 0) x->errors++;
            continue;
        }
        if ((rc = baton_queue_done(it)) != 0) {
            if (x->errors++ < 3) fprintf(stderr, "   taker %d: done %d (%s)\n", x->idx, rc, baton_strerror(rc));
            continue;
        }
        atomic_fetch_add(&x->done[k], 1);
        atomic_fetch_add(x->done_total, 1);
    }
    baton_queue_free(q);
    baton_client_close(c);
    return NULL;
}

void test_queue_concurrent(void) {
    char n[256];
    co_name(n, sizeof n, "queue-many");
    static atomic_int owner[QC_ITEMS], done[QC_ITEMS];
    atomic_int done_total, overlaps;
    atomic_init(&done_total, 0);
    atomic_init(&overlaps, 0);
    for (int i = 0; i < QC_ITEMS; i++) {
        atomic_init(&owner[i], 0);
        atomic_init(&done[i], 0);
    }
    qc_arg a[QC_TAKERS];
    co_thread t[QC_TAKERS];
    for (int i = 0; i < QC_TAKERS; i++) {
        a[i] = (qc_arg){ n, i, owner, done, &done_total, &overlaps, 0, 0, 0, 0 };
        co_start(&t[i], qc_taker, &a[i]);
    }
    baton_client *c = co_client();
    baton_queue *q = queue_on(c, n);
    int put_errors = 0;
    for (int i = 0; i < QC_ITEMS; i++) {
        char s[32];
        int len = snprintf(s, sizeof s, "item-%d", i);
        if (baton_queue_put(q, s, (size_t)len) != 0) put_errors++;
        if (i % 10 == 9) tl_sleep_ms(20);
    }
    CHECK(put_errors == 0);
    int errors = 0, takes = 0, returns = 0, backs = 0;
    for (int i = 0; i < QC_TAKERS; i++) {
        co_join(&t[i], 100000, NULL, NULL);
        errors += a[i].errors;
        takes += a[i].takes;
        returns += a[i].returns;
        backs += a[i].fence_back;
    }
    int once = 1;
    for (int i = 0; i < QC_ITEMS; i++)
        if (atomic_load(&done[i]) != 1) {
            once = 0;
            fprintf(stderr, "   item %d done %d times\n", i, atomic_load(&done[i]));
        }
    CHECK(errors == 0);
    CHECK(atomic_load(&overlaps) == 0);
    CHECK(once);
    CHECK(backs == 0);   /* each taker's fences rise */
    CHECK(takes == QC_ITEMS + returns);
    fprintf(stderr, "   %d items, %d takers: %d takes, %d returns, %d overlaps\n", QC_ITEMS, QC_TAKERS, takes,
            returns, atomic_load(&overlaps));
    baton_queue_item *it = NULL;
    CHECK_RC(baton_queue_take(q, &it, 0), BATON_ENOENT);
    baton_queue_free(q);
    baton_client_close(c);
}

static int spawn_taker(tl_worker *wk, const char *name, uint32_t lease_ms, uint64_t *fence, char *data, size_t n) {
    char lease[16];
    snprintf(lease, sizeof lease, "%u", lease_ms);
    char *argv[] = { "test_coord", "--worker", "take", g_uri, (char *)name, lease, NULL };
    if (tl_worker_spawn(wk, argv) != 0) return -1;
    char line[256];
    if (tl_expect_line(wk, "TAKEN ", line, sizeof line, 20000) != 0) return -1;
    unsigned long long f = 0;
    char d[128] = "";
    if (sscanf(line, "TAKEN %llu %127s", &f, d) != 2) return -1;
    *fence = f;
    snprintf(data, n, "%s", d);
    return 0;
}

void test_queue_killed_taker(void) {
    char n[256];
    co_name(n, sizeof n, "queue-killed");
    baton_client *c = co_client();
    baton_queue *q = queue_on(c, n);
    CHECK_RC(baton_queue_put(q, "precious", 8), 0);
    tl_worker wk;
    uint64_t fw = 0;
    char data[128];
    int ok = spawn_taker(&wk, n, CO_LEASE_MS, &fw, data, sizeof data) == 0;
    CHECK(ok);
    if (!ok) {
        tl_worker_reap(&wk, 1000);
        goto out;
    }
    CHECK(!strcmp(data, "precious"));
    baton_queue_item *it = NULL;
    CHECK_RC(baton_queue_take(q, &it, 0), BATON_ENOENT);   /* held by the worker */
    kill(wk.pid, SIGKILL);
    int st = tl_worker_reap(&wk, 10000);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_queue_take(q, &it, co_dead_bound_ms()), 0);
    fprintf(stderr, "   a SIGKILLed taker's item came back after %lld ms (bound %d ms)\n",
            (long long)(tl_now_ms() - t0), co_dead_bound_ms());
    CHECK(item_is(it, "precious"));
    CHECK(it && baton_queue_item_fence(it) > fw);
    if (it) CHECK_RC(baton_queue_done(it), 0);
out:
    baton_queue_free(q);
    baton_client_close(c);
}

/* A taker stopped past its lease (or session) loses its item to another
 * taker; resumed, it is told (on_lost) and its done is refused. The file
 * engine's items are held by a lock of the taker's process, which a stopped
 * process keeps: not run there. (The SQL engines keep takers in lease rows
 * in every mode.) */
void test_queue_item_lost(void) {
    if (!strcmp(g_backend, "file")) {
        fprintf(stderr, "   skipped: a stopped taker keeps its item on %s\n", g_backend);
        return;
    }
    char n[256];
    co_name(n, sizeof n, "queue-lost");
    baton_client *c = co_client();
    baton_queue *q = queue_on(c, n);
    CHECK_RC(baton_queue_put(q, "fragile", 7), 0);
    tl_worker wk;
    uint64_t fw = 0;
    char data[128], line[128];
    int ok = spawn_taker(&wk, n, CO_LEASE_MS, &fw, data, sizeof data) == 0;
    CHECK(ok);
    if (!ok) {
        tl_worker_reap(&wk, 1000);
        goto out;
    }
    kill(wk.pid, SIGSTOP);
    baton_queue_item *it = NULL;
    CHECK_RC(baton_queue_take(q, &it, co_dead_bound_ms()), 0);
    CHECK(item_is(it, "fragile"));
    CHECK(it && baton_queue_item_fence(it) > fw);
    tl_sleep_ms(300);
    kill(wk.pid, SIGCONT);
    int got = tl_read_line(wk.from, line, sizeof line, co_dead_bound_ms());
    CHECK(got >= 0 && !strcmp(line, "LOST"));
    tl_send_line(&wk, "HELD?\n");
    CHECK(tl_expect_line(&wk, "HELD? 0", line, sizeof line, 5000) == 0);
    tl_send_line(&wk, "DONE\n");
    char want[32];
    snprintf(want, sizeof want, "DONE %d", BATON_ELOST);
    CHECK(tl_expect_line(&wk, want, line, sizeof line, 10000) == 0);
    /* the stale taker's done did not remove the item from its new taker */
    CHECK(it && baton_queue_item_held(it) == 1);
    if (it) CHECK_RC(baton_queue_done(it), 0);
    close(wk.to);
    wk.to = -1;
    CHECK(tl_exited_ok(tl_worker_reap(&wk, 10000)));
    it = NULL;
    CHECK_RC(baton_queue_take(q, &it, 0), BATON_ENOENT);
out:
    baton_queue_free(q);
    baton_client_close(c);
}

void test_queue_bad(void) {
    char n[256];
    co_name(n, sizeof n, "queue-bad");
    baton_client *c = co_client();
    baton_queue *q = queue_on(c, n);
    char *big = malloc(BATON_QUEUE_ITEM_MAX + 1);
    if (!big) exit(1);
    for (size_t i = 0; i < BATON_QUEUE_ITEM_MAX + 1; i++) big[i] = (char)('A' + i % 26);
    CHECK_RC(baton_queue_put(q, "", 0), BATON_EINVAL);
    CHECK_RC(baton_queue_put(q, big, BATON_QUEUE_ITEM_MAX + 1), BATON_EINVAL);
    baton_queue_item *it = NULL;
    CHECK_RC(baton_queue_take(q, &it, 0), BATON_ENOENT);
    /* binary bytes and the largest item round trip */
    static const char bin[] = { 'q', 0, '\n', (char)0xfe };
    CHECK_RC(baton_queue_put(q, bin, sizeof bin), 0);
    CHECK_RC(baton_queue_put(q, big, BATON_QUEUE_ITEM_MAX), 0);
    size_t len = 0;
    CHECK_RC(baton_queue_take(q, &it, 0), 0);
    const char *d = it ? baton_queue_item_data(it, &len) : NULL;
    CHECK(d && len == sizeof bin && !memcmp(d, bin, sizeof bin) && d[len] == 0);
    if (it) CHECK_RC(baton_queue_done(it), 0);
    CHECK_RC(baton_queue_take(q, &it, 0), 0);
    d = it ? baton_queue_item_data(it, &len) : NULL;
    CHECK(d && len == BATON_QUEUE_ITEM_MAX && !memcmp(d, big, len));
    if (it) CHECK_RC(baton_queue_done(it), 0);
    free(big);
    baton_queue_free(q);
    baton_client_close(c);
}
