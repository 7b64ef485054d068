/* baton bench: the progress line, on a terminal only, for runs over a second. */
#include "bench.h"

#include <string.h>
#include <unistd.h>

long count_long(void *p)
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
void progress_start(progress *pr, const char *label, const char *unit, double t0, double seconds,
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

void progress_stop(progress *pr)
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
