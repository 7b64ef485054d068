/* baton's event-loop API on a libuv loop (docs/async.md). Header only:
 * include it after baton.h and uv.h.
 *
 *   baton_uv a;
 *   baton_uv_attach(&a, loop, client);   // watch the client's fd
 *   baton_lock_acquire_async(l, -1, on_granted, arg);  // callbacks run on the loop
 *   ...
 *   baton_uv_detach(&a, NULL);           // before baton_client_close
 *
 * The handles live in A (the caller's memory): keep A alive until the close
 * callback given to baton_uv_detach runs (or, with NULL, until the loop has
 * run once more). */
#ifndef BATON_ADAPTERS_LIBUV_H
#define BATON_ADAPTERS_LIBUV_H

#include <baton.h>
#include <uv.h>

typedef struct {
    uv_poll_t poll;
    uv_timer_t timer;
    baton_client *c;
    int closing;
    uv_close_cb on_closed;
} baton_uv;

static inline void baton_uv__on_timer(uv_timer_t *h);

/* Arms the timer with the client's timeout (none when -1). The adapter does
 * it after every process; call it after starting operations too when your
 * engine may have a timeout (today's engines answer -1). */
static inline void baton_uv_rearm(baton_uv *a)
{
    int64_t t;
    if (a->closing) return;
    uv_timer_stop(&a->timer);
    if ((t = baton_client_timeout_ms(a->c)) >= 0) uv_timer_start(&a->timer, baton_uv__on_timer, (uint64_t)t, 0);
}

static inline void baton_uv__on_poll(uv_poll_t *h, int status, int events)
{
    baton_uv *a = (baton_uv *)h->data;
    (void)status;
    (void)events;
    baton_client_process(a->c);
    baton_uv_rearm(a);
}

static inline void baton_uv__on_timer(uv_timer_t *h)
{
    baton_uv *a = (baton_uv *)h->data;
    baton_client_process(a->c);
    baton_uv_rearm(a);
}

/* 0, or a libuv error (negative errno) / the error of baton_client_fd. */
static inline int baton_uv_attach(baton_uv *a, uv_loop_t *loop, baton_client *c)
{
    int fd, rc;
    a->c = c;
    a->closing = 0;
    a->on_closed = NULL;
    if ((fd = baton_client_fd(c)) < 0) return baton_error_last()->code;
    if ((rc = uv_poll_init(loop, &a->poll, fd))) return rc;
    if ((rc = uv_timer_init(loop, &a->timer))) {
        uv_close((uv_handle_t *)&a->poll, NULL);
        return rc;
    }
    a->poll.data = a->timer.data = a;
    return uv_poll_start(&a->poll, UV_READABLE, baton_uv__on_poll);
}

static inline void baton_uv__closed(uv_handle_t *h)
{
    baton_uv *a = (baton_uv *)h->data;
    if (h == (uv_handle_t *)&a->timer && a->on_closed) a->on_closed((uv_handle_t *)&a->poll);
}

/* Stops watching; ON_CLOSED (may be NULL) runs once both handles are closed,
 * with the poll handle (its data is A). Close the client after it, or
 * before: baton_client_close runs the callbacks left itself. */
static inline void baton_uv_detach(baton_uv *a, uv_close_cb on_closed)
{
    a->closing = 1;
    a->on_closed = on_closed;
    uv_poll_stop(&a->poll);
    uv_timer_stop(&a->timer);
    uv_close((uv_handle_t *)&a->poll, NULL);
    uv_close((uv_handle_t *)&a->timer, baton_uv__closed);
}

#endif
