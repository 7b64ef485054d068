/* baton's event-loop API on a plain poll(2) or epoll(7) loop (docs/async.md).
 *
 * Header only, like hiredis's adapters/: include it after baton.h.
 *   poll:  baton_poll_prepare() fills a pollfd and the timeout to pass to
 *          poll(); after poll() returns, baton_poll_handle() runs the
 *          callbacks. baton_poll_run() is that loop for one client.
 *   epoll: add baton_client_fd(c) with EPOLLIN, pass baton_client_timeout_ms(c)
 *          (bounded by your own timers) to epoll_wait, and call
 *          baton_client_process(c) when the fd is ready or the time is up. */
#ifndef BATON_ADAPTERS_POLL_H
#define BATON_ADAPTERS_POLL_H

#include <baton.h>
#include <errno.h>
#include <poll.h>

/* PFD watches C's fd; *TIMEOUT_MS (poll's argument) is when process must run
 * anyway (-1: only on readiness). 0, or the error of baton_client_fd. */
static inline int baton_poll_prepare(baton_client *c, struct pollfd *pfd, int *timeout_ms)
{
    int64_t t;
    int fd = baton_client_fd(c);
    if (fd < 0) return baton_error_last()->code ? baton_error_last()->code : BATON_EIO;
    pfd->fd = fd;
    pfd->events = POLLIN;
    pfd->revents = 0;
    t = baton_client_timeout_ms(c);
    *timeout_ms = t < 0 ? -1 : t > 0x7fffffff ? 0x7fffffff : (int)t;
    return 0;
}

/* After poll(): runs the callbacks that are ready (all of them; process
 * never blocks, so calling it without readiness costs only the check).
 * The number run, or an error. */
static inline int baton_poll_handle(baton_client *c, const struct pollfd *pfd)
{
    (void)pfd;
    return baton_client_process(c);
}

/* Runs C's callbacks on this thread until *STOP is nonzero (a callback sets
 * it) or MAX_MS pass without it (-1 = no bound). 0 when stopped,
 * BATON_ETIMEDOUT when MAX_MS passed, or an error. */
static inline int baton_poll_run(baton_client *c, volatile int *stop, int64_t max_ms)
{
    int64_t end = max_ms < 0 ? -1 : baton_now_ns() + max_ms * 1000000LL;
    while (!*stop) {
        struct pollfd pfd;
        int t = -1, rc;
        if ((rc = baton_poll_prepare(c, &pfd, &t))) return rc;
        if (end >= 0) {
            int64_t left = (end - baton_now_ns()) / 1000000LL;
            if (left <= 0) return BATON_ETIMEDOUT;
            if (t < 0 || left < t) t = (int)(left > 0x7fffffff ? 0x7fffffff : left);
        }
        if (poll(&pfd, 1, t) < 0 && errno != EINTR) return BATON_EIO;
        if ((rc = baton_poll_handle(c, &pfd)) < 0) return rc;
    }
    return 0;
}

#endif
