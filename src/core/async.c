/* The event-loop API (include/baton.h, "event-loop API"; docs/async.md).
 *
 * Every operation is an op on its client's async context, in one of two
 * ways, and its result waits on the done list until the caller's loop runs
 * baton_client_process (woken through the eventfd):
 *  - native: an acquire the engine's async table (backend.h) accepts; the
 *    core runs the blocking acquire's prologue here, the engine calls
 *    native_done from its own thread, and process runs the epilogue (grant
 *    check, keeper) on the caller's thread;
 *  - the fallback, for everything else (every op of an engine without the
 *    table, releases, lock states the engine is not native for): a bounded
 *    pool of workers runs the blocking call. The pool is bounded: past ASYNC_MAX_WORKERS
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

/* STARTING: its start call runs; RUNNING: a worker or the engine has it;
 * DELIVERING: process is finishing it (its lock's aop still points at it). */
enum { AOP_STARTING, AOP_QUEUED, AOP_RUNNING, AOP_DONE, AOP_DELIVERING };
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
    int native;                 /* the engine has it (req below) */
    int native_rel;             /* a release the engine has (release_start) */
    int raw;                    /* a release whose prologue ran: the pool calls the engine only */
    int over;                   /* that release's lease had run out */
    int rc;
    long native_err;            /* with msg: the failure's text as its thread set it */
    char *msg;                  /* NULL, or the failure's message (malloc'd) for the callback */
    int64_t wait_ms;
    baton__async *a;
    baton_acquire_req req;      /* native: the request the engine fills */
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
    aop_list running;           /* native ops the engine has */
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
    int was_empty = !a->done.head;
    const baton_error *le = rc ? baton_error_last() : NULL;
    /* The message was set on this thread (a worker, the engine's, a
     * canceler); the callback runs on the loop's, so it travels with the op. */
    if (le && le->code == rc && le->message && *le->message) {
        free(op->msg);
        op->msg = strdup(le->message);
        op->native_err = le->native;
    }
    op->rc = rc;
    op->state = AOP_DONE;
    list_push(&a->done, op);
    /* Only the first of a run of completions writes the fd (a syscall per
     * completion was a third of a pipelined pair's client CPU): process
     * writes it again when it leaves completions behind. A full counter
     * (2^64 - 2 wakes unread) still leaves the fd readable. */
    if (was_empty && write(a->efd, &one, sizeof one) < 0 && errno != EAGAIN) { /* readable already */ }
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

/* A release's answer as baton__lock_release_with (lock.c) gives it. */
static int release_rc(baton_lock *l, int rc, int over)
{
    if (rc == BATON_ENOTOWNER)
        return baton_seterr(BATON_ELOST, 0, "lock '%s' was lost: the engine has another owner", l->name);
    if (!rc && over)
        return baton_seterr(BATON_ELOST, 0, "lock '%s': the lease ran out before this release", l->name);
    return rc;
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
    if (op->kind == AOP_RELEASE && op->raw) {
        baton__lock_io_enter(l);
        rc = l->c->be->lock->release(l->c->eng, l->st, &l->owner);
        baton__lock_io_leave(l);
        rc = release_rc(l, rc, op->over);
    } else if (op->kind == AOP_RELEASE) {
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

/* The engine's DONE for a native acquire: any engine thread, none of the
 * core's locks held (backend.h). */
static void native_done(void *token, int rc, uint64_t fence, int64_t sent_ns)
{
    baton__aop *op = token;
    baton__async *a = op->a;
    pthread_mutex_lock(&a->mu);
    op->req.fence = fence;
    op->req.sent_ns = sent_ns;
    list_unlink(&a->running, op);
    finish(a, op, rc);
    pthread_cond_broadcast(&a->stopped);
    pthread_mutex_unlock(&a->mu);
}

/* Hands OP (its request made) to the engine. 0 when the engine has it
 * (native_done follows), else the engine's error (BATON_ENOTSUP: not native
 * for this lock state) and OP is off the running list. */
static int engine_start(baton__async *a, baton__aop *op)
{
    baton_lock *l = op->l;
    const baton_async_methods *am = l->c->be->async;
    int rc, cancel_now;
    pthread_mutex_lock(&a->mu);
    op->native = 1;
    op->state = AOP_RUNNING;
    list_push(&a->running, op);
    pthread_mutex_unlock(&a->mu);
    rc = am->acquire_start(l->c->eng, l->st, &op->req, native_done, op);
    pthread_mutex_lock(&a->mu);
    if (rc) {
        list_unlink(&a->running, op);
        op->native = 0;
        op->state = AOP_STARTING;
    }
    /* a close or a cancel that came while the engine took it missed it */
    cancel_now = !rc && (a->closed || op->canceled);
    pthread_mutex_unlock(&a->mu);
    if (cancel_now) am->acquire_cancel(l->c->eng, l->st);
    return rc;
}

/* A native start: the blocking acquire's prologue, then the engine. 0,
 * BATON_ENOTSUP (the pool takes it), or an error for the caller. */
static int start_native(baton__async *a, baton__aop *op)
{
    baton_lock *l = op->l;
    int rc, reentered;
    if ((rc = baton__lock_acquire_begin(l, op->wait_ms, &op->req, &reentered)))
        return rc == BATON_ENOTSUP ? BATON_EIO : rc;
    if (reentered) {
        /* held after all (another thread's acquire won the race): undo */
        baton__lock_release(l);
        return baton_seterr(BATON_EINVAL, 0, "lock '%s' is held: release it first", l->name);
    }
    if ((rc = engine_start(a, op))) {
        /* undone by hand, not by acquire_end: a cancel meant for this op
         * stays for the pool's run of it */
        pthread_mutex_lock(l->smu);
        l->acquiring = 0;
        pthread_mutex_unlock(l->smu);
    }
    return rc;
}

/* A release the engine starts itself (release_start, v12): the blocking
 * release's prologue (baton__lock_release_with in lock.c: the handle free,
 * off the keeper), then the engine. Only for the plain case, a held handle
 * at depth 1; anything else (lost, reentrant, not held) is BATON_ENOTSUP
 * before anything changed, and the pool runs the whole blocking release.
 * An engine that refuses after the prologue (BATON_ENOTSUP for this lock
 * state) leaves OP raw: the pool calls the engine's blocking release. */
static int release_native(baton__async *a, baton__aop *op)
{
    baton_lock *l = op->l;
    const baton_async_methods *am = l->c->be->async;
    int rc;
    if (!am || !am->release_start) return BATON_ENOTSUP;
    pthread_mutex_lock(l->smu);
    if (l->state != LOCK_HELD || l->depth != 1) {
        pthread_mutex_unlock(l->smu);
        return BATON_ENOTSUP;
    }
    op->over = l->lease_deadline != INT64_MAX && baton_now_ns() >= l->lease_deadline;
    l->state = LOCK_FREE;
    l->depth = 0;
    l->fence = 0;
    l->lease_deadline = l->next_renew = INT64_MAX;
    pthread_mutex_unlock(l->smu);
    baton__keeper_remove(l->c->keeper, &l->kn);
    /* a renewal under way (a native one too: the gate stays closed until
     * its answer) ends before the release goes out */
    baton__lock_io_enter(l);
    baton__lock_io_leave(l);
    pthread_mutex_lock(&a->mu);
    op->native_rel = 1;
    op->state = AOP_RUNNING;
    list_push(&a->running, op);
    pthread_mutex_unlock(&a->mu);
    rc = am->release_start(l->c->eng, l->st, &l->owner, native_done, op);
    if (rc) {
        pthread_mutex_lock(&a->mu);
        list_unlink(&a->running, op);
        op->native_rel = 0;
        op->state = AOP_STARTING;
        pthread_mutex_unlock(&a->mu);
        op->raw = 1;
        baton_error_clear();
        return BATON_ENOTSUP;
    }
    return 0;
}

/* ctx->mu held: OP to the pool's queue (a release first: it is quick and
 * may be what the queued acquires wait for). */
static int enqueue(baton__async *a, baton__aop *op)
{
    int rc;
    if ((rc = spawn_worker(a))) return rc;
    op->state = AOP_QUEUED;
    if (op->kind == AOP_RELEASE && a->queue.head) {
        op->next = a->queue.head;
        a->queue.head->prev = op;
        a->queue.head = op;
    } else {
        list_push(&a->queue, op);
    }
    pthread_cond_signal(&a->work);
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
        pthread_mutex_lock(l->smu);
        held = l->state == LOCK_HELD;
        pthread_mutex_unlock(l->smu);
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
    op->a = a;
    op->cb = cb;
    op->arg = arg;
    op->kind = kind;
    op->wait_ms = wait_ms;
    op->state = AOP_STARTING;
    baton__wait_deadline_ns(wait_ms, &op->deadline_ns);
    /* the handle's one slot, taken first: the checks below may take time */
    pthread_mutex_lock(&a->mu);
    if (a->closed) rc = baton_seterr(BATON_ECANCELED, 0, "the client is closing");
    else if (l->aop) rc = baton_seterr(BATON_EINVAL, 0, "lock '%s' has an operation in flight", l->name);
    else l->aop = op;
    pthread_mutex_unlock(&a->mu);
    if (rc) {
        free(op);
        goto out;
    }
    if (kind == AOP_ACQUIRE && l->c->be->async) {
        if ((rc = start_native(a, op)) != BATON_ENOTSUP) {
            if (rc) {
                pthread_mutex_lock(&a->mu);
                l->aop = NULL;
                pthread_cond_broadcast(&a->stopped);
                pthread_mutex_unlock(&a->mu);
                free(op);
            }
            goto out;
        }
        baton_error_clear();
        rc = 0;
    }
    if (kind == AOP_RELEASE && release_native(a, op) == 0) goto out;
    pthread_mutex_lock(&a->mu);
    if (a->closed) {
        rc = baton_seterr(BATON_ECANCELED, 0, "the client is closing");
    } else if (op->canceled) {
        /* canceled while it started: done now, and the cancel is its */
        baton__waiter_reset(&l->waiter);
        finish(a, op, BATON_ECANCELED);
    } else {
        rc = enqueue(a, op);
    }
    if (rc) {
        l->aop = NULL;
        pthread_cond_broadcast(&a->stopped);
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
    if (!c) return -1;
    if (c->be->async && c->be->async->timeout_ms) return c->be->async->timeout_ms(c->eng);
    return -1;   /* the pool and the engines' threads complete through the fd */
}

/* A native acquire the engine answered: the blocking acquire's epilogue, on
 * the caller's thread. 1 when a grant was given back (its lease over, its
 * session gone) and the op went back to the engine; else 0 and *RC is the
 * acquire's result (the handle held or free again). */
static int native_finish(baton__async *a, baton__aop *op, int force, int *rc)
{
    baton_lock *l = op->l;
    int r = op->rc, dead;
    if (r == 0 && !force && baton__lock_grant_check(l, &op->req, &dead)) {
        if (!(r = baton__lock_retry_rc(l, &op->req, dead)) && !(r = engine_start(a, op)))
            return 1;
    }
    *rc = baton__lock_acquire_end(l, r, &op->req, op->wait_ms);
    return 0;
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
        int rc;
        pthread_mutex_lock(&a->mu);
        if ((op = a->done.head)) {
            list_unlink(&a->done, op);
            op->state = AOP_DELIVERING;
        }
        pthread_mutex_unlock(&a->mu);
        if (!op) break;
        n++;
        rc = op->rc;
        if (op->native && native_finish(a, op, force_rc != 0, &rc)) continue;
        if (op->native_rel) rc = release_rc(op->l, rc, op->over);
        pthread_mutex_lock(&a->mu);
        op->l->aop = NULL;
        pthread_cond_broadcast(&a->stopped);
        pthread_mutex_unlock(&a->mu);
        rc = force_rc ? force_rc : rc;
        /* the callback's baton_error_last() tells what happened to its op */
        if (rc && rc == op->rc && op->msg)
            baton_seterr(rc, op->native_err, "%s", op->msg);
        else if (rc && baton_error_last()->code != rc)
            baton_seterr(rc, 0, "%s", baton_strerror(rc));
        op->cb(op->l, rc, op->arg);
        free(op->msg);
        free(op);
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
    if (c->be->async && c->be->async->process && (rc = c->be->async->process(c->eng)) < 0) return rc;
    pthread_mutex_lock(&a->mu);
    /* Read before counting: a completion after this read writes the fd
     * again, so it is either counted now or seen on the next wake. */
    if (read(a->efd, &v, sizeof v) < 0 && errno != EAGAIN) { /* nothing to read */ }
    for (op = a->done.head; op; op = op->next) n++;
    pthread_mutex_unlock(&a->mu);
    n = deliver(a, n, 0);
    /* completions that came after the count found the list non-empty and
     * wrote nothing: the fd must say they are there */
    pthread_mutex_lock(&a->mu);
    if (a->done.head) {
        uint64_t one = 1;
        if (write(a->efd, &one, sizeof one) < 0 && errno != EAGAIN) { /* readable already */ }
    }
    pthread_mutex_unlock(&a->mu);
    return n;
}

/* Calls on C's context from a thread that is not the close's: 0 and the
 * close waits for async_leave, or 1 when the client is closing (the close
 * then does what is left). */
static int async_enter(baton_lock *l, baton__async **out)
{
    baton__gate *g = l->cm.gate;
    int closing;
    pthread_mutex_lock(&g->mu);
    closing = g->closing || l->cm.mstate != MEMBER_LIVE || !(*out = l->c->async);
    if (!closing) g->active++;
    pthread_mutex_unlock(&g->mu);
    return closing;
}

static void async_leave(baton_lock *l)
{
    baton__gate *g = l->cm.gate;
    pthread_mutex_lock(&g->mu);
    if (--g->active == 0) pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* baton_lock_cancel: a queued acquire completes now (no worker may be free
 * for it for a while); one running is woken through the waiter, here under
 * ctx->mu so that its end (which consumes the cancel) comes after, and a
 * native one through the engine too. 1 when this handled the cancel. */
int baton__async_cancel(baton_lock *l)
{
    baton__async *a;
    baton__aop *op;
    int hit = 0, native = 0;
    if (async_enter(l, &a)) return 0;
    pthread_mutex_lock(&a->mu);
    if ((op = l->aop) && op->kind == AOP_ACQUIRE) {
        if (op->state == AOP_QUEUED) {
            list_unlink(&a->queue, op);
            finish(a, op, baton_seterr(BATON_ECANCELED, 0, "lock '%s': acquire canceled", l->name));
            hit = 1;
        } else if (op->state == AOP_RUNNING || op->state == AOP_STARTING) {
            op->canceled = 1;
            baton__waiter_cancel(&l->waiter);
            native = op->native && op->state == AOP_RUNNING;
            hit = 1;
        }
    }
    pthread_mutex_unlock(&a->mu);
    if (native) l->c->be->async->acquire_cancel(l->c->eng, l->st);
    async_leave(l);
    return hit;
}

/* baton_lock_free: the op of L (if any) stops and is dropped, its callback
 * never called. A running one is canceled and waited for (bounded: a
 * canceled call returns promptly, a release by the engine's io timeout). */
void baton__async_forget(baton_lock *l)
{
    baton__async *a;
    baton__aop *op, *gone = NULL;
    if (async_enter(l, &a)) return;   /* the close delivers what is left (BATON_ECANCELED) */
    pthread_mutex_lock(&a->mu);
    while ((op = l->aop)) {
        op->orphan = 1;
        if (op->state == AOP_QUEUED || op->state == AOP_DONE) {
            list_unlink(op->state == AOP_QUEUED ? &a->queue : &a->done, op);
            l->aop = NULL;
            gone = op;
            break;
        }
        if (op->state == AOP_RUNNING) {
            op->canceled = 1;
            baton__waiter_cancel(&l->waiter);
            if (op->native) {
                pthread_mutex_unlock(&a->mu);
                l->c->be->async->acquire_cancel(l->c->eng, l->st);
                pthread_mutex_lock(&a->mu);
                continue;
            }
        }
        pthread_cond_wait(&a->stopped, &a->mu);
    }
    pthread_mutex_unlock(&a->mu);
    if (gone && gone->native) {
        /* the handle is acquiring (or holds what the engine granted): end
         * that, so the free that follows gives a grant back */
        baton__lock_acquire_end(l, gone->rc, &gone->req, gone->wait_ms);
    }
    if (gone) free(gone->msg);
    free(gone);
    /* the cancel meant for the op must not reach a later acquire */
    baton__waiter_reset(&l->waiter);
    async_leave(l);
}

/* Close, before the client stops taking calls: no op starts, the queued
 * ones are done (BATON_ECANCELED) without running, and the engine is told
 * to end the native ones. */
void baton__async_close_begin(baton_client *c)
{
    baton__async *a;
    void **sts = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&c->gate->mu);
    a = c->async;
    pthread_mutex_unlock(&c->gate->mu);
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->closed = 1;
    for (baton__aop *op = a->queue.head, *nx; op; op = nx) {
        nx = op->next;
        /* a raw release's handle is free already: only its run lets go of
         * the engine's lock, so the workers still run it */
        if (op->raw) continue;
        list_unlink(&a->queue, op);
        finish(a, op, BATON_ECANCELED);
    }
    for (baton__aop *op = a->running.head; op; op = op->next) {
        if (n == cap) {
            void **m = realloc(sts, (cap = cap ? cap * 2 : 16) * sizeof *sts);
            if (!m) break;   /* the rest end by their deadlines (or a later cancel) */
            sts = m;
        }
        sts[n++] = op->l->st;
    }
    pthread_cond_broadcast(&a->work);
    pthread_mutex_unlock(&a->mu);
    /* outside ctx->mu: the engine calls native_done holding its own lock */
    for (size_t i = 0; i < n; i++) c->be->async->acquire_cancel(c->eng, sts[i]);
    free(sts);
}

/* Close, once every call through a handle has returned (the running ops
 * were canceled with them): the engine's ops and the workers end, and each
 * op's callback is called once with BATON_ECANCELED on the closing thread. */
void baton__async_close_end(baton_client *c)
{
    baton__async *a = c->async;
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    while (a->running.head)
        pthread_cond_wait(&a->stopped, &a->mu);
    pthread_mutex_unlock(&a->mu);
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
