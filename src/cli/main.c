/* baton(1): flock(1) across machines, on the public API only. */
#include <baton.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EX_BUSY_DEFAULT 1
#define EX_USAGE 64
#define EX_UNAVAILABLE 69
#define EX_SOFTWARE 70
#define EX_LOST 75

static const char *prog = "baton";
int baton__cli_bench(int argc, char **argv);

static void usage(FILE *f)
{
    fprintf(f,
        "usage: baton run [-u URI] [-n | -w SECS] [-t LEASE_SECS] [-E CODE] [--kill-after SECS]\n"
        "                 [--fair | --shared | --write | --permits N] NAME -- CMD...\n"
        "       baton status [-u URI] NAME\n"
        "       baton latch [-u URI] NAME set N | down | count | wait [-w SECS]\n"
        "       baton sem [-u URI] NAME set N | add N | available | drain\n"
        "       baton bench [-u URI] --workload W [options]   (baton bench --help)\n"
        "       baton version\n"
        "\n"
        "  -u URI          engine (default $BATON_URI, else the file backend)\n"
        "  -n              do not wait: exit 1 (or -E CODE) when the lock is busy\n"
        "  -w SECS         wait at most SECS (default: forever)\n"
        "  -t LEASE_SECS   lease, renewed while CMD runs (default 30)\n"
        "  -E CODE         exit code when busy or the wait ran out (default 1)\n"
        "  --kill-after S  after a lost lease, SIGKILL the child S seconds after SIGTERM (default 10)\n"
        "  --fair          FIFO grants (engines with fair locks)\n"
        "  --shared        take the read side of read-write lock NAME\n"
        "  --write         take the write side of read-write lock NAME\n"
        "  --permits N     take one of N permits of semaphore NAME, leased like a lock\n"
        "\n"
        "exit: the child's status (128+signal if killed), 1 busy, 64 usage, 69 engine\n"
        "unreachable or authentication failed, 70 internal failure, 75 lease lost while\n"
        "CMD ran, 128+signal when INT/TERM/HUP canceled the wait.\n");
}

static int parse_secs(const char *s, double *out)
{
    char *end;
    double v;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < 0 || v > 1e9) return -1;
    *out = v;
    return 0;
}

static int exit_for(int rc)
{
    switch (rc) {
    case BATON_EINVAL: case BATON_EDISABLED: case BATON_ENOTSUP: return EX_USAGE;
    case BATON_EUNAVAILABLE: case BATON_EAUTH: case BATON_EPROTO: case BATON_EIO: return EX_UNAVAILABLE;
    default: return EX_SOFTWARE;
    }
}

static void report(const char *what, int rc)
{
    const baton_error *e = baton_error_last();
    fprintf(stderr, "%s: %s: %s\n", prog, what, e->code == rc && e->message && *e->message ? e->message : baton_strerror(rc));
}

static const char *default_uri(const char *u)
{
    if (u) return u;
    u = getenv("BATON_URI");
    return u && *u ? u : NULL;
}

extern char **environ;

/* The command's environment: ours without BATON_LOCK/FENCE/URI, then those. */
static char **child_env(const char *name, const char *fence, const char *uri)
{
    size_t n = 0, k = 0;
    while (environ && environ[n]) n++;
    char **e = calloc(n + 4, sizeof *e);
    if (!e) return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *v = environ[i];
        if (!strncmp(v, "BATON_LOCK=", 11) || !strncmp(v, "BATON_FENCE=", 12) || !strncmp(v, "BATON_URI=", 10)) continue;
        e[k++] = (char *)v;
    }
    const char *keys[3] = { "BATON_LOCK=", "BATON_FENCE=", "BATON_URI=" };
    const char *vals[3] = { name, fence, uri };
    size_t first = k;
    for (int i = 0; i < 3; i++) {
        if (!vals[i]) continue;
        size_t len = strlen(keys[i]) + strlen(vals[i]) + 1;
        char *s = malloc(len);
        if (!s) {
            while (k > first) free(e[--k]);
            free(e);
            return NULL;
        }
        snprintf(s, len, "%s%s", keys[i], vals[i]);
        e[k++] = s;
    }
    e[k] = NULL;
    return e;
}

static void free_env(char **e)
{
    size_t k = 0;
    while (e[k]) k++;
    /* inherited BATON_* entries were left out, so these are ours */
    for (size_t i = 0; i < k; i++) {
        if (!strncmp(e[i], "BATON_LOCK=", 11) || !strncmp(e[i], "BATON_FENCE=", 12) || !strncmp(e[i], "BATON_URI=", 10))
            free(e[i]);
    }
    free(e);
}

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

/* SECS (at most 1e9 by parse_secs) as ns: 1e18 fits in int64. */
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
    else baton_lock_cancel(r->l);
}

/* Gives back what we hold: the lock, or the permit. */
static int give_back(run_state *r)
{
    if (r->pm) return r->id[0] ? baton_permits_release(r->pm, r->id) : 0;
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
 * (the lease counts from when the last successful renewal was sent). */
static const char *permit_keep(run_state *r)
{
    int64_t now = mono_ns(), sent, lease = (int64_t)r->lease_ms * 1000000, retry;
    int rc;

    if (!r->keep) return NULL;
    if (now >= r->lease_end) return "the permit's lease ran out";
    if (now < r->renew_at) return NULL;
    sent = now;
    rc = baton_permits_renew(r->pm, r->id, r->lease_ms);
    now = mono_ns();
    if (rc == 0) {
        r->lease_end = sent + lease;
        r->renew_at = sent + lease / 3;
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
    execvpe(s->argv[0], s->argv, s->envp);
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

        if (r->pm && !*lost && (why = permit_keep(r))) lose_now(r, child, why, kill_after, &kill_at, lost);
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
            if (k == 1 && c == EV_LOST) lose_now(r, child, "lease lost", kill_after, &kill_at, lost);
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

static int cmd_run(int argc, char **argv)
{
    static const struct option lo[] = {
        { "kill-after", required_argument, NULL, 'K' },
        { "fair", no_argument, NULL, 'F' },
        { "shared", no_argument, NULL, 'S' },
        { "write", no_argument, NULL, 'W' },
        { "permits", required_argument, NULL, 'P' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *uri = NULL, *name, *why;
    double wait_s = -1, lease_s = 30, kill_after = 10;
    int fair = 0, shared = 0, write_side = 0;
    long permits = 0;
    baton_rwlock *rw = NULL;
    int nowait = 0, busy_code = EX_BUSY_DEFAULT, opt, rc, err, status = 0, lost = 0, code;
    baton_client *c = NULL;
    baton_lock_options lo_opts = BATON_LOCK_OPTIONS_INIT;
    sigset_t fwd, old, all, cur;
    struct sigaction chld_old, chld_dfl;
    pid_t child;
    char buf[32];
    char **envp = NULL, **shv = NULL;
    int64_t acq_start;
    run_state r;
    spawn_req s;

    memset(&r, 0, sizeof r);
    r.sfd = -1;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "+u:nw:t:E:h", lo, NULL)) != -1) {
        switch (opt) {
        case 'u': uri = optarg; break;
        case 'n': nowait = 1; break;
        case 'w': if (parse_secs(optarg, &wait_s)) goto bad_num; break;
        case 't': if (parse_secs(optarg, &lease_s) || lease_s < 0.05) goto bad_num; break;
        case 'K': if (parse_secs(optarg, &kill_after)) goto bad_num; break;
        case 'F': fair = 1; break;
        case 'S': shared = 1; break;
        case 'W': write_side = 1; break;
        case 'P': {
            char *end;
            permits = strtol(optarg, &end, 10);
            if (*end || end == optarg || permits < 1 || permits > 1000000) goto bad_num;
            break;
        }
        case 'E': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 0 || v > 255) goto bad_num;
            busy_code = (int)v;
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return EX_USAGE;
        }
    }
    if (nowait && wait_s >= 0) {
        fprintf(stderr, "%s: -n and -w exclude each other\n", prog);
        return EX_USAGE;
    }
    if (shared + write_side + (permits > 0) > 1 || (fair && (shared || write_side || permits))) {
        fprintf(stderr, "%s: choose one of --shared, --write, --permits (--fair is for plain locks)\n", prog);
        return EX_USAGE;
    }
    if (optind >= argc) { fprintf(stderr, "%s: run: missing NAME\n", prog); return EX_USAGE; }
    name = argv[optind++];
    if (optind < argc && !strcmp(argv[optind], "--")) optind++;
    if (optind >= argc) { fprintf(stderr, "%s: run: missing COMMAND\n", prog); return EX_USAGE; }
    r.name = name;
    /* The engine's leases are 32-bit ms: a longer -t means "as long as it
     * gets" (parse_secs allows up to 1e9 s, which would not fit). */
    r.lease_ms = lease_s * 1000 >= (double)UINT32_MAX ? UINT32_MAX : (uint32_t)(lease_s * 1000);
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

    uri = default_uri(uri);
    if ((rc = baton_client_open(&c, uri, NULL))) { report("open", rc); code = exit_for(rc); goto out; }
    lo_opts.lease_ms = r.lease_ms;
    lo_opts.on_lost = on_lost;
    lo_opts.fair = fair;
    if (permits) {
        /* One of N permits, each with its own lease: a killed holder's slot
         * comes back when its lease runs out (or, on engines without leases,
         * when it dies). The first user sets N; later users join it. */
        if ((rc = baton_permits_open(&r.pm, c, name)) || (rc = baton_permits_try_set(r.pm, (uint32_t)permits, NULL))) {
            if (rc == BATON_ENOTSUP)
                fprintf(stderr, "%s: --permits is not supported by the %s engine\n", prog, baton_client_backend(c));
            else
                report("permits", rc);
            code = exit_for(rc);
            goto out;
        }
    } else if (shared || write_side) {
        if ((rc = baton_rwlock_open(&rw, c, name, &lo_opts))) { report("rwlock", rc); code = exit_for(rc); goto out; }
        r.l = shared ? baton_rwlock_read(rw) : baton_rwlock_write(rw);
    } else if ((rc = baton_lock_open(&r.l, c, name, &lo_opts))) {
        report("lock", rc);
        code = exit_for(rc);
        goto out;
    }

    /* Every attempt of the acquire is sent after this: a lower bound for
     * when the permit's lease started. */
    acq_start = mono_ns();
    if ((code = wait_grant(&r, &lost)) > 0) goto out;
    if (code < 0) {
        rc = r.rc;
        if (rc == BATON_ELOCKED || rc == BATON_ETIMEDOUT) {
            fprintf(stderr, "%s: %s: %s\n", prog, name, rc == BATON_ELOCKED ? "busy" : "wait timed out");
            code = busy_code;
        } else {
            fprintf(stderr, "%s: acquire: %s\n", prog, r.msg[0] ? r.msg : baton_strerror(rc));
            code = exit_for(rc);
        }
        goto out;
    }

    /* Granted. Anything that fails from here until the command runs gives
     * the lock back first. */
    if (r.pm) {
        int64_t lease = (int64_t)r.lease_ms * 1000000;
        r.keep = 1;
        r.lease_end = add_ns(acq_start, lease);
        r.renew_at = add_ns(acq_start, lease / 3);
        /* after a long wait the first renewal is due (or late) already */
        if ((why = permit_keep(&r))) {
            fprintf(stderr, "%s: %s: %s before the command started\n", prog, name, why);
            give_back(&r);
            code = EX_LOST;
            goto out;
        }
    }
    if (lost) {
        fprintf(stderr, "%s: %s: lease lost before the command started\n", prog, name);
        give_back(&r);
        code = EX_LOST;
        goto out;
    }
    snprintf(buf, sizeof buf, "%" PRIu64, r.l ? baton_lock_fence(r.l) : 0);
    envp = child_env(name, r.l ? buf : NULL, baton_client_uri(c));
    shv = calloc((size_t)(argc - optind) + 2, sizeof *shv);
    if (!envp || !shv) {
        fprintf(stderr, "%s: out of memory\n", prog);
        give_back(&r);
        code = EX_SOFTWARE;
        goto out;
    }
    shv[0] = "sh";
    for (int i = optind; i < argc; i++) shv[i - optind + 1] = argv[i];
    s.argv = argv + optind;
    s.shv = shv;
    s.envp = envp;
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
        fprintf(stderr, "%s: %s: cannot start it: %s\n", prog, argv[optind], strerror(err));
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
            fprintf(stderr, "%s: %s: %s\n", prog, argv[optind], strerror(s.err));
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
    } else if (lost || rc == BATON_ELOST || (r.pm && rc == BATON_ENOTOWNER)) {
        code = EX_LOST;
        if (!lost) fprintf(stderr, "%s: %s: lease lost while the command ran\n", prog, name);
    } else if (WIFSIGNALED(status)) {
        code = 128 + WTERMSIG(status);
    } else {
        code = WEXITSTATUS(status);
        if (rc) report("release", rc);
    }
out:
    free(shv);
    if (envp) free_env(envp);
    if (rw) baton_rwlock_free(rw);
    else baton_lock_free(r.l);
    baton_permits_free(r.pm);
    baton_client_close(c);
    if (r.sfd >= 0) close(r.sfd);
    for (int i = 0; i < 2; i++) {
        if (ev_pipe[i] >= 0) close(ev_pipe[i]);
        ev_pipe[i] = -1;
    }
    return code;
bad_num:
    fprintf(stderr, "%s: bad number '%s' for -%c\n", prog, optarg, opt == 'K' ? '-' : opt);
    return EX_USAGE;
}

static int cmd_status(int argc, char **argv)
{
    const char *uri = NULL;
    baton_client *c = NULL;
    baton_lockinfo info;
    int opt, rc;

    optind = 1;
    while ((opt = getopt(argc, argv, "+u:h")) != -1) {
        switch (opt) {
        case 'u': uri = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return EX_USAGE;
        }
    }
    if (optind + 1 != argc) { fprintf(stderr, "%s: status: expected one NAME\n", prog); return EX_USAGE; }
    if ((rc = baton_client_open(&c, default_uri(uri), NULL))) { report("open", rc); return exit_for(rc); }
    rc = baton_lock_info(c, argv[optind], &info);
    if (rc) {
        report("status", rc);
        baton_client_close(c);
        return exit_for(rc);
    }
    printf("name: %s\n", argv[optind]);
    printf("backend: %s\n", baton_client_backend(c));
    printf("held: %s\n", info.held ? "yes" : "no");
    if (info.held && info.holder[0]) printf("holder: %s\n", info.holder);
    printf("fence: %" PRIu64 "\n", info.fence);
    if (info.held && info.remaining_ms >= 0) printf("remaining_ms: %" PRId64 "\n", info.remaining_ms);
    if (info.writer > 0) printf("writer: yes\n");
    if (info.readers > 0) printf("readers: %" PRId64 "\n", info.readers);
    if (info.waiting_writers > 0) printf("waiting_writers: %" PRId64 "\n", info.waiting_writers);
    if (info.queue_length >= 0) printf("queue: %" PRId64 "\n", info.queue_length);
    if (info.permits >= 0) printf("permits: %" PRId64 "\n", info.permits);
    baton_client_close(c);
    return 0;
}

static int parse_count(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    long long v;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* baton latch NAME set N | down | count | wait [-w SECS]
 * baton sem NAME set N | add N | available | drain */
static int cmd_sync(int argc, char **argv, int latch)
{
    const char *uri = NULL, *name, *op;
    double wait_s = -1;
    baton_client *c = NULL;
    baton_latch *la = NULL;
    baton_semaphore *se = NULL;
    int opt, rc, code = 0, was = 0;
    int64_t n = 0;
    uint64_t v = 0;

    optind = 1;
    while ((opt = getopt(argc, argv, "+u:w:h")) != -1) {
        switch (opt) {
        case 'u': uri = optarg; break;
        case 'w': if (parse_secs(optarg, &wait_s)) { fprintf(stderr, "%s: bad -w\n", prog); return EX_USAGE; } break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return EX_USAGE;
        }
    }
    if (argc - optind < 2) { usage(stderr); return EX_USAGE; }
    name = argv[optind];
    op = argv[optind + 1];
    /* options may also follow the operation: baton latch NAME wait -w 5 */
    optind += 2;
    while ((opt = getopt(argc, argv, "u:w:")) != -1) {
        if (opt == 'w' && !parse_secs(optarg, &wait_s)) continue;
        if (opt == 'u') { uri = optarg; continue; }
        usage(stderr);
        return EX_USAGE;
    }
    int need_n = !strcmp(op, "set") || (!latch && !strcmp(op, "add"));
    if (need_n != (optind < argc) || (need_n && optind + 1 != argc)) {
        fprintf(stderr, "%s: %s: bad arguments for '%s'\n", prog, latch ? "latch" : "sem", op);
        return EX_USAGE;
    }
    if (need_n && parse_count(argv[optind], !strcmp(op, "add") ? -1000000000LL : 1, 1000000000LL, &n)) {
        fprintf(stderr, "%s: bad count '%s'\n", prog, argv[optind]);
        return EX_USAGE;
    }
    if ((rc = baton_client_open(&c, default_uri(uri), NULL))) { report("open", rc); return exit_for(rc); }
    rc = latch ? baton_latch_open(&la, c, name) : baton_semaphore_open(&se, c, name);
    if (rc) { report(latch ? "latch" : "sem", rc); code = exit_for(rc); goto out; }
    if (latch && !strcmp(op, "set")) {
        if (!(rc = baton_latch_try_set(la, (uint64_t)n, &was)) && !was) {
            fprintf(stderr, "%s: latch %s is already set\n", prog, name);
            code = 1;
        }
    } else if (latch && !strcmp(op, "down")) {
        rc = baton_latch_count_down(la);
    } else if (latch && !strcmp(op, "count")) {
        if (!(rc = baton_latch_count(la, &v))) printf("%" PRIu64 "\n", v);
    } else if (latch && !strcmp(op, "wait")) {
        rc = baton_latch_await(la, wait_s < 0 ? -1 : (int64_t)(wait_s * 1000));
        if (rc == BATON_ETIMEDOUT) { fprintf(stderr, "%s: latch %s: wait timed out\n", prog, name); code = 1; rc = 0; }
    } else if (!latch && !strcmp(op, "set")) {
        if (!(rc = baton_semaphore_try_set(se, (uint32_t)n, &was)) && !was) {
            fprintf(stderr, "%s: semaphore %s is already set\n", prog, name);
            code = 1;
        }
    } else if (!latch && !strcmp(op, "add")) {
        rc = baton_semaphore_add(se, n);
    } else if (!latch && !strcmp(op, "available")) {
        if (!(rc = baton_semaphore_available(se, &v))) printf("%" PRIu64 "\n", v);
    } else if (!latch && !strcmp(op, "drain")) {
        if (!(rc = baton_semaphore_drain(se, &v))) printf("%" PRIu64 "\n", v);
    } else {
        fprintf(stderr, "%s: unknown operation '%s'\n", prog, op);
        code = EX_USAGE;
    }
    if (rc) { report(op, rc); code = exit_for(rc); }
out:
    baton_latch_free(la);
    baton_semaphore_free(se);
    baton_client_close(c);
    return code;
}

/* What the library has to say (it never writes to stderr itself). */
static void log_to_stderr(int level, const char *msg, void *p)
{
    (void)p;
    if (level <= BATON_LOG_WARN)
        fprintf(stderr, "%s: %s: %s\n", prog, level == BATON_LOG_ERROR ? "error" : "warning", msg);
}

int main(int argc, char **argv)
{
    baton_log_set(log_to_stderr, NULL);
    if (argc < 2) { usage(stderr); return EX_USAGE; }
    if (!strcmp(argv[1], "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(argv[1], "status")) return cmd_status(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench")) return baton__cli_bench(argc - 1, argv + 1);
    if (!strcmp(argv[1], "latch")) return cmd_sync(argc - 1, argv + 1, 1);
    if (!strcmp(argv[1], "sem")) return cmd_sync(argc - 1, argv + 1, 0);
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        printf("baton %s\n", baton_version());
        return 0;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "%s: unknown command '%s'\n", prog, argv[1]);
    usage(stderr);
    return EX_USAGE;
}
