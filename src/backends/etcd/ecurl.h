/*
 * libcurl, loaded on the first etcd:// open (ecurl.c) instead of linked:
 * linking it adds nine shared libraries to every program that links baton,
 * and 7-18 ms to every `baton` start, whatever engine it then uses.
 *
 * Include this instead of <curl/curl.h>: the curl_* names used by the etcd
 * backend become calls through the table.
 */
#ifndef BATON_ETCD_ECURL_H
#define BATON_ETCD_ECURL_H

/* curl's type-checking macros would wrap the names redefined below */
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

#define ECURL_FUNCS(X)                                                                   \
    X(CURLcode, curl_global_init, (long))                                                \
    X(CURL *, curl_easy_init, (void))                                                    \
    X(void, curl_easy_cleanup, (CURL *))                                                 \
    X(void, curl_easy_reset, (CURL *))                                                   \
    X(CURLcode, curl_easy_setopt, (CURL *, CURLoption, ...))                             \
    X(CURLcode, curl_easy_perform, (CURL *))                                             \
    X(CURLcode, curl_easy_getinfo, (CURL *, CURLINFO, ...))                              \
    X(const char *, curl_easy_strerror, (CURLcode))                                      \
    X(struct curl_slist *, curl_slist_append, (struct curl_slist *, const char *))       \
    X(void, curl_slist_free_all, (struct curl_slist *))                                  \
    X(CURLM *, curl_multi_init, (void))                                                  \
    X(CURLMcode, curl_multi_add_handle, (CURLM *, CURL *))                               \
    X(CURLMcode, curl_multi_remove_handle, (CURLM *, CURL *))                            \
    X(CURLMcode, curl_multi_perform, (CURLM *, int *))                                   \
    X(CURLMcode, curl_multi_poll, (CURLM *, struct curl_waitfd *, unsigned, int, int *)) \
    X(CURLMcode, curl_multi_cleanup, (CURLM *))

typedef struct {
#define ECURL_FIELD(ret, name, args) ret(*name) args;
    ECURL_FUNCS(ECURL_FIELD)
#undef ECURL_FIELD
} ecurl_table;

extern ecurl_table baton__ecurl;

/* Loads libcurl and initialises it, once: 0, or BATON_ENOTSUP with why. */
int baton__ecurl_load(void);

#ifndef BATON_ECURL_IMPL
#undef curl_global_init
#define curl_global_init (*baton__ecurl.curl_global_init)
#undef curl_easy_init
#define curl_easy_init (*baton__ecurl.curl_easy_init)
#undef curl_easy_cleanup
#define curl_easy_cleanup (*baton__ecurl.curl_easy_cleanup)
#undef curl_easy_reset
#define curl_easy_reset (*baton__ecurl.curl_easy_reset)
#undef curl_easy_setopt
#define curl_easy_setopt (*baton__ecurl.curl_easy_setopt)
#undef curl_easy_perform
#define curl_easy_perform (*baton__ecurl.curl_easy_perform)
#undef curl_easy_getinfo
#define curl_easy_getinfo (*baton__ecurl.curl_easy_getinfo)
#undef curl_easy_strerror
#define curl_easy_strerror (*baton__ecurl.curl_easy_strerror)
#undef curl_slist_append
#define curl_slist_append (*baton__ecurl.curl_slist_append)
#undef curl_slist_free_all
#define curl_slist_free_all (*baton__ecurl.curl_slist_free_all)
#undef curl_multi_init
#define curl_multi_init (*baton__ecurl.curl_multi_init)
#undef curl_multi_add_handle
#define curl_multi_add_handle (*baton__ecurl.curl_multi_add_handle)
#undef curl_multi_remove_handle
#define curl_multi_remove_handle (*baton__ecurl.curl_multi_remove_handle)
#undef curl_multi_perform
#define curl_multi_perform (*baton__ecurl.curl_multi_perform)
#undef curl_multi_poll
#define curl_multi_poll (*baton__ecurl.curl_multi_poll)
#undef curl_multi_cleanup
#define curl_multi_cleanup (*baton__ecurl.curl_multi_cleanup)
#endif

#endif
