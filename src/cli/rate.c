/* baton rate: waits for a permit of the rate limiter NAME, then runs
 * COMMAND in its place (exec: nothing is held afterwards, so the command
 * owes baton nothing), or with no COMMAND just takes the permit and exits 0.
 * docs/ratelimit.md. */
#include "cli.h"
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define prog cli_prog

static void usage_rate(FILE *f)
{
    fprintf(f,
        "usage: baton rate [-u URI] [-n N] [--per SECS] [--burst B] [--per-client [--client-id ID]]\n"
        "                  [-w SECS] [-E CODE] [--replace] [--verbose] NAME [[--] COMMAND [ARG...]]\n"
        "Waits until the rate limiter NAME admits one more (at most N per SECS,\n"
        "B at once after idleness; GCRA at the engine), then runs COMMAND in baton's\n"
        "place (exec), or exits 0 without one. The limiter's configuration lives at\n"
        "the engine: the first user stores it; a different one is refused (64) unless\n"
        "--replace.\n"
        "\n"
        "  -u, --uri URI       the engine (default $BATON_URI, else the file engine)\n"
        "  -n, --permits N     admissions per interval (default 1)\n"
        "      --per SECS      the interval (default 1; 0.001 to 86400)\n"
        "      --burst B       admissions that may pass at once (default N)\n"
        "      --per-client    a limit of this client's own (RRateLimiter's PER_CLIENT)\n"
        "      --client-id ID  who the client is (default: this host's name)\n"
        "  -w, --timeout SECS  wait at most SECS (also --wait; 0: take one only if free\n"
        "                      now; default: forever)\n"
        "  -E, --conflict-exit-code CODE  exit code when no permit came (default 1)\n"
        "      --replace       store this configuration even if another one is stored\n"
        "      --verbose       say on stderr when the next permit would come\n"
        "  -h, --help          this help\n"
        "\n"
        "exit: COMMAND's status (it replaces baton), or 0 without one; 1 (-E) no permit\n"
        "within -w; 64 usage or a differently configured limiter; 69 engine\n"
        "unreachable; 127 COMMAND not found, 126 not runnable; 128+signal when\n"
        "INT/TERM/HUP canceled the wait.\n");
}

/* INT, TERM and HUP cancel the wait: a thread takes them (the library's
 * cancel is not async-signal-safe) and the wait answers BATON_ECANCELED. */
static baton_ratelimit *volatile sig_target;
static volatile sig_atomic_t sig_got;
static sigset_t sig_set;

static void *sig_main(void *arg)
{
    int s = 0;
    (void)arg;
    if (sigwait(&sig_set, &s) == 0) {
        sig_got = s;
        if (sig_target) baton_ratelimit_cancel(sig_target);
    }
    return NULL;
}

typedef struct {
    const char *uri, *name, *client_id;
    char *uri_owned;
    long long permits, burst, busy_code;
    double per_s, wait_s;
    int per_client, replace, verbose;
    char **cmdv;
} rate_args;

static int parse(rate_args *a, int argc, char **argv)
{
    enum { O_PER = CLI_LONG_ONLY, O_BURST, O_PER_CLIENT, O_CLIENT_ID, O_REPLACE, O_VERBOSE, O_URI_FILE };
    static const struct option lo[] = {
        { "uri", required_argument, NULL, CLI_LONG('u') },
        { "uri-file", required_argument, NULL, O_URI_FILE },
        { "permits", required_argument, NULL, CLI_LONG('n') },
        { "per", required_argument, NULL, O_PER },
        { "burst", required_argument, NULL, O_BURST },
        { "per-client", no_argument, NULL, O_PER_CLIENT },
        { "client-id", required_argument, NULL, O_CLIENT_ID },
        { "timeout", required_argument, NULL, CLI_LONG('w') },
        { "wait", required_argument, NULL, CLI_LONG('w') },
        { "conflict-exit-code", required_argument, NULL, CLI_LONG('E') },
        { "replace", no_argument, NULL, O_REPLACE },
        { "verbose", no_argument, NULL, O_VERBOSE },
        { "help", no_argument, NULL, CLI_LONG('h') },
        { NULL, 0, NULL, 0 },
    };
    cli_opts o = { .argc = argc, .argv = argv, .cmd = "rate", .shorts = "u:n:w:E:h", .lo = lo, .permute = 0 };
    int opt;
    while ((opt = cli_next(&o)) != CLI_END) {
        switch (opt) {
        case CLI_BAD: return EX_USAGE;
        case 'u':
        case O_URI_FILE:
            free(a->uri_owned);
            a->uri = a->uri_owned = opt == 'u' ? cli_uri_arg(o.arg) : cli_read_uri_file("rate", o.arg);
            if (!a->uri) return opt == 'u' ? EX_SOFTWARE : EX_USAGE;
            break;
        case 'n':
            if (cli_int(o.arg, 1, 1000000, &a->permits))
                return cli_usage_error("rate", "bad %s '%s' (want 1 to 1000000)", o.name, o.arg);
            break;
        case O_BURST:
            if (cli_int(o.arg, 1, 1000000, &a->burst))
                return cli_usage_error("rate", "bad %s '%s' (want 1 to 1000000)", o.name, o.arg);
            break;
        case O_PER:
            if (cli_secs("rate", o.name, o.arg, 0.001, 86400, NULL, &a->per_s)) return EX_USAGE;
            break;
        case 'w': if (cli_secs("rate", o.name, o.arg, 0, 1e9, NULL, &a->wait_s)) return EX_USAGE; break;
        case 'E':
            if (cli_int(o.arg, 1, 255, &a->busy_code))
                return cli_usage_error("rate", "bad %s '%s' (want 1 to 255)", o.name, o.arg);
            break;
        case O_PER_CLIENT: a->per_client = 1; break;
        case O_CLIENT_ID: a->client_id = o.arg; break;
        case O_REPLACE: a->replace = 1; break;
        case O_VERBOSE: a->verbose = 1; break;
        case 'h': usage_rate(stdout); return 0;
        default: return cli_usage_error("rate", "option '%s' is not handled", o.name);
        }
    }
    if (optind >= argc) return cli_usage_error("rate", "missing NAME");
    a->name = argv[optind++];
    if (optind < argc && !strcmp(argv[optind], "--")) optind++;
    if (optind < argc) a->cmdv = argv + optind;
    if (a->client_id && !a->per_client) return cli_usage_error("rate", "--client-id needs --per-client");
    return -1;
}

/* Takes the permit: 0, or the exit code (reported). */
static int take(rate_args *a, baton_client *c)
{
    baton_ratelimit_options ro = BATON_RATELIMIT_OPTIONS_INIT;
    baton_ratelimit *r = NULL;
    char host[256] = "";
    int rc, code = 0;
    ro.permits = (uint32_t)a->permits;
    ro.interval_ms = (uint32_t)(a->per_s * 1000 + 0.5);
    ro.burst = (uint32_t)a->burst;
    ro.replace = a->replace;
    if (a->per_client) {
        ro.scope = BATON_RATELIMIT_PER_CLIENT;
        /* a baton rate process lives for one permit: "the client" is the
         * machine unless named, so repeated runs share one limit */
        if (!a->client_id && gethostname(host, sizeof host - 1) == 0) a->client_id = host;
        ro.client_id = a->client_id;
    }
    if ((rc = baton_ratelimit_open(&r, c, a->name, &ro))) {
        cli_report("rate", rc);
        return rc == BATON_ECONFLICT ? EX_USAGE : cli_exit_for(rc);
    }
    sig_target = r;
    if (sig_got) baton_ratelimit_cancel(r);
    if (a->wait_s == 0) {
        int64_t after = 0;
        rc = baton_ratelimit_try(r, 1, &after);
        if (rc == BATON_ELOCKED && a->verbose)
            fprintf(stderr, "%s: %s: no permit now; the next in %" PRId64 " ms\n", prog, a->name, after);
    } else {
        rc = baton_ratelimit_acquire(r, 1, a->wait_s < 0 ? -1 : (int64_t)(a->wait_s * 1000));
        if (rc == BATON_ETIMEDOUT && a->verbose) fprintf(stderr, "%s: %s: no permit within %.3f s\n", prog, a->name, a->wait_s);
    }
    sig_target = NULL;
    if (rc == BATON_ELOCKED || rc == BATON_ETIMEDOUT) code = (int)a->busy_code;
    else if (rc == BATON_ECANCELED && sig_got) code = 128 + sig_got;
    else if (rc) {
        cli_report("rate", rc);
        code = cli_exit_for(rc);
    }
    baton_ratelimit_free(r);
    return code;
}

int cli_rate(int argc, char **argv)
{
    rate_args a = { .permits = 1, .burst = 0, .busy_code = EX_BUSY_DEFAULT, .per_s = 1, .wait_s = -1 };
    baton_client *c = NULL;
    pthread_t th;
    sigset_t old;
    int code, rc;
    if ((code = parse(&a, argc, argv)) >= 0) {
        free(a.uri_owned);
        return code;
    }
    sigemptyset(&sig_set);
    sigaddset(&sig_set, SIGINT);
    sigaddset(&sig_set, SIGTERM);
    sigaddset(&sig_set, SIGHUP);
    /* blocked before any thread starts, so only sig_main takes them */
    pthread_sigmask(SIG_BLOCK, &sig_set, &old);
    if (pthread_create(&th, NULL, sig_main, NULL) == 0) pthread_detach(th);
    rc = baton_client_open(&c, cli_default_uri(a.uri), NULL);
    free(a.uri_owned);
    if (rc) {
        cli_report("open", rc);
        return cli_exit_for(rc);
    }
    code = take(&a, c);
    baton_client_close(c);
    if (!code && sig_got) code = 128 + sig_got;   /* a signal after the permit: the command is not run */
    if (code || !a.cmdv) return code;
    /* the command gets the signal mask we started with */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    execvp(a.cmdv[0], a.cmdv);
    fprintf(stderr, "%s: %s: %s\n", prog, a.cmdv[0], strerror(errno));
    return errno == ENOENT ? 127 : 126;
}
