/* The RedLock engine's description (see src/core/spec.h). */
#include "core/spec.h"

#ifdef BATON_WITH_REDLOCK
extern const baton_backend baton__backend_redlock;
#define TABLE &baton__backend_redlock
#define BUILT 1
#define WHY NULL
#else
#define TABLE NULL
#define BUILT 0
#ifdef BATON_OFF_REDLOCK
#define WHY "switched off when baton was built (-DBATON_WITH_REDLOCK=OFF)"
#else
#define WHY "libhiredis-dev was missing when baton was built (scripts/install-deps.sh installs it)"
#endif
#endif

static const char *const schemes[] = { "redlock", NULL };
static const baton_engine_option options[] = {
    BATON__STR("prefix", "", "a string put before every key baton makes"),
    BATON__STR("layout", "simple", "simple: SET NX PX on every node; the only layout of a quorum (redisson: "
               "BATON_ENOTSUP)"),
    BATON__MS("node_timeout_ms", "50", 1, 60000, "how long one node may take to answer one step"),
    BATON__MS("retry_delay_ms", "20", 1, 60000, "the base delay between two tries of a waiting acquire"),
    BATON__MS("connect_timeout_ms", NULL, 1, 3600000, "connect timeout per node (default: the client's, at most 250 ms)"),
    BATON__MS("io_timeout_ms", NULL, 1, 3600000, "per-request timeout (default: the client's, 5000 ms)"),
    BATON__BOOL("tls", "0", NULL, "1: TLS to every node"),
    BATON__PATH("cacert", NULL, "CA certificates (PEM), with tls=1"),
    BATON__PATH("cert", NULL, "client certificate (PEM), with tls=1"),
    BATON__PATH("key", NULL, "client private key (PEM), with tls=1; needs cert"),
    BATON__BOOL("insecure", "0", NULL, "1: do not verify the nodes' certificates (with tls=1)"),
    BATON__OPT_END,
};
static const char *const notes[] = {
    "fair, rwlock, semaphore, permits, latch, election: no (a quorum version of each would be a new algorithm)",
    "value, group, queue: no (no quorum algorithm for them: a majority of independent nodes cannot order writes; use redis:// on one node)",
    "ratelimit: no (no values to build one on, and independent limiters on independent clocks would each admit a burst: a quorum of them is no bound)",
    NULL,
};

const baton_engine_info baton__info_redlock = {
    .name = "redlock",
    .schemes = schemes,
    .summary = "RedLock: a majority quorum over independent Redis nodes",
    .uri = "redlock://h1[:port],h2[:port],h3[:port][/db][?options]",
    .primitives = BATON_PRIM_LOCK | BATON_PRIM_LIST | BATON_PRIM_BREAK | BATON_PRIM_INFO,
    .features = BATON_FEATURE_LEASE | BATON_FEATURE_NOTIFY,
    .notes = notes,
    .options = options,
    .built = BUILT,
    .why_not = WHY,
};

const baton__engine baton__engine_redlock = { &baton__info_redlock, TABLE };
