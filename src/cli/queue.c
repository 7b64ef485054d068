/* baton queue: a FIFO work queue with at-least-once take (baton_queue_*),
 * on the public API only. take's COMMAND runs under baton run's supervisor
 * (run.c): a taken item is locked to us like a lock, and its loss stops
 * COMMAND. */
#include "cli.h"
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define prog cli_prog

static void usage_queue(FILE *f)
{
    fprintf(f,
        "usage: baton queue put NAME DATA\n"
        "       baton queue take [-n | -w SECS] [-E CODE] [-t SECS] NAME [[--] CMD...]\n"
        "       baton queue size NAME\n"
        "A FIFO work queue with at-least-once take: a taken item is locked to its\n"
        "taker until done, and goes back to the queue if the taker gives it back,\n"
        "dies, or loses it. Two live takers never hold one item at once.\n"
        "\n"
        "put appends DATA (1 to 524288 bytes; '-': standard input, its bytes as they\n"
        "are). take waits for the oldest item nobody holds (-w SECS at most, -n not at\n"
        "all; default: as long as it takes). Without COMMAND it prints the item (a\n"
        "newline added unless it ends in one) and the item is done. With COMMAND,\n"
        "COMMAND gets the item on its standard input, and BATON_QUEUE, BATON_FENCE (a\n"
        "number larger than any earlier take's) and BATON_URI; the item is done when\n"
        "COMMAND exits 0 and goes back to the queue otherwise. Should the item's lock\n"
        "be lost while COMMAND runs, COMMAND is stopped as baton run stops its command\n"
        "on a lost lock (exit 75). size prints how many items wait (not taken).\n"
        "\n"
        "  -u, --uri URI        the engine (default $BATON_URI, else the file engine)\n"
        "      --uri-file FILE  the URI on FILE's first line\n"
        "  -n, --nonblock       take: do not wait; exit 1 when no item is there\n"
        "  -w, --timeout SECS   take: wait at most SECS (exit 1 when none came)\n"
        "  -E, --conflict-exit-code CODE\n"
        "                       take: the exit code when no item came (0-255, default 1):\n"
        "                       tells an empty queue from COMMAND's own exit 1\n"
        "  -t, --lease SECS     take: the item's lease, on engines with leases (30)\n"
        "      --kill-after S   take: SIGKILL S seconds after the SIGTERM of a lost item\n"
        "                       or a forwarded signal (default 10)\n"
        "      --verbose        take: say on stderr when and which item was taken\n"
        "  -h, --help           this help\n"
        "\n"
        "exit: put, size: 0. take: COMMAND's status (0 without COMMAND); 1 (or -E\n"
        "CODE) no item within the wait; 75 the item's lock lost while COMMAND ran;\n"
        "126/127 COMMAND not executable/not found. All: 64 usage; 69 engine\n"
        "unreachable.\n");
}

static int open_queue(cli_co *o, baton_client **c, baton_queue **q, const baton_queue_options *qo)
{
    int rc, code;
    if ((code = cli_co_client(o, c))) return code;
    if ((rc = baton_queue_open(q, *c, o->ops[0], qo))) return cli_co_open_failed(*c, "queues", o->cmd, rc);
    return 0;
}

static int queue_put(cli_co *o)
{
    baton_client *c = NULL;
    baton_queue *q = NULL;
    char *in = NULL;
    const char *data = o->ops[1];
    size_t len;
    int rc, code;

    if (o->nops < 2) return cli_usage_error(o->cmd, o->nops ? "missing DATA" : "missing NAME");
    len = strlen(data);
    if (!strcmp(data, "-")) {
        if ((code = cli_co_read_stdin(o->cmd, BATON_QUEUE_ITEM_MAX, &in, &len))) return code;
        data = in;
    } else if (len > BATON_QUEUE_ITEM_MAX) {
        return cli_usage_error(o->cmd, "the item is %zu bytes; the limit is %d", len, BATON_QUEUE_ITEM_MAX);
    }
    if (!len) {
        free(in);
        return cli_usage_error(o->cmd, "an item has at least one byte");
    }
    if ((code = open_queue(o, &c, &q, NULL))) goto out;
    if ((rc = baton_queue_put(q, data, len))) { cli_report(o->cmd, rc); code = cli_exit_for(rc); }
out:
    free(in);
    baton_queue_free(q);
    baton_client_close(c);
    return code;
}

static int queue_size(cli_co *o)
{
    baton_client *c = NULL;
    baton_queue *q = NULL;
    uint64_t n;
    int rc, code;

    if (o->nops < 1) return cli_usage_error(o->cmd, "missing NAME");
    if (o->nops > 1) return cli_usage_error(o->cmd, "too many arguments ('%s')", o->ops[1]);
    if ((code = open_queue(o, &c, &q, NULL))) goto out;
    if ((rc = baton_queue_size(q, &n))) { cli_report(o->cmd, rc); code = cli_exit_for(rc); }
    else printf("%" PRIu64 "\n", n);
out:
    baton_queue_free(q);
    baton_client_close(c);
    return code;
}

/* take without COMMAND: print the item, and it is done. A signal during the
 * wait ends us (the engine drops a dead waiter); the item is printed before
 * it is marked done, so a crash between the two gives it again rather than
 * losing it (at least once). */
static int take_print(cli_co *o)
{
    baton_queue_options qo = BATON_QUEUE_OPTIONS_INIT;
    baton_client *c = NULL;
    baton_queue *q = NULL;
    baton_queue_item *it = NULL;
    const char *d;
    size_t len;
    int rc, code;

    qo.lease_ms = (uint32_t)fmin(llround(o->lease_s * 1000), (double)UINT32_MAX);
    if ((code = open_queue(o, &c, &q, &qo))) goto out;
    rc = baton_queue_take(q, &it, o->nowait || o->wait_s == 0 ? 0 : o->wait_s < 0 ? -1 : (int64_t)(o->wait_s * 1000));
    if (rc == BATON_ENOENT || rc == BATON_ETIMEDOUT) {
        if (o->verbose) fprintf(stderr, "%s: %s: no item\n", prog, o->ops[0]);
        code = o->busy_code;
        goto out;
    }
    if (rc) { cli_report(o->cmd, rc); code = cli_exit_for(rc); goto out; }
    d = baton_queue_item_data(it, &len);
    if (o->verbose) fprintf(stderr, "%s: %s: took an item, fence %" PRIu64 "\n", prog, o->ops[0], baton_queue_item_fence(it));
    if (len) fwrite(d, 1, len, stdout);
    if (!len || d[len - 1] != '\n') putchar('\n');
    if (fflush(stdout) || ferror(stdout)) {
        /* nobody got it: back to the queue */
        fprintf(stderr, "%s: %s: standard output: %s; the item goes back\n", prog, o->cmd, strerror(errno));
        code = EX_IOERR;
        goto out;
    }
    rc = baton_queue_done(it);
    it = NULL;
    if (rc) { cli_report("queue done", rc); code = rc == BATON_ELOST ? EX_LOST : cli_exit_for(rc); }
out:
    baton_queue_item_free(it);
    baton_queue_free(q);
    baton_client_close(c);
    return code;
}

static int queue_take(cli_co *o)
{
    cli_hold_spec h;

    if (o->nops < 1) return cli_usage_error(o->cmd, "missing NAME");
    if (o->cmdv && !o->cmdc) return cli_usage_error(o->cmd, "missing COMMAND after --");
    if (!o->cmdv) return take_print(o);
    memset(&h, 0, sizeof h);
    h.kind = CLI_HOLD_TAKE;
    h.cmdn = "queue take";
    h.uri = o->uri;
    h.name = o->ops[0];
    h.wait_s = o->nowait ? 0 : o->wait_s;
    h.lease_s = o->lease_s;
    h.kill_after = o->kill_after;
    h.verbose = o->verbose;
    h.busy_code = o->busy_code;
    h.argc = o->cmdc;
    h.argv = o->cmdv;
    return cli_run_hold(&h);
}

/* baton queue OP ...: ARGV[0] is "queue". */
int cli_queue(int argc, char **argv)
{
    static const struct { const char *op; unsigned allow; int maxops; int (*fn)(cli_co *); } ops[] = {
        { "put", 0, 2, queue_put },
        { "take", CO_WAIT | CO_NOWAIT | CO_LEASE | CO_VERBOSE | CO_CMD | CO_BUSY, 1, queue_take },
        { "size", 0, 2, queue_size },
    };
    char cmd[32];
    int code;

    static const char *const names[] = { "put", "take", "size", NULL };

    if (argc < 2) return cli_usage_error("queue", "missing operation (put, take, size)");
    cli_co_op_first(argc, argv, names);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) { usage_queue(stdout); return 0; }
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        if (strcmp(argv[1], ops[i].op)) continue;
        cli_co o = { .cmd = cmd, .allow = ops[i].allow, .maxops = ops[i].maxops };
        snprintf(cmd, sizeof cmd, "queue %s", ops[i].op);
        if ((code = cli_co_parse(&o, argc - 1, argv + 1, usage_queue)) < 0) code = ops[i].fn(&o);
        cli_co_free(&o);
        return code;
    }
    if (argv[1][0] == '-') return cli_usage_error("queue", "missing operation (put, take, size)");
    return cli_usage_error("queue", "unknown operation '%s' (put, take, size)", argv[1]);
}
