/* The MySQL/MariaDB engine's description (see src/core/spec.h). */
#include "core/spec.h"

#ifdef BATON_WITH_MYSQL
extern const baton_backend baton__backend_mysql;
#define TABLE &baton__backend_mysql
#define BUILT 1
#define WHY NULL
#else
#define TABLE NULL
#define BUILT 0
#ifdef BATON_OFF_MYSQL
#define WHY "switched off when baton was built (-DBATON_WITH_MYSQL=OFF)"
#else
#define WHY "libmariadb-dev was missing when baton was built (scripts/install-deps.sh installs it)"
#endif
#endif

static const char *const schemes[] = { "mysql", "mariadb", NULL };
static const char *const modes[] = { "session", "lease", "row", NULL };
#define SSL(name, alias, help) { name, "path", NULL, help, 0, 0, NULL, NULL, alias, NULL }
static const baton_engine_option options[] = {
    BATON__ENUM("mode", "session", modes,
                "session: GET_LOCK on a held connection; lease: rows with an expiry; row: a row lock held by an "
                "open transaction"),
    BATON__STR("table", "baton_locks", "baton's table, every mode: fences and holders (lease and row modes "
               "also hold the lock in it); values, groups, queues, read-write locks, semaphores, permits and fair queues use <table>_value, _group, "
               "_queue, _rw, _sem, _perm and _fair; 1 to 58 bytes"),
    BATON__CONNECT_TIMEOUT,
    BATON__PATH("passfile", NULL, "a file holding the password"),
    BATON__PATH("socket", NULL, "the server's unix socket instead of TCP"),
    SSL("ssl-ca", "ssl_ca", "CA certificates (PEM)"),
    SSL("ssl-capath", "ssl_capath", "a directory of CA certificates"),
    SSL("ssl-cert", "ssl_cert", "client certificate (PEM)"),
    SSL("ssl-key", "ssl_key", "client private key (PEM)"),
    { "ssl-cipher", "string", NULL, "TLS cipher list", 0, 0, NULL, NULL, "ssl_cipher", NULL },
    { "ssl-mode", "string", "PREFERRED", "as the mysql client's --ssl-mode: DISABLED, PREFERRED, REQUIRED, "
      "VERIFY_CA or VERIFY_IDENTITY (any case)", 0, 0, NULL, NULL, "ssl_mode", NULL },
    { "ssl-verify-server-cert", "bool", NULL, "1: verify the server's certificate and name", 0, 1, NULL, NULL,
      "ssl_verify_server_cert", NULL },
    BATON__OPT_END,
};
static const char *const notes[] = {
    "election: built by the core on the fair lock \"baton:election:NAME\" (its fence is the term; the oldest "
    "candidate leads) and the leader record (term, holder, value) in the value of that name; campaign: the "
    "lock's acquire + 1 get and 1 compare-and-set; observe: the record's watch + lock info, re-read at least "
    "every second",
    "rwlock: holder rows with leases on the server's clock (<table>_rw), in every mode (session and row modes too: "
    "a read-write lock lives by its lease, not a connection); a waiting writer's short row (lease <= 3 s) holds new "
    "readers back; acquire 6 statements in one transaction (counter row locked, counts read, fence bumped, row "
    "upserted), release 1, renewal 1 per lease/3; waiters look every 20-250 ms (1 SELECT, +1 UPDATE for a writer) "
    "and try only when the look says they may",
    "semaphore, permits: a count row per name (<table>_sem, shared by both kinds as on Redis); semaphore acquire, "
    "release, add, try_set, drain 1 statement each; permits with leases on the server's clock (<table>_perm): "
    "acquire and release 6 statements in one transaction that returns expired permits first, renewal 1; waiters "
    "re-try every 20-250 ms",
    "fair: a queue table (<table>_fair) in front of the mode's own lock, every mode: a waiter's entry (1 INSERT) has "
    "a 1-3 s lease moved on at every try (UPDATE + SELECT of the head); only the head tries the lock, then deletes "
    "its entry; a fair try is refused while anyone waits; handoff within 250 ms (no NOTIFY), ~11 statements/s per "
    "waiter",
    "value, group, queue: tables beside the lock table (<table>_value, _group, _queue), the same in every mode; "
    "MariaDB cannot notify, so watches re-read every 250 ms (the client's own changes wake its watchers at once)",
    "value: a row per name, its version bumped by every change (a tombstone at delete, so versions never repeat); "
    "get 1 SELECT, set and delete 1 statement (compare-and-set in it; +1 SELECT when the condition fails); latch and "
    "counter on values",
    "group: a lease row per member (server clock): join 1 upsert, leave 1 DELETE, renewal 1 UPDATE per lease/3; "
    "list 1 SELECT (+1 DELETE of rows past their lease); watch also re-reads when the earliest lease ends, so a "
    "killed member is gone within its lease",
    "queue: an item row taken with FOR UPDATE SKIP LOCKED (MariaDB 10.6+, MySQL 8.0+): put 1 INSERT, take 5 "
    "statements in one transaction, done/return 1; waiters take again after a jittered 20-500 ms backoff; a returned "
    "item, or one whose taker's lease ran out, keeps its place at the head",
    NULL,
};

const baton_engine_info baton__info_mysql = {
    .name = "mysql",
    .schemes = schemes,
    .summary = "MySQL or MariaDB: GET_LOCK (session mode), lease rows or row locks",
    .uri = "mysql://[user[:password]@]host[:port]/db[?options]",
    .primitives = BATON_PRIM_LOCK | BATON_PRIM_FAIR | BATON_PRIM_RWLOCK | BATON_PRIM_SEM | BATON_PRIM_PERMITS | BATON_PRIM_LIST | BATON_PRIM_BREAK | BATON_PRIM_INFO | BATON_PRIM_LATCH |
                  BATON_PRIM_VALUE | BATON_PRIM_GROUP | BATON_PRIM_QUEUE |
                  BATON_PRIM_RATELIMIT | /* the core's, on values */
                  BATON_PRIM_ELECTION,
    .features = BATON_FEATURE_LEASE | BATON_FEATURE_FAIR,
    .notes = notes,
    .options = options,
    .built = BUILT,
    .why_not = WHY,
};

const baton__engine baton__engine_mysql = { &baton__info_mysql, TABLE };
