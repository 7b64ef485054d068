/* Owner ids and the waiter (a parking spot for one blocked call). The clock,
 * baton_now_ns, is src/util/clock.c. */
#include "internal.h"
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The thread id and the holder description's host and pid are asked for on
 * every acquire; they are cached (the pid is refreshed in a forked child). */
static _Thread_local unsigned long tl_tid;
static _Thread_local long tl_tid_pid;
static char g_host[72];   /* HOST_NAME_MAX is 64 */
static long g_pid;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void refresh_pid(void) { g_pid = (long)getpid(); }

static void ident_init(void)
{
    if (gethostname(g_host, sizeof g_host - 1)) strcpy(g_host, "?");
    g_host[sizeof g_host - 1] = 0;
    refresh_pid();
    pthread_atfork(NULL, NULL, refresh_pid);
}

unsigned long baton__gettid(void)
{
    pthread_once(&g_once, ident_init);
    if (!tl_tid || tl_tid_pid != g_pid) {
        tl_tid = (unsigned long)syscall(SYS_gettid);
        tl_tid_pid = g_pid;
    }
    return tl_tid;
}

int baton__owner_init(baton_owner *o)
{
    static const char hx[] = "0123456789abcdef";
    size_t got = 0;
    memset(o, 0, sizeof *o);
    o->desc = "";
    while (got < sizeof o->id) {
        ssize_t n = getrandom(o->id + got, sizeof o->id - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return baton_seterr(BATON_EIO, errno, "getrandom: %s", strerror(errno));
        }
        got += (size_t)n;
    }
    for (int i = 0, j = 0; i < 16; i++) {
        o->hex[2 * i] = hx[o->id[i] >> 4];
        o->hex[2 * i + 1] = hx[o->id[i] & 15];
        if (i == 4 || i == 6 || i == 8 || i == 10)
            o->uuid[j++] = '-';
        o->uuid[j++] = hx[o->id[i] >> 4];
        o->uuid[j++] = hx[o->id[i] & 15];
    }
    return 0;
}

/* The descriptions of the threads that acquired, one per (pid, tid), kept
 * for the life of the process: an owner points at its thread's, and a lock
 * may outlive the thread that took it. The table grows by one small entry
 * per thread that ever acquires (tids are reused by the kernel, so
 * a process that keeps making threads reuses entries too). */
typedef struct desc_ent {
    struct desc_ent *next;
    long pid;
    unsigned long tid;
    char desc[];
} desc_ent;
#define DESC_BUCKETS 256
static desc_ent *g_desc[DESC_BUCKETS];
static pthread_mutex_t g_desc_mu = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local const char *tl_desc;
static _Thread_local unsigned long tl_desc_tid;

static const char *thread_desc(unsigned long tid)
{
    char buf[BATON_OWNER_DESC_MAX];
    desc_ent *d;
    size_t k;
    if (tl_desc && tl_desc_tid == tid)
        return tl_desc;
    snprintf(buf, sizeof buf, "%.64s %ld %lu", g_host, g_pid, tid);
    k = (size_t)(tid % DESC_BUCKETS);
    pthread_mutex_lock(&g_desc_mu);
    for (d = g_desc[k]; d; d = d->next)
        if (d->pid == g_pid && d->tid == tid && !strcmp(d->desc, buf))
            break;
    if (!d && (d = malloc(sizeof *d + strlen(buf) + 1))) {
        d->pid = g_pid;
        d->tid = tid;
        memcpy(d->desc, buf, strlen(buf) + 1);
        d->next = g_desc[k];
        g_desc[k] = d;
    }
    pthread_mutex_unlock(&g_desc_mu);
    if (!d)
        return "?";   /* out of memory: the description is only a courtesy */
    tl_desc = d->desc;
    tl_desc_tid = tid;
    return tl_desc;
}

/* Called at acquire time: the thread that acquires is the holder. */
void baton__owner_set_thread(baton_owner *o)
{
    unsigned long tid = baton__gettid();
    if (o->tid == tid && o->desc[0])
        return;   /* the same thread again: the description stands */
    o->tid = tid;
    o->desc = thread_desc(tid);
}

/* The shared parking pairs (internal.h): a power of two, so that a
 * wake-up broadcasts to about 1/WAITER_PAIRS of the threads parked. */
#define WAITER_PAIRS 256
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* CLOCK_MONOTONIC */
} waiter_pair;
static waiter_pair g_pairs[WAITER_PAIRS];
static pthread_once_t g_pairs_once = PTHREAD_ONCE_INIT;
static int g_pairs_err;

static void pairs_init(void)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    for (int i = 0; i < WAITER_PAIRS; i++)
        if (pthread_mutex_init(&g_pairs[i].mu, NULL) || pthread_cond_init(&g_pairs[i].cv, &ca))
            g_pairs_err = 1;
    pthread_condattr_destroy(&ca);
}

static waiter_pair *pair_of(const baton_waiter *w)
{
    /* Fibonacci hashing of the address: handles are malloc'd at regular
     * strides, which a plain modulo would send to a few pairs */
    uint64_t a = (uint64_t)(uintptr_t)w * UINT64_C(0x9E3779B97F4A7C15);
    return &g_pairs[a >> (64 - 8)];
}

int baton__waiter_init(baton_waiter *w)
{
    memset(w, 0, sizeof *w);
    pthread_once(&g_pairs_once, pairs_init);
    return g_pairs_err ? BATON_ENOMEM : 0;
}

void baton__waiter_destroy(baton_waiter *w)
{
    (void)w;   /* nothing of its own: the pair stays for the other waiters */
}

unsigned baton_waiter_gen(baton_waiter *w)
{
    waiter_pair *p = pair_of(w);
    unsigned g;
    pthread_mutex_lock(&p->mu);
    g = w->gen;
    pthread_mutex_unlock(&p->mu);
    return g;
}

int baton_waiter_park(baton_waiter *w, unsigned seen_gen, int64_t deadline_ns)
{
    waiter_pair *p = pair_of(w);
    int rc = 0;
    struct timespec ts;
    if (deadline_ns != INT64_MAX) {
        ts.tv_sec = deadline_ns / 1000000000LL;
        ts.tv_nsec = deadline_ns % 1000000000LL;
    }
    pthread_mutex_lock(&p->mu);
    while (!w->canceled && w->gen == seen_gen) {
        int e = deadline_ns == INT64_MAX ? pthread_cond_wait(&p->cv, &p->mu)
                                         : pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        if (e == ETIMEDOUT)
            break;
    }
    if (w->canceled)
        rc = BATON_ECANCELED;
    pthread_mutex_unlock(&p->mu);
    return rc;
}

/* The notify hook is read under the mutex and called outside it, so the
 * engine's callback may take its own locks in any order with ours. */
static void waiter_bump(baton_waiter *w, int cancel)
{
    waiter_pair *p = pair_of(w);
    void (*fn)(void *);
    void *arg;
    pthread_mutex_lock(&p->mu);
    if (cancel)
        w->canceled = 1;
    w->gen++;
    pthread_cond_broadcast(&p->cv);
    fn = w->notify;
    arg = w->notify_arg;
    pthread_mutex_unlock(&p->mu);
    if (fn)
        fn(arg);
}

void baton_waiter_wake(baton_waiter *w)
{
    waiter_bump(w, 0);
}

void baton_waiter_set_notify(baton_waiter *w, void (*fn)(void *arg), void *arg)
{
    waiter_pair *p = pair_of(w);
    pthread_mutex_lock(&p->mu);
    w->notify = fn;
    w->notify_arg = arg;
    pthread_mutex_unlock(&p->mu);
}

int baton_waiter_canceled(baton_waiter *w)
{
    waiter_pair *p = pair_of(w);
    int c;
    pthread_mutex_lock(&p->mu);
    c = w->canceled;
    pthread_mutex_unlock(&p->mu);
    return c;
}

void baton__waiter_cancel(baton_waiter *w)
{
    waiter_bump(w, 1);
}

void baton__waiter_reset(baton_waiter *w)
{
    waiter_pair *p = pair_of(w);
    pthread_mutex_lock(&p->mu);
    w->canceled = 0;
    pthread_mutex_unlock(&p->mu);
}
