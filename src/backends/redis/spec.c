/* The Redis engine's description (see src/core/spec.h). */
#include "core/spec.h"

#ifdef BATON_WITH_REDIS
extern const baton_backend baton__backend_redis;
#define TABLE &baton__backend_redis
#define BUILT 1
#define WHY NULL
#else
#define TABLE NULL
#define BUILT 0
#ifdef BATON_OFF_REDIS
#define WHY "switched off when baton was built (-DBATON_WITH_REDIS=OFF)"
#else
#define WHY "libhiredis-dev was missing when baton was built (scripts/install-deps.sh installs it)"
#endif
#endif

static const char *const schemes[] = { "redis", "rediss", "redis-cluster", "rediss-cluster", "redis-sentinel",
                                       "rediss-sentinel", "redis+unix", NULL };
static const char *const layouts[] = { "redisson", "simple", NULL };
static const baton_engine_option options[] = {
    BATON__STR("prefix", "", "a string put before every key baton makes (at most 1,024 bytes)"),
    BATON__ENUM("layout", "redisson", layouts,
                "redisson: Redisson's hashes and channels; simple: SET NX PX keys (redis-py, node-redlock, redsync)"),
    BATON__PATH("cacert", "rediss rediss-cluster rediss-sentinel", "CA certificates (PEM) to verify the server with"),
    BATON__PATH("cert", "rediss rediss-cluster rediss-sentinel", "client certificate (PEM)"),
    BATON__PATH("key", "rediss rediss-cluster rediss-sentinel", "client private key (PEM); needs cert"),
    BATON__BOOL("insecure", "0", "rediss rediss-cluster rediss-sentinel", "1: do not verify the server's certificate"),
    BATON__INT("wait_replicas", "0", 0, 1000, "after a grant, WAIT for this many replicas to have it"),
    { "wait_ms", "ms", "1000", "how long WAIT waits for the replicas", 1, 3600000, NULL, NULL, NULL, "wait_replicas" },
    { "master", "string", NULL, "the master's name the sentinels monitor (required)", 0, 0, NULL,
      "redis-sentinel rediss-sentinel", NULL, NULL },
    { "sentinel_user", "string", NULL, "ACL user for the sentinels (the URI's user is the data nodes')", 0, 0, NULL,
      "redis-sentinel rediss-sentinel", NULL, NULL },
    { "sentinel_password", "string", NULL,
      "password for the sentinels (requirepass of sentinel.conf; the URI's password is the data nodes')", 0, 0, NULL,
      "redis-sentinel rediss-sentinel", NULL, NULL },
    { "db", "int", "0", "the database number (redis+unix://; the other schemes take it as the path)", 0, 1000000,
      NULL, "redis+unix", NULL, NULL },
    BATON__CONNECT_TIMEOUT,
    BATON__MS("io_timeout_ms", NULL, 1, 3600000, "per-request timeout (default: the client's, 5000 ms)"),
    BATON__OPT_END,
};
static const char *const notes[] = {
    "lock waiters: woken by baton's PUBLISH and, where the server has notify-keyspace-events K or E with g on, "
    "by the key's del/expired events (a foreign or silent release at once; CONFIG GET every 10 s while waiting); "
    "else layout=simple polls every 2-200 ms and the default layout re-checks at the TTL and every 2 s; "
    "a release wakes one waiter per client (the oldest without a wake; a woken waiter that leaves passes it on; "
    "a lost connection wakes all): with the waiters as threads of one client a handoff costs the same at 1 or 256 "
    "waiters, with a client per waiter each client still tries once per release",
    "async (event-loop API): the plain lock on one server (redis, rediss, redis+unix) is native: one pipelined "
    "connection (CLIENT SETNAME baton-mux) and one I/O thread per client carry every lock's EVALSHA, written in "
    "batches; waiters wake on PUBLISH, re-check at the TTL and every 1 s (simple layout: 2-200 ms backoff); "
    "a frozen link fails pending commands after the io timeout, EOF at once; fair, rw, cluster, sentinel and "
    "wait_replicas use the core's worker pool (docs/async.md)",
    "fair: Redisson's RFairLock layout",
    "cluster: redis[s]-cluster://h1:p1,h2:p2,... (seeds): slot map from CLUSTER SLOTS, one connection per master, "
    "MOVED/ASK/TRYAGAIN/CLUSTERDOWN followed within the call's deadline; every key of an operation shares the "
    "name's hash slot (Redisson's {tag} rule), else BATON_ENOTSUP; wake-ups by sharded pub/sub (SPUBLISH, "
    "SSUBSCRIBE on the slot's master, as Redisson in cluster mode; the fair lock's queue entries by classic PUBLISH), "
    "keyspace events subscribed on the key's master; a failover seen on any master re-checks every held lock; "
    "a quorum of cluster clients is BATON_ENOTSUP (docs/redis-layout.md)",
    "sentinel: the master the sentinels name, checked with ROLE; +switch-master is followed and every held lock "
    "re-checked on the new master (LOST if it did not survive); wait_replicas=N keeps a grant across a failover when the promoted replica is one of the N that acknowledged it (N = all replicas to be sure)",
    "latch: Redisson's RCountDownLatch layout",
    "election: built by the core on the lock \"baton:election:NAME\" (its fence is the term; fair with "
    "layout=redisson, so the oldest candidate leads; in the simple layout any waiter may lead next) and the "
    "leader record (term, holder, value) in the value of that name; campaign: the lock's acquire + 1 get and 1 "
    "compare-and-set; observe: the record's watch + lock info, re-read at least every second",
    "value: the plain string baton_value:{K} (redis-cli GET/SET work on it) + version hash baton_value_ver:{K}; "
    "get/set/delete = 1 EVALSHA; a foreign write gets a new version at the next script; "
    "watch: PUBLISH + keyspace events (if the server has them on), re-read at least every 2 s; "
    "every watcher of a value wakes on each change (3 EVALSHA each through the core's watch)",
    "group: zset baton_group:{K} (id -> lease deadline, server ms) + hashes; join/leave/renew = 1 EVALSHA; "
    "a dead member is gone within its lease; watchers wake on join/leave (3 EVALSHA each) "
    "and re-check at the next member deadline and every 2 s",
    "queue: list baton_queue:{K} of waiting ids + hash of items + zset of taken ids (lease deadlines); "
    "put/take/done/return/renew = 1 EVALSHA; a taken item whose lease ran out goes back to the head; "
    "a returned item goes back to the head; a put wakes every waiting taker (herd: 1 EVALSHA each, one wins)",
    NULL,
};

const baton_engine_info baton__info_redis = {
    .name = "redis",
    .schemes = schemes,
    .summary = "Redis, one node (rediss:// over TLS, redis+unix:// on a socket), its master behind Sentinel "
               "(redis-sentinel://) or a Redis Cluster (redis-cluster://), Redisson's key layout by default",
    .uri = "redis[s]://[user[:password]@]host[:port][/db][?options] | "
           "redis[s]-sentinel://[user[:password]@]s1[:26379][,s2...][/db]?master=NAME | "
           "redis[s]-cluster://h1:p1[,h2:p2...] | redis+unix:///path.sock[?db=N]",
    .primitives = BATON_PRIM_LOCK | BATON_PRIM_FAIR | BATON_PRIM_RWLOCK | BATON_PRIM_SEM | BATON_PRIM_PERMITS |
                  BATON_PRIM_LATCH | BATON_PRIM_LIST | BATON_PRIM_BREAK | BATON_PRIM_INFO | BATON_PRIM_VALUE |
                  BATON_PRIM_GROUP | BATON_PRIM_QUEUE | BATON_PRIM_RATELIMIT |
                  BATON_PRIM_ELECTION,
    .features = BATON_FEATURE_LEASE | BATON_FEATURE_NOTIFY | BATON_FEATURE_FAIR,
    .notes = notes,
    .options = options,
    .built = BUILT,
    .why_not = WHY,
};

const baton__engine baton__engine_redis = { &baton__info_redis, TABLE };
