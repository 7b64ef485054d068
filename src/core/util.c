/* Owner ids and the waiter (a parking spot for one blocked call). The clock,
 * baton_now_ns, is src/util/clock.c. */
#include "internal.h"
#include <errno.h>
#include <stdio.h>
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

/* Called at acquire time: the thread that acquires is the holder. */
void baton__owner_set_thread(baton_owner *o)
{
    unsigned long tid = baton__gettid();
    if (o->tid == tid && o->desc[0])
        return;   /* the same thread again: the description stands */
    o->tid = tid;
    snprintf(o->desc, sizeof o->desc, "%.64s %ld %lu", g_host, g_pid, tid);
}

int baton__waiter_init(baton_waiter *w)
{
    pthread_condattr_t ca;
    memset(w, 0, sizeof *w);
    if (pthread_mutex_init(&w->mu, NULL))
        return BATON_ENOMEM;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (pthread_cond_init(&w->cv, &ca)) {
        pthread_condattr_destroy(&ca);
        pthread_mutex_destroy(&w->mu);
        return BATON_ENOMEM;
    }
    pthread_condattr_destroy(&ca);
    return 0;
}

void baton__waiter_destroy(baton_waiter *w)
{
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

unsigned baton_waiter_gen(baton_waiter *w)
{
    unsigned g;
    pthread_mutex_lock(&w->mu);
    g = w->gen;
    pthread_mutex_unlock(&w->mu);
    return g;
}

int baton_waiter_park(baton_waiter *w, unsigned seen_gen, int64_t deadline_ns)
{
    int rc = 0;
    struct timespec ts;
    if (deadline_ns != INT64_MAX) {
        ts.tv_sec = deadline_ns / 1000000000LL;
        ts.tv_nsec = deadline_ns % 1000000000LL;
    }
    pthread_mutex_lock(&w->mu);
    while (!w->canceled && w->gen == seen_gen) {
        int e = deadline_ns == INT64_MAX ? pthread_cond_wait(&w->cv, &w->mu)
                                         : pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        if (e == ETIMEDOUT)
            break;
    }
    if (w->canceled)
        rc = BATON_ECANCELED;
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* The notify hook is read under the mutex and called outside it, so the
 * engine's callback may take its own locks in any order with ours. */
static void waiter_bump(baton_waiter *w, int cancel)
{
    void (*fn)(void *);
    void *arg;
    pthread_mutex_lock(&w->mu);
    if (cancel)
        w->canceled = 1;
    w->gen++;
    pthread_cond_broadcast(&w->cv);
    fn = w->notify;
    arg = w->notify_arg;
    pthread_mutex_unlock(&w->mu);
    if (fn)
        fn(arg);
}

void baton_waiter_wake(baton_waiter *w)
{
    waiter_bump(w, 0);
}

void baton_waiter_set_notify(baton_waiter *w, void (*fn)(void *arg), void *arg)
{
    pthread_mutex_lock(&w->mu);
    w->notify = fn;
    w->notify_arg = arg;
    pthread_mutex_unlock(&w->mu);
}

int baton_waiter_canceled(baton_waiter *w)
{
    int c;
    pthread_mutex_lock(&w->mu);
    c = w->canceled;
    pthread_mutex_unlock(&w->mu);
    return c;
}

void baton__waiter_cancel(baton_waiter *w)
{
    waiter_bump(w, 1);
}

void baton__waiter_reset(baton_waiter *w)
{
    pthread_mutex_lock(&w->mu);
    w->canceled = 0;
    pthread_mutex_unlock(&w->mu);
}
