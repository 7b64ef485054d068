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
#include <spawn.h>
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
        "  --permits N     take one of N permits of semaphore NAME\n"
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
    const char *uri = NULL, *name;
    double wait_s = -1, lease_s = 30, kill_after = 10;
    int fair = 0, shared = 0, write_side = 0;
    long permits = 0;
    baton_rwlock *rw = NULL;
    baton_semaphore *sem = NULL;
    int nowait = 0, busy_code = EX_BUSY_DEFAULT, opt, rc, status = 0, lost = 0, sfd, code;
    baton_client *c = NULL;
    baton_lock *l = NULL;
    baton_lock_options lo_opts = BATON_LOCK_OPTIONS_INIT;
    sigset_t fwd, old;
    pid_t child;
    char buf[32];
    char **envp = NULL;
    posix_spawnattr_t sa;
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

    /* Signals go to this thread only (the library's threads block them), and
     * are read from a signalfd so forwarding is ordinary code, not a handler. */
    sigemptyset(&fwd);
    sigaddset(&fwd, SIGINT); sigaddset(&fwd, SIGTERM); sigaddset(&fwd, SIGHUP); sigaddset(&fwd, SIGCHLD);
    if (pipe2(lost_pipe, O_CLOEXEC)) { perror("pipe"); return EX_SOFTWARE; }

    uri = default_uri(uri);
    if ((rc = baton_client_open(&c, uri, NULL))) { report("open", rc); return exit_for(rc); }
    lo_opts.lease_ms = (uint32_t)(lease_s * 1000);
    lo_opts.on_lost = on_lost;
    lo_opts.fair = fair;
    wait_ms = nowait ? 0 : wait_s < 0 ? -1 : (int64_t)(wait_s * 1000);
    if (wait_s == 0) wait_ms = 0;
    if (permits) {
        /* One of N permits: the first user sets N; later users join it. */
        if ((rc = baton_semaphore_open(&sem, c, name)) || (rc = baton_semaphore_try_set(sem, (uint32_t)permits, NULL))) {
            report("semaphore", rc);
            code = exit_for(rc);
            goto out;
        }
        rc = baton_semaphore_acquire(sem, 1, wait_ms);
    } else {
        if (shared || write_side) {
            if ((rc = baton_rwlock_open(&rw, c, name, &lo_opts))) { report("rwlock", rc); code = exit_for(rc); goto out; }
            l = shared ? baton_rwlock_read(rw) : baton_rwlock_write(rw);
        } else if ((rc = baton_lock_open(&l, c, name, &lo_opts))) {
            report("lock", rc);
            code = exit_for(rc);
            goto out;
        }
        rc = baton_lock_acquire(l, wait_ms);
    }
    if (rc == BATON_ELOCKED || rc == BATON_ETIMEDOUT) {
        fprintf(stderr, "%s: %s: %s\n", prog, name, rc == BATON_ELOCKED ? "busy" : "wait timed out");
        code = busy_code;
        goto out;
    }
    if (rc) { report("acquire", rc); code = exit_for(rc); goto out; }

    sigprocmask(SIG_BLOCK, &fwd, &old);
    sfd = signalfd(-1, &fwd, SFD_CLOEXEC);
    snprintf(buf, sizeof buf, "%" PRIu64, l ? baton_lock_fence(l) : 0);
    envp = child_env(name, l ? buf : NULL, baton_client_uri(c));
    if (!envp) {
        fprintf(stderr, "%s: out of memory\n", prog);
        code = EX_SOFTWARE;
        goto out;
    }
    /* posix_spawn (vfork underneath) rather than fork: the parent's page
     * tables (the TLS libraries mapped in) are not copied for a short command. */
    posix_spawnattr_init(&sa);
    posix_spawnattr_setsigmask(&sa, &old);
    posix_spawnattr_setflags(&sa, POSIX_SPAWN_SETSIGMASK);
    rc = posix_spawnp(&child, argv[optind], NULL, &sa, argv + optind, envp);
    if (rc == ENOEXEC) {
        /* a script without a #! line: what execvp does, run it with sh */
        int n = argc - optind;
        char **shv = calloc((size_t)n + 2, sizeof *shv);
        if (shv) {
            shv[0] = "sh";
            for (int i = 0; i < n; i++) shv[i + 1] = argv[optind + i];
            rc = posix_spawn(&child, "/bin/sh", NULL, &sa, shv, envp);
            free(shv);
        }
    }
    posix_spawnattr_destroy(&sa);
    free_env(envp);
    if (rc) {
        fprintf(stderr, "%s: %s: %s\n", prog, argv[optind], strerror(rc));
        /* 127: not found; 126: found but not runnable; the spawn itself failing is ours */
        code = rc == ENOENT ? 127 : (rc == EAGAIN || rc == ENOMEM) ? EX_SOFTWARE : 126;
        close(sfd);
        sigprocmask(SIG_SETMASK, &old, NULL);
        rc = sem ? baton_semaphore_release(sem, 1) : baton_lock_release(l);
        goto out;
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
    rc = sem ? baton_semaphore_release(sem, 1) : baton_lock_release(l);
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
    if (rw) baton_rwlock_free(rw);
    else baton_lock_free(l);
    baton_semaphore_free(sem);
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

int main(int argc, char **argv)
{
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
