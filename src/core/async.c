/* The event-loop API (include/baton.h, "event-loop API"; docs/async.md).
 *
 * Every operation is an op queued on its client's async context. No engine
 * has a native table yet (backend.h's `async`), so every op takes the
 * fallback: a bounded pool of workers runs the blocking call, and its result
 * waits on the done list until the caller's loop runs baton_client_process
 * (woken through the eventfd). The pool is bounded: past ASYNC_MAX_WORKERS
 * ops wait in the queue, and while others wait, a worker gives a non-fair
 * acquire ASYNC_SLICE_MS at a time and then puts it back at the tail, so
 * every queued acquire is tried again within (queued / workers) slices and
 * none starves behind a long wait.
 *
 * Locks: ctx->mu guards the queue, the done list, each op's state and every
 * lock's aop pointer; it is never held across I/O or a callback. Order:
 * gate->mu may be held while taking ctx->mu, never the other way round. */
#include "lock.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define ASYNC_MAX_WORKERS 32
#define ASYNC_SLICE_MS 100

enum { AOP_QUEUED, AOP_RUNNING, AOP_DONE };
enum { AOP_ACQUIRE, AOP_RELEASE };

struct baton__aop {
    struct baton__aop *next, *prev;
    baton_lock *l;
    baton_async_cb cb;
    void *arg;
    int64_t deadline_ns;        /* 0 = one try, INT64_MAX = forever */
    int kind;
    int state;                  /* AOP_*; guarded by ctx->mu */
    int orphan;                 /* its lock is being freed: finish, do not requeue */
    int canceled;               /* baton_lock_cancel came while it ran */
    int rc;
};

typedef struct {
    baton__aop *head, *tail;
} aop_list;

struct baton__async {
    pthread_mutex_t mu;
    pthread_cond_t work;        /* the queue got an op, or the context closes */
    pthread_cond_t stopped;     /* an op stopped running */
    int efd;
    aop_list queue, done;
    pthread_t workers[ASYNC_MAX_WORKERS];
    int nworkers, nidle;
    int closed;
};

static void list_push(aop_list *q, baton__aop *op)
{
    op->next = NULL;
    op->prev = q->tail;
    if (q->tail) q->tail->next = op;
    else q->head = op;
    q->tail = op;
}

static void list_unlink(aop_list *q, baton__aop *op)
{
    if (op->prev) op->prev->next = op->next;
    else q->head = op->next;
    if (op->next) op->next->prev = op->prev;
    else q->tail = op->prev;
    op->next = op->prev = NULL;
}

/* ctx->mu held: OP is done with RC; the loop learns it through the fd. */
static void finish(baton__async *a, baton__aop *op, int rc)
{
    uint64_t one = 1;
    op->rc = rc;
    op->state = AOP_DONE;
    list_push(&a->done, op);
    /* A full counter (2^64 - 2 wakes unread) still leaves the fd readable. */
    if (write(a->efd, &one, sizeof one) < 0 && errno != EAGAIN) { /* readable already */ }
}

/* The context of C, made on first use. */
static int async_get(baton_client *c, baton__async **out)
{
    baton__async *a;
    int rc = 0;
    pthread_mutex_lock(&c->gate->mu);
    if (c->gate->closing) {
        rc = baton_seterr(BATON_ECANCELED, 0, "the client is closed or closing");
        goto out;
    }
    if ((a = c->async)) goto out;
    if (!(a = calloc(1, sizeof *a))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    if ((a->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        rc = baton_seterr(BATON_EIO, errno, "eventfd: %s", strerror(errno));
        free(a);
        goto out;
    }
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->work, NULL);
    pthread_cond_init(&a->stopped, NULL);
    c->async = a;
out:
    pthread_mutex_unlock(&c->gate->mu);
    *out = rc ? NULL : c->async;
    return rc;
}

/* The part of an acquire's wait a worker gives it now: all of it when no
 * other op waits for a worker, else a slice (fair locks never: leaving a
 * fair queue loses the place in it). *sliced = 1 when less than all. */
static int64_t acquire_wait_ms(const baton__aop *op, int others, int *sliced)
{
    int64_t left;
    *sliced = 0;
    if (op->deadline_ns == 0) return 0;
    if (op->deadline_ns == INT64_MAX) left = -1;
    else {
        left = (op->deadline_ns - baton_now_ns()) / 1000000LL;
        if (left <= 0) return 0;
    }
    if (others && !op->l->opts.fair && (left < 0 || left > ASYNC_SLICE_MS)) {
        *sliced = 1;
        return ASYNC_SLICE_MS;
    }
    return left;
}

/* A worker runs OP's blocking call. 1 when a sliced acquire should go back
 * to the queue (not granted, time left). */
static int run_op(baton__aop *op, int others)
{
    baton_lock *l = op->l;
    int rc, sliced = 0;
    if ((rc = baton__member_enter(&l->cm))) {
        op->rc = rc;
        return 0;
    }
    if (op->kind == AOP_RELEASE) {
        rc = baton__lock_release(l);
    } else {
        rc = baton__lock_acquire(l, acquire_wait_ms(op, others, &sliced));
        if (rc == BATON_ETIMEDOUT || rc == BATON_ELOCKED) {
            if (sliced && (op->deadline_ns == INT64_MAX || baton_now_ns() < op->deadline_ns)) {
                baton__member_leave(&l->cm);
                return 1;
            }
            /* the whole wait's answer, not the slice's */
            rc = op->deadline_ns == 0 ? baton_seterr(BATON_ELOCKED, 0, "lock '%s' is held", l->name)
                                      : baton_seterr(BATON_ETIMEDOUT, 0, "lock '%s': wait timed out", l->name);
        }
    }
    baton__member_leave(&l->cm);
    op->rc = rc;
    return 0;
}

static void *worker_main(void *arg)
{
    baton__async *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        baton__aop *op;
        int again;
        while (!a->queue.head && !a->closed) {
            a->nidle++;
            pthread_cond_wait(&a->work, &a->mu);
            a->nidle--;
        }
        if (!(op = a->queue.head)) break;   /* closed, nothing left */
        list_unlink(&a->queue, op);
        op->state = AOP_RUNNING;
        pthread_mutex_unlock(&a->mu);
        again = run_op(op, 1);
        pthread_mutex_lock(&a->mu);
        if (op->canceled) {
            /* the cancel was this op's: a slice that timed out just before
             * it must not requeue it, and none of it is left for the next */
            if (again) op->rc = BATON_ECANCELED, again = 0;
            baton__waiter_reset(&op->l->waiter);
        }
        if (again && !a->closed && !op->orphan) {
            op->state = AOP_QUEUED;
            list_push(&a->queue, op);
        } else {
            finish(a, op, again ? BATON_ECANCELED : op->rc);
        }
        pthread_cond_broadcast(&a->stopped);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* ctx->mu held: a worker for a newly queued op, unless one is idle or the
 * pool is full (the op then waits for a worker). */
static int spawn_worker(baton__async *a)
{
    pthread_attr_t at;
    int e;
    if (a->nidle > 0 || a->nworkers >= ASYNC_MAX_WORKERS) {
        pthread_cond_signal(&a->work);
        return 0;
    }
    pthread_attr_init(&at);
    /* the blocking calls need little stack; 10,000 waiting ops share the pool anyway */
    pthread_attr_setstacksize(&at, 256 * 1024);
    e = pthread_create(&a->workers[a->nworkers], &at, worker_main, a);
    pthread_attr_destroy(&at);
    if (e) {
        if (a->nworkers > 0) return 0;   /* the pool we have serves it */
        return baton_seterr(BATON_ENOMEM, e, "cannot start an async worker: %s", strerror(e));
    }
    a->nworkers++;
    return 0;
}

static int start(baton_lock *l, int kind, int64_t wait_ms, baton_async_cb cb, void *arg)
{
    baton__async *a;
    baton__aop *op;
    int rc, held;

    if (!l || !cb) return baton_seterr(BATON_EINVAL, 0, "baton_lock_*_async: NULL argument");
    if ((rc = baton__member_enter(&l->cm))) return rc;
    if ((rc = async_get(l->c, &a))) goto out;
    if (kind == AOP_ACQUIRE) {
        pthread_mutex_lock(&l->smu);
        held = l->state == LOCK_HELD;
        pthread_mutex_unlock(&l->smu);
        if (held) {
            rc = baton_seterr(BATON_EINVAL, 0, "lock '%s' is held: release it first "
                              "(async acquires are not reentrant)", l->name);
            goto out;
        }
    }
    if (!(op = calloc(1, sizeof *op))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    op->l = l;
    op->cb = cb;
    op->arg = arg;
    op->kind = kind;
    baton__wait_deadline_ns(wait_ms, &op->deadline_ns);
    pthread_mutex_lock(&a->mu);
    if (a->closed) rc = baton_seterr(BATON_ECANCELED, 0, "the client is closing");
    else if (l->aop) rc = baton_seterr(BATON_EINVAL, 0, "lock '%s' has an operation in flight", l->name);
    else if (!(rc = spawn_worker(a))) {
        op->state = AOP_QUEUED;
        l->aop = op;
        /* a release is quick and may be what the queued acquires wait for */
        if (kind == AOP_RELEASE && a->queue.head) {
            op->next = a->queue.head;
            a->queue.head->prev = op;
            a->queue.head = op;
        } else {
            list_push(&a->queue, op);
        }
        pthread_cond_signal(&a->work);
    }
    pthread_mutex_unlock(&a->mu);
    if (rc) free(op);
out:
    baton__member_leave(&l->cm);
    return rc;
}

int baton_lock_acquire_async(baton_lock *l, int64_t wait_ms, baton_async_cb cb, void *arg)
{
    return start(l, AOP_ACQUIRE, wait_ms, cb, arg);
}

int baton_lock_release_async(baton_lock *l, baton_async_cb cb, void *arg)
{
    return start(l, AOP_RELEASE, 0, cb, arg);
}

int baton_client_fd(baton_client *c)
{
    baton__async *a;
    int rc;
    if (!c) return baton_seterr(BATON_EINVAL, 0, "baton_client_fd: NULL client");
    if ((rc = async_get(c, &a))) return -1;
    return a->efd;
}

int64_t baton_client_timeout_ms(baton_client *c)
{
    (void)c;   /* every completion today comes through the fd */
    return -1;
}

/* Runs the callbacks of up to MAX done ops (all when FORCE_RC is nonzero,
 * each then given FORCE_RC). One op at a time is taken off the list, so a
 * callback that frees another op's lock finds that op still listed (and
 * drops it) instead of having it called afterwards. */
static int deliver(baton__async *a, int max, int force_rc)
{
    int n = 0;
    while (force_rc || n < max) {
        baton__aop *op;
        pthread_mutex_lock(&a->mu);
        if ((op = a->done.head)) {
            list_unlink(&a->done, op);
            op->l->aop = NULL;
        }
        pthread_mutex_unlock(&a->mu);
        if (!op) break;
        op->cb(op->l, force_rc ? force_rc : op->rc, op->arg);
        free(op);
        n++;
    }
    return n;
}

int baton_client_process(baton_client *c)
{
    baton__async *a;
    baton__aop *op;
    uint64_t v;
    int n = 0, rc;
    if (!c) return baton_seterr(BATON_EINVAL, 0, "baton_client_process: NULL client");
    if ((rc = async_get(c, &a))) return rc;
    pthread_mutex_lock(&a->mu);
    /* Read before counting: a completion after this read writes the fd
     * again, so it is either counted now or seen on the next wake. */
    if (read(a->efd, &v, sizeof v) < 0 && errno != EAGAIN) { /* nothing to read */ }
    for (op = a->done.head; op; op = op->next) n++;
    pthread_mutex_unlock(&a->mu);
    return deliver(a, n, 0);
}

/* baton_lock_cancel: a queued acquire completes now (no worker may be free
 * for it for a while); one running is woken through the waiter, here under
 * ctx->mu so that the worker's end (which consumes it) comes after. 1 when
 * this handled the cancel. */
int baton__async_cancel(baton_lock *l)
{
    baton__gate *g = l->cm.gate;
    baton__async *a;
    int hit = 0;
    pthread_mutex_lock(&g->mu);
    if (!g->closing && l->cm.mstate == MEMBER_LIVE && (a = l->c->async)) {
        pthread_mutex_lock(&a->mu);
        if (l->aop && l->aop->state == AOP_QUEUED && l->aop->kind == AOP_ACQUIRE) {
            list_unlink(&a->queue, l->aop);
            finish(a, l->aop, baton_seterr(BATON_ECANCELED, 0, "lock '%s': acquire canceled", l->name));
            hit = 1;
        } else if (l->aop && l->aop->kind == AOP_ACQUIRE) {
            l->aop->canceled = 1;
            baton__waiter_cancel(&l->waiter);
            hit = 1;
        }
        pthread_mutex_unlock(&a->mu);
    }
    pthread_mutex_unlock(&g->mu);
    return hit;
}

/* baton_lock_free: the op of L (if any) stops and is dropped, its callback
 * never called. A running one is canceled and waited for (bounded: a
 * canceled call returns promptly, a release by the engine's io timeout). */
void baton__async_forget(baton_lock *l)
{
    baton__gate *g = l->cm.gate;
    baton__async *a;
    baton__aop *op;
    pthread_mutex_lock(&g->mu);
    if (g->closing || l->cm.mstate != MEMBER_LIVE || !(a = l->c->async)) {
        /* the close delivers what is left (BATON_ECANCELED) */
        pthread_mutex_unlock(&g->mu);
        return;
    }
    g->active++;   /* the close waits for us, so the context stays */
    pthread_mutex_unlock(&g->mu);

    pthread_mutex_lock(&a->mu);
    if ((op = l->aop)) {
        op->orphan = 1;
        if (op->state == AOP_RUNNING) baton__waiter_cancel(&l->waiter);
        while (op->state == AOP_RUNNING)
            pthread_cond_wait(&a->stopped, &a->mu);
        list_unlink(op->state == AOP_QUEUED ? &a->queue : &a->done, op);
        l->aop = NULL;
        free(op);
    }
    pthread_mutex_unlock(&a->mu);
    /* the cancel meant for the op must not reach a later acquire */
    baton__waiter_reset(&l->waiter);

    pthread_mutex_lock(&g->mu);
    if (--g->active == 0) pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* Close, before the client stops taking calls: no op starts, and the queued
 * ones are done (BATON_ECANCELED) without running. */
void baton__async_close_begin(baton_client *c)
{
    baton__async *a;
    pthread_mutex_lock(&c->gate->mu);
    a = c->async;
    pthread_mutex_unlock(&c->gate->mu);
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->closed = 1;
    while (a->queue.head) {
        baton__aop *op = a->queue.head;
        list_unlink(&a->queue, op);
        finish(a, op, BATON_ECANCELED);
    }
    pthread_cond_broadcast(&a->work);
    pthread_mutex_unlock(&a->mu);
}

/* Close, once every call through a handle has returned (the running ops
 * were canceled with them): the workers end, and each op's callback is
 * called once with BATON_ECANCELED on the closing thread. */
void baton__async_close_end(baton_client *c)
{
    baton__async *a = c->async;
    if (!a) return;
    for (int i = 0; i < a->nworkers; i++)
        pthread_join(a->workers[i], NULL);
    deliver(a, 0, BATON_ECANCELED);
    c->async = NULL;
    close(a->efd);
    pthread_cond_destroy(&a->work);
    pthread_cond_destroy(&a->stopped);
    pthread_mutex_destroy(&a->mu);
    free(a);
}
