/* Loads libpq on the first open of a PostgreSQL engine (see pqdl.h). */
#define BATON_PQDL_IMPL
#include "pqdl.h"

#include "util/dl.h"

#ifndef BATON_LIBPQ_SONAME
#define BATON_LIBPQ_SONAME "libpq.so.5"
#endif

pqdl_table baton__pq;

#define PQDL_SYM(ret, name, args) { #name, &baton__pq.name },
static const baton_dl_sym syms[] = { PQDL_FUNCS(PQDL_SYM) };
#undef PQDL_SYM

static baton_dl_lib lib = BATON_DL_LIB(BATON_LIBPQ_SONAME, "is libpq installed?", "postgres", syms, NULL);

int baton__pq_load(void)
{
    return baton__dl_lib_load(&lib);
}
