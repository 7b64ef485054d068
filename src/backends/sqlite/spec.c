/* The SQLite engine's description (see src/core/spec.h). */
#include "core/spec.h"

#ifdef BATON_WITH_SQLITE
extern const baton_backend baton__backend_sqlite;
#define TABLE &baton__backend_sqlite
#define BUILT 1
#define WHY NULL
#else
#define TABLE NULL
#define BUILT 0
#ifdef BATON_OFF_SQLITE
#define WHY "switched off when baton was built (-DBATON_WITH_SQLITE=OFF)"
#else
#define WHY "libsqlite3-dev was missing when baton was built (scripts/install-deps.sh installs it)"
#endif
#endif

static const char *const schemes[] = { "sqlite", NULL };
static const baton_engine_option options[] = {
    BATON__STR("mode", "lease", "lease (the only mode: SQLite has no lock that outlives a short transaction)"),
    BATON__STR("table", "baton_locks", "baton's table (1 to 63 letters, digits or _)"),
    BATON__MS("busy_timeout_ms", "5000", 0, 3600000, "how long one statement waits for SQLite's own write lock"),
    BATON__MS("recheck_ms", "1000", 1, 86400000, "the longest a waiter sleeps between two looks when no "
              "notice wakes it"),
    BATON__OPT_END,
};
static const char *const notes[] = {
    "one host: waiters on this host are woken by inotify",
    "fair: a row per waiter in <table>_waiter (AUTOINCREMENT seq = arrival order), kept alive by its waiter's "
    "claims (a killed waiter leaves the line when its lease ends); a claim (1 transaction) is granted to the first "
    "live row only, and removes it; a release wakes every waiter of the host, each looks with 1 read and only the "
    "head claims (measured: about 2 write transactions per handoff with 1, 4 or 16 waiters); plain locks of the "
    "name may still take it between two fair holders",
    "rwlock: a lease row per grant in <table>_rw (mode w, r, or q: a writer waiting, which holds new readers back "
    "for its lease at most); the write side's holder may read (downgrade); claim: 1 transaction (a release wakes "
    "every waiter of the host; blocked ones look with 1 read, waiting writers all claim: a herd); release, renew: 1 statement; fences count on above the plain "
    "lock's of the name; a plain lock of the name does not exclude it",
    "election: built by the core on the fair lock \"baton:election:NAME\" (its fence is the term; the oldest candidate leads) and the "
    "leader record (term, holder, value) in the value of that name; campaign: the lock's acquire + 1 get and "
    "1 compare-and-set; observe: the record's watch + lock info, re-read at least every second",
    "value: a row per value in <table>_value with a tombstone on delete (versions keep rising); get: 1 read; "
    "set or delete: 1 BEGIN IMMEDIATE transaction (read, compare, write); watch: woken by the sidecar after every "
    "commit of any value, group or queue on the host (a herd: each watcher re-reads once), and at least every "
    "recheck_ms",
    "group: a lease row per member in <table>_member (renewed by the client; a killed member is gone when its "
    "lease ends); list: 1 read; watchers re-list on every wake-up and when a listed lease ends",
    "queue: a row per item in <table>_queue (taken_by + lease_until; a killed taker's item comes back when its "
    "lease ends, at the head); take: 1 transaction (oldest free row, fence from <table>_qfence); done, give "
    "back, renew: 1 statement each",
    NULL,
};

const baton_engine_info baton__info_sqlite = {
    .name = "sqlite",
    .schemes = schemes,
    .summary = "SQLite: lease rows in a database file, one host",
    .uri = "sqlite:///abs/path.db[?options]",
    .primitives = BATON_PRIM_LOCK | BATON_PRIM_SEM | BATON_PRIM_PERMITS | BATON_PRIM_LATCH | BATON_PRIM_LIST |
                  BATON_PRIM_BREAK | BATON_PRIM_INFO | BATON_PRIM_VALUE | BATON_PRIM_GROUP | BATON_PRIM_QUEUE |
                  BATON_PRIM_RATELIMIT | BATON_PRIM_FAIR | BATON_PRIM_RWLOCK | BATON_PRIM_ELECTION,
    .features = BATON_FEATURE_LEASE | BATON_FEATURE_NOTIFY | BATON_FEATURE_FAIR,
    .notes = notes,
    .options = options,
    .built = BUILT,
    .why_not = WHY,
};

const baton__engine baton__engine_sqlite = { &baton__info_sqlite, TABLE };
