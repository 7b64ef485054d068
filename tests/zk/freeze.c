/*
 * A frozen link between a client and its engine (tests/servers/link.sh
 * freeze: socat stopped, the sockets open, nothing moves — a partition, a
 * dead switch, a paused VM): no engine call may wait past its deadline, and
 * a holder learns it lost its lock before anyone else is granted it.
 *
 *   test_zk_freeze ENGINE SHORT_URI LONG_URI DIRECT_URI
 *
 * Built twice: test_zk_freeze (tests/zk) and test_etcd_freeze (tests/etcd).
 * In the URIs "{link}" is the port of the link (started here in front of the
 * ENGINE's fixture server) and "{port}" the fixture server's own port.
 * SHORT_URI has a short session/lease (ZooKeeper session_timeout_ms=3000,
 * etcd ttl=2), LONG_URI the default one (10 s, 30 s), DIRECT_URI does not
 * go through the link. Clients use io_timeout_ms = IO_MS.
 *
 *   (a) holder: a client holding a lock through the link (short session)
 *       has its link frozen; another client (direct) waits for the lock.
 *       The holder's on_lost must run, and held() answer 0, before the other
 *       client is granted — and within the session/lease (+ SLACK_MS);
 *   (b) waiter: a client waiting through the link (long session, wait
 *       WAIT_MS) has its link frozen while another client holds the lock:
 *       its acquire returns an error within WAIT_MS + SLACK_MS (before the
 *       fix: when the C client gave the connection up, 2/3 of its session
 *       timeout, or the wait plus a whole io timeout for etcd's clean-up);
 *   (c) calls on a frozen link without a wait of their own — a try, a
 *       release, lock_info, freeing a held lock, closing the client —
 *       return within IO_MS + SLACK_MS.
 *
 * Every lateness (return time minus deadline) is printed ("late: ...") for
 * the engine's doc. Only the bounds that are the point are asserted, with
 * SLACK_MS of room for a loaded 2-core machine; the order "lost before the
 * other grant" is the correctness check.
 */
#include <baton.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"
#include "../common/testlib.h"

#define IO_MS 2000
#define WAIT_MS 2500
#define SLACK_MS 1500

static const char *g_engine;
static char g_link_dir[1024];
static char g_short[1024], g_long[1024], g_direct[1024];
static char g_prefix[96];
static int g_session_ms;        /* the short session/lease, for (a)'s bound */

/* ---- the link ------------------------------------------------------------ */

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

static void link_cleanup(void)
{
    if (g_link_dir[0]) link_cmd("stop");
}

/* TEMPLATE with "{link}" -> LINK and "{port}" -> PORT. */
static void fill(char *out, size_t n, const char *tmpl, int link, int port)
{
    size_t o = 0;
    for (const char *p = tmpl; *p && o + 1 < n;) {
        if (!strncmp(p, "{link}", 6)) {
            o += (size_t)snprintf(out + o, n - o, "%d", link);
            p += 6;
        } else if (!strncmp(p, "{port}", 6)) {
            o += (size_t)snprintf(out + o, n - o, "%d", port);
            p += 6;
        } else {
            out[o++] = *p++;
        }
    }
    out[o < n ? o : n - 1] = 0;
}

static baton_client *client(const char *uri)
{
    baton_client_options o = BATON_CLIENT_OPTIONS_INIT;
    baton_client *c = NULL;
    o.io_timeout_ms = IO_MS;
    MUST(baton_client_open(&c, uri, &o));
    return c;
}

/* ---- on_lost and acquires on threads ---------------------------------------- */

typedef struct {
    atomic_int count;
    _Atomic int64_t t_ms;
} lost_rec;

static void on_lost(baton_lock *l, void *payload)
{
    (void)l;
    lost_rec *r = payload;
    int64_t zero = 0;
    atomic_compare_exchange_strong(&r->t_ms, &zero, tl_now_ms());
    atomic_fetch_add(&r->count, 1);
}

typedef struct {
    baton_lock *l;
    int64_t wait_ms;
    int rc;
    _Atomic int64_t t_done;
    atomic_int done;
    pthread_t th;
} acq;

static void *acq_main(void *p)
{
    acq *a = p;
    a->rc = baton_lock_acquire(a->l, a->wait_ms);
    atomic_store(&a->t_done, tl_now_ms());
    atomic_store(&a->done, 1);
    return NULL;
}

static void acq_start(acq *a, baton_lock *l, int64_t wait_ms)
{
    memset(a, 0, sizeof *a);
    a->l = l;
    a->wait_ms = wait_ms;
    atomic_init(&a->done, 0);
    atomic_init(&a->t_done, 0);
    pthread_create(&a->th, NULL, acq_main, a);
}

static int acq_wait(acq *a, int timeout_ms)
{
    int64_t end = tl_now_ms() + timeout_ms;
    while (!atomic_load(&a->done) && tl_now_ms() < end) tl_sleep_ms(5);
    return atomic_load(&a->done);
}

static void acq_join(acq *a)
{
    if (!acq_wait(a, 0)) {
        baton_lock_cancel(a->l);
        if (!acq_wait(a, 60000)) {
            fprintf(stderr, "FATAL: an acquire ignores cancel\n");
            th_failed++;
            exit(th_finish());
        }
    }
    pthread_join(a->th, NULL);
}

/* ---- (a) the holder's link freezes ----------------------------------------- */

static void test_holder_frozen(void)
{
    char name[256];
    lost_rec lost;
    acq w;
    snprintf(name, sizeof name, "%sholder", g_prefix);
    atomic_init(&lost.count, 0);
    atomic_init(&lost.t_ms, 0);

    baton_client *h = client(g_short), *d = client(g_direct);
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.on_lost = on_lost;
    o.on_lost_payload = &lost;
    baton_lock *lh = NULL, *ld = NULL;
    MUST(baton_lock_open(&lh, h, name, &o));
    MUST(baton_lock_open(&ld, d, name, NULL));
    CHECK_RC(baton_lock_acquire(lh, 5000), 0);
    uint64_t fh = baton_lock_fence(lh);
    acq_start(&w, ld, 60000);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&w.done));

    int64_t t0 = tl_now_ms();
    CHECK(link_cmd("freeze") == 0);
    /* watch held() from here: the first time it answers 0 */
    int64_t t_unheld = 0;
    while (tl_now_ms() - t0 < 4 * g_session_ms + 20000 && !(t_unheld && atomic_load(&w.done))) {
        if (!t_unheld && !baton_lock_held(lh)) t_unheld = tl_now_ms();
        tl_sleep_ms(5);
    }
    acq_wait(&w, 0);
    int64_t t_lost = atomic_load(&lost.t_ms), t_grant = atomic_load(&w.t_done);
    fprintf(stderr, "   late: %s holder: held()=0 at +%lld ms, on_lost at +%lld ms, other client granted at "
            "+%lld ms (session/lease %d ms)\n", g_engine, (long long)(t_unheld ? t_unheld - t0 : -1),
            (long long)(t_lost ? t_lost - t0 : -1), (long long)(t_grant ? t_grant - t0 : -1), g_session_ms);
    CHECK(atomic_load(&lost.count) >= 1);
    CHECK(t_unheld > 0);
    CHECK(atomic_load(&w.done));
    CHECK_RC(w.rc, 0);
    /* the point: the holder knew before the other client was granted */
    CHECK(t_lost > 0 && t_grant > 0 && t_lost <= t_grant);
    CHECK(t_unheld > 0 && t_grant > 0 && t_unheld <= t_grant);
    CHECK(t_lost > 0 && t_lost - t0 <= g_session_ms + SLACK_MS);
    if (w.rc == 0) CHECK(baton_lock_fence(ld) > fh);

    /* (c) calls without a wait, on the still frozen link: a release */
    int64_t t1 = tl_now_ms();
    int rc = baton_lock_release(lh);
    int64_t took = tl_now_ms() - t1;
    fprintf(stderr, "   late: %s release on a frozen link: rc %d, %lld ms (io timeout %d ms)\n", g_engine, rc,
            (long long)took, IO_MS);
    CHECK(rc != 0);
    CHECK(took <= IO_MS + SLACK_MS);

    /* a short wait on the client whose session/lease is gone: a new one
     * must be asked for through the frozen link, within the wait */
    t1 = tl_now_ms();
    rc = baton_lock_acquire(lh, 500);
    took = tl_now_ms() - t1;
    fprintf(stderr, "   late: %s acquire (wait 500 ms) needing a new session/lease on a frozen link: rc %d, "
            "returned %lld ms after its deadline\n", g_engine, rc, (long long)(took - 500));
    CHECK(rc != 0);
    CHECK(took - 500 <= 1000);
    if (rc == 0) baton_lock_release(lh);

    CHECK(link_cmd("thaw") == 0);
    if (w.rc == 0) CHECK_RC(baton_lock_release(ld), 0);
    acq_join(&w);
    baton_lock_free(ld);
    baton_lock_free(lh);
    baton_client_close(d);
    baton_client_close(h);
}

/* ---- (b) a waiter's link freezes; (c) a try and lock_info ---------------------- */

static void test_waiter_frozen(void)
{
    char name[256];
    acq w;
    snprintf(name, sizeof name, "%swaiter", g_prefix);
    baton_client *d = client(g_direct), *c = client(g_long);
    baton_lock *ld = NULL, *lw = NULL;
    MUST(baton_lock_open(&ld, d, name, NULL));
    MUST(baton_lock_open(&lw, c, name, NULL));
    CHECK_RC(baton_lock_acquire(ld, 5000), 0);

    int64_t t0 = tl_now_ms();
    acq_start(&w, lw, WAIT_MS);
    tl_sleep_ms(500); /* queued and watching */
    CHECK(link_cmd("freeze") == 0);
    acq_wait(&w, WAIT_MS + 20000);
    int64_t late = atomic_load(&w.t_done) - (t0 + WAIT_MS);
    fprintf(stderr, "   late: %s waiter (wait %d ms) on a frozen link: rc %d, returned %lld ms after its deadline\n",
            g_engine, WAIT_MS, w.rc, (long long)late);
    CHECK(atomic_load(&w.done));
    CHECK(w.rc != 0);
    CHECK(late <= SLACK_MS);
    acq_join(&w);

    /* a try on the frozen link */
    int64_t t1 = tl_now_ms();
    int rc = baton_lock_acquire(lw, 0);
    int64_t took = tl_now_ms() - t1;
    fprintf(stderr, "   late: %s try on a frozen link: rc %d, %lld ms (io timeout %d ms)\n", g_engine, rc,
            (long long)took, IO_MS);
    CHECK(rc != 0);
    CHECK(took <= IO_MS + SLACK_MS);
    if (rc == 0) baton_lock_release(lw);

    /* lock_info on the frozen link */
    baton_lockinfo li = BATON_LOCK_INFO_INIT;
    t1 = tl_now_ms();
    rc = baton_lock_info(c, name, &li);
    took = tl_now_ms() - t1;
    fprintf(stderr, "   late: %s lock_info on a frozen link: rc %d, %lld ms (io timeout %d ms)\n", g_engine, rc,
            (long long)took, IO_MS);
    CHECK(took <= IO_MS + SLACK_MS);

    CHECK(link_cmd("thaw") == 0);
    CHECK_RC(baton_lock_release(ld), 0);
    /* the link works again: the waiter's client recovers */
    rc = baton_lock_acquire(lw, 20000);
    CHECK_RC(rc, 0);
    if (rc) {
        baton_lockinfo li2 = BATON_LOCK_INFO_INIT;
        int irc = baton_lock_info(d, name, &li2);
        fprintf(stderr, "   after the thaw: acquire %d (%s); lock_info %d: held %d holder '%s' queue %lld\n", rc,
                tl_lastmsg(), irc, li2.held, li2.holder, (long long)li2.queue_length);
    }
    CHECK_RC(baton_lock_release(lw), 0);
    baton_lock_free(lw);
    baton_lock_free(ld);
    int64_t t2 = tl_now_ms();
    baton_client_close(c);
    baton_client_close(d);
    fprintf(stderr, "   close: %lld ms\n", (long long)(tl_now_ms() - t2));
}

/* ---- (c) closing a client whose link is frozen ------------------------------- */

static void test_close_frozen(void)
{
    char name[256];
    snprintf(name, sizeof name, "%sclose", g_prefix);
    baton_client *c = client(g_long);
    baton_lock *l = NULL;
    MUST(baton_lock_open(&l, c, name, NULL));
    CHECK_RC(baton_lock_acquire(l, 5000), 0);
    CHECK(link_cmd("freeze") == 0);
    int64_t t0 = tl_now_ms();
    baton_lock_free(l); /* releases: a call on the frozen link */
    int64_t t1 = tl_now_ms();
    baton_client_close(c);
    int64_t t2 = tl_now_ms();
    fprintf(stderr, "   late: %s lock_free (release) on a frozen link %lld ms, client_close %lld ms (io timeout %d ms)\n",
            g_engine, (long long)(t1 - t0), (long long)(t2 - t1), IO_MS);
    CHECK(t1 - t0 <= IO_MS + SLACK_MS);
    CHECK(t2 - t1 <= IO_MS + SLACK_MS);
    CHECK(link_cmd("thaw") == 0);
}

/* $FREEZE_LOG=1: the engine's log on stderr, with times (for a failing run). */
static int64_t g_t0;
static void log_cb(int level, const char *message, void *payload)
{
    (void)payload;
    if (level <= BATON_LOG_INFO || getenv("FREEZE_LOG_DEBUG"))
        fprintf(stderr, "   [%6lld ms] %s\n", (long long)(tl_now_ms() - g_t0), message);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 5) {
        fprintf(stderr, "usage: %s ENGINE SHORT_URI LONG_URI DIRECT_URI\n", argv[0]);
        return 2;
    }
    g_engine = argv[1];
    g_t0 = tl_now_ms();
    if (getenv("FREEZE_LOG")) baton_log_set(log_cb, NULL);
    int port = tl_fixture_port(g_engine);
    if (port <= 0) return tl_skip_status("no fixture server (no port file)", 1);
    if (tl_sh("command -v socat >/dev/null") != 0) return tl_skip_status("socat is not installed", 1);
    const char *tmp = getenv("BATON_TEST_TMP");
    snprintf(g_link_dir, sizeof g_link_dir, "%s/%s_freeze_link_%ld", tmp && *tmp ? tmp : "/tmp", g_engine,
             (long)getpid());
    atexit(link_cleanup);
    int link = link_start(port);
    if (link <= 0) {
        fprintf(stderr, "cannot start the link\n");
        return 1;
    }
    fill(g_short, sizeof g_short, argv[2], link, port);
    fill(g_long, sizeof g_long, argv[3], link, port);
    fill(g_direct, sizeof g_direct, argv[4], link, port);
    g_session_ms = strstr(g_short, "session_timeout_ms=3000") ? 3000 : 2000;
    snprintf(g_prefix, sizeof g_prefix, "freeze-test/%ld-%ld/", (long)getpid(), (long)(time(NULL) % 100000));
    fprintf(stderr, "frozen link (%s): short %s, long %s, direct %s\n", g_engine, g_short, g_long, g_direct);
    RUN(test_holder_frozen);
    RUN(test_waiter_frozen);
    RUN(test_close_frozen);
    return th_finish();
}
