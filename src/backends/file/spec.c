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
    "fair: no (the kernel's flock queue is not FIFO)",
    "permits: a lock file per permit, freed when its holder dies; the lease is ignored",
    "latch, election: not yet (issue #25)",
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
                  BATON_PRIM_QUEUE,
    .features = BATON_FEATURE_NOTIFY,
    .notes = notes,
    .options = options,
    .built = 1,
    .why_not = NULL,
};

extern const baton_backend baton__backend_file;
const baton__engine baton__engine_file = { &baton__info_file, &baton__backend_file };
