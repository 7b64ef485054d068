/* The keeper: one thread per client that renews leases before they run out and
 * declares a lock LOST the moment its monotonic lease deadline passes. It holds
 * its own mutex only while scanning; renewals run without it, so adding or
 * removing a lock never waits for a round trip of another lock. */
#include "keeper.h"
#include "baton/sys/backend.h"
#include <pthread.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#define KEEPER_LINGER_NS 1000000000LL

struct baton__keeper {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* CLOCK_MONOTONIC; wakes the loop */
    pthread_cond_t idle;    /* signalled when a lock stops being kept */
    baton__kept *head;
    int64_t sleeping_until;   /* when the loop will look again on its own */
    int stop;
    int started;              /* the thread runs (started by the first leased lock) */
    baton__kept *cur;         /* the node being kept (or whose report runs) */
    int cur_gone;             /* ... was freed meanwhile, by its own on_lost */
    int self_free;            /* the client was closed from on_lost: the thread frees k */
};

static int on_keeper(baton__keeper *k)
{
    return k->started && pthread_equal(pthread_self(), k->th);
}

static void keeper_free(baton__keeper *k)
{
    pthread_cond_destroy(&k->cv);
    pthread_cond_destroy(&k->idle);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

static void *keeper_main(void *arg)
{
    baton__keeper *k = arg;
    int lingered = 0;
    pthread_mutex_lock(&k->mu);
    while (!k->stop) {
        int64_t now = baton_now_ns(), due = INT64_MAX;
        baton__kept *l, *run = NULL;
        for (l = k->head; l; l = l->knext) {
            int64_t d = l->due(l);
            if (d <= now && !l->kbusy) { run = l; break; }
            if (d < due) due = d;
        }
        if (run) {
            run->kbusy = 1;
            k->cur = run;
            k->cur_gone = 0;
            pthread_mutex_unlock(&k->mu);
            /* report (on_lost) runs here, with no mutex of ours held and
             * the node still marked busy (so another thread's free waits
             * for it); calls from it on this very node do not wait for
             * that mark (see keeper_unlink), and a free sets cur_gone. */
            if (run->keep(run, now)) run->report(run);
            pthread_mutex_lock(&k->mu);
            if (!k->cur_gone) run->kbusy = 0;
            k->cur = NULL;
            k->cur_gone = 0;
            pthread_cond_broadcast(&k->idle);
            continue;
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
        } else {
            struct timespec ts = { due / 1000000000LL, due % 1000000000LL };
            pthread_cond_timedwait(&k->cv, &k->mu, &ts);
        }
    }
    int self_free = k->self_free;
    pthread_mutex_unlock(&k->mu);
    if (self_free) keeper_free(k);
    return NULL;
}

/* The thread starts with the first leased lock: a client of an engine
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
    pthread_condattr_destroy(&ca);
    k->sleeping_until = INT64_MAX;
    *out = k;
    return 0;
}

/* k->mu held. */
static int keeper_launch(baton__keeper *k)
{
    sigset_t all, old;
    if (k->started) return 0;
    /* The keeper never takes process signals: they belong to the application. */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int e = pthread_create(&k->th, NULL, keeper_main, k);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e) return baton_seterr(BATON_ENOMEM, e, "cannot start the keeper thread");
    k->started = 1;
    return 0;
}

void baton__keeper_stop(baton__keeper *k)
{
    if (!k) return;
    pthread_mutex_lock(&k->mu);
    k->stop = 1;
    int started = k->started;
    if (on_keeper(k)) {
        /* baton_client_close from on_lost: the thread cannot join itself; it
         * leaves its loop when the callback returns and frees k. */
        k->self_free = 1;
        pthread_detach(k->th);
        pthread_mutex_unlock(&k->mu);
        return;
    }
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
    if (started) pthread_join(k->th, NULL);
    keeper_free(k);
}

int baton__keeper_add(baton__keeper *k, baton__kept *l)
{
    pthread_mutex_lock(&k->mu);
    int rc = keeper_launch(k);
    if (rc) {
        pthread_mutex_unlock(&k->mu);
        return rc;
    }
    if (!l->kept) {
        l->knext = k->head;
        k->head = l;
        l->kept = 1;
    }
    /* Wake the loop only when this lock is due before it would look anyway:
     * most locks are released long before their first renewal, and a wake-up
     * per acquire would cost a context switch on the hot path. */
    if (l->due(l) < k->sleeping_until)
        pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
    return 0;
}

/* Also waits until the keeper is done with l, so the caller may free it;
 * except on the keeper thread itself, inside l's on_lost, which would wait
 * for itself. */
static void keeper_unlink(baton__keeper *k, baton__kept *l, int freeing)
{
    pthread_mutex_lock(&k->mu);
    if (on_keeper(k) && k->cur == l) {
        if (freeing) k->cur_gone = 1;
    } else {
        while (l->kbusy)
            pthread_cond_wait(&k->idle, &k->mu);
    }
    if (l->kept) {
        baton__kept **pp = &k->head;
        while (*pp && *pp != l) pp = &(*pp)->knext;
        if (*pp) *pp = l->knext;
        l->kept = 0;
        l->knext = NULL;
    }
    pthread_mutex_unlock(&k->mu);
}

void baton__keeper_remove(baton__keeper *k, baton__kept *l) { keeper_unlink(k, l, 0); }
void baton__keeper_forget(baton__keeper *k, baton__kept *l) { keeper_unlink(k, l, 1); }

/* Called from the keeper thread itself (inside keep), so no waiting on kbusy. */
void baton__keeper_drop_self(baton__keeper *k, baton__kept *l)
{
    pthread_mutex_lock(&k->mu);
    if (l->kept) {
        baton__kept **pp = &k->head;
        while (*pp && *pp != l) pp = &(*pp)->knext;
        if (*pp) *pp = l->knext;
        l->kept = 0;
        l->knext = NULL;
    }
    pthread_mutex_unlock(&k->mu);
}

void baton__keeper_kick(baton__keeper *k)
{
    pthread_mutex_lock(&k->mu);
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
}
