/* baton bench --workload ratelimit: C clients (threads, a client each) take
 * permits of one rate limiter at N per second for S seconds, each waiting
 * for its next permit as soon as it has one. Reports what was admitted
 * against the configured rate (the burst, which passes at once, subtracted)
 * and the engine's requests per admission (Redis: EVALSHA; the GCRA bound
 * is one), from the engine's own counts where it keeps them. */
#include "bench.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const bench_opts *o;
    const char *name;
    uint32_t rate, burst;
    double end;                 /* wall_s() at which to stop */
    atomic_long admitted;
    atomic_int err;
    pthread_barrier_t start;
} rl_run;

static void *rl_thread(void *arg)
{
    rl_run *x = arg;
    baton_ratelimit_options ro = BATON_RATELIMIT_OPTIONS_INIT;
    baton_client *c = NULL;
    baton_ratelimit *r = NULL;
    int rc;
    ro.permits = x->rate;
    ro.interval_ms = 1000;
    ro.burst = x->burst;
    if ((rc = baton_client_open(&c, x->o->uri, NULL)) || (rc = baton_ratelimit_open(&r, c, x->name, &ro))) {
        fprintf(stderr, "baton bench: ratelimit: %s\n", baton_error_last()->message);
        atomic_store(&x->err, rc);
    }
    pthread_barrier_wait(&x->start);
    while (r && !atomic_load(&x->err)) {
        double left = x->end - wall_s();
        if (left <= 0) break;
        rc = baton_ratelimit_acquire(r, 1, (int64_t)(left * 1000));
        if (rc == BATON_ETIMEDOUT) break;
        if (rc) {
            fprintf(stderr, "baton bench: ratelimit: acquire: %s\n", baton_error_last()->message);
            atomic_store(&x->err, rc);
            break;
        }
        if (wall_s() <= x->end) atomic_fetch_add(&x->admitted, 1);
    }
    baton_ratelimit_free(r);
    baton_client_close(c);
    return NULL;
}

int w_ratelimit(bench_opts *o)
{
    int C = o->clients ? o->clients : 8, rc = 0;
    long rate = o->n ? o->n : 100, want, paced, total;
    opstats before = { NULL, 0 }, after = { NULL, 0 }, acc = { NULL, 0 };
    baton_client *stats = NULL;
    pthread_t *th = calloc((size_t)C, sizeof *th);
    char name[64], err[256], cmds[640], out[1400];
    int have_before = 0, started = 0;
    rl_run x;
    memset(&x, 0, sizeof x);
    if (!th) return EX_SOFTWARE;
    bench_raise_nofile();
    snprintf(name, sizeof name, "bench/ratelimit/%ld", (long)getpid());
    x.o = o;
    x.name = name;
    x.rate = (uint32_t)rate;
    /* 200 ms of slack: a waiter that wakes a little late does not lose its slot */
    x.burst = (uint32_t)(rate / 5 > 0 ? rate / 5 : 1);
    pthread_barrier_init(&x.start, NULL, (unsigned)C + 1);
    if (baton_client_open(&stats, o->uri, NULL) == 0)
        have_before = opstats_read(stats, &before, err, sizeof err) == 0;
    for (; started < C; started++)
        if (pthread_create(&th[started], NULL, rl_thread, &x)) break;
    if (started < C) {
        /* the barrier counts C + 1: the missing threads can never come */
        fprintf(stderr, "baton bench: ratelimit: cannot start %d threads\n", C);
        abort();
    }
    x.end = wall_s() + o->seconds;
    pthread_barrier_wait(&x.start);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&x.start);
    if (atomic_load(&x.err)) {
        rc = cli_exit_for(atomic_load(&x.err));
        goto out;
    }
    total = atomic_load(&x.admitted);
    if (have_before && opstats_read(stats, &after, err, sizeof err) == 0 && opstats_accum(&acc, &before, &after) == 0)
        opstats_fields(cmds, sizeof cmds, &acc, total, "admission", NULL, "commands");
    else
        opstats_fields(cmds, sizeof cmds, NULL, 0, "admission", NULL, "commands");
    want = (long)(rate * o->seconds);
    paced = total - (long)x.burst;
    snprintf(out, sizeof out, "{\"peer\": \"baton\", \"workload\": \"ratelimit\", \"clients\": %d, \"rate_per_s\": %ld, "
             "\"burst\": %u, \"seconds\": %.1f, \"admitted\": %ld, \"paced\": %ld, \"configured\": %ld, "
             "\"error_pct\": %.2f, %s}", C, rate, (unsigned)x.burst, o->seconds, total, paced, want,
             want ? 100.0 * (double)(paced - want) / (double)want : 0.0, cmds);
    bench_emit(o, out);
out:
    opstats_free(&before);
    opstats_free(&after);
    opstats_free(&acc);
    if (stats) baton_client_close(stats);
    free(th);
    return rc;
}
