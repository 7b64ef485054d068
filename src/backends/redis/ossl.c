/* Loads OpenSSL on first use (see ossl.h). */
#define BATON_OSSL_IMPL
#include "ossl.h"

#include "baton/sys/backend.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#ifndef BATON_LIBSSL_SONAME
#define BATON_LIBSSL_SONAME "libssl.so.3"
#endif

baton_ossl baton__ossl;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_rc;
static char load_err[256];

static void load(void)
{
    /* libssl pulls in libcrypto; dlsym on its handle searches both */
#define BATON_OSSL_SYM(n) { #n, &baton__ossl.n },
    static const baton_dl_sym syms[] = { BATON_OSSL_FUNCS(BATON_OSSL_SYM) };
#undef BATON_OSSL_SYM
    load_rc = baton_dl_load(BATON_LIBSSL_SONAME, "is libssl3 installed?", syms, sizeof syms / sizeof syms[0], load_err,
                            sizeof load_err);
}

int baton__ossl_load(void) {
    pthread_once(&once, load);
    if (load_rc) return baton_seterr(BATON_ENOTSUP, 0, "redis: %s", load_err);
    return 0;
}
