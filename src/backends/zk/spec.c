/* The ZooKeeper engine's description (see src/core/spec.h). */
#include "core/spec.h"

#ifdef BATON_WITH_ZK
extern const baton_backend baton__backend_zk;
#define TABLE &baton__backend_zk
#define BUILT 1
#define WHY NULL
#else
#define TABLE NULL
#define BUILT 0
#ifdef BATON_OFF_ZK
#define WHY "switched off when baton was built (-DBATON_WITH_ZK=OFF)"
#else
#define WHY "libzookeeper-mt-dev was missing when baton was built (scripts/install-deps.sh installs it)"
#endif
#endif

static const char *const schemes[] = { "zk", "zookeeper", NULL };
static const baton_engine_option options[] = {
    BATON__MS("session_timeout_ms", "10000", 100, 86400000, "the session timeout asked of the server (it may "
              "negotiate it into its own bounds)"),
    BATON__CONNECT_TIMEOUT,
    BATON__MS("lost_after_ms", NULL, 1, 86400000, "report the session's locks lost once the connection has been "
              "down this long (default: a third of the negotiated session timeout)"),
    BATON__BOOL("fence_note", "1", NULL, "0: do not note each grant's fence in the lock directory (one write less per "
                "lock cycle); lock_info then answers, for a name nobody holds, the zxid of the directory's last "
                "child change: at or above every fence granted, below every later one, not the last fence itself"),
    BATON__STR("root", "/baton", "the node under which lock names live (below the URI's chroot)"),
    BATON__STR("value_root", "/baton-values", "the node under which value (and counter) names live (below the "
               "chroot): value NAME is the node <value_root>/NAME"),
    BATON__STR("group_root", "/baton-groups", "the node under which group names live (below the chroot)"),
    BATON__STR("queue_root", "/baton-queues", "the node under which queue names live (below the chroot)"),
    BATON__STR("sem_root", "/baton-semaphores", "the node under which semaphore names live (below the chroot): "
               "semaphore NAME is the count node <sem_root>/NAME"),
    BATON__OPT_END,
};
static const char *const notes[] = {
    "lock: Curator's InterProcessMutex layout; a session instead of a lease (fixed_lease: ENOTSUP); a free lock's "
    "acquire + release 4 requests in 2 round trips (create and getChildren back to back, the grant's fence note not "
    "waited for, delete; 3 with fence_note=0), a handoff 4 whatever the waiters (each watches its predecessor)",
    "permits: a node per permit, freed when its holder's session ends; the lease is ignored",
    "semaphore: the count, decimal, in the persistent node <sem_root>/NAME (kazoo Counter's layout; Curator's "
    "SharedCount writes 4 binary bytes and does not interoperate); every change a compare-and-set on the data version "
    "made with a persistent marker in one transaction, so a write whose answer is lost is settled (sent again on any session: "
    "the version decides, the marker tells), never made twice: "
    "acquire and release 3 requests (2 round trips: get, then the write; the marker's delete is not waited for), "
    "try_set 2, available 1; waiters watch the node and all wake on each change (a herd, as Redisson's)",
    "latch: built by the core on a value",
    "value: the data of the persistent node <value_root>/NAME, version = its mzxid (kazoo Counter's layout for "
    "counters); get 1 request, create 1, unconditional set 1 (2 when absent), compare-and-set 2 (a stat, then a "
    "versioned write), delete 2; watch: one exists watch per watcher, every watcher of NAME woken by each change",
    "group: members are ephemeral nodes <group_root>/NAME/<id>__party__ holding the value (kazoo Party's nodes): "
    "join 2 requests (a create, and the watch that reports the node deleted by another; 1 round trip), leave 2, "
    "list 1 + 1 per member (2 round trips); watchers watch the children, all woken by "
    "each join or leave; a dead member goes when the server expires its session",
    "queue: kazoo LockingQueue's layout (<queue_root>/NAME/entries/entry-100-<seq>, taken/<entry> ephemeral): put 1 "
    "request, take 5 (3 round trips), done 3 (2), give back 2; waiting takers watch entries/ and taken/ and all "
    "wake on each change (a herd, as kazoo's); fence = the taken node's czxid",
    NULL,
};

const baton_engine_info baton__info_zk = {
    .name = "zk",
    .schemes = schemes,
    .summary = "ZooKeeper: sequential ephemeral nodes (Curator's layout), sessions",
    .uri = "zk://[user:password@]h1[:2181][,h2[:2181]...][/chroot][?options]",
    .primitives = BATON_PRIM_LOCK | BATON_PRIM_FAIR | BATON_PRIM_RWLOCK | BATON_PRIM_SEM | BATON_PRIM_PERMITS | BATON_PRIM_ELECTION |
                  BATON_PRIM_VALUE | BATON_PRIM_GROUP | BATON_PRIM_QUEUE | BATON_PRIM_LATCH | BATON_PRIM_LIST | BATON_PRIM_BREAK | BATON_PRIM_INFO |
                  BATON_PRIM_RATELIMIT, /* the core's, on values */
    .features = BATON_FEATURE_FAIR | BATON_FEATURE_NOTIFY | BATON_FEATURE_SESSION,
    .notes = notes,
    .options = options,
    .built = BUILT,
    .why_not = WHY,
};

const baton__engine baton__engine_zk = { &baton__info_zk, TABLE };
