/* baton check --run: the command each client's `baton run` runs. It is this
 * same binary (`baton check --tick-child FD SLOT HOLD STUBBORN`, not for
 * users): it tells the checker it started (with BATON_FENCE, the grant), then
 * writes a tick every 10 ms for HOLD seconds on FD, a socket it inherited
 * through `baton run` from the checker, and says it ended. The checker's
 * record of these ticks is the shared log: a tick after another client's
 * grant is a command that outlived its lock, whatever held() said.
 *
 * Its GRANT also says its pid, process group and parent (baton run's shim):
 * the checker ends the grant when this process ends (a pidfd), since
 * baton run, its shim and the socket they inherited outlive it.
 *
 * On SIGTERM (baton run's "lease lost; terminating the command") it says LOST
 * and exits at once, as a well-behaved command does; a SIGKILL (baton run's
 * watchdog, or --kill-after) ends it without a word. STUBBORN=1 ignores
 * SIGTERM, and its grant also sets the checker's escapee to work: a command
 * that hands its work to something outside its process tree (a job queued
 * with another service), which no supervisor can stop: the control that
 * shows the checker catches a command outliving its lock (--run-stubborn). */
#include "check.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t termed;

static void on_term(int sig)
{
    (void)sig;
    termed = 1;
}

static void tell2(int fd, int type, int rc, uint64_t fence, int64_t a, int64_t b)
{
    check_msg m = { type, rc, now_ns(), fence, a, b };
    while (send(fd, &m, sizeof m, MSG_NOSIGNAL) < 0) {
        if (errno == EINTR) continue;
        _exit(0);   /* the checker is gone */
    }
}

static void tell(int fd, int type, int rc, uint64_t fence)
{
    tell2(fd, type, rc, fence, 0, 0);
}

int check_tick_main(int argc, char **argv)
{
    const char *f = getenv("BATON_FENCE");
    int fd, stubborn;
    double hold;
    uint64_t fence;
    int64_t end;
    struct sigaction sa;

    if (argc != 5) {
        fprintf(stderr, "baton check --tick-child: internal use (baton check --run)\n");
        return EX_USAGE;
    }
    fd = atoi(argv[1]);
    hold = strtod(argv[3], NULL);
    stubborn = atoi(argv[4]);
    fence = f ? strtoull(f, NULL, 10) : 0;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = stubborn ? SIG_IGN : on_term;   /* no SA_RESTART: a sleep ends at once */
    sigaction(SIGTERM, &sa, NULL);
    tell2(fd, M_GRANT, 1, fence, (int64_t)getpid() | (int64_t)getpgrp() << 32, getppid());
    end = now_ns() + (int64_t)(hold * 1e9);
    for (;;) {
        int64_t now, left;
        struct timespec ts;
        if (termed) {
            tell(fd, M_LOST, SIGTERM, fence);
            _exit(128 + SIGTERM);
        }
        tell(fd, M_TICK, 0, fence);
        now = now_ns();
        if (now >= end) break;
        left = end - now < 10000000 ? end - now : 10000000;
        ts.tv_sec = 0;
        ts.tv_nsec = (long)left;
        nanosleep(&ts, NULL);   /* EINTR: termed is looked at first */
    }
    tell(fd, M_RELEASE, 0, fence);
    return 0;
}

void check_escapee(int fd, pid_t run)
{
    check_msg m;
    int64_t end;
    ssize_t n;
    int pfd = (int)syscall(SYS_pidfd_open, run, 0);
    /* one job: the GO the checker sends when the stubborn command is
     * granted; none when its baton run ends without a grant */
    for (;;) {
        struct pollfd p[2] = { { fd, POLLIN, 0 }, { pfd, POLLIN, 0 } };
        n = recv(fd, &m, sizeof m, MSG_DONTWAIT);
        if (n == (ssize_t)sizeof m) break;
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) _exit(0);
        if (p[1].fd < 0 && kill(run, 0) < 0) _exit(0);
        if (poll(p, 2, p[1].fd < 0 ? 100 : -1) < 0 && errno != EINTR) _exit(0);
        if ((p[1].revents & POLLIN) && !(p[0].revents & POLLIN)) _exit(0);
    }
    if (m.type != M_GO) _exit(0);
    end = now_ns() + m.b;
    for (;;) {
        struct timespec ts = { 0, 10000000 };
        tell(fd, M_TICK, 0, (uint64_t)m.a);
        if (now_ns() >= end) break;
        nanosleep(&ts, NULL);
    }
    _exit(0);
}
