/* Work queues: a taken item is a lock on the engine's taker state (lease,
 * renewal, loss and on_lost come from the lock), plus a copy of its bytes.
 * Done is the lock's release with the engine's done in place of its
 * release; return is the plain release. */
#include "sync.h"
#include <stdlib.h>
#include <string.h>

struct baton_queue {
    sync_obj o;                 /* first: sync.c frees the handle through it */
    baton_queue_options opts;
    pthread_mutex_t mu;
    baton_lock *taking;         /* the take in flight, for cancel */
    int cancel_kept;            /* a cancel with no take in flight: for the next */
};

struct baton_queue_item {
    baton_lock *l;
    const baton_queue_methods *qm;
    baton_queue_options opts;
    char *data;
    size_t len;
};

static void queue_on_free(sync_obj *o)
{
    pthread_mutex_destroy(&((baton_queue *)o)->mu);
}

int baton_queue_open(baton_queue **out, baton_client *c, const char *name, const baton_queue_options *opts)
{
    static const size_t sizes[] = { sizeof(baton_queue_options) };
    baton_queue_options o = BATON_QUEUE_OPTIONS_INIT;
    baton_queue *q;
    int rc;
    NEED(out, "baton_queue_open");
    *out = NULL;
    if ((rc = baton__opts_copy(&o, opts, sizes, BATON_QUEUE_OPTIONS_VERSION, "queue options"))) return rc;
    if (!(q = calloc(1, sizeof *q))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    pthread_mutex_init(&q->mu, NULL);
    q->opts = o;
    if ((rc = baton__sync_open(&q->o, c, name, c ? c->be->queue : NULL, c && c->be->queue ? c->be->queue->create : NULL,
                               c && c->be->queue ? c->be->queue->destroy : NULL, "work queue"))) {
        pthread_mutex_destroy(&q->mu);
        free(q);
        return rc;
    }
    q->o.on_free = queue_on_free;
    *out = q;
    return 0;
}

int baton_queue_put(baton_queue *q, const void *data, size_t len)
{
    NEED(q && data, "baton_queue_put");
    if (len == 0 || len > BATON_QUEUE_ITEM_MAX)
        return baton_seterr(BATON_EINVAL, 0, "a queue item is 1 to %d bytes, not %zu", BATON_QUEUE_ITEM_MAX, len);
    ENTER(&q->o);
    LEAVE(&q->o, q->o.c->be->queue->put(q->o.c->eng, q->o.st, data, len));
}

static void item_lost(baton_lock *l, void *payload)
{
    baton_queue_item *it = payload;
    (void)l;
    if (it->opts.on_lost) it->opts.on_lost(it, it->opts.on_lost_payload);
}

static void item_free_mem(baton_queue_item *it)
{
    free(it->data);
    free(it);
}

/* The item's bytes, copied while its lock is ours. */
static int item_copy(baton_queue_item *it)
{
    const char *d = NULL;
    size_t n = 0;
    int rc;
    baton__lock_io_enter(it->l);
    rc = it->qm->item(it->l->c->eng, it->l->st, &d, &n);
    if (!rc && !(it->data = malloc(n + 1))) rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if (!rc) {
        if (n) memcpy(it->data, d, n);
        it->data[n] = 0;
        it->len = n;
    }
    baton__lock_io_leave(it->l);
    return rc;
}

static int take_begin(baton_queue *q, baton_lock *l)
{
    pthread_mutex_lock(&q->mu);
    if (q->cancel_kept) {
        q->cancel_kept = 0;
        pthread_mutex_unlock(&q->mu);
        return baton_seterr(BATON_ECANCELED, 0, "queue '%s': take canceled (before it started)", q->o.name);
    }
    if (q->taking) {
        pthread_mutex_unlock(&q->mu);
        return baton_seterr(BATON_EINVAL, 0, "queue '%s': another thread is taking through this handle", q->o.name);
    }
    q->taking = l;
    pthread_mutex_unlock(&q->mu);
    return 0;
}

static void take_end(baton_queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->taking = NULL;
    pthread_mutex_unlock(&q->mu);
}

int baton_queue_take(baton_queue *q, baton_queue_item **item, int64_t wait_ms)
{
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    baton_queue_item *it;
    void *tst = NULL;
    int rc;
    NEED(q && item, "baton_queue_take");
    *item = NULL;
    if (!(it = calloc(1, sizeof *it))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    it->opts = q->opts;
    lo.lease_ms = q->opts.lease_ms;
    lo.on_lost = item_lost;
    lo.on_lost_payload = it;
    if ((rc = baton__member_enter(&q->o.cm))) goto fail;
    it->qm = q->o.c->be->queue;
    if ((rc = it->qm->taker(q->o.c->eng, q->o.st, &lo, &tst))) {
        baton__member_leave(&q->o.cm);
        goto fail;
    }
    if ((rc = baton__lock_create(&it->l, q->o.c, q->o.name, &lo, tst))) {
        q->o.c->be->lock->destroy(q->o.c->eng, tst);
        baton__member_leave(&q->o.cm);
        goto fail;
    }
    baton__member_leave(&q->o.cm);
    if ((rc = take_begin(q, it->l))) goto fail;
    rc = baton_lock_acquire(it->l, wait_ms);
    take_end(q);
    if (rc == BATON_ELOCKED)
        rc = baton_seterr(wait_ms ? BATON_ETIMEDOUT : BATON_ENOENT, 0, "queue '%s': no item %s", q->o.name,
                          wait_ms ? "came in time" : "waiting");
    if (rc) goto fail;
    if ((rc = item_copy(it))) {
        baton_lock_release(it->l);
        goto fail;
    }
    *item = it;
    return 0;
fail:
    if (it->l) baton_lock_free(it->l);
    item_free_mem(it);
    return rc;
}

int baton_queue_size(baton_queue *q, uint64_t *waiting)
{
    uint64_t n = 0;
    int rc;
    NEED(q && waiting, "baton_queue_size");
    ENTER(&q->o);
    if (!q->o.c->be->queue->size)
        LEAVE(&q->o, baton_seterr(BATON_ENOTSUP, 0, "the %s backend cannot count a queue", q->o.c->be->info->name));
    rc = q->o.c->be->queue->size(q->o.c->eng, q->o.st, &n);
    if (!rc) *waiting = n;
    LEAVE(&q->o, rc);
}

int baton_queue_cancel(baton_queue *q)
{
    NEED(q, "baton_queue_cancel");
    pthread_mutex_lock(&q->mu);
    if (q->taking) baton_lock_cancel(q->taking);
    else q->cancel_kept = 1;
    pthread_mutex_unlock(&q->mu);
    return 0;
}

void baton_queue_free(baton_queue *q)
{
    if (q) baton__member_free(&q->o.cm);
}

const char *baton_queue_item_data(const baton_queue_item *it, size_t *len)
{
    if (len) *len = it ? it->len : 0;
    return it ? it->data : NULL;
}

int baton_queue_item_held(const baton_queue_item *it) { return it ? baton_lock_held(it->l) : 0; }

uint64_t baton_queue_item_fence(const baton_queue_item *it) { return it ? baton_lock_fence(it->l) : 0; }

int baton_queue_item_deadline(const baton_queue_item *it, int64_t *mono_ns)
{
    NEED(it, "baton_queue_item_deadline");
    return baton_lock_deadline(it->l, mono_ns);
}

int baton_queue_done(baton_queue_item *it)
{
    int rc;
    NEED(it, "baton_queue_done");
    if ((rc = baton__member_enter(&it->l->cm)) == 0) {
        rc = baton__lock_release_with(it->l, it->qm->done);
        baton__member_leave(&it->l->cm);
    }
    if (rc == BATON_ENOTHELD) rc = baton_seterr(BATON_ELOST, 0, "queue '%s': the item was given back before done",
                                                it->l->name);
    baton_lock_free(it->l);
    item_free_mem(it);
    return rc;
}

int baton_queue_return(baton_queue_item *it)
{
    int rc;
    NEED(it, "baton_queue_return");
    rc = baton_lock_release(it->l);
    baton_lock_free(it->l);
    item_free_mem(it);
    return rc;
}

void baton_queue_item_free(baton_queue_item *it)
{
    if (!it) return;
    /* freeing the lock gives the item back if it is still ours */
    baton_lock_free(it->l);
    item_free_mem(it);
}
