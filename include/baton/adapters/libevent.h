/* baton's event-loop API on a libevent 2 event_base (docs/async.md). Header
 * only: include it after baton.h and event2/event.h.
 *
 *   baton_event *a;
 *   baton_event_attach(&a, base, client);   // watch the client's fd
 *   baton_lock_acquire_async(l, -1, on_granted, arg);  // callbacks run in the loop
 *   ...
 *   baton_event_detach(a);                  // before baton_client_close */
#ifndef BATON_ADAPTERS_LIBEVENT_H
#define BATON_ADAPTERS_LIBEVENT_H

#include <baton.h>
#include <event2/event.h>
#include <stdlib.h>

typedef struct {
    struct event *rd;      /* the client's fd, persistent */
    struct event *tm;      /* baton_client_timeout_ms */
    baton_client *c;
} baton_event;

/* Arms the timer with the client's timeout (none when -1). Done after every
 * process; call it after starting operations too when your engine may have
 * a timeout (today's engines answer -1). */
static inline void baton_event_rearm(baton_event *a)
{
    int64_t t = baton_client_timeout_ms(a->c);
    event_del(a->tm);
    if (t >= 0) {
        struct timeval tv;
        tv.tv_sec = (time_t)(t / 1000);
        tv.tv_usec = (suseconds_t)(t % 1000) * 1000;
        event_add(a->tm, &tv);
    }
}

static inline void baton_event__cb(evutil_socket_t fd, short what, void *arg)
{
    baton_event *a = (baton_event *)arg;
    (void)fd;
    (void)what;
    baton_client_process(a->c);
    baton_event_rearm(a);
}

/* 0, BATON_ENOMEM, or the error of baton_client_fd. */
static inline int baton_event_attach(baton_event **out, struct event_base *base, baton_client *c)
{
    baton_event *a;
    int fd;
    *out = NULL;
    if ((fd = baton_client_fd(c)) < 0) return baton_error_last()->code;
    if (!(a = (baton_event *)calloc(1, sizeof *a))) return BATON_ENOMEM;
    a->c = c;
    a->rd = event_new(base, fd, EV_READ | EV_PERSIST, baton_event__cb, a);
    a->tm = evtimer_new(base, baton_event__cb, a);
    if (!a->rd || !a->tm || event_add(a->rd, NULL)) {
        if (a->rd) event_free(a->rd);
        if (a->tm) event_free(a->tm);
        free(a);
        return BATON_ENOMEM;
    }
    *out = a;
    return 0;
}

/* Stops watching and frees A; NULL is a no-op. */
static inline void baton_event_detach(baton_event *a)
{
    if (!a) return;
    event_free(a->rd);
    event_free(a->tm);
    free(a);
}

#endif
