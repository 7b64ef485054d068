/* Loads libcurl on first use (see ecurl.h). */
#define BATON_ECURL_IMPL
#include "ecurl.h"

#include "util/dl.h"

#include <stdio.h>

#ifndef BATON_LIBCURL_SONAME
#define BATON_LIBCURL_SONAME "libcurl.so.4"
#endif

ecurl_table baton__ecurl;

#define ECURL_SYM(ret, name, args) { #name, &baton__ecurl.name },
static const baton_dl_sym syms[] = { ECURL_FUNCS(ECURL_SYM) };
#undef ECURL_SYM

/* libcurl has no safe global cleanup while another thread may use it:
 * initialised once, never ended */
static int curl_init(char *err, size_t errlen)
{
    if (baton__ecurl.curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK) return 0;
    snprintf(err, errlen, "curl_global_init failed");
    return -1;
}

static baton_dl_lib lib = BATON_DL_LIB(BATON_LIBCURL_SONAME, "is libcurl4 installed?", "etcd", syms, curl_init);

int baton__ecurl_load(void)
{
    return baton__dl_lib_load(&lib);
}
