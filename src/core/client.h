/* The client: URI, backend, keeper, and the objects opened on it. It knows
 * those objects only as members with a destroy and a recheck function, so it
 * depends on neither the lock nor anything else built on it. */
#ifndef BATON_CORE_CLIENT_H
#define BATON_CORE_CLIENT_H

#include "internal.h"
#include "keeper.h"

typedef struct baton__member baton__member;
typedef struct baton__gate baton__gate;
typedef struct baton__async baton__async;
typedef struct baton__aop baton__aop;

/* Where a member stands with its client. */
enum { MEMBER_LIVE, MEMBER_CLOSING, MEMBER_DEAD };

typedef struct {
    /* Release what it holds on the engine and free its engine state (the
     * handle itself stays for its owner to free). Called once, with no
     * call through the member in flight. */
    void (*destroy)(baton__member *m);
    /* Frees the handle (after destroy, or when it never had engine state). */
    void (*free_handle)(baton__member *m);
    /* Wakes a call of this member blocked in the engine (close). May be NULL. */
    void (*cancel)(baton__member *m);
    /* The engine may have lost what it holds: make its renewal due at NOW.
     * 1 when it did (the keeper is then kicked). May be NULL. */
    int (*recheck)(baton__member *m, int64_t now);
    /* The engine no longer holds the grant FENCE (0 = any) of backend state
     * ST (NULL = every state): mark it lost. 1 when it did (the keeper is
     * then kicked to report it). May be NULL. */
    int (*lost)(baton__member *m, void *st, uint64_t fence);
} baton__member_ops;

/* One per handle (100,000 locks, 100,000 members): the functions are shared. */
struct baton__member {
    const baton__member_ops *ops;   /* swapped under gate->mu (an election hooks cancel) */
    baton__gate *gate;              /* outlives the client while handles remain */
    int mstate;                     /* MEMBER_*; guarded by gate->mu */
    int free_pending;               /* freed by its owner while its client closed */
    baton__member *cnext, *cprev;   /* guarded by gate->mu */
};

/* What a handle shares with its client and keeps after the client is gone:
 * the count of calls in flight (close waits for them) and the member list.
 * Freed by the last of the client and its handles. */
struct baton__gate {
    pthread_mutex_t mu;          /* never held across I/O */
    pthread_cond_t cv;           /* active reached 0 */
    int refs;
    int closing;
    int active;
    baton__member *members;
};

/* Links M to C (0), or BATON_ECANCELED when C is closing. */
/* The event-loop API's close steps (async.c): before the client stops
 * taking calls, and once every call has left. */
void baton__async_close_begin(struct baton_client *c);
void baton__async_close_end(struct baton_client *c);

int baton__client_link(struct baton_client *c, baton__member *m);
/* Every public call through a handle: 0 and the client stays open until
 * leave, or BATON_ECANCELED (error set) when the client is closed or closing. */
int baton__member_enter(baton__member *m);
void baton__member_leave(baton__member *m);
/* The owner's free of a handle: destroys and frees it now, or (while the
 * client closes) leaves that to the close. */
void baton__member_free(baton__member *m);

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
    baton__gate *gate;
    baton__async *async;         /* the event-loop API's context (async.c); made on first use */
};

#endif
