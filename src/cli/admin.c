/* baton list and baton unlock: what an operator asks of an engine, on the
 * public API only (baton_lock_list, baton_lock_break). */
#include "cli.h"
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define prog cli_prog

static void usage_list(FILE *f)
{
    fprintf(f,
        "usage: baton list [-u URI] [PREFIX]\n"
        "Print the names of the locks held now (those starting with PREFIX), one a\n"
        "line, in no particular order. Names an engine keeps only as a hash (the file\n"
        "engine's names of over 200 bytes) are printed as it stores them.\n"
        "\n"
        "  -u, --uri URI        the engine (default $BATON_URI, else the file engine)\n"
        "      --uri-file FILE  the URI on FILE's first line (keeps a password out of argv)\n"
        "  -h, --help           this help\n"
        "\n"
        "exit: 0, 64 usage (or an engine that cannot enumerate its locks), 69 engine\n"
        "unreachable.\n");
}

static void usage_unlock(FILE *f)
{
    fprintf(f,
        "usage: baton unlock [-u URI] --force NAME\n"
        "Break the lock NAME, whoever holds it, and bump its fence past every fence\n"
        "granted so far, so the old holder is refused by any store that checks\n"
        "fences (baton fence, docs/fencing.md). The old holder's renewal fails and it\n"
        "learns of the loss (baton run stops its command and exits 75). Prints the new\n"
        "fence. Refused without --force: breaking a lock lets two holders run unless\n"
        "what they protect checks fences.\n"
        "\n"
        "  -u, --uri URI        the engine (default $BATON_URI, else the file engine)\n"
        "      --uri-file FILE  the URI on FILE's first line\n"
        "      --force          do it\n"
        "  -h, --help           this help\n"
        "\n"
        "exit: 0 broken, 1 nobody held it (the fence is bumped all the same), 64 usage\n"
        "(or an engine that cannot break a lock: the file engine's locks are the\n"
        "kernel's; stop their holder instead), 69 engine unreachable.\n");
}

static int print_name(void *p, const char *name)
{
    (void)p;
    printf("%s\n", name);
    return 0;
}

/* The options both commands share: -u, --uri-file, -h, and --force for
 * unlock. Returns -1 to go on, else the exit code. */
static int admin_opts(int argc, char **argv, const char *cmd, int unlock, char **uri_owned,
                      const char **operand, int *noperands, int *force)
{
    enum { O_URI_FILE = CLI_LONG_ONLY, O_FORCE };
    static const struct option lo[] = {
        { "uri", required_argument, NULL, CLI_LONG('u') },
        { "uri-file", required_argument, NULL, O_URI_FILE },
        { "force", no_argument, NULL, O_FORCE },
        { "help", no_argument, NULL, CLI_LONG('h') },
        { NULL, 0, NULL, 0 },
    };
    static const struct option lo_list[] = {
        { "uri", required_argument, NULL, CLI_LONG('u') },
        { "uri-file", required_argument, NULL, O_URI_FILE },
        { "help", no_argument, NULL, CLI_LONG('h') },
        { NULL, 0, NULL, 0 },
    };
    cli_opts o = { .argc = argc, .argv = argv, .cmd = cmd, .shorts = "u:h", .lo = unlock ? lo : lo_list,
                   .permute = 1 };
    int opt;
    while ((opt = cli_next(&o)) != CLI_END) {
        switch (opt) {
        case O_FORCE: *force = 1; break;
        case CLI_BAD: return EX_USAGE;
        case CLI_OPERAND: *operand = o.arg; (*noperands)++; break;
        case 'u':
            free(*uri_owned);
            if (!(*uri_owned = cli_uri_arg(o.arg))) return EX_SOFTWARE;
            break;
        case O_URI_FILE:
            free(*uri_owned);
            if (!(*uri_owned = cli_read_uri_file(cmd, o.arg))) return EX_USAGE;
            break;
        case 'h':
            if (unlock) usage_unlock(stdout); else usage_list(stdout);
            return 0;
        default: return cli_usage_error(cmd, "option '%s' is not handled", o.name);
        }
    }
    return -1;
}

int cli_list(int argc, char **argv)
{
    char *uri_owned = NULL;
    const char *prefix = "";
    int n = 0, force = 0, rc;
    baton_client *c = NULL;

    if ((rc = admin_opts(argc, argv, "list", 0, &uri_owned, &prefix, &n, &force)) >= 0) goto out;
    if (n > 1) { rc = cli_usage_error("list", "expected at most one PREFIX"); goto out; }
    if ((rc = baton_client_open(&c, cli_default_uri(uri_owned), NULL))) {
        cli_report("open", rc);
        rc = cli_exit_for(rc);
        goto out;
    }
    if ((rc = baton_lock_list(c, prefix, print_name, NULL))) {
        cli_report("list", rc);
        rc = cli_exit_for(rc);
        goto out;
    }
    rc = fflush(stdout) == 0 ? 0 : EX_IOERR;
out:
    baton_client_close(c);
    free(uri_owned);
    return rc;
}

int cli_unlock(int argc, char **argv)
{
    char *uri_owned = NULL, *name_owned = NULL;
    const char *name = NULL;
    int n = 0, force = 0, rc;
    uint64_t fence = 0;
    baton_client *c = NULL;

    if ((rc = admin_opts(argc, argv, "unlock", 1, &uri_owned, &name, &n, &force)) >= 0) goto out;
    if (n != 1) { rc = cli_usage_error("unlock", n ? "expected one NAME" : "missing NAME"); goto out; }
    if (!force) {
        rc = cli_usage_error("unlock", "breaking '%s' lets its holder run beside the next one unless what it "
                             "protects checks fences; say --force to do it", name);
        goto out;
    }
    if ((rc = baton_client_open(&c, cli_default_uri(uri_owned), NULL))) {
        cli_report("open", rc);
        rc = cli_exit_for(rc);
        goto out;
    }
    if (!(name_owned = cli_lock_name(c, name))) { rc = EX_SOFTWARE; goto out; }
    rc = baton_lock_break(c, name_owned, &fence);
    if (rc == 0 || rc == BATON_ENOTHELD) {
        printf("fence: %" PRIu64 "\n", fence);
        if (rc) fprintf(stderr, "%s: unlock: '%s' was not held; its fence was bumped all the same\n", prog, name);
        rc = rc ? 1 : 0;
    } else {
        cli_report("unlock", rc);
        rc = cli_exit_for(rc);
    }
out:
    baton_client_close(c);
    free(name_owned);
    free(uri_owned);
    return rc;
}
