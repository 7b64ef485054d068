/* The file engine's description (see src/core/spec.h). */
#include "core/spec.h"

static const char *const schemes[] = { "file", NULL };
static const char *const shared_choices[] = { "group", NULL };
static const baton_engine_option options[] = {
    BATON__ENUM("shared", NULL, shared_choices,
                "group: accept a lock directory an administrator shares with one group (setgid, mode 2770)"),
    BATON__OPT_END,
};
static const char *const notes[] = {
    "lock: flock(2) on a file per name; released by the kernel when the holder dies, so no lease",
    "fair: a line of waiter files in fair/<name>/, each kept locked by its waiter (a killed waiter leaves the "
    "line at once); only the head asks for the lock file; a handoff wakes the next waiter alone (inotify on the "
    "entry ahead); joining: a ticket bump, a create, a rename; plain locks of the name may still take it between "
    "two fair holders",
    "permits: a lock file per permit, freed when its holder dies; the lease is ignored",
    "value: a file per value in values/, replaced by rename (a get: 1 read; a set or delete: a lock, a read, a "
    "write, a rename); compare-and-set under an OFD lock; deletes keep a tombstone so versions keep rising; watch: "
    "inotify on the folder, woken only by that value's changes, never polls",
    "group: a member is its file in groups/<group>/, kept locked by its process: a killed member is gone at once; "
    "a listing opens and asks the lock of every member file; watchers wake by inotify and re-list every 1 s "
    "(a killed member's close can come just before its lock goes)",
    "queue: an item file per number in queues/<queue>/, taken by a non-blocking lock on it: a killed taker's "
    "item is back at once, at the head; a take asks the lock of each item before the first free one; waiting "
    "takers all wake on each put or give-back (a herd), and look again every 1 s",
    "latch: built on values by the core",
    "election: built by the core on the fair lock \"baton:election:NAME\" (its fence is the term; the oldest candidate leads) and the "
    "leader record (term, holder, value) in the value of that name; campaign: the lock's acquire + 1 get and "
    "1 compare-and-set; observe: the record's watch + lock info, re-read at least every second; a "
    "leader's death frees the lock at once (the kernel's)",
    "force unlock: refused (the kernel's lock of a live process cannot be taken away)",
    NULL,
};

const baton_engine_info baton__info_file = {
    .name = "file",
    .schemes = schemes,
    .summary = "embedded: lock files in a local directory (flock), no server",
    .uri = "file:///abs/dir (or no URI: $BATON_DIR, $XDG_RUNTIME_DIR/baton, /tmp/baton-<uid>)",
    .primitives = BATON_PRIM_LOCK | BATON_PRIM_RWLOCK | BATON_PRIM_SEM | BATON_PRIM_PERMITS | BATON_PRIM_LIST |
                  BATON_PRIM_BREAK | BATON_PRIM_INFO | BATON_PRIM_LATCH | BATON_PRIM_VALUE | BATON_PRIM_GROUP |
                  BATON_PRIM_QUEUE | BATON_PRIM_RATELIMIT | BATON_PRIM_FAIR | BATON_PRIM_ELECTION,
    .features = BATON_FEATURE_NOTIFY | BATON_FEATURE_FAIR,
    .notes = notes,
    .options = options,
    .built = 1,
    .why_not = NULL,
};

extern const baton_backend baton__backend_file;
const baton__engine baton__engine_file = { &baton__info_file, &baton__backend_file };
