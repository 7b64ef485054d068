/* Loads libpq on the first open of a PostgreSQL engine (see pqdl.h). */
#define BATON_PQDL_IMPL
#include "pqdl.h"

#include "baton/sys/backend.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#ifndef BATON_LIBPQ_SONAME
#define BATON_LIBPQ_SONAME "libpq.so.5"
#endif

pqdl_table baton__pq;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_rc;
static char load_err[320];

static void load(void)
{
    /* Never unloaded: connections outlive any one engine in the pool's
     * sense, and a later open would pay the load again. RTLD_LOCAL keeps
     * libpq's names out of the program's namespace, as when it was not
     * loaded at all. */
    void *h = dlopen(BATON_LIBPQ_SONAME, RTLD_NOW | RTLD_LOCAL);
    void *p;

    if (!h) {
        const char *why = dlerror();
        snprintf(load_err, sizeof load_err, "cannot load %s (is libpq installed?): %s", BATON_LIBPQ_SONAME,
                 why ? why : "unknown error");
        load_rc = -1;
        return;
    }
    /* every symbol or none: a table half filled is never used */
#define PQDL_SYM(ret, name, args)                                                                      \
    if (load_rc == 0) {                                                                                \
        if (!(p = dlsym(h, #name))) {                                                                  \
            snprintf(load_err, sizeof load_err, "%s has no %s: too old a libpq?", BATON_LIBPQ_SONAME, \
                     #name);                                                                           \
            load_rc = -1;                                                                              \
        } else {                                                                                       \
            memcpy(&baton__pq.name, &p, sizeof p); /* object to function pointer, without a cast */   \
        }                                                                                              \
    }
    PQDL_FUNCS(PQDL_SYM)
#undef PQDL_SYM
    if (load_rc) {
        memset(&baton__pq, 0, sizeof baton__pq);
        dlclose(h);
    }
}

int baton__pq_load(void)
{
    pthread_once(&once, load);
    if (load_rc) return baton_seterr(BATON_ENOTSUP, 0, "postgres: %s", load_err);
    return 0;
}
