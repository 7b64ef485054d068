/*
 * Values, groups and queues on etcd (src/backends/etcd/value.c, group.c,
 * queue.c), on the "etcd" fixture:
 *
 *   test_etcd_coord URI        ("{port}" = the fixture's client port)
 *
 * Values:
 *   - versions: absent = 0 (BATON_ENOENT), every set and a re-creation after
 *     a delete give a larger version; CAS on the version (expect 0 =
 *     create), a stale expect is BATON_ECONFLICT and changes nothing;
 *   - CAS race: 4 clients expect the same version at once, one wins per
 *     round;
 *   - a watcher ends on the last value of a burst of sets by another client;
 *   - a watch from a compacted revision (the known version compacted away
 *     by `etcdctl compact`) still sees the next change;
 *   - a watcher whose link is cut (tests/servers/link.sh cut) while the
 *     value changes sees the change once the link is back, within its wait.
 * Groups:
 *   - join, list (values), a second live member with the same id is
 *     BATON_ELOCKED, leave; a watcher wakes on a join by another client;
 *   - a group watcher whose link is cut while another client joins sees the
 *     join once the link is back, within its wait;
 *   - a member process killed (SIGKILL, ttl=2) is gone from the list within
 *     its lease, seen by a group watch;
 *   - a member whose key someone else deletes (through the JSON gateway:
 *     the key starts with a NUL) is told (on_lost) at a keep-alive, and
 *     its leave is BATON_ELOST.
 * Queues:
 *   - FIFO order, increasing fences, a returned item first in line again,
 *     size, a try on an empty queue is BATON_ENOENT;
 *   - a taker waiting on an empty queue gets an item put by another client;
 *   - 4 takers (each its own client) drain 40 items: each item taken and
 *     done exactly once;
 *   - a taker process killed mid-item (ttl=2): the item comes back and is
 *     taken again with a larger fence;
 *   - a taker process stopped (SIGSTOP) past its lease: another taker gets
 *     the item; resumed, the stopped one finds it no longer held and its
 *     done is BATON_ELOST (never two takers believing they hold it);
 *   - a taker whose claim someone else deletes is told (on_lost), its done
 *     is BATON_ELOST and the item is still there.
 * Bounds are generous (a missed wake-up would show as a 20 s wait); the
 * killed-process cases allow 15 s for a 2 s lease.
 */
#include <baton.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "../common/testlib.h"

static char g_uri[1024];     /* the fixture, as given (with its options) */
static char g_prefix[64];    /* names unique to this run */
static int g_port;

static void nm(char *out, size_t n, const char *what)
{
    snprintf(out, n, "%s-%s", g_prefix, what);
}

/* ---- values ---------------------------------------------------------------- */

static void value_versions(void)
{
    baton_client *c = tl_client_open(g_uri);
    baton_value *v;
    baton_value_data d = { 0 };
    uint64_t v1 = 0, v2 = 0, v3 = 0, v4 = 0;
    char name[128];

    nm(name, sizeof name, "ver");
    MUST(baton_value_open(&v, c, name));
    CHECK_RC(baton_value_get(v, &d), BATON_ENOENT);
    CHECK(d.version == 0 && d.data == NULL);
    CHECK_RC(baton_value_set(v, "one", 3, 0, &v1), 0);
    CHECK(v1 > 0);
    CHECK_RC(baton_value_set(v, "x", 1, 0, NULL), BATON_ECONFLICT);      /* exists */
    CHECK_RC(baton_value_set(v, "two", 3, v1, &v2), 0);
    CHECK(v2 > v1);
    CHECK_RC(baton_value_set(v, "x", 1, v1, NULL), BATON_ECONFLICT);     /* stale */
    CHECK_RC(baton_value_get(v, &d), 0);
    CHECK(d.version == v2 && d.len == 3 && !strcmp(d.data, "two"));
    baton_value_data_clear(&d);
    CHECK_RC(baton_value_delete(v, v1), BATON_ECONFLICT);
    CHECK_RC(baton_value_delete(v, v2), 0);
    CHECK_RC(baton_value_delete(v, BATON_VALUE_ANY), BATON_ENOENT);
    CHECK_RC(baton_value_get(v, &d), BATON_ENOENT);
    /* re-created: larger than every version before */
    CHECK_RC(baton_value_set(v, "", 0, BATON_VALUE_ANY, &v3), 0);
    CHECK(v3 > v2);
    CHECK_RC(baton_value_get(v, &d), 0);
    CHECK(d.version == v3 && d.len == 0 && d.data && d.data[0] == 0);
    baton_value_data_clear(&d);
    /* bytes, NULs included */
    CHECK_RC(baton_value_set(v, "a\0b\xff", 4, v3, &v4), 0);
    CHECK_RC(baton_value_get(v, &d), 0);
    CHECK(d.len == 4 && !memcmp(d.data, "a\0b\xff", 4) && d.version == v4);
    baton_value_data_clear(&d);
    CHECK_RC(baton_value_delete(v, BATON_VALUE_ANY), 0);
    baton_value_free(v);
    baton_client_close(c);
}

typedef struct {
    baton_client *c;
    baton_value *v;
    uint64_t expect;
    int id;
    atomic_int *go;
    int rc;
} racer;

static void *race_main(void *a)
{
    racer *r = a;
    char buf[16];
    snprintf(buf, sizeof buf, "r%d", r->id);
    while (!atomic_load(r->go)) {
    }
    r->rc = baton_value_set(r->v, buf, strlen(buf), r->expect, NULL);
    return NULL;
}

static void value_cas_race(void)
{
    enum { N = 4, ROUNDS = 10 };
    racer r[N];
    pthread_t th[N];
    char name[128];
    int bad = 0;

    nm(name, sizeof name, "race");
    for (int i = 0; i < N; i++) {
        r[i].c = tl_client_open(g_uri);
        MUST(baton_value_open(&r[i].v, r[i].c, name));
        r[i].id = i;
    }
    baton_value_delete(r[0].v, BATON_VALUE_ANY);
    for (int round = 0; round < ROUNDS; round++) {
        baton_value_data d = { 0 };
        atomic_int go;
        int wins = 0, conflicts = 0;
        atomic_init(&go, 0);
        int grc = baton_value_get(r[0].v, &d);
        CHECK(grc == 0 || grc == BATON_ENOENT);
        for (int i = 0; i < N; i++) {
            r[i].expect = d.version;      /* round 0: absent, expect 0 = create */
            r[i].go = &go;
            pthread_create(&th[i], NULL, race_main, &r[i]);
        }
        atomic_store(&go, 1);
        for (int i = 0; i < N; i++) {
            pthread_join(th[i], NULL);
            wins += r[i].rc == 0;
            conflicts += r[i].rc == BATON_ECONFLICT;
        }
        if (wins != 1 || conflicts != N - 1) {
            fprintf(stderr, "   round %d: %d wins, %d conflicts\n", round, wins, conflicts);
            bad++;
        }
        baton_value_data_clear(&d);
    }
    CHECK(bad == 0);
    baton_value_delete(r[0].v, BATON_VALUE_ANY);
    for (int i = 0; i < N; i++) {
        baton_value_free(r[i].v);
        baton_client_close(r[i].c);
    }
}

typedef struct {
    baton_value *v;
    uint64_t known;
    int64_t wait_ms;
    int rc;
    baton_value_data d;
    atomic_int done;
} watcher;

static void *watch_main(void *a)
{
    watcher *w = a;
    w->rc = baton_value_watch(w->v, w->known, &w->d, w->wait_ms);
    atomic_store(&w->done, 1);
    return NULL;
}

/* Watches until the value is LAST (or WAIT_MS pass): 1 when it ended there. */
static int watch_until(baton_value *v, uint64_t known, const char *last, int64_t wait_ms)
{
    int64_t end = tl_now_ms() + wait_ms;
    for (;;) {
        baton_value_data d = { 0 };
        int64_t left = end - tl_now_ms();
        int rc = baton_value_watch(v, known, &d, left > 0 ? left : 0);
        if (rc) {
            fprintf(stderr, "   watch from version %llu: %d (%s)\n", (unsigned long long)known, rc, tl_lastmsg());
            return 0;
        }
        known = d.version;
        if (d.data && !strcmp(d.data, last)) {
            baton_value_data_clear(&d);
            return 1;
        }
        baton_value_data_clear(&d);
    }
}

static void value_burst(void)
{
    baton_client *c = tl_client_open(g_uri), *c2 = tl_client_open(g_uri);
    baton_value *v, *v2;
    char name[128];
    uint64_t known = 0;
    nm(name, sizeof name, "burst");
    MUST(baton_value_open(&v, c, name));
    MUST(baton_value_open(&v2, c2, name));
    MUST(baton_value_set(v, "start", 5, BATON_VALUE_ANY, &known));
    watcher w = { .v = v2, .known = known, .wait_ms = 20000 };
    atomic_init(&w.done, 0);
    pthread_t th;
    pthread_create(&th, NULL, watch_main, &w);
    for (int i = 0; i < 50; i++) {
        char buf[16];
        snprintf(buf, sizeof buf, "n%d", i);
        MUST(baton_value_set(v, buf, strlen(buf), BATON_VALUE_ANY, NULL));
    }
    pthread_join(th, NULL);
    CHECK_RC(w.rc, 0);
    CHECK(w.d.version > known);
    known = w.d.version;
    /* however many it skipped, it ends on the last one (the first watch may
     * have seen it already: the sets ran while it read) */
    CHECK((w.d.data && !strcmp(w.d.data, "n49")) || watch_until(v2, known, "n49", 20000));
    baton_value_data_clear(&w.d);
    baton_value_delete(v, BATON_VALUE_ANY);
    baton_value_free(v);
    baton_value_free(v2);
    baton_client_close(c);
    baton_client_close(c2);
}

/* The fixture's revision now, compacted up to (etcdctl compact). */
static int compact_now(void)
{
    return tl_sh("ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:%d put %s-filler x >/dev/null && "
                 "rev=$(ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:%d get %s-filler -w fields | "
                 "sed -n 's/^\"ModRevision\" : //p') && "
                 "ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:%d compact \"$rev\" >/dev/null",
                 g_port, g_prefix, g_port, g_prefix, g_port);
}

static void value_compacted(void)
{
    baton_client *c = tl_client_open(g_uri), *c2 = tl_client_open(g_uri);
    baton_value *v, *v2;
    char name[128];
    uint64_t known = 0;
    nm(name, sizeof name, "compact");
    MUST(baton_value_open(&v, c, name));
    MUST(baton_value_open(&v2, c2, name));
    MUST(baton_value_set(v, "old", 3, BATON_VALUE_ANY, &known));
    /* known + 1 is compacted away: the watch's first stream is refused */
    if (compact_now() != 0) {
        fprintf(stderr, "   etcdctl compact failed: case skipped\n");
        goto out;
    }
    watcher w = { .v = v2, .known = known, .wait_ms = 20000 };
    atomic_init(&w.done, 0);
    pthread_t th;
    pthread_create(&th, NULL, watch_main, &w);
    tl_sleep_ms(500);
    CHECK(!atomic_load(&w.done));          /* no change yet: still waiting */
    MUST(baton_value_set(v, "new", 3, BATON_VALUE_ANY, NULL));
    pthread_join(th, NULL);
    CHECK_RC(w.rc, 0);
    CHECK(w.d.data && !strcmp(w.d.data, "new") && w.d.version > known);
    baton_value_data_clear(&w.d);
out:
    baton_value_delete(v, BATON_VALUE_ANY);
    baton_value_free(v);
    baton_value_free(v2);
    baton_client_close(c);
    baton_client_close(c2);
}

/* ---- the link --------------------------------------------------------------- */

static char g_link_dir[1024];

static int link_cmd(const char *cmd)
{
    return tl_sh("bash '%s/link.sh' %s '%s' >/dev/null 2>&1", TL_SERVERS_DIR, cmd, g_link_dir);
}

static int link_start(int target)
{
    char cmd[2048], out[64] = "";
    snprintf(cmd, sizeof cmd, "bash '%s/link.sh' start '%s' %d", TL_SERVERS_DIR, g_link_dir, target);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    if (!fgets(out, sizeof out, p)) out[0] = 0;
    int st = pclose(p);
    return st == 0 ? atoi(out) : 0;
}

/* G_URI with its port replaced by PORT. */
static void uri_on(char *out, size_t n, int port)
{
    char from[16];
    const char *p;
    snprintf(from, sizeof from, ":%d", g_port);
    p = strstr(g_uri, from);
    snprintf(out, n, "%.*s:%d%s", (int)(p - g_uri), g_uri, port, p + strlen(from));
}

static void value_watch_cut(void)
{
    char name[128], luri[1100], tmp[1024];
    const char *base = getenv("BATON_TEST_TMP");
    snprintf(tmp, sizeof tmp, "%s/etcd_coord_link_%d", base ? base : "/tmp", (int)getpid());
    snprintf(g_link_dir, sizeof g_link_dir, "%s", tmp);
    int lport = link_start(g_port);
    if (!lport) {
        fprintf(stderr, "   no link (socat missing?): case skipped\n");
        return;
    }
    uri_on(luri, sizeof luri, lport);
    baton_client *c = tl_client_open(g_uri), *cw = tl_client_open(luri);
    baton_value *v, *vw;
    uint64_t known = 0;
    nm(name, sizeof name, "cut");
    MUST(baton_value_open(&v, c, name));
    MUST(baton_value_open(&vw, cw, name));
    MUST(baton_value_set(v, "before", 6, BATON_VALUE_ANY, &known));
    watcher w = { .v = vw, .known = known, .wait_ms = 20000 };
    atomic_init(&w.done, 0);
    pthread_t th;
    pthread_create(&th, NULL, watch_main, &w);
    tl_sleep_ms(500);                        /* its stream is up */
    CHECK(link_cmd("cut") == 0);             /* every connection reset, new ones refused */
    MUST(baton_value_set(v, "during", 6, BATON_VALUE_ANY, NULL));
    tl_sleep_ms(1000);
    CHECK(link_start(g_port) == lport);      /* back, on the same port */
    pthread_join(th, NULL);
    CHECK_RC(w.rc, 0);
    CHECK(w.d.data && !strcmp(w.d.data, "during"));
    baton_value_data_clear(&w.d);
    link_cmd("stop");
    baton_value_delete(v, BATON_VALUE_ANY);
    baton_value_free(v);
    baton_value_free(vw);
    baton_client_close(cw);
    baton_client_close(c);
}

/* ---- keys with a NUL, deleted through the JSON gateway -------------------------- */

static void b64(const unsigned char *p, size_t n, char *out)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        out[o++] = t[v >> 18 & 63];
        out[o++] = t[v >> 12 & 63];
        out[o++] = i + 1 < n ? t[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? t[v & 63] : '=';
    }
    out[o] = 0;
}

/* Deletes [KEY, END) (END NULL: KEY alone) through the fixture's gateway;
 * 0 when curl got an answer. */
static int gw_delete(const unsigned char *key, size_t kl, const unsigned char *end, size_t el)
{
    char k64[512], e64[512];
    b64(key, kl, k64);
    if (end) b64(end, el, e64);
    return tl_sh("curl -sf -X POST http://127.0.0.1:%d/v3/kv/deleterange -d '{\"key\":\"%s\"%s%s%s}' >/dev/null",
                 g_port, k64, end ? ",\"range_end\":\"" : "", end ? e64 : "", end ? "\"" : "");
}

/* ---- groups ------------------------------------------------------------------ */

static int has_member(const baton_members *m, const char *id, const char *value)
{
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->members[i].id, id) && (!value || !strcmp(m->members[i].value, value))) return 1;
    return 0;
}

static void group_basics(void)
{
    baton_client *c1 = tl_client_open(g_uri), *c2 = tl_client_open(g_uri);
    baton_group *g1, *g2, *g3, *gw;
    baton_members m = { 0 };
    char name[128], sub[160];
    nm(name, sizeof name, "grp");
    snprintf(sub, sizeof sub, "%s/sub", name);
    MUST(baton_group_open(&g1, c1, name, NULL));
    MUST(baton_group_open(&g2, c2, name, NULL));
    MUST(baton_group_open(&g3, c2, sub, NULL));
    MUST(baton_group_open(&gw, c1, name, NULL));
    CHECK_RC(baton_group_join(g1, "m1", "10.0.0.1:80"), 0);
    CHECK_RC(baton_group_join(g2, "m1", "other"), BATON_ELOCKED);
    CHECK_RC(baton_group_join(g3, "m1", "nested"), 0);   /* a group below: not a member of NAME */
    CHECK_RC(baton_group_watch(gw, &m, 0), 0);           /* the first answers at once */
    CHECK(m.n == 1 && has_member(&m, "m1", "10.0.0.1:80"));
    baton_members_clear(&m);
    /* a join by another client wakes the watcher */
    CHECK_RC(baton_group_join(g2, "m2", ""), 0);
    CHECK_RC(baton_group_watch(gw, &m, 20000), 0);
    CHECK(m.n == 2 && has_member(&m, "m2", ""));
    baton_members_clear(&m);
    CHECK_RC(baton_group_leave(g1), 0);
    CHECK_RC(baton_group_watch(gw, &m, 20000), 0);
    CHECK(m.n == 1 && !has_member(&m, "m1", NULL));
    baton_members_clear(&m);
    CHECK_RC(baton_group_watch(gw, &m, 300), BATON_ETIMEDOUT);
    baton_members_clear(&m);
    baton_group_free(g1);
    baton_group_free(g2);
    baton_group_free(g3);
    baton_group_free(gw);
    baton_client_close(c1);
    baton_client_close(c2);
}

typedef struct {
    baton_group *g;
    int rc;
    baton_members m;
} gwatcher;

static void *gwatch_main(void *a)
{
    gwatcher *w = a;
    w->rc = baton_group_watch(w->g, &w->m, 20000);
    return NULL;
}

static void group_watch_cut(void)
{
    char name[128], luri[1100];
    const char *base = getenv("BATON_TEST_TMP");
    snprintf(g_link_dir, sizeof g_link_dir, "%s/etcd_coord_glink_%d", base ? base : "/tmp", (int)getpid());
    int lport = link_start(g_port);
    if (!lport) {
        fprintf(stderr, "   no link (socat missing?): case skipped\n");
        return;
    }
    uri_on(luri, sizeof luri, lport);
    baton_client *c = tl_client_open(g_uri), *cw = tl_client_open(luri);
    baton_group *g, *gw;
    nm(name, sizeof name, "gcut");
    MUST(baton_group_open(&g, c, name, NULL));
    MUST(baton_group_open(&gw, cw, name, NULL));
    gwatcher w = { .g = gw };
    CHECK_RC(baton_group_watch(gw, &w.m, 0), 0);      /* the first answers at once: nobody */
    CHECK(w.m.n == 0);
    baton_members_clear(&w.m);
    pthread_t th;
    pthread_create(&th, NULL, gwatch_main, &w);
    tl_sleep_ms(500);
    CHECK(link_cmd("cut") == 0);
    CHECK_RC(baton_group_join(g, "late", "x"), 0);
    tl_sleep_ms(1000);
    CHECK(link_start(g_port) == lport);
    pthread_join(th, NULL);
    CHECK_RC(w.rc, 0);
    CHECK(has_member(&w.m, "late", "x"));
    baton_members_clear(&w.m);
    link_cmd("stop");
    baton_group_free(g);
    baton_group_free(gw);
    baton_client_close(cw);
    baton_client_close(c);
}

static char g_self[1024];

/* A worker: joins GROUP as ID (or takes from QUEUE), says so, then sleeps
 * until killed. */
static int worker_main(int argc, char **argv)
{
    baton_client *c;
    if (argc < 5) return 2;
    c = tl_client_open(argv[3]);
    if (!strcmp(argv[2], "member")) {
        baton_group *g;
        MUST(baton_group_open(&g, c, argv[4], NULL));
        MUST(baton_group_join(g, argv[5], "worker"));
        tl_out_line("joined\n");
    } else {
        baton_queue *q;
        baton_queue_item *it;
        size_t len;
        MUST(baton_queue_open(&q, c, argv[4], NULL));
        MUST(baton_queue_take(q, &it, 20000));
        const char *d = baton_queue_item_data(it, &len);
        tl_out_line("took %s %llu\n", d, (unsigned long long)baton_queue_item_fence(it));
        /* "check": is the item still ours (after a stop), and done's answer */
        tl_wait_for_line("check");
        int held = baton_queue_item_held(it);
        int rc = baton_queue_done(it);
        tl_out_line("held %d done %d\n", held, rc);
        baton_queue_free(q);
        baton_client_close(c);
        return 0;
    }
    tl_wait_for_line("never");
    return 0;
}

static void group_killed(void)
{
    char name[128], kuri[1100];
    tl_worker w;
    char line[256];
    baton_client *c = tl_client_open(g_uri);
    baton_group *g;
    baton_members m = { 0 };
    int64_t t0;
    nm(name, sizeof name, "killed");
    /* a lease of 2 s for the worker */
    snprintf(kuri, sizeof kuri, "%s%sttl=2", g_uri, strchr(g_uri, '?') ? "&" : "?");
    char *argv[] = { g_self, "worker", "member", kuri, name, "w1", NULL };
    MUST(baton_group_open(&g, c, name, NULL));
    if (tl_worker_spawn(&w, argv)) {
        CHECK(0);
        return;
    }
    CHECK(tl_expect_line(&w, "joined", line, sizeof line, 20000) == 0);
    CHECK_RC(baton_group_watch(g, &m, 0), 0);
    CHECK(has_member(&m, "w1", "worker"));
    baton_members_clear(&m);
    kill(w.pid, SIGKILL);
    tl_worker_reap(&w, 5000);
    t0 = tl_now_ms();
    int gone = 0;
    while (!gone && tl_now_ms() - t0 < 15000) {
        if (baton_group_watch(g, &m, 15000 - (tl_now_ms() - t0)) != 0) break;
        gone = !has_member(&m, "w1", NULL);
        baton_members_clear(&m);
    }
    CHECK(gone);
    fprintf(stderr, "   killed member gone after %lld ms (lease 2 s)\n", (long long)(tl_now_ms() - t0));
    baton_group_free(g);
    baton_client_close(c);
}

static void group_lost_cb(baton_group *g, void *payload)
{
    (void)g;
    atomic_fetch_add((atomic_int *)payload, 1);
}

static void group_key_deleted(void)
{
    char name[128], kuri[1100];
    unsigned char key[256];
    atomic_int lost;
    baton_group_options o = BATON_GROUP_OPTIONS_INIT;
    baton_group *g;
    nm(name, sizeof name, "gdel");
    atomic_init(&lost, 0);
    o.on_lost = group_lost_cb;
    o.on_lost_payload = &lost;
    /* keep-alives every second: the check comes with them */
    snprintf(kuri, sizeof kuri, "%s%sttl=3", g_uri, strchr(g_uri, '?') ? "&" : "?");
    baton_client *c = tl_client_open(kuri);
    MUST(baton_group_open(&g, c, name, &o));
    CHECK_RC(baton_group_join(g, "m1", "v"), 0);
    int kl = snprintf((char *)key + 1, sizeof key - 1, "group/%s/m1", name) + 1;
    key[0] = 0;
    CHECK(gw_delete(key, (size_t)kl, NULL, 0) == 0);
    int64_t t0 = tl_now_ms();
    while (!atomic_load(&lost) && tl_now_ms() - t0 < 15000) tl_sleep_ms(20);
    CHECK(atomic_load(&lost) == 1);
    CHECK(!baton_group_is_member(g));
    fprintf(stderr, "   a deleted member key reported lost after %lld ms (ttl 3 s)\n", (long long)(tl_now_ms() - t0));
    CHECK_RC(baton_group_leave(g), BATON_ELOST);
    baton_group_free(g);
    baton_client_close(c);
}

/* ---- queues ------------------------------------------------------------------ */

static int take_is(baton_queue *q, const char *want, uint64_t *fence)
{
    baton_queue_item *it = NULL;
    int rc = baton_queue_take(q, &it, 0);
    if (rc) {
        fprintf(stderr, "   take: %d %s\n", rc, tl_lastmsg());
        return 0;
    }
    int ok = !strcmp(baton_queue_item_data(it, NULL), want);
    if (!ok) fprintf(stderr, "   took %s, wanted %s\n", baton_queue_item_data(it, NULL), want);
    if (fence) {
        ok = ok && baton_queue_item_fence(it) > *fence;
        *fence = baton_queue_item_fence(it);
    }
    CHECK_RC(baton_queue_done(it), 0);
    return ok;
}

/* A taker with a wait, on a thread. */
typedef struct {
    baton_queue *q;
    baton_queue_item *it;
    int rc;
} targ;

static void *take_main(void *a)
{
    targ *t = a;
    t->rc = baton_queue_take(t->q, &t->it, 20000);
    return NULL;
}

static void queue_basics(void)
{
    baton_client *c = tl_client_open(g_uri), *c2 = tl_client_open(g_uri);
    baton_queue *q, *q2;
    baton_queue_item *it = NULL, *it2 = NULL;
    uint64_t n = 99, fence = 0;
    char name[128];
    nm(name, sizeof name, "q");
    MUST(baton_queue_open(&q, c, name, NULL));
    MUST(baton_queue_open(&q2, c2, name, NULL));
    CHECK_RC(baton_queue_take(q, &it, 0), BATON_ENOENT);
    CHECK_RC(baton_queue_size(q, &n), 0);
    CHECK(n == 0);
    MUST(baton_queue_put(q, "a", 1));
    MUST(baton_queue_put(q, "b", 1));
    MUST(baton_queue_put(q, "c", 1));
    CHECK_RC(baton_queue_size(q, &n), 0);
    CHECK(n == 3);
    /* a taken, returned: first in line again */
    CHECK_RC(baton_queue_take(q, &it, 0), 0);
    CHECK(it && !strcmp(baton_queue_item_data(it, NULL), "a"));
    CHECK_RC(baton_queue_take(q2, &it2, 0), 0);   /* another taker: the next one */
    CHECK(it2 && !strcmp(baton_queue_item_data(it2, NULL), "b"));
    CHECK_RC(baton_queue_size(q, &n), 0);
    CHECK(n == 1);
    fence = baton_queue_item_fence(it2);
    CHECK(fence > baton_queue_item_fence(it));
    CHECK_RC(baton_queue_return(it), 0);
    CHECK(take_is(q, "a", &fence));
    CHECK(take_is(q, "c", &fence));
    CHECK_RC(baton_queue_done(it2), 0);
    CHECK_RC(baton_queue_take(q, &it, 0), BATON_ENOENT);
    /* a waiting taker gets what another client puts */
    int64_t t0 = tl_now_ms();
    pthread_t th;
    targ arg = { q, NULL, -1 };
    pthread_create(&th, NULL, take_main, &arg);
    tl_sleep_ms(500);
    MUST(baton_queue_put(q2, "late", 4));
    pthread_join(th, NULL);
    CHECK_RC(arg.rc, 0);
    CHECK(arg.it && !strcmp(baton_queue_item_data(arg.it, NULL), "late"));
    fprintf(stderr, "   a waiting taker got a late item after %lld ms\n", (long long)(tl_now_ms() - t0));
    if (arg.it) CHECK_RC(baton_queue_done(arg.it), 0);
    baton_queue_free(q);
    baton_queue_free(q2);
    baton_client_close(c);
    baton_client_close(c2);
}

enum { DRAIN_ITEMS = 40, DRAIN_TAKERS = 4 };
static atomic_int g_seen[DRAIN_ITEMS];

static void *drain_main(void *a)
{
    baton_queue *q = a;
    for (;;) {
        baton_queue_item *it = NULL;
        int rc = baton_queue_take(q, &it, 0);
        if (rc) break;
        int i = atoi(baton_queue_item_data(it, NULL));
        if (i >= 0 && i < DRAIN_ITEMS) atomic_fetch_add(&g_seen[i], 1);
        if (baton_queue_done(it) != 0) atomic_fetch_add(&g_seen[i], 100);
    }
    return NULL;
}

static void queue_drain(void)
{
    baton_client *c[DRAIN_TAKERS];
    baton_queue *q[DRAIN_TAKERS];
    pthread_t th[DRAIN_TAKERS];
    char name[128];
    int once = 0;
    uint64_t n = 99;
    nm(name, sizeof name, "drain");
    for (int i = 0; i < DRAIN_TAKERS; i++) {
        c[i] = tl_client_open(g_uri);
        MUST(baton_queue_open(&q[i], c[i], name, NULL));
    }
    for (int i = 0; i < DRAIN_ITEMS; i++) {
        char buf[16];
        snprintf(buf, sizeof buf, "%d", i);
        atomic_init(&g_seen[i], 0);
        MUST(baton_queue_put(q[0], buf, strlen(buf)));
    }
    for (int i = 0; i < DRAIN_TAKERS; i++) pthread_create(&th[i], NULL, drain_main, q[i]);
    for (int i = 0; i < DRAIN_TAKERS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < DRAIN_ITEMS; i++) {
        if (atomic_load(&g_seen[i]) == 1) once++;
        else fprintf(stderr, "   item %d seen %d times\n", i, atomic_load(&g_seen[i]));
    }
    CHECK(once == DRAIN_ITEMS);
    CHECK_RC(baton_queue_size(q[0], &n), 0);
    CHECK(n == 0);
    for (int i = 0; i < DRAIN_TAKERS; i++) {
        baton_queue_free(q[i]);
        baton_client_close(c[i]);
    }
}

static void queue_taker_killed(void)
{
    char name[128], kuri[1100], line[256], item[64];
    unsigned long long wfence = 0;
    tl_worker w;
    baton_client *c = tl_client_open(g_uri);
    baton_queue *q;
    baton_queue_item *it = NULL;
    nm(name, sizeof name, "qkilled");
    snprintf(kuri, sizeof kuri, "%s%sttl=2", g_uri, strchr(g_uri, '?') ? "&" : "?");
    char *argv[] = { g_self, "worker", "taker", kuri, name, "-", NULL };
    MUST(baton_queue_open(&q, c, name, NULL));
    MUST(baton_queue_put(q, "job1", 4));
    if (tl_worker_spawn(&w, argv)) {
        CHECK(0);
        return;
    }
    CHECK(tl_expect_line(&w, "took", line, sizeof line, 20000) == 0);
    CHECK(sscanf(line, "took %63s %llu", item, &wfence) == 2 && !strcmp(item, "job1"));
    CHECK_RC(baton_queue_take(q, &it, 0), BATON_ENOENT);    /* held by the worker */
    kill(w.pid, SIGKILL);
    tl_worker_reap(&w, 5000);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_queue_take(q, &it, 15000), 0);
    if (it) {
        CHECK(!strcmp(baton_queue_item_data(it, NULL), "job1"));
        CHECK(baton_queue_item_fence(it) > wfence);
        fprintf(stderr, "   the killed taker's item came back after %lld ms (lease 2 s)\n",
                (long long)(tl_now_ms() - t0));
        CHECK_RC(baton_queue_done(it), 0);
    }
    baton_queue_free(q);
    baton_client_close(c);
}

static void queue_taker_stopped(void)
{
    char name[128], kuri[1100], line[256], item[64];
    unsigned long long wfence = 0;
    int held = -1, drc = 0;
    tl_worker w;
    baton_client *c = tl_client_open(g_uri);
    baton_queue *q;
    baton_queue_item *it = NULL;
    nm(name, sizeof name, "qstopped");
    snprintf(kuri, sizeof kuri, "%s%sttl=2", g_uri, strchr(g_uri, '?') ? "&" : "?");
    char *argv[] = { g_self, "worker", "taker", kuri, name, "-", NULL };
    MUST(baton_queue_open(&q, c, name, NULL));
    MUST(baton_queue_put(q, "job2", 4));
    if (tl_worker_spawn(&w, argv)) {
        CHECK(0);
        return;
    }
    CHECK(tl_expect_line(&w, "took", line, sizeof line, 20000) == 0);
    CHECK(sscanf(line, "took %63s %llu", item, &wfence) == 2 && !strcmp(item, "job2"));
    kill(w.pid, SIGSTOP);
    CHECK_RC(baton_queue_take(q, &it, 15000), 0);
    if (it) {
        CHECK(!strcmp(baton_queue_item_data(it, NULL), "job2"));
        CHECK(baton_queue_item_fence(it) > wfence);
    }
    kill(w.pid, SIGCONT);
    tl_send_line(&w, "check\n");
    CHECK(tl_expect_line(&w, "held", line, sizeof line, 20000) == 0);
    CHECK(sscanf(line, "held %d done %d", &held, &drc) == 2);
    CHECK(held == 0);
    CHECK(drc == BATON_ELOST);
    if (it) CHECK_RC(baton_queue_done(it), 0);      /* the second taker's done stands */
    tl_worker_reap(&w, 10000);
    baton_queue_free(q);
    baton_client_close(c);
}

static void item_lost_cb(baton_queue_item *it, void *payload)
{
    (void)it;
    atomic_fetch_add((atomic_int *)payload, 1);
}

static void queue_claim_deleted(void)
{
    char name[128], kuri[1100];
    unsigned char key[256], end[256];
    atomic_int lost;
    baton_queue_options o = BATON_QUEUE_OPTIONS_INIT;
    baton_queue *q;
    baton_queue_item *it = NULL;
    uint64_t n = 0;
    nm(name, sizeof name, "qdel");
    atomic_init(&lost, 0);
    o.on_lost = item_lost_cb;
    o.on_lost_payload = &lost;
    snprintf(kuri, sizeof kuri, "%s%sttl=3", g_uri, strchr(g_uri, '?') ? "&" : "?");
    baton_client *c = tl_client_open(kuri);
    MUST(baton_queue_open(&q, c, name, &o));
    MUST(baton_queue_put(q, "x", 1));
    CHECK_RC(baton_queue_take(q, &it, 0), 0);
    /* every claim of the queue: [\0queue/<name>\0t/, \0queue/<name>\0t0) */
    int kl = snprintf((char *)key + 1, sizeof key - 1, "queue/%s", name) + 1;
    key[0] = 0;
    memcpy(key + kl, "\0t/", 3);
    memcpy(end, key, (size_t)kl + 3);
    end[kl + 2] = '0';
    CHECK(gw_delete(key, (size_t)kl + 3, end, (size_t)kl + 3) == 0);
    int64_t t0 = tl_now_ms();
    while (!atomic_load(&lost) && tl_now_ms() - t0 < 15000) tl_sleep_ms(20);
    CHECK(atomic_load(&lost) == 1);
    CHECK(it && !baton_queue_item_held(it));
    if (it) CHECK_RC(baton_queue_done(it), BATON_ELOST);
    CHECK_RC(baton_queue_size(q, &n), 0);
    CHECK(n == 1);                           /* not done: still there, for the next taker */
    CHECK_RC(baton_queue_take(q, &it, 0), 0);
    if (it) CHECK_RC(baton_queue_done(it), 0);
    baton_queue_free(q);
    baton_client_close(c);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "worker")) return worker_main(argc, argv);
    if (argc < 2) {
        fprintf(stderr, "usage: test_etcd_coord URI\n");
        return 2;
    }
    if (tl_uri_with_port(g_uri, sizeof g_uri, argv[1], "etcd")) tl_skip("no etcd fixture", 1);
    g_port = tl_fixture_port("etcd");
    snprintf(g_self, sizeof g_self, "%s", argv[0]);
    snprintf(g_prefix, sizeof g_prefix, "coord-%d", (int)getpid());
    RUN(value_versions);
    RUN(value_cas_race);
    RUN(value_burst);
    RUN(value_compacted);
    RUN(value_watch_cut);
    RUN(group_basics);
    RUN(group_watch_cut);
    RUN(group_killed);
    RUN(group_key_deleted);
    RUN(queue_basics);
    RUN(queue_drain);
    RUN(queue_taker_killed);
    RUN(queue_taker_stopped);
    RUN(queue_claim_deleted);
    return th_finish();
}
