/* Exit codes, error reports and the default URI of baton's commands (see tool.h). */
#include "tool.h"

#include <stdlib.h>

int cli_exit_for(int rc)
{
    switch (rc) {
    case BATON_EINVAL: case BATON_EDISABLED: case BATON_ENOTSUP: return EX_USAGE;
    case BATON_EUNAVAILABLE: case BATON_EAUTH: case BATON_EPROTO: return EX_UNAVAILABLE;
    case BATON_EIO: return EX_IOERR;
    default: return EX_SOFTWARE;
    }
}

void cli_report(const char *what, int rc)
{
    const baton_error *e = baton_error_last();
    fprintf(stderr, "%s: %s: %s\n", cli_prog, what, e->code == rc && e->message && *e->message ? e->message : baton_strerror(rc));
}

const char *cli_default_uri(const char *u)
{
    if (u) return u;
    u = getenv("BATON_URI");
    return u && *u ? u : NULL;
}
