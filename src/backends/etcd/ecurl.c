/* Loads libcurl on first use (see ecurl.h). */
#define BATON_ECURL_IMPL
#include "ecurl.h"

#include "baton/sys/backend.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#ifndef BATON_LIBCURL_SONAME
#define BATON_LIBCURL_SONAME "libcurl.so.4"
#endif

ecurl_table baton__ecurl;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_rc;
static char load_err[256];

static void load(void)
{
    /* never unloaded: handles live in engines that come and go, and libcurl
     * has no safe global cleanup while another thread may use it */
    void *h = dlopen(BATON_LIBCURL_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_err, sizeof load_err, "cannot load %s: %s", BATON_LIBCURL_SONAME, dlerror());
        load_rc = -1;
        return;
    }
#define ECURL_SYM(ret, name, args)                                                              \
    if (load_rc == 0) {                                                                         \
        void *p = dlsym(h, #name);                                                              \
        if (!p) {                                                                               \
            snprintf(load_err, sizeof load_err, "%s has no %s", BATON_LIBCURL_SONAME, #name);   \
            load_rc = -1;                                                                       \
        } else {                                                                                \
            memcpy(&baton__ecurl.name, &p, sizeof p);                                           \
        }                                                                                       \
    }
    ECURL_FUNCS(ECURL_SYM)
#undef ECURL_SYM
    if (load_rc == 0 && baton__ecurl.curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(load_err, sizeof load_err, "curl_global_init failed");
        load_rc = -1;
    }
}

int baton__ecurl_load(void)
{
    pthread_once(&once, load);
    if (load_rc) return baton_seterr(BATON_ENOTSUP, 0, "etcd: %s", load_err);
    return 0;
}
