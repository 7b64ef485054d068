/* The client: URI, backend, keeper, and the objects opened on it. It knows
 * those objects only as members with a destroy and a recheck function, so it
 * depends on neither the lock nor anything else built on it. */
#ifndef BATON_CORE_CLIENT_H
#define BATON_CORE_CLIENT_H

#include "internal.h"
#include "keeper.h"

typedef struct baton__member baton__member;
struct baton__member {
    /* close: release what it holds and free it (unlinked already). */
    void (*destroy)(baton__member *m);
    /* The engine may have lost what it holds: make its renewal due at NOW.
     * 1 when it did (the keeper is then kicked). */
    int (*recheck)(baton__member *m, int64_t now);
    /* The engine no longer holds the grant FENCE (0 = any) of backend state
     * ST (NULL = every state): mark it lost. 1 when it did (the keeper is
     * then kicked to report it). May be NULL. */
    int (*lost)(baton__member *m, void *st, uint64_t fence);
    baton__member *cnext, *cprev;   /* guarded by the client's mutex */
};

struct baton_host {
    pthread_mutex_t mu;          /* held while a backend thread calls in; close clears c */
    struct baton_client *c;
};

struct baton_client {
    struct baton_host host;      /* handed to the backend's attach() */
    char ident[256];             /* the engine's identity (multilock order) */
    const baton_backend *be;
    void *eng;
    baton_uri *uri;
    baton_client_options opts;
    baton__keeper *keeper;
    pthread_mutex_t mu;          /* guards the member list only; never held across I/O */
    baton__member *members;
};

void baton__client_link(struct baton_client *c, baton__member *m);
void baton__client_unlink(struct baton_client *c, baton__member *m);

#endif
