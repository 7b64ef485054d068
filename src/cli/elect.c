/* baton elect's help and its watching forms (--listen, --leader); the
 * campaign itself is run.c's supervisor, shared with baton run. */
#include "cli.h"
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>

#define prog cli_prog

void cli_usage_run(FILE *f)
{
    fprintf(f,
        "usage: baton run [options] NAME [--] COMMAND [ARG...]\n"
        "       baton run [options] NAME -c COMMAND_STRING\n"
        "Run COMMAND while holding the lock NAME: flock(1) across machines.\n"
        "\n"
        "  -u, --uri URI        the engine (default $BATON_URI, else the file engine); a\n"
        "                       password in it is masked in ps at once: prefer --uri-file\n"
        "      --uri-file FILE  the URI on FILE's first line (keeps a password out of argv)\n"
        "  -n, --nonblock       do not wait: if the lock is busy, exit 1 (or -E CODE) at once\n"
        "  -w, --timeout SECS   wait at most SECS (also --wait; default: forever; 0 = -n)\n"
        "  -E, --conflict-exit-code CODE\n"
        "                       exit code when busy or the wait ran out (0-255, default 1)\n"
        "  -c, --command CMD    run sh -c CMD instead of COMMAND ARG...\n"
        "  -s, --shared         take the read side of read-write lock NAME\n"
        "  -x, --exclusive      take its write side (also -e, --write)\n"
        "      --fair           first come, first served (engines with fair locks)\n"
        "      --permits N      take one of N permits of semaphore NAME (1-1000000)\n"
        "  -t, --lease SECS     the lease, renewed while COMMAND runs (default 30;\n"
        "                       0.05 to 4294967.295: leases are 32-bit milliseconds;\n"
        "                       on etcd the client lease's TTL, unless the URI sets ttl=)\n"
        "      --kill-after S   SIGKILL S seconds after the SIGTERM of a lost lease or a\n"
        "                       forwarded signal, if anything of COMMAND is left (default 10)\n"
        "  -o, --close          release when COMMAND itself exits; what it leaves running\n"
        "                       is not waited for (flock's -o: its children do not hold it)\n"
        "      --lost-exit-code CODE\n"
        "                       exit CODE when COMMAND exited 0 but the lock turned out lost\n"
        "                       after it ended (default: keep 0, warn on stderr)\n"
        "      --verbose        on stderr: how long the wait took and the fence, or that\n"
        "                       the lock was busy (otherwise busy and timeouts are quiet)\n"
        "  -h, --help           this help\n"
        "  -V, --version        the version\n"
        "\n"
        "flock(1) options mean the same here, but: -u is the URI (there is no --unlock),\n"
        "-F (--no-fork) is refused (baton stays to renew and release the lock), and\n"
        "-c runs /bin/sh, not $SHELL. COMMAND gets BATON_LOCK, BATON_FENCE and\n"
        "BATON_URI (the engine, for a nested baton; a password goes in\n"
        "BATON_REDIS_PASSWORD, or BATON_ZK_AUTH for zk://, never in the URI).\n"
        "On the file engine a NAME starting with /, ./ or ../ is that file, flock(2)ed.\n"
        "\n"
        "The process tree: COMMAND runs in a process group of its own (and a session\n"
        "of its own without a controlling terminal; in a terminal's foreground it keeps\n"
        "baton's group), under a baton process that is a child subreaper, so every\n"
        "process it starts, daemons that call setsid included, stays in its tree. The\n"
        "lock is held until all of them have exited (unless -o). A lost lease, a\n"
        "signal (INT, TERM, HUP) and baton's own death (kill -9 too) reach the whole\n"
        "tree. If baton cannot confirm the lease in time (stopped, hung), that process\n"
        "kills the tree before the lease can run out (not on the file engine, whose\n"
        "lock cannot run out). Only what COMMAND has another service start (at,\n"
        "systemd-run, ssh, a container daemon) escapes.\n"
        "\n"
        "exit: COMMAND's status, when it ended on its own (128+N if signal N killed\n"
        "it; a lock found lost after it ended is a warning, see --lost-exit-code);\n"
        "1 (or -E CODE) busy or the wait ran out; 64 usage; 69 engine unreachable or\n"
        "authentication failed; 70 internal failure; 74 the lock store refused (a link\n"
        "or FIFO planted where a lock file belongs, an I/O error); 75 baton stopped\n"
        "COMMAND because the lock was lost (or could not be confirmed in time);\n"
        "126/127 COMMAND not executable/not found; 128+N when signal N (INT, TERM,\n"
        "HUP) canceled the wait.\n");
}

void cli_usage_elect(FILE *f)
{
    fprintf(f,
        "usage: baton elect [options] [--value VALUE] NAME [--] COMMAND [ARG...]\n"
        "       baton elect [options] [--value VALUE] NAME -c COMMAND_STRING\n"
        "       baton elect [-u URI] [-w SECS] --listen NAME\n"
        "       baton elect [-u URI] --leader NAME\n"
        "Campaign in the election NAME and run COMMAND only while this process leads\n"
        "(etcdctl elect). Leadership lost while COMMAND runs stops it, as baton run\n"
        "does for a lost lock.\n"
        "\n"
        "  -u, --uri URI        the engine (default $BATON_URI); every engine but redlock://\n"
        "                       has elections (it answers 'not supported')\n"
        "      --value VALUE    what this leader proclaims (default \"HOST PID\")\n"
        "  -n, --nonblock       do not wait: if someone else leads, exit 1 (or -E CODE)\n"
        "  -w, --timeout SECS   wait at most SECS to lead (default: forever)\n"
        "  -E, --conflict-exit-code CODE, -c, --command CMD, -t, --lease SECS,\n"
        "      --kill-after S, --verbose: as for baton run\n"
        "  -l, --listen         print the leader (\"TERM VALUE\", or \"0\" when none) and\n"
        "                       every change, one line each, until -w SECS pass or a signal\n"
        "      --leader         print the current leader once (exit 1 when none)\n"
        "\n"
        "COMMAND gets BATON_LOCK (NAME), BATON_FENCE (the term: it grows from leader to\n"
        "leader) and BATON_URI. exit: as baton run (75: leadership lost while COMMAND ran).\n");
}

/* baton_election_open, its failure reported (an engine without elections
 * in words of its own). */
int cli_election_open(baton_election **e, baton_client *c, const char *name, const baton_election_options *o)
{
    int rc = baton_election_open(e, c, name, o);
    if (rc == BATON_ENOTSUP)
        fprintf(stderr, "%s: elections are not supported by the %s engine\n", prog, baton_client_backend(c));
    else if (rc)
        cli_report("election", rc);
    return rc;
}

/* --listen and --leader: observe the election without campaigning. */
int cli_elect_watch(const char *uri, const char *name, int listen, int64_t wait_ms)
{
    baton_client *c = NULL;
    baton_election *e = NULL;
    char v[BATON_ELECTION_VALUE_MAX + 1];
    uint64_t fence = 0;
    int64_t deadline;
    int rc, code = 0;

    if ((rc = baton_client_open(&c, uri, NULL))) { cli_report("open", rc); return cli_exit_for(rc); }
    if ((rc = cli_election_open(&e, c, name, NULL))) {
        code = cli_exit_for(rc);
        goto out;
    }
    if (!listen) {
        rc = baton_election_leader(e, v, sizeof v, &fence);
        if (rc == BATON_ENOTHELD) { code = 1; goto out; }
        if (rc) { cli_report("leader", rc); code = cli_exit_for(rc); goto out; }
        printf("%" PRIu64 " %s\n", fence, v);
        goto out;
    }
    /* -w SECS bounds the whole listen, not each wait between two changes */
    /* wait_ms is at most 1e12 (cli_secs): no overflow */
    deadline = wait_ms < 0 ? INT64_MAX : now_ns() + wait_ms * 1000000;
    for (;;) {
        int64_t left = deadline == INT64_MAX ? -1 : (deadline - now_ns()) / 1000000;
        rc = baton_election_observe(e, v, sizeof v, &fence, left < 0 && deadline != INT64_MAX ? 0 : left);
        if (rc == BATON_ETIMEDOUT) break;
        if (rc) { cli_report("observe", rc); code = cli_exit_for(rc); goto out; }
        if (fence) printf("%" PRIu64 " %s\n", fence, v);
        else printf("0\n");
        fflush(stdout);
    }
out:
    baton_election_free(e);
    baton_client_close(c);
    return code;
}

