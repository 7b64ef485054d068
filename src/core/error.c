/* The error list and the thread-local last error. */
#include <pthread.h>
#include "internal.h"
#include <stdarg.h>
#include <stdio.h>

static _Thread_local baton_error tl_err;
static _Thread_local char tl_msg[4096];   /* room for a DDL an engine asks a DBA to run */

const char *baton_strerror(int code)
{
    switch (code) {
#define BATON__ERR_CASE(name, value, msg) case value: return msg;
        BATON_ERRORS(BATON__ERR_CASE)
#undef BATON__ERR_CASE
    }
    return "unknown error";
}

const baton_error *baton_error_last(void)
{
    if (!tl_err.message)
        tl_err.message = tl_err.code ? baton_strerror(tl_err.code) : "";
    return &tl_err;
}

void baton_error_clear(void)
{
    tl_err.code = 0;
    tl_err.native = 0;
    tl_err.message = "";
}

int baton_seterr(int code, long native, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_msg, sizeof tl_msg, fmt, ap);
    va_end(ap);
    tl_err.code = code;
    tl_err.native = native;
    tl_err.message = tl_msg;
    return code;
}

const char *baton_version(void)
{
    return BATON_VERSION_STRING;
}

static baton_log_cb g_log_cb;
static void *g_log_payload;
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;

void baton_log_set(baton_log_cb cb, void *payload)
{
    pthread_mutex_lock(&g_log_mu);
    g_log_cb = cb;
    g_log_payload = payload;
    pthread_mutex_unlock(&g_log_mu);
}

void baton_log(int level, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    pthread_mutex_lock(&g_log_mu);
    baton_log_cb cb = g_log_cb;
    void *payload = g_log_payload;
    pthread_mutex_unlock(&g_log_mu);
    if (!cb) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cb(level, msg, payload);
}
