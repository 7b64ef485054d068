/* baton bench --workload memory: client heap per held lock and per waiting
 * lock (glibc's mallinfo2, its per-thread cache off: see bench.c). */
#include "bench.h"

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
