/* baton bench: the command. Options, the workload table, the output (one
 * JSON line or a table per result) and the exit codes; the workloads are in
 * workloads.c, herd.c and memory.c (see bench.h for the map). */
#include "bench.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* W+1 clients (herd) or hundreds of parked locks (memory) hold a few
 * descriptors each: connections, the subscriber, lock files. */
void bench_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int bench_open_lock(const bench_opts *o, const char *name, baton_client **c, baton_lock **l)
{
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    int rc;
    lo.fair = o->fair;
    *c = NULL;
    *l = NULL;
    if ((rc = baton_client_open(c, o->uri, NULL)) || (rc = baton_lock_open(l, *c, name, &lo))) {
        fprintf(stderr, "baton bench: %s\n", baton_error_last()->message);
        if (*c) baton_client_close(*c);
        *c = NULL;
        return rc;
    }
    return 0;
}

void bench_emit(const bench_opts *o, const char *json)
{
    if (o->json) {
        printf("%s\n", json);
    } else {
        /* A plain table: one "key  value" row per field. */
        const char *p = json;
        printf("%s\n", o->workload);
        while ((p = strchr(p, '"'))) {
            const char *k = p + 1, *ke = strchr(k, '"');
            if (!ke) break;
            const char *v = ke + 2, *ve = v + strcspn(v, ",}");
            printf("  %-24.*s %.*s\n", (int)(ke - k), k, (int)(ve - v), v);
            p = ve;
        }
    }
    fflush(stdout);
}

typedef struct {
    const char *name;
    int (*run)(bench_opts *o);
    int (*worker)(const bench_opts *o, const char *dir, int idx);   /* the multi-process ones */
    int latencies;                                                   /* --svg draws them */
} workload;

static const workload workloads[] = {
    { "uncontended", w_uncontended, NULL, 1 },
    { "contended", w_contended, worker_contended, 1 },
    { "handoff", w_handoff, worker_handoff, 1 },
    { "herd", w_herd, NULL, 1 },
    { "many", w_many, NULL, 0 },
    { "memory", w_memory, NULL, 0 },
    { "memory-async", w_memory_async, NULL, 0 },
    { "ratelimit", w_ratelimit, NULL, 0 },
};

static const workload *find_workload(const char *name)
{
    for (size_t i = 0; i < sizeof workloads / sizeof workloads[0]; i++)
        if (!strcmp(workloads[i].name, name)) return &workloads[i];
    return NULL;
}

/* ---- command line ---- */

static int num_arg(const char *opt, const char *s, long lo, long hi, int *out)
{
    char *end;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "baton bench: %s wants a whole number from %ld to %ld, not '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static void uri_scheme(const char *uri, char *out, size_t n)
{
    const char *p = uri ? strstr(uri, "://") : NULL;
    size_t o = 0;
    if (!uri || !*uri) { snprintf(out, n, "file"); return; }
    if (!p) { snprintf(out, n, "?"); return; }
    for (const char *c = uri; c < p && o + 1 < n; c++)
        if (isalnum((unsigned char)*c) || *c == '+' || *c == '-' || *c == '.') out[o++] = (char)tolower((unsigned char)*c);
    out[o] = 0;
}

static void bench_usage(FILE *f)
{
    fprintf(f,
        "usage: baton bench [-u URI] [--workload W] [options]\n"
        "  --workload uncontended  one client, N acquire+release pairs (--n N, default 10000);\n"
        "                          the default workload\n"
        "             contended    C processes on one lock for S seconds (--clients C, --seconds S)\n"
        "             handoff      release to the blocked waiter's grant (--rounds R, default 200)\n"
        "             herd         W waiters on one lock, a client each: chains of W handoffs (release to\n"
        "                          the next grant; Redis commands per handoff), then the acquire/release\n"
        "                          loop (--waiters W, default 16; --rounds R, default 200;\n"
        "                          --shared-client: all of them threads on ONE client)\n"
        "             many         K locks from a thread pool on one client (--clients K, --seconds S);\n"
        "                          --async: N locks (--locks N, default 1000) cycling acquire_async /\n"
        "                          release_async on one loop thread\n"
        "             memory       client heap per held and per waiting lock (--n K, default 1000;\n"
        "                          at most %d waiting)\n"
        "             memory-async the same through the event-loop API, no thread per waiter (--n K;\n"
        "                          --waiters W, default min(K, 10000)): and, holding, the renewals the\n"
        "                          server sees per second and the client's CPU over --seconds S (--lease MS)\n"
        "             ratelimit    C clients take permits of one rate limiter at N per second for S\n"
        "                          seconds (--clients C, default 8; --n N, default 100; --seconds S):\n"
        "                          admitted against the rate, engine requests per admission\n"
        "  --fair                  FIFO locks (engines with fair locks)\n"
        "  --layout redisson|simple  Redis key layout\n"
        "  --json                  one JSON line per result (default: a table)\n"
        "  --svg FILE              the latency CDF of the run as SVG (not for many, memory)\n",
        MEM_MAX_WAITING);
}

enum { OPT_WAITERS = 256, OPT_SVG, OPT_SHARED, OPT_ASYNC, OPT_LOCKS, OPT_LEASE };


int baton__cli_bench(int argc, char **argv)
{
    static const struct option lo[] = {
        { "workload", required_argument, NULL, 'W' }, { "clients", required_argument, NULL, 'c' },
        { "seconds", required_argument, NULL, 's' }, { "n", required_argument, NULL, 'N' },
        { "rounds", required_argument, NULL, 'r' }, { "fair", no_argument, NULL, 'f' },
        { "layout", required_argument, NULL, 'L' }, { "json", no_argument, NULL, 'j' },
        { "waiters", required_argument, NULL, OPT_WAITERS }, { "svg", required_argument, NULL, OPT_SVG },
        { "async", no_argument, NULL, OPT_ASYNC }, { "locks", required_argument, NULL, OPT_LOCKS },
        { "worker", required_argument, NULL, 'X' }, { "help", no_argument, NULL, 'h' },
        { "lease", required_argument, NULL, OPT_LEASE },
        { "shared-client", no_argument, NULL, OPT_SHARED },
        { NULL, 0, NULL, 0 },
    };
    bench_opts o;
    const char *worker = NULL, *layout = NULL, *svg = NULL;
    char uribuf[1024], *end;
    const workload *w;
    int opt, rc;

    memset(&o, 0, sizeof o);
    o.workload = "uncontended";
    o.seconds = 5.0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "u:W:c:s:N:r:fL:jX:h", lo, NULL)) != -1) {
        switch (opt) {
        case 'u': o.uri = optarg; break;
        case 'W': o.workload = optarg; break;
        case 'c': if (num_arg("--clients", optarg, 1, 4096, &o.clients)) return EX_USAGE; break;
        case 'N': if (num_arg("--n", optarg, 1, 100000000, &o.n)) return EX_USAGE; break;
        case 'r': if (num_arg("--rounds", optarg, 1, 10000000, &o.rounds)) return EX_USAGE; break;
        case OPT_SHARED: o.shared_client = 1; break;
        case OPT_WAITERS: if (num_arg("--waiters", optarg, 1, HERD_MAX_WAITERS, &o.waiters)) return EX_USAGE; break;
        case 's':
            errno = 0;
            o.seconds = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(o.seconds > 0 && o.seconds <= 3600)) {
                fprintf(stderr, "baton bench: --seconds wants a number above 0 and up to 3600, not '%s'\n", optarg);
                return EX_USAGE;
            }
            break;
        case 'f': o.fair = 1; break;
        case 'L': layout = optarg; break;
        case 'j': o.json = 1; break;
        case OPT_SVG: svg = optarg; break;
        case OPT_ASYNC: o.async = 1; break;
        case OPT_LOCKS: if (num_arg("--locks", optarg, 1, 1000000, &o.locks)) return EX_USAGE; break;
        case OPT_LEASE: if (num_arg("--lease", optarg, 10, 3600000, &o.lease_ms)) return EX_USAGE; break;
        case 'X': worker = optarg; break;
        case 'h': bench_usage(stdout); return 0;
        default: bench_usage(stderr); return EX_USAGE;
        }
    }
    if (!o.uri) o.uri = getenv("BATON_URI");
    if (layout) {
        if ((size_t)snprintf(uribuf, sizeof uribuf, "%s%clayout=%s", o.uri ? o.uri : "",
                             o.uri && strchr(o.uri, '?') ? '&' : '?', layout) >= sizeof uribuf) {
            fprintf(stderr, "baton bench: the URI is too long\n");
            return EX_USAGE;
        }
        o.uri = uribuf;
    }
    uri_scheme(o.uri, o.scheme, sizeof o.scheme);
    if (worker) {
        /* re-executed by procs.c: --worker KIND DIR INDEX */
        int idx;
        if (argc - optind != 2 || !(w = find_workload(worker)) || !w->worker ||
            num_arg("the worker index", argv[optind + 1], 0, INT_MAX, &idx))
            return EX_USAGE;
        return w->worker(&o, argv[optind], idx);
    }
    if (optind < argc) {
        fprintf(stderr, "baton bench: unexpected argument '%s'\n", argv[optind]);
        return EX_USAGE;
    }
    if (!(w = find_workload(o.workload))) {
        fprintf(stderr, "baton bench: unknown workload '%s' (", o.workload);
        for (size_t i = 0; i < sizeof workloads / sizeof workloads[0]; i++)
            fprintf(stderr, "%s%s", i ? ", " : "", workloads[i].name);
        fprintf(stderr, ")\n");
        return EX_USAGE;
    }
    if (svg) {
        if (!w->latencies) {
            fprintf(stderr, "baton bench: --svg: the %s workload has no latencies to draw\n", o.workload);
            return EX_USAGE;
        }
        /* opened now, so a bad path fails before a long run rather than after */
        if (!(o.svg = fopen(svg, "w"))) {
            fprintf(stderr, "baton bench: cannot write --svg %s: %s\n", svg, strerror(errno));
            return EX_USAGE;
        }
    }
#if defined(__GLIBC__)
    /* Chunks a thread has freed stay in glibc's per-thread cache and count as
     * in use in mallinfo2: every waiting thread would add what it last freed
     * (a formatted command, a reply) to the lock's bytes. The memory workload
     * re-executes itself once with that cache off, so the bytes are what baton
     * holds. */
    if (!strcmp(o.workload, "memory") && !strstr(getenv("GLIBC_TUNABLES") ? getenv("GLIBC_TUNABLES") : "", "tcache_count")) {
        const char *old = getenv("GLIBC_TUNABLES");
        char tun[512];
        snprintf(tun, sizeof tun, "%s%sglibc.malloc.tcache_count=0", old ? old : "", old && *old ? ":" : "");
        char **nv = calloc((size_t)argc + 2, sizeof *nv);
        if (nv && setenv("GLIBC_TUNABLES", tun, 1) == 0) {
            nv[0] = "baton";
            for (int i = 0; i < argc; i++) nv[i + 1] = argv[i];
            fflush(NULL);
            execv("/proc/self/exe", nv);
            unsetenv("GLIBC_TUNABLES"); /* could not re-exec: measure as we are, and say so */
            if (old) setenv("GLIBC_TUNABLES", old, 1);
        }
        free(nv);
    }
#endif
    rc = w->run(&o);
    if (o.svg) {
        /* the run failed before drawing: leave no empty file behind */
        fclose(o.svg);
        unlink(svg);
    }
    return rc;
}
