/* baton bench: the peers' workloads (../shared/peers) on baton, one JSON line
 * (or a table) per result, with the peers' field names so runs compare side
 * by side. Multi-process workloads re-exec this binary as workers. */
#include <baton.h>
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

/* rediss:// commandstats go over TLS, with the OpenSSL that libbaton's Redis
 * backend loads on first use (dlopen; see src/backends/redis/ossl.h). Without
 * that backend no rediss:// client can open, so there is no TLS path. */
#if defined(BATON_CLI_TLS)
#define BENCH_TLS 1
#include "backends/redis/ossl.h"
#endif

#define EX_USAGE 64
#define EX_UNAVAILABLE 69
#define EX_SOFTWARE 70

#define HERD_MAX_WAITERS 4096
#define MEM_MAX_WAITING 256          /* waiting locks need a thread each */
#define MEM_STACK_BYTES (512 * 1024) /* the waiting threads' stacks (mmap'd, not heap) */

int baton__cli_bench(int argc, char **argv);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, size_t n, double p)
{
    if (!n) return 0;
    size_t i = (size_t)(n * p);
    if (i >= n) i = n - 1;
    return v[i];
}

static void cpu_times(double *user, double *sys)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *user = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6;
    *sys = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* W+1 clients (herd) or hundreds of parked locks (memory) hold a few
 * descriptors each: connections, the subscriber, lock files. */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

typedef struct {
    const char *uri;
    const char *workload;
    int clients, n, rounds, waiters, fair, json;  /* 0 = not given: the workload's default */
    double seconds;
    FILE *svg;            /* --svg, opened (so known writable) before the run */
    char scheme[16];      /* the URI's scheme alone: safe to print, never a password */
} bench_opts;

static int open_lock(const bench_opts *o, const char *name, baton_client **c, baton_lock **l)
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

/* The exit codes of baton(1): 64 for what the user asked wrong (a bad URI,
 * --fair where the engine has no fair lock), 69 when the engine cannot be
 * reached or refused us, 70 for the rest. */
static int exit_for(int rc)
{
    switch (rc) {
    case BATON_EINVAL: case BATON_EDISABLED: case BATON_ENOTSUP: return EX_USAGE;
    case BATON_EUNAVAILABLE: case BATON_EAUTH: case BATON_EPROTO: case BATON_EIO: return EX_UNAVAILABLE;
    default: return EX_SOFTWARE;
    }
}

static void emit(const bench_opts *o, const char *json)
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

/* ---- progress: one line on a terminal, and only for runs over a second ---- */

typedef struct {
    const char *label, *unit;
    double started, t0, seconds;  /* seconds > 0: a timed run from t0 */
    long target;                  /* otherwise: COUNT() out of TARGET */
    long (*count)(void *);
    void *ctx;
    int on, width, stop;          /* stop under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;            /* CLOCK_MONOTONIC */
    pthread_t th;
} progress;

static long count_long(void *p)
{
    return __atomic_load_n((long *)p, __ATOMIC_RELAXED);
}

static void *progress_main(void *p)
{
    progress *pr = p;
    struct timespec ts;
    pthread_mutex_lock(&pr->mu);
    while (!pr->stop) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 250000000;
        if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
        pthread_cond_timedwait(&pr->cv, &pr->mu, &ts);
        if (pr->stop || now_s() - pr->started < 1.0) continue;
        long n = pr->count(pr->ctx);
        int w;
        if (pr->seconds > 0) {
            double el = now_s() - pr->t0;
            el = el < 0 ? 0 : el > pr->seconds ? pr->seconds : el;
            w = fprintf(stderr, "\r  %s: %.1f/%g s, %ld %s", pr->label, el, pr->seconds, n, pr->unit);
        } else {
            w = fprintf(stderr, "\r  %s: %ld/%ld %s, %.1f s", pr->label, n, pr->target, pr->unit,
                        now_s() - pr->started);
        }
        /* pad over a longer line printed before */
        if (w > 0 && w < pr->width) fprintf(stderr, "%*s", pr->width - w, "");
        if (w > pr->width) pr->width = w;
        fflush(stderr);
    }
    pthread_mutex_unlock(&pr->mu);
    return NULL;
}

/* Nothing at all when stderr is not a terminal (logs, pipes, bench/run.py). */
static void progress_start(progress *pr, const char *label, const char *unit, double t0, double seconds,
                           long target, long (*count)(void *), void *ctx)
{
    pthread_condattr_t ca;
    memset(pr, 0, sizeof *pr);
    if (!isatty(STDERR_FILENO)) return;
    pr->label = label;
    pr->unit = unit;
    pr->started = now_s();
    pr->t0 = t0;
    pr->seconds = seconds;
    pr->target = target;
    pr->count = count;
    pr->ctx = ctx;
    pthread_mutex_init(&pr->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&pr->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&pr->th, NULL, progress_main, pr)) {
        pthread_cond_destroy(&pr->cv);
        pthread_mutex_destroy(&pr->mu);
        return;   /* no progress line is no reason to fail the run */
    }
    pr->on = 1;
}

static void progress_stop(progress *pr)
{
    if (!pr->on) return;
    pthread_mutex_lock(&pr->mu);
    pr->stop = 1;
    pthread_cond_signal(&pr->cv);
    pthread_mutex_unlock(&pr->mu);
    pthread_join(pr->th, NULL);
    if (pr->width) fprintf(stderr, "\r%*s\r", pr->width, "");
    pthread_cond_destroy(&pr->cv);
    pthread_mutex_destroy(&pr->mu);
    pr->on = 0;
}

/* ---- --svg: the CDF of a run's latencies, drawn by hand ---- */

static void svg_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* US in the unit that suits it, to 3 significant digits (ticks are round anyway). */
static void fmt_us(char *buf, size_t n, double us)
{
    if (us >= 1e6) snprintf(buf, n, "%.3g s", us / 1e6);
    else if (us >= 1e3) snprintf(buf, n, "%.3g ms", us / 1e3);
    else snprintf(buf, n, "%.3g \xc2\xb5s", us);
}

typedef struct {
    int logx;
    double lo, hi;       /* log: decades (log10 of µs); linear: µs */
    double left, width;
} svg_axis;

static double svg_x(const svg_axis *a, double us)
{
    double v = a->logx ? log10(us > 0 ? us : pow(10, a->lo)) : us;
    if (v < a->lo) v = a->lo;
    if (v > a->hi) v = a->hi;
    return a->left + (v - a->lo) / (a->hi - a->lo) * a->width;
}

static void svg_xtick(FILE *f, const svg_axis *a, double us, double top, double bottom, int label)
{
    char t[32];
    double x = svg_x(a, us);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#%s\"/>\n", x, top, x, bottom,
            label ? "ddd" : "eee");
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", x, bottom, x,
            bottom + (label ? 5 : 3));
    if (label) {
        fmt_us(t, sizeof t, us);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x, bottom + 18, t);
    }
}

/* V: latencies in seconds, sorted. Writes and closes o->svg; 0 or 70. */
static int svg_cdf(bench_opts *o, const char *what, const double *v, size_t n)
{
    enum { W = 720, H = 440, ML = 70, MR = 30, MT = 50, MB = 62 };
    const double top = MT, bottom = H - MB, ph = bottom - top;
    FILE *f = o->svg;
    char title[256], t[32];
    svg_axis ax = { 0, 0, 1, ML, W - ML - MR };
    int rc = 0;

    if (!f) return 0;
    o->svg = NULL;
    snprintf(title, sizeof title, "baton bench %s on %s%s: %s", o->workload, o->scheme,
             o->fair ? " (fair)" : "", what);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n"
            "<text x=\"%d\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">", W, H, W, H, W, H, W / 2);
    svg_text(f, title);
    fprintf(f, "</text>\n");
    if (!n) {
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">no samples</text>\n", W / 2, H / 2);
        goto done;
    }
    {
        double xmin = v[0] * 1e6, xmax = v[n - 1] * 1e6;
        for (size_t i = 0; xmin <= 0 && i < n; i++) xmin = v[i] * 1e6;   /* the smallest positive one */
        /* Latencies span decades (a fast path and a slow tail): log scale then. */
        if (xmin > 0 && xmax / xmin > 20) {
            ax.logx = 1;
            ax.lo = floor(log10(xmin));
            ax.hi = ceil(log10(xmax));
            if (ax.hi <= ax.lo) ax.hi = ax.lo + 1;
            for (double d = ax.lo; d <= ax.hi + 1e-9; d++) {
                svg_xtick(f, &ax, pow(10, d), top, bottom, 1);
                for (int m = 2; m <= 5 && d < ax.hi - 1e-9 && ax.hi - ax.lo <= 3; m += 3)
                    svg_xtick(f, &ax, m * pow(10, d), top, bottom, ax.hi - ax.lo <= 2);
            }
        } else {
            double lo = xmin < 0 ? 0 : xmin, range = xmax - lo, raw, mag, step;
            if (range <= 0) range = xmax > 0 ? xmax : 1;
            raw = range / 5;
            mag = pow(10, floor(log10(raw)));
            step = mag * (raw / mag < 1.5 ? 1 : raw / mag < 3.5 ? 2 : raw / mag < 7.5 ? 5 : 10);
            ax.lo = floor(lo / step) * step;
            ax.hi = ceil(xmax / step) * step;
            if (ax.hi <= ax.lo) ax.hi = ax.lo + step;
            for (double x = ax.lo; x <= ax.hi + step / 2; x += step) svg_xtick(f, &ax, x, top, bottom, 1);
        }
    }
    for (int i = 0; i <= 4; i++) {
        double y = bottom - ph * i / 4;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", ML, y, W - MR, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", ML - 8, y + 4, i / 4.0);
    }
    /* the percentiles the JSON reports: dashed lines, named in a legend at
     * the bottom right, which a CDF leaves empty */
    for (int i = 0; i < 2; i++) {
        double us = pct(v, n, i ? 0.99 : 0.5) * 1e6, x = svg_x(&ax, us);
        fmt_us(t, sizeof t, us);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c33\" stroke-dasharray=\"%s\"/>\n"
                "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#c33\" stroke-dasharray=\"%s\"/>\n"
                "<text x=\"%d\" y=\"%.1f\">p%s %s</text>\n",
                x, top, x, bottom, i ? "2 2" : "6 3", W - MR - 150, bottom - 44 + 18 * i, W - MR - 126,
                bottom - 44 + 18 * i, i ? "2 2" : "6 3", W - MR - 120, bottom - 40 + 18 * i, i ? "99" : "50", t);
    }
    /* the curve, a staircase as a CDF is; at most ~2000 steps, always the last one */
    {
        size_t step = n > 2000 ? n / 2000 : 1;
        double y = bottom;
        fprintf(f, "<polyline fill=\"none\" stroke=\"#1f5fa8\" stroke-width=\"1.6\" points=\"");
        for (size_t i = 0; i < n; i += step) {
            size_t j = i + step >= n ? n - 1 : i;
            double x = svg_x(&ax, v[j] * 1e6);
            fprintf(f, "%.1f,%.1f ", x, y);
            y = bottom - ph * (double)(j + 1) / (double)n;
            fprintf(f, "%.1f,%.1f ", x, y);
            if (j == n - 1) break;
        }
        fprintf(f, "\"/>\n");
    }
    fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"none\" stroke=\"#000\"/>\n",
            ML, top, W - ML - MR, ph);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">latency%s, %zu samples</text>\n",
            ML + (W - ML - MR) / 2, H - 16, ax.logx ? " (log scale)" : "", n);
    fprintf(f, "<text transform=\"translate(20 %.1f) rotate(-90)\" text-anchor=\"middle\">"
            "fraction of samples \xe2\x89\xa4 latency</text>\n", top + ph / 2);
done:
    fprintf(f, "</svg>\n");
    if (ferror(f)) rc = EX_SOFTWARE;
    if (fclose(f)) rc = EX_SOFTWARE;
    if (rc) fprintf(stderr, "baton bench: writing the --svg file failed: %s\n", strerror(errno));
    return rc;
}

/* ---- Redis INFO commandstats, over a connection of our own ---- */

typedef struct {
    char host[256], user[256], pass[512], cacert[1024], cert[1024], key[1024];
    int port, tls, insecure;
} rstat_cfg;

typedef struct {
    int fd;
    char *in;
    size_t len, cap;
#ifdef BENCH_TLS
    SSL_CTX *ctx;
    SSL *ssl;
#endif
} rstat;

typedef struct {
    char name[64];
    long long calls;
} cmdstat;

typedef struct {
    cmdstat *v;
    size_t n;
} cmdstats;

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Percent-decodes S[0..N) into OUT; -1 if bad or too long. */
static int pct_copy(char *out, size_t cap, const char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= n || hexval(s[i + 1]) < 0 || hexval(s[i + 2]) < 0) return -1;
            c = hexval(s[i + 1]) * 16 + hexval(s[i + 2]);
            i += 2;
        }
        if (o + 1 >= cap) return -1;
        out[o++] = (char)c;
    }
    out[o] = 0;
    return 0;
}

/* The same reading of redis:// and rediss:// URIs as the library's (host,
 * port, user, password, TLS files), for the one connection the library does
 * not make. 1 = one Redis node, 0 = not Redis (no commandstats), -1 = unreadable. */
static int rstat_parse(const char *uri, rstat_cfg *cfg)
{
    const char *p = uri ? strstr(uri, "://") : NULL, *a, *ae, *at = NULL, *h, *he, *q;
    memset(cfg, 0, sizeof *cfg);
    if (!p) return 0;
    if (p - uri == 6 && !strncasecmp(uri, "rediss", 6)) cfg->tls = 1;
    else if (!(p - uri == 5 && !strncasecmp(uri, "redis", 5))) return 0;
    a = p + 3;
    ae = a + strcspn(a, "/?");
    for (const char *c = a; c < ae; c++)
        if (*c == '@') at = c;
    if (at) {
        const char *colon = memchr(a, ':', (size_t)(at - a));
        if (pct_copy(cfg->user, sizeof cfg->user, a, (size_t)((colon ? colon : at) - a))) return -1;
        if (colon && pct_copy(cfg->pass, sizeof cfg->pass, colon + 1, (size_t)(at - colon - 1))) return -1;
    }
    h = at ? at + 1 : a;
    if (memchr(h, ',', (size_t)(ae - h))) return 0;   /* several nodes: a quorum, not one server */
    if (*h == '[') {
        const char *rb = memchr(h, ']', (size_t)(ae - h));
        if (!rb || pct_copy(cfg->host, sizeof cfg->host, h + 1, (size_t)(rb - h - 1))) return -1;
        he = rb + 1;
    } else {
        he = memchr(h, ':', (size_t)(ae - h));
        if (!he) he = ae;
        if (pct_copy(cfg->host, sizeof cfg->host, h, (size_t)(he - h))) return -1;
    }
    cfg->port = 6379;
    if (he < ae) {
        long v = 0;
        if (*he != ':' || he + 1 == ae) return -1;
        for (const char *c = he + 1; c < ae; c++) {
            if (!isdigit((unsigned char)*c) || (v = v * 10 + (*c - '0')) > 65535) return -1;
        }
        cfg->port = v ? (int)v : 6379;
    }
    if (!cfg->host[0]) return -1;
    for (q = strchr(ae, '?'); q;) {
        const char *k = q + 1, *e = k + strcspn(k, "&"), *eq = memchr(k, '=', (size_t)(e - k));
        const char *val = eq ? eq + 1 : e;
        size_t kl = (size_t)((eq ? eq : e) - k), vl = (size_t)(e - val);
        int bad = 0;
        if (kl == 6 && !strncmp(k, "cacert", 6)) bad = pct_copy(cfg->cacert, sizeof cfg->cacert, val, vl);
        else if (kl == 4 && !strncmp(k, "cert", 4)) bad = pct_copy(cfg->cert, sizeof cfg->cert, val, vl);
        else if (kl == 3 && !strncmp(k, "key", 3)) bad = pct_copy(cfg->key, sizeof cfg->key, val, vl);
        else if (kl == 8 && !strncmp(k, "insecure", 8))
            cfg->insecure = (vl == 1 && *val == '1') || (vl == 4 && !strncasecmp(val, "true", 4)) ||
                            (vl == 3 && !strncasecmp(val, "yes", 3)) || (vl == 2 && !strncasecmp(val, "on", 2));
        if (bad) return -1;
        q = *e ? e : NULL;
    }
    /* the library's order: the URI, then $BATON_REDIS_PASSWORD, then $REDISCLI_AUTH */
    if (!cfg->pass[0]) {
        const char *env = getenv("BATON_REDIS_PASSWORD");
        if (!env || !*env) env = getenv("REDISCLI_AUTH");
        if (env && *env && snprintf(cfg->pass, sizeof cfg->pass, "%s", env) >= (int)sizeof cfg->pass) return -1;
    }
    return 1;
}

static void rstat_close(rstat *r)
{
#ifdef BENCH_TLS
    if (r->ssl) { SSL_shutdown(r->ssl); SSL_free(r->ssl); }
    if (r->ctx) SSL_CTX_free(r->ctx);
    r->ssl = NULL;
    r->ctx = NULL;
#endif
    if (r->fd >= 0) close(r->fd);
    r->fd = -1;
    free(r->in);
    r->in = NULL;
    r->len = r->cap = 0;
}

static int rstat_write(rstat *r, const char *b, size_t n)
{
    while (n) {
        ssize_t w;
#ifdef BENCH_TLS
        if (r->ssl) {
            int k = SSL_write(r->ssl, b, n > INT_MAX ? INT_MAX : (int)n);
            w = k > 0 ? k : -1;
        } else
#endif
        {
            w = send(r->fd, b, n, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR) continue;
        }
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static ssize_t rstat_read(rstat *r, char *b, size_t n)
{
    for (;;) {
#ifdef BENCH_TLS
        if (r->ssl) {
            int k = SSL_read(r->ssl, b, n > INT_MAX ? INT_MAX : (int)n);
            return k > 0 ? k : -1;
        }
#endif
        ssize_t k = recv(r->fd, b, n, 0);
        if (k < 0 && errno == EINTR) continue;
        return k;
    }
}

/* Reads one reply: *type is its first byte, *data and *len its line (status,
 * error, integer) or its bulk payload (*data NULL for a null bulk). Valid
 * until the next call. One command is in flight at a time. */
static int rstat_reply(rstat *r, char *type, const char **data, size_t *len)
{
    r->len = 0;
    for (;;) {
        char *nl = r->len ? memmem(r->in, r->len, "\r\n", 2) : NULL;
        if (nl) {
            size_t line = (size_t)(nl - r->in);
            if (!line) return -1;
            *type = r->in[0];
            if (*type != '$') {
                *data = r->in + 1;
                *len = line - 1;
                return 0;
            }
            long long bl = strtoll(r->in + 1, NULL, 10);
            if (bl < 0) { *data = NULL; *len = 0; return 0; }
            if (bl > (16 << 20)) return -1;
            if (r->len >= line + 2 + (size_t)bl + 2) {
                *data = r->in + line + 2;
                *len = (size_t)bl;
                return 0;
            }
        }
        if (r->cap - r->len < 4096) {
            size_t cap = r->cap * 2 + 8192;
            char *in;
            if (cap > (32u << 20) || !(in = realloc(r->in, cap))) return -1;
            r->in = in;
            r->cap = cap;
        }
        ssize_t k = rstat_read(r, r->in + r->len, r->cap - r->len);
        if (k <= 0) return -1;
        r->len += (size_t)k;
    }
}

static int rstat_cmd(rstat *r, int argc, const char *const *argv, char *type, const char **data, size_t *len)
{
    char buf[2048];
    size_t o = 0;
    int k = snprintf(buf, sizeof buf, "*%d\r\n", argc), rc = -1;
    o = (size_t)k;
    for (int i = 0; i < argc; i++) {
        k = snprintf(buf + o, sizeof buf - o, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
        if (k < 0 || (size_t)k >= sizeof buf - o) goto out;
        o += (size_t)k;
    }
    if (!rstat_write(r, buf, o)) rc = rstat_reply(r, type, data, len);
out:
    explicit_bzero(buf, sizeof buf);   /* AUTH's password */
    return rc;
}

#ifdef BENCH_TLS
static int rstat_tls(rstat *r, const rstat_cfg *cfg, char *err, size_t en)
{
    unsigned char ip[16];
    int is_ip = inet_pton(AF_INET, cfg->host, ip) == 1 || inet_pton(AF_INET6, cfg->host, ip) == 1;
    if (baton__ossl_load() != 0) {
        snprintf(err, en, "%s", baton_error_last()->message ? baton_error_last()->message : "no TLS library");
        return -1;
    }
    if (!(r->ctx = SSL_CTX_new(TLS_client_method()))) goto fail;
    SSL_CTX_set_min_proto_version(r->ctx, TLS1_2_VERSION);
    if (cfg->cacert[0]) {
        if (SSL_CTX_load_verify_locations(r->ctx, cfg->cacert, NULL) != 1) goto fail;
    } else if (!cfg->insecure) {
        SSL_CTX_set_default_verify_paths(r->ctx);
    }
    if (cfg->cert[0] && (SSL_CTX_use_certificate_chain_file(r->ctx, cfg->cert) != 1 ||
                         SSL_CTX_use_PrivateKey_file(r->ctx, cfg->key[0] ? cfg->key : cfg->cert, SSL_FILETYPE_PEM) != 1))
        goto fail;
    SSL_CTX_set_verify(r->ctx, cfg->insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
    if (!(r->ssl = SSL_new(r->ctx)) || SSL_set_fd(r->ssl, r->fd) != 1) goto fail;
    if (!is_ip) SSL_set_tlsext_host_name(r->ssl, cfg->host);
    /* the password goes over this connection: check the name as the library does */
    if (!cfg->insecure && (is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(r->ssl), cfg->host) != 1
                                 : SSL_set1_host(r->ssl, cfg->host) != 1))
        goto fail;
    if (SSL_connect(r->ssl) != 1) goto fail;
    return 0;
fail:
    snprintf(err, en, "TLS setup or handshake with %s:%d failed", cfg->host, cfg->port);
    return -1;
}
#endif

static int rstat_open(rstat *r, const rstat_cfg *cfg, char *err, size_t en)
{
    struct addrinfo hints, *res = NULL;
    struct timeval tv = { 5, 0 };
    char port[16], type;
    const char *data;
    size_t len;
    int one = 1, g;

    memset(r, 0, sizeof *r);
    r->fd = -1;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port, sizeof port, "%d", cfg->port);
    if ((g = getaddrinfo(cfg->host, port, &hints, &res))) {
        snprintf(err, en, "cannot resolve %s: %s", cfg->host, gai_strerror(g));
        return -1;
    }
    for (struct addrinfo *ai = res; ai && r->fd < 0; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        struct pollfd pfd = { fd, POLLOUT, 0 };
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (fd < 0) continue;
        /* connect without blocking, so a black-holed address costs 2 s, not minutes */
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ||
            (errno == EINPROGRESS && poll(&pfd, 1, 2000) == 1 &&
             getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)) {
            r->fd = fd;
            break;
        }
        close(fd);
    }
    freeaddrinfo(res);
    if (r->fd < 0) {
        snprintf(err, en, "cannot connect to %s:%d", cfg->host, cfg->port);
        return -1;
    }
    fcntl(r->fd, F_SETFL, fcntl(r->fd, F_GETFL) & ~O_NONBLOCK);
    setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(r->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(r->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (cfg->tls) {
#ifdef BENCH_TLS
        if (rstat_tls(r, cfg, err, en)) goto fail;
#else
        snprintf(err, en, "this baton was built without OpenSSL headers");
        goto fail;
#endif
    }
    if (cfg->pass[0]) {
        const char *av[3] = { "AUTH", cfg->user[0] ? cfg->user : cfg->pass, cfg->pass };
        if (rstat_cmd(r, cfg->user[0] ? 3 : 2, av, &type, &data, &len)) {
            snprintf(err, en, "AUTH: no answer from %s:%d", cfg->host, cfg->port);
            goto fail;
        }
        /* a password given to a server without one is not fatal (the library agrees) */
        if (type == '-' && !memmem(data, len, "without any password configured", 31)) {
            snprintf(err, en, "AUTH refused: %.*s", (int)(len > 200 ? 200 : len), data);
            goto fail;
        }
    }
    return 0;
fail:
    rstat_close(r);
    return -1;
}

/* Every cmdstat_NAME:calls=N line of INFO commandstats. */
static int rstat_info(rstat *r, cmdstats *out, char *err, size_t en)
{
    static const char *const av[2] = { "INFO", "commandstats" };
    const char *d, *end;
    size_t len;
    char type;
    out->v = NULL;
    out->n = 0;
    if (rstat_cmd(r, 2, av, &type, &d, &len)) {
        snprintf(err, en, "INFO commandstats: no answer");
        return -1;
    }
    if (type != '$' || !d) {
        snprintf(err, en, "INFO commandstats: %.*s", type == '-' ? (int)(len > 200 ? 200 : len) : 16,
                 type == '-' ? d : "unexpected reply");
        return -1;
    }
    for (end = d + len; d < end;) {
        const char *le = memchr(d, '\n', (size_t)(end - d)), *colon, *calls;
        if (!le) le = end;
        if (le - d > 8 && !memcmp(d, "cmdstat_", 8) && (colon = memchr(d, ':', (size_t)(le - d))) &&
            (calls = memmem(colon, (size_t)(le - colon), "calls=", 6))) {
            cmdstat *v = realloc(out->v, (out->n + 1) * sizeof *v);
            size_t nl = (size_t)(colon - d - 8);
            if (!v) {
                snprintf(err, en, "out of memory");
                return -1;
            }
            out->v = v;
            if (nl >= sizeof v->name) nl = sizeof v->name - 1;
            memcpy(v[out->n].name, d + 8, nl);
            v[out->n].name[nl] = 0;
            v[out->n].calls = strtoll(calls + 6, NULL, 10);
            out->n++;
        }
        d = le + 1;
    }
    return 0;
}

static long long cmdstat_calls(const cmdstats *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->v[i].name, name)) return s->v[i].calls;
    return 0;
}

/* Commands a client sends itself, as opposed to the ones a script runs
 * inside the server (commandstats counts both). */
static int is_request(const char *name)
{
    static const char *const top[] = { "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro",
                                       "subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ssubscribe",
                                       "sunsubscribe", "ping", "wait", "select", "auth", "hello", "multi",
                                       "exec", NULL };
    if (!strncmp(name, "script|", 7) || !strncmp(name, "client|", 7)) return 1;
    for (int i = 0; top[i]; i++)
        if (!strcmp(name, top[i])) return 1;
    return 0;
}

/* What the per-handoff counts leave out: our own INFO, the subscribers'
 * keepalive PINGs (reported apart, as a count) and PUBSUB introspection. */
static int is_counted(const char *name)
{
    return strcmp(name, "info") && strcmp(name, "ping") && strncmp(name, "pubsub", 6);
}

/* 1 when A and B agree on every counted command (counters only grow, so B's
 * list covers A's). */
static int cmdstats_same(const cmdstats *a, const cmdstats *b)
{
    for (size_t i = 0; i < b->n; i++)
        if (is_counted(b->v[i].name) && b->v[i].calls != cmdstat_calls(a, b->v[i].name)) return 0;
    return 1;
}

/* Adds AFTER - BEFORE, command by command, to ACC. -1 when out of memory. */
static int cmdstats_accum(cmdstats *acc, const cmdstats *before, const cmdstats *after)
{
    for (size_t i = 0; i < after->n; i++) {
        long long delta = after->v[i].calls - cmdstat_calls(before, after->v[i].name);
        size_t j;
        if (delta <= 0) continue;
        for (j = 0; j < acc->n && strcmp(acc->v[j].name, after->v[i].name); j++) {}
        if (j == acc->n) {
            cmdstat *v = realloc(acc->v, (acc->n + 1) * sizeof *v);
            if (!v) return -1;
            acc->v = v;
            acc->v[j] = after->v[i];
            acc->v[j].calls = 0;
            acc->n++;
        }
        acc->v[j].calls += delta;
    }
    return 0;
}

static int cmp_delta(const void *a, const void *b)
{
    long long x = ((const cmdstat *)a)->calls, y = ((const cmdstat *)b)->calls;
    return x > y ? -1 : x < y;
}

/* The JSON fields of the commands in ACC (deltas) over COUNT events:
 * "commands_per_PER" (every counted command, including the ones the lock
 * scripts run inside the server), "requests_per_PER" (the ones clients send
 * themselves), PINGS (raw keepalive PINGs, a count; NULL: no field) and TOP
 * (the eight most frequent, per event). Nulls when ACC is NULL. */
static void cmdstats_fields(char *out, size_t n, const cmdstats *acc, long count, const char *per,
                            const char *pings, const char *top)
{
    long long all = 0, req = 0;
    cmdstat *d = NULL;
    size_t nd = 0;
    char list[320] = "", pf[64] = "";
    if (!acc || count <= 0 || !(d = calloc(acc->n + 1, sizeof *d))) {
        if (pings) snprintf(pf, sizeof pf, "\"%s\": null, ", pings);
        snprintf(out, n, "\"commands_per_%s\": null, \"requests_per_%s\": null, %s\"%s\": null", per, per, pf, top);
        return;
    }
    for (size_t i = 0; i < acc->n; i++) {
        if (!is_counted(acc->v[i].name) || acc->v[i].calls <= 0) continue;
        all += acc->v[i].calls;
        if (is_request(acc->v[i].name)) req += acc->v[i].calls;
        d[nd++] = acc->v[i];
    }
    qsort(d, nd, sizeof *d, cmp_delta);
    for (size_t i = 0, o = 0; i < nd && i < 8; i++) {
        int k = snprintf(list + o, sizeof list - o, "%s%s=%.2f", i ? " " : "", d[i].name, (double)d[i].calls / count);
        if (k < 0 || (size_t)k >= sizeof list - o) { list[o] = 0; break; }
        o += (size_t)k;
    }
    if (pings) snprintf(pf, sizeof pf, "\"%s\": %lld, ", pings, cmdstat_calls(acc, "ping"));
    snprintf(out, n, "\"commands_per_%s\": %.2f, \"requests_per_%s\": %.2f, %s\"%s\": \"%s\"", per,
             (double)all / count, per, (double)req / count, pf, top, list);
    free(d);
}

/* ---- uncontended: one client, N pairs on its own lock ---- */

static int w_uncontended(bench_opts *o)
{
    baton_client *c = NULL;
    baton_lock *l = NULL;
    char name[64], out[640];
    double *lat = NULL, t0, dt, u0, s0, u1, s1;
    int n = o->n > 0 ? o->n : 10000, warm = n / 10 < 200 ? n / 10 : 200, rc;
    long done = 0;
    progress pr;
    snprintf(name, sizeof name, "bench-u%ld", (long)getpid());
    if ((rc = open_lock(o, name, &c, &l))) return exit_for(rc);
    if (!(lat = malloc(sizeof *lat * (size_t)n))) { rc = EX_SOFTWARE; goto out; }
    for (int i = 0; i < warm; i++) { baton_lock_acquire(l, -1); baton_lock_release(l); }
    progress_start(&pr, "uncontended", "pairs", 0, 0, n, count_long, &done);
    cpu_times(&u0, &s0);
    t0 = now_s();
    for (int i = 0; i < n; i++) {
        double a = now_s();
        if ((rc = baton_lock_acquire(l, -1))) {
            progress_stop(&pr);
            fprintf(stderr, "baton bench: acquire: %s\n", baton_error_last()->message);
            rc = exit_for(rc);
            goto out;
        }
        lat[i] = now_s() - a;
        baton_lock_release(l);
        __atomic_store_n(&done, (long)i + 1, __ATOMIC_RELAXED);
    }
    dt = now_s() - t0;
    cpu_times(&u1, &s1);
    progress_stop(&pr);
    qsort(lat, (size_t)n, sizeof *lat, cmp_d);
    snprintf(out, sizeof out, "{\"peer\": \"baton\", \"workload\": \"uncontended\", \"n\": %d, \"pairs_per_s\": %.1f, "
             "\"acquire_p50_us\": %.1f, \"acquire_p99_us\": %.1f, \"cpu_us_per_pair\": %.2f, "
             "\"cpu_user_us_per_pair\": %.2f, \"cpu_sys_us_per_pair\": %.2f}",
             n, n / dt, pct(lat, (size_t)n, 0.5) * 1e6, pct(lat, (size_t)n, 0.99) * 1e6,
             ((u1 - u0) + (s1 - s0)) / n * 1e6, (u1 - u0) / n * 1e6, (s1 - s0) / n * 1e6);
    emit(o, out);
    rc = svg_cdf(o, "acquire latency", lat, (size_t)n);
out:
    free(lat);
    baton_lock_free(l);
    baton_client_close(c);
    return rc;
}

/* ---- contended: C worker processes, a non-atomic file counter inside ---- */

static int worker_contended(const bench_opts *o, const char *counter, double start_at, const char *outfile)
{
    baton_client *c = NULL;
    baton_lock *l = NULL;
    size_t cap = 1 << 16, nw = 0;
    double *waits = malloc(cap * sizeof *waits), end;
    long done = 0;
    int rc = EX_SOFTWARE;
    FILE *f;
    if (!waits) return EX_SOFTWARE;
    if ((rc = open_lock(o, "bench-contended", &c, &l))) { free(waits); return exit_for(rc); }
    rc = EX_SOFTWARE;
    while (wall_s() < start_at) usleep(500);
    end = start_at + o->seconds;
    while (wall_s() < end) {
        double a = now_s();
        char buf[32] = "";
        long v;
        int fd;
        if (baton_lock_acquire(l, -1)) { fprintf(stderr, "acquire: %s\n", baton_error_last()->message); break; }
        if (nw == cap) {
            double *nwaits = realloc(waits, cap * 2 * sizeof *waits);
            if (!nwaits) { baton_lock_release(l); goto out; }
            waits = nwaits;
            cap *= 2;
        }
        waits[nw++] = now_s() - a;
        /* the critical section: read, write back + 1, without any atomicity of its own */
        fd = open(counter, O_RDWR);
        if (fd >= 0) {
            ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
            v = r > 0 ? atol(buf) : 0;
            int len = snprintf(buf, sizeof buf, "%ld", v + 1);
            if (pwrite(fd, buf, (size_t)len, 0) != len || ftruncate(fd, len)) { /* counted as a mismatch below */ }
            close(fd);
        }
        baton_lock_release(l);
        done++;
    }
    if (!(f = fopen(outfile, "w"))) goto out;
    fprintf(f, "%ld %zu\n", done, nw);
    fwrite(waits, sizeof *waits, nw, f);
    if (!fclose(f)) rc = 0;
out:
    free(waits);
    baton_lock_free(l);
    baton_client_close(c);
    return rc;
}

static pid_t spawn(char **argv)
{
    pid_t p = fork();
    if (p == 0) {
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    return p;
}

/* The counter file holds the grants so far: good enough for a progress line
 * (read without the lock, it may be caught mid-write). */
static long count_file(void *path)
{
    char buf[32] = "";
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    if (read(fd, buf, sizeof buf - 1) < 0) buf[0] = 0;
    close(fd);
    return atol(buf);
}

static int w_contended(bench_opts *o)
{
    int C = o->clients > 0 ? o->clients : 8, rc = 0, started = 0;
    char dir[] = "/tmp/baton-bench.XXXXXX", counter[64], outf[96], start[32], secs[32], out[768];
    pid_t *pids = calloc((size_t)C, sizeof *pids);
    double start_at = wall_s() + 1.0, *all = NULL;
    long total = 0, mn = -1, mx = 0, final = -1;
    size_t nall = 0;
    progress pr;
    FILE *f;
    if (!pids || !mkdtemp(dir)) { free(pids); return EX_SOFTWARE; }
    snprintf(counter, sizeof counter, "%s/counter", dir);
    if (!(f = fopen(counter, "w"))) { rmdir(dir); free(pids); return EX_SOFTWARE; }
    fputs("0", f);
    fclose(f);
    snprintf(start, sizeof start, "%.6f", start_at);
    snprintf(secs, sizeof secs, "%g", o->seconds);
    for (int i = 0; i < C; i++) {
        snprintf(outf, sizeof outf, "%s/w%d", dir, i);
        char *av[] = { "baton", "bench", "--worker", "contended", "-u", (char *)(o->uri ? o->uri : ""),
                       "--seconds", secs, o->fair ? "--fair" : "--json", counter, start, outf, NULL };
        pids[i] = spawn(av);
        if (pids[i] < 0) { fprintf(stderr, "baton bench: fork: %s\n", strerror(errno)); break; }
        started++;
    }
    progress_start(&pr, "contended", "grants", now_s() + (start_at - wall_s()), o->seconds, 0, count_file, counter);
    for (int i = 0; i < started; i++) {
        long done;
        size_t nw;
        double *nall_p;
        int st = 0;
        f = NULL;
        waitpid(pids[i], &st, 0);
        snprintf(outf, sizeof outf, "%s/w%d", dir, i);
        if (!WIFEXITED(st) || WEXITSTATUS(st) || !(f = fopen(outf, "r")) || fscanf(f, "%ld %zu\n", &done, &nw) != 2) {
            fprintf(stderr, "baton bench: worker %d failed\n", i);
            if (f) fclose(f);
            unlink(outf);
            /* the worker's own code: 69 for an unreachable engine, 64 for a bad URI */
            if (!rc) rc = WIFEXITED(st) && WEXITSTATUS(st) ? WEXITSTATUS(st) : EX_SOFTWARE;
            continue;
        }
        if ((nall_p = realloc(all, (nall + nw + 1) * sizeof *all))) {
            all = nall_p;
            if (fread(all + nall, sizeof *all, nw, f) == nw) nall += nw;
        }
        fclose(f);
        unlink(outf);
        total += done;
        if (mn < 0 || done < mn) mn = done;
        if (done > mx) mx = done;
    }
    progress_stop(&pr);
    if ((f = fopen(counter, "r"))) { if (fscanf(f, "%ld", &final) != 1) final = -1; fclose(f); }
    unlink(counter);
    rmdir(dir);
    free(pids);
    if (started < C) rc = EX_SOFTWARE;
    if (rc) { free(all); return rc; }
    if (all) qsort(all, nall, sizeof *all, cmp_d);
    snprintf(out, sizeof out, "{\"peer\": \"baton\", \"workload\": \"contended\", \"clients\": %d, \"seconds\": %g, "
             "\"handoffs_per_s\": %.1f, \"counter_ok\": %s, \"wait_p50_ms\": %.2f, \"wait_p99_ms\": %.2f, "
             "\"min_per_client\": %ld, \"max_per_client\": %ld, \"fair\": %s}",
             C, o->seconds, total / o->seconds, final == total ? "true" : "false", pct(all, nall, 0.5) * 1e3,
             pct(all, nall, 0.99) * 1e3, mn < 0 ? 0 : mn, mx, o->fair ? "true" : "false");
    emit(o, out);
    rc = svg_cdf(o, "wait for the lock", all, nall);
    free(all);
    return rc ? rc : final == total ? 0 : 1;
}

/* ---- handoff: release → the blocked waiter's grant, across two processes ---- */

typedef struct {
    volatile double t_rel;
    volatile int grants;   /* the last owner, -1 none */
    volatile int ready;
    long count;            /* grants so far (atomic), for the progress line */
} handoff_shm;

static int worker_handoff(const bench_opts *o, const char *shmpath, int me, const char *outfile)
{
    baton_client *c = NULL;
    baton_lock *l = NULL;
    int fd = open(shmpath, O_RDWR), R = o->rounds > 0 ? o->rounds : 200, n = 0, rc = EX_SOFTWARE;
    handoff_shm *s = MAP_FAILED;
    double *lat = malloc(sizeof *lat * (size_t)R);
    FILE *f;
    if (fd >= 0) {
        s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
    }
    if (s == MAP_FAILED || !lat) goto out;
    if ((rc = open_lock(o, "bench-handoff", &c, &l))) { rc = exit_for(rc); goto out; }
    rc = EX_SOFTWARE;
    __atomic_fetch_add(&s->ready, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&s->ready, __ATOMIC_SEQ_CST) < 2) usleep(100);
    for (int i = 0; i < R; i++) {
        int last;
        if (baton_lock_acquire(l, -1)) break;
        double t = now_s();
        last = __atomic_exchange_n(&s->grants, me, __ATOMIC_SEQ_CST);
        if (last != me && last != -1) lat[n++] = t - s->t_rel;
        __atomic_fetch_add(&s->count, 1, __ATOMIC_RELAXED);
        usleep(5000);   /* hold long enough for the other side to block in acquire */
        s->t_rel = now_s();
        baton_lock_release(l);
        double dl = now_s() + 2.0;
        while (__atomic_load_n(&s->grants, __ATOMIC_SEQ_CST) == me && now_s() < dl) usleep(200);
    }
    if (!(f = fopen(outfile, "w"))) goto out;
    fprintf(f, "%d\n", n);
    fwrite(lat, sizeof *lat, (size_t)n, f);
    if (!fclose(f)) rc = 0;
out:
    free(lat);
    if (s != MAP_FAILED) munmap(s, sizeof *s);
    baton_lock_free(l);
    baton_client_close(c);
    return rc;
}

static long count_handoff(void *p)
{
    return __atomic_load_n(&((handoff_shm *)p)->count, __ATOMIC_RELAXED);
}

static int w_handoff(bench_opts *o)
{
    char dir[] = "/tmp/baton-bench.XXXXXX", shm[64], outf[2][96], rounds[16], out[512];
    double *all = NULL;
    size_t nall = 0;
    pid_t p[2] = { -1, -1 };
    handoff_shm init = { 0, -1, 0, 0 }, *s = MAP_FAILED;
    int R = o->rounds > 0 ? o->rounds : 200, rc = 0, fd;
    progress pr;
    if (!mkdtemp(dir)) return EX_SOFTWARE;
    snprintf(shm, sizeof shm, "%s/shm", dir);
    if ((fd = open(shm, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 || write(fd, &init, sizeof init) != sizeof init) {
        if (fd >= 0) close(fd);
        unlink(shm);
        rmdir(dir);
        return EX_SOFTWARE;
    }
    s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    snprintf(rounds, sizeof rounds, "%d", R);
    for (int i = 0; i < 2; i++) {
        char me[4];
        snprintf(me, sizeof me, "%d", i);
        snprintf(outf[i], sizeof outf[i], "%s/h%d", dir, i);
        char *av[] = { "baton", "bench", "--worker", "handoff", "-u", (char *)(o->uri ? o->uri : ""), "--rounds",
                       rounds, o->fair ? "--fair" : "--json", shm, me, outf[i], NULL };
        p[i] = spawn(av);
    }
    if (s != MAP_FAILED) progress_start(&pr, "handoff", "grants", 0, 0, 2L * R, count_handoff, s);
    else memset(&pr, 0, sizeof pr);
    for (int i = 0; i < 2; i++) {
        int n = 0, st = 0;
        double *na;
        FILE *f = NULL;
        if (p[i] < 0) { rc = EX_SOFTWARE; continue; }
        waitpid(p[i], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) || !(f = fopen(outf[i], "r")) || fscanf(f, "%d\n", &n) != 1 || n < 0) {
            fprintf(stderr, "baton bench: worker %d failed\n", i);
            if (f) fclose(f);
            unlink(outf[i]);
            if (!rc) rc = WIFEXITED(st) && WEXITSTATUS(st) ? WEXITSTATUS(st) : EX_SOFTWARE;
            continue;
        }
        if ((na = realloc(all, (nall + (size_t)n + 1) * sizeof *all))) {
            all = na;
            if (fread(all + nall, sizeof *all, (size_t)n, f) == (size_t)n) nall += (size_t)n;
        }
        fclose(f);
        unlink(outf[i]);
    }
    progress_stop(&pr);
    if (s != MAP_FAILED) munmap(s, sizeof *s);
    unlink(shm);
    rmdir(dir);
    if (rc) { free(all); return rc; }
    if (all) qsort(all, nall, sizeof *all, cmp_d);
    snprintf(out, sizeof out, "{\"peer\": \"baton\", \"workload\": \"handoff\", \"rounds\": %d, \"samples\": %zu, "
             "\"handoff_p50_us\": %.1f, \"handoff_p99_us\": %.1f, \"fair\": %s}",
             R, nall, pct(all, nall, 0.5) * 1e6, pct(all, nall, 0.99) * 1e6, o->fair ? "true" : "false");
    emit(o, out);
    rc = svg_cdf(o, "release to the waiter's grant", all, nall);
    free(all);
    return rc ? rc : nall ? 0 : 1;
}

/* ---- herd: W waiters on one lock, each thread with a client of its own ----
 *
 * Two phases in one run.
 *
 * chain, the handoff itself: thread 0 (the main thread) takes the lock and W
 * waiter threads block in acquire. Once all W are parked and the server's
 * counters have settled, INFO commandstats is read and thread 0 releases;
 * each waiter, once granted, releases at once and does not queue again, so
 * the lock runs down the line: W handoffs, each timed from a release to the
 * next grant. The last grantee holds until the counters have settled again
 * and INFO is read a second time, so between the two reads lie exactly W
 * releases that hand over and W grants, and nothing of setting the chain up.
 * The chain runs ceil(R / W) times, set up afresh and counted inside each,
 * after one uncounted chain that warms the clients (scripts, subscriptions).
 *
 * loop, the steady state: W+1 threads loop acquire/release on one name; a
 * releaser waits until someone else was granted before it queues again, so
 * every grant is a handoff and about W threads are always waiting, but a
 * handoff then includes the releaser joining the queue again. The first WARM
 * grants settle the clients; the holder of grant WARM waits until all W
 * others are blocked in acquire and the counters settle, then reads INFO
 * while holding, and the holder of grant WARM+R reads it again: between the
 * two lie exactly R grants. */

#define HERD_SETTLE_US 100000            /* INFO reads this far apart must agree */
#define HERD_SETTLE_MAX_NS 10000000000LL /* then read on regardless */
#define HERD_CHAIN_BUDGET_S 60.0         /* no new chain starts after this */
#define HERD_SLOW_W 64                   /* from here, a default-lock chain wakes everyone, W times: */
#define HERD_SLOW_CHAINS 4               /* at most this many of them */

typedef struct herd herd;

typedef struct {
    herd *h;
    int me, done;   /* done: atomic */
    baton_client *c;
    baton_lock *l;
    pthread_t th;
} herd_thread;

struct herd {
    const bench_opts *o;
    const char *name;
    long W, R, warm;
    int stop;                /* atomic: the run ends; blocked waiters are cancelled */
    int in_acquire;          /* atomic: threads inside baton_lock_acquire */
    int64_t t_rel;           /* atomic: CLOCK_MONOTONIC ns of the last release */
    long progress;           /* atomic: grants in both phases, for the progress line */
    /* chain */
    pthread_mutex_t cmu;     /* guards chain */
    pthread_cond_t ccv;
    long chain;              /* the chain the waiters are to join (1, 2, ...); -1: quit */
    long chain_grants;       /* atomic: grants in the current chain */
    long chain_released;     /* atomic: releases in the current chain */
    long last_go;            /* atomic: the chain whose last grantee may release */
    double *clat;            /* chain c, grant g (1-based) in slot (c - 1) * W + g - 1 */
    /* loop */
    long grants;             /* atomic: a grant's number is its order */
    int last_owner;          /* atomic */
    long self_grants;        /* atomic: measured grants back to the releaser (no waiter came in 2 s) */
    double *lat;             /* R slots: grant g in slot g - warm - 1 */
    unsigned char *have;
    pthread_mutex_t mu;      /* guards what follows */
    rstat rs;
    int rs_ok, have_before, have_after;
    cmdstats before, after;
    int err;
    char errmsg[256];
};

static void herd_error(herd *h, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void herd_error(herd *h, int rc, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&h->mu);
    if (!h->err) {
        h->err = rc;
        va_start(ap, fmt);
        vsnprintf(h->errmsg, sizeof h->errmsg, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&h->mu);
    __atomic_store_n(&h->stop, 1, __ATOMIC_SEQ_CST);
}

static void herd_fail(herd *h, int rc, const char *what)
{
    herd_error(h, rc, "%s: %s", what, baton_error_last()->message);
}

static int herd_stopped(herd *h)
{
    return __atomic_load_n(&h->stop, __ATOMIC_SEQ_CST);
}

/* INFO commandstats into OUT once two reads HERD_SETTLE_US apart agree on
 * every counted command (in-flight retries and queue joins have landed);
 * after HERD_SETTLE_MAX_NS the last read. Under h->mu or from the only thread
 * using h->rs. -1 (and no more counts) if the server stops answering. */
static int herd_settled(herd *h, cmdstats *out)
{
    cmdstats prev = { NULL, 0 }, cur = { NULL, 0 };
    int64_t dl = now_ns() + HERD_SETTLE_MAX_NS;
    char err[512];
    if (!h->rs_ok) return -1;
    if (rstat_info(&h->rs, &prev, err, sizeof err)) goto fail;
    for (;;) {
        usleep(HERD_SETTLE_US);
        if (rstat_info(&h->rs, &cur, err, sizeof err)) goto fail;
        if (cmdstats_same(&prev, &cur) || now_ns() >= dl) break;
        free(prev.v);
        prev = cur;
        cur.v = NULL;
        cur.n = 0;
    }
    free(prev.v);
    free(out->v);
    *out = cur;
    return 0;
fail:
    fprintf(stderr, "baton bench: no commands per handoff: %s\n", err);
    h->rs_ok = 0;
    free(prev.v);
    free(cur.v);
    return -1;
}

static void herd_snapshot(herd *h, int after)
{
    pthread_mutex_lock(&h->mu);
    if (!herd_settled(h, after ? &h->after : &h->before)) *(after ? &h->have_after : &h->have_before) = 1;
    pthread_mutex_unlock(&h->mu);
}

/* Holding the lock: until the W others are blocked in acquire (a fair
 * lock's queue says it for sure where the engine tells it). 0, or -1 when
 * they did not get there in time. */
static int herd_wait_parked(herd *h, baton_client *c)
{
    int64_t dl = now_ns() + (int64_t)(10 + h->W / 8) * 1000000000;
    int queued = 0;
    while (__atomic_load_n(&h->in_acquire, __ATOMIC_SEQ_CST) < h->W && !herd_stopped(h) && now_ns() < dl)
        usleep(1000);
    if (__atomic_load_n(&h->in_acquire, __ATOMIC_SEQ_CST) < h->W) return -1;
    if (h->o->fair) {
        baton_lockinfo info;
        for (;;) {
            memset(&info, 0, sizeof info);
            info.version = BATON_LOCK_INFO_VERSION;
            if (baton_lock_info(c, h->name, &info) || info.queue_length < 0) break;   /* the engine does not say */
            if (info.queue_length >= h->W) { queued = 1; break; }
            if (herd_stopped(h) || now_ns() >= dl) return -1;
            usleep(2000);
        }
    }
    /* inside acquire is not yet parked: let the last ones subscribe and fail their attempt */
    if (!queued) usleep((useconds_t)(20000 + h->W * 500));
    return 0;
}

static void *chain_main(void *p)
{
    herd_thread *t = p;
    herd *h = t->h;
    long seen = 0;
    for (;;) {
        long c, g;
        int64_t got;
        int rc;
        pthread_mutex_lock(&h->cmu);
        while (h->chain == seen) pthread_cond_wait(&h->ccv, &h->cmu);
        c = h->chain;
        pthread_mutex_unlock(&h->cmu);
        if (c < 0) break;
        seen = c;
        __atomic_add_fetch(&h->in_acquire, 1, __ATOMIC_SEQ_CST);
        rc = baton_lock_acquire(t->l, -1);
        got = now_ns();
        __atomic_sub_fetch(&h->in_acquire, 1, __ATOMIC_SEQ_CST);
        if (rc) {
            if (!(rc == BATON_ECANCELED && herd_stopped(h))) herd_fail(h, rc, "chain: acquire");
            break;
        }
        g = __atomic_add_fetch(&h->chain_grants, 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&h->progress, 1, __ATOMIC_RELAXED);
        if (g <= h->W) h->clat[(c - 1) * h->W + g - 1] = (double)(got - __atomic_load_n(&h->t_rel, __ATOMIC_SEQ_CST)) / 1e9;
        /* the last one holds while the main thread reads the counters */
        if (g == h->W)
            while (__atomic_load_n(&h->last_go, __ATOMIC_SEQ_CST) < c && !herd_stopped(h)) usleep(200);
        __atomic_store_n(&h->t_rel, now_ns(), __ATOMIC_SEQ_CST);
        if ((rc = baton_lock_release(t->l))) {
            herd_fail(h, rc, "chain: release");
            break;
        }
        __atomic_add_fetch(&h->chain_released, 1, __ATOMIC_SEQ_CST);
    }
    __atomic_store_n(&t->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void chain_post(herd *h, long c)
{
    pthread_mutex_lock(&h->cmu);
    h->chain = c;
    pthread_cond_broadcast(&h->ccv);
    pthread_mutex_unlock(&h->cmu);
}

/* Chain K, run from the main thread as thread 0 (T0). COUNTED: its commands
 * go into ACC. 0, or -1 with h->err set. */
static int herd_chain(herd *h, herd_thread *t0, long k, int counted, cmdstats *acc)
{
    cmdstats before = { NULL, 0 }, after = { NULL, 0 };
    int rc, ok = 0;
    int64_t dl;
    if ((rc = baton_lock_acquire(t0->l, 30000))) {
        herd_fail(h, rc, "chain: thread 0 acquire");
        return -1;
    }
    __atomic_store_n(&h->chain_grants, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&h->chain_released, 0, __ATOMIC_SEQ_CST);
    chain_post(h, k);
    if (herd_wait_parked(h, t0->c)) {
        if (!herd_stopped(h))
            herd_error(h, EX_SOFTWARE, "chain %ld: only %d of %ld waiters were blocked in acquire after %ld s", k,
                       __atomic_load_n(&h->in_acquire, __ATOMIC_SEQ_CST), h->W, 10 + h->W / 8);
        baton_lock_release(t0->l);
        return -1;
    }
    if (counted && h->rs_ok) ok = !herd_settled(h, &before);
    __atomic_store_n(&h->t_rel, now_ns(), __ATOMIC_SEQ_CST);
    if ((rc = baton_lock_release(t0->l))) {
        herd_fail(h, rc, "chain: thread 0 release");
        goto fail;
    }
    /* down the line; a default lock wakes every waiter at every release */
    dl = now_ns() + (int64_t)(30 + h->W) * 1000000000;
    while (__atomic_load_n(&h->chain_grants, __ATOMIC_SEQ_CST) < h->W && !herd_stopped(h) && now_ns() < dl)
        usleep(1000);
    if (__atomic_load_n(&h->chain_grants, __ATOMIC_SEQ_CST) < h->W) {
        if (!herd_stopped(h))
            herd_error(h, EX_SOFTWARE, "chain %ld stalled: %ld of %ld grants in %ld s", k,
                       __atomic_load_n(&h->chain_grants, __ATOMIC_SEQ_CST), h->W, 30 + h->W);
        goto fail;
    }
    if (ok && !herd_settled(h, &after) && cmdstats_accum(acc, &before, &after)) {
        fprintf(stderr, "baton bench: no commands per handoff: out of memory\n");
        h->rs_ok = 0;
    }
    __atomic_store_n(&h->last_go, k, __ATOMIC_SEQ_CST);
    dl = now_ns() + 30000000000LL;
    while (__atomic_load_n(&h->chain_released, __ATOMIC_SEQ_CST) < h->W && !herd_stopped(h) && now_ns() < dl)
        usleep(1000);
    if (__atomic_load_n(&h->chain_released, __ATOMIC_SEQ_CST) < h->W) {
        if (!herd_stopped(h)) herd_error(h, EX_SOFTWARE, "chain %ld: the last grantee did not release in 30 s", k);
        goto fail;
    }
    free(before.v);
    free(after.v);
    return 0;
fail:
    free(before.v);
    free(after.v);
    return -1;
}

static void *herd_main(void *p)
{
    herd_thread *t = p;
    herd *h = t->h;
    while (!herd_stopped(h)) {
        int rc, prev;
        int64_t got;
        long g;
        __atomic_add_fetch(&h->in_acquire, 1, __ATOMIC_SEQ_CST);
        rc = baton_lock_acquire(t->l, 60000);
        got = now_ns();
        __atomic_sub_fetch(&h->in_acquire, 1, __ATOMIC_SEQ_CST);
        if (rc) {
            if (!(rc == BATON_ECANCELED && herd_stopped(h))) herd_fail(h, rc, "loop: acquire");
            break;
        }
        if (herd_stopped(h)) {
            baton_lock_release(t->l);
            break;
        }
        g = __atomic_fetch_add(&h->grants, 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&h->progress, 1, __ATOMIC_RELAXED);
        prev = __atomic_exchange_n(&h->last_owner, t->me, __ATOMIC_SEQ_CST);
        if (g > h->warm && g <= h->warm + h->R) {
            if (prev != t->me) {
                h->lat[g - h->warm - 1] = (double)(got - __atomic_load_n(&h->t_rel, __ATOMIC_SEQ_CST)) / 1e9;
                h->have[g - h->warm - 1] = 1;
            } else {
                __atomic_add_fetch(&h->self_grants, 1, __ATOMIC_RELAXED);
            }
        }
        if (g == h->warm) {
            herd_wait_parked(h, t->c);   /* late ones only blur the count a little */
            herd_snapshot(h, 0);
        } else if (g == h->warm + h->R) {
            herd_snapshot(h, 1);
            __atomic_store_n(&h->stop, 1, __ATOMIC_SEQ_CST);
        }
        __atomic_store_n(&h->t_rel, now_ns(), __ATOMIC_SEQ_CST);
        if ((rc = baton_lock_release(t->l))) {
            herd_fail(h, rc, "loop: release");
            break;
        }
        /* let a waiter have it before queueing again */
        int64_t dl = now_ns() + 2000000000;
        while (__atomic_load_n(&h->grants, __ATOMIC_SEQ_CST) == g + 1 && !herd_stopped(h) && now_ns() < dl)
            usleep(50);
    }
    __atomic_store_n(&t->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Starts T[FROM..TO) on FN; how many started. */
static int herd_threads_start(herd_thread *t, int from, int to, void *(*fn)(void *))
{
    for (int i = from; i < to; i++) {
        t[i].done = 0;
        if (pthread_create(&t[i].th, NULL, fn, &t[i])) {
            fprintf(stderr, "baton bench: herd: cannot start thread %d of %d\n", i - from + 1, to - from);
            return i - from;
        }
    }
    return to - from;
}

/* Waits for T[FROM..FROM+N); after a stop, waiters parked in acquire are
 * woken by cancel (one cancel can land before an acquire begins and be
 * reset, so repeat). */
static void herd_threads_join(herd *h, herd_thread *t, int from, int n)
{
    for (;;) {
        int alive = 0;
        for (int i = from; i < from + n; i++)
            if (!__atomic_load_n(&t[i].done, __ATOMIC_SEQ_CST)) {
                alive++;
                if (herd_stopped(h)) baton_lock_cancel(t[i].l);
            }
        if (!alive) break;
        usleep(2000);
    }
    for (int i = from; i < from + n; i++) pthread_join(t[i].th, NULL);
}

static int w_herd(bench_opts *o)
{
    herd h;
    herd_thread *t = NULL;
    rstat_cfg scfg;
    progress pr;
    cmdstats cacc = { NULL, 0 }, lacc = { NULL, 0 };
    char name[64], err[512], ccmds[640], lcmds[640], out[2048];
    double *samples = NULL, *lsamples = NULL, t0;
    size_t ns = 0, nl = 0;
    long planned, chains = 0;
    int n, started, rc = EX_SOFTWARE, redis, counts;

    memset(&h, 0, sizeof h);
    memset(&pr, 0, sizeof pr);
    pthread_mutex_init(&h.mu, NULL);
    pthread_mutex_init(&h.cmu, NULL);
    pthread_cond_init(&h.ccv, NULL);
    h.rs.fd = -1;
    h.o = o;
    h.W = o->waiters > 0 ? o->waiters : 16;
    h.R = o->rounds > 0 ? o->rounds : 200;
    h.warm = h.W + 11;   /* every thread through once, connections and scripts warm */
    h.last_owner = -1;
    h.name = name;
    n = (int)h.W + 1;
    planned = (h.R + h.W - 1) / h.W;
    if (!o->fair && h.W >= HERD_SLOW_W && planned > HERD_SLOW_CHAINS) planned = HERD_SLOW_CHAINS;
    snprintf(name, sizeof name, "bench-herd-%ld", (long)getpid());
    raise_nofile();
    if (!(h.lat = calloc((size_t)h.R, sizeof *h.lat)) || !(h.have = calloc((size_t)h.R, 1)) ||
        !(h.clat = calloc((size_t)(planned + 1) * (size_t)h.W, sizeof *h.clat)) ||
        !(t = calloc((size_t)n, sizeof *t)) || !(samples = calloc((size_t)planned * (size_t)h.W + 1, sizeof *samples)) ||
        !(lsamples = calloc((size_t)h.R + 1, sizeof *lsamples)))
        goto out;
    for (int i = 0; i < n; i++) {
        int orc;
        t[i].h = &h;
        t[i].me = i;
        if ((orc = open_lock(o, name, &t[i].c, &t[i].l))) {
            struct rlimit rl;
            long native = baton_error_last()->native;
            if ((native == EMFILE || native == ENFILE) && !getrlimit(RLIMIT_NOFILE, &rl))
                fprintf(stderr, "baton bench: herd: %d clients need more than %lld open files\n", n,
                        (long long)rl.rlim_cur);
            rc = exit_for(orc);
            goto out;
        }
    }
    redis = rstat_parse(o->uri, &scfg);
    if (redis < 0) {
        fprintf(stderr, "baton bench: no commands per handoff: cannot read the Redis address in the URI\n");
    } else if (redis > 0) {
        if (rstat_open(&h.rs, &scfg, err, sizeof err)) fprintf(stderr, "baton bench: no commands per handoff: %s\n", err);
        else h.rs_ok = 1;
    }
    explicit_bzero(&scfg, sizeof scfg);
    counts = h.rs_ok;
    progress_start(&pr, "herd", "grants", 0, 0, (planned + 1) * h.W + h.warm + h.R + 1, count_long, &h.progress);

    /* chain: thread 0 is this thread; the waiters are t[1..W] */
    started = herd_threads_start(t, 1, n, chain_main);
    if (started < n - 1) __atomic_store_n(&h.stop, 1, __ATOMIC_SEQ_CST);
    t0 = now_s();
    if (started == n - 1 && !herd_chain(&h, &t[0], 1, 0, NULL))
        for (chains = 0; chains < planned && now_s() - t0 < HERD_CHAIN_BUDGET_S; chains++)
            if (herd_chain(&h, &t[0], chains + 2, 1, &cacc)) break;
    counts = counts && h.rs_ok;
    chain_post(&h, -1);
    herd_threads_join(&h, t, 1, started);
    if (started < n - 1) goto out;
    if (h.err) goto failed;

    /* loop: all W+1 */
    __atomic_store_n(&h.in_acquire, 0, __ATOMIC_SEQ_CST);
    started = herd_threads_start(t, 0, n, herd_main);
    if (started < n) __atomic_store_n(&h.stop, 1, __ATOMIC_SEQ_CST);
    herd_threads_join(&h, t, 0, started);
    if (started < n) goto out;
failed:
    progress_stop(&pr);
    if (h.err) {
        fprintf(stderr, "baton bench: herd: %s\n", h.errmsg);
        rc = exit_for(h.err);
        goto out;
    }
    /* the chains' samples, chain by chain (the warm-up chain is slot 0) */
    for (long c = 1; c <= chains; c++)
        for (long g = 0; g < h.W; g++) samples[ns++] = h.clat[c * h.W + g];
    for (long i = 0; i < h.R; i++)
        if (h.have[i]) lsamples[nl++] = h.lat[i];
    qsort(samples, ns, sizeof *samples, cmp_d);
    qsort(lsamples, nl, sizeof *lsamples, cmp_d);
    cmdstats_fields(ccmds, sizeof ccmds, counts ? &cacc : NULL, chains * h.W, "handoff", "pings", "commands");
    if (h.have_before && h.have_after && cmdstats_accum(&lacc, &h.before, &h.after) == 0)
        cmdstats_fields(lcmds, sizeof lcmds, &lacc, h.R, "grant_loop", NULL, "commands_loop");
    else
        cmdstats_fields(lcmds, sizeof lcmds, NULL, 0, "grant_loop", NULL, "commands_loop");
    snprintf(out, sizeof out, "{\"peer\": \"baton\", \"workload\": \"herd\", \"waiters\": %ld, \"fair\": %s, "
             "\"rounds\": %ld, \"chains\": %ld, \"samples\": %zu, %s, \"handoff_p50_us\": %.1f, \"handoff_p99_us\": %.1f, "
             "\"loop_samples\": %zu, %s, \"loop_handoff_p50_us\": %.1f, \"loop_handoff_p99_us\": %.1f}",
             h.W, o->fair ? "true" : "false", h.R, chains, ns, ccmds, pct(samples, ns, 0.5) * 1e6,
             pct(samples, ns, 0.99) * 1e6, nl, lcmds, pct(lsamples, nl, 0.5) * 1e6, pct(lsamples, nl, 0.99) * 1e6);
    emit(o, out);
    {
        char what[96];
        snprintf(what, sizeof what, "release to the next grant, chains of %ld waiters", h.W);
        rc = svg_cdf(o, what, samples, ns);
    }
    if (!rc && !ns) rc = 1;
out:
    progress_stop(&pr);
    if (t)
        for (int i = 0; i < n; i++) {
            baton_lock_free(t[i].l);
            baton_client_close(t[i].c);
        }
    rstat_close(&h.rs);
    free(h.before.v);
    free(h.after.v);
    free(cacc.v);
    free(lacc.v);
    free(h.lat);
    free(h.have);
    free(h.clat);
    free(samples);
    free(lsamples);
    free(t);
    pthread_cond_destroy(&h.ccv);
    pthread_mutex_destroy(&h.cmu);
    pthread_mutex_destroy(&h.mu);
    return rc;
}

/* ---- many: K threads, K locks, one client ---- */

typedef struct {
    baton_client *c;
    int idx, fair;
    double end;
    long pairs;   /* atomic: read by the progress line */
} many_arg;

static void *many_main(void *p)
{
    many_arg *a = p;
    baton_lock *l;
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    char name[64];
    lo.fair = a->fair;
    snprintf(name, sizeof name, "bench-many-%ld-%d", (long)getpid(), a->idx);
    if (baton_lock_open(&l, a->c, name, &lo)) return NULL;
    while (now_s() < a->end) {
        if (baton_lock_acquire(l, -1)) break;
        baton_lock_release(l);
        __atomic_fetch_add(&a->pairs, 1, __ATOMIC_RELAXED);
    }
    baton_lock_free(l);
    return NULL;
}

typedef struct {
    many_arg *args;
    int n;
} many_count_ctx;

static long count_many(void *p)
{
    many_count_ctx *m = p;
    long s = 0;
    for (int i = 0; i < m->n; i++) s += __atomic_load_n(&m->args[i].pairs, __ATOMIC_RELAXED);
    return s;
}

static int w_many(bench_opts *o)
{
    int K = o->clients > 0 ? o->clients : 50, started = 0, rc;
    baton_client *c = NULL;
    pthread_t *th = calloc((size_t)K, sizeof *th);
    many_arg *args = calloc((size_t)K, sizeof *args);
    many_count_ctx mc = { args, 0 };
    progress pr;
    double t0;
    long total = 0;
    char out[256];
    if (!th || !args) { rc = EX_SOFTWARE; goto out; }
    if ((rc = baton_client_open(&c, o->uri, NULL))) {
        fprintf(stderr, "baton bench: %s\n", baton_error_last()->message);
        rc = exit_for(rc);
        goto out;
    }
    t0 = now_s();
    progress_start(&pr, "many", "pairs", t0, o->seconds, 0, count_many, &mc);
    for (int i = 0; i < K; i++) {
        args[i] = (many_arg){ c, i, o->fair, t0 + o->seconds, 0 };
        if (pthread_create(&th[i], NULL, many_main, &args[i])) break;
        mc.n = ++started;
    }
    for (int i = 0; i < started; i++) { pthread_join(th[i], NULL); total += args[i].pairs; }
    progress_stop(&pr);
    if (started < K) {
        fprintf(stderr, "baton bench: many: started %d of %d threads\n", started, K);
        rc = EX_SOFTWARE;
        goto out;
    }
    snprintf(out, sizeof out, "{\"peer\": \"baton\", \"workload\": \"many\", \"locks\": %d, \"seconds\": %g, "
             "\"pairs_per_s\": %.1f}", K, o->seconds, total / (now_s() - t0));
    emit(o, out);
out:
    baton_client_close(c);
    free(th);
    free(args);
    return rc;
}

/* ---- memory: client heap per held lock and per waiting lock ---- */

/* Bytes the allocator has handed out and not taken back (glibc: all arenas
 * plus the mmap'd blocks); -1 where glibc cannot say. */
static long long heap_bytes(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    return (long long)(mi.uordblks + mi.hblkhd);
#else
    return -1;
#endif
}

/* Another allocator (ASan's, jemalloc preloaded) leaves glibc's counters still. */
static int heap_measurable(void)
{
    long long a = heap_bytes(), b;
    void *volatile p;
    if (a < 0) return 0;
    p = malloc(8192);
    b = heap_bytes();
    free(p);
    return p && b - a >= 8192;
}

static long long rss_bytes(void)
{
    long long size = 0, res = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    if (fscanf(f, "%lld %lld", &size, &res) != 2) res = -1;
    fclose(f);
    return res < 0 ? -1 : res * sysconf(_SC_PAGESIZE);
}

typedef struct mem_run mem_run;

typedef struct {
    mem_run *m;
    int idx, done;   /* done: atomic */
    baton_lock *l;
    pthread_t th;
} mem_thread;

struct mem_run {
    baton_client *c;         /* the waiters' client: the one measured */
    const char *prefix;
    int fair;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready, go;           /* under mu; go < 0: give up */
    long progress;           /* atomic */
    int entered;             /* atomic: threads that reached acquire */
    int stop;                /* atomic */
    int granted;             /* atomic: a waiter got a lock the other client held */
    int err;                 /* atomic: the first failure */
};

static void *mem_main(void *p)
{
    mem_thread *t = p;
    mem_run *m = t->m;
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    baton_lock *l = NULL;
    char name[96];
    int rc;
    /* this thread's arena and tcache go into the baseline, not into the lock */
    void *volatile warm = malloc(64);
    free(warm);
    pthread_mutex_lock(&m->mu);
    m->ready++;
    pthread_cond_broadcast(&m->cv);
    while (!m->go) pthread_cond_wait(&m->cv, &m->mu);
    rc = m->go;
    pthread_mutex_unlock(&m->mu);
    if (rc < 0) goto done;
    lo.fair = m->fair;
    snprintf(name, sizeof name, "%s-w%d", m->prefix, t->idx);
    if ((rc = baton_lock_open(&l, m->c, name, &lo))) {
        int zero = 0;
        __atomic_compare_exchange_n(&m->err, &zero, rc, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        goto done;
    }
    __atomic_store_n(&t->l, l, __ATOMIC_SEQ_CST);   /* the main thread cancels through it */
    __atomic_add_fetch(&m->entered, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&m->progress, 1, __ATOMIC_RELAXED);
    rc = baton_lock_acquire(l, -1);
    if (rc == 0) {
        __atomic_store_n(&m->granted, 1, __ATOMIC_SEQ_CST);
        baton_lock_release(l);
    } else if (!(rc == BATON_ECANCELED && __atomic_load_n(&m->stop, __ATOMIC_SEQ_CST))) {
        int zero = 0;
        __atomic_compare_exchange_n(&m->err, &zero, rc, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
done:
    __atomic_store_n(&t->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void fmt_per(char *buf, size_t n, int ok, long long delta, long count)
{
    if (ok && count > 0) snprintf(buf, n, "%.1f", (double)delta / count);
    else snprintf(buf, n, "null");
}

static int w_memory(bench_opts *o)
{
    int K = o->n > 0 ? o->n : 1000, Kw = K < MEM_MAX_WAITING ? K : MEM_MAX_WAITING;
    int rc = EX_SOFTWARE, started = 0, measurable = heap_measurable();
    baton_client *holder = NULL;
    baton_lock **held = NULL, **hw = NULL;
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    mem_thread *t = NULL;
    mem_run m;
    pthread_attr_t attr;
    pthread_condattr_t ca;
    progress pr;
    char prefix[64], name[96], hb[32], wb[32], tb[32], rb[32], out[768];
    long long h0 = 0, h1 = 0, h2 = 0, h3 = 0, h4 = 0, r3 = -1, r4 = -1;

    memset(&m, 0, sizeof m);
    memset(&pr, 0, sizeof pr);
    pthread_mutex_init(&m.mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m.cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, MEM_STACK_BYTES);
    snprintf(prefix, sizeof prefix, "bench-mem-%ld", (long)getpid());
    m.prefix = prefix;
    m.fair = o->fair;
    lo.fair = o->fair;
    raise_nofile();
    if (!measurable)
        fprintf(stderr, "baton bench: memory: the allocator does not report to mallinfo2 (ASan? not glibc?); "
                "bytes are null\n");
    if (!(held = calloc((size_t)K, sizeof *held)) || !(hw = calloc((size_t)Kw, sizeof *hw)) ||
        !(t = calloc((size_t)Kw, sizeof *t)))
        goto out;
    if ((rc = baton_client_open(&m.c, o->uri, NULL)) || (rc = baton_client_open(&holder, o->uri, NULL))) {
        fprintf(stderr, "baton bench: %s\n", baton_error_last()->message);
        rc = exit_for(rc);
        goto out;
    }
    rc = EX_SOFTWARE;
    progress_start(&pr, "memory", "locks", 0, 0, (long)K + Kw, count_long, &m.progress);

    /* held: K handles on one client, each acquired */
    h0 = heap_bytes();
    for (int i = 0; i < K; i++) {
        int lrc;
        snprintf(name, sizeof name, "%s-h%d", prefix, i);
        if ((lrc = baton_lock_open(&held[i], m.c, name, &lo)) || (lrc = baton_lock_acquire(held[i], 5000))) {
            fprintf(stderr, "baton bench: memory: lock %d: %s\n", i, baton_error_last()->message);
            rc = exit_for(lrc);
            goto out;
        }
        __atomic_add_fetch(&m.progress, 1, __ATOMIC_RELAXED);
    }
    h1 = heap_bytes();
    for (int i = 0; i < K; i++) { baton_lock_free(held[i]); held[i] = NULL; }

    /* waiting: the other client holds Kw locks; a thread each blocks on one */
    for (int i = 0; i < Kw; i++) {
        int lrc;
        snprintf(name, sizeof name, "%s-w%d", prefix, i);
        if ((lrc = baton_lock_open(&hw[i], holder, name, &lo)) || (lrc = baton_lock_acquire(hw[i], 5000))) {
            fprintf(stderr, "baton bench: memory: lock %d: %s\n", i, baton_error_last()->message);
            rc = exit_for(lrc);
            goto out;
        }
    }
    h2 = heap_bytes();
    for (int i = 0; i < Kw; i++) {
        t[i].m = &m;
        t[i].idx = i;
        if (pthread_create(&t[i].th, &attr, mem_main, &t[i])) {
            fprintf(stderr, "baton bench: memory: cannot start thread %d of %d\n", i + 1, Kw);
            break;
        }
        started++;
    }
    pthread_mutex_lock(&m.mu);
    while (m.ready < started) pthread_cond_wait(&m.cv, &m.mu);
    pthread_mutex_unlock(&m.mu);
    h3 = heap_bytes();   /* the parked threads' own heap (TLS, tcache), not the locks' */
    r3 = rss_bytes();
    pthread_mutex_lock(&m.mu);
    m.go = started < Kw ? -1 : 1;
    pthread_cond_broadcast(&m.cv);
    pthread_mutex_unlock(&m.mu);
    if (started < Kw) goto stop;
    {
        /* all in acquire, then until the heap stops moving (subscriptions confirmed, queues joined) */
        int64_t dl = now_ns() + 30000000000LL;
        long long prev = -2, cur;
        int still = 0;
        while (__atomic_load_n(&m.entered, __ATOMIC_SEQ_CST) < Kw && !__atomic_load_n(&m.err, __ATOMIC_SEQ_CST) &&
               now_ns() < dl)
            usleep(2000);
        dl = now_ns() + 5000000000LL;
        while (still < 4 && now_ns() < dl && !__atomic_load_n(&m.err, __ATOMIC_SEQ_CST)) {
            usleep(50000);
            cur = heap_bytes();
            still = cur == prev ? still + 1 : 0;
            prev = cur;
        }
    }
    h4 = heap_bytes();
    r4 = rss_bytes();
stop:
    __atomic_store_n(&m.stop, 1, __ATOMIC_SEQ_CST);
    for (;;) {
        int alive = 0;
        for (int i = 0; i < started; i++)
            if (!__atomic_load_n(&t[i].done, __ATOMIC_SEQ_CST)) {
                baton_lock *l = __atomic_load_n(&t[i].l, __ATOMIC_SEQ_CST);
                alive++;
                if (l) baton_lock_cancel(l);
            }
        if (!alive) break;
        usleep(2000);
    }
    for (int i = 0; i < started; i++) pthread_join(t[i].th, NULL);
    progress_stop(&pr);
    if (started < Kw) goto out;
    if (__atomic_load_n(&m.err, __ATOMIC_SEQ_CST)) {
        fprintf(stderr, "baton bench: memory: a waiter failed: %s\n", baton_strerror(m.err));
        rc = exit_for(m.err);
        goto out;
    }
    if (m.entered < Kw) {
        fprintf(stderr, "baton bench: memory: only %d of %d waiters reached acquire in 30 s\n", m.entered, Kw);
        goto out;
    }
    if (m.granted) {
        fprintf(stderr, "baton bench: memory: a waiter was granted a lock another client held\n");
        goto out;
    }
    fmt_per(hb, sizeof hb, measurable, h1 - h0, K);
    fmt_per(wb, sizeof wb, measurable, h4 - h3, Kw);
    fmt_per(tb, sizeof tb, measurable, h3 - h2, Kw);
    fmt_per(rb, sizeof rb, r3 >= 0 && r4 >= 0, r4 - r3, Kw);
    snprintf(out, sizeof out, "{\"peer\": \"baton\", \"workload\": \"memory\", \"locks\": %d, \"fair\": %s, "
             "\"held_bytes_per_lock\": %s, \"waiting_locks\": %d, \"waiting_bytes_per_lock\": %s, "
             "\"thread_heap_bytes\": %s, \"thread_stack_bytes\": %d, \"waiting_rss_bytes_per_lock\": %s, "
             "\"thread_cache\": \"%s\"}",
             K, o->fair ? "true" : "false", hb, Kw, wb, tb, MEM_STACK_BYTES, rb,
             strstr(getenv("GLIBC_TUNABLES") ? getenv("GLIBC_TUNABLES") : "", "tcache_count=0") ? "off" : "on");
    emit(o, out);
    rc = 0;
out:
    for (int i = 0; t && i < started; i++) baton_lock_free(t[i].l);
    for (int i = 0; held && i < K; i++) baton_lock_free(held[i]);
    for (int i = 0; hw && i < Kw; i++) baton_lock_free(hw[i]);
    baton_client_close(holder);
    baton_client_close(m.c);
    progress_stop(&pr);
    free(held);
    free(hw);
    free(t);
    pthread_attr_destroy(&attr);
    pthread_cond_destroy(&m.cv);
    pthread_mutex_destroy(&m.mu);
    return rc;
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
        "usage: baton bench [-u URI] --workload W [options]\n"
        "  --workload uncontended  one client, N acquire+release pairs (--n N, default 10000)\n"
        "             contended    C processes on one lock for S seconds (--clients C, --seconds S)\n"
        "             handoff      release to the blocked waiter's grant (--rounds R, default 200)\n"
        "             herd         W waiters on one lock, a client each: chains of W handoffs (release to\n"
        "                          the next grant; Redis commands per handoff), then the acquire/release\n"
        "                          loop (--waiters W, default 16; --rounds R, default 200)\n"
        "             many         K locks from a thread pool on one client (--clients K, --seconds S)\n"
        "             memory       client heap per held and per waiting lock (--n K, default 1000;\n"
        "                          at most %d waiting)\n"
        "  --fair                  FIFO locks (engines with fair locks)\n"
        "  --layout redisson|simple  Redis key layout\n"
        "  --json                  one JSON line per result (default: a table)\n"
        "  --svg FILE              the latency CDF of the run as SVG (not for many, memory)\n",
        MEM_MAX_WAITING);
}

enum { OPT_WAITERS = 256, OPT_SVG };

int baton__cli_bench(int argc, char **argv)
{
    static const struct option lo[] = {
        { "workload", required_argument, NULL, 'W' }, { "clients", required_argument, NULL, 'c' },
        { "seconds", required_argument, NULL, 's' }, { "n", required_argument, NULL, 'N' },
        { "rounds", required_argument, NULL, 'r' }, { "fair", no_argument, NULL, 'f' },
        { "layout", required_argument, NULL, 'L' }, { "json", no_argument, NULL, 'j' },
        { "waiters", required_argument, NULL, OPT_WAITERS }, { "svg", required_argument, NULL, OPT_SVG },
        { "worker", required_argument, NULL, 'X' }, { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    static const char *const workloads[] = { "uncontended", "contended", "handoff", "herd", "many", "memory", NULL };
    bench_opts o;
    const char *worker = NULL, *layout = NULL, *svg = NULL;
    char uribuf[1024], *end;
    int opt, known = 0, rc;

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
        if (argc - optind != 3) return EX_USAGE;
        if (!strcmp(worker, "contended")) return worker_contended(&o, argv[optind], atof(argv[optind + 1]), argv[optind + 2]);
        if (!strcmp(worker, "handoff")) return worker_handoff(&o, argv[optind], atoi(argv[optind + 1]), argv[optind + 2]);
        return EX_USAGE;
    }
    if (optind < argc) {
        fprintf(stderr, "baton bench: unexpected argument '%s'\n", argv[optind]);
        return EX_USAGE;
    }
    for (int i = 0; workloads[i]; i++) known |= !strcmp(o.workload, workloads[i]);
    if (!known) {
        fprintf(stderr, "baton bench: unknown workload '%s' (uncontended, contended, handoff, herd, many, memory)\n",
                o.workload);
        return EX_USAGE;
    }
    if (svg) {
        if (!strcmp(o.workload, "many") || !strcmp(o.workload, "memory")) {
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
    /* a server that drops our stats connection must not kill the run (TLS writes use write(2)) */
    signal(SIGPIPE, SIG_IGN);
    if (!strcmp(o.workload, "uncontended")) rc = w_uncontended(&o);
    else if (!strcmp(o.workload, "contended")) rc = w_contended(&o);
    else if (!strcmp(o.workload, "handoff")) rc = w_handoff(&o);
    else if (!strcmp(o.workload, "herd")) rc = w_herd(&o);
    else if (!strcmp(o.workload, "many")) rc = w_many(&o);
    else rc = w_memory(&o);
    if (o.svg) {
        /* the run failed before drawing: leave no empty file behind */
        fclose(o.svg);
        unlink(svg);
    }
    return rc;
}
