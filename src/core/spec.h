/* For an engine's spec.c: its description (always compiled) and the
 * registry entry that ties it to its table when the engine is built.
 * BATON__ENGINE(name, built, table) after the info: BUILT is 1 when
 * BATON_WITH_NAME is defined. */
#ifndef BATON_CORE_SPEC_H
#define BATON_CORE_SPEC_H

#include "internal.h"

#define BATON__MS(name, def, lo, hi, help) { name, "ms", def, help, lo, hi, NULL, NULL, NULL, NULL }
#define BATON__INT(name, def, lo, hi, help) { name, "int", def, help, lo, hi, NULL, NULL, NULL, NULL }
#define BATON__STR(name, def, help) { name, "string", def, help, 0, 0, NULL, NULL, NULL, NULL }
#define BATON__PATH(name, schemes, help) { name, "path", NULL, help, 0, 0, NULL, schemes, NULL, NULL }
#define BATON__BOOL(name, def, schemes, help) { name, "bool", def, help, 0, 1, NULL, schemes, NULL, NULL }
#define BATON__ENUM(name, def, choices, help) { name, "enum", def, help, 0, 0, choices, NULL, NULL, NULL }
/* a string option used only when NEEDS holds (see baton_engine_option.needs) */
#define BATON__STR_NEEDS(name, def, needs, help) { name, "string", def, help, 0, 0, NULL, NULL, NULL, needs }
#define BATON__OPT_END { NULL, NULL, NULL, NULL, 0, 0, NULL, NULL, NULL, NULL }

/* The client's timeouts, which a URI option may override. */
#define BATON__CONNECT_TIMEOUT \
    BATON__MS("connect_timeout_ms", NULL, 1, 3600000, "connect timeout (default: the client's, 2000 ms)")

#endif
