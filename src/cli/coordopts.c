/* The options of the coordination commands (value, counter, member,
 * members, queue, barrier): one parser, each command allowing its own.
 * Options may stand anywhere among the operands, as for latch and sem; a
 * command that runs COMMAND takes it after "--", or from the first operand
 * past its own (as baton run takes it after NAME). */
#include "cli.h"
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

enum { O_URI_FILE = CLI_LONG_ONLY, O_IFVER, O_CREATE, O_VERSION, O_RAW, O_VALUE, O_ID, O_WATCH, O_KILL,
       O_VERBOSE };

/* A version as typed: 1 to 2^64-2 (0 is "absent", the top value is "any"). */
static int parse_version(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;
    if (!*s || *s == '-' || *s == '+' || *s == ' ') return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end || v == 0 || v >= UINT64_MAX) return -1;
    *out = v;
    return 0;
}

/* Whether the option that cli_next returned is one this command takes. */
static int allowed(const cli_co *o, int opt)
{
    switch (opt) {
    case 'u': case 'h': case O_URI_FILE: return 1;
    case 'w': return !!(o->allow & CO_WAIT);
    case 'E': return !!(o->allow & CO_BUSY);
    case 'n': return !!(o->allow & (CO_NOWAIT | CO_COUNT));
    case 't': return !!(o->allow & CO_LEASE);
    case O_KILL: return !!(o->allow & CO_LEASE);
    case O_IFVER: return !!(o->allow & CO_IFVER);
    case O_CREATE: return !!(o->allow & CO_CREATE);
    case O_VERSION: return !!(o->allow & CO_VERSION);
    case 'z': return !!(o->allow & CO_NULL);
    case O_RAW: return !!(o->allow & CO_RAW);
    case O_VALUE: return !!(o->allow & CO_VALUE);
    case O_ID: return !!(o->allow & CO_ID);
    case O_WATCH: return !!(o->allow & CO_WATCH);
    case O_VERBOSE: return !!(o->allow & CO_VERBOSE);
    default: return 0;
    }
}

static int one_option(cli_co *o, cli_opts *g, int opt, void (*usage)(FILE *))
{
    long long v;

    if (!allowed(o, opt)) return cli_usage_error(o->cmd, "%s is not an option of baton %s", g->name, o->cmd);
    switch (opt) {
    case 'u':
        free(o->uri_owned);
        if (!(o->uri = o->uri_owned = cli_uri_arg(g->arg))) return EX_SOFTWARE;
        return -1;
    case O_URI_FILE:
        free(o->uri_owned);
        if (!(o->uri = o->uri_owned = cli_read_uri_file(o->cmd, g->arg))) return EX_USAGE;
        return -1;
    case 'h': usage(stdout); return 0;
    case 'w': return cli_secs(o->cmd, g->name, g->arg, 0, 1e9, NULL, &o->wait_s) ? EX_USAGE : -1;
    case 'E':
        if (cli_int(g->arg, 0, 255, &v))
            return cli_usage_error(o->cmd, "%s: bad exit code '%s' (want 0 to 255)", g->name, g->arg);
        o->busy_code = (int)v;
        return -1;
    case 't':
        return cli_secs(o->cmd, g->name, g->arg, 0.05, 4294967.295, "leases are 32-bit milliseconds", &o->lease_s)
                   ? EX_USAGE : -1;
    case O_KILL: return cli_secs(o->cmd, g->name, g->arg, 0, 1e9, NULL, &o->kill_after) ? EX_USAGE : -1;
    case 'n':
        if (o->allow & CO_NOWAIT) { o->nowait = 1; return -1; }
        if (cli_int(g->arg, 1, 1000000, &v))
            return cli_usage_error(o->cmd, "%s: bad count '%s' (want 1 to 1000000)", g->name, g->arg);
        o->count = v;
        return -1;
    case O_IFVER:
        if (parse_version(g->arg, &o->if_version))
            return cli_usage_error(o->cmd, "%s: bad version '%s' (want 1 to %" PRIu64 ")", g->name, g->arg,
                                   UINT64_MAX - 1);
        o->have_if = 1;
        return -1;
    case O_CREATE: o->create = 1; return -1;
    case O_VERSION: o->version = 1; return -1;
    case 'z': o->null = 1; return -1;
    case O_RAW: o->raw = 1; return -1;
    case O_WATCH: o->watch = 1; return -1;
    case O_VERBOSE: o->verbose = 1; return -1;
    case O_VALUE:
        if (strlen(g->arg) > BATON_MEMBER_VALUE_MAX)
            return cli_usage_error(o->cmd, "%s: the value is %zu bytes; the limit is %d", g->name, strlen(g->arg),
                                   BATON_MEMBER_VALUE_MAX);
        o->value = g->arg;
        return -1;
    case O_ID:
        if (!*g->arg || strlen(g->arg) > BATON_MEMBER_ID_MAX ||
            strspn(g->arg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != strlen(g->arg))
            return cli_usage_error(o->cmd, "%s: bad member id '%s' (1 to %d of A-Z a-z 0-9 . _ -)", g->name, g->arg,
                                   BATON_MEMBER_ID_MAX);
        o->id = g->arg;
        return -1;
    default:
        return cli_usage_error(o->cmd, "option '%s' is not handled", g->name);   /* a bug of ours */
    }
}

void cli_co_op_first(int argc, char **argv, const char *const *ops)
{
    static const char *const with_arg[] = { "-u", "--uri", "--uri-file", "-w", "--timeout", "--wait", "-t",
                                            "--lease", "-E", "--conflict-exit-code", "--if-version", "--value",
                                            "--id", "--kill-after", NULL };
    /* "baton value -u URI set k v": the options before the operation move
     * after it (the first word that names an operation; "--" ends the
     * search) */
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        for (const char *const *op = ops; *op; op++) {
            if (strcmp(argv[i], *op)) continue;
            if (i > 1) {
                char *w = argv[i];
                memmove(argv + 2, argv + 1, (size_t)(i - 1) * sizeof *argv);
                argv[1] = w;
            }
            return;
        }
        if (argv[i][0] != '-') return;   /* an operand first: an unknown operation */
        /* an option's argument in the next word */
        for (const char *const *w = with_arg; *w; w++)
            if (!strcmp(argv[i], *w)) { i++; break; }
    }
}

int cli_co_parse(cli_co *o, int argc, char **argv, void (*usage)(FILE *))
{
    static const struct option lo[] = {
        { "uri", required_argument, NULL, CLI_LONG('u') },
        { "uri-file", required_argument, NULL, O_URI_FILE },
        { "help", no_argument, NULL, CLI_LONG('h') },
        { "timeout", required_argument, NULL, CLI_LONG('w') },
        { "wait", required_argument, NULL, CLI_LONG('w') },
        { "nonblock", no_argument, NULL, CLI_LONG('n') },
        { "conflict-exit-code", required_argument, NULL, CLI_LONG('E') },
        { "count", required_argument, NULL, CLI_LONG('n') },
        { "lease", required_argument, NULL, CLI_LONG('t') },
        { "kill-after", required_argument, NULL, O_KILL },
        { "if-version", required_argument, NULL, O_IFVER },
        { "create", no_argument, NULL, O_CREATE },
        { "version", no_argument, NULL, O_VERSION },
        { "null", no_argument, NULL, CLI_LONG('z') },
        { "raw", no_argument, NULL, O_RAW },
        { "value", required_argument, NULL, O_VALUE },
        { "id", required_argument, NULL, O_ID },
        { "watch", no_argument, NULL, O_WATCH },
        { "verbose", no_argument, NULL, O_VERBOSE },
        { NULL, 0, NULL, 0 },
    };
    /* -n is --nonblock (no argument) or --count N, by the command */
    cli_opts g = { .argc = argc, .argv = argv, .cmd = o->cmd, .lo = lo, .permute = 1,
                   .shorts = (o->allow & CO_COUNT) ? "u:hw:n:t:zE:" : "u:hw:nt:zE:" };
    int opt, code;

    o->wait_s = -1;
    o->lease_s = 30;
    o->kill_after = 10;
    o->busy_code = EX_BUSY_DEFAULT;
    optind = 1;
    for (;;) {
        /* "--": what follows is COMMAND (or, for a command without one,
         * operands that may start with '-') */
        if ((o->allow & CO_CMD) && !g.mid && optind < argc && !strcmp(argv[optind], "--")) {
            o->cmdv = argv + optind + 1;
            o->cmdc = argc - optind - 1;
            break;
        }
        if ((opt = cli_next(&g)) == CLI_END) break;
        if (opt == CLI_BAD) return EX_USAGE;
        if (opt == CLI_OPERAND) {
            if (o->nops == o->maxops && (o->allow & CO_CMD)) {
                /* the first word of COMMAND: the rest is its own */
                o->cmdv = argv + optind - 1;
                o->cmdc = argc - optind + 1;
                break;
            }
            if (o->nops == o->maxops) return cli_usage_error(o->cmd, "too many arguments ('%s')", g.arg);
            o->ops[o->nops++] = g.arg;
            continue;
        }
        if ((code = one_option(o, &g, opt, usage)) >= 0) return code;
    }
    if (o->have_if && o->create)
        return cli_usage_error(o->cmd, "--if-version and --create exclude each other");
    if (o->nowait && o->wait_s >= 0) return cli_usage_error(o->cmd, "-n and -w exclude each other");
    return -1;
}

void cli_co_free(cli_co *o)
{
    free(o->uri_owned);
    o->uri_owned = NULL;
}

int cli_co_client(cli_co *o, baton_client **c)
{
    int rc = baton_client_open(c, cli_default_uri(o->uri), NULL);
    if (rc) {
        cli_report("open", rc);
        return cli_exit_for(rc);
    }
    return 0;
}

/* Not supported by the engine: said in words of our own. */
int cli_co_open_failed(baton_client *c, const char *what, const char *cmd, int rc)
{
    if (rc == BATON_ENOTSUP)
        fprintf(stderr, "%s: %s are not supported by the %s engine\n", cli_prog, what, baton_client_backend(c));
    else
        cli_report(cmd, rc);
    return cli_exit_for(rc);
}

/* All of standard input, at most MAX bytes: 0, or the exit code, reported. */
int cli_co_read_stdin(const char *cmd, size_t max, char **out, size_t *len)
{
    size_t cap = 65536, n = 0;
    char *b = malloc(cap), *nb;

    if (!b) goto oom;
    for (;;) {
        ssize_t k;
        if (n == cap) {
            if (cap > max) break;
            if (!(nb = realloc(b, cap * 2))) goto oom;
            b = nb;
            cap *= 2;
        }
        k = read(0, b + n, cap - n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            fprintf(stderr, "%s: %s: standard input: %s\n", cli_prog, cmd, strerror(errno));
            free(b);
            return EX_IOERR;
        }
        if (k == 0) break;
        n += (size_t)k;
    }
    if (n > max) {
        free(b);
        return cli_usage_error(cmd, "standard input is over %zu bytes, the limit", max);
    }
    *out = b;
    *len = n;
    return 0;
oom:
    free(b);
    fprintf(stderr, "%s: out of memory\n", cli_prog);
    return EX_SOFTWARE;
}

/* ---- running COMMAND (value watch, barrier) -------------------------------
 * The command while it runs (0: none), and the signal that asked us to
 * stop. A signal while the command runs goes to it, and we end after it;
 * one while we wait on the engine ends us at once (by the signal's default
 * action: these commands hold nothing another client waits on). */
static volatile sig_atomic_t child_pid, stop_sig;

static void on_stop_signal(int sig)
{
    if (child_pid > 0) {
        stop_sig = sig;
        kill((pid_t)child_pid, sig);
        return;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

void cli_co_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

int cli_co_stopped(void)
{
    return stop_sig;
}

int cli_co_run(char **argv, const char *const *keys, const char *const *vals, size_t n, const void *in, size_t inlen)
{
    cli_env e = { 0 };
    int fd = -1, st;
    pid_t pid;

    if (in && (fd = memfd_create("baton-input", MFD_CLOEXEC)) < 0) {
        fprintf(stderr, "%s: memfd_create: %s\n", cli_prog, strerror(errno));
        return -1;
    }
    if (in && ((inlen && write(fd, in, inlen) != (ssize_t)inlen) || lseek(fd, 0, SEEK_SET) < 0)) {
        fprintf(stderr, "%s: the command's input: %s\n", cli_prog, strerror(errno));
        close(fd);
        return -1;
    }
    if (cli_env_make(&e, keys, vals, n)) {
        fprintf(stderr, "%s: out of memory\n", cli_prog);
        if (fd >= 0) close(fd);
        return -1;
    }
    fflush(stdout);
    if ((pid = fork()) == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        if (fd >= 0 && dup2(fd, 0) < 0) _exit(126);
        execvpe(argv[0], argv, e.env);
        fprintf(stderr, "%s: %s: %s\n", cli_prog, argv[0], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    if (fd >= 0) close(fd);
    cli_env_free(&e);
    if (pid < 0) {
        fprintf(stderr, "%s: fork: %s\n", cli_prog, strerror(errno));
        return -1;
    }
    child_pid = pid;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            child_pid = 0;
            fprintf(stderr, "%s: waitpid: %s\n", cli_prog, strerror(errno));
            return -1;
        }
    }
    child_pid = 0;
    return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}
