/* baton(1): flock(1) across machines, on the public API only. The commands
 * other than run (run.c) and bench (src/bench). */
#include "cli.h"
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define prog cli_prog

static void usage(FILE *f)
{
    fprintf(f,
        "usage: baton run [-u URI] [-n | -w SECS] [-E CODE] [-s | -x | --permits N | --fair]\n"
        "                 [-t LEASE_SECS] [--verbose] NAME [--] COMMAND [ARG...] | -c CMD\n"
        "       baton elect [-u URI] [-n | -w SECS] [--value V] NAME [--] COMMAND [ARG...]\n"
        "       baton elect [-u URI] --listen | --leader NAME\n"
        "       eval \"$(baton hold [-u URI] [-n | -w SECS] [-t LEASE] [--fixed] NAME)\"; ...; baton release NAME\n"
        "       baton extend [-t LEASE] NAME       (a new lease for a lock baton hold holds)\n"
        "       baton status [-u URI] [--json] NAME\n"
        "       baton list [-u URI] [PREFIX]\n"
        "       baton unlock [-u URI] --force NAME\n"
        "       baton latch [-u URI] NAME set N | down | count | wait [-w SECS]\n"
        "       baton sem [-u URI] NAME set N | add N | available | drain\n"
        "       baton fence [-q] FILE [FENCE] [-- COMMAND [ARG...]]\n"
        "       baton value [-u URI] set NAME VALUE | get NAME | delete NAME\n"
        "       baton value [-u URI] watch [-w SECS] NAME [-- COMMAND [ARG...]]\n"
        "       baton counter [-u URI] get NAME | add NAME N | set NAME N\n"
        "       baton member [-u URI] [--id ID] [--value V] GROUP [--] COMMAND [ARG...]\n"
        "       baton members [-u URI] [--watch] GROUP\n"
        "       baton queue [-u URI] put NAME DATA | size NAME\n"
        "       baton queue [-u URI] take [-w SECS] NAME [[--] COMMAND [ARG...]]\n"
        "       baton barrier [-u URI] -n N NAME [--] COMMAND [ARG...]\n"
        "       baton rate [-u URI] [-n N] [--per SECS] [--burst B] [--per-client] [-w SECS] NAME [[--] COMMAND...]\n"
        "       baton bench [-u URI] [--workload W] [options]\n"
        "       baton check [-u URI] [--clients N] [--seconds S] [--pause R] [--kill R] ... NAME\n"
        "       baton engines [--json] [NAME]\n"
        "       baton version\n"
        "\n"
        "baton run is flock(1) across machines: it holds the lock NAME on the engine\n"
        "(-u URI, else $BATON_URI, else the file engine) while COMMAND runs.\n"
        "'baton COMMAND --help' tells each command's options.\n"
        "\n"
        "exit: the child's status when it ended on its own (128+signal if killed), 1\n"
        "busy, 64 usage, 69 engine unreachable, authentication failed or no such\n"
        "database, 70 internal failure, 74 the lock store refused (a planted file, a\n"
        "lock directory others may write, an I/O error), 75 baton\n"
        "stopped CMD because the lock was lost, 128+signal when INT/TERM/HUP canceled\n"
        "the wait. baton fence: 65 fenced off (a newer fence is stored).\n");
}

static void usage_status(FILE *f)
{
    fprintf(f,
        "usage: baton status [-u URI] [--json] NAME\n"
        "Print what the engine knows about lock NAME (held, holder, fence, lease left,\n"
        "readers, writer, queue, permits), one 'key: value' line each; then, on\n"
        "engines that have them, of the value NAME (value_version, value_bytes: when\n"
        "it is set), the group NAME (members: when it has any) and the work queue\n"
        "NAME (items_waiting: when it has any), the rate limiter NAME (rate,\n"
        "rate_available, rate_next_ms: when it is configured) and the election NAME\n"
        "(leader, leader_term: when someone leads). --json has these keys always (0\n"
        "when absent or empty, null when the engine has none; rate and leader: null\n"
        "or an object).\n"
        "\n"
        "  -u, --uri URI   the engine (default $BATON_URI, else the file engine)\n"
        "      --json      one JSON object instead, every key present (null: unknown)\n"
        "      --uri-file FILE  the URI on FILE's first line (keeps a password out of argv)\n"
        "  -h, --help      this help\n"
        "\n"
        "exit: 0 when the engine answered (held or not), 64 usage, 69 engine unreachable.\n");
}

static void usage_sync(FILE *f, int latch)
{
    if (latch)
        fprintf(f,
            "usage: baton latch [-u URI] NAME set N | down | count | wait [-w SECS]\n"
            "A count-down latch: set N (1 to 1000000000) if it is not active (exit 1 if\n"
            "it is), count down by one, print the count, or wait until it is zero.\n");
    else
        fprintf(f,
            "usage: baton sem [-u URI] NAME set N | add N | available | drain\n"
            "A semaphore: set its permits (1 to 1000000000) if never set (exit 1 if set),\n"
            "add N (negative removes: baton sem NAME add -2), print the free permits, or\n"
            "take all free permits and print how many.\n");
    fprintf(f,
        "\n"
        "  -u, --uri URI       the engine (default $BATON_URI, else the file engine)\n"
        "%s"
        "  -h, --help          this help\n"
        "\n"
        "Options may also follow the operation; a negative number is an operand.\n",
        latch ? "  -w, --timeout SECS  wait at most SECS (also --wait; default: forever)\n" : "");
}

/* S as a JSON string: quotes, backslashes and control bytes escaped; other
 * bytes as they are (names are bytes; valid UTF-8 stays valid). */
static void json_str(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if (*p < 0x20) printf("\\u%04x", *p);
        else putchar(*p);
    }
    putchar('"');
}

/* What status shows of the value, group and queue NAME (issue 24): each
 * -1 when the engine has none of that kind or did not answer. */
typedef struct {
    int64_t value_version, value_bytes, members, items;
    int have_rate;               /* the rate limiter NAME (overall) is configured */
    baton_ratelimit_state rate;
    uint64_t term;               /* the election NAME's leader: its term (0: nobody leads, or no elections) */
    char leader[BATON_ELECTION_VALUE_MAX + 1];
} coord_info;

static void coord_status(baton_client *c, const char *name, coord_info *ci)
{
    baton_value *v = NULL;
    baton_election *e = NULL;
    baton_group *g = NULL;
    baton_queue *q = NULL;
    baton_value_data d = { 0 };
    baton_members m = { 0 };
    uint64_t n;
    int rc;

    ci->value_version = ci->value_bytes = ci->members = ci->items = -1;
    ci->have_rate = baton_ratelimit_inspect(c, name, BATON_RATELIMIT_OVERALL, NULL, &ci->rate) == 0;
    if (!baton_value_open(&v, c, name)) {
        rc = baton_value_get(v, &d);
        if (rc == 0 || rc == BATON_ENOENT) {
            ci->value_version = (int64_t)d.version;
            ci->value_bytes = (int64_t)d.len;
        }
        baton_value_data_clear(&d);
        baton_value_free(v);
    }
    if (!baton_group_open(&g, c, name, NULL)) {
        if (!baton_group_members(g, &m)) ci->members = (int64_t)m.n;
        baton_members_clear(&m);
        baton_group_free(g);
    }
    if (!baton_queue_open(&q, c, name, NULL)) {
        if (!baton_queue_size(q, &n)) ci->items = (int64_t)n;
        baton_queue_free(q);
    }
    ci->term = 0;
    ci->leader[0] = 0;
    if (!baton_election_open(&e, c, name, NULL)) {
        if (baton_election_leader(e, ci->leader, sizeof ci->leader, &ci->term)) ci->term = 0;
        baton_election_free(e);
    }
    /* what failed here is not status's failure: the lock's answer stands */
    baton_error_clear();
}

static int cmd_status(int argc, char **argv)
{
    enum { O_URI_FILE = CLI_LONG_ONLY, O_JSON };
    static const struct option lo[] = {
        { "uri", required_argument, NULL, CLI_LONG('u') },
        { "uri-file", required_argument, NULL, O_URI_FILE },
        { "json", no_argument, NULL, O_JSON },
        { "help", no_argument, NULL, CLI_LONG('h') },
        { NULL, 0, NULL, 0 },
    };
    cli_opts o = { .argc = argc, .argv = argv, .cmd = "status", .shorts = "u:h", .lo = lo, .permute = 1 };
    const char *uri = NULL, *name = NULL;
    char *uri_owned = NULL, *name_owned;
    baton_client *c = NULL;
    baton_lockinfo info;
    coord_info ci;
    int opt, rc, names = 0, json = 0;

    while ((opt = cli_next(&o)) != CLI_END) {
        switch (opt) {
        case O_JSON: json = 1; break;
        case CLI_BAD: free(uri_owned); return EX_USAGE;
        case CLI_OPERAND: name = o.arg; names++; break;
        case 'u':
            free(uri_owned);
            if (!(uri = uri_owned = cli_uri_arg(o.arg))) return EX_SOFTWARE;
            break;
        case O_URI_FILE:
            free(uri_owned);
            if (!(uri = uri_owned = cli_read_uri_file("status", o.arg))) return EX_USAGE;
            break;
        case 'h': free(uri_owned); usage_status(stdout); return 0;
        default: return cli_usage_error("status", "option '%s' is not handled", o.name);
        }
    }
    if (names != 1) {
        free(uri_owned);
        return cli_usage_error("status", names ? "expected one NAME" : "missing NAME");
    }
    if ((rc = baton_client_open(&c, cli_default_uri(uri), NULL))) { free(uri_owned); cli_report("open", rc); return cli_exit_for(rc); }
    free(uri_owned);
    if (!(name_owned = cli_lock_name(c, name))) {
        baton_client_close(c);
        return EX_SOFTWARE;
    }
    rc = baton_lock_info(c, name_owned, &info);
    free(name_owned);
    if (rc) {
        cli_report("status", rc);
        baton_client_close(c);
        return cli_exit_for(rc);
    }
    coord_status(c, name, &ci);
    if (json) {
        char d[1024] = "";
        int have_d = baton_client_describe(c, d, sizeof d) == 0 && d[0];
        printf("{\"name\":");
        json_str(name);
        printf(",\"backend\":");
        json_str(baton_client_backend(c));
        printf(",\"session\":");
        if (have_d) json_str(d); else printf("null");
        printf(",\"held\":%s,\"holder\":", info.held ? "true" : "false");
        if (info.held && info.holder[0]) json_str(info.holder); else printf("null");
        printf(",\"fence\":%" PRIu64 ",\"remaining_ms\":", info.fence);
        if (info.held && info.remaining_ms >= 0) printf("%" PRId64, info.remaining_ms); else printf("null");
        printf(",\"writer\":%s", info.writer > 0 ? "true" : info.writer == 0 ? "false" : "null");
        printf(",\"readers\":");
        if (info.readers >= 0) printf("%" PRId64, info.readers); else printf("null");
        printf(",\"waiting_writers\":");
        if (info.waiting_writers >= 0) printf("%" PRId64, info.waiting_writers); else printf("null");
        printf(",\"queue\":");
        if (info.queue_length >= 0) printf("%" PRId64, info.queue_length); else printf("null");
        printf(",\"permits\":");
        if (info.permits != BATON_PERMITS_UNKNOWN) printf("%" PRId64, info.permits); else printf("null");
        printf(",\"value_version\":");
        if (ci.value_version >= 0) printf("%" PRId64, ci.value_version); else printf("null");
        printf(",\"value_bytes\":");
        if (ci.value_bytes >= 0) printf("%" PRId64, ci.value_bytes); else printf("null");
        printf(",\"members\":");
        if (ci.members >= 0) printf("%" PRId64, ci.members); else printf("null");
        printf(",\"items_waiting\":");
        if (ci.items >= 0) printf("%" PRId64, ci.items); else printf("null");
        printf(",\"rate\":");
        if (ci.have_rate)
            printf("{\"permits\":%" PRIu32 ",\"interval_ms\":%" PRIu32 ",\"burst\":%" PRIu32 ",\"available\":%" PRIu64
                   ",\"next_ms\":%" PRId64 "}", ci.rate.permits, ci.rate.interval_ms, ci.rate.burst, ci.rate.available,
                   ci.rate.next_ms);
        else
            printf("null");
        printf(",\"leader\":");
        if (ci.term) {
            printf("{\"term\":%" PRIu64 ",\"value\":", ci.term);
            json_str(ci.leader);
            printf("}");
        } else {
            printf("null");
        }
        printf("}\n");
        baton_client_close(c);
        return 0;
    }
    printf("name: %s\n", name);
    printf("backend: %s\n", baton_client_backend(c));
    {
        char d[1024];
        if (baton_client_describe(c, d, sizeof d) == 0 && d[0]) printf("session: %s\n", d);
    }
    printf("held: %s\n", info.held ? "yes" : "no");
    if (info.held && info.holder[0]) printf("holder: %s\n", info.holder);
    printf("fence: %" PRIu64 "\n", info.fence);
    if (info.held && info.remaining_ms >= 0) printf("remaining_ms: %" PRId64 "\n", info.remaining_ms);
    if (info.writer > 0) printf("writer: yes\n");
    if (info.readers > 0) printf("readers: %" PRId64 "\n", info.readers);
    if (info.waiting_writers > 0) printf("waiting_writers: %" PRId64 "\n", info.waiting_writers);
    if (info.queue_length >= 0) printf("queue: %" PRId64 "\n", info.queue_length);
    /* signed: a semaphore taken below 0 by `baton sem NAME add -N` shows as negative */
    if (info.permits != BATON_PERMITS_UNKNOWN) printf("permits: %" PRId64 "\n", info.permits);
    if (ci.value_version > 0) {
        printf("value_version: %" PRId64 "\n", ci.value_version);
        printf("value_bytes: %" PRId64 "\n", ci.value_bytes);
    }
    if (ci.members > 0) printf("members: %" PRId64 "\n", ci.members);
    if (ci.items > 0) printf("items_waiting: %" PRId64 "\n", ci.items);
    if (ci.have_rate) {
        printf("rate: %" PRIu32 " per %" PRIu32 " ms, burst %" PRIu32 "\n", ci.rate.permits, ci.rate.interval_ms,
               ci.rate.burst);
        printf("rate_available: %" PRIu64 "\n", ci.rate.available);
        printf("rate_next_ms: %" PRId64 "\n", ci.rate.next_ms);
    }
    if (ci.term) {
        printf("leader: %s\n", ci.leader);
        printf("leader_term: %" PRIu64 "\n", ci.term);
    }
    baton_client_close(c);
    return 0;
}

/* baton latch NAME set N | down | count | wait [-w SECS]
 * baton sem NAME set N | add N | available | drain
 * Options anywhere; "-2" is an operand (sem add -2), not an option. */
static int cmd_sync(int argc, char **argv, int latch)
{
    static const struct option lo[] = {
        { "uri", required_argument, NULL, CLI_LONG('u') },
        { "timeout", required_argument, NULL, CLI_LONG('w') },
        { "wait", required_argument, NULL, CLI_LONG('w') },
        { "help", no_argument, NULL, CLI_LONG('h') },
        { NULL, 0, NULL, 0 },
    };
    static const struct option lo_sem[] = {
        { "uri", required_argument, NULL, CLI_LONG('u') },
        { "help", no_argument, NULL, CLI_LONG('h') },
        { NULL, 0, NULL, 0 },
    };
    const char *cmd = latch ? "latch" : "sem";
    cli_opts o = { .argc = argc, .argv = argv, .cmd = cmd, .shorts = latch ? "u:w:h" : "u:h", .lo = latch ? lo : lo_sem, .permute = 1 };
    const char *uri = NULL, *name, *op, *ops[3];
    double wait_s = -1;
    baton_client *c = NULL;
    baton_latch *la = NULL;
    baton_semaphore *se = NULL;
    int opt, rc, code = 0, was = 0, nops = 0;
    long long n = 0;
    uint64_t v = 0;

    while ((opt = cli_next(&o)) != CLI_END) {
        switch (opt) {
        case CLI_BAD: return EX_USAGE;
        case CLI_OPERAND:
            if (nops == 3) return cli_usage_error(cmd, "too many arguments ('%s')", o.arg);
            ops[nops++] = o.arg;
            break;
        case 'u': uri = o.arg; break;
        case 'w': if (cli_secs(cmd, o.name, o.arg, 0, 1e9, NULL, &wait_s)) return EX_USAGE; break;
        case 'h': usage_sync(stdout, latch); return 0;
        default: return cli_usage_error(cmd, "option '%s' is not handled", o.name);
        }
    }
    if (nops < 1) return cli_usage_error(cmd, "missing NAME");
    if (nops < 2) return cli_usage_error(cmd, "missing operation");
    name = ops[0];
    op = ops[1];
    int need_n = !strcmp(op, "set") || (!latch && !strcmp(op, "add"));
    int known = !strcmp(op, "set") || (latch ? !strcmp(op, "down") || !strcmp(op, "count") || !strcmp(op, "wait")
                                             : !strcmp(op, "add") || !strcmp(op, "available") || !strcmp(op, "drain"));
    if (!known) return cli_usage_error(cmd, "unknown operation '%s'", op);
    if (need_n && nops < 3) return cli_usage_error(cmd, "'%s' needs a count", op);
    if (!need_n && nops > 2) return cli_usage_error(cmd, "'%s' takes no count ('%s')", op, ops[2]);
    if (need_n && cli_int(ops[2], !strcmp(op, "add") ? -1000000000LL : 1, 1000000000LL, &n))
        return cli_usage_error(cmd, "bad count '%s' for '%s' (want %s to 1000000000)", ops[2], op,
                               !strcmp(op, "add") ? "-1000000000" : "1");
    if ((rc = baton_client_open(&c, cli_default_uri(uri), NULL))) { cli_report("open", rc); return cli_exit_for(rc); }
    rc = latch ? baton_latch_open(&la, c, name) : baton_semaphore_open(&se, c, name);
    if (rc) { cli_report(cmd, rc); code = cli_exit_for(rc); goto out; }
    if (latch && !strcmp(op, "set")) {
        if (!(rc = baton_latch_try_set(la, (uint64_t)n, &was)) && !was) {
            fprintf(stderr, "%s: latch %s is already set\n", prog, name);
            code = 1;
        }
    } else if (latch && !strcmp(op, "down")) {
        rc = baton_latch_count_down(la);
    } else if (latch && !strcmp(op, "count")) {
        if (!(rc = baton_latch_count(la, &v))) printf("%" PRIu64 "\n", v);
    } else if (latch && !strcmp(op, "wait")) {
        rc = baton_latch_await(la, wait_s < 0 ? -1 : (int64_t)(wait_s * 1000));
        if (rc == BATON_ETIMEDOUT) { fprintf(stderr, "%s: latch %s: wait timed out\n", prog, name); code = 1; rc = 0; }
    } else if (!latch && !strcmp(op, "set")) {
        if (!(rc = baton_semaphore_try_set(se, (uint32_t)n, &was)) && !was) {
            fprintf(stderr, "%s: semaphore %s is already set\n", prog, name);
            code = 1;
        }
    } else if (!latch && !strcmp(op, "add")) {
        rc = baton_semaphore_add(se, n);
    } else if (!latch && !strcmp(op, "available")) {
        if (!(rc = baton_semaphore_available(se, &v))) printf("%" PRIu64 "\n", v);
    } else if (!latch && !strcmp(op, "drain")) {
        if (!(rc = baton_semaphore_drain(se, &v))) printf("%" PRIu64 "\n", v);
    }
    if (rc) { cli_report(op, rc); code = cli_exit_for(rc); }
out:
    baton_latch_free(la);
    baton_semaphore_free(se);
    baton_client_close(c);
    return code;
}

/* What the library has to say (it never writes to stderr itself). */
static void log_to_stderr(int level, const char *msg, void *p)
{
    (void)p;
    if (level <= BATON_LOG_WARN)
        fprintf(stderr, "%s: %s: %s\n", prog, level == BATON_LOG_ERROR ? "error" : "warning", msg);
}

int main(int argc, char **argv)
{
    baton_log_set(log_to_stderr, NULL);
    if (argc < 2) return cli_usage_error(NULL, "missing command (run, hold, release, elect, status, list, unlock, latch, sem, value, counter, member, members, queue, barrier, rate, fence, bench, check, engines, version)");
    if (!strcmp(argv[1], "run")) return cli_run(argc - 1, argv + 1);
    if (!strcmp(argv[1], "elect")) return cli_elect(argc - 1, argv + 1);
    if (!strcmp(argv[1], "status")) return cmd_status(argc - 1, argv + 1);
    if (!strcmp(argv[1], "list")) return cli_list(argc - 1, argv + 1);
    if (!strcmp(argv[1], "unlock")) return cli_unlock(argc - 1, argv + 1);
    if (!strcmp(argv[1], "engines")) return cli_engines(argc - 1, argv + 1);
    if (!strcmp(argv[1], "fence")) return cli_fence(argc - 1, argv + 1);
    if (!strcmp(argv[1], "hold")) return cli_hold(argc - 1, argv + 1);
    if (!strcmp(argv[1], "release")) return cli_release(argc - 1, argv + 1);
    if (!strcmp(argv[1], "extend")) return cli_extend(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench")) return baton__cli_bench(argc - 1, argv + 1);
    if (!strcmp(argv[1], "check")) return baton__cli_check(argc - 1, argv + 1);
    if (!strcmp(argv[1], "latch")) return cmd_sync(argc - 1, argv + 1, 1);
    if (!strcmp(argv[1], "sem")) return cmd_sync(argc - 1, argv + 1, 0);
    if (!strcmp(argv[1], "value")) return cli_value(argc - 1, argv + 1);
    if (!strcmp(argv[1], "counter")) return cli_counter(argc - 1, argv + 1);
    if (!strcmp(argv[1], "member")) return cli_member(argc - 1, argv + 1);
    if (!strcmp(argv[1], "members")) return cli_members(argc - 1, argv + 1);
    if (!strcmp(argv[1], "queue")) return cli_queue(argc - 1, argv + 1);
    if (!strcmp(argv[1], "barrier")) return cli_barrier(argc - 1, argv + 1);
    if (!strcmp(argv[1], "rate")) return cli_rate(argc - 1, argv + 1);
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("baton %s\n", baton_version());
        return 0;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (argv[1][0] == '-') return cli_usage_error(NULL, "unrecognized option '%s'", argv[1]);
    return cli_usage_error(NULL, "unknown command '%s'", argv[1]);
}
