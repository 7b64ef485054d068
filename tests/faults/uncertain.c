/* An acquire whose answer never came may still have been granted on the
 * server: the client gives such a grant back (owner-checked) instead of
 * leaving it held for a whole lease. A loopback proxy holds back exactly one
 * reply from the server (the acquire's) past the client's I/O timeout. */
#include "faults.h"

#include <poll.h>
#include <signal.h>

static int g_port, g_delay_ms;   /* g_delay_ms: hold the next reply back this long (atomic) */

typedef struct {
    int from, to, replies;
} pipe_arg;

static void *pump(void *p) {
    pipe_arg *a = p;
    char buf[65536];
    for (;;) {
        ssize_t n = read(a->from, buf, sizeof buf);
        if (n <= 0) break;
        if (a->replies) {
            int d = __atomic_exchange_n(&g_delay_ms, 0, __ATOMIC_SEQ_CST);
            if (d > 0) tl_sleep_ms(d);
        }
        if (write(a->to, buf, (size_t)n) != n) break;
    }
    shutdown(a->to, SHUT_WR);
    shutdown(a->from, SHUT_RD);
    return NULL;
}

static void *conn_main(void *p) {
    int c = (int)(intptr_t)p;
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)g_port);
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) { close(c); close(s); return NULL; }
    pipe_arg up = { c, s, 0 }, down = { s, c, 1 };
    pthread_t t;
    pthread_create(&t, NULL, pump, &up);
    pump(&down);
    pthread_join(t, NULL);
    close(c);
    close(s);
    return NULL;
}

static void *accept_main(void *p) {
    int l = (int)(intptr_t)p;
    for (;;) {
        int c = accept(l, NULL, NULL);
        if (c < 0) break;
        pthread_t t;
        pthread_create(&t, NULL, conn_main, (void *)(intptr_t)c);
        pthread_detach(t);
    }
    return NULL;
}

static void run(const char *layout, int rw) {
    const char *dir = ft_dir(rw ? "uncertain_rw" : layout);
    g_port = tl_server_start("redis", dir, NULL);
    int pport = 0, lfd = ft_listen(&pport);
    pthread_t at;
    pthread_create(&at, NULL, accept_main, (void *)(intptr_t)lfd);
    pthread_detach(at);

    char puri[256], duri[256];
    snprintf(puri, sizeof puri, "redis://127.0.0.1:%d/0?layout=%s&io_timeout_ms=300", pport, layout);
    snprintf(duri, sizeof duri, "redis://127.0.0.1:%d/0?layout=%s", g_port, layout);
    baton_client *c = NULL, *d = NULL;
    CHECK_RC(baton_client_open(&c, puri, NULL), 0);
    CHECK_RC(baton_client_open(&d, duri, NULL), 0);
    if (!c || !d) goto out;
    baton_rwlock *rwl = NULL;
    baton_lock *l = NULL, *other = NULL;
    if (rw) {
        CHECK_RC(baton_rwlock_open(&rwl, c, "ug", NULL), 0);
        l = rwl ? baton_rwlock_write(rwl) : NULL;
    } else {
        CHECK_RC(baton_lock_open(&l, c, "ug", NULL), 0);
    }
    CHECK_RC(baton_lock_open(&other, d, "ug", NULL), 0);
    if (!l || !other) goto out;
    /* once through, so the server knows the scripts (no NOSCRIPT round) */
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    CHECK_RC(baton_lock_release(l), 0);

    __atomic_store_n(&g_delay_ms, 1000, __ATOMIC_SEQ_CST);
    int rc = baton_lock_acquire(l, 0);
    fprintf(stderr, "   %s%s: acquire without an answer: %d (%s)\n", layout, rw ? " write side" : "", rc,
            baton_strerror(rc));
    CHECK(rc == BATON_EUNAVAILABLE);
    CHECK(!baton_lock_held(l));
    /* the server granted it, but the client gave it back at once */
    CHECK_RC(baton_lock_acquire(other, 0), 0);
    CHECK_RC(baton_lock_release(other), 0);
    if (rw) baton_rwlock_free(rwl);
    else baton_lock_free(l);
    baton_lock_free(other);
out:
    baton_client_close(c);
    baton_client_close(d);
    close(lfd);
    tl_server_stop("redis", dir);
}

static void test_plain_redisson(void) { run("redisson", 0); }
static void test_plain_simple(void) { run("simple", 0); }
static void test_write_side(void) { run("redisson", 1); }

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    RUN(test_plain_redisson);
    RUN(test_plain_simple);
    RUN(test_write_side);
    return th_finish();
}
