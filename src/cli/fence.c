/* baton fence FILE [FENCE] [-- COMMAND [ARG...]]: the file recipe of
 * docs/fencing.md as a command, on baton_fence_enter() (the public API).
 * Admits FENCE (default $BATON_FENCE) against the fence file FILE; with a
 * COMMAND, runs it while the fence file stays locked, so that no newer
 * holder can admit and write between the check and the command's write. */
#include "cli.h"
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void cli_usage_fence(FILE *f)
{
    fprintf(f,
        "usage: baton fence [-q] FILE [FENCE] [-- COMMAND [ARG...]]\n"
        "Admit FENCE (default $BATON_FENCE) against the fence file FILE, which holds\n"
        "the highest fence admitted so far: FENCE >= it is stored and admitted (equal\n"
        "is the same holder writing again), a smaller one is refused. With COMMAND,\n"
        "run it while FILE stays locked (FILE.lock is flock(2)ed beside it), so that\n"
        "the write it does cannot race a newer holder's. See docs/fencing.md.\n"
        "\n"
        "  -q, --quiet   no message when fenced off\n"
        "  -h, --help    this help\n"
        "\n"
        "example: baton run jobs -- baton fence out.fence -- cp new.csv out.csv\n"
        "\n"
        "exit: 0 admitted (COMMAND's status when given, 128+signal if killed,\n"
        "126/127 not runnable/not found), 65 fenced off (\"fenced off: stored N > yours M\"),\n"
        "64 usage (no or bad FENCE), 74 FILE unreadable or not a fence file, 70 internal.\n");
}

/* "baton fence: FILE: fenced off: stored 9 > yours 7" */
static void report(const char *file, int rc)
{
    const baton_error *e = baton_error_last();
    fprintf(stderr, "%s fence: %s: %s\n", cli_prog, file,
            e->code == rc && e->message && *e->message ? e->message : baton_strerror(rc));
}

/* A decimal fence, 1 to 2^64-1, nothing else. */
static int parse_fence(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!s || !*s) return -1;
    for (const char *p = s; *p; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (d > 9 || v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    if (v == 0) return -1;
    *out = v;
    return 0;
}

static volatile sig_atomic_t g_child;

/* INT, TERM, HUP, QUIT go to COMMAND, and we wait for it: the flock must
 * outlive COMMAND's write (only SIGKILL can end us first). */
static void forward(int sig)
{
    if (g_child > 0) kill((pid_t)g_child, sig);
}

/* COMMAND under the guard: its exit status the shell's way. */
static int run_command(char **argv)
{
    static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
    struct sigaction sa, old;
    int status;
    pid_t pid, w;

    /* waitpid needs SIGCHLD not ignored */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
    sa.sa_handler = forward;
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        /* a signal we were started with ignored stays ignored, for COMMAND too */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(sigs[i], &sa, NULL);
    }
    fflush(NULL);
    pid = fork();

    if (pid < 0) {
        fprintf(stderr, "%s: fence: fork: %s\n", cli_prog, strerror(errno));
        return EX_SOFTWARE;
    }
    if (pid == 0) {
        execvp(argv[0], argv);
        fprintf(stderr, "%s: fence: %s: %s\n", cli_prog, argv[0], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    g_child = pid;
    while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
        ;
    if (w < 0) {
        fprintf(stderr, "%s: fence: waitpid: %s\n", cli_prog, strerror(errno));
        return EX_SOFTWARE;
    }
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

int cli_fence(int argc, char **argv)
{
    static const struct option lo[] = {
        { "quiet", no_argument, NULL, CLI_LONG('q') },
        { "help", no_argument, NULL, CLI_LONG('h') },
        { NULL, 0, NULL, 0 },
    };
    cli_opts o = { .argc = argc, .argv = argv, .cmd = "fence", .shorts = "qh", .lo = lo, .permute = 0 };
    const char *file, *fence_s = NULL, *from = "FENCE";
    char **cmd = NULL;
    baton_fence_guard *g = NULL;
    uint64_t fence, seen = 0;
    int opt, rc, quiet = 0, i;

    while ((opt = cli_next(&o)) != CLI_END) {
        switch (opt) {
        case CLI_BAD: return EX_USAGE;
        case 'q': quiet = 1; break;
        case 'h': cli_usage_fence(stdout); return 0;
        default: return cli_usage_error("fence", "option '%s' is not handled", o.name);
        }
    }
    i = optind;
    if (i >= argc) return cli_usage_error("fence", "missing FILE");
    file = argv[i++];
    if (i < argc && strcmp(argv[i], "--")) fence_s = argv[i++];
    if (i < argc) {
        if (strcmp(argv[i], "--"))
            return cli_usage_error("fence", "unexpected '%s' (a COMMAND follows '--')", argv[i]);
        if (++i >= argc) return cli_usage_error("fence", "missing COMMAND after '--'");
        cmd = argv + i;
    }
    if (!fence_s) {
        fence_s = getenv("BATON_FENCE");
        from = "$BATON_FENCE";
        if (!fence_s || !*fence_s)
            return cli_usage_error("fence", "no FENCE given and BATON_FENCE is not set (run it under 'baton run')");
    }
    if (parse_fence(fence_s, &fence))
        return cli_usage_error("fence", "bad %s '%s' (want a whole number from 1 to %" PRIu64 ")", from, fence_s,
                               UINT64_MAX);

    rc = baton_fence_enter(cmd ? &g : NULL, file, fence, &seen);
    if (rc == BATON_ESTALE) {
        if (!quiet) report(file, rc);
        return EX_FENCED;
    }
    if (rc) {
        report(file, rc);
        return rc == BATON_EIO ? EX_IOERR : rc == BATON_EINVAL ? EX_USAGE : EX_SOFTWARE;
    }
    if (!cmd) return 0;
    rc = run_command(cmd);
    baton_fence_leave(g);
    return rc;
}
