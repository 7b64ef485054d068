/* baton run: flock(1) across machines. */
#include "cli.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define prog cli_prog

/* ---- baton run --------------------------------------------------------------
 *
 * One thread (main) owns the command: it blocks INT/TERM/HUP/CHLD before
 * anything else, reads them from a signalfd, forks the command and waits for
 * it. The acquire, which may block for as long as -w allows, runs on a helper
 * thread so that a signal during the wait can cancel it (and the engine drops
 * our queue entry or writer intent) instead of killing us inside it. */

/* Bytes on ev_pipe: the acquire helper has finished, or the lock's lease was
 * lost (on_lost runs on the library's keeper thread, so it only writes). */
#define EV_DONE 'D'
#define EV_LOST 'L'
static int ev_pipe[2] = { -1, -1 };

static void on_lost(baton_lock *l, void *p)
{
    char c = EV_LOST;
    (void)l; (void)p;
    /* A blocking pipe only we read: the write cannot fail, at worst it waits. */
    if (write(ev_pipe[1], &c, 1) < 0) { /* nothing to do */ }
}

/* The same for a lost leadership (baton elect). */
static void on_lost_lead(baton_election *e, void *p)
{
    char c = EV_LOST;
    (void)e; (void)p;
    /* A blocking pipe only we read: the write cannot fail, at worst it waits. */
    if (write(ev_pipe[1], &c, 1) < 0) { /* nothing to do */ }
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);   /* cannot fail for this clock */
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Deadlines are int64 ns; INT64_MAX = none. Saturating, so a huge
 * --kill-after or lease never wraps. */
static int64_t add_ns(int64_t a, int64_t b)
{
    return b > 0 && a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* SECS (at most 1e9 by cli_secs) as ns: 1e18 fits in int64. */
static int64_t secs_ns(double s)
{
    return (int64_t)(s * 1e9);
}

/* A poll timeout for DEADLINE: -1 for none, else [0, INT_MAX] ms, rounded up
 * so we do not wake just before it and spin. */
static int poll_ms(int64_t now, int64_t deadline)
{
    int64_t ms;
    if (deadline == INT64_MAX) return -1;
    if (deadline <= now) return 0;
    ms = (deadline - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

typedef struct {
    const char *name;
    baton_lock *l;                  /* a plain lock or a side of a rwlock */
    baton_permits *pm;              /* --permits instead */
    baton_election *el;             /* baton elect instead */
    const char *value;              /* what el proclaims while it leads */
    char id[BATON_PERMIT_ID_SIZE];  /* the permit we hold ("" when none) */
    uint32_t lease_ms;
    int64_t wait_ms;
    int sfd;
    /* The library renews locks itself; a permit is renewed here. */
    int keep;                       /* 1 while the permit has a lease to renew */
    int64_t renew_at, lease_end;    /* monotonic ns */
    /* Filled by the acquire helper; read after it is joined (or done is set). */
    int rc;
    char msg[256];                  /* its error message: baton_error_last() is per thread */
    atomic_int done;
} run_state;

static void *acquire_main(void *arg)
{
    run_state *r = arg;
    const baton_error *e;
    char c = EV_DONE;

    r->rc = r->pm ? baton_permits_acquire(r->pm, r->lease_ms, r->wait_ms, r->id)
          : r->el ? baton_election_campaign(r->el, r->value, r->wait_ms)
                  : baton_lock_acquire(r->l, r->wait_ms);
    e = baton_error_last();
    if (r->rc && e->code == r->rc && e->message) snprintf(r->msg, sizeof r->msg, "%s", e->message);
    atomic_store(&r->done, 1);
    if (write(ev_pipe[1], &c, 1) < 0) { /* cannot fail (see on_lost); done is set anyway */ }
    return NULL;
}

static void cancel_wait(run_state *r)
{
    if (r->pm) baton_permits_cancel(r->pm);
    else if (r->el) baton_election_cancel(r->el);
    else baton_lock_cancel(r->l);
}

/* Gives back what we hold: the lock, or the permit. */
static int give_back(run_state *r)
{
    if (r->pm) return r->id[0] ? baton_permits_release(r->pm, r->id) : 0;
    if (r->el) return baton_election_resign(r->el);
    return baton_lock_release(r->l);
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
}

/* Runs the acquire on a helper thread and watches the signalfd meanwhile.
 * Returns 0 when granted (r->rc == 0), or the exit code: the busy code is the
 * caller's, so for a refusal this returns -1 and leaves r->rc set. *lost is set
 * when the lease was lost before we saw the grant. */
static int wait_grant(run_state *r, int *lost)
{
    pthread_t th;
    int err, sig = 0, fail_errno = 0;
    const char *failed = NULL;

    atomic_store(&r->done, 0);
    if ((err = pthread_create(&th, NULL, acquire_main, r))) {
        fprintf(stderr, "%s: cannot start the acquire thread: %s\n", prog, strerror(err));
        return EX_SOFTWARE;
    }
    for (;;) {
        struct pollfd p[2] = { { r->sfd, POLLIN, 0 }, { ev_pipe[0], POLLIN, 0 } };
        int n;
        if (failed) {
            /* We cannot watch any more: stop the wait and collect the helper. */
            if (atomic_load(&r->done)) break;
            cancel_wait(r);
            sleep_ms(50);
            continue;
        }
        /* The acquire resets its cancel flag when it starts waiting, so a
         * cancel sent before that is forgotten: repeat it until it returns. */
        n = poll(p, 2, sig ? 50 : -1);
        if (n < 0) {
            if (errno != EINTR) { failed = "poll"; fail_errno = errno; }
            continue;
        }
        if (sig) cancel_wait(r);
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            ssize_t k = read(r->sfd, &si, sizeof si);
            if (k == (ssize_t)sizeof si) {
                if (si.ssi_signo != SIGCHLD && !sig) {
                    sig = (int)si.ssi_signo;
                    cancel_wait(r);
                }
            } else if (k < 0 && errno != EAGAIN && errno != EINTR) {
                failed = "read(signalfd)";
                fail_errno = errno;
            }
        }
        if (p[1].revents & POLLIN) {
            char c;
            ssize_t k = read(ev_pipe[0], &c, 1);
            if (k == 1 && c == EV_LOST) *lost = 1;
            else if (k == 1 && c == EV_DONE) break;
            else if (k < 0 && errno != EINTR) { failed = "read(pipe)"; fail_errno = errno; }
        }
    }
    if ((err = pthread_join(th, NULL))) {
        /* only a bug of ours can make a join fail; the helper has returned */
        fprintf(stderr, "%s: pthread_join: %s\n", prog, strerror(err));
    }
    if (failed || sig) {
        if (r->rc == 0) give_back(r);   /* granted meanwhile */
        if (failed) {
            fprintf(stderr, "%s: %s: %s\n", prog, failed, strerror(fail_errno));
            return EX_SOFTWARE;
        }
        fprintf(stderr, "%s: %s: the wait was canceled by %s\n", prog, r->name,
                sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP");
        return 128 + sig;
    }
    return r->rc ? -1 : 0;
}

/* A renewal answer that says nothing about the permit (the engine was not
 * reached, or not in time): retry; the deadline decides. */
static int transient(int rc)
{
    return rc == BATON_EUNAVAILABLE || rc == BATON_EIO || rc == BATON_ETIMEDOUT ||
           rc == BATON_EPROTO || rc == BATON_ENOMEM;
}

/* Renews the permit when due. Returns NULL while it is ours, else why it is
 * not: the engine said it is gone, or no renewal succeeded within a lease
 * (the lease counts from when the last successful renewal was sent).
 * ASK (before the command starts): past that bound, ask the engine once
 * rather than give up: a renewal that succeeds proves the permit never
 * expired (an expired one is reclaimed, not renewed), and engines whose
 * permits have no lease (file, zk) say so or that it still exists. While
 * the command runs the bound is final: it may not run on unknown. */
/* How often a held permit is renewed: a third of its lease, and at least
 * every second, so that an engine which learns of a loss on its own (a
 * ZooKeeper session given up) is asked soon: a permit has no on_lost. */
static int64_t permit_period(int64_t lease_ns)
{
    return lease_ns / 3 < 1000000000 ? lease_ns / 3 : 1000000000;
}

static const char *permit_keep(run_state *r, int ask)
{
    int64_t now = mono_ns(), sent, lease = (int64_t)r->lease_ms * 1000000, retry;
    int rc;

    if (!r->keep) return NULL;
    if (now >= r->lease_end && !ask) return "the permit's lease ran out";
    if (now < r->renew_at && now < r->lease_end) return NULL;
    sent = now;
    rc = baton_permits_renew(r->pm, r->id, r->lease_ms);
    now = mono_ns();
    if (rc == 0) {
        r->lease_end = sent + lease;
        r->renew_at = sent + permit_period(lease);
        return NULL;
    }
    if (rc == BATON_ENOTSUP) {
        /* This engine's permits have no lease (file: the kernel frees the
         * slot when we die): nothing to renew, nothing to lose. */
        r->keep = 0;
        return NULL;
    }
    if (!transient(rc)) {
        const baton_error *e = baton_error_last();
        snprintf(r->msg, sizeof r->msg, "permit lost (%s)",
                 e->code == rc && e->message && *e->message ? e->message : baton_strerror(rc));
        return r->msg;
    }
    /* as the library's lock keeper: a quarter of the period, 20 ms..1 s */
    retry = lease / 12;
    if (retry < 20000000) retry = 20000000;
    if (retry > 1000000000) retry = 1000000000;
    r->renew_at = now + retry;
    return now >= r->lease_end ? "the permit's lease ran out" : NULL;
}

/* The command's side of vfork(). */
typedef struct {
    const char *file;              /* what to execute: searched in PATH unless it has a '/' */
    char *const *argv;
    char *const *shv;              /* "sh" + argv, for a script without #! */
    char *const *envp;
    const sigset_t *mask;          /* the mask baton started with */
    const struct sigaction *chld;  /* SIGCHLD back to SIG_IGN, when it was; else NULL */
    pid_t parent;                  /* getpid() before vfork */
    /* Written by the child into our memory (vfork shares it until exec): */
    volatile int err;              /* errno of the failed step; 0 when exec succeeded */
    volatile int step;             /* 0: prctl, 1: exec */
} spawn_req;

/* Runs in the vfork child, on the parent's memory and stack, until exec:
 * only async-signal-safe calls, never a return. */
static _Noreturn void child_side(spawn_req *s)
{
    /* The command must not outlive baton: the kernel kills it when the
     * thread that forked it (main, alive for the whole run) dies. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
        s->err = errno;
        _exit(EX_SOFTWARE);
    }
    /* Killed between vfork and prctl: we were reparented and no death
     * signal will come. Nobody waits for us either. */
    if (getppid() != s->parent) _exit(EX_SOFTWARE);
    if (s->chld) sigaction(SIGCHLD, s->chld, NULL);
    sigprocmask(SIG_SETMASK, s->mask, NULL);
    s->step = 1;
    execvpe(s->file, s->argv, s->envp);
    /* a script without a #! line: what execvp does, run it with sh */
    if (errno == ENOEXEC) execve("/bin/sh", s->shv, s->envp);
    s->err = errno;
    _exit(s->err == ENOENT ? 127 : 126);
}

/* vfork rather than fork: the parent's page tables (the TLS libraries mapped
 * in) are not copied for a short command. Kept apart so nothing of a larger
 * frame lives across the vfork. */
static pid_t spawn(spawn_req *s)
{
    pid_t pid = vfork();
    if (pid == 0) child_side(s);
    return pid;
}

static void lose_now(run_state *r, pid_t child, const char *why, double kill_after, int64_t *kill_at, int *lost)
{
    *lost = 1;
    fprintf(stderr, "%s: %s: %s; terminating the command\n", prog, r->name, why);
    kill(child, SIGTERM);   /* our own unreaped child: cannot fail */
    *kill_at = add_ns(mono_ns(), secs_ns(kill_after));
}

/* Forwards signals, keeps the permit, notices a lost lease, and waits for the
 * command. Returns 0 once it is reaped (*status set), or EX_SOFTWARE after a
 * failure of ours. Either way the command is no longer running: the caller
 * may give the lock back. */
static int supervise(run_state *r, pid_t child, double kill_after, int *status, int *lost)
{
    int64_t kill_at = INT64_MAX;
    const char *failed;
    int fail_errno;

    for (;;) {
        struct pollfd p[2] = { { r->sfd, POLLIN, 0 }, { ev_pipe[0], POLLIN, 0 } };
        const char *why;
        int64_t now, due;
        pid_t w;

        if (r->pm && !*lost && (why = permit_keep(r, 0))) lose_now(r, child, why, kill_after, &kill_at, lost);
        now = mono_ns();
        if (kill_at != INT64_MAX && now >= kill_at) {
            kill(child, SIGKILL);
            kill_at = INT64_MAX;
        }
        due = kill_at;
        if (r->pm && !*lost && r->keep) {
            if (r->renew_at < due) due = r->renew_at;
            if (r->lease_end < due) due = r->lease_end;
        }
        if (poll(p, *lost ? 1 : 2, poll_ms(now, due)) < 0) {
            if (errno == EINTR) continue;
            failed = "poll";
            fail_errno = errno;
            break;
        }
        if (p[1].revents & POLLIN) {
            char c;
            ssize_t k = read(ev_pipe[0], &c, 1);
            if (k == 1 && c == EV_LOST) lose_now(r, child, r->el ? "leadership lost" : "lease lost", kill_after, &kill_at, lost);
            else if (k < 0 && errno != EINTR) { failed = "read(pipe)"; fail_errno = errno; break; }
        }
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            ssize_t k = read(r->sfd, &si, sizeof si);
            if (k == (ssize_t)sizeof si && si.ssi_signo != SIGCHLD) kill(child, (int)si.ssi_signo);
            else if (k < 0 && errno != EAGAIN && errno != EINTR) { failed = "read(signalfd)"; fail_errno = errno; break; }
        }
        w = waitpid(child, status, WNOHANG);
        if (w == child) return 0;
        if (w < 0 && errno != EINTR) {
            /* ECHILD, the only way it fails here: it is no child of ours any
             * more, so there is nothing left to kill or wait for. */
            fprintf(stderr, "%s: waitpid: %s\n", prog, strerror(errno));
            return EX_SOFTWARE;
        }
    }
    /* Without the loop we can neither forward signals nor notice a lost
     * lease: the command must not run on unwatched, and the lock may only be
     * given back once it is gone. */
    fprintf(stderr, "%s: %s: %s; killing the command\n", prog, failed, strerror(fail_errno));
    kill(child, SIGKILL);
    while (waitpid(child, status, 0) < 0 && errno == EINTR) {}
    return EX_SOFTWARE;
}

enum { M_PLAIN, M_FAIR, M_SHARED, M_WRITE, M_PERMITS };
enum { O_KILL_AFTER = CLI_LONG_ONLY, O_FAIR, O_PERMITS, O_VERBOSE, O_VALUE, O_LISTEN, O_LEADER };

/* The longest lease: the engines count leases in 32-bit milliseconds. */
#define LEASE_MAX_S 4294967.295
#define LEASE_MIN_S 0.05

void cli_usage_run(FILE *f)
{
    fprintf(f,
        "usage: baton run [options] NAME [--] COMMAND [ARG...]\n"
        "       baton run [options] NAME -c COMMAND_STRING\n"
        "Run COMMAND while holding the lock NAME: flock(1) across machines.\n"
        "\n"
        "  -u, --uri URI        the engine (default $BATON_URI, else the file engine)\n"
        "  -n, --nonblock       do not wait: if the lock is busy, exit 1 (or -E CODE) at once\n"
        "  -w, --timeout SECS   wait at most SECS (also --wait; default: forever; 0 = -n)\n"
        "  -E, --conflict-exit-code CODE\n"
        "                       exit code when busy or the wait ran out (0-255, default 1)\n"
        "  -c, --command CMD    run sh -c CMD instead of COMMAND ARG...\n"
        "  -s, --shared         take the read side of read-write lock NAME\n"
        "  -x, --exclusive      take its write side (also -e, --write)\n"
        "      --fair           first come, first served (engines with fair locks)\n"
        "      --permits N      take one of N permits of semaphore NAME (1-1000000)\n"
        "  -t, --lease SECS     the lease, renewed while COMMAND runs (default 30;\n"
        "                       0.05 to 4294967.295: leases are 32-bit milliseconds)\n"
        "      --kill-after S   after a lost lease, SIGKILL S seconds after SIGTERM (default 10)\n"
        "      --verbose        on stderr: how long the wait took and the fence, or that\n"
        "                       the lock was busy (otherwise busy and timeouts are quiet)\n"
        "  -o, --close          accepted: COMMAND never holds baton's lock descriptor\n"
        "  -h, --help           this help\n"
        "  -V, --version        the version\n"
        "\n"
        "flock(1) options mean the same here, but: -u is the URI (there is no --unlock),\n"
        "-F (--no-fork) is refused (baton stays to renew and release the lock), and\n"
        "-c runs /bin/sh, not $SHELL. COMMAND gets BATON_LOCK, BATON_FENCE and\n"
        "BATON_URI (the engine, for a nested baton; a password goes in\n"
        "BATON_REDIS_PASSWORD, or BATON_ZK_AUTH for zk://, never in the URI).\n"
        "\n"
        "exit: COMMAND's status (128+N if signal N killed it); 1 (or -E CODE) busy or\n"
        "the wait ran out; 64 usage; 69 engine unreachable or authentication failed;\n"
        "70 internal failure; 74 the lock store refused (a link or FIFO planted where a\n"
        "lock file belongs, an I/O error); 75 lease lost while COMMAND ran; 126/127 COMMAND not\n"
        "executable/not found; 128+N when signal N (INT, TERM, HUP) canceled the wait.\n");
}

void cli_usage_elect(FILE *f)
{
    fprintf(f,
        "usage: baton elect [options] [--value VALUE] NAME [--] COMMAND [ARG...]\n"
        "       baton elect [options] [--value VALUE] NAME -c COMMAND_STRING\n"
        "       baton elect [-u URI] [-w SECS] --listen NAME\n"
        "       baton elect [-u URI] --leader NAME\n"
        "Campaign in the election NAME and run COMMAND only while this process leads\n"
        "(etcdctl elect). Leadership lost while COMMAND runs stops it, as baton run\n"
        "does for a lost lock.\n"
        "\n"
        "  -u, --uri URI        the engine (default $BATON_URI); elections need one that has\n"
        "                       them (zk://); others answer 'not supported'\n"
        "      --value VALUE    what this leader proclaims (default \"HOST PID\")\n"
        "  -n, --nonblock       do not wait: if someone else leads, exit 1 (or -E CODE)\n"
        "  -w, --timeout SECS   wait at most SECS to lead (default: forever)\n"
        "  -E, --conflict-exit-code CODE, -c, --command CMD, -t, --lease SECS,\n"
        "      --kill-after S, --verbose: as for baton run\n"
        "  -l, --listen         print the leader (\"TERM VALUE\", or \"0\" when none) and\n"
        "                       every change, one line each, until -w SECS pass or a signal\n"
        "      --leader         print the current leader once (exit 1 when none)\n"
        "\n"
        "COMMAND gets BATON_LOCK (NAME), BATON_FENCE (the term: it grows from leader to\n"
        "leader) and BATON_URI. exit: as baton run (75: leadership lost while COMMAND ran).\n");
}

/* baton_election_open, its failure reported (an engine without elections
 * in words of its own). */
static int election_open(baton_election **e, baton_client *c, const char *name, const baton_election_options *o)
{
    int rc = baton_election_open(e, c, name, o);
    if (rc == BATON_ENOTSUP)
        fprintf(stderr, "%s: elections are not supported by the %s engine\n", prog, baton_client_backend(c));
    else if (rc)
        cli_report("election", rc);
    return rc;
}

/* --listen and --leader: observe the election without campaigning. */
static int elect_watch(const char *uri, const char *name, int listen, int64_t wait_ms)
{
    baton_client *c = NULL;
    baton_election *e = NULL;
    char v[BATON_ELECTION_VALUE_MAX + 1];
    uint64_t fence = 0;
    int64_t deadline;
    int rc, code = 0;

    if ((rc = baton_client_open(&c, uri, NULL))) { cli_report("open", rc); return cli_exit_for(rc); }
    if ((rc = election_open(&e, c, name, NULL))) {
        code = cli_exit_for(rc);
        goto out;
    }
    if (!listen) {
        rc = baton_election_leader(e, v, sizeof v, &fence);
        if (rc == BATON_ENOTHELD) { code = 1; goto out; }
        if (rc) { cli_report("leader", rc); code = cli_exit_for(rc); goto out; }
        printf("%" PRIu64 " %s\n", fence, v);
        goto out;
    }
    /* -w SECS bounds the whole listen, not each wait between two changes */
    deadline = wait_ms < 0 ? INT64_MAX : add_ns(mono_ns(), wait_ms * 1000000);
    for (;;) {
        int64_t left = deadline == INT64_MAX ? -1 : (deadline - mono_ns()) / 1000000;
        rc = baton_election_observe(e, v, sizeof v, &fence, left < 0 && deadline != INT64_MAX ? 0 : left);
        if (rc == BATON_ETIMEDOUT) break;
        if (rc) { cli_report("observe", rc); code = cli_exit_for(rc); goto out; }
        if (fence) printf("%" PRIu64 " %s\n", fence, v);
        else printf("0\n");
        fflush(stdout);
    }
out:
    baton_election_free(e);
    baton_client_close(c);
    return code;
}

/* baton run and baton elect: one supervisor, two ways of holding. */
static int run_main(int argc, char **argv, int elect)
{
    static const struct option lo[] = {
        { "uri", required_argument, NULL, CLI_LONG('u') },
        { "nonblock", no_argument, NULL, CLI_LONG('n') },
        { "nb", no_argument, NULL, CLI_LONG('n') },
        { "timeout", required_argument, NULL, CLI_LONG('w') },
        { "wait", required_argument, NULL, CLI_LONG('w') },
        { "conflict-exit-code", required_argument, NULL, CLI_LONG('E') },
        { "command", required_argument, NULL, CLI_LONG('c') },
        { "shared", no_argument, NULL, CLI_LONG('s') },
        { "exclusive", no_argument, NULL, CLI_LONG('x') },
        { "write", no_argument, NULL, CLI_LONG('x') },
        { "lease", required_argument, NULL, CLI_LONG('t') },
        { "close", no_argument, NULL, CLI_LONG('o') },
        { "no-fork", no_argument, NULL, CLI_LONG('F') },
        { "help", no_argument, NULL, CLI_LONG('h') },
        { "version", no_argument, NULL, CLI_LONG('V') },
        { "verbose", no_argument, NULL, O_VERBOSE },
        { "kill-after", required_argument, NULL, O_KILL_AFTER },
        { "fair", no_argument, NULL, O_FAIR },
        { "permits", required_argument, NULL, O_PERMITS },
        { "value", required_argument, NULL, O_VALUE },
        { "listen", no_argument, NULL, O_LISTEN },
        { "leader", no_argument, NULL, O_LEADER },
        { NULL, 0, NULL, 0 },
    };
    const char *env_keys[4] = { "BATON_LOCK", "BATON_FENCE", "BATON_URI", "BATON_REDIS_PASSWORD" };
    const char *cmdn = elect ? "elect" : "run";
    cli_opts o = { .argc = argc, .argv = argv, .cmd = cmdn, .shorts = elect ? "u:nw:E:c:t:loFhV" : "u:nw:E:c:sxet:oFhV",
                   .lo = lo, .permute = 0 };
    const char *value = NULL;
    char value_buf[300];
    int listen_mode = 0, leader_mode = 0;
    const char *uri = NULL, *name, *why, *cmdstr = NULL, *cmdname;
    const char *env_vals[4];
    char n_name[64] = "", w_name[64] = "", c_name[64] = "", mode_name[64] = "";
    double wait_s = -1, lease_s = 30, kill_after = 10;
    int mode = M_PLAIN, verbose = 0;
    long long permits = 0, v;
    baton_rwlock *rw = NULL;
    int nowait = 0, busy_code = EX_BUSY_DEFAULT, opt, rc, err, status = 0, lost = 0, code;
    baton_client *c = NULL;
    baton_lock_options lo_opts = BATON_LOCK_OPTIONS_INIT;
    sigset_t fwd, old, all, cur;
    struct sigaction chld_old, chld_dfl;
    pid_t child;
    char buf[32];
    char **shv = NULL, *child_uri = NULL, *child_pw = NULL;
    char *sh_argv[4] = { "sh", "-c", NULL, NULL };
    cli_env ce = { NULL, 0 };
    int64_t acq_start;
    run_state r;
    spawn_req s;

    memset(&r, 0, sizeof r);
    r.sfd = -1;
    while ((opt = cli_next(&o)) != CLI_END) {
        int m = M_PLAIN;
        switch (opt) {
        case CLI_BAD: return EX_USAGE;
        case 'u': uri = o.arg; break;
        case 'n': nowait = 1; snprintf(n_name, sizeof n_name, "%s", o.name); break;
        case 'w':
            if (cli_secs(cmdn, o.name, o.arg, 0, 1e9, NULL, &wait_s)) return EX_USAGE;
            snprintf(w_name, sizeof w_name, "%s", o.name);
            break;
        case 't':
            if (cli_secs(cmdn, o.name, o.arg, LEASE_MIN_S, LEASE_MAX_S, "leases are 32-bit milliseconds", &lease_s))
                return EX_USAGE;
            break;
        case O_KILL_AFTER:
            if (cli_secs(cmdn, o.name, o.arg, 0, 1e9, NULL, &kill_after)) return EX_USAGE;
            break;
        case 'E':
            if (cli_int(o.arg, 0, 255, &v))
                return cli_usage_error(cmdn, "%s: bad exit code '%s' (want 0 to 255)", o.name, o.arg);
            busy_code = (int)v;
            break;
        case 'c':
            if (cmdstr) return cli_usage_error(cmdn, "%s given twice", o.name);
            cmdstr = o.arg;
            snprintf(c_name, sizeof c_name, "%s", o.name);
            break;
        case 's': m = M_SHARED; break;
        case 'x': case 'e': m = M_WRITE; break;
        case O_FAIR: m = M_FAIR; break;
        case O_PERMITS:
            if (cli_int(o.arg, 1, 1000000, &permits))
                return cli_usage_error(cmdn, "%s: bad number of permits '%s' (want 1 to 1000000)", o.name, o.arg);
            m = M_PERMITS;
            break;
        case O_VERBOSE: verbose = 1; break;
        case O_VALUE: case O_LISTEN: case O_LEADER: case 'l':
            if (!elect) return cli_usage_error(cmdn, "%s is an option of baton elect", o.name);
            if (opt == O_VALUE) {
                /* --listen and --leader print it on one line */
                if (strchr(o.arg, '\n'))
                    return cli_usage_error(cmdn, "%s: the value must be one line", o.name);
                if (strlen(o.arg) > BATON_ELECTION_VALUE_MAX)
                    return cli_usage_error(cmdn, "%s: the value is %zu bytes; the limit is %d", o.name,
                                           strlen(o.arg), BATON_ELECTION_VALUE_MAX);
                value = o.arg;
            }
            else if (opt == O_LEADER) leader_mode = 1;
            else listen_mode = 1;
            break;
        case 'o': break;   /* flock's --close: the command never inherits our lock's descriptor */
        case 'F':
            return cli_usage_error(cmdn, "%s is not supported: baton stays to renew the lease and release the lock",
                                   o.name);
        case 'h': if (elect) cli_usage_elect(stdout); else cli_usage_run(stdout); return 0;
        case 'V': printf("baton %s\n", baton_version()); return 0;
        default: return cli_usage_error(cmdn, "option '%s' is not handled", o.name);   /* a bug of ours */
        }
        if (m != M_PLAIN) {
            if (elect)
                return cli_usage_error(cmdn, "%s is an option of baton run: an election has one leader", o.name);
            if (mode != M_PLAIN && mode != m)
                return cli_usage_error(cmdn, "%s and %s exclude each other (choose one of --shared, --write, "
                                       "--permits, --fair)", mode_name, o.name);
            mode = m;
            snprintf(mode_name, sizeof mode_name, "%s", o.name);
        }
    }
    if (nowait && w_name[0]) return cli_usage_error(cmdn, "%s and %s exclude each other", n_name, w_name);
    if (optind >= argc) return cli_usage_error(cmdn, "missing NAME");
    name = argv[optind++];
    if (listen_mode || leader_mode) {
        if (listen_mode && leader_mode) return cli_usage_error(cmdn, "--listen and --leader exclude each other");
        if (optind < argc && !strcmp(argv[optind], "--")) optind++;
        if (optind < argc || cmdstr)
            return cli_usage_error(cmdn, "%s takes no COMMAND", listen_mode ? "--listen" : "--leader");
        return elect_watch(cli_default_uri(uri), name, listen_mode, nowait ? 0 : wait_s < 0 ? -1 : (int64_t)(wait_s * 1000));
    }
    if (elect && !value) {
        /* what etcdctl elect calls the proposal: by default who we are */
        char host[256] = "?";
        gethostname(host, sizeof host - 1);
        snprintf(value_buf, sizeof value_buf, "%s %ld", host, (long)getpid());
        value = value_buf;
    }
    if (optind < argc && (!strcmp(argv[optind], "-c") || !strcmp(argv[optind], "--command") ||
                          !strncmp(argv[optind], "--command=", 10))) {
        /* flock's form: NAME -c COMMAND_STRING */
        const char *f = argv[optind];
        if (cmdstr) return cli_usage_error(cmdn, "%.*s given twice", (int)strcspn(f, "="), f);
        if (!strncmp(f, "--command=", 10)) {
            cmdstr = f + 10;
            optind++;
        } else if (optind + 1 < argc) {
            cmdstr = argv[optind + 1];
            optind += 2;
        } else {
            return cli_usage_error(cmdn, "option '%s' requires an argument", f);
        }
        snprintf(c_name, sizeof c_name, "%.*s", (int)strcspn(f, "="), f);
        if (optind < argc)
            return cli_usage_error(cmdn, "%s takes one command string, and no COMMAND ARG... after it "
                                   "(quote the whole command)", c_name);
    } else if (optind < argc && !strcmp(argv[optind], "--")) {
        optind++;
    }
    if (cmdstr && optind < argc)
        return cli_usage_error(cmdn, "%s CMD and COMMAND ARG... exclude each other", c_name);
    if (!cmdstr && optind >= argc) return cli_usage_error(cmdn, "missing COMMAND (or -c COMMAND_STRING)");
    r.name = name;
    /* within [50, UINT32_MAX] by cli_secs */
    r.lease_ms = (uint32_t)fmin(llround(lease_s * 1000), (double)UINT32_MAX);
    /* at most 1e12 ms: no overflow here, and the core saturates its deadlines */
    r.wait_ms = nowait || wait_s == 0 ? 0 : wait_s < 0 ? -1 : (int64_t)(wait_s * 1000);

    /* An inherited SIG_IGN for SIGCHLD would have the kernel reap the command
     * itself and waitpid fail: we take the default; the command gets it back. */
    memset(&s, 0, sizeof s);
    if (sigaction(SIGCHLD, NULL, &chld_old)) { perror("baton: sigaction"); return EX_SOFTWARE; }
    if (!(chld_old.sa_flags & SA_SIGINFO) && chld_old.sa_handler == SIG_IGN) {
        memset(&chld_dfl, 0, sizeof chld_dfl);
        chld_dfl.sa_handler = SIG_DFL;
        sigemptyset(&chld_dfl.sa_mask);
        if (sigaction(SIGCHLD, &chld_dfl, NULL)) { perror("baton: sigaction"); return EX_SOFTWARE; }
        s.chld = &chld_old;
    }
    /* From the start, signals come to this thread only as signalfd reads (the
     * library's threads and the acquire helper block them): a Ctrl-C during
     * the wait cancels it rather than killing us inside it. */
    sigemptyset(&fwd);
    sigaddset(&fwd, SIGINT); sigaddset(&fwd, SIGTERM); sigaddset(&fwd, SIGHUP); sigaddset(&fwd, SIGCHLD);
    if ((err = pthread_sigmask(SIG_BLOCK, &fwd, &old))) {
        fprintf(stderr, "%s: sigprocmask: %s\n", prog, strerror(err));
        return EX_SOFTWARE;
    }
    if ((r.sfd = signalfd(-1, &fwd, SFD_CLOEXEC | SFD_NONBLOCK)) < 0) {
        fprintf(stderr, "%s: signalfd: %s\n", prog, strerror(errno));
        code = EX_SOFTWARE;
        goto out;
    }
    if (pipe2(ev_pipe, O_CLOEXEC)) {
        fprintf(stderr, "%s: pipe: %s\n", prog, strerror(errno));
        code = EX_SOFTWARE;
        goto out;
    }

    uri = cli_default_uri(uri);
    if ((rc = baton_client_open(&c, uri, NULL))) { cli_report("open", rc); code = cli_exit_for(rc); goto out; }
    lo_opts.lease_ms = r.lease_ms;
    lo_opts.on_lost = on_lost;
    lo_opts.fair = mode == M_FAIR;
    if (elect) {
        baton_election_options eo = BATON_ELECTION_OPTIONS_INIT;
        eo.lease_ms = r.lease_ms;
        eo.on_lost = on_lost_lead;
        r.value = value;
        if ((rc = election_open(&r.el, c, name, &eo))) {
            code = cli_exit_for(rc);
            goto out;
        }
    } else if (mode == M_PERMITS) {
        /* One of N permits, each with its own lease: a killed holder's slot
         * comes back when its lease runs out (or, on engines without leases,
         * when it dies). The first user sets N; later users join it. */
        if ((rc = baton_permits_open(&r.pm, c, name)) || (rc = baton_permits_try_set(r.pm, (uint32_t)permits, NULL))) {
            if (rc == BATON_ENOTSUP)
                fprintf(stderr, "%s: %s is not supported by the %s engine\n", prog, mode_name, baton_client_backend(c));
            else
                cli_report("permits", rc);
            code = cli_exit_for(rc);
            goto out;
        }
    } else if (mode == M_SHARED || mode == M_WRITE) {
        if ((rc = baton_rwlock_open(&rw, c, name, &lo_opts))) { cli_report("rwlock", rc); code = cli_exit_for(rc); goto out; }
        r.l = mode == M_SHARED ? baton_rwlock_read(rw) : baton_rwlock_write(rw);
    } else if ((rc = baton_lock_open(&r.l, c, name, &lo_opts))) {
        cli_report("lock", rc);
        code = cli_exit_for(rc);
        goto out;
    }

    /* Every attempt of the acquire is sent after this: a lower bound for
     * when the permit's lease started. */
    acq_start = mono_ns();
    if ((code = wait_grant(&r, &lost)) > 0) goto out;
    if (code < 0) {
        rc = r.rc;
        if (rc == BATON_ELOCKED || rc == BATON_ETIMEDOUT) {
            /* quiet, as flock -n: a cron job's skipped run mails nothing */
            if (verbose && r.wait_ms == 0)
                fprintf(stderr, "%s: %s: busy\n", prog, name);
            else if (verbose)
                fprintf(stderr, "%s: %s: still busy after %.3f s; gave up\n", prog, name,
                        (double)(mono_ns() - acq_start) / 1e9);
            code = busy_code;
        } else {
            fprintf(stderr, "%s: acquire: %s\n", prog, r.msg[0] ? r.msg : baton_strerror(rc));
            code = cli_exit_for(rc);
        }
        goto out;
    }

    /* Granted. Anything that fails from here until the command runs gives
     * the lock back first. */
    if (r.pm) {
        int64_t lease = (int64_t)r.lease_ms * 1000000;
        r.keep = 1;
        r.lease_end = add_ns(acq_start, lease);
        r.renew_at = add_ns(acq_start, permit_period(lease));
        /* after a long wait the first renewal is due (or late) already:
         * acq_start is only a lower bound for when the lease began */
        if ((why = permit_keep(&r, 1))) {
            fprintf(stderr, "%s: %s: %s before the command started\n", prog, name, why);
            give_back(&r);
            code = EX_LOST;
            goto out;
        }
    }
    if (lost) {
        fprintf(stderr, "%s: %s: %s lost before the command started\n", prog, name, r.el ? "leadership" : "lease");
        give_back(&r);
        code = EX_LOST;
        goto out;
    }
    snprintf(buf, sizeof buf, "%" PRIu64, r.l ? baton_lock_fence(r.l) : r.el ? baton_election_fence(r.el) : 0);
    if (verbose && r.pm)
        fprintf(stderr, "%s: %s: got a permit after %.3f s (%s)\n", prog, name, (double)(mono_ns() - acq_start) / 1e9, r.id);
    else if (verbose && r.el)
        fprintf(stderr, "%s: %s: leading after %.3f s, term %s\n", prog, name, (double)(mono_ns() - acq_start) / 1e9, buf);
    else if (verbose)
        fprintf(stderr, "%s: %s: got the lock after %.3f s, fence %s\n", prog, name, (double)(mono_ns() - acq_start) / 1e9, buf);
    /* The command's BATON_URI names the engine so that a nested baton can
     * use it: with no password in it (that goes to the variable the engine
     * reads, baton_client_secret), with the file engine's directory. */
    env_vals[0] = name;
    env_vals[1] = r.l || r.el ? buf : NULL;
    if (cli_child_uri(c, uri, &child_uri, &child_pw, &env_keys[3]) == 0) {
        env_vals[2] = child_uri;
        env_vals[3] = child_pw;
        if (cli_env_make(&ce, env_keys, env_vals, child_pw && env_keys[3] ? 4 : 3)) ce.env = NULL;
    }
    if (cmdstr) {
        sh_argv[2] = (char *)cmdstr;
    } else if ((shv = calloc((size_t)(argc - optind) + 2, sizeof *shv))) {
        shv[0] = "sh";
        for (int i = optind; i < argc; i++) shv[i - optind + 1] = argv[i];
    }
    if (!ce.env || (!cmdstr && !shv)) {
        fprintf(stderr, "%s: out of memory\n", prog);
        give_back(&r);
        code = EX_SOFTWARE;
        goto out;
    }
    /* -c: /bin/sh -c CMD, as flock -c (which runs $SHELL; baton runs sh
     * whatever the caller's login shell is) */
    s.file = cmdstr ? "/bin/sh" : argv[optind];
    s.argv = cmdstr ? sh_argv : argv + optind;
    s.shv = cmdstr ? sh_argv : shv;
    s.envp = ce.env;
    cmdname = cmdstr ? "sh" : argv[optind];
    s.mask = &old;
    s.parent = getpid();
    /* No signal may be handled in the child while it shares our memory;
     * it sets the mask baton started with just before exec. */
    sigfillset(&all);
    if ((err = pthread_sigmask(SIG_SETMASK, &all, &cur))) {
        fprintf(stderr, "%s: sigprocmask: %s\n", prog, strerror(err));
        give_back(&r);
        code = EX_SOFTWARE;
        goto out;
    }
    child = spawn(&s);
    err = errno;
    /* restoring the mask that was just read: cannot fail */
    pthread_sigmask(SIG_SETMASK, &cur, NULL);
    if (child < 0) {
        fprintf(stderr, "%s: %s: cannot start it: %s\n", prog, cmdname, strerror(err));
        give_back(&r);
        code = EX_SOFTWARE;
        goto out;
    }
    if (s.err) {
        /* it has _exited already: reap it */
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {}
        if (s.step == 0) {
            fprintf(stderr, "%s: prctl(PR_SET_PDEATHSIG): %s\n", prog, strerror(s.err));
            code = EX_SOFTWARE;
        } else {
            fprintf(stderr, "%s: %s: %s\n", prog, cmdname, strerror(s.err));
            /* 127: not found; 126: found but not runnable; the exec itself failing is ours */
            code = s.err == ENOENT ? 127 : (s.err == EAGAIN || s.err == ENOMEM) ? EX_SOFTWARE : 126;
        }
        give_back(&r);
        goto out;
    }

    code = supervise(&r, child, kill_after, &status, &lost);
    rc = give_back(&r);
    if (code) {
        /* supervise's failure, reported; the command is gone */
    } else if (lost || rc == BATON_ELOST || (r.pm && rc == BATON_ENOTOWNER) || (r.el && rc == BATON_ENOTHELD)) {
        code = EX_LOST;
        if (!lost) fprintf(stderr, "%s: %s: %s lost while the command ran\n", prog, name, r.el ? "leadership" : "lease");
    } else if (WIFSIGNALED(status)) {
        code = 128 + WTERMSIG(status);
    } else {
        code = WEXITSTATUS(status);
        if (rc) cli_report("release", rc);
    }
out:
    free(shv);
    cli_env_free(&ce);
    free(child_uri);
    cli_secret_free(child_pw);
    if (rw) baton_rwlock_free(rw);
    else baton_lock_free(r.l);
    baton_permits_free(r.pm);
    baton_election_free(r.el);
    baton_client_close(c);
    if (r.sfd >= 0) close(r.sfd);
    for (int i = 0; i < 2; i++) {
        if (ev_pipe[i] >= 0) close(ev_pipe[i]);
        ev_pipe[i] = -1;
    }
    return code;
}


int cli_run(int argc, char **argv) { return run_main(argc, argv, 0); }
int cli_elect(int argc, char **argv) { return run_main(argc, argv, 1); }
