/* baton(1): flock(1) across machines, on the public API only. */
#include <baton.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static void usage(FILE *f)
{
    fprintf(f,
        "usage: baton run [-u URI] [-n | -w SECS] [-t LEASE_SECS] [-E CODE] [--kill-after SECS] NAME -- CMD...\n"
        "       baton status [-u URI] NAME\n"
        "       baton version\n"
        "\n"
        "  -u URI          engine (default $BATON_URI, else the file backend)\n"
        "  -n              do not wait: exit 1 (or -E CODE) when the lock is busy\n"
        "  -w SECS         wait at most SECS (default: forever)\n"
        "  -t LEASE_SECS   lease, renewed while CMD runs (default 30)\n"
        "  -E CODE         exit code when busy or the wait ran out (default 1)\n"
        "  --kill-after S  after a lost lease, SIGKILL the child S seconds after SIGTERM (default 10)\n"
        "\n"
        "exit: the child's status (128+signal if killed), 1 busy, 64 usage, 69 engine\n"
        "unreachable or authentication failed, 75 lease lost while CMD ran.\n");
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

static int lost_pipe[2] = { -1, -1 };

static void on_lost(baton_lock *l, void *p)
{
    char c = 'L';
    (void)l; (void)p;
    if (write(lost_pipe[1], &c, 1) < 0) { /* nothing to do: the pipe is ours */ }
}

static int cmd_run(int argc, char **argv)
{
    static const struct option lo[] = {
        { "kill-after", required_argument, NULL, 'K' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *uri = NULL, *name;
    double wait_s = -1, lease_s = 30, kill_after = 10;
    int nowait = 0, busy_code = EX_BUSY_DEFAULT, opt, rc, status = 0, lost = 0, sfd, code;
    baton_client *c = NULL;
    baton_lock *l = NULL;
    baton_lock_options lo_opts = BATON_LOCK_OPTIONS_INIT;
    sigset_t fwd, old;
    pid_t child;
    char buf[32];
    int64_t wait_ms;
    struct timespec kill_at = { 0, 0 };

    optind = 1;
    while ((opt = getopt_long(argc, argv, "+u:nw:t:E:h", lo, NULL)) != -1) {
        switch (opt) {
        case 'u': uri = optarg; break;
        case 'n': nowait = 1; break;
        case 'w': if (parse_secs(optarg, &wait_s)) goto bad_num; break;
        case 't': if (parse_secs(optarg, &lease_s) || lease_s < 0.05) goto bad_num; break;
        case 'K': if (parse_secs(optarg, &kill_after)) goto bad_num; break;
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
    if (optind >= argc) { fprintf(stderr, "%s: run: missing NAME\n", prog); return EX_USAGE; }
    name = argv[optind++];
    if (optind < argc && !strcmp(argv[optind], "--")) optind++;
    if (optind >= argc) { fprintf(stderr, "%s: run: missing COMMAND\n", prog); return EX_USAGE; }

    /* Signals go to this thread only (the library's threads block them), and
     * are read from a signalfd so forwarding is ordinary code, not a handler. */
    sigemptyset(&fwd);
    sigaddset(&fwd, SIGINT); sigaddset(&fwd, SIGTERM); sigaddset(&fwd, SIGHUP); sigaddset(&fwd, SIGCHLD);
    if (pipe2(lost_pipe, O_CLOEXEC)) { perror("pipe"); return EX_SOFTWARE; }

    uri = default_uri(uri);
    if ((rc = baton_client_open(&c, uri, NULL))) { report("open", rc); return exit_for(rc); }
    lo_opts.lease_ms = (uint32_t)(lease_s * 1000);
    lo_opts.on_lost = on_lost;
    if ((rc = baton_lock_open(&l, c, name, &lo_opts))) { report("lock", rc); code = exit_for(rc); goto out; }
    wait_ms = nowait ? 0 : wait_s < 0 ? -1 : (int64_t)(wait_s * 1000);
    if (wait_s == 0) wait_ms = 0;
    rc = baton_lock_acquire(l, wait_ms);
    if (rc == BATON_ELOCKED || rc == BATON_ETIMEDOUT) {
        fprintf(stderr, "%s: %s: %s\n", prog, name, rc == BATON_ELOCKED ? "busy" : "wait timed out");
        code = busy_code;
        goto out;
    }
    if (rc) { report("acquire", rc); code = exit_for(rc); goto out; }

    sigprocmask(SIG_BLOCK, &fwd, &old);
    sfd = signalfd(-1, &fwd, SFD_CLOEXEC);
    child = fork();
    if (child < 0) {
        perror("fork");
        code = EX_SOFTWARE;
        goto out;
    }
    if (child == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        snprintf(buf, sizeof buf, "%" PRIu64, baton_lock_fence(l));
        setenv("BATON_LOCK", name, 1);
        setenv("BATON_FENCE", buf, 1);
        setenv("BATON_URI", baton_client_uri(c), 1);
        execvp(argv[optind], argv + optind);
        fprintf(stderr, "%s: %s: %s\n", prog, argv[optind], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }

    for (;;) {
        struct pollfd p[2] = { { sfd, POLLIN, 0 }, { lost_pipe[0], POLLIN, 0 } };
        int timeout = -1, w;
        if (kill_at.tv_sec) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            int64_t left = (kill_at.tv_sec - now.tv_sec) * 1000 + (kill_at.tv_nsec - now.tv_nsec) / 1000000;
            if (left <= 0) { kill(child, SIGKILL); kill_at.tv_sec = 0; }
            else timeout = (int)left;
        }
        if (poll(p, lost ? 1 : 2, timeout) < 0 && errno != EINTR) break;
        if (p[1].revents & POLLIN && !lost) {
            lost = 1;
            fprintf(stderr, "%s: %s: lease lost; terminating the command\n", prog, name);
            kill(child, SIGTERM);
            clock_gettime(CLOCK_MONOTONIC, &kill_at);
            kill_at.tv_sec += (time_t)kill_after;
            kill_at.tv_nsec += (long)((kill_after - floor(kill_after)) * 1e9);
            if (kill_at.tv_nsec >= 1000000000L) { kill_at.tv_sec++; kill_at.tv_nsec -= 1000000000L; }
            if (!kill_at.tv_sec) kill_at.tv_sec = 1;
        }
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == sizeof si && si.ssi_signo != SIGCHLD)
                kill(child, (int)si.ssi_signo);
        }
        w = waitpid(child, &status, WNOHANG);
        if (w == child) break;
    }
    close(sfd);
    rc = baton_lock_release(l);
    if (lost || rc == BATON_ELOST) {
        code = EX_LOST;
        if (!lost) fprintf(stderr, "%s: %s: lease lost while the command ran\n", prog, name);
    } else if (WIFSIGNALED(status)) {
        code = 128 + WTERMSIG(status);
    } else {
        code = WEXITSTATUS(status);
        if (rc) report("release", rc);
    }
out:
    baton_lock_free(l);
    baton_client_close(c);
    close(lost_pipe[0]);
    close(lost_pipe[1]);
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
    baton_client_close(c);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) { usage(stderr); return EX_USAGE; }
    if (!strcmp(argv[1], "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(argv[1], "status")) return cmd_status(argc - 1, argv + 1);
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
