/* baton bench: CPU, heap and RSS, and the engine's operation
 * counts (what a handoff costs the server). */
#include "bench.h"
#include <baton/sys/stats.h>

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

void cpu_times(double *user, double *sys)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *user = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6;
    *sys = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* glibc: all arenas plus the mmap'd blocks. */
long long heap_bytes(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    return (long long)(mi.uordblks + mi.hblkhd);
#else
    return -1;
#endif
}

int heap_measurable(void)
{
    long long a = heap_bytes(), b;
    void *volatile p;
    if (a < 0) return 0;
    p = malloc(8192);
    b = heap_bytes();
    free(p);
    return p && b - a >= 8192;
}

long long rss_bytes(void)
{
    long long size = 0, res = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    if (fscanf(f, "%lld %lld", &size, &res) != 2) res = -1;
    fclose(f);
    return res < 0 ? -1 : res * sysconf(_SC_PAGESIZE);
}

/* ---- the engine's operation counts ---- */

typedef struct {
    opstats s;
    int oom;
} opstats_acc;

/* engine_ops' callback: a quorum names one operation once per member. */
static void opstats_add(void *arg, const char *op, uint64_t count)
{
    opstats_acc *a = arg;
    size_t j;
    for (j = 0; j < a->s.n && strcmp(a->s.v[j].name, op); j++) {}
    if (j == a->s.n) {
        opstat *v = realloc(a->s.v, (a->s.n + 1) * sizeof *v);
        if (!v) { a->oom = 1; return; }
        a->s.v = v;
        snprintf(v[j].name, sizeof v[j].name, "%s", op);
        v[j].calls = 0;
        a->s.n++;
    }
    a->s.v[j].calls += (long long)count;
}

int opstats_read(baton_client *c, opstats *out, char *err, size_t en)
{
    opstats_acc a = { { NULL, 0 }, 0 };
    int rc = baton__client_engine_ops(c, opstats_add, &a);
    if (!rc && a.oom) {
        snprintf(err, en, "out of memory");
        rc = -1;
    } else if (rc) {
        snprintf(err, en, "%s", baton_error_last()->message ? baton_error_last()->message : baton_strerror(rc));
    }
    if (rc) {
        free(a.s.v);
        return rc;
    }
    free(out->v);
    *out = a.s;
    return 0;
}

void opstats_free(opstats *s)
{
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

static long long opstat_calls(const opstats *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->v[i].name, name)) return s->v[i].calls;
    return 0;
}

/* Commands a client sends itself, as opposed to the ones a script runs
 * inside the server (Redis's commandstats counts both). */
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

int opstats_same(const opstats *a, const opstats *b)
{
    for (size_t i = 0; i < b->n; i++)
        if (is_counted(b->v[i].name) && b->v[i].calls != opstat_calls(a, b->v[i].name)) return 0;
    return 1;
}

int opstats_accum(opstats *acc, const opstats *before, const opstats *after)
{
    for (size_t i = 0; i < after->n; i++) {
        long long delta = after->v[i].calls - opstat_calls(before, after->v[i].name);
        size_t j;
        if (delta <= 0) continue;
        for (j = 0; j < acc->n && strcmp(acc->v[j].name, after->v[i].name); j++) {}
        if (j == acc->n) {
            opstat *v = realloc(acc->v, (acc->n + 1) * sizeof *v);
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
    long long x = ((const opstat *)a)->calls, y = ((const opstat *)b)->calls;
    return x > y ? -1 : x < y;
}

void opstats_fields(char *out, size_t n, const opstats *acc, long count, const char *per, const char *pings,
                    const char *top)
{
    long long all = 0, req = 0;
    opstat *d = NULL;
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
    if (pings) snprintf(pf, sizeof pf, "\"%s\": %lld, ", pings, opstat_calls(acc, "ping"));
    snprintf(out, n, "\"commands_per_%s\": %.2f, \"requests_per_%s\": %.2f, %s\"%s\": \"%s\"", per,
             (double)all / count, per, (double)req / count, pf, top, list);
    free(d);
}
