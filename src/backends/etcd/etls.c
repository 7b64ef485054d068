/* Loads OpenSSL for etcds:// over gRPC on first use (see etls.h). */
#define BATON_ETLS_IMPL
#include "etls.h"

#include "baton/sys/backend.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#ifndef BATON_LIBSSL_SONAME
#define BATON_LIBSSL_SONAME "libssl.so.3"
#endif

etls_table baton__etls;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_rc;
static char load_err[256];

static void load(void)
{
    /* libssl pulls in libcrypto; dlsym on its handle searches both */
#define ETLS_SYM(n) { #n, &baton__etls.n },
    static const baton_dl_sym syms[] = { ETLS_FUNCS(ETLS_SYM) };
#undef ETLS_SYM
    load_rc = baton_dl_load(BATON_LIBSSL_SONAME, "is libssl3 installed?", syms, sizeof syms / sizeof syms[0], load_err,
                            sizeof load_err);
}

int etls_load(void)
{
    pthread_once(&once, load);
    if (load_rc) return baton_seterr(BATON_ENOTSUP, 0, "etcd: TLS for gRPC: %s", load_err);
    return 0;
}
