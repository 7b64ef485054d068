/* baton bench: the simple workloads. uncontended and many run in this
 * process; contended and handoff in worker processes (procs.c), each worker
 * a client of its own. herd.c and memory.c hold the other two. */
#include "bench.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- uncontended: one client, N pairs on its own lock ---- */

int w_uncontended(bench_opts *o)
{
    baton_client *c = NULL;
    baton_lock *l = NULL;
    char name[64], out[640];
    double *lat = NULL, t0, dt, u0, s0, u1, s1;
    int n = o->n > 0 ? o->n : 10000, warm = n / 10 < 200 ? n / 10 : 200, rc;
    long done = 0;
    progress pr;
    snprintf(name, sizeof name, "bench-u%ld", (long)getpid());
    if ((rc = bench_open_lock(o, name, &c, &l))) return cli_exit_for(rc);
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
            rc = cli_exit_for(rc);
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
    bench_emit(o, out);
    rc = svg_cdf(o, "acquire latency", lat, (size_t)n);
out:
    free(lat);
    baton_lock_free(l);
    baton_client_close(c);
    return rc;
}


/* ---- contended: C worker processes, a non-atomic file counter inside ---- */

/* DIR/shm of the contended workers; DIR/counter is the counter. */
typedef struct {
    double start_at;   /* wall clock: every worker starts then */
} contended_shm;

int worker_contended(const bench_opts *o, const char *dir, int idx)
{
    baton_client *c = NULL;
    baton_lock *l = NULL;
    size_t cap = 1 << 16, nw = 0;
    double *waits = malloc(cap * sizeof *waits), start_at, end;
    contended_shm *s = procs_worker_shm(dir, sizeof *s);
    char counter[64];
    long done = 0;
    int rc = EX_SOFTWARE;
    if (!waits || !s) goto out;
    start_at = s->start_at;
    snprintf(counter, sizeof counter, "%s/counter", dir);
    if ((rc = bench_open_lock(o, "bench-contended", &c, &l))) { rc = cli_exit_for(rc); goto out; }
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
    rc = procs_report(dir, idx, done, waits, nw);
out:
    free(waits);
    procs_worker_unmap(s, sizeof *s);
    baton_lock_free(l);
    baton_client_close(c);
    return rc;
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

int w_contended(bench_opts *o)
{
    int C = o->clients > 0 ? o->clients : 8, rc;
    contended_shm init = { wall_s() + 1.0 };
    char counter[64], out[768];
    long final = -1;
    procs p;
    procs_result r;
    progress pr;
    FILE *f;
    memset(&r, 0, sizeof r);
    if ((rc = procs_open(&p, &init, sizeof init))) goto out;
    procs_path(&p, "counter", counter, sizeof counter);
    if (!(f = fopen(counter, "w"))) { rc = EX_SOFTWARE; goto out; }
    fputs("0", f);
    fclose(f);
    if ((rc = procs_start(&p, o, "contended", C))) goto out;
    progress_start(&pr, "contended", "grants", now_s() + (init.start_at - wall_s()), o->seconds, 0, count_file, counter);
    rc = procs_wait(&p, &r);
    progress_stop(&pr);
    if (rc) goto out;
    if ((f = fopen(counter, "r"))) { if (fscanf(f, "%ld", &final) != 1) final = -1; fclose(f); }
    if (r.samples) qsort(r.samples, r.nsamples, sizeof *r.samples, cmp_d);
    snprintf(out, sizeof out, "{\"peer\": \"baton\", \"workload\": \"contended\", \"clients\": %d, \"seconds\": %g, "
             "\"handoffs_per_s\": %.1f, \"counter_ok\": %s, \"wait_p50_ms\": %.2f, \"wait_p99_ms\": %.2f, "
             "\"min_per_client\": %ld, \"max_per_client\": %ld, \"fair\": %s}",
             C, o->seconds, r.total / o->seconds, final == r.total ? "true" : "false", pct(r.samples, r.nsamples, 0.5) * 1e3,
             pct(r.samples, r.nsamples, 0.99) * 1e3, r.min, r.max, o->fair ? "true" : "false");
    bench_emit(o, out);
    rc = svg_cdf(o, "wait for the lock", r.samples, r.nsamples);
    if (!rc && final != r.total) rc = 1;
out:
    procs_close(&p);
    free(r.samples);
    return rc;
}

/* ---- handoff: release → the blocked waiter's grant, across two processes ---- */

/* DIR/shm of the two handoff workers. */
typedef struct {
    volatile double t_rel;
    volatile int grants;   /* the last owner, -1 none */
    volatile int ready;
    long count;            /* grants so far (atomic), for the progress line */
} handoff_shm;

int worker_handoff(const bench_opts *o, const char *dir, int me)
{
    baton_client *c = NULL;
    baton_lock *l = NULL;
    int R = o->rounds > 0 ? o->rounds : 200, n = 0, rc = EX_SOFTWARE;
    handoff_shm *s = procs_worker_shm(dir, sizeof *s);
    double *lat = malloc(sizeof *lat * (size_t)R), dl;
    if (!s || !lat) goto out;
    if ((rc = bench_open_lock(o, "bench-handoff", &c, &l))) { rc = cli_exit_for(rc); goto out; }
    rc = EX_SOFTWARE;
    __atomic_fetch_add(&s->ready, 1, __ATOMIC_SEQ_CST);
    /* the other one may have failed to open its lock */
    for (dl = now_s() + 30.0; __atomic_load_n(&s->ready, __ATOMIC_SEQ_CST) < 2; usleep(100))
        if (now_s() > dl) {
            fprintf(stderr, "baton bench: handoff: the other worker did not start in 30 s\n");
            goto out;
        }
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
        dl = now_s() + 2.0;
        while (__atomic_load_n(&s->grants, __ATOMIC_SEQ_CST) == me && now_s() < dl) usleep(200);
    }
    rc = procs_report(dir, me, n, lat, (size_t)n);
out:
    free(lat);
    procs_worker_unmap(s, sizeof *s);
    baton_lock_free(l);
    baton_client_close(c);
    return rc;
}

static long count_handoff(void *p)
{
    return __atomic_load_n(&((handoff_shm *)p)->count, __ATOMIC_RELAXED);
}

int w_handoff(bench_opts *o)
{
    handoff_shm init = { 0, -1, 0, 0 };
    int R = o->rounds > 0 ? o->rounds : 200, rc;
    char out[512];
    procs p;
    procs_result r;
    progress pr;
    memset(&r, 0, sizeof r);
    if ((rc = procs_open(&p, &init, sizeof init)) || (rc = procs_start(&p, o, "handoff", 2))) goto out;
    progress_start(&pr, "handoff", "grants", 0, 0, 2L * R, count_handoff, p.shm);
    rc = procs_wait(&p, &r);
    progress_stop(&pr);
    if (rc) goto out;
    if (r.samples) qsort(r.samples, r.nsamples, sizeof *r.samples, cmp_d);
    snprintf(out, sizeof out, "{\"peer\": \"baton\", \"workload\": \"handoff\", \"rounds\": %d, \"samples\": %zu, "
             "\"handoff_p50_us\": %.1f, \"handoff_p99_us\": %.1f, \"fair\": %s}",
             R, r.nsamples, pct(r.samples, r.nsamples, 0.5) * 1e6, pct(r.samples, r.nsamples, 0.99) * 1e6,
             o->fair ? "true" : "false");
    bench_emit(o, out);
    rc = svg_cdf(o, "release to the waiter's grant", r.samples, r.nsamples);
    if (!rc && !r.nsamples) rc = 1;
out:
    procs_close(&p);
    free(r.samples);
    return rc;
}

/* ---- many: K threads, K locks, one client ---- */

typedef struct {
    baton_client *c;
    int idx, fair;
    double end;
    long pairs;   /* atomic: read by the progress line */
    int err;      /* the failure that stopped this thread, 0 if none */
    int *said;    /* atomic, shared: the first failure is said on stderr */
} many_arg;

static void many_fail(many_arg *a, int rc, const char *what)
{
    a->err = rc;
    if (!__atomic_exchange_n(a->said, 1, __ATOMIC_SEQ_CST))
        fprintf(stderr, "baton bench: many: lock %d: %s%s\n", a->idx, what, baton_error_last()->message);
}

static void *many_main(void *p)
{
    many_arg *a = p;
    baton_lock *l;
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    char name[64];
    int rc;
    lo.fair = a->fair;
    snprintf(name, sizeof name, "bench-many-%ld-%d", (long)getpid(), a->idx);
    if ((rc = baton_lock_open(&l, a->c, name, &lo))) {
        many_fail(a, rc, "");
        return NULL;
    }
    while (now_s() < a->end) {
        if ((rc = baton_lock_acquire(l, -1))) {
            many_fail(a, rc, "acquire: ");
            break;
        }
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

int w_many(bench_opts *o)
{
    int K = o->clients > 0 ? o->clients : 50, started = 0, rc, said = 0;
    baton_client *c = NULL;
    pthread_t *th = calloc((size_t)K, sizeof *th);
    many_arg *args = calloc((size_t)K, sizeof *args);
    many_count_ctx mc = { args, 0 };
    progress pr;
    double t0, u0, s0, u1, s1;
    long total = 0;
    char out[320];
    if (o->async) {
        free(th);
        free(args);
        return w_many_async(o);
    }
    if (!th || !args) { rc = EX_SOFTWARE; goto out; }
    if ((rc = baton_client_open(&c, o->uri, NULL))) {
        fprintf(stderr, "baton bench: %s\n", baton_error_last()->message);
        rc = cli_exit_for(rc);
        goto out;
    }
    cpu_times(&u0, &s0);
    t0 = now_s();
    progress_start(&pr, "many", "pairs", t0, o->seconds, 0, count_many, &mc);
    for (int i = 0; i < K; i++) {
        args[i] = (many_arg){ c, i, o->fair, t0 + o->seconds, 0, 0, &said };
        if (pthread_create(&th[i], NULL, many_main, &args[i])) break;
        mc.n = ++started;
    }
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        total += args[i].pairs;
        if (args[i].err && !rc) rc = cli_exit_for(args[i].err);   /* no rate of a run that stopped short */
    }
    cpu_times(&u1, &s1);
    progress_stop(&pr);
    if (rc) goto out;
    if (started < K) {
        fprintf(stderr, "baton bench: many: started %d of %d threads\n", started, K);
        rc = EX_SOFTWARE;
        goto out;
    }
    snprintf(out, sizeof out, "{\"peer\": \"baton\", \"workload\": \"many\", \"locks\": %d, \"seconds\": %g, "
             "\"pairs_per_s\": %.1f, \"cpu_us_per_pair\": %.2f}", K, o->seconds, total / (now_s() - t0),
             ((u1 - u0) + (s1 - s0)) / (total ? total : 1) * 1e6);
    bench_emit(o, out);
out:
    baton_client_close(c);
    free(th);
    free(args);
    return rc;
}
