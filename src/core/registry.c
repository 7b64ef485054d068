/* URI scheme → backend. Every scheme baton knows is listed, compiled in or not,
 * so a compiled-out backend answers BATON_EDISABLED instead of "unknown". */
#include "internal.h"
#include <string.h>

extern const baton_backend baton__backend_file;
#ifdef BATON_WITH_REDIS
extern const baton_backend baton__backend_redis;
#endif
#ifdef BATON_WITH_REDLOCK
extern const baton_backend baton__backend_redlock;
#endif
#ifdef BATON_WITH_ZK
extern const baton_backend baton__backend_zk;
#endif
#ifdef BATON_WITH_POSTGRES
extern const baton_backend baton__backend_postgres;
#endif
#ifdef BATON_WITH_SQLITE
extern const baton_backend baton__backend_sqlite;
#endif
#ifdef BATON_WITH_MYSQL
extern const baton_backend baton__backend_mysql;
#endif
#ifdef BATON_WITH_ETCD
extern const baton_backend baton__backend_etcd;
#endif

static const baton_backend *const compiled[] = {
    &baton__backend_file,
#ifdef BATON_WITH_REDIS
    &baton__backend_redis,
#endif
#ifdef BATON_WITH_REDLOCK
    &baton__backend_redlock,
#endif
#ifdef BATON_WITH_ZK
    &baton__backend_zk,
#endif
#ifdef BATON_WITH_POSTGRES
    &baton__backend_postgres,
#endif
#ifdef BATON_WITH_SQLITE
    &baton__backend_sqlite,
#endif
#ifdef BATON_WITH_MYSQL
    &baton__backend_mysql,
#endif
#ifdef BATON_WITH_ETCD
    &baton__backend_etcd,
#endif
};

/* Engines baton has, whether this build compiled them in or not. */
static const char *const known[] = { "file", "redis", "rediss", "redlock", "zk", "zookeeper",
                                     "postgres", "postgresql", "sqlite", "mysql", "mariadb", "etcd", "etcds",
                                     NULL };
/* Engines planned but not written yet: no build flag adds them. */
static const char *const planned[] = {
    NULL,
};

int baton__registry_find(const char *scheme, const baton_backend **out)
{
    for (size_t i = 0; i < sizeof compiled / sizeof compiled[0]; i++) {
        if (compiled[i]->version != BATON_BACKEND_VERSION)
            continue;
        for (const char *const *s = compiled[i]->schemes; *s; s++)
            if (!strcmp(*s, scheme)) {
                *out = compiled[i];
                return 0;
            }
    }
    for (const char *const *s = known; *s; s++)
        if (!strcmp(*s, scheme))
            return baton_seterr(BATON_EDISABLED, 0,
                                "scheme '%s': this backend is not built here (its library was missing "
                                "or it was switched off when baton was built)", scheme);
    for (const char *const *s = planned; *s; s++)
        if (!strcmp(*s, scheme))
            return baton_seterr(BATON_ENOTSUP, 0, "scheme '%s': this engine is not implemented yet", scheme);
    return baton_seterr(BATON_EINVAL, 0, "unknown URI scheme '%s'", scheme);
}
