/*
 * A client library an engine loads on its first open (libpq, libmariadb,
 * libcurl, libssl), through the core's baton_dl_load, once per process:
 * the one copy of the "load it once, remember why it failed" logic every
 * shim (postgres/pqdl.c, mysql/mydl.c, etcd/ecurl.c, util/ossl.c) had.
 *
 *     static const baton_dl_sym syms[] = { ... };
 *     static baton_dl_lib lib = BATON_DL_LIB("libpq.so.5", "is libpq installed?", "postgres", syms, NULL);
 *     int baton__pq_load(void) { return baton__dl_lib_load(&lib); }
 */
#ifndef BATON_UTIL_DL_H
#define BATON_UTIL_DL_H

#include "baton/sys/backend.h"

#include <pthread.h>
#include <stddef.h>

typedef struct {
    const char *soname;   /* "libpq.so.5" */
    const char *hint;     /* said when it cannot be loaded: "is libpq installed?" */
    const char *who;      /* the message's prefix: "postgres" */
    const baton_dl_sym *syms;
    size_t nsyms;
    /* NULL, or run once right after a successful load (a library's global
     * initialisation): 0, or -1 with ERR (ERRLEN bytes) saying why */
    int (*init)(char *err, size_t errlen);
    /* private */
    pthread_mutex_t mu;
    int state;            /* atomic: 0 not tried, 1 loaded, -1 failed (for good, as dlopen would again) */
    char err[320];
} baton_dl_lib;

#define BATON_DL_LIB(soname, hint, who, syms, init) \
    { (soname), (hint), (who), (syms), sizeof(syms) / sizeof((syms)[0]), (init), PTHREAD_MUTEX_INITIALIZER, 0, { 0 } }

/* 0 once L's library is loaded and every slot filled (thread-safe; loads at
 * most once per process), or BATON_ENOTSUP with "WHO: why" set. */
int baton__dl_lib_load(baton_dl_lib *l);

#endif
