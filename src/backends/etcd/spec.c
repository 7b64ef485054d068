/* The etcd engine's description (see src/core/spec.h). */
#include "core/spec.h"

#ifdef BATON_WITH_ETCD
extern const baton_backend baton__backend_etcd;
#define TABLE &baton__backend_etcd
#define BUILT 1
#define WHY NULL
#else
#define TABLE NULL
#define BUILT 0
#ifdef BATON_OFF_ETCD
#define WHY "switched off when baton was built (-DBATON_WITH_ETCD=OFF)"
#else
#define WHY "libcurl4-openssl-dev or libjansson-dev was missing when baton was built (scripts/install-deps.sh installs it)"
#endif
#endif

static const char *const schemes[] = { "etcd", "etcds", NULL };
static const char *const transports[] = { "gateway", "grpc", NULL };
static const baton_engine_option options[] = {
    BATON__INT("ttl", NULL, 1, 86400, "the client lease's TTL in seconds (default: the client's session timeout "
               "when set, else 30)"),
    BATON__CONNECT_TIMEOUT,
    BATON__MS("timeout_ms", NULL, 1, 3600000, "per-request timeout (default: the client's, 5000 ms)"),
    BATON__ENUM("transport", NULL, transports, "grpc (the default where built), or gateway: the v3 JSON gateway over HTTP/1.1, which passes an HTTP/1.1 reverse proxy that gRPC cannot"),
    BATON__PATH("cacert", "etcds", "CA certificates (PEM) to verify the members with"),
    BATON__PATH("cert", "etcds", "client certificate (PEM)"),
    BATON__PATH("key", "etcds", "client private key (PEM)"),
    BATON__OPT_END,
};
static const char *const notes[] = {
    "lock: etcdctl lock's layout (a key per waiter on the client's lease, lowest revision holds); fixed_lease: ENOTSUP",
    "rwlock: recipe.RWMutex's layout; election: etcdctl elect's layout",
    "permits: a key per permit on the holder's lease, freed when that lease ends; the lease is ignored",
    "latch, counter: the core's, on the value NAME (decimal text)",
    "value: the plain key NAME under the URI's prefix (etcdctl put/get/watch NAME), version = its mod_revision; "
    "get 1 range, set 1 put (compare-and-set: 1 txn on mod_revision), watch: 1 stream from the known version + 1 "
    "per change (never misses one; compacted or broken: 1 range and again), each watcher its own stream",
    "group: a key per member on the client's lease (\\0group/NAME/ID), gone when a killed client's lease ends; "
    "join, leave 1 txn, list 1 range, watch 1 stream from the listing's revision; lease_ms unused (the URI's ttl)",
    "queue: items as keys taken in create-revision order, a claim key per taken item on the taker's lease; put 1, "
    "take 2 txns, done 1 txn; each change wakes every waiting taker (herd: ~2 requests per waiter per item); a "
    "returned or expired item is first in line again; lease_ms unused (the URI's ttl)",
    NULL,
};

const baton_engine_info baton__info_etcd = {
    .name = "etcd",
    .schemes = schemes,
    .summary = "etcd v3: keys on a client lease, woken by watches (gRPC or the JSON gateway)",
    .uri = "etcd[s]://[user:password@]h1[:2379][,h2[:2379]...][/prefix][?options]",
    .primitives = BATON_PRIM_LOCK | BATON_PRIM_FAIR | BATON_PRIM_RWLOCK | BATON_PRIM_SEM | BATON_PRIM_PERMITS |
                  BATON_PRIM_ELECTION | BATON_PRIM_LIST | BATON_PRIM_BREAK | BATON_PRIM_INFO | BATON_PRIM_LATCH |
                  BATON_PRIM_VALUE | BATON_PRIM_GROUP | BATON_PRIM_QUEUE |
                  BATON_PRIM_RATELIMIT, /* the core's, on values */
    .features = BATON_FEATURE_FAIR | BATON_FEATURE_NOTIFY | BATON_FEATURE_SESSION,
    .notes = notes,
    .options = options,
    .built = BUILT,
    .why_not = WHY,
};

const baton__engine baton__engine_etcd = { &baton__info_etcd, TABLE };
