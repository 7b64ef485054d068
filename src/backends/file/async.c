/*
 * The file engine's native async acquire (backend.h, baton_async_methods;
 * docs/async.md): one thread per client holds every waiting async acquire
 * of a plain named lock, however many, and on each wake tries their locks
 * without blocking (F_OFD_SETLK, the same take as a blocking acquire's first
 * try, fence and all). It wakes on:
 *  - an inotify IN_MODIFY in the lock directory: every release rewrites its
 *    lock file's record (held 0), and every grant bumps the fence in it;
 *  - a new op, a cancel, the close;
 *  - the nearest deadline of a waiting op;
 *  - a re-check every FILE_ASYNC_RECHECK_MS: a holder that dies, or a
 *    foreign process that unlocks without writing (flock-style tools on the
 *    same file), writes nothing, so only this sees it.
 * A pass costs one try per distinct name found free or not tried yet: once
 * a name is found held, its other waiters in the pass are skipped, so 10,000
 * waiters on one lock cost one failed try per wake, not 10,000.
 * Fair locks, read-write sides, path locks (flock on a file) and the other
 * lock states answer BATON_ENOTSUP: the core runs those on its worker pool.
 */
#include "file_int.h"

#define FILE_ASYNC_RECHECK_MS 1000
#define HELD_SET 64

typedef struct file_aop {
    struct file_aop *next;
    file_lock *fl;
    baton_acquire_req *req;
    baton_async_done done;
    void *token;
    int canceled;
} file_aop;

/* amu held: OP is over; DONE is called with amu held (the contract allows
 * it: the core's done only queues the result). */
static void aop_done(file_aop **pp, int rc, uint64_t fence, int64_t sent)
{
    file_aop *op = *pp;
    *pp = op->next;
    op->done(op->token, rc, fence, sent);
    free(op);
}

static int held_seen(char (*held)[256], int n, const char *fname)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(held[i], fname)) return 1;
    return 0;
}

/* amu held: one pass over the waiting ops. Returns the nearest deadline. */
static int64_t pass(file_engine *e)
{
    static char held[HELD_SET][256];   /* only the async thread runs passes */
    int nheld = 0;
    int64_t now = baton_now_ns(), next = now + FILE_ASYNC_RECHECK_MS * 1000000LL;
    file_aop **pp = &e->aops;
    while (*pp) {
        file_aop *op = *pp;
        baton_acquire_req t;
        int rc;
        if (op->canceled || baton_waiter_canceled(op->req->waiter)) {
            aop_done(pp, baton_seterr(BATON_ECANCELED, 0, "acquire canceled"), 0, 0);
            continue;
        }
        if (held_seen(held, nheld, op->fl->fname)) {
            rc = BATON_ELOCKED;
        } else {
            t = *op->req;
            t.deadline_ns = 0;   /* a try: never wait in the kernel here */
            rc = file__plain_take(e, op->fl, &t);
            if (rc == 0) {
                aop_done(pp, 0, t.fence, t.sent_ns);
                continue;
            }
            if (rc == BATON_ELOCKED && nheld < HELD_SET) snprintf(held[nheld++], 256, "%s", op->fl->fname);
        }
        if (rc != BATON_ELOCKED || (op->req->deadline_ns != INT64_MAX && now >= op->req->deadline_ns)) {
            /* the core says ETIMEDOUT for ELOCKED after a wait */
            aop_done(pp, rc, 0, 0);
            continue;
        }
        if (op->req->deadline_ns < next) next = op->req->deadline_ns;
        pp = &op->next;
    }
    return next;
}

static void *async_main(void *arg)
{
    file_engine *e = arg;
    for (;;) {
        unsigned gen = baton_waiter_gen(&e->aw);
        int64_t next;
        pthread_mutex_lock(&e->amu);
        if (e->astop && !e->aops) {
            pthread_mutex_unlock(&e->amu);
            break;
        }
        next = pass(e);
        pthread_mutex_unlock(&e->amu);
        baton_waiter_park(&e->aw, gen, next);
    }
    return NULL;
}

int file__async_init(file_engine *e)
{
    pthread_mutex_init(&e->amu, NULL);
    if (baton__waiter_init(&e->aw)) {
        pthread_mutex_destroy(&e->amu);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    return 0;
}

/* amu held: the thread and its inotify watch, on first use. */
static int async_start_thread(file_engine *e)
{
    sigset_t all, old;
    int rc;
    if (e->ath_started) return 0;
    if ((rc = file__watch_add(e, e->dir, IN_MODIFY, NULL, &e->areg, &e->aw))) return rc;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rc = pthread_create(&e->ath, NULL, async_main, e);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        file__watch_remove(e, &e->areg);
        return baton_seterr(BATON_ENOMEM, rc, "cannot start the async waiter");
    }
    e->ath_started = 1;
    return 0;
}

/* The core waits for every started op before close, so none is left here. */
void file__async_stop(file_engine *e)
{
    pthread_mutex_lock(&e->amu);
    e->astop = 1;
    pthread_mutex_unlock(&e->amu);
    if (e->ath_started) {
        baton_waiter_wake(&e->aw);
        pthread_join(e->ath, NULL);
        file__watch_remove(e, &e->areg);
    }
    baton__waiter_destroy(&e->aw);
    pthread_mutex_destroy(&e->amu);
}

static int file_acquire_start(void *eng, void *st, baton_acquire_req *req, baton_async_done done, void *token)
{
    file_engine *e = eng;
    file_lock *fl = st;
    file_aop *op;
    int rc;
    if (fl->kind != K_PLAIN || fl->path || req->fair)
        return baton_seterr(BATON_ENOTSUP, 0, "the file engine waits natively for plain named locks only");
    if (!(op = calloc(1, sizeof *op))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    op->fl = fl;
    op->req = req;
    op->done = done;
    op->token = token;
    pthread_mutex_lock(&e->amu);
    if ((rc = async_start_thread(e))) {
        pthread_mutex_unlock(&e->amu);
        free(op);
        return rc;
    }
    /* at the tail: the waiters of one name are tried oldest first */
    file_aop **pp = &e->aops;
    while (*pp) pp = &(*pp)->next;
    *pp = op;
    pthread_mutex_unlock(&e->amu);
    baton_waiter_wake(&e->aw);
    return 0;
}

/* ST is compared, never dereferenced: it may be gone already. */
static void file_acquire_cancel(void *eng, void *st)
{
    file_engine *e = eng;
    int hit = 0;
    pthread_mutex_lock(&e->amu);
    for (file_aop *op = e->aops; op; op = op->next)
        if (op->fl == st) op->canceled = hit = 1;
    pthread_mutex_unlock(&e->amu);
    if (hit) baton_waiter_wake(&e->aw);
}

const baton_async_methods file__async_methods = {
    .acquire_start = file_acquire_start,
    .acquire_cancel = file_acquire_cancel,
};
