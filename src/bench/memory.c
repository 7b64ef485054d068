/* baton bench --workload memory: client heap per held lock and per waiting
 * lock (glibc's mallinfo2, its per-thread cache off: see bench.c). */
#include "bench.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- memory: client heap per held lock and per waiting lock ---- */

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

/* N locks PREFIX-TAG0... on C, each acquired, into LS (bumping *PROGRESS
 * when not NULL): 0, or the exit code with the message printed. */
static int lock_all(baton_client *c, const char *prefix, const char *tag, baton_lock **ls, int n,
                    const baton_lock_options *lo, long *progress)
{
    char name[96];
    for (int i = 0; i < n; i++) {
        int lrc;
        snprintf(name, sizeof name, "%s-%s%d", prefix, tag, i);
        if ((lrc = baton_lock_open(&ls[i], c, name, lo)) || (lrc = baton_lock_acquire(ls[i], 5000))) {
            fprintf(stderr, "baton bench: memory: lock %d: %s\n", i, baton_error_last()->message);
            return cli_exit_for(lrc);
        }
        if (progress) __atomic_add_fetch(progress, 1, __ATOMIC_RELAXED);
    }
    return 0;
}

/* Until all KW waiters are in acquire, then until the heap stops moving
 * (subscriptions confirmed, queues joined). */
static void mem_settle(mem_run *m, int Kw)
{
    int64_t dl = now_ns() + 30000000000LL;
    long long prev = -2, cur;
    int still = 0;
    while (__atomic_load_n(&m->entered, __ATOMIC_SEQ_CST) < Kw && !__atomic_load_n(&m->err, __ATOMIC_SEQ_CST) &&
           now_ns() < dl)
        usleep(2000);
    dl = now_ns() + 5000000000LL;
    while (still < 4 && now_ns() < dl && !__atomic_load_n(&m->err, __ATOMIC_SEQ_CST)) {
        usleep(50000);
        cur = heap_bytes();
        still = cur == prev ? still + 1 : 0;
        prev = cur;
    }
}

/* The STARTED waiters cancelled and joined. */
static void mem_stop(mem_run *m, mem_thread *t, int started)
{
    __atomic_store_n(&m->stop, 1, __ATOMIC_SEQ_CST);
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
}

/* The result line: H0..H4 the heap before and after the held locks, before
 * the waiters' threads, once they are parked, once they wait; R3, R4 the RSS
 * at the last two. */
static void mem_emit(bench_opts *o, int K, int Kw, int measurable, const long long h[5], long long r3, long long r4)
{
    char hb[32], wb[32], tb[32], rb[32], out[768];
    fmt_per(hb, sizeof hb, measurable, h[1] - h[0], K);
    fmt_per(wb, sizeof wb, measurable, h[4] - h[3], Kw);
    fmt_per(tb, sizeof tb, measurable, h[3] - h[2], Kw);
    fmt_per(rb, sizeof rb, r3 >= 0 && r4 >= 0, r4 - r3, Kw);
    snprintf(out, sizeof out, "{\"peer\": \"baton\", \"workload\": \"memory\", \"locks\": %d, \"fair\": %s, "
             "\"held_bytes_per_lock\": %s, \"waiting_locks\": %d, \"waiting_bytes_per_lock\": %s, "
             "\"thread_heap_bytes\": %s, \"thread_stack_bytes\": %d, \"waiting_rss_bytes_per_lock\": %s, "
             "\"thread_cache\": \"%s\"}",
             K, o->fair ? "true" : "false", hb, Kw, wb, tb, MEM_STACK_BYTES, rb,
             strstr(getenv("GLIBC_TUNABLES") ? getenv("GLIBC_TUNABLES") : "", "tcache_count=0") ? "off" : "on");
    bench_emit(o, out);
}

int w_memory(bench_opts *o)
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
    char prefix[64];
    long long h[5] = { 0 }, r3 = -1, r4 = -1;

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
    bench_raise_nofile();
    if (!measurable)
        fprintf(stderr, "baton bench: memory: the allocator does not report to mallinfo2 (ASan? not glibc?); "
                "bytes are null\n");
    if (!(held = calloc((size_t)K, sizeof *held)) || !(hw = calloc((size_t)Kw, sizeof *hw)) ||
        !(t = calloc((size_t)Kw, sizeof *t)))
        goto out;
    if ((rc = baton_client_open(&m.c, o->uri, NULL)) || (rc = baton_client_open(&holder, o->uri, NULL))) {
        fprintf(stderr, "baton bench: %s\n", baton_error_last()->message);
        rc = cli_exit_for(rc);
        goto out;
    }
    rc = EX_SOFTWARE;
    progress_start(&pr, "memory", "locks", 0, 0, (long)K + Kw, count_long, &m.progress);

    /* held: K handles on one client, each acquired */
    h[0] = heap_bytes();
    if ((rc = lock_all(m.c, prefix, "h", held, K, &lo, &m.progress))) goto out;
    rc = EX_SOFTWARE;
    h[1] = heap_bytes();
    for (int i = 0; i < K; i++) { baton_lock_free(held[i]); held[i] = NULL; }

    /* waiting: the other client holds Kw locks; a thread each blocks on one */
    if ((rc = lock_all(holder, prefix, "w", hw, Kw, &lo, NULL))) goto out;
    rc = EX_SOFTWARE;
    h[2] = heap_bytes();
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
    h[3] = heap_bytes();   /* the parked threads' own heap (TLS, tcache), not the locks' */
    r3 = rss_bytes();
    pthread_mutex_lock(&m.mu);
    m.go = started < Kw ? -1 : 1;
    pthread_cond_broadcast(&m.cv);
    pthread_mutex_unlock(&m.mu);
    if (started == Kw) {
        mem_settle(&m, Kw);
        h[4] = heap_bytes();
        r4 = rss_bytes();
    }
    mem_stop(&m, t, started);
    progress_stop(&pr);
    if (started < Kw) goto out;
    if (__atomic_load_n(&m.err, __ATOMIC_SEQ_CST)) {
        fprintf(stderr, "baton bench: memory: a waiter failed: %s\n", baton_strerror(m.err));
        rc = cli_exit_for(m.err);
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
    mem_emit(o, K, Kw, measurable, h, r3, r4);
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

/* ---- memory-async: the same through the event-loop API ---- */

/* Counts the completions of async acquires (the callback runs inside
 * baton_client_process on the driving thread). */
typedef struct {
    long done, granted, canceled, failed;
    int first_err;
} amem_count;

static void amem_cb(baton_lock *l, int rc, void *arg)
{
    amem_count *n = arg;
    (void)l;
    n->done++;
    if (rc == 0) n->granted++;
    else if (rc == BATON_ECANCELED) n->canceled++;
    else {
        n->failed++;
        if (!n->first_err) n->first_err = rc;
    }
}

/* Drives C's loop until *DONE reaches WANT or MS pass. */
static void amem_drive(baton_client *c, const long *done, long want, int64_t ms)
{
    int64_t end = now_ns() + ms * 1000000LL;
    while ((!done || *done < want) && now_ns() < end) {
        struct pollfd p = { baton_client_fd(c), POLLIN, 0 };
        int64_t t = baton_client_timeout_ms(c);
        poll(&p, 1, t >= 0 && t < 50 ? (int)t : 50);
        baton_client_process(c);
    }
}

static int count_threads_now(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "Threads:", 8)) n = atoi(line + 8);
    fclose(f);
    return n;
}

/* Opens N locks PREFIX-TAG<i> on C into LS and starts an async acquire of
 * each (WAIT_MS); 0 or the exit code (message printed). */
static int amem_start(baton_client *c, const char *prefix, const char *tag, baton_lock **ls, int n,
                      const baton_lock_options *lo, int64_t wait_ms, amem_count *cnt)
{
    char name[96];
    for (int i = 0; i < n; i++) {
        int lrc;
        snprintf(name, sizeof name, "%s-%s%d", prefix, tag, i);
        if ((lrc = baton_lock_open(&ls[i], c, name, lo)) ||
            (lrc = baton_lock_acquire_async(ls[i], wait_ms, amem_cb, cnt))) {
            fprintf(stderr, "baton bench: memory-async: lock %d: %s\n", i, baton_error_last()->message);
            return cli_exit_for(lrc);
        }
    }
    return 0;
}

/* Holding: the server's requests per second and per lock per renewal
 * period, and the client's CPU per second, over O's --seconds. */
static void amem_hold(bench_opts *o, baton_client *c, int K, uint32_t lease_ms, char *out, size_t n)
{
    baton_client *sc = NULL;
    opstats before = { 0 }, after = { 0 }, acc = { 0 };
    char err[256], per_s[512], per_r[512];
    double u0, s0, u1, s1, t0, secs;
    int ok = !baton_client_open(&sc, o->uri, NULL) && !opstats_read(sc, &before, err, sizeof err);
    /* the same fields, null, where the engine counts nothing (file) */
    opstats_fields(per_s, sizeof per_s, NULL, 0, "second", NULL, "top_per_second");
    opstats_fields(per_r, sizeof per_r, NULL, 0, "lock_renewal", NULL, "top_per_lock_renewal");
    cpu_times(&u0, &s0);
    t0 = wall_s();
    amem_drive(c, NULL, 0, (int64_t)(o->seconds * 1000));
    secs = wall_s() - t0;
    cpu_times(&u1, &s1);
    if (ok && !opstats_read(sc, &after, err, sizeof err) && !opstats_accum(&acc, &before, &after)) {
        /* per second: the window is whole seconds long (rounded) */
        long whole = (long)(secs + 0.5), renewals = (long)((double)K * secs * 1000.0 / (lease_ms / 3));
        opstats_fields(per_s, sizeof per_s, &acc, whole, "second", NULL, "top_per_second");
        opstats_fields(per_r, sizeof per_r, &acc, renewals, "lock_renewal", NULL, "top_per_lock_renewal");
    }
    snprintf(out, n, "\"lease_ms\": %u, \"hold_seconds\": %.1f, %s, %s, \"client_cpu_per_second\": %.3f",
             lease_ms, secs, per_s, per_r, (u1 + s1 - u0 - s0) / secs);
    opstats_free(&before);
    opstats_free(&after);
    opstats_free(&acc);
    baton_client_close(sc);
}

/* The waiting half: the holder takes KW locks, C starts an async acquire of
 * each; bytes per waiting lock (handle included, and the op alone),
 * threads while waiting. 0 or the exit code. */
static int amem_waiting(baton_client *c, baton_client *holder, const char *prefix, int Kw,
                        const baton_lock_options *lo, char *out, size_t n)
{
    baton_lock **hw = calloc((size_t)Kw, sizeof *hw), **ws = calloc((size_t)Kw, sizeof *ws);
    amem_count cnt = { 0 };
    long long w0, w1, w2, r0, r1;
    int rc = EX_SOFTWARE, t0, t1;
    char name[96];
    if (!hw || !ws) goto out;
    if ((rc = lock_all(holder, prefix, "w", hw, Kw, lo, NULL))) goto out;
    rc = EX_SOFTWARE;
    t0 = count_threads_now();
    w0 = heap_bytes();
    r0 = rss_bytes();
    for (int i = 0; i < Kw; i++) {
        snprintf(name, sizeof name, "%s-w%d", prefix, i);
        if (baton_lock_open(&ws[i], c, name, lo)) goto fail;
    }
    w1 = heap_bytes();
    for (int i = 0; i < Kw; i++)
        if (baton_lock_acquire_async(ws[i], -1, amem_cb, &cnt)) goto fail;
    /* until the heap stops moving (subscriptions confirmed) */
    for (long long prev = -2, cur; (cur = heap_bytes()) != prev;) {
        prev = cur;
        amem_drive(c, NULL, 0, 300);
    }
    w2 = heap_bytes();
    r1 = rss_bytes();
    t1 = count_threads_now();
    if (cnt.done) {
        fprintf(stderr, "baton bench: memory-async: %ld of %d waiters completed while the locks were held\n",
                cnt.done, Kw);
        goto out;
    }
    snprintf(out, n, "\"waiting_locks\": %d, \"waiting_bytes_per_lock\": %.1f, \"waiting_op_bytes\": %.1f, "
             "\"waiting_rss_bytes_per_lock\": %.1f, \"threads_before\": %d, \"threads_waiting\": %d",
             Kw, (double)(w2 - w0) / Kw, (double)(w2 - w1) / Kw, (double)(r1 - r0) / Kw, t0, t1);
    for (int i = 0; i < Kw; i++) baton_lock_cancel(ws[i]);
    amem_drive(c, &cnt.done, Kw, 60000);
    rc = cnt.done == Kw && cnt.granted == 0 ? 0 : EX_SOFTWARE;
    if (rc) fprintf(stderr, "baton bench: memory-async: cancel: %ld of %d done, %ld granted\n", cnt.done, Kw, cnt.granted);
    goto out;
fail:
    fprintf(stderr, "baton bench: memory-async: %s\n", baton_error_last()->message);
    rc = EX_SOFTWARE;
out:
    for (int i = 0; ws && i < Kw; i++) baton_lock_free(ws[i]);
    for (int i = 0; hw && i < Kw; i++) baton_lock_free(hw[i]);
    free(ws);
    free(hw);
    return rc;
}

int w_memory_async(bench_opts *o)
{
    int K = o->n > 0 ? o->n : 1000, Kw = o->waiters > 0 ? o->waiters : (K < 10000 ? K : 10000);
    int rc = EX_SOFTWARE, measurable = heap_measurable();
    baton_client *c = NULL, *holder = NULL;
    baton_lock **held = NULL;
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    amem_count cnt = { 0 };
    char prefix[64], hold[1400] = "", wait[512] = "", json[2560];
    long long h0, h1, r0, r1;

    snprintf(prefix, sizeof prefix, "bench-amem-%ld", (long)getpid());
    lo.fair = o->fair;
    if (o->lease_ms) lo.lease_ms = (uint32_t)o->lease_ms;
    bench_raise_nofile();
    if (!measurable)
        fprintf(stderr, "baton bench: memory-async: the allocator does not report to mallinfo2; bytes are wrong\n");
    if (!(held = calloc((size_t)K, sizeof *held))) goto out;
    if ((rc = baton_client_open(&c, o->uri, NULL)) || (rc = baton_client_open(&holder, o->uri, NULL))) {
        fprintf(stderr, "baton bench: %s\n", baton_error_last()->message);
        rc = cli_exit_for(rc);
        goto out;
    }
    /* held: K handles on one client, each granted through the async API */
    h0 = heap_bytes();
    r0 = rss_bytes();
    if ((rc = amem_start(c, prefix, "h", held, K, &lo, 30000, &cnt))) goto out;
    amem_drive(c, &cnt.done, K, 600000);
    h1 = heap_bytes();
    r1 = rss_bytes();
    if (cnt.granted != K) {
        fprintf(stderr, "baton bench: memory-async: %ld of %d granted (%s)\n", cnt.granted, K,
                cnt.first_err ? baton_strerror(cnt.first_err) : "timed out");
        rc = EX_SOFTWARE;
        goto out;
    }
    amem_hold(o, c, K, lo.lease_ms ? lo.lease_ms : 30000, hold, sizeof hold);
    for (int i = 0; i < K; i++) { baton_lock_free(held[i]); held[i] = NULL; }
    if ((rc = amem_waiting(c, holder, prefix, Kw, &lo, wait, sizeof wait))) goto out;
    snprintf(json, sizeof json, "{\"peer\": \"baton\", \"workload\": \"memory-async\", \"locks\": %d, \"fair\": %s, "
             "\"held_bytes_per_lock\": %.1f, \"held_rss_bytes_per_lock\": %.1f, \"rss_bytes\": %lld, %s, %s}",
             K, o->fair ? "true" : "false", (double)(h1 - h0) / K, (double)(r1 - r0) / K, r1, hold, wait);
    bench_emit(o, json);
    rc = 0;
out:
    for (int i = 0; held && i < K; i++) baton_lock_free(held[i]);
    baton_client_close(holder);
    baton_client_close(c);
    free(held);
    return rc;
}
