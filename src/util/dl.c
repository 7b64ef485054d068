/* Loads an engine's client library once per process (see dl.h). */
#include "dl.h"

int baton__dl_lib_load(baton_dl_lib *l)
{
    /* the fast path of every later open: one acquire load, no lock */
    int st = __atomic_load_n(&l->state, __ATOMIC_ACQUIRE);

    if (st == 0) {
        pthread_mutex_lock(&l->mu);
        st = l->state;
        if (st == 0) {
            st = baton_dl_load(l->soname, l->hint, l->syms, l->nsyms, l->err, sizeof l->err) == 0 ? 1 : -1;
            if (st == 1 && l->init && l->init(l->err, sizeof l->err)) st = -1;
            /* release: the slots are written before another thread sees 1 */
            __atomic_store_n(&l->state, st, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&l->mu);
    }
    if (st < 0) return baton_seterr(BATON_ENOTSUP, 0, "%s: %s", l->who, l->err);
    return 0;
}
