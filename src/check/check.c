/* baton check: the command. Options, a preflight on the engine (so that an
 * unreachable engine is 69 and a primitive it lacks 64 before any client
 * starts), the run (loop.c), the report and the exit code: 0 when every
 * safety property held, 1 when one failed (with the evidence). */
#include "check.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CMD "check"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: baton check [-u URI] [options] NAME\n"
        "Hammers lock NAME with client processes that pause, crash and lose leases;\n"
        "every grant does a read-modify-write on two registers the checker keeps: a\n"
        "fenced one (refuses a fence below the highest it saw) and a plain one. Then\n"
        "it says from the record whether mutual exclusion and fencing held.\n"
        "\n"
        "  -u, --uri URI          the engine (default $BATON_URI, else the file engine)\n"
        "      --clients N        client processes (1-%d, default 8)\n"
        "      --seconds S        how long (default 30)\n"
        "      --grants N         stop after N grants (--seconds is then a limit)\n"
        "  -t, --lease SECS       the lease of each grant (default 2; engines with leases)\n"
        "      --work SECS        a holder's work between its read and its write (default 0.005)\n"
        "      --fair             FIFO locks; the report says whether grants kept the order\n"
        "  -s, --shared           read-write lock NAME: even clients write, odd ones read\n"
        "      --permits N        N permits of NAME (baton_permits, 1-%d): at most N holders\n"
        "      --queue            work queue NAME: each client puts an item, takes the\n"
        "                         oldest, works, and calls done; no item held by two live\n"
        "                         takers at once, every item put done (use a queue of its own)\n"
        "      --group            group NAME: client 0 lists the members, the others join\n"
        "                         and leave; no member listed after its end + --bound\n"
        "      --bound SECS       --group: the engine's notice time past a leave, or past\n"
        "                         a lease after a kill or pause (default 1)\n"
        "      --pause R          SIGSTOP this fraction of holders (0-1) past the lease, then\n"
        "                         SIGCONT: half during their work, half after their check\n"
        "      --kill R           SIGKILL this fraction of holders (replaced at once)\n"
        "      --pause-waiting R  SIGSTOP this fraction of waiters, during their wait\n"
        "      --kill-waiting R   SIGKILL this fraction of waiters\n"
        "      --link-freeze R    freeze the link to the engine of this fraction of holders\n"
        "                         (and of waiters) past the lease: the checker's own\n"
        "                         forwarder stops relaying, the sockets stay open\n"
        "      --link-cut R       reset the connections of this fraction of holders (and\n"
        "                         of waiters), both sides\n"
        "      --run              each client is a `baton run` of this binary whose command\n"
        "                         writes ticks: a tick after another client's grant is a\n"
        "                         command that outlived its lock\n"
        "  -w, --wait SECS        --run: baton run's -w (default: wait forever)\n"
        "      --run-stubborn     --run: the command ignores SIGTERM and hands its work to\n"
        "                         a process outside its tree, which baton run cannot stop\n"
        "                         (a control: the check must fail)\n"
        "      --fault-cmd stop=CMD, --fault-cmd start=CMD\n"
        "                         server faults: run CMD with sh -c (both needed)\n"
        "      --fault-every S    up time between server faults (default 5)\n"
        "      --fault-down S     down time of each (default 1)\n"
        "      --unfenced         the fenced register ignores fences (a resource without\n"
        "                         fencing: with pauses on a lease engine the check fails)\n"
        "      --seed N           the faults' random choices (default: from the clock)\n"
        "      --json             the report as one JSON object\n"
        "      --svg FILE         a timeline of the run, one lane per client\n"
        "      --record FILE      every event of the run, a line each (time, client, what)\n"
        "  -h, --help             this help\n"
        "\n"
        "exit: 0 every safety property held, 1 one failed, 64 usage, 69 engine\n"
        "unreachable, 70 internal failure. See docs/check.md.\n",
        CHECK_MAX_CLIENTS, CHECK_MAX_PERMITS);
}

enum {
    O_CLIENTS = CLI_LONG_ONLY, O_SECONDS, O_GRANTS, O_WORK, O_FAIR, O_PERMITS, O_PAUSE, O_KILL, O_PAUSE_W, O_KILL_W,
    O_FAULT, O_EVERY, O_DOWN, O_UNFENCED, O_SEED, O_JSON, O_SVG, O_RECORD, O_LFREEZE, O_LCUT, O_RUN, O_STUBBORN,
    O_QUEUE, O_GROUP, O_BOUND
};

static int rate(const char *name, const char *s, double *out)
{
    return cli_secs(CMD, name, s, 0, 1, "a fraction", out);
}

static const char *prim_name(const check_opts *o)
{
    static const char *const names[] = { "lock", "rwlock", "permits", "queue", "group" };
    return o->prim == PRIM_LOCK && o->fair ? "fair lock" : names[o->prim];
}

/* The engine answers, and has the primitive: before any client starts. */
static int preflight(const check_opts *o, char *backend, size_t n)
{
    baton_client *c = NULL;
    baton_lock *l = NULL;
    baton_rwlock *rw = NULL;
    baton_permits *pm = NULL;
    baton_queue *q = NULL;
    baton_group *g = NULL;
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    baton_lockinfo info = BATON_LOCK_INFO_INIT;
    int rc, was = 0;

    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;

    lo.lease_ms = (uint32_t)(o->lease * 1000);
    lo.fair = o->fair;
    co.lease_ms = lo.lease_ms;   /* -t also for etcd's client lease (the URI's ttl= wins) */
    if ((rc = baton_client_open(&c, o->uri, &co))) { cli_report("open", rc); return cli_exit_for(rc); }
    snprintf(backend, n, "%s", baton_client_backend(c));
    /* reach the engine itself: opening a client may be lazy */
    if ((rc = baton_lock_info(c, o->name, &info)) && rc != BATON_ENOTSUP) { cli_report("engine", rc); goto out; }
    switch (o->prim) {
    case PRIM_LOCK: rc = baton_lock_open(&l, c, o->name, &lo); break;
    case PRIM_RWLOCK: rc = baton_rwlock_open(&rw, c, o->name, &lo); break;
    case PRIM_QUEUE: rc = baton_queue_open(&q, c, o->name, NULL); break;
    case PRIM_GROUP: rc = baton_group_open(&g, c, o->name, NULL); break;
    default:
        if (!(rc = baton_permits_open(&pm, c, o->name)) && !(rc = baton_permits_try_set(pm, (uint32_t)o->permits, &was))
            && !was)
            fprintf(stderr, "baton check: note: the permits of %s were set before this run (by it: %d)\n", o->name,
                    o->permits);
        break;
    }
    if (rc) cli_report(prim_name(o), rc);
out:
    baton_queue_free(q);
    baton_group_free(g);
    baton_lock_free(l);
    baton_rwlock_free(rw);
    baton_permits_free(pm);
    baton_client_close(c);
    return rc ? cli_exit_for(rc) : 0;
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}


static const char *fair_word(const check_opts *o, const check_result *r)
{
    if (!o->fair) return NULL;
    if (!r->fair_checked) return "not checked (faults reorder waiters)";
    return r->fair_inversions ? "broken" : "kept";
}

static void json_evidence(const check_result *r);

static void report_json(const check_opts *o, const char *backend, const check_hist *h, const check_result *r)
{
    const char *fw = fair_word(o, r);
    printf("{\"engine\":");
    json_str(stdout, backend);
    printf(",\"name\":");
    json_str(stdout, o->name);
    if (o->prim == PRIM_QUEUE || o->prim == PRIM_GROUP) {
        printf(",\"primitive\":\"%s\",\"clients\":%d,\"seconds\":%g,\"lease_s\":%g,\"seed\":%lu,", prim_name(o),
               o->clients, o->seconds, o->lease, o->seed);
        coord_report_json(o, h, r);
        printf("\"ok\":%s,\"evidence_count\":%ld,\"evidence\":[", r->ok ? "true" : "false", r->evidence_n);
        json_evidence(r);
        printf("]}\n");
        return;
    }
    printf(",\"primitive\":\"%s\",\"clients\":%d,\"seconds\":%g,\"lease_s\":%g,\"seed\":%lu,\"unfenced\":%s,"
           "\"grants\":%ld,\"overlaps\":%ld,\"overlaps_after_loss\":%ld,\"overlaps_unexplained\":%ld,"
           "\"plain_lost_updates\":%ld,\"stale_reads_refused\":%ld,\"stale_writes_refused\":%ld,"
           "\"stale_writes_accepted\":%ld,\"writes_accepted\":%ld,\"leases_lost\":%ld,"
           "\"losses_reported_before_write\":%ld,\"losses_in_flight\":%ld,\"losses_unreported\":%ld,"
           "\"fences_increasing\":%s,\"fence_backs\":%ld,",
           prim_name(o), o->clients, o->seconds, o->lease, o->seed, o->unfenced ? "true" : "false", r->grants,
           r->overlaps, r->overlaps_lost, r->overlaps_unexplained, h->plain_stale, h->reads_refused,
           h->writes_refused, h->stale_accepted, h->writes_ok, r->lost, r->lost_reported + r->lost_inflight,
           r->lost_inflight, r->lost_unreported, o->prim == PRIM_PERMITS ? "null" : r->fences_ok ? "true" : "false",
           r->fence_backs);
    if (r->recoveries) printf("\"recovery_p50_s\":%.4f,\"recovery_max_s\":%.4f,", r->rec_p50, r->rec_max);
    else printf("\"recovery_p50_s\":null,\"recovery_max_s\":null,");
    printf("\"recoveries\":%ld,\"kills_unrecovered\":%ld,\"fair_order\":", r->recoveries, r->kills_unrecovered);
    if (fw) json_str(stdout, fw);
    else printf("null");
    printf(",\"fair_inversions\":%ld,\"pauses\":%ld,\"pauses_holding\":%ld,\"pauses_after_check\":%ld,"
           "\"pauses_waiting\":%ld,\"kills\":%ld,\"kills_holding\":%ld,\"kills_waiting\":%ld,\"server_faults\":%ld,"
           "\"acquire_errors\":%ld,\"client_exits\":%ld,\"link_freezes\":%ld,\"link_cuts\":%ld,"
           "\"links_holding\":%ld,\"links_waiting\":%ld,\"run\":%s,",
           r->fair_inversions, h->pauses, h->pauses_holding, h->pauses_writing, h->pauses_waiting, h->kills,
           h->kills_holding, h->kills_waiting, h->srv_faults, h->errors, h->exits, h->link_freezes, h->link_cuts,
           h->links_holding, h->links_waiting, o->run ? "true" : "false");
    if (o->run)
        printf("\"run_stubborn\":%s,\"command_writes\":%ld,\"writes_after_grant\":%ld,\"writes_after_grant_paused\":%ld,"
               "\"writes_after_grant_max_s\":%.4f,\"run_exits_ok\":%ld,\"run_exits_lost\":%ld,\"run_exits_busy\":%ld,"
               "\"run_exits_other\":%ld,", o->run_stubborn ? "true" : "false", h->ticks, r->ticks_after_grant,
               r->ticks_after_pause, r->tick_late_max, h->run_ok, h->run_lost, h->run_busy, h->run_other);
    if (o->run)
        printf("\"pauses_baton\":%ld,\"pauses_tree\":%ld,\"watchdog_cases\":%ld,\"watchdog_dead_before_grant\":%ld,"
               "\"commands_killed_by_run\":%ld,\"grant_ends\":\"%s\",\"wait_s\":",
               h->pauses_baton, h->pauses_tree, r->wd_cases, r->wd_dead, h->cmd_killed,
               h->no_pidfd ? "baton run exit" : "command exit");
    if (o->run && o->wait >= 0)
        printf("%g,\"wait_overruns\":%ld,\"wait_overrun_max_s\":%.3f,", o->wait, h->wait_overruns, h->wait_overrun_max);
    else if (o->run)
        printf("null,\"wait_overruns\":null,\"wait_overrun_max_s\":null,");
    printf("\"ok\":%s,\"evidence_count\":%ld,\"evidence\":[", r->ok ? "true" : "false", r->evidence_n);
    json_evidence(r);
    printf("]}\n");
}

static void json_evidence(const check_result *r)
{
    {
        const char *p = r->evidence;
        int first = 1;
        while (*p) {
            size_t n = strcspn(p, "\n");
            char line[512];
            snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
            if (!first) putchar(',');
            json_str(stdout, line);
            first = 0;
            p += n + (p[n] == '\n');
        }
    }
}

static void report_text(const check_opts *o, const char *backend, const check_hist *h, const check_result *r)
{
    const char *fw = fair_word(o, r);
    if (o->prim == PRIM_QUEUE || o->prim == PRIM_GROUP) {
        coord_report_text(o, backend, h, r);
        return;
    }
    printf("baton check: %s %s \"%s\", %d clients%s, %g s, lease %g s, seed %lu%s\n", backend, prim_name(o), o->name,
           o->clients, o->run ? o->run_stubborn ? " (baton run, a command that ignores SIGTERM)" : " (baton run)" : "",
           o->seconds, o->lease, o->seed, o->unfenced ? ", UNFENCED register" : "");
    printf("  grants                              %ld\n", r->grants);
    printf("  overlaps (plain register)           %ld (%ld after a lost grant, %ld unexplained)\n", r->overlaps,
           r->overlaps_lost, r->overlaps_unexplained);
    printf("  lost updates on the plain register  %ld\n", h->plain_stale);
    printf("  stale reads refused by the fence    %ld\n", h->reads_refused);
    printf("  stale writes refused by the fence   %ld\n", h->writes_refused);
    printf("  stale writes accepted (must be 0)   %ld\n", h->stale_accepted);
    printf("  leases lost                         %ld (reported before the next write: %ld, of which %ld were\n"
           "                                      checked before the loss and left to the fence; unreported: %ld)\n",
           r->lost, r->lost_reported + r->lost_inflight, r->lost_inflight, r->lost_unreported);
    if (o->prim == PRIM_PERMITS) printf("  fences strictly increasing          n/a (permits have no fence)\n");
    else printf("  fences strictly increasing          %s", r->fences_ok ? "yes\n" : "NO");
    if (o->prim != PRIM_PERMITS && !r->fences_ok) printf(" (went back %ld times)\n", r->fence_backs);
    if (r->recoveries)
        printf("  recovery after kills                p50 %.3f s, max %.3f s (%ld kills of holders; lease %g s)\n",
               r->rec_p50, r->rec_max, r->recoveries, o->lease);
    else
        printf("  recovery after kills                none measured (%ld kills of holders)\n", h->kills_holding);
    if (fw) printf("  fair order                          %s (%ld inversions)\n", fw, r->fair_inversions);
    printf("  faults                              pauses %ld (%ld in work, %ld after the check, %ld waiting), kills "
           "%ld (%ld holding, %ld waiting), server %ld\n", h->pauses, h->pauses_holding, h->pauses_writing,
           h->pauses_waiting, h->kills, h->kills_holding, h->kills_waiting, h->srv_faults);
    if (h->link_freezes || h->link_cuts || o->link_freeze > 0 || o->link_cut > 0)
        printf("  link faults                         freezes %ld, cuts %ld (%ld holding, %ld waiting)\n",
               h->link_freezes, h->link_cuts, h->links_holding, h->links_waiting);
    if (o->run) {
        printf("  command writes                      %ld\n", h->ticks);
        printf("  writes after another's grant        %ld (must be 0", r->ticks_after_grant);
        if (r->ticks_after_grant) printf("; up to %.3f s after it", r->tick_late_max);
        printf("); by a command stopped across it, within 0.5 s of its SIGCONT: %ld\n", r->ticks_after_pause);
        printf("  baton run exits                     0: %ld, 75 (lease lost): %ld, busy: %ld, other: %ld\n", h->run_ok,
               h->run_lost, h->run_busy, h->run_other);
        printf("  holders paused                      %ld baton alone (its command ran on), %ld the whole tree\n",
               h->pauses_baton, h->pauses_tree);
        printf("  watchdog (baton alone stopped)      %ld of %ld commands dead before another grant (must be all)\n",
               r->wd_dead, r->wd_cases);
        printf("  commands SIGKILLed by baton run     %ld (no word: the watchdog or --kill-after)\n", h->cmd_killed);
        if (h->no_pidfd) printf("  note: no pidfd_open(): a grant ended when its baton run exited, not its command\n");
        if (o->wait >= 0) {
            char label[64];
            snprintf(label, sizeof label, "waits past -w %g s + 0.25 s", o->wait);
            printf("  %-36s%ld", label, h->wait_overruns);
            if (h->wait_overruns) printf(" (the longest %.3f s)", h->wait_overrun_max);
            printf("\n");
        }
    }
    printf("  client errors                       %ld failed acquires, %ld exits\n", h->errors, h->exits);
    if (r->ok) {
        printf("result: every safety property held\n");
    } else {
        printf("result: FAILED\n%s", r->evidence);
        if (r->evidence_n > r->evidence_kept) printf("... and %ld more\n", r->evidence_n - r->evidence_kept);
    }
}

#define PRIMS_EXCLUDE "--shared, --permits, --queue and --group exclude each other"

/* The options into O (its defaults first) and --record's path into
 * *RECORD: -1 to go on, else the exit code (0 after --help). */
static int check_options(int argc, char **argv, check_opts *o, const char **record)
{
    static const struct option lo[] = {
        { "uri", required_argument, NULL, CLI_LONG('u') },
        { "clients", required_argument, NULL, O_CLIENTS },
        { "seconds", required_argument, NULL, O_SECONDS },
        { "grants", required_argument, NULL, O_GRANTS },
        { "lease", required_argument, NULL, CLI_LONG('t') },
        { "work", required_argument, NULL, O_WORK },
        { "fair", no_argument, NULL, O_FAIR },
        { "shared", no_argument, NULL, CLI_LONG('s') },
        { "permits", required_argument, NULL, O_PERMITS },
        { "queue", no_argument, NULL, O_QUEUE },
        { "group", no_argument, NULL, O_GROUP },
        { "bound", required_argument, NULL, O_BOUND },
        { "pause", required_argument, NULL, O_PAUSE },
        { "kill", required_argument, NULL, O_KILL },
        { "pause-waiting", required_argument, NULL, O_PAUSE_W },
        { "kill-waiting", required_argument, NULL, O_KILL_W },
        { "link-freeze", required_argument, NULL, O_LFREEZE },
        { "link-cut", required_argument, NULL, O_LCUT },
        { "run", no_argument, NULL, O_RUN },
        { "run-stubborn", no_argument, NULL, O_STUBBORN },
        { "wait", required_argument, NULL, CLI_LONG('w') },
        { "fault-cmd", required_argument, NULL, O_FAULT },
        { "fault-every", required_argument, NULL, O_EVERY },
        { "fault-down", required_argument, NULL, O_DOWN },
        { "unfenced", no_argument, NULL, O_UNFENCED },
        { "seed", required_argument, NULL, O_SEED },
        { "json", no_argument, NULL, O_JSON },
        { "svg", required_argument, NULL, O_SVG },
        { "record", required_argument, NULL, O_RECORD },
        { "help", no_argument, NULL, CLI_LONG('h') },
        { NULL, 0, NULL, 0 },
    };
    cli_opts co = { .argc = argc, .argv = argv, .cmd = CMD, .shorts = "u:t:w:sh", .lo = lo, .permute = 1 };
    int opt, names = 0;
    long long v;

    memset(o, 0, sizeof *o);
    o->wait = -1;
    o->clients = 8;
    o->seconds = 30;
    o->lease = 2;
    o->work = 0.005;
    o->fault_every = 5;
    o->fault_down = 1;
    o->bound = 1;
    o->seed = (unsigned long)time(NULL) ^ ((unsigned long)getpid() << 16);
    while ((opt = cli_next(&co)) != CLI_END) {
        switch (opt) {
        case CLI_BAD: return EX_USAGE;
        case CLI_OPERAND: o->name = co.arg; names++; break;
        case 'u': o->uri = co.arg; break;
        case 'h': usage(stdout); return 0;
        case O_CLIENTS:
            if (cli_int(co.arg, 1, CHECK_MAX_CLIENTS, &v))
                return cli_usage_error(CMD, "%s: bad count '%s' (want 1 to %d)", co.name, co.arg, CHECK_MAX_CLIENTS);
            o->clients = (int)v;
            break;
        case O_GRANTS:
            if (cli_int(co.arg, 1, 1000000000, &v))
                return cli_usage_error(CMD, "%s: bad count '%s' (want 1 to 1000000000)", co.name, co.arg);
            o->grants = (long)v;
            break;
        case O_SECONDS: if (cli_secs(CMD, co.name, co.arg, 0.1, 1e7, NULL, &o->seconds)) return EX_USAGE; break;
        case 't':
            if (cli_secs(CMD, co.name, co.arg, 0.05, 4294967.295, "leases are 32-bit milliseconds", &o->lease))
                return EX_USAGE;
            break;
        case O_WORK: if (cli_secs(CMD, co.name, co.arg, 0, 3600, NULL, &o->work)) return EX_USAGE; break;
        case O_FAIR: o->fair = 1; break;
        case 's':
            if (o->prim != PRIM_LOCK && o->prim != PRIM_RWLOCK) return cli_usage_error(CMD, PRIMS_EXCLUDE);
            o->prim = PRIM_RWLOCK;
            break;
        case O_QUEUE:
        case O_GROUP:
            if (o->prim != PRIM_LOCK && o->prim != (opt == O_QUEUE ? PRIM_QUEUE : PRIM_GROUP))
                return cli_usage_error(CMD, PRIMS_EXCLUDE);
            o->prim = opt == O_QUEUE ? PRIM_QUEUE : PRIM_GROUP;
            break;
        case O_BOUND: if (cli_secs(CMD, co.name, co.arg, 0, 1e6, NULL, &o->bound)) return EX_USAGE; break;
        case O_PERMITS:
            if (o->prim != PRIM_LOCK && o->prim != PRIM_PERMITS) return cli_usage_error(CMD, PRIMS_EXCLUDE);
            if (cli_int(co.arg, 1, CHECK_MAX_PERMITS, &v))
                return cli_usage_error(CMD, "%s: bad count '%s' (want 1 to %d)", co.name, co.arg, CHECK_MAX_PERMITS);
            o->prim = PRIM_PERMITS;
            o->permits = (int)v;
            break;
        case O_PAUSE: if (rate(co.name, co.arg, &o->pause)) return EX_USAGE; break;
        case O_KILL: if (rate(co.name, co.arg, &o->kill)) return EX_USAGE; break;
        case O_PAUSE_W: if (rate(co.name, co.arg, &o->pause_waiting)) return EX_USAGE; break;
        case O_KILL_W: if (rate(co.name, co.arg, &o->kill_waiting)) return EX_USAGE; break;
        case O_LFREEZE: if (rate(co.name, co.arg, &o->link_freeze)) return EX_USAGE; break;
        case O_LCUT: if (rate(co.name, co.arg, &o->link_cut)) return EX_USAGE; break;
        case O_RUN: o->run = 1; break;
        case O_STUBBORN: o->run_stubborn = 1; break;
        case 'w': if (cli_secs(CMD, co.name, co.arg, 0, 1e6, NULL, &o->wait)) return EX_USAGE; break;
        case O_FAULT:
            if (!strncmp(co.arg, "stop=", 5) && co.arg[5]) o->fault_stop = co.arg + 5;
            else if (!strncmp(co.arg, "start=", 6) && co.arg[6]) o->fault_start = co.arg + 6;
            else return cli_usage_error(CMD, "%s: want stop=CMD or start=CMD, not '%s'", co.name, co.arg);
            break;
        case O_EVERY: if (cli_secs(CMD, co.name, co.arg, 0.01, 1e6, NULL, &o->fault_every)) return EX_USAGE; break;
        case O_DOWN: if (cli_secs(CMD, co.name, co.arg, 0, 1e6, NULL, &o->fault_down)) return EX_USAGE; break;
        case O_UNFENCED: o->unfenced = 1; break;
        case O_SEED:
            if (cli_int(co.arg, 1, (long long)1 << 62, &v))
                return cli_usage_error(CMD, "%s: bad seed '%s' (want a positive whole number)", co.name, co.arg);
            o->seed = (unsigned long)v;
            break;
        case O_JSON: o->json = 1; break;
        case O_SVG: o->svg_path = co.arg; break;
        case O_RECORD: *record = co.arg; break;
        default: return cli_usage_error(CMD, "option '%s' is not handled", co.name);
        }
    }
    if (names != 1) return cli_usage_error(CMD, names ? "expected one NAME" : "missing NAME");
    if (!*o->name) return cli_usage_error(CMD, "empty NAME");
    return -1;
}

/* Whether the options agree with each other, and what follows from them:
 * --run's binary (its path into SELF, SELFN bytes), the URI, a link that
 * can be made. -1 to go on, else the exit code. */
static int check_agree(check_opts *o, char *self, size_t selfn)
{
    ssize_t sl;

    if (o->fair && o->prim != PRIM_LOCK) return cli_usage_error(CMD, "--fair is for locks, not with --shared, --permits, --queue or --group");
    if (o->pause + o->kill + o->link_freeze + o->link_cut > 1)
        return cli_usage_error(CMD, "--pause + --kill + --link-freeze + --link-cut must not exceed 1");
    if (o->pause_waiting + o->kill_waiting + o->link_freeze + o->link_cut > 1)
        return cli_usage_error(CMD, "--pause-waiting + --kill-waiting + --link-freeze + --link-cut must not exceed 1");
    if (o->run_stubborn && !o->run) return cli_usage_error(CMD, "--run-stubborn is for --run");
    if (o->wait >= 0 && !o->run) return cli_usage_error(CMD, "-w is for --run (the clients of the API wait forever)");
    if (o->run && o->prim != PRIM_LOCK)
        return cli_usage_error(CMD, "--run checks locks (--fair allowed), not --shared, --permits, --queue or --group yet");
    if (o->unfenced && (o->prim == PRIM_QUEUE || o->prim == PRIM_GROUP))
        return cli_usage_error(CMD, "--unfenced is for the registers of locks, not --queue or --group");
    if (o->prim == PRIM_GROUP && o->clients < 2)
        return cli_usage_error(CMD, "--group needs 2 clients at least (client 0 lists, the others join)");
    if (o->run) {
        /* the clients exec this binary: it must be the same one */
        if ((sl = readlink("/proc/self/exe", self, selfn - 1)) <= 0) {
            fprintf(stderr, "baton check: --run: cannot find this binary: %s\n", strerror(errno));
            return EX_SOFTWARE;
        }
        self[sl] = 0;
        o->self = self;
    }
    if (!o->fault_stop != !o->fault_start)
        return cli_usage_error(CMD, "--fault-cmd needs both stop=CMD and start=CMD");
    if (o->work >= o->lease) return cli_usage_error(CMD, "--work must be shorter than the lease");
    o->uri = cli_default_uri(o->uri);
    if (o->seed == 0) o->seed = 1;
    if (o->link_freeze > 0 || o->link_cut > 0) {
        /* refused before anything runs: an engine with no link, a bad address */
        check_link *l = NULL;
        char err[256];
        if (link_open(&l, o->uri ? o->uri : "file://", 1, err, sizeof err))
            return cli_usage_error(CMD, "--link-freeze/--link-cut: %s", err);
        link_close(l);
    }
    return -1;
}

int baton__cli_check(int argc, char **argv)
{
    check_opts o;
    check_hist h;
    check_result r;
    char backend[64] = "";
    const char *record = NULL;
    FILE *rec = NULL;
    int rc;
    char self[4096];

    /* --run's command: this binary again (not for users) */
    if (argc > 1 && !strcmp(argv[1], "--tick-child")) return check_tick_main(argc - 1, argv + 1);
    memset(&h, 0, sizeof h);
    if ((rc = check_options(argc, argv, &o, &record)) >= 0 || (rc = check_agree(&o, self, sizeof self)) >= 0)
        return rc;
    if (o.svg_path && !(o.svg = fopen(o.svg_path, "w"))) {
        fprintf(stderr, "baton check: cannot write --svg %s: %s\n", o.svg_path, strerror(errno));
        return EX_USAGE;
    }
    if (record && !(rec = fopen(record, "w"))) {
        fprintf(stderr, "baton check: cannot write --record %s: %s\n", record, strerror(errno));
        rc = EX_USAGE;
        goto out;
    }
    if ((rc = preflight(&o, backend, sizeof backend))) goto out;
    if ((rc = check_run(&o, &h))) {
        if (rc == EX_USAGE || rc == EX_UNAVAILABLE) fprintf(stderr, "baton check: the clients could not start\n");
        else fprintf(stderr, "baton check: the run failed (internal error)\n");
        goto out;
    }
    /* --queue: what is left is taken at the end (the items of dead takers come back) */
    if (o.prim == PRIM_QUEUE && (rc = coord_drain(&o, &h))) goto out;
    hist_analyze(&o, &h, &r);
    if (rec) {
        hist_write(&h, rec);
        if (fclose(rec)) fprintf(stderr, "baton check: writing --record %s failed\n", record);
        rec = NULL;
    }
    if (o.json) report_json(&o, backend, &h, &r);
    else report_text(&o, backend, &h, &r);
    fflush(stdout);
    if (o.svg) {
        rc = check_svg(&o, &h, &r);
        o.svg = NULL;
        if (rc) goto out;
    }
    rc = r.ok ? 0 : 1;
out:
    if (rec) fclose(rec);
    if (o.svg) {
        fclose(o.svg);
        unlink(o.svg_path);
    }
    hist_free(&h);
    return rc;
}
