/*
 * The Redis backend's table: the only module that knows every lock kind and
 * primitive (plain locks in redis.c, fair and read-write in locks.c, the
 * synchronizers in prims.c, values in values.c, group members and queue
 * takers in coord.c), so those modules depend on redis.c's engine
 * layer and never on each other.
 */
#include "rb.h"

static int t_lock_acquire(void *eng, void *st, baton_acquire_req *req) {
    reng *e = eng;
    rlock *l = st;
    int kind = *(const int *)st; /* every lock state starts with its kind */
    int64_t prev = baton__redis_bound_enter(e, req->deadline_ns);
    int rc = kind == RK_PLAIN  ? baton__redis_plain_acquire(e, l, req)
           : kind == RK_FAIR   ? baton__redis_fair_acquire(e, l, req)
           : kind == RK_MEMBER || kind == RK_TAKER ? baton__redis_coord_acquire(e, st, req)
                                  : baton__redis_rw_acquire(e, l, req);
    baton__redis_bound_leave(prev);
    if (!rc) baton__redis_watch(e); /* a holder learns of a restart when its client reconnects */
    return rc;
}

static int t_lock_release(void *eng, void *st, const baton_owner *owner) {
    reng *e = eng;
    rlock *l = st;
    if (*(const int *)st == RK_MEMBER || *(const int *)st == RK_TAKER) return baton__redis_coord_release(e, st, owner);
    if (l->kind == RK_FAIR) return baton__redis_fair_release(e, l, owner);
    if (l->kind != RK_PLAIN) return baton__redis_rw_release(e, l, owner);
    return baton__redis_plain_release(e, l, owner);
}

static int t_lock_renew(void *eng, void *st, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns) {
    reng *e = eng;
    rlock *l = st;
    if (*(const int *)st == RK_MEMBER || *(const int *)st == RK_TAKER)
        return baton__redis_coord_renew(e, st, owner, lease_ms, deadline_ns);
    if (l->kind == RK_READ || l->kind == RK_WRITE) return baton__redis_rw_renew(e, l, owner, lease_ms, deadline_ns);
    return baton__redis_plain_renew(e, l, owner, lease_ms, deadline_ns); /* the fair lock renews like a plain one */
}

/* Every lock state starts with its kind (rb.h). */
static void t_lock_destroy(void *eng, void *st) {
    if (st && (*(int *)st == RK_MEMBER || *(int *)st == RK_TAKER)) baton__redis_coord_free(eng, st);
    else baton__redis_lock_free(eng, st);
}

static const baton_lock_methods redis_lock_methods = {
    .create = baton__redis_lock_new,
    .destroy = t_lock_destroy,
    .acquire = t_lock_acquire,
    .release = t_lock_release,
    .renew = t_lock_renew,
    .info = baton__redis_lock_info,
    .list = baton__redis_lock_list,
    .force_unlock = baton__redis_lock_break,
};

static const baton_rw_methods redis_rw_methods = {
    .create = baton__redis_rwlock_new,
};

static const baton_sem_methods redis_sem_methods = {
    .create = baton__redis_sem_new,
    .destroy = baton__redis_sem_free,
    .acquire = baton__redis_sem_acquire,
    .release = baton__redis_sem_release,
    .ctl = baton__redis_sem_ctl,
};

static const baton_permits_methods redis_permits_methods = {
    .create = baton__redis_permits_new,
    .destroy = baton__redis_permits_free,
    .acquire = baton__redis_permits_acquire,
    .release = baton__redis_permits_release,
    .renew = baton__redis_permits_renew,
    .ctl = baton__redis_permits_ctl,
};

static const baton_latch_methods redis_latch_methods = {
    .create = baton__redis_latch_new,
    .destroy = baton__redis_latch_free,
    .ctl = baton__redis_latch_ctl,
    .await = baton__redis_latch_await,
};

static const baton_value_methods redis_value_methods = {
    .create = baton__redis_value_new,
    .destroy = baton__redis_value_free,
    .get = baton__redis_value_get,
    .set = baton__redis_value_set,
    .del = baton__redis_value_del,
    .watch = baton__redis_value_watch,
};

static const baton_group_methods redis_group_methods = {
    .create = baton__redis_member_new,
    .list = baton__redis_group_list,
    .watch = baton__redis_group_watch,
};

static const baton_queue_methods redis_queue_methods = {
    .create = baton__redis_queue_new,
    .destroy = baton__redis_queue_free,
    .put = baton__redis_queue_put,
    .taker = baton__redis_queue_taker,
    .item = baton__redis_queue_item,
    .done = baton__redis_queue_done,
    .size = baton__redis_queue_size,
};

static const baton_services redis_services_methods = {
    .quorum_scheme = "redlock",
    .attach = baton__redis_attach,
    .identity = baton__redis_identity,
    .engine_ops = baton__redis_engine_ops,
    .secret_env = "BATON_REDIS_PASSWORD",
};

const baton_backend baton__backend_redis = {
    .version = BATON_BACKEND_VERSION,
    .info = &baton__info_redis,
    .caps = BATON_CAP_LEASE | BATON_CAP_NOTIFY | BATON_CAP_FAIR,
    .open = baton__redis_open,
    .close = baton__redis_close,
    .lock = &redis_lock_methods,
    .rw = &redis_rw_methods,
    .sem = &redis_sem_methods,
    .permits = &redis_permits_methods,
    .latch = &redis_latch_methods,
    .value = &redis_value_methods,
    .group = &redis_group_methods,
    .queue = &redis_queue_methods,
    .ratelimit = &baton__ratelimit_redis,
    .services = &redis_services_methods,
    .async = &baton__redis_async_methods,
};
