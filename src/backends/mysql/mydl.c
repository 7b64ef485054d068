/* Loads libmariadb on the first open of a MySQL engine (see mydl.h). */
#define BATON_MYDL_IMPL
#include "mydl.h"

#include "baton/sys/backend.h"

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
    /* Connector/C keeps process-wide state (its plugins, its thread keys)
     * that has no safe end while another client may use it: never unloaded.
     * Its auth plugins need none of its names (they get a table of
     * callbacks), so RTLD_LOCAL is fine. */
#define MYDL_SYM(ret, name, args) { #name, &baton__my.name },
    static const baton_dl_sym syms[] = { MYDL_FUNCS(MYDL_SYM) };
#undef MYDL_SYM
    load_rc = baton_dl_load(BATON_LIBMARIADB_SONAME, "is MariaDB Connector/C installed?", syms,
                            sizeof syms / sizeof syms[0], load_err, sizeof load_err);
    /* Connector/C must be initialised once per process before threads use it */
    if (load_rc == 0 && baton__my.mysql_server_init(0, NULL, NULL) != 0) {
        snprintf(load_err, sizeof load_err, "%s: mysql_library_init failed", BATON_LIBMARIADB_SONAME);
        load_rc = -1;
    }
}

int baton__my_load(void)
{
    pthread_once(&once, load);
    if (load_rc) return baton_seterr(BATON_ENOTSUP, 0, "mysql: %s", load_err);
    return 0;
}
