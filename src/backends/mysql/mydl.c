/* Loads libmariadb on the first open of a MySQL engine (see mydl.h). */
#define BATON_MYDL_IMPL
#include "mydl.h"

#include "baton/sys/backend.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#ifndef BATON_LIBMARIADB_SONAME
#define BATON_LIBMARIADB_SONAME "libmariadb.so.3"
#endif

mydl_table baton__my;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_rc;
static char load_err[320];

static void load(void)
{
    /* Never unloaded: Connector/C keeps process-wide state (its plugins,
     * its thread keys) that has no safe end while another client may use
     * it. RTLD_LOCAL keeps its names out of the program's namespace (its
     * auth plugins need none of them: they get a table of callbacks). */
    void *h = dlopen(BATON_LIBMARIADB_SONAME, RTLD_NOW | RTLD_LOCAL);
    void *p;

    if (!h) {
        const char *why = dlerror();
        snprintf(load_err, sizeof load_err, "cannot load %s (is MariaDB Connector/C installed?): %s",
                 BATON_LIBMARIADB_SONAME, why ? why : "unknown error");
        load_rc = -1;
        return;
    }
    /* every symbol or none: a table half filled is never used */
#define MYDL_SYM(ret, name, args)                                                                     \
    if (load_rc == 0) {                                                                               \
        if (!(p = dlsym(h, #name))) {                                                                 \
            snprintf(load_err, sizeof load_err, "%s has no %s: not MariaDB Connector/C 3?",          \
                     BATON_LIBMARIADB_SONAME, #name);                                                 \
            load_rc = -1;                                                                             \
        } else {                                                                                      \
            memcpy(&baton__my.name, &p, sizeof p); /* object to function pointer, without a cast */  \
        }                                                                                             \
    }
    MYDL_FUNCS(MYDL_SYM)
#undef MYDL_SYM
    /* Connector/C must be initialised once per process before threads use it */
    if (load_rc == 0 && baton__my.mysql_server_init(0, NULL, NULL) != 0) {
        snprintf(load_err, sizeof load_err, "%s: mysql_library_init failed", BATON_LIBMARIADB_SONAME);
        load_rc = -1;
    }
    if (load_rc) {
        memset(&baton__my, 0, sizeof baton__my);
        dlclose(h);
    }
}

int baton__my_load(void)
{
    pthread_once(&once, load);
    if (load_rc) return baton_seterr(BATON_ENOTSUP, 0, "mysql: %s", load_err);
    return 0;
}
