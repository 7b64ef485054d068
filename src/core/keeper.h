/* The keeper: one thread per client that renews leases and reports loss.
 * It knows nothing of locks: it keeps nodes (embedded in whatever needs
 * keeping) and calls their functions. */
#ifndef BATON_CORE_KEEPER_H
#define BATON_CORE_KEEPER_H

#include <stdint.h>

typedef struct baton__keeper baton__keeper;
typedef struct baton__kept baton__kept;

struct baton__kept {
    /* When the node next needs the keeper (monotonic ns; INT64_MAX = never). */
    int64_t (*due)(baton__kept *n);
    /* Does what is due at NOW (a renewal, or finding the lease over).
     * Returns 1 when the node was just lost and report() is to be called. */
    int (*keep)(baton__kept *n, int64_t now);
    /* Tells the application (on_lost), with no keeper mutex held: it may
     * remove or forget its own node, or stop the keeper. */
    void (*report)(baton__kept *n);
    /* the keeper's bookkeeping, guarded by its mutex */
    baton__kept *knext;
    int kept, kbusy;
};

int baton__keeper_start(baton__keeper **out);
void baton__keeper_stop(baton__keeper *k);
/* 0 or BATON_ENOMEM (no thread). */
int baton__keeper_add(baton__keeper *k, baton__kept *n);
/* Also waits until the keeper is done with n (except from n's own report). */
void baton__keeper_remove(baton__keeper *k, baton__kept *n);
/* keeper_remove for a node about to be freed (possibly from its own report). */
void baton__keeper_forget(baton__keeper *k, baton__kept *n);
/* From the keeper thread, inside keep(): no waiting on kbusy. */
void baton__keeper_drop_self(baton__keeper *k, baton__kept *n);
/* Makes the keeper look at its nodes again now (their due times changed). */
void baton__keeper_kick(baton__keeper *k);

#endif
