/* Loads OpenSSL for etcds:// over gRPC on first use (see etls.h). */
#define BATON_ETLS_IMPL
#include "etls.h"

#include "baton/sys/backend.h"

#include <dlfcn.h>
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
    /* libssl pulls in libcrypto; dlsym on its handle searches both. Never
     * unloaded: contexts and connections live in engines that come and go. */
    void *h = dlopen(BATON_LIBSSL_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_err, sizeof load_err, "cannot load %s: %s", BATON_LIBSSL_SONAME, dlerror());
        load_rc = -1;
        return;
    }
#define ETLS_SYM(n)                                                                           \
    if (load_rc == 0) {                                                                       \
        void *p = dlsym(h, #n);                                                               \
        if (!p) {                                                                             \
            snprintf(load_err, sizeof load_err, "%s has no %s", BATON_LIBSSL_SONAME, #n);     \
            load_rc = -1;                                                                     \
        } else {                                                                              \
            memcpy(&baton__etls.n, &p, sizeof p);                                             \
        }                                                                                     \
    }
    ETLS_FUNCS(ETLS_SYM)
#undef ETLS_SYM
}

int etls_load(void)
{
    pthread_once(&once, load);
    if (load_rc) return baton_seterr(BATON_ENOTSUP, 0, "etcd: TLS for gRPC: %s", load_err);
    return 0;
}
