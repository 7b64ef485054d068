/* Loads libmariadb on the first open of a MySQL engine (see mydl.h). */
#define BATON_MYDL_IMPL
#include "mydl.h"

#include "util/dl.h"

#include <stdio.h>

#ifndef BATON_LIBMARIADB_SONAME
#define BATON_LIBMARIADB_SONAME "libmariadb.so.3"
#endif

mydl_table baton__my;

/* Connector/C keeps process-wide state (its plugins, its thread keys) that
 * has no safe end while another client may use it: never unloaded. Its auth
 * plugins need none of its names (they get a table of callbacks), so
 * RTLD_LOCAL is fine. */
#define MYDL_SYM(ret, name, args) { #name, &baton__my.name },
static const baton_dl_sym syms[] = { MYDL_FUNCS(MYDL_SYM) };
#undef MYDL_SYM

/* Connector/C must be initialised once per process before threads use it */
static int my_init(char *err, size_t errlen)
{
    if (baton__my.mysql_server_init(0, NULL, NULL) == 0) return 0;
    snprintf(err, errlen, "%s: mysql_library_init failed", BATON_LIBMARIADB_SONAME);
    return -1;
}

static baton_dl_lib lib =
    BATON_DL_LIB(BATON_LIBMARIADB_SONAME, "is MariaDB Connector/C installed?", "mysql", syms, my_init);

int baton__my_load(void)
{
    return baton__dl_lib_load(&lib);
}
