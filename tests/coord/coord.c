/*
 * The coordination conformance suite (issue 24): values, counters, latches,
 * groups, barriers and queues, one binary run by ctest once per engine, as
 * tests/conformance is for locks.
 *
 *   test_coord URI
 *
 * "{port}" in URI is the port of the test server of its scheme's engine
 * (tl_uri_with_port); a missing server is a skip (77) unless
 * BATON_REQUIRE_ALL=1.
 *
 * What runs is what the engine's description says it has
 * (baton_engine_find(scheme)->primitives): a family the engine lacks must be
 * refused by its _open call with BATON_ENOTSUP (and a NULL handle); a family
 * it has must pass every case. So the suite passes on an engine before its
 * tables land, and grows with them.
 *
 * Leases are short (CO_LEASE_MS) and every wait is bounded; the cases
 * assert outcomes (who won, what was seen, what is left), not speed.
 *
 * Worker modes (the suite re-executes /proc/self/exe; it is threaded, so it
 * never forks without exec):
 *   test_coord --worker member URI NAME ID LEASE_MS   joins, says JOINED
 *   test_coord --worker take URI NAME LEASE_MS        takes, says TAKEN ...
 */
#include "coord.h"

#include <signal.h>
#include <string.h>

char g_uri[1024];
char g_prefix[128];
const char *g_backend = "";
unsigned g_prims;
static int64_t g_t0;
int g_leases, g_session_ms, g_conn_session;

/* The summary line, this file's CHECKs and families.c's together. */
static int co_finish(void) {
    int fp = 0, ff = 0;
    families_totals(&fp, &ff);
    th_passed += fp;
    th_failed += ff;
    return th_finish();
}

/* ---- threads ------------------------------------------------------------- */

static void *co_main(void *p) {
    co_thread *t = p;
    t->fn(t->arg);
    atomic_store(&t->done, 1);
    return NULL;
}

void co_start(co_thread *t, void *(*fn)(void *), void *arg) {
    t->fn = fn;
    t->arg = arg;
    atomic_init(&t->done, 0);
    pthread_create(&t->th, NULL, co_main, t);
}

int co_wait(co_thread *t, int timeout_ms) {
    int64_t end = tl_now_ms() + timeout_ms;
    while (!atomic_load(&t->done) && tl_now_ms() < end) tl_sleep_ms(5);
    return atomic_load(&t->done);
}

void co_join(co_thread *t, int timeout_ms, int (*cancel)(void *), void *carg) {
    if (!co_wait(t, timeout_ms)) {
        fprintf(stderr, "   a thread is still blocked after %d ms: cancelling it\n", timeout_ms);
        th_failed++;
        if (cancel) cancel(carg);
        if (!co_wait(t, 5000)) {
            fprintf(stderr, "FATAL: a blocked call ignores cancel; giving up\n");
            co_finish();
            exit(1);
        }
    }
    pthread_join(t->th, NULL);
}

/* ---- families the engine does not have ------------------------------------ */

static void test_enotsup(void) {
    char n[256];
    co_name(n, sizeof n, "enotsup");
    baton_client *c = co_client();
    if (!(g_prims & BATON_PRIM_VALUE)) {
        baton_value *v = (baton_value *)1;
        CHECK_RC(baton_value_open(&v, c, n), BATON_ENOTSUP);
        CHECK(v == NULL);
        baton_counter *k = (baton_counter *)1;
        CHECK_RC(baton_counter_open(&k, c, n), BATON_ENOTSUP);
        CHECK(k == NULL);
    }
    if (!(g_prims & BATON_PRIM_LATCH)) {
        baton_latch *l = (baton_latch *)1;
        CHECK_RC(baton_latch_open(&l, c, n), BATON_ENOTSUP);
        CHECK(l == NULL);
    }
    if (!(g_prims & BATON_PRIM_GROUP)) {
        baton_group *g = (baton_group *)1;
        CHECK_RC(baton_group_open(&g, c, n, NULL), BATON_ENOTSUP);
        CHECK(g == NULL);
    }
    if (!(g_prims & BATON_PRIM_GROUP) || !(g_prims & BATON_PRIM_VALUE)) {
        baton_barrier *b = (baton_barrier *)1;
        CHECK_RC(baton_barrier_open(&b, c, n, 2, NULL), BATON_ENOTSUP);
        CHECK(b == NULL);
    }
    if (!(g_prims & BATON_PRIM_QUEUE)) {
        baton_queue *q = (baton_queue *)1;
        CHECK_RC(baton_queue_open(&q, c, n, NULL), BATON_ENOTSUP);
        CHECK(q == NULL);
    }
    baton_client_close(c);
}

/* ---- values --------------------------------------------------------------- */

static baton_value *value_on(baton_client *c, const char *name) {
    baton_value *v = NULL;
    MUST(baton_value_open(&v, c, name));
    return v;
}

static int data_is(const baton_value_data *d, const void *want, size_t len) {
    return d->data && d->len == len && !memcmp(d->data, want, len) && d->data[len] == 0;
}

static void test_value_basic(void) {
    char n[256];
    co_name(n, sizeof n, "value-basic");
    baton_client *c1 = co_client(), *c2 = co_client();
    baton_value *a = value_on(c1, n), *b = value_on(c2, n);
    CHECK(!strcmp(baton_value_name(a), n));
    baton_value_data junk = { (char *)1, 7, 7 }, d = { 0 };
    CHECK_RC(baton_value_get(a, &junk), BATON_ENOENT);   /* zeroed, never freed */
    CHECK(junk.data == NULL && junk.len == 0 && junk.version == 0);
    /* binary data, NULs included, round trip through another client */
    static const char bin[] = { 'a', 0, 'b', '\n', (char)0xff, 0, 'z' };
    uint64_t v1 = 0, v2 = 0, v3 = 0;
    CHECK_RC(baton_value_set(a, bin, sizeof bin, BATON_VALUE_ANY, &v1), 0);
    CHECK(v1 > 0);
    CHECK_RC(co_value_get(b, &d), 0);
    CHECK(data_is(&d, bin, sizeof bin));
    CHECK(d.version == v1);
    /* the empty value is present: data "" and a version */
    CHECK_RC(baton_value_set(b, "", 0, BATON_VALUE_ANY, &v2), 0);
    CHECK(v2 > v1);
    CHECK_RC(co_value_get(a, &d), 0);
    CHECK(d.data != NULL && d.len == 0 && d.version == v2);
    /* a NULL version pointer is allowed */
    CHECK_RC(baton_value_set(a, "x", 1, BATON_VALUE_ANY, NULL), 0);
    CHECK_RC(co_value_get(a, &d), 0);
    CHECK(data_is(&d, "x", 1) && d.version > v2);
    v3 = d.version;
    /* delete, then absent; re-created with a larger version */
    CHECK_RC(baton_value_delete(b, BATON_VALUE_ANY), 0);
    CHECK_RC(co_value_get(a, &d), BATON_ENOENT);
    CHECK(d.data == NULL && d.version == 0);
    CHECK_RC(baton_value_delete(b, BATON_VALUE_ANY), BATON_ENOENT);
    uint64_t v4 = 0;
    CHECK_RC(baton_value_set(a, "again", 5, 0, &v4), 0);
    CHECK(v4 > v3);
    CHECK_RC(co_value_get(b, &d), 0);
    CHECK(data_is(&d, "again", 5) && d.version == v4);
    /* versions keep rising, set after set */
    uint64_t last = v4;
    int rising = 1;
    for (int i = 0; i < 10; i++) {
        uint64_t v = 0;
        char s[16];
        int len = snprintf(s, sizeof s, "%d", i);
        if (baton_value_set(i % 2 ? a : b, s, (size_t)len, BATON_VALUE_ANY, &v) != 0 || v <= last) rising = 0;
        last = v;
    }
    CHECK(rising);
    /* the value namespace does not meet the lock namespace */
    baton_lock *l = NULL;
    MUST(baton_lock_open(&l, c1, n, NULL));
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    CHECK_RC(co_value_get(b, &d), 0);
    CHECK(d.version == last);
    CHECK_RC(baton_lock_release(l), 0);
    baton_lock_free(l);
    CHECK_RC(baton_value_delete(a, BATON_VALUE_ANY), 0);
    baton_value_data_clear(&d);
    baton_value_data_clear(&d);   /* safe twice */
    baton_value_free(a);
    baton_value_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_value_cas(void) {
    char n[256];
    co_name(n, sizeof n, "value-cas");
    baton_client *c1 = co_client(), *c2 = co_client();
    baton_value *a = value_on(c1, n), *b = value_on(c2, n);
    baton_value_data d = { 0 };
    uint64_t v1 = 0, v2 = 0, x = 0;
    CHECK_RC(baton_value_set(a, "one", 3, 0, &v1), 0);      /* create */
    CHECK_RC(baton_value_set(b, "two", 3, 0, &x), BATON_ECONFLICT);  /* exists */
    CHECK_RC(baton_value_set(b, "two", 3, v1 + 1000, &x), BATON_ECONFLICT);
    CHECK_RC(co_value_get(a, &d), 0);
    CHECK(data_is(&d, "one", 3) && d.version == v1);   /* nothing changed */
    CHECK_RC(baton_value_set(b, "two", 3, v1, &v2), 0);
    CHECK(v2 > v1);
    CHECK_RC(baton_value_set(a, "three", 5, v1, &x), BATON_ECONFLICT);   /* stale */
    CHECK_RC(co_value_get(a, &d), 0);
    CHECK(data_is(&d, "two", 3) && d.version == v2);
    /* delete with expect */
    CHECK_RC(baton_value_delete(a, v1), BATON_ECONFLICT);
    CHECK_RC(co_value_get(b, &d), 0);
    CHECK(d.version == v2);
    CHECK_RC(baton_value_delete(a, v2), 0);
    CHECK_RC(baton_value_delete(a, v2), BATON_ENOENT);
    /* a compare-and-set on an absent value with a version fails */
    CHECK_RC(baton_value_set(b, "four", 4, v2, &x), BATON_ECONFLICT);
    CHECK_RC(co_value_get(b, &d), BATON_ENOENT);
    baton_value_data_clear(&d);
    baton_value_free(a);
    baton_value_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* N threads, a client each, compare-and-set from one version per round:
 * exactly one wins. */
#define CAS_THREADS 4
#define CAS_ROUNDS 6

typedef struct {
    baton_value *v;
    int idx;
    uint64_t expect;
    int rc;
    pthread_barrier_t *bar;
} cas_arg;

static void *cas_main(void *p) {
    cas_arg *x = p;
    char s[32];
    int len = snprintf(s, sizeof s, "t%d", x->idx);
    pthread_barrier_wait(x->bar);
    x->rc = baton_value_set(x->v, s, (size_t)len, x->expect, NULL);
    return NULL;
}

static void test_value_cas_race(void) {
    char n[256];
    co_name(n, sizeof n, "value-cas-race");
    baton_client *c[CAS_THREADS];
    baton_value *v[CAS_THREADS];
    for (int i = 0; i < CAS_THREADS; i++) {
        c[i] = co_client();
        v[i] = value_on(c[i], n);
    }
    uint64_t ver = 0;
    MUST(baton_value_set(v[0], "start", 5, BATON_VALUE_ANY, &ver));
    int one_winner = 1, others_conflict = 1, winner_stored = 1;
    for (int r = 0; r < CAS_ROUNDS; r++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, CAS_THREADS);
        cas_arg args[CAS_THREADS];
        pthread_t th[CAS_THREADS];
        /* round 0 creates (expect 0 on an absent value): one creator wins */
        if (r == 0) MUST(baton_value_delete(v[0], BATON_VALUE_ANY));
        for (int i = 0; i < CAS_THREADS; i++) {
            args[i] = (cas_arg){ v[i], i, r == 0 ? 0 : ver, 0, &bar };
            pthread_create(&th[i], NULL, cas_main, &args[i]);
        }
        int wins = 0, w = -1;
        for (int i = 0; i < CAS_THREADS; i++) {
            pthread_join(th[i], NULL);
            if (args[i].rc == 0) wins++, w = i;
            else if (args[i].rc != BATON_ECONFLICT) {
                others_conflict = 0;
                fprintf(stderr, "   round %d thread %d: %d (%s)\n", r, i, args[i].rc, baton_strerror(args[i].rc));
            }
        }
        pthread_barrier_destroy(&bar);
        if (wins != 1) {
            one_winner = 0;
            fprintf(stderr, "   round %d: %d winners\n", r, wins);
        }
        baton_value_data d = { 0 };
        if (co_value_get(v[0], &d) != 0) {
            winner_stored = 0;
            continue;
        }
        char s[32];
        snprintf(s, sizeof s, "t%d", w);
        if (wins == 1 && (!d.data || strcmp(d.data, s) != 0)) winner_stored = 0;
        ver = d.version;
        baton_value_data_clear(&d);
    }
    CHECK(one_winner);
    CHECK(others_conflict);
    CHECK(winner_stored);
    for (int i = 0; i < CAS_THREADS; i++) {
        baton_value_free(v[i]);
        baton_client_close(c[i]);
    }
}

typedef struct {
    baton_value *v;
    uint64_t known;
    int64_t wait_ms;
    int rc;
    baton_value_data d;
} watch_arg;

static void *watch_main(void *p) {
    watch_arg *w = p;
    w->rc = co_value_watch(w->v, w->known, &w->d, w->wait_ms);
    return NULL;
}

static int value_cancel(void *v) { return baton_value_cancel(v); }

static void test_value_watch(void) {
    char n[256];
    co_name(n, sizeof n, "value-watch");
    baton_client *c1 = co_client(), *c2 = co_client();
    baton_value *a = value_on(c1, n), *b = value_on(c2, n);
    baton_value_data d = { 0 };
    uint64_t v1 = 0, v2 = 0;
    /* absent and known absent: times out */
    CHECK_RC(co_value_watch(a, 0, &d, 300), BATON_ETIMEDOUT);
    MUST(baton_value_set(b, "w1", 2, BATON_VALUE_ANY, &v1));
    /* a known version that is not the current one answers at once */
    CHECK_RC(co_value_watch(a, 0, &d, 5000), 0);
    CHECK(data_is(&d, "w1", 2) && d.version == v1);
    CHECK_RC(co_value_watch(a, v1, &d, 300), BATON_ETIMEDOUT);
    /* a blocked watch is woken by a set from another client */
    watch_arg w = { a, v1, 15000, -100, { 0 } };
    co_thread t;
    co_start(&t, watch_main, &w);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    MUST(baton_value_set(b, "w2", 2, BATON_VALUE_ANY, &v2));
    co_join(&t, 15000, value_cancel, a);
    CHECK_RC(w.rc, 0);
    CHECK(data_is(&w.d, "w2", 2) && w.d.version == v2);
    baton_value_data_clear(&w.d);
    /* ... and by a delete: version 0, no data */
    w = (watch_arg){ a, v2, 15000, -100, { 0 } };
    co_start(&t, watch_main, &w);
    tl_sleep_ms(200);
    MUST(baton_value_delete(b, BATON_VALUE_ANY));
    co_join(&t, 15000, value_cancel, a);
    CHECK_RC(w.rc, 0);
    CHECK(w.d.version == 0 && w.d.data == NULL);
    /* cancel wakes a watch that would wait forever */
    w = (watch_arg){ a, 0, -1, -100, { 0 } };
    co_start(&t, watch_main, &w);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    CHECK_RC(baton_value_cancel(a), 0);
    co_join(&t, 5000, NULL, NULL);
    CHECK_RC(w.rc, BATON_ECANCELED);
    /* a cancel with no watch in flight is kept for the next one */
    CHECK_RC(baton_value_cancel(a), 0);
    CHECK_RC(co_value_watch(a, 0, &d, 5000), BATON_ECANCELED);
    CHECK_RC(co_value_watch(a, 0, &d, 200), BATON_ETIMEDOUT);
    baton_value_data_clear(&d);
    baton_value_free(a);
    baton_value_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* A watch never misses the last value: after a burst of sets from another
 * client, every watcher (a thread and a client each) ends on the final
 * value; the versions it saw rise. */
#define BURST_WATCHERS 4
#define BURST_SETS 200

typedef struct {
    const char *name;
    uint64_t final_version;      /* 0 until the burst is over */
    atomic_ullong final_v;
    int ended_on_final, rising, errors, seen;
    char last[64];
    atomic_int ready;
} burst_arg;

static void *burst_watcher(void *p) {
    burst_arg *x = p;
    baton_client *c = co_client();
    baton_value *v = value_on(c, x->name);
    uint64_t known = 0;
    baton_value_data d = { 0 };
    x->rising = 1;
    int rc = co_value_get(v, &d);
    if (rc == 0) known = d.version;
    atomic_store(&x->ready, 1);
    int64_t end = tl_now_ms() + 60000;
    while (tl_now_ms() < end) {
        uint64_t fin = atomic_load(&x->final_v);
        if (fin && known == fin) break;
        rc = co_value_watch(v, known, &d, 1000);
        if (rc == BATON_ETIMEDOUT) continue;
        if (rc != 0) {
            x->errors++;
            tl_sleep_ms(50);
            continue;
        }
        if (d.version <= known && d.version != 0) x->rising = 0;
        known = d.version;
        x->seen++;
        snprintf(x->last, sizeof x->last, "%s", d.data ? d.data : "");
    }
    x->ended_on_final = known != 0 && known == atomic_load(&x->final_v);
    baton_value_data_clear(&d);
    baton_value_free(v);
    baton_client_close(c);
    return NULL;
}

static void test_value_burst(void) {
    char n[256];
    co_name(n, sizeof n, "value-burst");
    baton_client *cw = co_client();
    baton_value *w = value_on(cw, n);
    MUST(baton_value_set(w, "v-start", 7, BATON_VALUE_ANY, NULL));
    burst_arg args[BURST_WATCHERS];
    co_thread th[BURST_WATCHERS];
    for (int i = 0; i < BURST_WATCHERS; i++) {
        memset(&args[i], 0, sizeof args[i]);
        args[i].name = n;
        atomic_init(&args[i].final_v, 0);
        atomic_init(&args[i].ready, 0);
        co_start(&th[i], burst_watcher, &args[i]);
    }
    int64_t end = tl_now_ms() + 20000;
    for (int i = 0; i < BURST_WATCHERS; i++)
        while (!atomic_load(&args[i].ready) && tl_now_ms() < end) tl_sleep_ms(5);
    uint64_t ver = 0;
    char s[64];
    int set_errors = 0;
    for (int i = 1; i <= BURST_SETS; i++) {
        int len = snprintf(s, sizeof s, "v-%d%s", i, i == BURST_SETS ? "-final" : "");
        if (baton_value_set(w, s, (size_t)len, BATON_VALUE_ANY, &ver) != 0) set_errors++;
    }
    CHECK(set_errors == 0);
    for (int i = 0; i < BURST_WATCHERS; i++) atomic_store(&args[i].final_v, ver);
    int all = 1;
    for (int i = 0; i < BURST_WATCHERS; i++) {
        co_join(&th[i], 70000, NULL, NULL);
        if (!args[i].ended_on_final || strcmp(args[i].last, s) != 0) {
            all = 0;
            fprintf(stderr, "   watcher %d ended on \"%s\" (%d values seen, %d errors)\n", i, args[i].last,
                    args[i].seen, args[i].errors);
        }
        CHECK(args[i].rising);
    }
    CHECK(all);
    fprintf(stderr, "   %d sets; watchers saw", BURST_SETS);
    for (int i = 0; i < BURST_WATCHERS; i++) fprintf(stderr, " %d", args[i].seen);
    fprintf(stderr, " values (intermediate ones may be skipped)\n");
    baton_value_free(w);
    baton_client_close(cw);
}

typedef struct {
    pthread_mutex_t mu;
    int calls;
    uint64_t last_version;
    char last[64];
    int rising;
} sub_state;

static void sub_cb(baton_value *v, const baton_value_data *d, void *payload) {
    (void)v;
    sub_state *s = payload;
    pthread_mutex_lock(&s->mu);
    if (s->calls && d->version && d->version <= s->last_version) s->rising = 0;
    s->calls++;
    s->last_version = d->version;
    snprintf(s->last, sizeof s->last, "%s", d->data ? d->data : "");
    pthread_mutex_unlock(&s->mu);
}

static int sub_wait(sub_state *s, uint64_t version, int timeout_ms) {
    int64_t end = tl_now_ms() + timeout_ms;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int ok = s->calls > 0 && s->last_version == version;
        pthread_mutex_unlock(&s->mu);
        if (ok) return 1;
        if (tl_now_ms() > end) return 0;
        tl_sleep_ms(10);
    }
}

static void test_value_subscribe(void) {
    char n[256];
    co_name(n, sizeof n, "value-sub");
    baton_client *c1 = co_client(), *c2 = co_client();
    baton_value *a = value_on(c1, n), *b = value_on(c2, n);
    sub_state s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.mu, NULL);
    s.rising = 1;
    CHECK_RC(baton_value_unsubscribe(a), BATON_ENOTHELD);
    /* the first call has the value now: absent */
    CHECK_RC(baton_value_subscribe(a, sub_cb, &s), 0);
    CHECK_RC(baton_value_subscribe(a, sub_cb, &s), BATON_EINVAL);   /* one per handle */
    CHECK(sub_wait(&s, 0, 10000));
    uint64_t ver = 0;
    for (int i = 0; i < 5; i++) {
        char v[16];
        int len = snprintf(v, sizeof v, "s%d", i);
        MUST(baton_value_set(b, v, (size_t)len, BATON_VALUE_ANY, &ver));
    }
    CHECK(sub_wait(&s, ver, 15000));
    pthread_mutex_lock(&s.mu);
    CHECK(!strcmp(s.last, "s4"));
    CHECK(s.rising);
    pthread_mutex_unlock(&s.mu);
    CHECK_RC(baton_value_unsubscribe(a), 0);
    CHECK_RC(baton_value_unsubscribe(a), BATON_ENOTHELD);
    pthread_mutex_lock(&s.mu);
    int calls = s.calls;
    pthread_mutex_unlock(&s.mu);
    MUST(baton_value_set(b, "after", 5, BATON_VALUE_ANY, NULL));
    tl_sleep_ms(500);
    pthread_mutex_lock(&s.mu);
    CHECK(s.calls == calls);   /* no callback after unsubscribe returned */
    pthread_mutex_unlock(&s.mu);
    /* subscribe again, then free the handle with the subscription on */
    CHECK_RC(baton_value_subscribe(a, sub_cb, &s), 0);
    baton_value_free(a);
    baton_value_free(b);
    pthread_mutex_destroy(&s.mu);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_value_limits(void) {
    char n[256];
    co_name(n, sizeof n, "value-limits");
    baton_client *c = co_client();
    baton_value *v = value_on(c, n);
    char *big = malloc(BATON_VALUE_MAX + 1);
    if (!big) exit(1);
    for (size_t i = 0; i < BATON_VALUE_MAX + 1; i++) big[i] = (char)('a' + i % 26);
    uint64_t x = 0;
    CHECK_RC(baton_value_set(v, big, BATON_VALUE_MAX + 1, BATON_VALUE_ANY, &x), BATON_EINVAL);
    baton_value_data d = { 0 };
    CHECK_RC(co_value_get(v, &d), BATON_ENOENT);
    /* the largest allowed value round trips */
    CHECK_RC(baton_value_set(v, big, BATON_VALUE_MAX, BATON_VALUE_ANY, &x), 0);
    CHECK_RC(co_value_get(v, &d), 0);
    CHECK(data_is(&d, big, BATON_VALUE_MAX));
    CHECK_RC(baton_value_delete(v, BATON_VALUE_ANY), 0);
    baton_value_data_clear(&d);
    free(big);
    baton_value_free(v);
    baton_client_close(c);
}

/* ---- counters ------------------------------------------------------------- */

#define CNT_THREADS 8
#define CNT_ADDS 50

typedef struct {
    const char *name;
    baton_client *c;
    int errors;
} cnt_arg;

static void *cnt_main(void *p) {
    cnt_arg *x = p;
    baton_counter *k = NULL;
    if (baton_counter_open(&k, x->c, x->name) != 0) {
        x->errors++;
        return NULL;
    }
    for (int i = 0; i < CNT_ADDS; i++) {
        int rc = baton_counter_add(k, 1, NULL);
        if (rc != 0) {
            if (x->errors++ < 3) fprintf(stderr, "   add: %d (%s)\n", rc, baton_strerror(rc));
        }
    }
    baton_counter_free(k);
    return NULL;
}

typedef struct {
    baton_counter *k;
    uint64_t known;
    int rc;
    int64_t count;
    uint64_t version;
} cwatch_arg;

static void *cwatch_main(void *p) {
    cwatch_arg *w = p;
    w->rc = baton_counter_watch(w->k, w->known, &w->count, &w->version, 15000);
    return NULL;
}

static int counter_cancel(void *k) { return baton_counter_cancel(k); }

static void test_counter(void) {
    char n[256];
    co_name(n, sizeof n, "counter");
    baton_client *c[CNT_THREADS / 2];
    for (int i = 0; i < CNT_THREADS / 2; i++) c[i] = co_client();
    baton_counter *k = NULL;
    MUST(baton_counter_open(&k, c[0], n));
    int64_t count = -1;
    uint64_t ver = 7;
    CHECK_RC(baton_counter_get(k, &count, &ver), 0);   /* absent reads as 0 */
    CHECK(count == 0 && ver == 0);
    /* 8 threads (two per client) x 50 adds: every one counted */
    cnt_arg args[CNT_THREADS];
    pthread_t th[CNT_THREADS];
    for (int i = 0; i < CNT_THREADS; i++) {
        args[i] = (cnt_arg){ n, c[i / 2], 0 };
        pthread_create(&th[i], NULL, cnt_main, &args[i]);
    }
    int errors = 0;
    for (int i = 0; i < CNT_THREADS; i++) {
        pthread_join(th[i], NULL);
        errors += args[i].errors;
    }
    CHECK(errors == 0);
    CHECK_RC(baton_counter_get(k, &count, &ver), 0);
    CHECK(count == CNT_THREADS * CNT_ADDS);
    if (count != CNT_THREADS * CNT_ADDS) fprintf(stderr, "   count %lld\n", (long long)count);
    int64_t after = 0;
    CHECK_RC(baton_counter_add(k, -10, &after), 0);
    CHECK(after == CNT_THREADS * CNT_ADDS - 10);
    /* set with a version: a stale one conflicts */
    uint64_t v1 = 0, v2 = 0;
    CHECK_RC(baton_counter_get(k, &count, &v1), 0);
    CHECK_RC(baton_counter_set(k, 7, v1, &v2), 0);
    CHECK(v2 > v1);
    CHECK_RC(baton_counter_set(k, 8, v1, NULL), BATON_ECONFLICT);
    CHECK_RC(baton_counter_get(k, &count, NULL), 0);
    CHECK(count == 7);
    /* a watch from another client sees an add */
    baton_counter *k2 = NULL;
    MUST(baton_counter_open(&k2, c[1], n));
    cwatch_arg w = { k2, v2, -100, 0, 0 };
    co_thread t;
    co_start(&t, cwatch_main, &w);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    CHECK_RC(baton_counter_add(k, 5, NULL), 0);
    co_join(&t, 15000, counter_cancel, k2);
    CHECK_RC(w.rc, 0);
    CHECK(w.count == 12 && w.version > v2);
    /* overflow is refused, the count unchanged */
    CHECK_RC(baton_counter_get(k, NULL, &v1), 0);
    CHECK_RC(baton_counter_set(k, INT64_MAX, v1, NULL), 0);
    CHECK_RC(baton_counter_add(k, 1, NULL), BATON_EINVAL);
    CHECK_RC(baton_counter_get(k, &count, NULL), 0);
    CHECK(count == INT64_MAX);
    /* a value that is not a number */
    baton_value *v = value_on(c[2], n);
    MUST(baton_value_set(v, "twelve", 6, BATON_VALUE_ANY, NULL));
    CHECK_RC(baton_counter_get(k, &count, NULL), BATON_EPROTO);
    MUST(baton_value_delete(v, BATON_VALUE_ANY));
    baton_value_free(v);
    baton_counter_free(k);
    baton_counter_free(k2);
    for (int i = 0; i < CNT_THREADS / 2; i++) baton_client_close(c[i]);
}

/* ---- latches (a latch table, or the core's latch on values) ---------------- */

typedef struct {
    baton_latch *l;
    int64_t wait_ms;
    int rc;
} await_arg;

static void *await_main(void *p) {
    await_arg *a = p;
    a->rc = baton_latch_await(a->l, a->wait_ms);
    return NULL;
}

static int latch_cancel(void *l) { return baton_latch_cancel(l); }

static void test_latch(void) {
    char n[256];
    co_name(n, sizeof n, "latch");
    baton_client *c1 = co_client(), *c2 = co_client(), *c3 = co_client();
    baton_latch *a = NULL, *b = NULL, *x = NULL;
    MUST(baton_latch_open(&a, c1, n));
    MUST(baton_latch_open(&b, c2, n));
    MUST(baton_latch_open(&x, c3, n));
    int was = -1;
    uint64_t cnt = 99;
    CHECK_RC(baton_latch_await(b, 1000), 0);   /* never set: open */
    CHECK_RC(baton_latch_try_set(a, 2, &was), 0);
    CHECK(was == 1);
    CHECK_RC(baton_latch_try_set(b, 5, &was), 0);
    CHECK(was == 0);                           /* active: not set again */
    CHECK_RC(baton_latch_count(x, &cnt), 0);
    CHECK(cnt == 2);
    CHECK_RC(baton_latch_await(b, 300), BATON_ETIMEDOUT);
    await_arg w = { b, 20000, -100 };
    co_thread t;
    co_start(&t, await_main, &w);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    CHECK_RC(baton_latch_count_down(a), 0);
    CHECK_RC(baton_latch_count(x, &cnt), 0);
    CHECK(cnt == 1);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    CHECK_RC(baton_latch_count_down(x), 0);
    co_join(&t, 20000, latch_cancel, b);
    CHECK_RC(w.rc, 0);
    CHECK_RC(baton_latch_count(a, &cnt), 0);
    CHECK(cnt == 0);
    CHECK_RC(baton_latch_await(a, 0), 0);
    /* done: it can be set again */
    CHECK_RC(baton_latch_try_set(x, 1, &was), 0);
    CHECK(was == 1);
    /* cancel wakes an await */
    w = (await_arg){ b, -1, -100 };
    co_start(&t, await_main, &w);
    tl_sleep_ms(200);
    CHECK_RC(baton_latch_cancel(b), 0);
    co_join(&t, 5000, NULL, NULL);
    CHECK_RC(w.rc, BATON_ECANCELED);
    CHECK_RC(baton_latch_count_down(a), 0);
    baton_latch_free(a);
    baton_latch_free(b);
    baton_latch_free(x);
    baton_client_close(c1);
    baton_client_close(c2);
    baton_client_close(c3);
}

/* ---- main ----------------------------------------------------------------- */

/* COORD_ONLY=word runs only the cases whose name has it (debugging). */
#define CRUN(fn) do { \
    const char *only_ = getenv("COORD_ONLY"); \
    if (!only_ || strstr(#fn, only_)) { \
        families_enter(#fn); \
        RUN(fn); \
        fprintf(stderr, "   (%.1f s in all)\n", (double)(tl_now_ms() - g_t0) / 1000); \
    } \
} while (0)

static void classify(const char *backend) {
    g_leases = strcmp(backend, "file") != 0;   /* the kernel frees a dead holder's file lock */
    if (!strcmp(backend, "zk")) {
        const char *p = strstr(g_uri, "session_timeout_ms=");
        g_leases = 0;
        g_session_ms = p ? atoi(p + strlen("session_timeout_ms=")) : 10000;
    }
    if (!strcmp(backend, "etcd")) {
        const char *p = strstr(g_uri, "ttl=");
        g_leases = 0;
        g_session_ms = p ? atoi(p + strlen("ttl=")) * 1000 : 30000;
    }
    if ((!strcmp(backend, "postgres") || !strcmp(backend, "mysql")) && !strstr(g_uri, "mode=lease")) {
        g_leases = 0;
        g_conn_session = 1;
    }
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--worker")) {
        if (argc == 7 && !strcmp(argv[2], "member"))
            return worker_member(argv[3], argv[4], argv[5], (uint32_t)strtoul(argv[6], NULL, 10));
        if (argc == 6 && !strcmp(argv[2], "take"))
            return worker_take(argv[3], argv[4], (uint32_t)strtoul(argv[5], NULL, 10));
        fprintf(stderr, "bad worker arguments\n");
        return 2;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s URI\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    g_t0 = tl_now_ms();
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (tl_uri_with_port(g_uri, sizeof g_uri, argv[1], NULL) != 0) {
        char why[256];
        snprintf(why, sizeof why, "no test %s server (no port file)",
                 tl_uri_engine(argv[1]) ? tl_uri_engine(argv[1]) : "?");
        return tl_skip_status(why, 1);
    }
    if (!strncmp(g_uri, "file://", 7)) tl_mkdirs(g_uri + 7);
    baton_client *c = NULL;
    int rc = baton_client_open(&c, g_uri, NULL);
    if (rc != 0) {
        fprintf(stderr, "FAIL: baton_client_open(%s) = %d (%s): %s\n", g_uri, rc, baton_strerror(rc), tl_lastmsg());
        printf("0 passed, 1 failed\n");
        return 1;
    }
    static char backend[32];
    snprintf(backend, sizeof backend, "%s", baton_client_backend(c));
    g_backend = backend;
    baton_client_close(c);
    const baton_engine_info *e = baton_engine_find(backend);
    if (!e) {
        fprintf(stderr, "FAIL: baton_engine_find(%s) = NULL\n", backend);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    g_prims = e->primitives;
    classify(backend);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(g_prefix, sizeof g_prefix, "coord/%s/%ld-%ld/", backend, (long)getpid(), (long)(ts.tv_nsec % 100000));
    fprintf(stderr, "coord: %s (engine %s: value %s, group %s, queue %s, latch %s; prefix %s)\n", g_uri, backend,
            g_prims & BATON_PRIM_VALUE ? "yes" : "no", g_prims & BATON_PRIM_GROUP ? "yes" : "no",
            g_prims & BATON_PRIM_QUEUE ? "yes" : "no", g_prims & BATON_PRIM_LATCH ? "yes" : "no", g_prefix);

    CRUN(test_enotsup);
    if (g_prims & BATON_PRIM_VALUE) {
        CRUN(test_value_basic);
        CRUN(test_value_cas);
        CRUN(test_value_cas_race);
        CRUN(test_value_watch);
        CRUN(test_value_burst);
        CRUN(test_value_subscribe);
        CRUN(test_value_limits);
        CRUN(test_counter);
    }
    if (g_prims & BATON_PRIM_LATCH) CRUN(test_latch);
    if (g_prims & BATON_PRIM_GROUP) {
        CRUN(test_group_basic);
        CRUN(test_group_two_clients);
        CRUN(test_group_watch);
        CRUN(test_group_closed_client);
        CRUN(test_group_killed_member);
        CRUN(test_group_bad_ids);
        if (g_prims & BATON_PRIM_VALUE) CRUN(test_barrier);
    }
    if (g_prims & BATON_PRIM_QUEUE) {
        CRUN(test_queue_fifo);
        CRUN(test_queue_wait_put);
        CRUN(test_queue_return_done);
        CRUN(test_queue_concurrent);
        CRUN(test_queue_killed_taker);
        CRUN(test_queue_item_lost);
        CRUN(test_queue_bad);
    }
    return co_finish();
}
