/* The PostgreSQL engine's description (see src/core/spec.h). */
#include "core/spec.h"

#ifdef BATON_WITH_POSTGRES
extern const baton_backend baton__backend_postgres;
#define TABLE &baton__backend_postgres
#define BUILT 1
#define WHY NULL
#else
#define TABLE NULL
#define BUILT 0
#ifdef BATON_OFF_POSTGRES
#define WHY "switched off when baton was built (-DBATON_WITH_POSTGRES=OFF)"
#else
#define WHY "libpq-dev was missing when baton was built (scripts/install-deps.sh installs it)"
#endif
#endif

static const char *const schemes[] = { "postgres", "postgresql", NULL };
static const char *const modes[] = { "session", "lease", "row", NULL };
/* libpq's own connection keywords, handed to it as they are */
#define LIBPQ(name) { name, "string", NULL, "libpq's connection keyword of that name", 0, 0, NULL, NULL, NULL, NULL }
static const baton_engine_option options[] = {
    BATON__ENUM("mode", "session", modes,
                "session: advisory locks on a held connection; lease: rows with an expiry; row: a row lock "
                "held by an open transaction"),
    BATON__STR("schema", NULL, "the schema of baton's table (default: the search path's)"),
    BATON__STR("table", "baton_locks", "baton's table, every mode: fences and holders (lease and row modes "
               "also hold the lock in it); 1 to 57 bytes"),
    BATON__CONNECT_TIMEOUT,
    BATON__BOOL("prepare", "1", NULL, "0: send statements as text each time (a pooler in transaction mode)"),
    LIBPQ("sslmode"), LIBPQ("sslrootcert"), LIBPQ("sslcert"), LIBPQ("sslkey"), LIBPQ("sslcrl"),
    LIBPQ("sslpassword"), LIBPQ("passfile"), LIBPQ("application_name"), LIBPQ("target_session_attrs"),
    LIBPQ("channel_binding"), LIBPQ("gssencmode"), LIBPQ("keepalives"), LIBPQ("keepalives_idle"),
    LIBPQ("keepalives_interval"), LIBPQ("keepalives_count"), LIBPQ("tcp_user_timeout"), LIBPQ("options"),
    BATON__OPT_END,
};
static const char *const notes[] = {
    "rwlock: mode=session only (advisory shared/exclusive locks)",
    "election: built by the core on the fair lock \"baton:election:NAME\" (its fence is the term; the oldest "
    "candidate leads) and the leader record (term, holder, value) in the value of that name; campaign: the "
    "lock's acquire + 1 get and 1 compare-and-set; observe: the record's watch + lock info, re-read at least "
    "every second",
    "fair: every mode; a queue table <table>_fair in front of the mode's grant: a waiter enqueues (1 INSERT, "
    "on a connection kept while it waits: its entry dies with that backend, or 5 s after its last re-check), "
    "only the head tries the mode's grant, then leaves the queue (1 DELETE + NOTIFY); a try is refused while "
    "waiters are queued; uncontended wait = 4 statements; no herd: the head watches releases, each other "
    "waiter the entry ahead of it, so a handoff costs 4-7 statements whatever the queue's length; dead "
    "waiters and plain holders' releases are seen at a re-check every 1 s",
    "semaphore, permits: every mode; tables <table>_sem (the count) and <table>_permit (permit ids, leases on "
    "the server's clock); acquire, release, add, try_set, drain, renew = 1 statement each (a take locks the "
    "count row and returns expired permits first); a release/add NOTIFYs: every waiter of the name in a "
    "client tries again (1 statement each); an expired permit wakes waiters at its lease end; a name used "
    "both ways shares its count",
    "value, group, queue: tables <table>_value, <table>_group, <table>_queue beside the lock table, "
    "lease rows on the server's clock in EVERY mode (members and taken items do not live on a connection)",
    "value: get, set, CAS, delete = 1 statement each (CAS: UPDATE ... WHERE version = $expect; "
    "delete keeps a tombstone so versions go on); a change NOTIFYs channel baton:<schema>.<table>_value with "
    "the name (a foreign client's UPDATE without it is seen at the 5 s re-read)",
    "value watch: LISTEN on the client's one listener connection, no polling; woken watchers (all in the "
    "client) read 1 row each; notifications lost while the listener reconnects wake every waiter; "
    "re-read every 5 s regardless (a silently dead listener link)",
    "latch, counter: the core's, on a value: count_down, add = a read + a CAS (2 statements a try, tried "
    "again on a conflict); await = a value watch",
    "group: join, leave = 1 statement (an upsert, a delete; both NOTIFY); renewal 1 UPDATE per lease/3; "
    "list = 1 SELECT; a killed member is gone when its lease ends; a watch wakes on NOTIFY and at the "
    "earliest member's lease end",
    "queue: put = 1 INSERT (+NOTIFY); take = 1 UPDATE ... FOR UPDATE SKIP LOCKED (takers skip each "
    "other's rows), fence from the id sequence; done, give-back, renewal = 1 statement each, owner- and "
    "fence-checked; a put wakes every waiting taker of the queue in a client (a herd: 1 statement each, "
    "one wins); a dead taker's item is back when its lease ends",
    NULL,
};

const baton_engine_info baton__info_postgres = {
    .name = "postgres",
    .schemes = schemes,
    .summary = "PostgreSQL: advisory locks (session mode), lease rows or row locks",
    .uri = "postgres://[user[:password]@]host[:port][,host[:port]...]/db[?options]",
    .primitives = BATON_PRIM_LOCK | BATON_PRIM_RWLOCK | BATON_PRIM_LIST | BATON_PRIM_BREAK | BATON_PRIM_INFO |
                  BATON_PRIM_VALUE | BATON_PRIM_GROUP | BATON_PRIM_QUEUE | BATON_PRIM_LATCH |
                  BATON_PRIM_FAIR | BATON_PRIM_SEM | BATON_PRIM_PERMITS | BATON_PRIM_RATELIMIT |
                  BATON_PRIM_ELECTION,
    .features = BATON_FEATURE_LEASE | BATON_FEATURE_NOTIFY | BATON_FEATURE_FAIR,
    .notes = notes,
    .options = options,
    .built = BUILT,
    .why_not = WHY,
};

const baton__engine baton__engine_postgres = { &baton__info_postgres, TABLE };
