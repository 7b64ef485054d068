/* Core internals shared by src/core and the in-tree backends. */
#ifndef BATON_CORE_INTERNAL_H
#define BATON_CORE_INTERNAL_H

#include "baton.h"
#include "baton/sys/backend.h"
#include <pthread.h>
#include <stdint.h>

#define BATON_MAX_NAME 1024

/* The mutex and condition variable a waiter parks on are one of a fixed
 * set shared by every waiter of the process (util.c): a waiter is in every
 * lock handle, and 88 bytes of its own per handle were most of what 100,000
 * locks cost. Waiters sharing a pair see each other's wake-ups as spurious
 * and park again (the generation decides). */
struct baton_waiter {
    unsigned gen;
    int canceled;
    void (*notify)(void *arg);  /* baton_waiter_set_notify: a native async waiter */
    void *notify_arg;
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

/* An engine as the registry lists it (src/include/baton/sys/engines.h): its description,
 * always there, and its table, NULL when the engine is not built. Each
 * engine's spec.c defines baton__engine_NAME. */
typedef struct {
    const baton_engine_info *info;
    const baton_backend *table;
} baton__engine;

/* Registry: the backend for a scheme. BATON_EDISABLED when known but compiled
 * out, BATON_EINVAL when unknown or when the table disagrees with the
 * description. */
int baton__registry_find(const char *scheme, const baton_backend **out);
/* The primitives a table provides (BATON_PRIM_*), and the check the
 * registry makes of a table against its description. */
unsigned baton__backend_prims(const baton_backend *b);
int baton__backend_check(const baton_backend *b, const baton_engine_info *e);

/* URI options against an engine's spec (src/core/options.c). */
int baton__opts_parse(const baton_engine_info *e, const baton_uri *u, baton_opts **out);
void baton__opts_free(baton_opts *o);

/* Versioned option structs: copies the part of SRC its version declares
 * (SIZES[v - 1] bytes for version v, 1..NVERS) over DST, which holds the
 * defaults. BATON_EINVAL naming WHAT on an unknown version. */
int baton__opts_copy(void *dst, const void *src, const size_t *sizes, unsigned nvers, const char *what);

#endif
