/* baton value and baton counter: small named data every client can read,
 * set and watch (baton_value_*, baton_counter_*), on the public API only. */
#include "cli.h"
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define prog cli_prog

static void usage_value(FILE *f)
{
    fprintf(f,
        "usage: baton value set [--if-version V | --create] [--version] NAME VALUE\n"
        "       baton value get [--version] [--raw] NAME\n"
        "       baton value delete [--if-version V] NAME\n"
        "       baton value watch [-w SECS] [--version] [-z] NAME [-- COMMAND [ARG...]]\n"
        "A small named value (configuration, an address, progress) every client can\n"
        "read, set and watch. Each change gives it a larger version; 0 is absent.\n"
        "\n"
        "  -u, --uri URI        the engine (default $BATON_URI, else the file engine)\n"
        "      --uri-file FILE  the URI on FILE's first line\n"
        "      --if-version V   set or delete only if the version is V now (else exit 1)\n"
        "      --create         set only if absent (else exit 1)\n"
        "      --version        get: print the version on a line before the value;\n"
        "                       set: print the new version; watch: \"VERSION VALUE\" lines\n"
        "      --raw            get: the value's bytes only (no newline added)\n"
        "  -w, --timeout SECS   watch: stop after SECS (exit 0; default: never)\n"
        "  -z, --null           watch: each value as it is, ended by a NUL byte\n"
        "  -h, --help           this help\n"
        "\n"
        "VALUE '-' reads the value from standard input (its bytes as they are).\n"
        "get prints the value and a newline (none added when it ends in one).\n"
        "watch prints the value now, then each new one, a line each: a backslash as\n"
        "\\\\ and a newline as \\n; a deleted value as an empty line (\"0\" with\n"
        "--version). It may skip values set in a burst, never the last. With COMMAND,\n"
        "watch runs it for the value now and after each change, one at a time, with\n"
        "BATON_VALUE, BATON_VERSION (0: absent) and BATON_URI in its environment and\n"
        "the value on its standard input (BATON_VALUE is unset when the value is over\n"
        "128 KiB or holds a NUL byte).\n"
        "\n"
        "exit: 0; 1 get or delete of an absent value, or --if-version/--create not met;\n"
        "64 usage; 69 engine unreachable; 128+N when signal N ended a watch.\n");
}

static void usage_counter(FILE *f)
{
    fprintf(f,
        "usage: baton counter get [--version] NAME\n"
        "       baton counter add NAME N\n"
        "       baton counter set [--if-version V] [--version] NAME N\n"
        "A signed 64-bit counter kept in the value NAME as decimal text (absent: 0).\n"
        "get prints the count (--version: the version on a line before it); add adds\n"
        "N (negative subtracts) atomically and prints the count after; set sets it,\n"
        "with --if-version only if the version is V now.\n"
        "\n"
        "  -u, --uri URI        the engine (default $BATON_URI, else the file engine)\n"
        "      --uri-file FILE  the URI on FILE's first line\n"
        "  -h, --help           this help\n"
        "\n"
        "exit: 0; 1 --if-version not met; 64 usage (a bad number, an overflow);\n"
        "65 the value is not a decimal integer; 69 engine unreachable.\n");
}

/* The value's bytes, and a newline unless RAW or it ends in one. */
static void print_value(const char *d, size_t len, int raw)
{
    if (len) fwrite(d, 1, len, stdout);
    if (!raw && (!len || d[len - 1] != '\n')) putchar('\n');
}

/* Opens the client and the value NAME: 0, or the exit code. */
static int open_value(cli_co *o, baton_client **c, baton_value **v)
{
    int rc, code;
    if ((code = cli_co_client(o, c))) return code;
    if ((rc = baton_value_open(v, *c, o->ops[0]))) return cli_co_open_failed(*c, "values", o->cmd, rc);
    return 0;
}

/* "version is not V now" and friends: the condition's failure, exit 1. */
static int not_met(const cli_co *o, const char *name, int rc)
{
    if (rc == BATON_ENOENT) fprintf(stderr, "%s: %s: %s is absent\n", prog, o->cmd, name);
    else if (o->create) fprintf(stderr, "%s: %s: %s exists already\n", prog, o->cmd, name);
    else if (!o->have_if) fprintf(stderr, "%s: %s: %s changed meanwhile (the engine said: %s)\n", prog, o->cmd, name,
                                  baton_error_last()->message ? baton_error_last()->message : baton_strerror(rc));
    else fprintf(stderr, "%s: %s: %s is not at version %" PRIu64 "\n", prog, o->cmd, name, o->if_version);
    return 1;
}

static int value_set(cli_co *o)
{
    baton_client *c = NULL;
    baton_value *v = NULL;
    char *in = NULL;
    const char *data = o->ops[1];
    size_t len;
    uint64_t ver = 0;
    int rc, code;

    if (o->nops < 2) return cli_usage_error(o->cmd, o->nops ? "missing VALUE" : "missing NAME");
    len = strlen(data);
    if (!strcmp(data, "-")) {
        if ((code = cli_co_read_stdin(o->cmd, BATON_VALUE_MAX, &in, &len))) return code;
        data = in;
    } else if (len > BATON_VALUE_MAX) {
        return cli_usage_error(o->cmd, "the value is %zu bytes; the limit is %d", len, BATON_VALUE_MAX);
    }
    if ((code = open_value(o, &c, &v))) goto out;
    rc = baton_value_set(v, data, len, o->create ? 0 : o->have_if ? o->if_version : BATON_VALUE_ANY, &ver);
    if (rc == BATON_ECONFLICT) code = not_met(o, o->ops[0], rc);
    else if (rc) { cli_report(o->cmd, rc); code = cli_exit_for(rc); }
    else if (o->version) printf("%" PRIu64 "\n", ver);
out:
    free(in);
    baton_value_free(v);
    baton_client_close(c);
    return code;
}

static int value_get(cli_co *o)
{
    baton_client *c = NULL;
    baton_value *v = NULL;
    baton_value_data d = { 0 };
    int rc, code;

    if (o->nops < 1) return cli_usage_error(o->cmd, "missing NAME");
    if ((code = open_value(o, &c, &v))) goto out;
    rc = baton_value_get(v, &d);
    if (rc == BATON_ENOENT) {
        /* as grep finding nothing: 1, and a word on stderr */
        fprintf(stderr, "%s: %s: %s is absent\n", prog, o->cmd, o->ops[0]);
        code = 1;
    } else if (rc) {
        cli_report(o->cmd, rc);
        code = cli_exit_for(rc);
    } else {
        if (o->version) printf("%" PRIu64 "\n", d.version);
        print_value(d.data, d.len, o->raw);
    }
out:
    baton_value_data_clear(&d);
    baton_value_free(v);
    baton_client_close(c);
    return code;
}

static int value_delete(cli_co *o)
{
    baton_client *c = NULL;
    baton_value *v = NULL;
    int rc, code;

    if (o->nops < 1) return cli_usage_error(o->cmd, "missing NAME");
    if ((code = open_value(o, &c, &v))) goto out;
    rc = baton_value_delete(v, o->have_if ? o->if_version : BATON_VALUE_ANY);
    if (rc == BATON_ENOENT || rc == BATON_ECONFLICT) code = not_met(o, o->ops[0], rc);
    else if (rc) { cli_report(o->cmd, rc); code = cli_exit_for(rc); }
out:
    baton_value_free(v);
    baton_client_close(c);
    return code;
}

/* ---- watch -------------------------------------------------------------------- */

/* One line of watch's output: the value with '\' and newlines escaped, or
 * (-z) as it is and a NUL. */
static void print_change(const cli_co *o, const baton_value_data *d)
{
    if (o->version) printf(d->version ? "%" PRIu64 " " : "%" PRIu64, d->version);
    if (o->null) {
        if (d->len) fwrite(d->data, 1, d->len, stdout);
        putchar(0);
    } else {
        for (size_t i = 0; i < d->len; i++) {
            if (d->data[i] == '\\') fputs("\\\\", stdout);
            else if (d->data[i] == '\n') fputs("\\n", stdout);
            else putchar(d->data[i]);
        }
        putchar('\n');
    }
    fflush(stdout);
}

/* Runs COMMAND for the value D (coordopts.c's cli_co_run): its status, or
 * -1 (reported). */
static int run_for(const cli_co *o, const baton_value_data *d, const char *const *keys, const char *const *vals)
{
    char ver[32];
    const char *ks[8], *vs[8];
    size_t n = 0;

    snprintf(ver, sizeof ver, "%" PRIu64, d->version);
    ks[n] = "BATON_VALUE";
    /* an environment string holds no NUL and no more than 128 KiB */
    vs[n++] = d->data && d->len < 128 * 1024 && strlen(d->data) == d->len ? d->data : NULL;
    ks[n] = "BATON_VERSION";
    vs[n++] = ver;
    for (int i = 0; keys[i]; i++) { ks[n] = keys[i]; vs[n++] = vals[i]; }
    /* absent: an empty input, not ours */
    return cli_co_run(o->cmdv, ks, vs, n, d->data ? d->data : "", d->len);
}

/* A failure that says nothing about the value: the watch is tried again. */
static int transient(int rc)
{
    return rc == BATON_EUNAVAILABLE || rc == BATON_EIO || rc == BATON_EPROTO;
}

static int value_watch(cli_co *o)
{
    baton_client *c = NULL;
    baton_value *v = NULL;
    baton_value_data d = { 0 };
    char *child_uri = NULL, *child_pw = NULL;
    const char *pw_var = NULL, *keys[3] = { NULL }, *vals[3] = { NULL };
    int64_t deadline = o->wait_s < 0 ? INT64_MAX : now_ns() + (int64_t)(o->wait_s * 1e9);
    uint64_t known = UINT64_MAX;   /* nothing reported yet */
    int rc, code, first = 1, warned = 0;

    if (o->nops < 1) return cli_usage_error(o->cmd, "missing NAME");
    if (o->cmdv && !o->cmdc) return cli_usage_error(o->cmd, "missing COMMAND after --");
    if (o->cmdv && (o->null || o->version))
        return cli_usage_error(o->cmd, "%s prints values; with COMMAND nothing is printed",
                               o->null ? "-z" : "--version");
    if ((code = open_value(o, &c, &v))) goto out;
    if (o->cmdv) {
        if (cli_child_uri(c, cli_default_uri(o->uri), &child_uri, &child_pw, &pw_var)) {
            fprintf(stderr, "%s: out of memory\n", prog);
            code = EX_SOFTWARE;
            goto out;
        }
        keys[0] = "BATON_URI";
        vals[0] = child_uri;
        if (child_pw && pw_var) { keys[1] = pw_var; vals[1] = child_pw; }
        cli_co_signals();
    }
    for (;;) {
        int64_t now = now_ns(), left;
        if (first) {
            /* the value now, first: absent is version 0 */
            rc = baton_value_get(v, &d);
            if (rc == BATON_ENOENT) rc = 0;
        } else {
            if (now >= deadline) break;
            left = deadline == INT64_MAX ? -1 : (deadline - now + 999999) / 1000000;
            rc = baton_value_watch(v, known, &d, left);
            if (rc == BATON_ETIMEDOUT) break;
        }
        if (rc && transient(rc) && !first) {
            /* a watcher outlives an engine's restart: say so once, retry */
            if (!warned) cli_report("watch (retrying every second)", rc);
            warned = 1;
            sleep(1);
            continue;
        }
        if (rc) { cli_report(o->cmd, rc); code = cli_exit_for(rc); goto out; }
        if (warned) fprintf(stderr, "%s: %s: watching again\n", prog, o->ops[0]);
        warned = first = 0;
        if (d.version != known) {
            known = d.version;
            if (!o->cmdv) {
                print_change(o, &d);
            } else {
                int st = run_for(o, &d, keys, vals);
                if (cli_co_stopped()) { code = 128 + cli_co_stopped(); goto out; }
                if (st < 0) { code = EX_SOFTWARE; goto out; }
                if (st) fprintf(stderr, "%s: %s: %s exited %d (version %" PRIu64 "); watching on\n", prog,
                                o->ops[0], o->cmdv[0], st, known);
            }
        }
        baton_value_data_clear(&d);
    }
out:
    baton_value_data_clear(&d);
    cli_secret_free(child_pw);
    free(child_uri);
    baton_value_free(v);
    baton_client_close(c);
    return code;
}

/* baton value OP ...: ARGV[0] is "value". */
int cli_value(int argc, char **argv)
{
    static const struct { const char *op; unsigned allow; int maxops; int (*fn)(cli_co *); } ops[] = {
        { "set", CO_IFVER | CO_CREATE | CO_VERSION, 2, value_set },
        { "get", CO_VERSION | CO_RAW, 1, value_get },
        { "delete", CO_IFVER, 1, value_delete },
        { "watch", CO_WAIT | CO_VERSION | CO_NULL | CO_CMD, 1, value_watch },
    };
    char cmd[32];
    int code;

    static const char *const names[] = { "set", "get", "delete", "watch", NULL };

    if (argc < 2) return cli_usage_error("value", "missing operation (set, get, delete, watch)");
    cli_co_op_first(argc, argv, names);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) { usage_value(stdout); return 0; }
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        if (strcmp(argv[1], ops[i].op)) continue;
        cli_co o = { .cmd = cmd, .allow = ops[i].allow, .maxops = ops[i].maxops };
        snprintf(cmd, sizeof cmd, "value %s", ops[i].op);
        if ((code = cli_co_parse(&o, argc - 1, argv + 1, usage_value)) < 0) code = ops[i].fn(&o);
        cli_co_free(&o);
        return code;
    }
    if (argv[1][0] == '-') return cli_usage_error("value", "missing operation (set, get, delete, watch)");
    return cli_usage_error("value", "unknown operation '%s' (set, get, delete, watch)", argv[1]);
}

/* ---- counter ------------------------------------------------------------------ */

static int counter_main(cli_co *o, const char *op)
{
    baton_client *c = NULL;
    baton_counter *k = NULL;
    long long n = 0;
    int64_t count;
    uint64_t ver;
    int rc, code;

    if (o->nops < 1) return cli_usage_error(o->cmd, "missing NAME");
    if (strcmp(op, "get") && o->nops < 2) return cli_usage_error(o->cmd, "missing N");
    if (!strcmp(op, "get") && o->nops > 1) return cli_usage_error(o->cmd, "too many arguments ('%s')", o->ops[1]);
    if (o->nops > 1 && cli_int(o->ops[1], INT64_MIN, INT64_MAX, &n))
        return cli_usage_error(o->cmd, "bad number '%s' (want a signed 64-bit integer)", o->ops[1]);
    if ((code = cli_co_client(o, &c))) return code;
    if ((rc = baton_counter_open(&k, c, o->ops[0]))) {
        code = cli_co_open_failed(c, "values", o->cmd, rc);
        goto out;
    }
    if (!strcmp(op, "get")) {
        if (!(rc = baton_counter_get(k, &count, &ver))) {
            if (o->version) printf("%" PRIu64 "\n", ver);
            printf("%" PRId64 "\n", count);
        }
    } else if (!strcmp(op, "add")) {
        if (!(rc = baton_counter_add(k, (int64_t)n, &count))) printf("%" PRId64 "\n", count);
    } else {
        rc = baton_counter_set(k, (int64_t)n, o->have_if ? o->if_version : BATON_VALUE_ANY, &ver);
        if (!rc && o->version) printf("%" PRIu64 "\n", ver);
    }
    if (rc == BATON_ECONFLICT) code = not_met(o, o->ops[0], rc);
    else if (rc == BATON_EPROTO) { cli_report(o->cmd, rc); code = EX_FENCED; }   /* 65: not a count */
    else if (rc) { cli_report(o->cmd, rc); code = cli_exit_for(rc); }
out:
    baton_counter_free(k);
    baton_client_close(c);
    return code;
}

/* baton counter OP ...: ARGV[0] is "counter". */
int cli_counter(int argc, char **argv)
{
    char cmd[32];
    int code;
    unsigned allow;

    static const char *const names[] = { "get", "add", "set", NULL };

    if (argc < 2) return cli_usage_error("counter", "missing operation (get, add, set)");
    cli_co_op_first(argc, argv, names);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) { usage_counter(stdout); return 0; }
    if (!strcmp(argv[1], "get")) allow = CO_VERSION;
    else if (!strcmp(argv[1], "add")) allow = 0;
    else if (!strcmp(argv[1], "set")) allow = CO_IFVER | CO_VERSION;
    else if (argv[1][0] == '-') return cli_usage_error("counter", "missing operation (get, add, set)");
    else return cli_usage_error("counter", "unknown operation '%s' (get, add, set)", argv[1]);
    snprintf(cmd, sizeof cmd, "counter %s", argv[1]);
    cli_co o = { .cmd = cmd, .allow = allow, .maxops = 2 };
    if ((code = cli_co_parse(&o, argc - 1, argv + 1, usage_counter)) < 0) code = counter_main(&o, argv[1]);
    cli_co_free(&o);
    return code;
}
