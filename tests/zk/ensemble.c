/*
 * A lock on a 3-member ZooKeeper ensemble survives the death of the member
 * that leads the ensemble:
 *
 *   test_zk_ensemble           starts its own ensemble (tests/servers/zk.sh
 *                              ensemble-start) in $BATON_TEST_TMP/zk_ensemble
 *
 * A holder and two waiters (three processes, each with its own client on
 * all three members) share one lock. The leader member is killed (SIGKILL);
 * the ensemble elects another, the clients move to surviving members and keep
 * their sessions: the holder still holds, the waiters still wait, and when
 * the holder releases both waiters are granted in turn. Never two holders at
 * once (a flock(2)-guarded counter incremented inside the lock must read 1),
 * and the fences of the three grants increase in grant order.
 *
 * Worker mode: --worker queue URI NAME COUNTER LOG HOLD_MS
 *   says "WAITING", acquires, bumps COUNTER, appends its fence to LOG, says
 *   "GOT <fence> <counter>", holds HOLD_MS (or, when HOLD_MS < 0, until a
 *   "RELEASE" line; "HELD?" answers "HELD 0|1"), then says "RELEASED <rc>"
 *   and waits for EOF. From on_lost: "LOST".
 */
#include "zkt.h"

/* Sessions of 10 s: a new ensemble leader is elected and the clients have
 * reconnected within 1-3 s on loopback; 10 s leaves room for a busy
 * 2-core machine without making a wrong LOST likely. */
#define SESSION_MS 10000

static void append_line(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void append_line(const char *path, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, buf, (size_t)n) != n) {
        perror(path);
        exit(3);
    }
    close(fd);
}

static int worker_queue(const char *uri, const char *name, const char *counter, const char *log, int hold_ms) {
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    if (rc) {
        tl_out_line("ERR %d open: %s\n", rc, tl_lastmsg());
        return 2;
    }
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.on_lost = zkt_worker_lost;
    baton_lock *l = NULL;
    if ((rc = baton_lock_open(&l, c, name, &o)) != 0) {
        tl_out_line("ERR %d lock_open: %s\n", rc, tl_lastmsg());
        return 2;
    }
    tl_out_line("WAITING\n");
    if ((rc = baton_lock_acquire(l, 120000)) != 0) {
        tl_out_line("ERR %d acquire: %s\n", rc, tl_lastmsg());
        return 2;
    }
    uint64_t fence = baton_lock_fence(l);
    long inside = tl_counter_add(counter, 1, NULL);
    append_line(log, "%llu\n", (unsigned long long)fence);
    tl_out_line("GOT %llu %ld\n", (unsigned long long)fence, inside);
    if (hold_ms >= 0) {
        tl_sleep_ms(hold_ms);
    } else {
        char line[128];
        for (;;) {
            if (tl_read_line(0, line, sizeof line, 600000) < 0) break;
            if (!strcmp(line, "HELD?")) tl_out_line("HELD %d\n", baton_lock_held(l));
            else if (!strcmp(line, "RELEASE")) break;
        }
    }
    tl_counter_add(counter, -1, NULL);
    tl_out_line("RELEASED %d\n", baton_lock_release(l));
    tl_wait_for_line("EXIT");
    baton_lock_free(l);
    baton_client_close(c);
    return 0;
}

static int spawn_queue(tl_worker *w, const char *uri, const char *name, const char *counter, const char *log,
                       int hold_ms) {
    char hs[32];
    snprintf(hs, sizeof hs, "%d", hold_ms);
    char *argv[] = { "zk-worker", "--worker", "queue", (char *)uri, (char *)name, (char *)counter, (char *)log,
                     hs, NULL };
    if (tl_worker_spawn(w, argv) != 0) return -1;
    char line[256];
    return tl_expect_line(w, "WAITING", line, sizeof line, 30000);
}

static char g_dir[1024];
static char g_ens[1200];
static char g_hosts[256];

static void test_leader_killed(void) {
    char uri[512], name[128], counter[1300], log[1300], line[256];
    zkt_uri(uri, sizeof uri, g_hosts, SESSION_MS);
    zkt_name(name, sizeof name, "ensemble", "leader-killed");
    snprintf(counter, sizeof counter, "%s/counter", g_dir);
    snprintf(log, sizeof log, "%s/fences", g_dir);
    tl_counter_init(counter, 0);
    unlink(log);

    tl_worker h, w1, w2;
    CHECK(spawn_queue(&h, uri, name, counter, log, -1) == 0);
    CHECK(tl_expect_line(&h, "GOT ", line, sizeof line, 30000) == 0);
    uint64_t fh = strtoull(line + 4, NULL, 10);
    CHECK(fh > 0);
    CHECK(spawn_queue(&w1, uri, name, counter, log, 300) == 0);
    CHECK(spawn_queue(&w2, uri, name, counter, log, 300) == 0);
    tl_sleep_ms(1000); /* both queued (their "WAITING" comes just before the acquire) */

    int old = tl_zk_leader(g_ens);
    CHECK(old > 0);
    fprintf(stderr, "   ensemble leader: member %d; killing it\n", old);
    CHECK(tl_zk_member("member-kill", g_ens, old) == 0);
    int now = -1;
    int64_t end = tl_now_ms() + 30000;
    while ((now = tl_zk_leader(g_ens)) <= 0 && tl_now_ms() < end) tl_sleep_ms(200);
    fprintf(stderr, "   new leader: member %d\n", now);
    CHECK(now > 0 && now != old);

    /* The clients have moved to the surviving members with their sessions:
     * the holder still holds, the waiters are still waiting. Give them a
     * moment to reconnect first (a wrong LOST would show here). */
    tl_sleep_ms(2000);
    tl_send_line(&h, "HELD?\n");
    CHECK(tl_expect_line(&h, "HELD 1", line, sizeof line, 15000) == 0);
    CHECK(tl_read_line(w1.from, line, sizeof line, 100) < 0);
    CHECK(tl_read_line(w2.from, line, sizeof line, 100) < 0);

    tl_send_line(&h, "RELEASE\n");
    CHECK(tl_expect_line(&h, "RELEASED 0", line, sizeof line, 15000) == 0);
    /* Both waiters are granted, one after the other. */
    tl_worker *ws[2] = { &w1, &w2 };
    for (int i = 0; i < 2; i++) {
        CHECK(tl_expect_line(ws[i], "GOT ", line, sizeof line, 60000) == 0);
        char *sp = strchr(line + 4, ' ');
        CHECK(sp && atol(sp + 1) == 1); /* alone inside */
        CHECK(tl_expect_line(ws[i], "RELEASED 0", line, sizeof line, 60000) == 0);
    }
    tl_worker *all[3] = { &h, &w1, &w2 };
    for (int i = 0; i < 3; i++) {
        tl_send_line(all[i], "EXIT\n");
        CHECK(tl_exited_ok(tl_worker_reap(all[i], 20000)));
    }
    CHECK(tl_counter_read(counter) == 0);

    /* The fences, in grant order, strictly increase; the first is the holder's. */
    FILE *f = fopen(log, "r");
    unsigned long long fences[8];
    int n = 0;
    while (f && n < 8 && fscanf(f, "%llu", &fences[n]) == 1) n++;
    if (f) fclose(f);
    CHECK(n == 3);
    if (n == 3) {
        fprintf(stderr, "   fences in grant order: %llu %llu %llu\n", fences[0], fences[1], fences[2]);
        CHECK(fences[0] == fh);
        CHECK(fences[0] < fences[1] && fences[1] < fences[2]);
    }

    /* The killed member comes back and the ensemble serves on. */
    CHECK(tl_zk_member("member-start", g_ens, old) == 0);
    baton_client *c = tl_client_open(uri);
    baton_lock *l = zkt_lock(c, name, NULL);
    CHECK_RC(baton_lock_acquire(l, 10000), 0);
    CHECK(baton_lock_fence(l) > (n == 3 ? fences[2] : 0));
    CHECK_RC(baton_lock_release(l), 0);
    baton_lock_free(l);
    baton_client_close(c);
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--worker")) {
        if (argc == 8 && !strcmp(argv[2], "queue"))
            return worker_queue(argv[3], argv[4], argv[5], argv[6], atoi(argv[7]));
        fprintf(stderr, "bad worker arguments\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(g_dir, sizeof g_dir, "%s", zkt_dir("ensemble"));
    snprintf(g_ens, sizeof g_ens, "%s/ens", g_dir);
    zkt_cleanup_at_exit(g_dir);
    tl_zk_ensemble_start(g_ens, 3, g_hosts, sizeof g_hosts, 1);
    fprintf(stderr, "zk ensemble: %s\n", g_hosts);

    RUN(test_leader_killed);

    tl_zk_ensemble_stop(g_ens);
    return th_finish();
}
