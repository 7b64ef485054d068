/* baton bench: the peers' workloads (../shared/peers) on baton, one JSON line
 * (or a table) per result, with the peers' field names so runs compare side
 * by side. Multi-process workloads re-exec this binary as workers. */
#include <baton.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int baton__cli_bench(int argc, char **argv);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
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

static double pct(double *v, size_t n, double p)
{
    if (!n) return 0;
    size_t i = (size_t)(n * p);
    if (i >= n) i = n - 1;
    return v[i];
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

typedef struct {
    const char *uri;
    const char *workload;
    int clients, n, rounds, fair, json;
    double seconds;
} bench_opts;

static int open_lock(const bench_opts *o, const char *name, baton_client **c, baton_lock **l)
{
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    int rc;
    lo.fair = o->fair;
    if ((rc = baton_client_open(c, o->uri, NULL)) || (rc = baton_lock_open(l, *c, name, &lo))) {
        fprintf(stderr, "baton bench: %s\n", baton_error_last()->message);
        if (*c) baton_client_close(*c);
        *c = NULL;
        return rc;
    }
    return 0;
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
            printf("  %-18.*s %.*s\n", (int)(ke - k), k, (int)(ve - v), v);
            p = ve;
        }
    }
    fflush(stdout);
}

static int w_uncontended(const bench_opts *o)
{
    baton_client *c = NULL;
    baton_lock *l = NULL;
    char name[64], out[512];
    double *lat, t0, dt, c0, cpu;
    int n = o->n > 0 ? o->n : 10000, warm = n / 10 < 200 ? n / 10 : 200;
    snprintf(name, sizeof name, "bench-u%ld", (long)getpid());
    if (open_lock(o, name, &c, &l)) return 69;
    if (!(lat = malloc(sizeof *lat * (size_t)n))) return 70;
    for (int i = 0; i < warm; i++) { baton_lock_acquire(l, -1); baton_lock_release(l); }
    c0 = cpu_s();
    t0 = now_s();
    for (int i = 0; i < n; i++) {
        double a = now_s();
        if (baton_lock_acquire(l, -1)) { fprintf(stderr, "acquire: %s\n", baton_error_last()->message); return 70; }
        lat[i] = now_s() - a;
        baton_lock_release(l);
    }
    dt = now_s() - t0;
    cpu = cpu_s() - c0;
    qsort(lat, (size_t)n, sizeof *lat, cmp_d);
    snprintf(out, sizeof out, "{\"peer\": \"baton\", \"workload\": \"uncontended\", \"n\": %d, \"pairs_per_s\": %.1f, "
             "\"acquire_p50_us\": %.1f, \"acquire_p99_us\": %.1f, \"cpu_us_per_pair\": %.2f}",
             n, n / dt, pct(lat, (size_t)n, 0.5) * 1e6, pct(lat, (size_t)n, 0.99) * 1e6, cpu / n * 1e6);
    emit(o, out);
    free(lat);
    baton_lock_free(l);
    baton_client_close(c);
    return 0;
}

/* ---- contended: C worker processes, a non-atomic file counter inside ---- */

static int worker_contended(const bench_opts *o, const char *counter, double start_at, const char *outfile)
{
    baton_client *c = NULL;
    baton_lock *l = NULL;
    size_t cap = 1 << 16, nw = 0;
    double *waits = malloc(cap * sizeof *waits), end;
    long done = 0;
    FILE *f;
    if (!waits || open_lock(o, "bench-contended", &c, &l)) return 69;
    while (wall_s() < start_at) usleep(500);
    end = start_at + o->seconds;
    while (wall_s() < end) {
        double a = now_s();
        char buf[32] = "";
        long v;
        int fd;
        if (baton_lock_acquire(l, -1)) { fprintf(stderr, "acquire: %s\n", baton_error_last()->message); break; }
        if (nw == cap) { cap *= 2; waits = realloc(waits, cap * sizeof *waits); if (!waits) return 70; }
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
    if (!(f = fopen(outfile, "w"))) return 70;
    fprintf(f, "%ld %zu\n", done, nw);
    fwrite(waits, sizeof *waits, nw, f);
    fclose(f);
    free(waits);
    baton_lock_free(l);
    baton_client_close(c);
    return 0;
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

static int w_contended(const bench_opts *o)
{
    int C = o->clients > 0 ? o->clients : 8;
    char dir[] = "/tmp/baton-bench.XXXXXX", counter[64], outf[96], start[32], secs[32], out[768];
    pid_t *pids = calloc((size_t)C, sizeof *pids);
    double start_at = wall_s() + 1.0, *all = NULL;
    long total = 0, mn = -1, mx = 0, final = -1;
    size_t nall = 0;
    FILE *f;
    if (!pids || !mkdtemp(dir)) return 70;
    snprintf(counter, sizeof counter, "%s/counter", dir);
    if (!(f = fopen(counter, "w"))) return 70;
    fputs("0", f);
    fclose(f);
    snprintf(start, sizeof start, "%.6f", start_at);
    snprintf(secs, sizeof secs, "%g", o->seconds);
    for (int i = 0; i < C; i++) {
        snprintf(outf, sizeof outf, "%s/w%d", dir, i);
        char *av[] = { "baton", "bench", "--worker", "contended", "-u", (char *)o->uri, "--seconds", secs,
                       o->fair ? "--fair" : "--json", counter, start, outf, NULL };
        pids[i] = spawn(av);
    }
    for (int i = 0; i < C; i++) {
        long done;
        size_t nw;
        waitpid(pids[i], NULL, 0);
        snprintf(outf, sizeof outf, "%s/w%d", dir, i);
        if (!(f = fopen(outf, "r")) || fscanf(f, "%ld %zu\n", &done, &nw) != 2) {
            fprintf(stderr, "baton bench: worker %d failed\n", i);
            if (f) fclose(f);
            continue;
        }
        all = realloc(all, (nall + nw) * sizeof *all);
        if (all && fread(all + nall, sizeof *all, nw, f) == nw) nall += nw;
        fclose(f);
        unlink(outf);
        total += done;
        if (mn < 0 || done < mn) mn = done;
        if (done > mx) mx = done;
    }
    if ((f = fopen(counter, "r"))) { if (fscanf(f, "%ld", &final) != 1) final = -1; fclose(f); }
    unlink(counter);
    rmdir(dir);
    qsort(all, nall, sizeof *all, cmp_d);
    snprintf(out, sizeof out, "{\"peer\": \"baton\", \"workload\": \"contended\", \"clients\": %d, \"seconds\": %g, "
             "\"handoffs_per_s\": %.1f, \"counter_ok\": %s, \"wait_p50_ms\": %.2f, \"wait_p99_ms\": %.2f, "
             "\"min_per_client\": %ld, \"max_per_client\": %ld, \"fair\": %s}",
             C, o->seconds, total / o->seconds, final == total ? "true" : "false", pct(all, nall, 0.5) * 1e3,
             pct(all, nall, 0.99) * 1e3, mn < 0 ? 0 : mn, mx, o->fair ? "true" : "false");
    emit(o, out);
    free(all);
    free(pids);
    return final == total ? 0 : 1;
}

/* ---- handoff: release → the blocked waiter's grant, across two processes ---- */

typedef struct {
    volatile double t_rel;
    volatile int grants;   /* the last owner, -1 none */
    volatile int ready;
} handoff_shm;

static int worker_handoff(const bench_opts *o, const char *shmpath, int me, const char *outfile)
{
    baton_client *c = NULL;
    baton_lock *l = NULL;
    int fd = open(shmpath, O_RDWR), R = o->rounds > 0 ? o->rounds : 200, n = 0;
    handoff_shm *s;
    double *lat = malloc(sizeof *lat * (size_t)R);
    FILE *f;
    if (fd < 0 || !lat) return 70;
    s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (s == MAP_FAILED || open_lock(o, "bench-handoff", &c, &l)) return 69;
    __atomic_fetch_add(&s->ready, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&s->ready, __ATOMIC_SEQ_CST) < 2) usleep(100);
    for (int i = 0; i < R; i++) {
        int last;
        if (baton_lock_acquire(l, -1)) break;
        double t = now_s();
        last = __atomic_exchange_n(&s->grants, me, __ATOMIC_SEQ_CST);
        if (last != me && last != -1) lat[n++] = t - s->t_rel;
        usleep(5000);   /* hold long enough for the other side to block in acquire */
        s->t_rel = now_s();
        baton_lock_release(l);
        double dl = now_s() + 2.0;
        while (__atomic_load_n(&s->grants, __ATOMIC_SEQ_CST) == me && now_s() < dl) usleep(200);
    }
    if (!(f = fopen(outfile, "w"))) return 70;
    fprintf(f, "%d\n", n);
    fwrite(lat, sizeof *lat, (size_t)n, f);
    fclose(f);
    free(lat);
    munmap(s, sizeof *s);
    baton_lock_free(l);
    baton_client_close(c);
    return 0;
}

static int w_handoff(const bench_opts *o)
{
    char dir[] = "/tmp/baton-bench.XXXXXX", shm[64], outf[2][96], rounds[16], out[512];
    double *all = NULL;
    size_t nall = 0;
    pid_t p[2];
    handoff_shm init = { 0, -1, 0 };
    FILE *f;
    if (!mkdtemp(dir)) return 70;
    snprintf(shm, sizeof shm, "%s/shm", dir);
    if (!(f = fopen(shm, "w"))) return 70;
    fwrite(&init, sizeof init, 1, f);
    fclose(f);
    snprintf(rounds, sizeof rounds, "%d", o->rounds > 0 ? o->rounds : 200);
    for (int i = 0; i < 2; i++) {
        char me[4];
        snprintf(me, sizeof me, "%d", i);
        snprintf(outf[i], sizeof outf[i], "%s/h%d", dir, i);
        char *av[] = { "baton", "bench", "--worker", "handoff", "-u", (char *)o->uri, "--rounds", rounds,
                       o->fair ? "--fair" : "--json", shm, me, outf[i], NULL };
        p[i] = spawn(av);
    }
    for (int i = 0; i < 2; i++) {
        int n = 0;
        waitpid(p[i], NULL, 0);
        if (!(f = fopen(outf[i], "r")) || fscanf(f, "%d\n", &n) != 1) { if (f) fclose(f); continue; }
        all = realloc(all, (nall + (size_t)n) * sizeof *all);
        if (all && fread(all + nall, sizeof *all, (size_t)n, f) == (size_t)n) nall += (size_t)n;
        fclose(f);
        unlink(outf[i]);
    }
    unlink(shm);
    rmdir(dir);
    qsort(all, nall, sizeof *all, cmp_d);
    snprintf(out, sizeof out, "{\"peer\": \"baton\", \"workload\": \"handoff\", \"rounds\": %d, \"samples\": %zu, "
             "\"handoff_p50_us\": %.1f, \"handoff_p99_us\": %.1f, \"fair\": %s}",
             o->rounds > 0 ? o->rounds : 200, nall, pct(all, nall, 0.5) * 1e6, pct(all, nall, 0.99) * 1e6,
             o->fair ? "true" : "false");
    emit(o, out);
    free(all);
    return nall ? 0 : 1;
}

/* ---- many: K threads, K locks, one client ---- */

typedef struct {
    baton_client *c;
    int idx, fair;
    double end;
    long pairs;
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
        a->pairs++;
    }
    baton_lock_free(l);
    return NULL;
}

static int w_many(const bench_opts *o)
{
    int K = o->clients > 0 ? o->clients : 50;
    baton_client *c;
    pthread_t *th = calloc((size_t)K, sizeof *th);
    many_arg *args = calloc((size_t)K, sizeof *args);
    double t0;
    long total = 0;
    char out[256];
    if (!th || !args || baton_client_open(&c, o->uri, NULL)) {
        fprintf(stderr, "baton bench: %s\n", baton_error_last()->message);
        return 69;
    }
    t0 = now_s();
    for (int i = 0; i < K; i++) {
        args[i] = (many_arg){ c, i, o->fair, t0 + o->seconds, 0 };
        pthread_create(&th[i], NULL, many_main, &args[i]);
    }
    for (int i = 0; i < K; i++) { pthread_join(th[i], NULL); total += args[i].pairs; }
    snprintf(out, sizeof out, "{\"peer\": \"baton\", \"workload\": \"many\", \"locks\": %d, \"seconds\": %g, "
             "\"pairs_per_s\": %.1f}", K, o->seconds, total / (now_s() - t0));
    emit(o, out);
    baton_client_close(c);
    free(th);
    free(args);
    return 0;
}

int baton__cli_bench(int argc, char **argv)
{
    static const struct option lo[] = {
        { "workload", required_argument, NULL, 'W' }, { "clients", required_argument, NULL, 'c' },
        { "seconds", required_argument, NULL, 's' }, { "n", required_argument, NULL, 'N' },
        { "rounds", required_argument, NULL, 'r' }, { "fair", no_argument, NULL, 'f' },
        { "layout", required_argument, NULL, 'L' }, { "json", no_argument, NULL, 'j' },
        { "worker", required_argument, NULL, 'X' }, { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    bench_opts o = { NULL, "uncontended", 0, 0, 0, 0, 0, 5.0 };
    const char *worker = NULL, *layout = NULL;
    char uribuf[1024];
    int opt;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "u:W:c:s:N:r:fL:jX:h", lo, NULL)) != -1) {
        switch (opt) {
        case 'u': o.uri = optarg; break;
        case 'W': o.workload = optarg; break;
        case 'c': o.clients = atoi(optarg); break;
        case 's': o.seconds = atof(optarg); break;
        case 'N': o.n = atoi(optarg); break;
        case 'r': o.rounds = atoi(optarg); break;
        case 'f': o.fair = 1; break;
        case 'L': layout = optarg; break;
        case 'j': o.json = 1; break;
        case 'X': worker = optarg; break;
        case 'h':
            printf("usage: baton bench [-u URI] --workload uncontended|contended|handoff|many\n"
                   "                   [--clients C] [--seconds S] [--n N] [--rounds R] [--fair]\n"
                   "                   [--layout redisson|simple] [--json]\n");
            return 0;
        default: return 64;
        }
    }
    if (!o.uri) o.uri = getenv("BATON_URI");
    if (o.seconds <= 0 || o.seconds > 3600 || o.n < 0 || o.clients < 0 || o.clients > 4096 || o.rounds < 0) {
        fprintf(stderr, "baton bench: bad numbers\n");
        return 64;
    }
    if (layout) {
        snprintf(uribuf, sizeof uribuf, "%s%clayout=%s", o.uri ? o.uri : "", o.uri && strchr(o.uri, '?') ? '&' : '?', layout);
        o.uri = uribuf;
    }
    if (worker) {
        if (argc - optind != 3) return 64;
        if (!strcmp(worker, "contended")) return worker_contended(&o, argv[optind], atof(argv[optind + 1]), argv[optind + 2]);
        if (!strcmp(worker, "handoff")) return worker_handoff(&o, argv[optind], atoi(argv[optind + 1]), argv[optind + 2]);
        return 64;
    }
    if (!strcmp(o.workload, "uncontended")) return w_uncontended(&o);
    if (!strcmp(o.workload, "contended")) return w_contended(&o);
    if (!strcmp(o.workload, "handoff")) return w_handoff(&o);
    if (!strcmp(o.workload, "many")) return w_many(&o);
    fprintf(stderr, "baton bench: unknown workload '%s' (uncontended, contended, handoff, many)\n", o.workload);
    return 64;
}
