/*
 * Engine counters: the one call besides the public API that `baton bench`
 * makes. Internal to baton (not installed, no stability promise); it reaches
 * the backend's engine_ops member (baton/sys/backend.h).
 */
#ifndef BATON_SYS_STATS_H
#define BATON_SYS_STATS_H

#include "baton.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The operations C's engine has served, all its clients together, as the
 * engine counts them: FN(ARG, OP, COUNT) for each kind (OP may come more than
 * once, from the members of a quorum: the counts add up). 0; BATON_ENOTSUP
 * when the engine keeps no such counts; or an error (baton_error_last()), FN
 * not called. */
BATON_EXTERN(int) baton__client_engine_ops(baton_client *c,
                                           void (*fn)(void *arg, const char *op, uint64_t count), void *arg);

#ifdef __cplusplus
}
#endif
#endif
