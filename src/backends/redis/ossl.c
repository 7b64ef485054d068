/* Loads OpenSSL on first use (see ossl.h). */
#define BATON_OSSL_IMPL
#include "ossl.h"

#include "baton/sys/backend.h"

#include <dlfcn.h>
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

static void load(void) {
    /* libssl pulls in libcrypto; dlsym on its handle searches both. Never
     * unloaded: connections and contexts may outlive any one engine. */
    void *h = dlopen(BATON_LIBSSL_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_err, sizeof load_err, "cannot load %s: %s", BATON_LIBSSL_SONAME, dlerror());
        load_rc = -1;
        return;
    }
#define BATON_OSSL_SYM(n)                                                                     \
    if (load_rc == 0) {                                                                       \
        void *p = dlsym(h, #n);                                                               \
        if (!p) {                                                                             \
            snprintf(load_err, sizeof load_err, "%s has no %s", BATON_LIBSSL_SONAME, #n);     \
            load_rc = -1;                                                                     \
        } else {                                                                              \
            memcpy(&baton__ossl.n, &p, sizeof p);                                             \
        }                                                                                     \
    }
    BATON_OSSL_FUNCS(BATON_OSSL_SYM)
#undef BATON_OSSL_SYM
}

int baton__ossl_load(void) {
    pthread_once(&once, load);
    if (load_rc) return baton_seterr(BATON_ENOTSUP, 0, "redis: %s", load_err);
    return 0;
}
