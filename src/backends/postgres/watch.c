/*
 * Session and row modes, and read-write locks: a held lock is its
 * connection (an advisory lock on its session, or a row locked by its open
 * transaction). The server may end a session on its own
 * (pg_terminate_backend, a shutdown, idle_session_timeout,
 * idle_in_transaction_session_timeout): it sends an error and closes, and
 * the lock is the next waiter's in that instant. The keeper's check of the
 * connection comes only every lease/3; this thread watches the held
 * connections' sockets so that the holder is told as soon as the server's
 * message arrives (baton_host_lost: held() answers 0 at once and the keeper
 * reports the loss).
 *
 * It also keeps each held connection's "confirmed alive" deadline: the
 * grant or the keeper's last successful check, plus the lock's lease (less
 * the core's margin). A connection not confirmed by then (a frozen link, a
 * stopped process) is reported lost on time, whatever call may still be
 * waiting on it (that call ends at its own deadline). The connection is not
 * cut then: a stopped process's server still holds the lock, and it is let go
 * by the release that follows the loss, once the application has stopped.
 * The two sides of a read-write lock share one connection: an entry each,
 * both reported when it ends.
 *
 * It never reads a connection (another thread may be using it): it polls,
 * and peeks at the first byte waiting. An idle held connection receives
 * nothing but that error ('E'), the close, or rarely a notice or a
 * parameter status: those mute the entry (only a close is watched for then)
 * until the keeper's next check has read them. Over TLS the byte is a record
 * header, so there too only the close counts. An entry is added after the
 * grant and removed before its connection is closed or given back to the
 * pool, and the peek happens under mu with the entry present: the socket
 * looked at is always the holder's.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pg_int.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct pgwatch {
    pglock *l;
    uint64_t fence;
    int fd;
    int busy;                /* a statement is running on the connection */
    int muted;               /* unsolicited data seen: only a close counts */
    int64_t alive_until;     /* confirmed alive until then (baton_now_ns) */
    int64_t validity_ns;     /* how long a confirmation lasts */
};

/* The core's lease validity: lease less 1 % and 2 ms (src/core/lock.c). */
static int64_t validity(uint32_t lease_ms)
{
    int64_t ns = (int64_t)lease_ms * 1000000LL;
    return ns - ns / 100 - 2000000LL;
}

static void wake(pgeng *e)
{
    if (e->wpipe[1] >= 0 && write(e->wpipe[1], "x", 1) < 0) { /* full: it wakes anyway */ }
}

/* e->mu held. The entry of L, or -1. */
static long find(pgeng *e, const pglock *l)
{
    for (size_t i = 0; i < e->wn; i++)
        if (e->wl[i].l == l) return (long)i;
    return -1;
}

/* e->mu held. */
static void drop(pgeng *e, size_t i)
{
    e->wl[i] = e->wl[--e->wn];
}

/* Whether the socket of entry I says its session is over; e->mu held. */
static int ended(pgeng *e, size_t i, short revents)
{
    char b;
    ssize_t r;
    if (revents & (POLLHUP | POLLERR | POLLRDHUP)) return 1;
    if (!(revents & POLLIN) || e->wl[i].muted) return 0;
    r = recv(e->wl[i].fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0) return 1;
    if (r < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    if (b == 'E') return 1;
    e->wl[i].muted = 1;
    return 0;
}

/* One lost grant found by the watcher (reported outside mu). */
typedef struct {
    pglock *l;
    uint64_t fence;
} gone;

static void *watcher(void *arg)
{
    pgeng *e = arg;
    struct pollfd *pf = NULL;
    gone *lost = NULL;
    size_t cap = 0;

    for (;;) {
        size_t n = 0, nl = 0;
        int64_t now, next = INT64_MAX;
        int timeout;
        baton_host *h;
        pthread_mutex_lock(&e->mu);
        if (e->stop) {
            pthread_mutex_unlock(&e->mu);
            break;
        }
        if (cap < e->wn + 1) {
            struct pollfd *p = realloc(pf, (e->wn + 1) * sizeof *p);
            gone *g = realloc(lost, (e->wn + 1) * sizeof *g);
            if (p) pf = p;
            if (g) lost = g;
            if (p && g) cap = e->wn + 1;
        }
        if (pf && lost && cap >= e->wn + 1) {
            pf[n++] = (struct pollfd){ e->wpipe[0], POLLIN, 0 };
            for (size_t i = 0; i < e->wn; i++) {
                if (e->wl[i].alive_until < next) next = e->wl[i].alive_until;
                if (!e->wl[i].busy)
                    pf[n++] = (struct pollfd){ e->wl[i].fd, (short)(e->wl[i].muted ? POLLRDHUP : POLLIN | POLLRDHUP), 0 };
            }
        }
        pthread_mutex_unlock(&e->mu);
        if (!n) {
            /* no memory for the poll set: the keeper's checks still run */
            usleep(100000);
            continue;
        }
        now = baton_now_ns();
        timeout = next == INT64_MAX ? 1000 : next <= now ? 0 : (int)((next - now + 999999) / 1000000LL);
        if (timeout > 1000) timeout = 1000;
        if (poll(pf, (nfds_t)n, timeout) < 0 && errno != EINTR) {
            usleep(10000);
            continue;
        }
        if (pf[0].revents) {
            char buf[64];
            while (read(e->wpipe[0], buf, sizeof buf) > 0) {}
        }
        pthread_mutex_lock(&e->mu);
        for (size_t k = 1; k < n; k++) {
            int end = 0;
            if (!pf[k].revents) continue;
            /* every entry of that socket (both sides of a read-write lock) */
            for (size_t i = 0; i < e->wn; i++) {
                if (e->wl[i].fd != pf[k].fd || e->wl[i].busy) continue;
                if (!end && !(end = ended(e, i, pf[k].revents))) break;
                baton_log(BATON_LOG_INFO, "postgres: lock '%s': the server ended its session", e->wl[i].l->name);
                lost[nl++] = (gone){ e->wl[i].l, e->wl[i].fence };
                drop(e, i--);
            }
        }
        now = baton_now_ns();
        for (size_t i = 0; i < e->wn; i++) {
            if (now < e->wl[i].alive_until) continue;
            /* not confirmed alive within its lease: lost for us now. The
             * connection is not cut: after a stop (the whole process
             * paused past its lease) the server still holds the lock, and
             * cutting it would hand the lock over before the application
             * has stopped using it (baton run kills its command first,
             * then releases, which lets go on the server). A check still
             * waiting on a frozen link ends at its own deadline. */
            baton_log(BATON_LOG_INFO, "postgres: lock '%s': its connection was not confirmed alive within "
                      "the lease; reported lost", e->wl[i].l->name);
            lost[nl++] = (gone){ e->wl[i].l, e->wl[i].fence };
            drop(e, i--);
        }
        h = e->host;
        pthread_mutex_unlock(&e->mu);
        /* outside mu: the core takes its own locks; a state freed
         * meanwhile is only compared, and the fence keeps a later grant of
         * the same state safe */
        for (size_t i = 0; i < nl && h; i++) baton_host_lost(h, lost[i].l, lost[i].fence);
    }
    free(pf);
    free(lost);
    return NULL;
}

void pg_watch_add(pgeng *e, pglock *l, PGconn *conn, int64_t confirmed_ns)
{
    int fd = conn ? PQsocket(conn) : -1;
    struct pgwatch *w;
    if (fd < 0) return;
    pthread_mutex_lock(&e->mu);
    if (!e->host || e->stop) goto out;      /* nobody to tell: the keeper's checks remain */
    if (!e->wthr_started) {
        if (pipe(e->wpipe)) {
            e->wpipe[0] = e->wpipe[1] = -1;
            goto out;
        }
        fcntl(e->wpipe[0], F_SETFL, O_NONBLOCK);
        fcntl(e->wpipe[1], F_SETFL, O_NONBLOCK);
        if (pthread_create(&e->wthr, NULL, watcher, e)) {
            close(e->wpipe[0]);
            close(e->wpipe[1]);
            e->wpipe[0] = e->wpipe[1] = -1;
            goto out;
        }
        e->wthr_started = 1;
    }
    if (e->wn == e->wcap) {
        size_t nc = e->wcap ? e->wcap * 2 : 8;
        if (!(w = realloc(e->wl, nc * sizeof *w))) goto out;
        e->wl = w;
        e->wcap = nc;
    }
    e->wl[e->wn++] = (struct pgwatch){ l, l->fence, fd, 0, 0, confirmed_ns + validity(l->lease_ms),
                                       validity(l->lease_ms) };
    wake(e);
out:
    pthread_mutex_unlock(&e->mu);
}

void pg_watch_del(pgeng *e, pglock *l)
{
    long i;
    pthread_mutex_lock(&e->mu);
    if ((i = find(e, l)) >= 0) {
        drop(e, (size_t)i);
        wake(e);
    }
    pthread_mutex_unlock(&e->mu);
}

void pg_watch_busy(pgeng *e, PGconn *conn, int busy, int64_t confirmed_ns)
{
    int fd = conn ? PQsocket(conn) : -1;
    if (fd < 0) return;
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->wn; i++) {
        if (e->wl[i].fd != fd) continue;
        e->wl[i].busy = busy;
        /* the statement has read whatever was waiting */
        if (!busy) e->wl[i].muted = 0;
        if (confirmed_ns && confirmed_ns + e->wl[i].validity_ns > e->wl[i].alive_until)
            e->wl[i].alive_until = confirmed_ns + e->wl[i].validity_ns;
    }
    wake(e);
    pthread_mutex_unlock(&e->mu);
}

void pg_watch_attach(void *eng, baton_host *h)
{
    pgeng *e = eng;
    pthread_mutex_lock(&e->mu);
    e->host = h;
    pthread_mutex_unlock(&e->mu);
}

void pg_watch_stop(pgeng *e)
{
    int started;
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    started = e->wthr_started;
    e->wthr_started = 0;
    wake(e);
    pthread_mutex_unlock(&e->mu);
    if (started) pthread_join(e->wthr, NULL);
    if (e->wpipe[0] >= 0) close(e->wpipe[0]);
    if (e->wpipe[1] >= 0) close(e->wpipe[1]);
    e->wpipe[0] = e->wpipe[1] = -1;
    free(e->wl);
    e->wl = NULL;
    e->wn = e->wcap = 0;
}
