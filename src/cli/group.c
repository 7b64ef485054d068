/* baton member, baton members and baton barrier: group membership
 * (baton_group_*) and the double barrier (baton_barrier_*), on the public
 * API only. A member's COMMAND runs under baton run's supervisor (run.c). */
#include "cli.h"
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define prog cli_prog

static void usage_member(FILE *f)
{
    fprintf(f,
        "usage: baton member [options] [--id ID] [--value V] GROUP [--] COMMAND [ARG...]\n"
        "Be a member of GROUP while COMMAND runs: join with ID (default: a random one)\n"
        "and VALUE (an address, say; default empty), run COMMAND, leave when it ends.\n"
        "A member that dies is gone within its session or lease. Should the\n"
        "membership be lost while COMMAND runs, COMMAND is stopped as baton run stops\n"
        "its command on a lost lock (exit 75).\n"
        "\n"
        "  -u, --uri URI        the engine (default $BATON_URI, else the file engine)\n"
        "      --uri-file FILE  the URI on FILE's first line\n"
        "      --id ID          the member id: 1 to 128 of A-Z a-z 0-9 . _ -\n"
        "      --value VALUE    what the member shows others (at most 1024 bytes)\n"
        "  -t, --lease SECS     the membership's lease, on engines with leases (30)\n"
        "      --kill-after S   SIGKILL S seconds after the SIGTERM of a lost membership\n"
        "                       or a forwarded signal (default 10)\n"
        "      --verbose        say on stderr when the membership begins\n"
        "  -h, --help           this help\n"
        "\n"
        "COMMAND gets BATON_GROUP, BATON_MEMBER_ID and BATON_URI. Its process tree,\n"
        "signals and the watchdog are baton run's (baton run --help).\n"
        "exit: COMMAND's status; 1 a live member has ID; 64 usage; 69 engine\n"
        "unreachable; 75 membership lost while COMMAND ran; 126/127 COMMAND not\n"
        "executable/not found.\n");
}

static void usage_members(FILE *f)
{
    fprintf(f,
        "usage: baton members [-u URI] [--watch [-w SECS]] GROUP\n"
        "Print the live members of GROUP, \"ID<TAB>VALUE\" a line, sorted by id (in a\n"
        "value a backslash is \\\\, a newline \\n, a tab \\t). --watch prints the list\n"
        "again after each change, each list followed by an empty line, until -w SECS\n"
        "pass (default: until a signal).\n"
        "\n"
        "  -u, --uri URI        the engine (default $BATON_URI, else the file engine)\n"
        "      --uri-file FILE  the URI on FILE's first line\n"
        "      --watch          print the list, then again after every change\n"
        "  -w, --timeout SECS   --watch: stop after SECS (exit 0)\n"
        "  -h, --help           this help\n"
        "\n"
        "exit: 0; 64 usage; 69 engine unreachable.\n");
}

static void usage_barrier(FILE *f)
{
    fprintf(f,
        "usage: baton barrier -n N [-u URI] [-w SECS] [-t SECS] NAME [--] COMMAND...\n"
        "A double barrier: enter NAME and wait until N members have entered, run\n"
        "COMMAND, then leave and wait until every member has left (Curator's and\n"
        "kazoo's DoubleBarrier). A member that dies leaves.\n"
        "\n"
        "  -n, --count N        members to wait for (1 to 1000000)\n"
        "  -u, --uri URI        the engine (default $BATON_URI, else the file engine)\n"
        "      --uri-file FILE  the URI on FILE's first line\n"
        "  -w, --timeout SECS   wait at most SECS to enter, and again to leave\n"
        "  -t, --lease SECS     the membership's lease on engines with leases\n"
        "  -h, --help           this help\n"
        "\n"
        "COMMAND gets BATON_BARRIER and BATON_URI. exit: COMMAND's status; 1 the\n"
        "wait to enter ran out (COMMAND not run) or, after COMMAND exited 0, the wait\n"
        "to leave; 64 usage; 69 engine unreachable.\n");
}

/* baton member [options] GROUP [--] COMMAND... */
int cli_member(int argc, char **argv)
{
    cli_co o = { .cmd = "member", .allow = CO_VALUE | CO_ID | CO_LEASE | CO_VERBOSE | CO_CMD, .maxops = 1 };
    cli_hold_spec h;
    int code;

    if ((code = cli_co_parse(&o, argc, argv, usage_member)) >= 0) goto out;
    if (o.nops < 1) { code = cli_usage_error("member", "missing GROUP"); goto out; }
    if (!o.cmdv || !o.cmdc) { code = cli_usage_error("member", "missing COMMAND"); goto out; }
    memset(&h, 0, sizeof h);
    h.kind = CLI_HOLD_MEMBER;
    h.cmdn = "member";
    h.uri = o.uri;
    h.name = o.ops[0];
    h.id = o.id;
    h.value = o.value;
    h.wait_s = 0;
    h.lease_s = o.lease_s;
    h.kill_after = o.kill_after;
    h.verbose = o.verbose;
    h.busy_code = EX_BUSY_DEFAULT;
    h.argc = o.cmdc;
    h.argv = o.cmdv;
    code = cli_run_hold(&h);
out:
    cli_co_free(&o);
    return code;
}

/* S with '\', newline and tab escaped. */
static void print_escaped(const char *s)
{
    for (; *s; s++) {
        if (*s == '\\') fputs("\\\\", stdout);
        else if (*s == '\n') fputs("\\n", stdout);
        else if (*s == '\t') fputs("\\t", stdout);
        else putchar(*s);
    }
}

static void print_members(const baton_members *m)
{
    for (size_t i = 0; i < m->n; i++) {
        printf("%s\t", m->members[i].id);
        print_escaped(m->members[i].value ? m->members[i].value : "");
        putchar('\n');
    }
}

/* baton members [--watch] GROUP */
int cli_members(int argc, char **argv)
{
    cli_co o = { .cmd = "members", .allow = CO_WATCH | CO_WAIT, .maxops = 1 };
    baton_client *c = NULL;
    baton_group *g = NULL;
    baton_members m = { 0 };
    int64_t deadline;
    int rc, code;

    if ((code = cli_co_parse(&o, argc, argv, usage_members)) >= 0) goto out;
    code = 0;
    if (o.nops < 1) { code = cli_usage_error("members", "missing GROUP"); goto out; }
    if (o.wait_s >= 0 && !o.watch) { code = cli_usage_error("members", "-w is for --watch"); goto out; }
    if ((code = cli_co_client(&o, &c))) goto out;
    if ((rc = baton_group_open(&g, c, o.ops[0], NULL))) { code = cli_co_open_failed(c, "groups", "members", rc); goto out; }
    if (!o.watch) {
        if ((rc = baton_group_members(g, &m))) { cli_report("members", rc); code = cli_exit_for(rc); goto out; }
        print_members(&m);
        goto out;
    }
    deadline = o.wait_s < 0 ? INT64_MAX : now_ns() + (int64_t)(o.wait_s * 1e9);
    for (;;) {
        int64_t now = now_ns();
        if (now >= deadline) break;
        /* the first watch answers at once: the list now */
        rc = baton_group_watch(g, &m, deadline == INT64_MAX ? -1 : (deadline - now + 999999) / 1000000);
        if (rc == BATON_ETIMEDOUT) break;
        if (rc) { cli_report("members", rc); code = cli_exit_for(rc); goto out; }
        print_members(&m);
        putchar('\n');
        fflush(stdout);
        baton_members_clear(&m);
    }
out:
    baton_members_clear(&m);
    baton_group_free(g);
    baton_client_close(c);
    cli_co_free(&o);
    return code;
}

/* baton barrier -n N NAME [--] COMMAND... */
int cli_barrier(int argc, char **argv)
{
    cli_co o = { .cmd = "barrier", .allow = CO_COUNT | CO_WAIT | CO_LEASE | CO_CMD, .maxops = 1 };
    baton_group_options go = BATON_GROUP_OPTIONS_INIT;
    baton_client *c = NULL;
    baton_barrier *b = NULL;
    char *child_uri = NULL, *child_pw = NULL;
    const char *pw_var = NULL, *keys[3], *vals[3];
    int64_t wait_ms;
    int rc, code, st;
    size_t n = 0;

    if ((code = cli_co_parse(&o, argc, argv, usage_barrier)) >= 0) goto out;
    code = 0;
    if (o.count < 1) { code = cli_usage_error("barrier", "missing -n N (how many members)"); goto out; }
    if (o.nops < 1) { code = cli_usage_error("barrier", "missing NAME"); goto out; }
    if (!o.cmdv || !o.cmdc) { code = cli_usage_error("barrier", "missing COMMAND"); goto out; }
    wait_ms = o.wait_s < 0 ? -1 : (int64_t)(o.wait_s * 1000);
    go.lease_ms = (uint32_t)fmin(llround(o.lease_s * 1000), (double)UINT32_MAX);
    if ((code = cli_co_client(&o, &c))) goto out;
    if ((rc = baton_barrier_open(&b, c, o.ops[0], (uint32_t)o.count, &go))) {
        code = cli_co_open_failed(c, "barriers", "barrier", rc);
        goto out;
    }
    if (cli_child_uri(c, cli_default_uri(o.uri), &child_uri, &child_pw, &pw_var)) {
        fprintf(stderr, "%s: out of memory\n", prog);
        code = EX_SOFTWARE;
        goto out;
    }
    keys[n] = "BATON_BARRIER"; vals[n++] = o.ops[0];
    keys[n] = "BATON_URI"; vals[n++] = child_uri;
    if (child_pw && pw_var) { keys[n] = pw_var; vals[n++] = child_pw; }
    /* a signal while we wait to enter or leave ends us (the engine drops a
     * dead member); one while COMMAND runs goes to it */
    cli_co_signals();
    rc = baton_barrier_enter(b, wait_ms);
    if (rc == BATON_ETIMEDOUT) {
        fprintf(stderr, "%s: barrier %s: fewer than %lld entered in time\n", prog, o.ops[0], o.count);
        code = 1;
        goto out;
    }
    if (rc) { cli_report("barrier enter", rc); code = cli_exit_for(rc); goto out; }
    st = cli_co_run(o.cmdv, keys, vals, n, NULL, 0);
    if (st < 0) st = EX_SOFTWARE;
    if (cli_co_stopped()) { code = st; goto out; }   /* baton_barrier_free leaves */
    rc = baton_barrier_leave(b, wait_ms);
    code = st;
    if (rc == BATON_ETIMEDOUT) {
        fprintf(stderr, "%s: barrier %s: not every member left in time\n", prog, o.ops[0]);
        if (!code) code = 1;
    } else if (rc) {
        cli_report("barrier leave", rc);
        if (!code) code = cli_exit_for(rc);
    }
out:
    baton_barrier_free(b);
    cli_secret_free(child_pw);
    free(child_uri);
    baton_client_close(c);
    cli_co_free(&o);
    return code;
}
