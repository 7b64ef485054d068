/* baton check --run: the command each client's `baton run` runs. It is this
 * same binary (`baton check --tick-child FD SLOT HOLD STUBBORN`, not for
 * users): it tells the checker it started (with BATON_FENCE, the grant), then
 * writes a tick every 10 ms for HOLD seconds on FD, a socket it inherited
 * through `baton run` from the checker, and says it ended. The checker's
 * record of these ticks is the shared log: a tick after another client's
 * grant is a command that outlived its lock, whatever held() said.
 *
 * On SIGTERM (baton run's "lease lost; terminating the command") it says LOST
 * and exits at once, as a well-behaved command does. STUBBORN=1 ignores
 * SIGTERM: a command that outlives its lock by design, the control that shows
 * the checker catches it (--run-stubborn). */
#include "check.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t termed;

static void on_term(int sig)
{
    (void)sig;
    termed = 1;
}

static void tell(int fd, int type, int rc, uint64_t fence)
{
    check_msg m = { type, rc, now_ns(), fence, 0, 0 };
    while (send(fd, &m, sizeof m, MSG_NOSIGNAL) < 0) {
        if (errno == EINTR) continue;
        _exit(0);   /* the checker is gone */
    }
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
    tell(fd, M_GRANT, 1, fence);
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
