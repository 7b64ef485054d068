/* Loads OpenSSL on the first use by any engine (see ossl.h). */
#define BATON_OSSL_IMPL
#include "ossl.h"
#include "dl.h"

#ifndef BATON_LIBSSL_SONAME
#define BATON_LIBSSL_SONAME "libssl.so.3"
#endif

baton_ossl baton__ossl;

/* libssl pulls in libcrypto; dlsym on its handle searches both */
#define BATON_OSSL_SYM(n) { #n, &baton__ossl.n },
static const baton_dl_sym syms[] = { BATON_OSSL_FUNCS(BATON_OSSL_SYM) };
#undef BATON_OSSL_SYM

static baton_dl_lib lib = BATON_DL_LIB(BATON_LIBSSL_SONAME, "is libssl3 installed?", "OpenSSL", syms, NULL);

int baton__ossl_load(void)
{
    return baton__dl_lib_load(&lib);
}
