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

#endif
