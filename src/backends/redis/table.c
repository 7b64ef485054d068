/*
 * The Redis backend's table: the only module that knows every lock kind and
 * primitive (plain locks in redis.c, fair and read-write in locks.c, the
 * synchronizers in prims.c), so those modules depend on redis.c's engine
 * layer and never on each other.
 */
#include "rb.h"

static int t_lock_acquire(void *eng, void *st, baton_acquire_req *req) {
    reng *e = eng;
    rlock *l = st;
    int64_t prev = baton__redis_bound_enter(e, req->deadline_ns);
    int rc = l->kind == RK_PLAIN  ? baton__redis_plain_acquire(e, l, req)
           : l->kind == RK_FAIR   ? baton__redis_fair_acquire(e, l, req)
                                  : baton__redis_rw_acquire(e, l, req);
    baton__redis_bound_leave(prev);
    if (!rc) baton__redis_watch(e); /* a holder learns of a restart when its client reconnects */
    return rc;
}

static int t_lock_release(void *eng, void *st, const baton_owner *owner) {
    reng *e = eng;
    rlock *l = st;
    if (l->kind == RK_FAIR) return baton__redis_fair_release(e, l, owner);
    if (l->kind != RK_PLAIN) return baton__redis_rw_release(e, l, owner);
    return baton__redis_plain_release(e, l, owner);
}

static int t_lock_renew(void *eng, void *st, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns) {
    reng *e = eng;
    rlock *l = st;
    if (l->kind == RK_READ || l->kind == RK_WRITE) return baton__redis_rw_renew(e, l, owner, lease_ms, deadline_ns);
    return baton__redis_plain_renew(e, l, owner, lease_ms, deadline_ns); /* the fair lock renews like a plain one */
}

static const char *const redis_schemes[] = { "redis", "rediss", NULL };

const baton_backend baton__backend_redis = {
    .version = BATON_BACKEND_VERSION,
    .name = "redis",
    .schemes = redis_schemes,
    .caps = BATON_CAP_LEASE | BATON_CAP_NOTIFY | BATON_CAP_INFO | BATON_CAP_FAIR | BATON_CAP_RWLOCK |
            BATON_CAP_SEM | BATON_CAP_PERMITS | BATON_CAP_LATCH,
    .open = baton__redis_open,
    .close = baton__redis_close,
    .lock_new = baton__redis_lock_new,
    .lock_free = baton__redis_lock_free,
    .lock_acquire = t_lock_acquire,
    .lock_release = t_lock_release,
    .lock_renew = t_lock_renew,
    .lock_info = baton__redis_lock_info,
    .quorum_scheme = "redlock",
    .rwlock_new = baton__redis_rwlock_new,
    .sem_new = baton__redis_sem_new,
    .sem_free = baton__redis_sem_free,
    .sem_acquire = baton__redis_sem_acquire,
    .sem_release = baton__redis_sem_release,
    .sem_ctl = baton__redis_sem_ctl,
    .permits_new = baton__redis_permits_new,
    .permits_free = baton__redis_permits_free,
    .permits_acquire = baton__redis_permits_acquire,
    .permits_release = baton__redis_permits_release,
    .permits_renew = baton__redis_permits_renew,
    .permits_ctl = baton__redis_permits_ctl,
    .latch_new = baton__redis_latch_new,
    .latch_free = baton__redis_latch_free,
    .latch_ctl = baton__redis_latch_ctl,
    .latch_await = baton__redis_latch_await,
    .attach = baton__redis_attach,
    .identity = baton__redis_identity,
    .engine_ops = baton__redis_engine_ops,
    .secret_env = "BATON_REDIS_PASSWORD",
    .lock_list = baton__redis_lock_list,
    .lock_break = baton__redis_lock_break,
};
