/* The keeper (see keeper.h): a timing thread that declares a node lost the
 * moment its monotonic deadline passes and hands renewals and reports to
 * workers, so no I/O call can hold a deadline back.
 *
 * Lock order: the keeper's mutex, then a node's own mutex (inside poll).
 * Workers run jobs with the keeper's mutex released. */
#include "keeper.h"
#include "baton/sys/backend.h"
#include <pthread.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#define KEEPER_LINGER_NS 1000000000LL
/* An idle worker waits this long for a job before it exits. */
#define WORKER_LINGER_NS 2000000000LL
/* Renewals of different locks run at once up to this many; past it they
 * queue (a client with more locks stuck on a frozen engine than this has
 * lost them at their deadlines anyway: the timing thread does not wait). */
#define WORKERS_MAX 64

#define KJOB_KEEP 1
#define KJOB_REPORT 2

struct baton__keeper {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* CLOCK_MONOTONIC; wakes the timing loop */
    pthread_cond_t idle;    /* a job ended, or a worker exited */
    pthread_cond_t work;    /* a job was queued (workers wait on it) */
    baton__kept *head;
    baton__kept *qhead, *qtail; /* nodes with queued jobs */
    int64_t sleeping_until;   /* when the loop will look again on its own */
    int stop;
    int started;              /* the timing thread runs (started by the first kept node) */
    int workers, idle_workers;
    /* Workers are joined by stop (so a closed client leaves no thread
     * behind); one that exits on its own when idle detaches itself. */
    pthread_t wth[WORKERS_MAX];
    int wused[WORKERS_MAX];
    int self_free;            /* stopped from a worker's job: the last worker frees k */
    long inflight;            /* renewals started (ops->start) and not yet answered */
};

/* This worker's slot in wth. */
static __thread int tls_slot;
/* The job this thread runs now, so a node's own report can remove or free
 * its node (and stop its keeper) without waiting for itself. */
static __thread baton__keeper *tls_k;
static __thread baton__kept *tls_node;
static __thread int tls_job;
static __thread int tls_gone;

void baton__kept_gone(baton__kept *n)
{
    if (tls_node == n) tls_gone = 1;
}

static void keeper_free(baton__keeper *k)
{
    pthread_cond_destroy(&k->cv);
    pthread_cond_destroy(&k->idle);
    pthread_cond_destroy(&k->work);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

static void q_push(baton__keeper *k, baton__kept *n)
{
    if (n->inq) return;
    n->qnext = NULL;
    if (k->qtail) k->qtail->qnext = n;
    else k->qhead = n;
    k->qtail = n;
    n->inq = 1;
}

static void q_unlink(baton__keeper *k, baton__kept *n)
{
    baton__kept **pp = &k->qhead, *prev = NULL;
    if (!n->inq) return;
    while (*pp && *pp != n) { prev = *pp; pp = &(*pp)->qnext; }
    if (*pp) {
        *pp = n->qnext;
        if (k->qtail == n) k->qtail = prev;
    }
    n->qnext = NULL;
    n->inq = 0;
}

static void *worker_main(void *arg);

/* k->mu held. A renewal of N ended: its due time moved, usually later. The
 * timing thread is woken only when N is now due before it would look
 * anyway: each wake-up walks every node, and a client with 100,000 locks
 * renewing them must not pay a walk per renewal. */
static void wake_if_sooner(baton__keeper *k, baton__kept *n)
{
    int64_t next = INT64_MAX;
    if (!n->kept) return;
    n->ops->poll(n, INT64_MIN, 0, &next);
    if (next < k->sleeping_until)
        pthread_cond_broadcast(&k->cv);
}

/* k->mu held. Starts a thread with every signal blocked: signals belong to
 * the application. */
static int spawn(baton__keeper *k, pthread_t *th, void *(*fn)(void *))
{
    sigset_t all, old;
    pthread_attr_t a;
    int e;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pthread_attr_init(&a);
    e = pthread_create(th, &a, fn, k);
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return e;
}

/* k->mu held. Queues job J of N and makes sure a worker will take it. */
static void enqueue(baton__keeper *k, baton__kept *n, int j)
{
    n->jobs_q |= j;
    q_push(k, n);
    if (k->idle_workers > 0) {
        pthread_cond_signal(&k->work);
    } else if (k->workers < WORKERS_MAX) {
        int i = 0;
        while (i < WORKERS_MAX && k->wused[i]) i++;
        if (i < WORKERS_MAX && spawn(k, &k->wth[i], worker_main) == 0) {
            k->wused[i] = 1;
            k->workers++;
        }
        /* else: a worker that exists takes it when it is done */
    }
}

static void *worker_main(void *arg)
{
    baton__keeper *k = arg;
    pthread_mutex_lock(&k->mu);
    tls_k = k;
    for (tls_slot = 0; tls_slot < WORKERS_MAX; tls_slot++)
        if (k->wused[tls_slot] && pthread_equal(k->wth[tls_slot], pthread_self())) break;
    for (;;) {
        baton__kept *n;
        int j;
        while (!k->qhead && !k->stop) {
            int64_t until = baton_now_ns() + WORKER_LINGER_NS;
            struct timespec ts = { until / 1000000000LL, until % 1000000000LL };
            int e;
            k->idle_workers++;
            e = pthread_cond_timedwait(&k->work, &k->mu, &ts);
            k->idle_workers--;
            if (e == ETIMEDOUT && !k->qhead) goto out;
        }
        if (!k->qhead) break;   /* stopping, nothing left */
        n = k->qhead;
        j = (n->jobs_q & KJOB_REPORT) ? KJOB_REPORT : KJOB_KEEP;
        n->jobs_q &= ~j;
        n->jobs_run |= j;
        q_unlink(k, n);
        if (n->jobs_q) q_push(k, n);   /* the other job goes to another worker */
        pthread_mutex_unlock(&k->mu);

        tls_node = n;
        tls_job = j;
        tls_gone = 0;
        if (j == KJOB_KEEP && n->ops->start && n->ops->start(n, baton_now_ns()) == 0) {
            /* In flight: KJOB_KEEP stays in jobs_run until
             * baton__keeper_renewed, so the node is neither renewed twice
             * nor freed under the engine's answer. */
            pthread_mutex_lock(&k->mu);
            k->inflight++;
            tls_node = NULL;
            tls_job = 0;
            continue;
        }
        if (j == KJOB_KEEP) {
            int lost = n->ops->keep(n, baton_now_ns());
            if (lost) {
                /* Report on this worker at once: the renewal has just said
                 * so, and a second queue round trip would only add delay. */
                pthread_mutex_lock(&k->mu);
                n->jobs_run |= KJOB_REPORT;
                n->jobs_run &= ~KJOB_KEEP;
                pthread_mutex_unlock(&k->mu);
                tls_job = j = KJOB_REPORT;
                n->ops->report(n);
            }
        } else {
            n->ops->report(n);
        }
        pthread_mutex_lock(&k->mu);
        if (!tls_gone) n->jobs_run &= ~j;
        tls_node = NULL;
        tls_job = 0;
        pthread_cond_broadcast(&k->idle);
        if (j == KJOB_REPORT || tls_gone) pthread_cond_broadcast(&k->cv);
        else wake_if_sooner(k, n);
    }
out:
    k->workers--;
    if (!k->stop || k->self_free) {
        /* Idle (nobody will join it), or the stop ran on this very thread. */
        if (tls_slot < WORKERS_MAX) k->wused[tls_slot] = 0;
        pthread_detach(pthread_self());
    }
    pthread_cond_broadcast(&k->idle);
    {
        int free_it = k->self_free && k->workers == 0;
        pthread_mutex_unlock(&k->mu);
        tls_k = NULL;
        if (free_it) keeper_free(k);
    }
    return NULL;
}

static void *keeper_main(void *arg)
{
    baton__keeper *k = arg;
    int lingered = 0;
    pthread_mutex_lock(&k->mu);
    while (!k->stop) {
        int64_t now = baton_now_ns(), due = INT64_MAX;
        for (baton__kept *n = k->head; n; n = n->knext) {
            int64_t next = INT64_MAX;
            int renewing = ((n->jobs_q | n->jobs_run) & KJOB_KEEP) != 0;
            int what = n->ops->poll(n, now, renewing, &next);
            if (what == KEPT_LOST) enqueue(k, n, KJOB_REPORT);
            else if (what == KEPT_RENEW) enqueue(k, n, KJOB_KEEP);
            if (next < due) due = next;
        }
        /* With nothing to keep, look again in a second before parking for
         * good: a program that takes and drops locks in a loop then adds
         * each new lock (due a renewal period from now) without waking this
         * thread, instead of paying a wake-up and a context switch per pair. */
        if (due == INT64_MAX && !lingered) {
            due = now + KEEPER_LINGER_NS;
            lingered = 1;
        } else if (due != INT64_MAX) {
            lingered = 0;
        }
        k->sleeping_until = due;
        if (due == INT64_MAX) {
            pthread_cond_wait(&k->cv, &k->mu);
            lingered = 0;
        } else if (due > now) {
            struct timespec ts = { due / 1000000000LL, due % 1000000000LL };
            pthread_cond_timedwait(&k->cv, &k->mu, &ts);
        }
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

/* The timing thread starts with the first kept node: a client of an engine
 * without leases (the file backend, a CLI run) never pays for it. */
int baton__keeper_start(baton__keeper **out)
{
    baton__keeper *k = calloc(1, sizeof *k);
    pthread_condattr_t ca;
    if (!k) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    pthread_mutex_init(&k->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&k->cv, &ca);
    pthread_cond_init(&k->idle, &ca);
    pthread_cond_init(&k->work, &ca);
    pthread_condattr_destroy(&ca);
    k->sleeping_until = INT64_MAX;
    *out = k;
    return 0;
}

/* k->mu held. */
static int keeper_launch(baton__keeper *k)
{
    int e;
    if (k->started) return 0;
    if ((e = spawn(k, &k->th, keeper_main))) return baton_seterr(BATON_ENOMEM, e, "cannot start the keeper thread");
    k->started = 1;
    return 0;
}

void baton__keeper_stop(baton__keeper *k)
{
    int mine, started;
    if (!k) return;
    pthread_mutex_lock(&k->mu);
    k->stop = 1;
    started = k->started;
    pthread_cond_broadcast(&k->cv);
    pthread_cond_broadcast(&k->work);
    pthread_mutex_unlock(&k->mu);
    if (started) pthread_join(k->th, NULL);

    pthread_mutex_lock(&k->mu);
    /* From a worker's job (baton_client_close inside on_lost): that worker
     * cannot join itself; it detaches and frees k when its job returns. */
    mine = tls_k == k;
    for (int i = 0; i < WORKERS_MAX; i++) {
        pthread_t th;
        if (!k->wused[i] || (mine && i == tls_slot)) continue;
        th = k->wth[i];
        k->wused[i] = 0;
        pthread_mutex_unlock(&k->mu);
        pthread_join(th, NULL);
        pthread_mutex_lock(&k->mu);
    }
    /* Renewals started natively are answered by their deadlines: their
     * answers reach this keeper, so it outlives them. */
    while (k->inflight > 0)
        pthread_cond_wait(&k->idle, &k->mu);
    if (mine) {
        k->self_free = 1;
        pthread_mutex_unlock(&k->mu);
        return;
    }
    pthread_mutex_unlock(&k->mu);
    keeper_free(k);
}

int baton__keeper_add(baton__keeper *k, baton__kept *n)
{
    int64_t next = INT64_MAX;
    if (!k) return baton_seterr(BATON_ECANCELED, 0, "the client is closing");
    pthread_mutex_lock(&k->mu);
    int rc = keeper_launch(k);
    if (rc) {
        pthread_mutex_unlock(&k->mu);
        return rc;
    }
    if (!n->kept) {
        n->knext = k->head;
        n->kprev = NULL;
        if (k->head) k->head->kprev = n;
        k->head = n;
        n->kept = 1;
    }
    /* Wake the loop only when this node is due before it would look anyway:
     * most locks are released long before their first renewal, and a wake-up
     * per acquire would cost a context switch on the hot path. The poll here
     * only reads the due time: it runs again on the timing thread. */
    n->ops->poll(n, INT64_MIN, 0, &next);
    if (next < k->sleeping_until)
        pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
    return 0;
}

static void keeper_unlink(baton__keeper *k, baton__kept *n, int freeing)
{
    if (!k) {   /* stopped: its client is closing */
        if (freeing) baton__kept_gone(n);
        return;
    }
    pthread_mutex_lock(&k->mu);
    q_unlink(k, n);
    n->jobs_q = 0;
    {
        /* The caller's own job on n (a report removing or freeing its own
         * node) is not waited for. */
        int own = (tls_k == k && tls_node == n) ? tls_job : 0;
        while (n->jobs_run & ~own)
            pthread_cond_wait(&k->idle, &k->mu);
        if (own && freeing) tls_gone = 1;
    }
    if (n->kept) {
        if (n->kprev) n->kprev->knext = n->knext;
        else k->head = n->knext;
        if (n->knext) n->knext->kprev = n->kprev;
        n->kept = 0;
        n->knext = n->kprev = NULL;
    }
    pthread_mutex_unlock(&k->mu);
}

void baton__keeper_remove(baton__keeper *k, baton__kept *n) { keeper_unlink(k, n, 0); }
void baton__keeper_forget(baton__keeper *k, baton__kept *n) { keeper_unlink(k, n, 1); }

void baton__keeper_renewed(baton__keeper *k, baton__kept *n, int lost)
{
    pthread_mutex_lock(&k->mu);
    n->jobs_run &= ~KJOB_KEEP;
    k->inflight--;
    if (k->stop) {
        /* the client is closing: no worker is left to report on */
    } else if (lost) {
        enqueue(k, n, KJOB_REPORT);
    } else {
        wake_if_sooner(k, n);
    }
    pthread_cond_broadcast(&k->idle);
    pthread_mutex_unlock(&k->mu);
}

void baton__keeper_kick(baton__keeper *k)
{
    if (!k) return;
    pthread_mutex_lock(&k->mu);
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
}
