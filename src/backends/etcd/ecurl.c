/* Loads libcurl on first use (see ecurl.h). */
#define BATON_ECURL_IMPL
#include "ecurl.h"

#include "baton/sys/backend.h"

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
#define ECURL_SYM(ret, name, args) { #name, &baton__ecurl.name },
    static const baton_dl_sym syms[] = { ECURL_FUNCS(ECURL_SYM) };
#undef ECURL_SYM
    load_rc = baton_dl_load(BATON_LIBCURL_SONAME, "is libcurl4 installed?", syms, sizeof syms / sizeof syms[0],
                            load_err, sizeof load_err);
    /* libcurl has no safe global cleanup while another thread may use it:
     * initialised once, never ended */
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
