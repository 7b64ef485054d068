/*
 * The watcher: one thread per client, started by the first statement, that
 * does two things no statement can do for itself.
 *
 * 1. It watches the connections that hold a lock (session mode's GET_LOCK,
 *    row mode's open transaction). The server may end one on its own (KILL
 *    CONNECTION, a shutdown, wait_timeout): the lock is the next waiter's in
 *    that instant, and the keeper's check of the connection comes only every
 *    lease/3. An idle held connection receives nothing unless the server
 *    closed it or sent its last words (an error packet: 0xFF after the
 *    4-byte header) before closing, so the thread polls the sockets (never
 *    reading them: the lock's own thread may be using the connection) and
 *    reports the loss as soon as the close or the error arrives
 *    (baton_host_lost: held() answers 0 at once, the keeper calls on_lost).
 *    Anything else waiting on an idle connection mutes its entry (only a
 *    close counts then) until the connection's next statement has read it;
 *    over TLS the bytes are records, so there too only the close counts.
 *
 * 2. It enforces the deadline of every statement (my_exec_dl): a
 *    statement registers a guard with its socket and deadline; one still
 *    running at its deadline has its socket shut down (shutdown(2), which
 *    never blocks), so the blocked read returns at once, on a frozen link
 *    too, and the connection is closed by its owner. Connector/C's own
 *    timeouts count whole seconds and restart with every packet.
 *
 * Hot path: a guard is two short critical sections; the thread is woken
 * (a pipe write) only when a guard's deadline comes before its next look,
 * which is never more than WATCH_IDLE_MS away, so statements with the
 * usual I/O deadline (seconds) never wake it.
 *
 * An entry is added after the grant and removed before its connection is
 * used, closed or pooled, all under mu, and the thread looks at a socket
 * again (poll, peek) under mu with its entry present: the socket looked at
 * is always the holder's, even when a descriptor number was reused.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "my_int.h"
#include "core/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define WATCH_IDLE_MS 1000       /* the thread looks at least this often */
#define WATCH_HELD_MS 50         /* ... and this often while it watches held connections: a new
                                  * entry is watched from then on without waking the thread */

struct mywatch {
    mylock *l;
    uint64_t fence;
    int fd;
    int tls;                 /* encrypted: only a close counts */
    int busy;                /* the lock's thread is using the connection */
    int muted;               /* unsolicited bytes seen: only a close counts */
};

static void wake(myeng *e)
{
    if (e->wpipe[1] >= 0 && write(e->wpipe[1], "x", 1) < 0) { /* full: it wakes anyway */ }
}

/* e->mu held. */
static long find(myeng *e, const mylock *l)
{
    for (size_t i = 0; i < e->wn; i++)
        if (e->wl[i].l == l) return (long)i;
    return -1;
}

/* Whether entry I's connection was ended by the server, looked at now;
 * e->mu held. */
static int ended(myeng *e, size_t i)
{
    struct mywatch *w = &e->wl[i];
    struct pollfd p = { w->fd, (short)(POLLIN | POLLRDHUP), 0 };
    unsigned char b[5];
    ssize_t r;

    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return 1;
    if (!(p.revents & POLLIN) || w->muted || w->tls) {
        if (p.revents & POLLIN) w->muted = 1;
        return 0;
    }
    r = recv(w->fd, b, sizeof b, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0) return 1;
    if (r < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    if (r == (ssize_t)sizeof b && b[4] == 0xFF) return 1;   /* an error packet: the server's last words */
    if (r < (ssize_t)sizeof b) return 0;                     /* the rest is on its way */
    w->muted = 1;
    return 0;
}

/* e->mu held: the guards whose deadline passed are cut; returns the
 * earliest deadline still ahead. */
static int64_t cut_overdue(myeng *e, int64_t now)
{
    int64_t next = INT64_MAX;
    for (myguard *g = e->guards; g; g = g->next) {
        if (g->cut) continue;
        if (now >= g->deadline_ns) {
            g->cut = 1;
            if (g->fd >= 0) shutdown(g->fd, SHUT_RDWR);
        } else if (g->deadline_ns < next) {
            next = g->deadline_ns;
        }
    }
    return next;
}

static void *watcher(void *arg)
{
    myeng *e = arg;
    struct pollfd *pf = NULL;
    size_t cap = 0;

    for (;;) {
        size_t n = 0;
        int64_t now, next, ms;
        pthread_mutex_lock(&e->mu);
        if (e->stop) {
            pthread_mutex_unlock(&e->mu);
            break;
        }
        now = baton_now_ns();
        next = cut_overdue(e, now);
        ms = e->wn ? WATCH_HELD_MS : WATCH_IDLE_MS;
        if (next > now + ms * 1000000LL) next = now + ms * 1000000LL;
        e->w_next = next;
        if (cap < e->wn + 1) {
            struct pollfd *p = realloc(pf, (e->wn + 1) * sizeof *p);
            if (p) {
                pf = p;
                cap = e->wn + 1;
            }
        }
        if (pf) {
            pf[n++] = (struct pollfd){ e->wpipe[0], POLLIN, 0 };
            for (size_t i = 0; i < e->wn && n < cap; i++)
                if (!e->wl[i].busy)
                    pf[n++] = (struct pollfd){ e->wl[i].fd,
                                               (short)(e->wl[i].muted || e->wl[i].tls ? POLLRDHUP : POLLIN | POLLRDHUP), 0 };
        }
        pthread_mutex_unlock(&e->mu);
        ms = (next - now + 999999) / 1000000;
        if (ms < 0) ms = 0;
        if (!pf) {
            /* no memory for the poll set: guards are still cut on time */
            struct pollfd p = { e->wpipe[0], POLLIN, 0 };
            if (poll(&p, 1, (int)ms) > 0) {
                char buf[64];
                while (read(e->wpipe[0], buf, sizeof buf) > 0) {}
            }
            continue;
        }
        if (poll(pf, (nfds_t)n, (int)ms) < 0 && errno != EINTR) {
            usleep(10000);
            continue;
        }
        if (pf[0].revents) {
            char buf[64];
            while (read(e->wpipe[0], buf, sizeof buf) > 0) {}
        }
        for (size_t k = 1; k < n; k++) {
            mylock *l = NULL;
            uint64_t fence = 0;
            baton_host *h;
            if (!pf[k].revents) continue;
            pthread_mutex_lock(&e->mu);
            for (size_t i = 0; i < e->wn; i++) {
                if (e->wl[i].fd != pf[k].fd || e->wl[i].busy) continue;
                if (ended(e, i)) {
                    l = e->wl[i].l;
                    fence = e->wl[i].fence;
                    e->wl[i] = e->wl[--e->wn];
                }
                break;
            }
            h = e->bhost;
            pthread_mutex_unlock(&e->mu);
            /* outside mu: the core takes its own locks; the fence keeps a
             * later grant of the same state safe */
            if (l && h) {
                baton_log(BATON_LOG_INFO, "mysql: a lock's connection was ended by the server: lost");
                baton_host_lost(h, l, fence);
            }
        }
    }
    free(pf);
    return NULL;
}

/* e->mu held: the thread runs (0), or could not be started. */
static int start(myeng *e)
{
    if (e->wthr_started) return 0;
    if (e->stop) return -1;
    if (pipe(e->wpipe)) {
        e->wpipe[0] = e->wpipe[1] = -1;
        return -1;
    }
    fcntl(e->wpipe[0], F_SETFL, O_NONBLOCK);
    fcntl(e->wpipe[1], F_SETFL, O_NONBLOCK);
    fcntl(e->wpipe[0], F_SETFD, FD_CLOEXEC);
    fcntl(e->wpipe[1], F_SETFD, FD_CLOEXEC);
    e->w_next = INT64_MAX;
    if (pthread_create(&e->wthr, NULL, watcher, e)) {
        close(e->wpipe[0]);
        close(e->wpipe[1]);
        e->wpipe[0] = e->wpipe[1] = -1;
        return -1;
    }
    e->wthr_started = 1;
    return 0;
}

int my_guard_add(myeng *e, myguard *g, int fd, int64_t deadline_ns)
{
    g->fd = fd;
    g->deadline_ns = deadline_ns;
    g->cut = 0;
    pthread_mutex_lock(&e->mu);
    if (start(e)) {
        pthread_mutex_unlock(&e->mu);
        return baton_seterr(BATON_EIO, 0, "mysql: cannot start the watcher thread");
    }
    g->next = e->guards;
    e->guards = g;
    if (deadline_ns < e->w_next) {
        e->w_next = deadline_ns;
        wake(e);
    }
    pthread_mutex_unlock(&e->mu);
    return 0;
}

void my_guard_sooner(myeng *e, myguard *g, int64_t deadline_ns)
{
    if (deadline_ns >= g->deadline_ns) return;
    g->deadline_ns = deadline_ns;
    if (deadline_ns < e->w_next) {
        e->w_next = deadline_ns;
        wake(e);
    }
}

int my_guard_del(myeng *e, myguard *g)
{
    int cut;
    pthread_mutex_lock(&e->mu);
    for (myguard **pp = &e->guards; *pp; pp = &(*pp)->next)
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    cut = g->cut;
    pthread_mutex_unlock(&e->mu);
    return cut;
}

void my_watch_add(myeng *e, mylock *l)
{
    int fd = l->conn ? (int)mysql_get_socket(l->conn) : -1;
    struct mywatch *w;
    if (fd < 0) return;
    pthread_mutex_lock(&e->mu);
    if (!e->bhost || start(e)) goto out;      /* nobody to tell: the keeper's checks remain */
    if (e->wn == e->wcap) {
        size_t nc = e->wcap ? e->wcap * 2 : 8;
        if (!(w = realloc(e->wl, nc * sizeof *w))) goto out;
        e->wl = w;
        e->wcap = nc;
    }
    e->wl[e->wn++] = (struct mywatch){ l, l->fence, fd, mysql_get_ssl_cipher(l->conn) != NULL, 0, 0 };
    /* a grant per lock/unlock pair: wake the thread only when its next
     * look (which takes the new entry in) is far */
    if (e->w_next > baton_now_ns() + WATCH_HELD_MS * 1000000LL) {
        e->w_next = 0;
        wake(e);
    }
out:
    pthread_mutex_unlock(&e->mu);
}

void my_watch_del(myeng *e, mylock *l)
{
    long i;
    pthread_mutex_lock(&e->mu);
    /* no wake-up: a socket left in the thread's poll set only costs it one
     * look, which finds no entry for it */
    if ((i = find(e, l)) >= 0) e->wl[i] = e->wl[--e->wn];
    pthread_mutex_unlock(&e->mu);
}

void my_watch_busy(myeng *e, mylock *l, int busy)
{
    long i;
    pthread_mutex_lock(&e->mu);
    if ((i = find(e, l)) >= 0) {
        e->wl[i].busy = busy;
        /* the statement has read whatever was waiting; the thread watches
         * the socket again from its next look */
        if (!busy) e->wl[i].muted = 0;
    }
    pthread_mutex_unlock(&e->mu);
}

void my_watch_attach(void *eng, baton_host *h)
{
    myeng *e = eng;
    pthread_mutex_lock(&e->mu);
    e->bhost = h;
    pthread_mutex_unlock(&e->mu);
}

void my_watch_stop(myeng *e)
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
