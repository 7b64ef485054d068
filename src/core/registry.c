/* URI scheme → engine. Every engine baton knows is listed (src/include/baton/sys/engines.h),
 * compiled in or not: a compiled-out engine answers BATON_EDISABLED, saying
 * why, instead of "unknown scheme"; its description is there either way. */
#include "internal.h"
#include "baton/sys/engines.h"
#include <pthread.h>
#include <string.h>

#define DECLARE(n) extern const baton__engine baton__engine_##n;
BATON_ENGINES(DECLARE)
#undef DECLARE

static const baton__engine *const engines[] = {
#define REF(n) &baton__engine_##n,
    BATON_ENGINES(REF)
#undef REF
};
#define NENGINES (sizeof engines / sizeof engines[0])

static const baton_engine_info *infos[NENGINES];
static pthread_once_t infos_once = PTHREAD_ONCE_INIT;

static void infos_init(void)
{
    for (size_t i = 0; i < NENGINES; i++) infos[i] = engines[i]->info;
}

static const baton_backend *table_of(size_t i)
{
    return engines[i]->table;
}

const baton_engine_info *const *baton_engines(size_t *n)
{
    pthread_once(&infos_once, infos_init);
    if (n) *n = NENGINES;
    return infos;
}

static int answers(const baton_engine_info *e, const char *s)
{
    if (!strcmp(e->name, s)) return 1;
    for (const char *const *p = e->schemes; *p; p++)
        if (!strcmp(*p, s)) return 1;
    return 0;
}

const baton_engine_info *baton_engine_find(const char *s)
{
    if (!s) return NULL;
    for (size_t i = 0; i < NENGINES; i++)
        if (answers(engines[i]->info, s)) return engines[i]->info;
    return NULL;
}

/* The primitives a table provides, as BATON_PRIM_* bits: what the
 * description must say. */
unsigned baton__backend_prims(const baton_backend *b)
{
    unsigned p = 0;
    if (b->lock) {
        p |= BATON_PRIM_LOCK;
        if (b->lock->info) p |= BATON_PRIM_INFO;
        if (b->lock->list) p |= BATON_PRIM_LIST;
        if (b->lock->force_unlock) p |= BATON_PRIM_BREAK;
    }
    if (b->caps & BATON_CAP_FAIR) p |= BATON_PRIM_FAIR;
    if (b->rw && b->rw->create) p |= BATON_PRIM_RWLOCK;
    if (b->sem) p |= BATON_PRIM_SEM;
    if (b->permits) p |= BATON_PRIM_PERMITS;
    /* The core builds latches on values where an engine has no latch table. */
    if (b->latch || b->value) p |= BATON_PRIM_LATCH;
    /* The core builds elections on a lock plus a value (its info tells who
     * holds the candidate lock) where an engine has no election table. */
    if (b->election || (b->value && b->lock && b->lock->info)) p |= BATON_PRIM_ELECTION;
    if (b->value) p |= BATON_PRIM_VALUE;
    if (b->group) p |= BATON_PRIM_GROUP;
    if (b->queue) p |= BATON_PRIM_QUEUE;
    /* ... and rate limiters on values where an engine has no table of its own. */
    if (b->ratelimit || b->value) p |= BATON_PRIM_RATELIMIT;
    return p;
}

int baton__backend_check(const baton_backend *b, const baton_engine_info *e)
{
    if (b->version != BATON_BACKEND_VERSION)
        return baton_seterr(BATON_EINVAL, 0, "engine %s: backend table version %u, this core speaks %u", e->name,
                            b->version, (unsigned)BATON_BACKEND_VERSION);
    if (b->info != e || !b->open || !b->close || !b->lock || !b->lock->create || !b->lock->destroy ||
        !b->lock->acquire || !b->lock->release || !b->services || ((b->caps & BATON_CAP_LEASE) && !b->lock->renew))
        return baton_seterr(BATON_EINVAL, 0, "engine %s: its backend table lacks a member it must have", e->name);
    if (b->async && (!b->async->acquire_start || !b->async->acquire_cancel))
        return baton_seterr(BATON_EINVAL, 0, "engine %s: its async table lacks a member it must have", e->name);
    if (baton__backend_prims(b) != e->primitives)
        return baton_seterr(BATON_EINVAL, 0, "engine %s: its tables provide primitives 0x%x, its description "
                            "says 0x%x", e->name, baton__backend_prims(b), e->primitives);
    if ((b->caps & (BATON_CAP_LEASE | BATON_CAP_NOTIFY | BATON_CAP_FAIR | BATON_CAP_SESSION)) != e->features)
        return baton_seterr(BATON_EINVAL, 0, "engine %s: its table's behaviour bits 0x%x differ from its "
                            "description's 0x%x", e->name, b->caps, e->features);
    return 0;
}

int baton__registry_find(const char *scheme, const baton_backend **out)
{
    for (size_t i = 0; i < NENGINES; i++) {
        const baton_engine_info *e = engines[i]->info;
        const baton_backend *b;
        int rc;
        for (const char *const *s = e->schemes; *s; s++) {
            if (strcmp(*s, scheme)) continue;
            if (!(b = table_of(i)))
                return baton_seterr(BATON_EDISABLED, 0, "scheme '%s': the %s engine is not built here: %s", scheme,
                                    e->name, e->why_not ? e->why_not : "switched off when baton was built");
            if ((rc = baton__backend_check(b, e))) return rc;
            *out = b;
            return 0;
        }
    }
    return baton_seterr(BATON_EINVAL, 0, "unknown URI scheme '%s' (baton engines lists the known ones)", scheme);
}
