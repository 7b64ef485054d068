/* Loads libpq on the first open of a PostgreSQL engine (see pqdl.h). */
#define BATON_PQDL_IMPL
#include "pqdl.h"

#include "baton/sys/backend.h"

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
#define PQDL_SYM(ret, name, args) { #name, &baton__pq.name },
    static const baton_dl_sym syms[] = { PQDL_FUNCS(PQDL_SYM) };
#undef PQDL_SYM
    load_rc = baton_dl_load(BATON_LIBPQ_SONAME, "is libpq installed?", syms, sizeof syms / sizeof syms[0], load_err,
                            sizeof load_err);
}

int baton__pq_load(void)
{
    pthread_once(&once, load);
    if (load_rc) return baton_seterr(BATON_ENOTSUP, 0, "postgres: %s", load_err);
    return 0;
}
