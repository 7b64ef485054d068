/* Engine counters: the backend's engine_ops, for baton bench. */
#include "client.h"
#include "baton/sys/stats.h"

int baton__client_engine_ops(baton_client *c, void (*fn)(void *arg, const char *op, uint64_t count), void *arg)
{
    if (!c || !fn) return baton_seterr(BATON_EINVAL, 0, "baton__client_engine_ops: NULL argument");
    if (!c->be->services->engine_ops)
        return baton_seterr(BATON_ENOTSUP, 0, "%s: the engine does not report what it has served", c->be->info->name);
    return c->be->services->engine_ops(c->eng, fn, arg);
}
