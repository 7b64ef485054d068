/* Core internals shared by src/core and the in-tree backends. */
#ifndef BATON_CORE_INTERNAL_H
#define BATON_CORE_INTERNAL_H

#include "baton.h"
#include "baton/sys/backend.h"
#include <pthread.h>
#include <stdint.h>

#define BATON_MAX_NAME 1024

struct baton_waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;  /* CLOCK_MONOTONIC */
    unsigned gen;
    int canceled;
};

int baton__waiter_init(baton_waiter *w);
void baton__waiter_destroy(baton_waiter *w);
void baton__waiter_cancel(baton_waiter *w);
void baton__waiter_reset(baton_waiter *w);

/* URI */
int baton__uri_parse(const char *text, baton_uri **out);
void baton__uri_free(baton_uri *u);

/* Owner ids */
int baton__owner_init(baton_owner *o);
void baton__owner_set_thread(baton_owner *o);
unsigned long baton__gettid(void);

/* Registry: the backend for a scheme. BATON_EDISABLED when known but compiled
 * out, BATON_EINVAL when unknown. */
int baton__registry_find(const char *scheme, const baton_backend **out);

/* Keeper: the client's loop thread that renews leases and detects loss. */
typedef struct baton__keeper baton__keeper;
struct baton_lock;
int baton__keeper_start(baton__keeper **out);
void baton__keeper_stop(baton__keeper *k);
int baton__keeper_add(baton__keeper *k, struct baton_lock *l);   /* 0 or BATON_ENOMEM (no thread) */
void baton__keeper_remove(baton__keeper *k, struct baton_lock *l);
void baton__keeper_drop_self(baton__keeper *k, struct baton_lock *l);
/* keeper_remove for a lock about to be freed (possibly from its own on_lost). */
void baton__keeper_forget(baton__keeper *k, struct baton_lock *l);
/* Makes the keeper look at its locks again now (their due times changed). */
void baton__keeper_kick(baton__keeper *k);
/* Called by the keeper for each lock whose renewal is due; *cb is set (with
 * its payload) when the lock was just lost and on_lost is to be called. */
void baton__lock_keep(struct baton_lock *l, int64_t now, baton_lost_cb *cb, void **payload);
int64_t baton__lock_next_due(struct baton_lock *l);

/* Client internals the lock front-end needs. */
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
    pthread_mutex_t mu;          /* guards the list of locks only; never held across I/O */
    struct baton_lock *locks;
};

void baton__client_link(struct baton_client *c, struct baton_lock *l);
void baton__client_unlink(struct baton_client *c, struct baton_lock *l);

#endif
