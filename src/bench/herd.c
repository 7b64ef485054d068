/* baton bench --workload herd: W waiters on one lock, a client each (or,
 * with --shared-client, all threads on one client); the latency of a
 * handoff and the engine operations it costs. */
#include "bench.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* ---- herd: W waiters on one lock, each thread with a client of its own ----
 *
 * Two phases in one run.
 *
 * chain, the handoff itself: thread 0 (the main thread) takes the lock and W
 * waiter threads block in acquire. Once all W are parked and the engine's
 * counts of what it served have settled, they are read and thread 0 releases;
 * each waiter, once granted, releases at once and does not queue again, so
 * the lock runs down the line: W handoffs, each timed from a release to the
 * next grant. The last grantee holds until the counters have settled again
 * and the counts are read a second time, so between the two reads lie exactly W
 * releases that hand over and W grants, and nothing of setting the chain up.
 * The chain runs ceil(R / W) times, set up afresh and counted inside each,
 * after one uncounted chain that warms the clients (scripts, subscriptions).
 *
 * loop, the steady state: W+1 threads loop acquire/release on one name; a
 * releaser waits until someone else was granted before it queues again, so
 * every grant is a handoff and about W threads are always waiting, but a
 * handoff then includes the releaser joining the queue again. The first WARM
 * grants settle the clients; the holder of grant WARM waits until all W
 * others are blocked in acquire and the counts settle, then reads them
 * while holding, and the holder of grant WARM+R reads it again: between the
 * two lie exactly R grants. */

#define HERD_SETTLE_US 100000            /* reads of the counts this far apart must agree */
#define HERD_SETTLE_MAX_NS 10000000000LL /* then read on regardless */
#define HERD_CHAIN_BUDGET_S 60.0         /* no new chain starts after this */
#define HERD_SLOW_W 64                   /* from here, a default-lock chain (a client per waiter) wakes W: */
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
    baton_client *stats;     /* reads the engine's counts (herd_settled) */
    int ops_ok, have_before, have_after;
    opstats before, after;
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

/* The engine's counts (Redis: INFO commandstats, read by h->stats, a client
 * that does nothing else) into OUT once two reads HERD_SETTLE_US apart agree on
 * every counted command (in-flight retries and queue joins have landed);
 * after HERD_SETTLE_MAX_NS the last read. Under h->mu or from the only thread
 * using h->stats. -1 (and no more counts) if the server stops answering. */
static int herd_settled(herd *h, opstats *out)
{
    opstats prev = { NULL, 0 }, cur = { NULL, 0 };
    int64_t dl = now_ns() + HERD_SETTLE_MAX_NS;
    char err[512];
    if (!h->ops_ok) return -1;
    if (opstats_read(h->stats, &prev, err, sizeof err)) goto fail;
    for (;;) {
        usleep(HERD_SETTLE_US);
        if (opstats_read(h->stats, &cur, err, sizeof err)) goto fail;
        if (opstats_same(&prev, &cur) || now_ns() >= dl) break;
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
    h->ops_ok = 0;
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
static int herd_chain(herd *h, herd_thread *t0, long k, int counted, opstats *acc)
{
    opstats before = { NULL, 0 }, after = { NULL, 0 };
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
    if (counted && h->ops_ok) ok = !herd_settled(h, &before);
    __atomic_store_n(&h->t_rel, now_ns(), __ATOMIC_SEQ_CST);
    if ((rc = baton_lock_release(t0->l))) {
        herd_fail(h, rc, "chain: thread 0 release");
        goto fail;
    }
    /* down the line; a default lock wakes a waiter in every client at every release */
    dl = now_ns() + (int64_t)(30 + h->W) * 1000000000;
    while (__atomic_load_n(&h->chain_grants, __ATOMIC_SEQ_CST) < h->W && !herd_stopped(h) && now_ns() < dl)
        usleep(1000);
    if (__atomic_load_n(&h->chain_grants, __ATOMIC_SEQ_CST) < h->W) {
        if (!herd_stopped(h))
            herd_error(h, EX_SOFTWARE, "chain %ld stalled: %ld of %ld grants in %ld s", k,
                       __atomic_load_n(&h->chain_grants, __ATOMIC_SEQ_CST), h->W, 30 + h->W);
        goto fail;
    }
    if (ok && !herd_settled(h, &after) && opstats_accum(acc, &before, &after)) {
        fprintf(stderr, "baton bench: no commands per handoff: out of memory\n");
        h->ops_ok = 0;
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

/* T[0..N)'s clients and locks on NAME: a client each, or (--shared-client)
 * T[0]'s for all, a lock handle per thread: what one process with W threads
 * waiting on one name does. 0, or the error (said on stderr); what was
 * opened stays in T for the caller to free. */
static int herd_open(const bench_opts *o, const char *name, herd_thread *t, int n)
{
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    int rc;
    lo.fair = o->fair;
    for (int i = 0; i < n; i++) {
        if (o->shared_client && i > 0) {
            t[i].c = t[0].c;
            if ((rc = baton_lock_open(&t[i].l, t[i].c, name, &lo))) {
                fprintf(stderr, "baton bench: %s\n", baton_error_last()->message);
                return rc;
            }
            continue;
        }
        if ((rc = bench_open_lock(o, name, &t[i].c, &t[i].l))) {
            struct rlimit rl;
            long native = baton_error_last()->native;
            if ((native == EMFILE || native == ENFILE) && !getrlimit(RLIMIT_NOFILE, &rl))
                fprintf(stderr, "baton bench: herd: %d clients need more than %lld open files\n", n,
                        (long long)rl.rlim_cur);
            return rc;
        }
    }
    return 0;
}

int w_herd(bench_opts *o)
{
    herd h;
    herd_thread *t = NULL;
    progress pr;
    opstats cacc = { NULL, 0 }, lacc = { NULL, 0 }, probe = { NULL, 0 };
    char name[64], err[512], ccmds[640], lcmds[640], out[2048];
    double *samples = NULL, *lsamples = NULL, t0;
    size_t ns = 0, nl = 0;
    long planned, chains = 0;
    int n, started, rc = EX_SOFTWARE, orc, counts;

    memset(&h, 0, sizeof h);
    memset(&pr, 0, sizeof pr);
    pthread_mutex_init(&h.mu, NULL);
    pthread_mutex_init(&h.cmu, NULL);
    pthread_cond_init(&h.ccv, NULL);
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
    bench_raise_nofile();
    if (!(h.lat = calloc((size_t)h.R, sizeof *h.lat)) || !(h.have = calloc((size_t)h.R, 1)) ||
        !(h.clat = calloc((size_t)(planned + 1) * (size_t)h.W, sizeof *h.clat)) ||
        !(t = calloc((size_t)n, sizeof *t)) || !(samples = calloc((size_t)planned * (size_t)h.W + 1, sizeof *samples)) ||
        !(lsamples = calloc((size_t)h.R + 1, sizeof *lsamples)))
        goto out;
    for (int i = 0; i < n; i++) {
        t[i].h = &h;
        t[i].me = i;
    }
    if ((orc = herd_open(o, name, t, n))) {
        rc = cli_exit_for(orc);
        goto out;
    }
    /* The engine's counts, through a client of their own: its one connection
     * reads them and does nothing else. Engines that keep none: nulls. */
    if ((orc = baton_client_open(&h.stats, o->uri, NULL)))
        fprintf(stderr, "baton bench: no commands per handoff: %s\n", baton_error_last()->message);
    else if (!(orc = opstats_read(h.stats, &probe, err, sizeof err)))
        h.ops_ok = 1;
    else if (orc != BATON_ENOTSUP)
        fprintf(stderr, "baton bench: no commands per handoff: %s\n", err);
    opstats_free(&probe);
    counts = h.ops_ok;
    progress_start(&pr, "herd", "grants", 0, 0, (planned + 1) * h.W + h.warm + h.R + 1, count_long, &h.progress);

    /* chain: thread 0 is this thread; the waiters are t[1..W] */
    started = herd_threads_start(t, 1, n, chain_main);
    if (started < n - 1) __atomic_store_n(&h.stop, 1, __ATOMIC_SEQ_CST);
    t0 = now_s();
    if (started == n - 1 && !herd_chain(&h, &t[0], 1, 0, NULL))
        for (chains = 0; chains < planned && now_s() - t0 < HERD_CHAIN_BUDGET_S; chains++)
            if (herd_chain(&h, &t[0], chains + 2, 1, &cacc)) break;
    counts = counts && h.ops_ok;
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
        rc = cli_exit_for(h.err);
        goto out;
    }
    /* the chains' samples, chain by chain (the warm-up chain is slot 0) */
    for (long c = 1; c <= chains; c++)
        for (long g = 0; g < h.W; g++) samples[ns++] = h.clat[c * h.W + g];
    for (long i = 0; i < h.R; i++)
        if (h.have[i]) lsamples[nl++] = h.lat[i];
    qsort(samples, ns, sizeof *samples, cmp_d);
    qsort(lsamples, nl, sizeof *lsamples, cmp_d);
    opstats_fields(ccmds, sizeof ccmds, counts ? &cacc : NULL, chains * h.W, "handoff", "pings", "commands");
    if (h.have_before && h.have_after && opstats_accum(&lacc, &h.before, &h.after) == 0)
        opstats_fields(lcmds, sizeof lcmds, &lacc, h.R, "grant_loop", NULL, "commands_loop");
    else
        opstats_fields(lcmds, sizeof lcmds, NULL, 0, "grant_loop", NULL, "commands_loop");
    snprintf(out, sizeof out, "{\"peer\": \"baton\", \"workload\": \"herd\", \"waiters\": %ld, \"fair\": %s, "
             "\"shared_client\": %s, "
             "\"rounds\": %ld, \"chains\": %ld, \"samples\": %zu, %s, \"handoff_p50_us\": %.1f, \"handoff_p99_us\": %.1f, "
             "\"loop_samples\": %zu, %s, \"loop_handoff_p50_us\": %.1f, \"loop_handoff_p99_us\": %.1f}",
             h.W, o->fair ? "true" : "false", o->shared_client ? "true" : "false", h.R, chains, ns, ccmds,
             pct(samples, ns, 0.5) * 1e6,
             pct(samples, ns, 0.99) * 1e6, nl, lcmds, pct(lsamples, nl, 0.5) * 1e6, pct(lsamples, nl, 0.99) * 1e6);
    bench_emit(o, out);
    {
        char what[96];
        snprintf(what, sizeof what, "release to the next grant, chains of %ld waiters", h.W);
        rc = svg_cdf(o, what, samples, ns);
    }
    if (!rc && !ns) rc = 1;
out:
    progress_stop(&pr);
    if (t) {
        /* every lock before its client (shared: t[0]'s) */
        for (int i = 0; i < n; i++) baton_lock_free(t[i].l);
        for (int i = 0; i < n; i++)
            if (!o->shared_client || i == 0) baton_client_close(t[i].c);
    }
    baton_client_close(h.stats);
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
