/* baton hold / baton release: a lock for a section of a shell script.
 *
 *   eval "$(baton hold [-u URI] [-n | -w SECS] [-t LEASE] NAME)" || exit
 *   ...                      # the section; $BATON_FENCE is the grant's fence
 *   baton release NAME
 *
 * baton hold forks a holder before it has any thread (so the holder may open
 * a client and run the library's threads), waits for the holder's grant,
 * prints shell code that exports BATON_LOCK, BATON_FENCE and BATON_HOLD_PID
 * (and appends the pid to BATON_HOLDS), and exits. The holder stays, in a
 * session of its own (the terminal's Ctrl-C is the script's business), with
 * stdin and stdout on /dev/null so that $(...) ends, and holds the lock
 * until:
 *  - baton release NAME sends it SIGTERM (or SIGINT, SIGHUP): it releases;
 *  - baton extend NAME -t SECS queues it SIGUSR1 carrying the new lease in
 *    ms: it calls baton_lock_extend and queues the answer (0 or the error
 *    code) back to the sender as SIGUSR2 (sigqueue carries both ways, so no
 *    file or socket is needed);
 *  - the calling shell (hold's parent) exits or is killed: it releases at
 *    once (it watches the shell through a pidfd);
 *  - the lock is lost: it sends SIGTERM to the shell's process group (the
 *    script and its foreground commands) and exits.
 * The shell is baton hold's parent: `eval "$(baton hold ...)"` runs it
 * straight from the shell (the command substitution execs it). */
#include "cli.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#define prog cli_prog

void cli_usage_hold(FILE *f)
{
    fprintf(f,
        "usage: eval \"$(baton hold [options] NAME)\" || exit\n"
        "       baton release [NAME]\n"
        "Hold the lock NAME for a section of a shell script. baton hold waits for the\n"
        "lock, leaves a small holder process tied to the calling shell, and prints the\n"
        "shell code that exports BATON_LOCK, BATON_FENCE (the grant's fence) and\n"
        "BATON_HOLD_PID (and appends it to BATON_HOLDS). baton release NAME frees it\n"
        "and returns once it is free.\n"
        "\n"
        "  -u, --uri URI        the engine (default $BATON_URI, else the file engine)\n"
        "      --uri-file FILE  the URI on FILE's first line (keeps a password out of argv)\n"
        "  -n, --nonblock       do not wait: if the lock is busy, fail at once\n"
        "  -w, --timeout SECS   wait at most SECS (also --wait; default: forever)\n"
        "  -t, --lease SECS     the lease, renewed while held (default 30)\n"
        "      --fixed          do not renew: the lock expires after the lease unless\n"
        "                       baton extend moves it on (work that must show progress)\n"
        "  -E, --conflict-exit-code CODE  exit code when busy (default 1)\n"
        "  -h, --help           this help\n"
        "\n"
        "The lock is freed at once when the shell that ran baton hold exits or is\n"
        "killed (even by kill -9). If the lock is lost (a lease that could not be\n"
        "renewed, a session that ended), the holder sends SIGTERM to the shell's\n"
        "process group: the script and what it runs in the foreground.\n"
        "On failure baton hold prints '(exit CODE)', so eval fails with its code.\n"
        "baton extend [-t SECS] NAME gives the held lock a new lease of SECS (default\n"
        "the -t of baton hold) from now, checked by owner at the engine.\n"
        "\n"
        "exit: 0 held; 1 (or -E CODE) busy or the wait ran out; 64 usage; 69 engine\n"
        "unreachable; 70 internal; 74 the lock store refused. baton release: 0\n"
        "released, 1 no holder of NAME in $BATON_HOLDS / $BATON_HOLD_PID. baton extend:\n"
        "0 extended, 1 no holder, 75 the lock was lost, 69/70 the engine failed.\n");
}

/* What the holder tells baton hold: rc (0 granted) and the fence, then
 * the error message (len bytes). */
typedef struct {
    int32_t rc, code;
    uint64_t fence;
    uint32_t len;
} hold_reply;

static int hold_pipe[2] = { -1, -1 };

static void hold_lost(baton_lock *l, void *p)
{
    char c = 'L';
    (void)l; (void)p;
    if (write(hold_pipe[1], &c, 1) < 0) { /* a pipe only we read */ }
}

/* 0, or -1 when baton hold is gone (killed while it waited): then nobody
 * will know we hold the lock, so we must not. */
static int reply(int fd, int rc, int code, uint64_t fence, const char *msg)
{
    hold_reply r = { rc, code, fence, msg ? (uint32_t)strlen(msg) : 0 };
    if (write(fd, &r, sizeof r) != (ssize_t)sizeof r || (r.len && write(fd, msg, r.len) < 0)) return -1;
    return 0;
}

/* The holder: never returns. */
/* baton extend's request (SIGUSR1 from the signalfd): 1 when it was one
 * (answered), 0 for the signals that mean "release". */
static int hold_extend(int sfd, baton_lock *l, uint32_t lease_ms)
{
    struct signalfd_siginfo si;
    union sigval v;
    int rc;
    if (read(sfd, &si, sizeof si) != (ssize_t)sizeof si) return 0;
    if (si.ssi_signo != SIGUSR1) return 0;
    if (si.ssi_code != SI_QUEUE || si.ssi_int < 0) return 1;   /* not baton extend: ignore */
    rc = baton_lock_extend(l, si.ssi_int ? (uint32_t)si.ssi_int : lease_ms);   /* 0: hold's own -t */
    if (rc && rc != BATON_ELOST) cli_report("extend", rc);
    v.sival_int = rc;
    sigqueue((pid_t)si.ssi_pid, SIGUSR2, v);
    return 1;
}

static _Noreturn void holder(int out, const char *uri, const char *name, uint32_t lease_ms, int fixed,
                             int64_t wait_ms, int busy_code, pid_t shell, int shell_fd)
{
    baton_client *c = NULL;
    baton_lock *l = NULL;
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
    pid_t shell_pgid = getpgid(shell);
    char *lname = NULL;
    sigset_t sigs;
    int sfd, rc, dn;

    setsid();
    if ((dn = open("/dev/null", O_RDWR | O_CLOEXEC)) >= 0) {
        dup2(dn, 0);
        dup2(dn, 1);
        close(dn);
    }
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM); sigaddset(&sigs, SIGINT); sigaddset(&sigs, SIGHUP); sigaddset(&sigs, SIGPIPE);
    sigaddset(&sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    sigdelset(&sigs, SIGPIPE);
    if ((sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK)) < 0 || pipe2(hold_pipe, O_CLOEXEC)) {
        reply(out, BATON_ENOMEM, EX_SOFTWARE, 0, strerror(errno));
        _exit(EX_SOFTWARE);
    }
    co.lease_ms = lease_ms;   /* -t also for etcd's client lease (the URI's ttl= wins) */
    if ((rc = baton_client_open(&c, uri, &co))) {
        reply(out, rc, cli_exit_for(rc), 0, baton_error_last()->message);
        _exit(0);
    }
    if (!(lname = cli_lock_name(c, name))) {
        reply(out, BATON_ENOMEM, EX_SOFTWARE, 0, "out of memory");
        _exit(0);
    }
    lo.lease_ms = lease_ms;
    lo.fixed_lease = fixed;
    lo.on_lost = hold_lost;
    if ((rc = baton_lock_open(&l, c, lname, &lo)) || (rc = baton_lock_acquire(l, wait_ms))) {
        const baton_error *e = baton_error_last();
        int code = rc == BATON_ELOCKED || rc == BATON_ETIMEDOUT ? busy_code : cli_exit_for(rc);
        reply(out, rc, code, 0, e->code == rc ? e->message : NULL);
        baton_lock_free(l);
        baton_client_close(c);
        _exit(0);
    }
    if (reply(out, 0, 0, baton_lock_fence(l), NULL)) goto release;
    close(out);
    for (;;) {
        struct pollfd p[3] = { { sfd, POLLIN, 0 }, { hold_pipe[0], POLLIN, 0 }, { shell_fd, POLLIN, 0 } };
        if (poll(p, shell_fd >= 0 ? 3 : 2, shell_fd >= 0 ? -1 : 200) < 0 && errno != EINTR) break;
        if ((p[0].revents & POLLIN) && !hold_extend(sfd, l, lease_ms)) break;     /* baton release */
        if (p[2].revents & (POLLIN | POLLHUP)) break;                    /* the shell is gone */
        if (shell_fd < 0 && kill(shell, 0) < 0 && errno == ESRCH) break; /* (no pidfd) */
        if (p[1].revents & POLLIN) {
            fprintf(stderr, "%s: %s: the lock was lost; sending SIGTERM to the shell's process group %ld\n", prog,
                    name, (long)shell_pgid);
            if (shell_pgid > 1) kill(-shell_pgid, SIGTERM);
            else kill(shell, SIGTERM);
            break;
        }
    }
release:
    rc = baton_lock_release(l);
    if (rc && rc != BATON_ENOTHELD && rc != BATON_ELOST) cli_report("release", rc);
    baton_lock_free(l);
    baton_client_close(c);
    free(lname);
    _exit(0);
}

/* 'NAME' as one shell word */
static void sh_quote(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputs("'\\''", f);
        else fputc(*s, f);
    }
    fputc('\'', f);
}

int cli_hold(int argc, char **argv)
{
    enum { O_URI_FILE = CLI_LONG_ONLY, O_FIXED };
    static const struct option lo[] = {
        { "uri", required_argument, NULL, CLI_LONG('u') },
        { "uri-file", required_argument, NULL, O_URI_FILE },
        { "nonblock", no_argument, NULL, CLI_LONG('n') },
        { "timeout", required_argument, NULL, CLI_LONG('w') },
        { "wait", required_argument, NULL, CLI_LONG('w') },
        { "lease", required_argument, NULL, CLI_LONG('t') },
        { "fixed", no_argument, NULL, O_FIXED },
        { "conflict-exit-code", required_argument, NULL, CLI_LONG('E') },
        { "help", no_argument, NULL, CLI_LONG('h') },
        { NULL, 0, NULL, 0 },
    };
    cli_opts o = { .argc = argc, .argv = argv, .cmd = "hold", .shorts = "u:nw:t:E:h", .lo = lo, .permute = 1 };
    const char *uri = NULL, *name = NULL;
    char *uri_owned = NULL, *msg = NULL;
    double wait_s = -1, lease_s = 30;
    int opt, names = 0, nowait = 0, fixed = 0, busy_code = EX_BUSY_DEFAULT, pfd[2], shell_fd, code;
    long long v;
    pid_t shell, pid;
    hold_reply r;

    while ((opt = cli_next(&o)) != CLI_END) {
        switch (opt) {
        case CLI_BAD: goto usage;
        case CLI_OPERAND: name = o.arg; names++; break;
        case 'u':
            free(uri_owned);
            if (!(uri = uri_owned = cli_uri_arg(o.arg))) return EX_SOFTWARE;
            break;
        case O_URI_FILE:
            free(uri_owned);
            if (!(uri = uri_owned = cli_read_uri_file("hold", o.arg))) goto usage;
            break;
        case 'n': nowait = 1; break;
        case O_FIXED: fixed = 1; break;
        case 'w': if (cli_secs("hold", o.name, o.arg, 0, 1e9, NULL, &wait_s)) goto usage; break;
        case 't':
            if (cli_secs("hold", o.name, o.arg, 0.05, 4294967.295, "leases are 32-bit milliseconds", &lease_s)) goto usage;
            break;
        case 'E':
            if (cli_int(o.arg, 0, 255, &v)) {
                cli_usage_error("hold", "%s: bad exit code '%s' (want 0 to 255)", o.name, o.arg);
                goto usage;
            }
            busy_code = (int)v;
            break;
        case 'h': free(uri_owned); cli_usage_hold(stdout); return 0;
        default: cli_usage_error("hold", "option '%s' is not handled", o.name); goto usage;
        }
    }
    if (names != 1) {
        cli_usage_error("hold", names ? "expected one NAME" : "missing NAME");
        goto usage;
    }
    /* The shell that will eval our output; watched through a pidfd taken
     * while it is still our parent (so it is not another process by then). */
    shell = getppid();
    shell_fd = pidfd_open(shell, 0);
    if (shell_fd >= 0) fcntl(shell_fd, F_SETFD, FD_CLOEXEC);
    if (getppid() != shell) {
        fprintf(stderr, "%s: hold: the calling shell is gone\n", prog);
        printf("(exit %d)\n", EX_SOFTWARE);
        return EX_SOFTWARE;
    }
    if (pipe2(pfd, O_CLOEXEC)) {
        fprintf(stderr, "%s: pipe: %s\n", prog, strerror(errno));
        printf("(exit %d)\n", EX_SOFTWARE);
        return EX_SOFTWARE;
    }
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        holder(pfd[1], cli_default_uri(uri), name, (uint32_t)(lease_s * 1000 + 0.5), fixed,
               nowait || wait_s == 0 ? 0 : wait_s < 0 ? -1 : (int64_t)(wait_s * 1000), busy_code, shell, shell_fd);
    }
    close(pfd[1]);
    if (shell_fd >= 0) close(shell_fd);
    if (pid < 0) {
        fprintf(stderr, "%s: fork: %s\n", prog, strerror(errno));
        printf("(exit %d)\n", EX_SOFTWARE);
        return EX_SOFTWARE;
    }
    /* (killed while we wait, the holder finds our end closed when it is
     * granted, and lets go) */
    {
        ssize_t k;
        while ((k = read(pfd[0], &r, sizeof r)) < 0 && errno == EINTR) {}
        if (k != (ssize_t)sizeof r) {
            fprintf(stderr, "%s: hold: the holder died\n", prog);
            code = EX_SOFTWARE;
            goto fail;
        }
    }
    if (r.len && r.len < (1u << 20) && (msg = calloc(1, r.len + 1))) {
        size_t got = 0;
        while (got < r.len) {
            ssize_t k = read(pfd[0], msg + got, r.len - got);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) break;
            got += (size_t)k;
        }
    }
    if (r.rc) {
        code = r.code;
        /* quiet when busy, as baton run */
        if (r.rc != BATON_ELOCKED && r.rc != BATON_ETIMEDOUT)
            fprintf(stderr, "%s: hold: %s: %s\n", prog, name, msg && *msg ? msg : baton_strerror(r.rc));
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
        goto fail;
    }
    /* the holder is not our child any more once we exit: nobody waits for it
     * but init (or the shell's subreaper), as for any daemon */
    printf("BATON_LOCK=");
    sh_quote(stdout, name);
    printf("; export BATON_LOCK; BATON_FENCE=%" PRIu64 "; export BATON_FENCE; BATON_HOLD_PID=%ld; "
           "export BATON_HOLD_PID; BATON_HOLDS=\"${BATON_HOLDS:+$BATON_HOLDS }%ld\"; export BATON_HOLDS\n",
           r.fence, (long)pid, (long)pid);
    free(msg);
    free(uri_owned);
    close(pfd[0]);
    return fflush(stdout) ? EX_SOFTWARE : 0;
fail:
    free(msg);
    free(uri_owned);
    close(pfd[0]);
    printf("(exit %d)\n", code);
    return code;
usage:
    free(uri_owned);
    printf("(exit %d)\n", EX_USAGE);
    return EX_USAGE;
}

/* Whether PID is a baton hold of NAME (its argv: ... "hold" ... NAME last). */
static int is_holder(pid_t pid, const char *name)
{
    char path[64], buf[8192], *last = NULL;
    ssize_t n;
    int fd, hold = 0;
    snprintf(path, sizeof path, "/proc/%ld/cmdline", (long)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) return 0;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    for (char *p = buf; p < buf + n; p += strlen(p) + 1) {
        if (!strcmp(p, "hold")) hold = 1;
        last = p;
    }
    return hold && last && (!name || !strcmp(last, name));
}

int cli_release(int argc, char **argv)
{
    static const struct option lo[] = {
        { "help", no_argument, NULL, CLI_LONG('h') },
        { NULL, 0, NULL, 0 },
    };
    cli_opts o = { .argc = argc, .argv = argv, .cmd = "release", .shorts = "h", .lo = lo, .permute = 1 };
    const char *name = NULL, *holds = getenv("BATON_HOLDS"), *one = getenv("BATON_HOLD_PID");
    char *list, *save = NULL;
    int opt, names = 0, found = 0;

    while ((opt = cli_next(&o)) != CLI_END) {
        switch (opt) {
        case CLI_BAD: return EX_USAGE;
        case CLI_OPERAND: name = o.arg; names++; break;
        case 'h': cli_usage_hold(stdout); return 0;
        default: return cli_usage_error("release", "option '%s' is not handled", o.name);
        }
    }
    if (names > 1) return cli_usage_error("release", "expected one NAME");
    if (asprintf(&list, "%s %s", holds ? holds : "", one ? one : "") < 0) return EX_SOFTWARE;
    for (char *t = strtok_r(list, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        long long v;
        pid_t pid;
        int pfd;
        if (cli_int(t, 2, INT32_MAX, &v)) continue;
        pid = (pid_t)v;
        if (!is_holder(pid, name)) continue;
        pfd = pidfd_open(pid, 0);
        if (kill(pid, SIGTERM) != 0) {
            if (pfd >= 0) close(pfd);
            continue;
        }
        found = 1;
        /* returns once the holder has released and exited: the lock is free */
        if (pfd >= 0) {
            struct pollfd p = { pfd, POLLIN, 0 };
            while (poll(&p, 1, -1) < 0 && errno == EINTR) {}
            close(pfd);
        } else {
            while (kill(pid, 0) == 0) usleep(10000);
        }
        if (name) break;
    }
    free(list);
    if (!found) {
        fprintf(stderr, "%s: release: no holder of %s in $BATON_HOLDS\n", prog, name ? name : "any lock");
        return 1;
    }
    return 0;
}

/* baton extend [-t SECS] NAME: ask the holder (found as baton release finds
 * it) for a new lease and wait for its answer. */
int cli_extend(int argc, char **argv)
{
    static const struct option lo[] = {
        { "lease", required_argument, NULL, CLI_LONG('t') },
        { "help", no_argument, NULL, CLI_LONG('h') },
        { NULL, 0, NULL, 0 },
    };
    cli_opts o = { .argc = argc, .argv = argv, .cmd = "extend", .shorts = "t:h", .lo = lo, .permute = 1 };
    const char *name = NULL, *holds = getenv("BATON_HOLDS"), *one = getenv("BATON_HOLD_PID");
    char *list, *save = NULL;
    double lease_s = 0;
    int opt, names = 0, code = 1;
    sigset_t usr2;

    while ((opt = cli_next(&o)) != CLI_END) {
        switch (opt) {
        case CLI_BAD: return EX_USAGE;
        case CLI_OPERAND: name = o.arg; names++; break;
        case 't':
            /* sigqueue carries an int: leases up to 2^31-1 ms (24 days) */
            if (cli_secs("extend", o.name, o.arg, 0.05, 2147483.647, "at most 2147483.647 s", &lease_s))
                return EX_USAGE;
            break;
        case 'h': cli_usage_hold(stdout); return 0;
        default: return cli_usage_error("extend", "option '%s' is not handled", o.name);
        }
    }
    if (names != 1) return cli_usage_error("extend", names ? "expected one NAME" : "missing NAME");
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    sigprocmask(SIG_BLOCK, &usr2, NULL);   /* before asking: the answer may come at once */
    if (asprintf(&list, "%s %s", holds ? holds : "", one ? one : "") < 0) return EX_SOFTWARE;
    for (char *t = strtok_r(list, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        union sigval v = { .sival_int = (int)(lease_s * 1000 + 0.5) };
        long long pv;
        pid_t pid;
        if (cli_int(t, 2, INT32_MAX, &pv)) continue;
        pid = (pid_t)pv;
        if (!is_holder(pid, name) || sigqueue(pid, SIGUSR1, v) != 0) continue;
        /* the holder answers within the engine's io timeout; look every
         * 100 ms whether it is still there to answer */
        for (;;) {
            struct timespec ts = { 0, 100000000 };
            siginfo_t si;
            if (sigtimedwait(&usr2, &si, &ts) == SIGUSR2) {
                if (si.si_pid != pid || si.si_code != SI_QUEUE) continue;
                code = si.si_value.sival_int == 0 ? 0 : si.si_value.sival_int == BATON_ELOST ? EX_LOST
                                                                              : cli_exit_for(si.si_value.sival_int);
                if (code == EX_LOST) fprintf(stderr, "%s: extend: %s: the lock was lost\n", prog, name);
                else if (code) fprintf(stderr, "%s: extend: %s: %s\n", prog, name, baton_strerror(si.si_value.sival_int));
                break;
            }
            if (kill(pid, 0) != 0) {
                fprintf(stderr, "%s: extend: the holder of %s ended before it answered\n", prog, name);
                code = EX_LOST;
                break;
            }
        }
        free(list);
        return code;
    }
    free(list);
    fprintf(stderr, "%s: extend: no holder of %s in $BATON_HOLDS\n", prog, name);
    return 1;
}
