/*
 * ZooKeeper fences and the "last fence granted" of lock_info, where the
 * fence is noted in the lock directory at the grant (not by the release).
 *
 *   test_zk_fences             starts its own server (tests/servers/zk.sh) in
 *                              $BATON_TEST_TMP/zk_fences and stops it at exit
 *
 *   (a) a holder SIGKILLed: once its session is gone, lock_info reports the
 *       killed holder's fence as the last one granted (the note was made at
 *       its grant; a note made by the release never came), and the next
 *       grant's fence is larger;
 *   (b) the lock directory deleted and made again (an operator, or the
 *       server removing an empty container): the next grant's fence is
 *       larger than every earlier one, and lock_info reports it after the
 *       release;
 *   (c) a server restart between two holders: the note survives it
 *       (persistent data), the next grant's fence is larger, lock_info
 *       reports it after the release;
 *   (d) fence_note=0 (no note): lock_info's answer for a name nobody holds is
 *       at or above every fence granted and below the next grant's;
 *   (e) a holder's node deleted by another client, for a free lock, a free
 *       lock another contender joined, and a grant after waiting: the holder
 *       learns it is lost (on_lost), the next grant's fence is larger.
 * (A kazoo holder between two baton holders: interop_kazoo.)
 *
 * Worker mode (the suite re-executes itself): --worker hold URI NAME WAIT_MS.
 */
#include "zkt.h"

#include <zookeeper/zookeeper.h>

#define T_MS 3000
#define ZKT_MARGIN_MS 6000

static char g_dir[1024];
static char g_srv[1200];
static char g_hosts[64];

static const char *uri_t(char *buf, size_t n) { return zkt_uri(buf, n, g_hosts, T_MS); }

/* lock_info's answer for NAME through C (held, fence). */
static int info_of(baton_client *c, const char *name, baton_lockinfo *out) {
    baton_lockinfo i = BATON_LOCK_INFO_INIT;
    int rc = baton_lock_info(c, name, &i);
    *out = i;
    return rc;
}

/* One grant on C: its fence (0 on failure), released. */
static uint64_t grant_once(baton_client *c, const char *name) {
    baton_lock *l = zkt_lock(c, name, NULL);
    uint64_t f = 0;
    if (baton_lock_acquire(l, 10000) == 0) {
        f = baton_lock_fence(l);
        if (baton_lock_release(l) != 0) f = 0;
    }
    baton_lock_free(l);
    return f;
}

/* (a) a holder killed: the note of its grant is what lock_info reports */
static void test_killed_holder_noted(void) {
    char uri[256], name[128];
    uri_t(uri, sizeof uri);
    zkt_name(name, sizeof name, "fences", "killed");
    baton_client *b = tl_client_open(uri);
    uint64_t f0 = grant_once(b, name); /* an earlier grant, released */
    CHECK(f0 > 0);
    tl_worker w;
    uint64_t fw = zkt_spawn_holder(&w, uri, name, 5000, 20000);
    CHECK(fw > f0);
    if (!fw) goto out;
    /* the note is sent, not waited for: a holder killed within microseconds
     * of its grant may die before the C client's I/O thread wrote it (then
     * lock_info shows the fence before it, as every kill did before) */
    tl_sleep_ms(200);
    CHECK(kill(w.pid, SIGKILL) == 0);
    tl_worker_reap(&w, 5000);
    /* the server ends the dead holder's session within its timeout */
    baton_lockinfo info;
    int64_t end = tl_now_ms() + T_MS + ZKT_MARGIN_MS;
    do {
        CHECK_RC(info_of(b, name, &info), 0);
        if (!info.held) break;
        tl_sleep_ms(100);
    } while (tl_now_ms() < end);
    CHECK(info.held == 0);
    fprintf(stderr, "   fences: released %llu, killed holder %llu; lock_info after the kill %llu\n",
            (unsigned long long)f0, (unsigned long long)fw, (unsigned long long)info.fence);
    CHECK(info.fence == fw); /* before: f0, the last release's note */
    uint64_t f1 = grant_once(b, name);
    CHECK(f1 > fw);
    CHECK_RC(info_of(b, name, &info), 0);
    CHECK(info.held == 0 && info.fence == f1);
out:
    baton_client_close(b);
}

static void zw(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
    (void)zh, (void)type, (void)state, (void)path, (void)ctx;
}

/* (b) the directory deleted and made again between two grants */
static void test_dir_recreated(void) {
    char uri[256], name[128], path[256];
    uri_t(uri, sizeof uri);
    zkt_name(name, sizeof name, "fences", "recreated");
    snprintf(path, sizeof path, "/baton/%s", name);
    baton_client *b = tl_client_open(uri);
    uint64_t f1 = grant_once(b, name);
    CHECK(f1 > 0);
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    zhandle_t *zh = zookeeper_init(g_hosts, zw, 10000, NULL, NULL, 0);
    for (int i = 0; zh && i < 200 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++) tl_sleep_ms(50);
    CHECK(zh && zoo_state(zh) == ZOO_CONNECTED_STATE);
    if (!zh) goto out;
    /* the directory is empty once the grant is released: delete it, as an
     * operator or the server's container sweep would */
    CHECK(zoo_delete(zh, path, -1) == ZOK);
    baton_lockinfo info;
    CHECK_RC(info_of(b, name, &info), 0);
    CHECK(info.held == 0 && info.fence == 0); /* the note went with the directory */
    /* made again by someone else, with other data, before the next grant */
    CHECK(zoo_create(zh, path, "x", 1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0) == ZOK);
    uint64_t f2 = grant_once(b, name);
    fprintf(stderr, "   fences: before the delete %llu, after it %llu\n", (unsigned long long)f1,
            (unsigned long long)f2);
    CHECK(f2 > f1);
    CHECK_RC(info_of(b, name, &info), 0);
    CHECK(info.held == 0 && info.fence == f2);
    /* and once more from the container baton makes itself */
    CHECK(zoo_delete(zh, path, -1) == ZOK);
    uint64_t f3 = grant_once(b, name);
    CHECK(f3 > f2);
    CHECK_RC(info_of(b, name, &info), 0);
    CHECK(info.held == 0 && info.fence == f3);
    zookeeper_close(zh);
out:
    baton_client_close(b);
}

/* (c) a server restart between two grants */
static void test_restart(void) {
    char uri[256], name[128];
    uri_t(uri, sizeof uri);
    zkt_name(name, sizeof name, "fences", "restart");
    baton_client *b = tl_client_open(uri);
    uint64_t f1 = grant_once(b, name);
    CHECK(f1 > 0);
    baton_client_close(b);
    CHECK(zkt_srv("restart", g_srv) == 0);
    b = tl_client_open(uri);
    baton_lockinfo info;
    int rc = BATON_EUNAVAILABLE;
    /* the restarted server may take a moment to serve (ZOOKEEPER-5051) */
    for (int i = 0; i < 50 && (rc = info_of(b, name, &info)) != 0; i++) tl_sleep_ms(200);
    CHECK_RC(rc, 0);
    CHECK(info.held == 0 && info.fence == f1);
    uint64_t f2 = grant_once(b, name);
    fprintf(stderr, "   fences: before the restart %llu, after it %llu\n", (unsigned long long)f1,
            (unsigned long long)f2);
    CHECK(f2 > f1);
    CHECK_RC(info_of(b, name, &info), 0);
    CHECK(info.held == 0 && info.fence == f2);
    baton_client_close(b);
}

/* (d) fence_note=0: no note; lock_info answers, for a name nobody holds, a
 * number at or above every fence granted and below every later one */
static void test_no_note(void) {
    char uri[300], name[128];
    snprintf(uri, sizeof uri, "zk://%s?session_timeout_ms=%d&fence_note=0", g_hosts, T_MS);
    zkt_name(name, sizeof name, "fences", "no-note");
    baton_client *b = tl_client_open(uri);
    baton_lockinfo info;
    uint64_t prev = 0;
    for (int i = 0; i < 5; i++) {
        uint64_t f = grant_once(b, name);
        CHECK(f > prev);
        CHECK_RC(info_of(b, name, &info), 0);
        CHECK(info.held == 0 && info.fence >= f);
        if (info.fence < f)
            fprintf(stderr, "   grant %d: fence %llu, lock_info %llu\n", i, (unsigned long long)f,
                    (unsigned long long)info.fence);
        prev = info.fence;
    }
    /* a holder killed: no note at all, the bound covers it */
    tl_worker w;
    uint64_t fw = zkt_spawn_holder(&w, uri, name, 5000, 20000);
    CHECK(fw > prev);
    if (fw) {
        CHECK(kill(w.pid, SIGKILL) == 0);
        tl_worker_reap(&w, 5000);
        int64_t end = tl_now_ms() + T_MS + ZKT_MARGIN_MS;
        do {
            CHECK_RC(info_of(b, name, &info), 0);
            if (!info.held) break;
            tl_sleep_ms(100);
        } while (tl_now_ms() < end);
        CHECK(info.held == 0 && info.fence >= fw);
        CHECK(grant_once(b, name) > info.fence);
    }
    baton_client_close(b);
}

/* The first child of ZooKeeper directory PATH whose name contains PART,
 * as a full path into OUT: 1 found, 0 not. */
static int child_path(zhandle_t *zh, const char *path, const char *part, char *out, size_t n) {
    struct String_vector sv = { 0, NULL };
    int found = 0;
    if (zoo_get_children(zh, path, 0, &sv) != ZOK) return 0;
    for (int i = 0; i < sv.count && !found; i++)
        if (strstr(sv.data[i], part)) {
            snprintf(out, n, "%s/%s", path, sv.data[i]);
            found = 1;
        }
    deallocate_String_vector(&sv);
    return found;
}

/* (e) the holder's watch on its own node, in its three forms: a free lock
 * granted by the acquire's first listing (that listing's child watch), the
 * same after another contender joined (the child watch fired: an exists
 * watch replaced it), and a grant after waiting (an exists watch armed at
 * the grant). Each holder's node deleted by another client: each learns
 * it is lost, and a new holder gets a larger fence. */
static void test_deleted_node_seen(void) {
    char uri[256], name[128], path[256], node[512];
    uri_t(uri, sizeof uri);
    zhandle_t *zh = zookeeper_init(g_hosts, zw, 10000, NULL, NULL, 0);
    for (int i = 0; zh && i < 200 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++) tl_sleep_ms(50);
    CHECK(zh && zoo_state(zh) == ZOO_CONNECTED_STATE);
    if (!zh) return;
    baton_client *a = tl_client_open(uri), *b = tl_client_open(uri);
    for (int form = 0; form < 3; form++) {
        zkt_lost lost;
        zkt_lost_init(&lost);
        snprintf(name, sizeof name, "zktest-fences-%ld-deleted-%d", (long)getpid(), form);
        snprintf(path, sizeof path, "/baton/%s", name);
        baton_lock *la = zkt_lock(a, name, &lost), *lb = zkt_lock(b, name, NULL);
        uint64_t fa = 0;
        if (form < 2) {
            CHECK_RC(baton_lock_acquire(la, 0), 0);
            if (form == 1) CHECK_RC(baton_lock_acquire(lb, 300), BATON_ETIMEDOUT); /* joins, leaves */
        } else {
            CHECK_RC(baton_lock_acquire(lb, 0), 0);
            zkt_acq w;
            zkt_acq_start(&w, la, 20000);
            tl_sleep_ms(300); /* A queued behind B */
            CHECK_RC(baton_lock_release(lb), 0);
            CHECK(zkt_acq_wait(&w, 20000));
            zkt_acq_join(&w);
            CHECK_RC(w.rc, 0);
        }
        fa = baton_lock_fence(la);
        CHECK(fa > 0 && baton_lock_held(la));
        CHECK(child_path(zh, path, "-lock-", node, sizeof node));
        CHECK(zoo_delete(zh, node, -1) == ZOK);
        CHECK(zkt_lost_wait(&lost, 10000) == 1);
        CHECK(!baton_lock_held(la));
        CHECK_RC(baton_lock_release(la), BATON_ELOST);
        CHECK_RC(baton_lock_acquire(lb, 5000), 0);
        CHECK(baton_lock_fence(lb) > fa);
        fprintf(stderr, "   form %d: deleted node seen (fence %llu, next %llu)\n", form, (unsigned long long)fa,
                (unsigned long long)baton_lock_fence(lb));
        CHECK_RC(baton_lock_release(lb), 0);
        baton_lock_free(la);
        baton_lock_free(lb);
    }
    baton_client_close(a);
    baton_client_close(b);
    zookeeper_close(zh);
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--worker")) {
        if (argc == 6 && !strcmp(argv[2], "hold")) return zkt_worker_hold(argv[3], argv[4], atoll(argv[5]));
        fprintf(stderr, "bad worker arguments\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(g_dir, sizeof g_dir, "%s", zkt_dir("fences"));
    snprintf(g_srv, sizeof g_srv, "%s/srv", g_dir);
    zkt_cleanup_at_exit(g_dir);
    int port = tl_server("zk", "start", g_srv, NULL, 1);
    snprintf(g_hosts, sizeof g_hosts, "127.0.0.1:%d", port);
    fprintf(stderr, "zk fences: server on %s\n", g_hosts);

    RUN(test_killed_holder_noted);
    RUN(test_dir_recreated);
    RUN(test_restart);
    RUN(test_no_note);
    RUN(test_deleted_node_seen);

    zkt_srv("stop", g_srv);
    return th_finish();
}
