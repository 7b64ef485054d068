/*
 * baton check: a fault checker for a lock on the user's own engine
 * (docs/check.md). A client of the public API only.
 *
 *   check.c     the command: options, the preflight, the report, exit codes
 *   loop.c      the checker: forked clients, the poll loop, the two
 *               registers, client and server faults
 *   client.c    one client process: acquire, read, work, check, write, release
 *   history.c   the record of a run and what it proves (overlaps, stale
 *               writes, losses, fences, recovery, fair order)
 *   timeline.c  --svg: one lane per client
 *   link.c      --link-freeze/--link-cut: a loopback forwarder per lane
 *   tick.c      --run: the command each `baton run` client runs (ticks)
 *   coord.c     --queue and --group: the queue's drain at the end, what the
 *               record proves about items and members, their report
 *
 * The checker (the parent) keeps the registers in its own memory and talks
 * to each client over a SOCK_SEQPACKET socketpair (a message is one packet).
 * All times are CLOCK_MONOTONIC nanoseconds: every process is on this host.
 */
#ifndef BATON_CHECK_H
#define BATON_CHECK_H

#include "tool/tool.h"   /* options, exit codes, reports, clocks, percentiles, svg_text */

#include <baton.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define CHECK_MAX_CLIENTS 256
#define CHECK_MAX_PERMITS 1000

enum { PRIM_LOCK, PRIM_RWLOCK, PRIM_PERMITS, PRIM_QUEUE, PRIM_GROUP };

typedef struct {
    const char *uri;             /* NULL: the default (file engine or $BATON_URI) */
    const char *name;
    int clients;
    double seconds;
    long grants;                 /* --grants: stop after this many (0: --seconds only) */
    double lease;                /* seconds */
    double work;                 /* seconds a holder "works" between read and write */
    int prim;                    /* PRIM_* */
    int fair;
    int permits;                 /* --permits N */
    double bound;                /* --group: the engine's notice time past a lease (seconds) */
    double pause, pause_waiting, kill, kill_waiting;   /* rates, 0..1 */
    double link_freeze, link_cut;   /* rates, 0..1: of grants and of waits */
    int run;                     /* --run: each client is a `baton run` whose command ticks */
    int run_stubborn;            /* --run-stubborn: the command ignores SIGTERM (a control) */
    double wait;                 /* -w: baton run's wait (--run); < 0 forever */
    const char *self;            /* this binary (--run execs it) */
    const char *fault_stop, *fault_start;
    double fault_every, fault_down;
    int unfenced;
    int json;
    const char *svg_path;
    FILE *svg;
    unsigned long seed;
} check_opts;

/* ---- the wire: one packet per message ---- */
enum {
    /* client -> checker */
    M_WAIT = 1,     /* about to acquire */
    M_GRANT,        /* acquire returned: fence */
    M_READ,         /* read both registers with this fence; a reply follows */
    M_CHECKLOST,    /* baton_lock_held() said 0 after the work: no write */
    M_WRITING,      /* held() said 1 (t = just before asking); waits for M_GO */
    M_WRITE,        /* a = fenced value read, b = plain value read; writes value + 1; M_GO follows */
    M_RELEASE,      /* t = before release was called; rc = what release answered (in a follow-up) */
    M_RELEASED,     /* rc of the release */
    M_LOST,         /* on_lost, from the keeper thread */
    M_ERROR,        /* rc: acquire failed (engine down?) */
    M_FATAL,        /* rc: the client cannot go on (open failed) */
    M_TICK,         /* --run: the command wrote a tick (t, fence) */
    M_PUT,          /* --queue: an item was put (t = put returned; a, b = its key) */
    M_LISTED,       /* --group: a member in a listing (t = the listing's start; a, b = its key) */
    M_LISTEND,      /* --group: a listing ended (t = its start, a = its end) */
    /* --queue / --group: M_GRANT carries the item's / the member's key in
     * a, b (the putter's pid and its count; the joiner's pid and count) */
    /* --run: M_GRANT from the command also carries a = its pid | its process
     * group << 32, b = its parent (baton run's shim): the checker watches the
     * pid (a pidfd) to end the grant when the command dies, and stops the
     * shim and the command's group for a whole-tree pause */
    /* checker -> client */
    M_READ_REPLY = 64,   /* a = fenced value, b = plain value; rc = 1 when the fence refused the read */
    M_GO,
    M_QUIT,
};

typedef struct {
    int32_t type;
    int32_t rc;
    int64_t t;
    uint64_t fence;
    int64_t a, b;
} check_msg;

/* ---- history.c: the record ---- */

enum {
    EV_WAIT = 1, EV_GRANT, EV_READ, EV_READ_REFUSED, EV_CHECKLOST, EV_WRITING, EV_WRITE_OK,
    EV_WRITE_REFUSED, EV_WRITE_STALE, EV_PLAIN_STALE, EV_RELEASE, EV_LOST, EV_PAUSE, EV_CONT,
    EV_KILL, EV_ERROR, EV_EXIT, EV_SRV_STOP, EV_SRV_START,
    EV_LINK_FREEZE, EV_LINK_THAW, EV_LINK_CUT, EV_TICK, EV_RUN_EXIT, EV_WAIT_OVERRUN, EV_CMD_KILLED,
    EV_PUT, EV_LISTED, EV_LISTEND, EV_DRAINED
};

typedef struct {
    int64_t t;
    int slot, cid, type;
    uint64_t fence;
    int64_t a, b;
} check_ev;

/* One grant: from acquire's return to release (or loss, or kill). */
typedef struct {
    int slot, cid, writer;       /* writer: 0 for a read side or a permit */
    int64_t t_wait, t_grant, t_end;
    uint64_t fence;
    int end_kind;                /* END_* */
    int lost;                    /* LOST, check said lost, a read refused, release failed */
    int64_t t_lost;              /* the first sign of a loss the client got; INT64_MAX when none */
    int64_t t_check;             /* WRITING: held() said 1 at this time; 0 when it never wrote */
    int wrote;                   /* 0 none, 1 accepted, 2 refused, 3 accepted stale */
    int paused, waited_paused;   /* faults in this grant / in its wait */
    int64_t t_taken;             /* the engine gave it to another (an overlap's start); INT64_MAX */
    int64_t t_stop, t_cont;      /* --run: its whole tree stopped (baton, shim, command) and continued; 0 */
    int64_t t_bstop;             /* --run: baton alone stopped (its command ran on: the watchdog's case); 0 */
    int cmd_end;                 /* --run: how its command ended (CMD_*) */
    int linked;                  /* a link fault during this grant */
    int64_t ka, kb;              /* --queue: the item's key; --group: the member's */
    int released;                /* the release (done, leave) answered: 1 ok, 2 refused */
    int64_t t_released;          /* ... at this time */
} check_grant;

enum { END_OPEN, END_RELEASE, END_LOST, END_KILLED };
/* --run: how a grant's command ended. A grant ends when its command does
 * (baton run and its shim outlive it: they release, report and reap). */
enum {
    CMD_RUNNING,    /* not seen to end (the run's end) */
    CMD_DONE,       /* it finished its work and said so */
    CMD_TERM,       /* it got SIGTERM (baton run: "lease lost; terminating") and said so */
    CMD_KILLED,     /* it died without a word: SIGKILL from baton run (the watchdog, or --kill-after) */
    CMD_OURS,       /* the checker killed its baton run (a dead host) */
};

typedef struct {
    check_ev *ev;
    size_t nev, cev;
    check_grant *g;
    size_t ng, cg;
    int64_t t0, t1;              /* the run */
    /* counters kept as the run goes */
    long reads_refused, writes_refused, stale_accepted, plain_stale, writes_ok;
    long errors, exits, pauses, kills, srv_faults;
    long pauses_holding, pauses_writing, pauses_waiting, kills_holding, kills_waiting;
    long pauses_baton, pauses_tree;   /* --run: holders' pauses of baton alone / of the whole tree */
    long cmd_killed;             /* --run: commands that died without a word (SIGKILL by baton run) */
    int no_pidfd;                /* --run: pidfd_open() failed: grants end at baton run's exit (as before) */
    long link_freezes, link_cuts, links_holding, links_waiting;
    long ticks;                  /* --run: the commands' writes */
    long run_ok, run_lost, run_busy, run_other;   /* --run: baton run's exits 0, 75, 1, other */
    long wait_overruns;          /* --run -w: waits that ended later than -w + 0.25 s */
    double wait_overrun_max;     /* the longest such wait, seconds */
    long puts, listings;         /* --queue: items put; --group: listings made */
    long drained, foreign;       /* --queue: items the drain took at the end; of them not put by the run */
    int drain_short;             /* --queue: the drain ended at its deadline with items missing */
} check_hist;

/* What the record proves. */
typedef struct {
    long grants, overlaps, overlaps_lost, overlaps_unexplained;
    long lost, lost_reported, lost_inflight, lost_unreported;
    int fences_ok;
    long fence_backs;
    int fair_checked;
    long fair_inversions;
    int fair_ok;
    double rec_p50, rec_max;
    long recoveries, kills_unrecovered;
    long ticks_after_grant;      /* --run: a command's writes after another's grant (must be 0) */
    long ticks_after_pause;      /* ... by a command stopped across that grant, within 0.5 s of its SIGCONT */
    double tick_late_max;        /* the latest of them, seconds after the other's grant */
    long wd_cases, wd_dead;      /* --run: holders whose baton alone was stopped; those whose command was
                                  * dead before any other grant (the watchdog's promise) */
    /* --queue */
    long items_done, items_lost, items_uncertain, stale_dones, takes_after_done, item_fence_backs;
    double back_p50, back_max;   /* a killed taker's item taken again: seconds after the kill */
    long backs;
    /* --group */
    long members, listed_late, live_missing;
    int ok;                      /* every safety property held */
    char evidence[6400];         /* the first 12 pieces of evidence, a line each */
    long evidence_n;             /* how many there were */
    int evidence_kept;
} check_result;

/* Appends; -1 when out of memory. */
int hist_ev(check_hist *h, int64_t t, int slot, int cid, int type, uint64_t fence, int64_t a, int64_t b);
/* A new grant; its index, or -1 when out of memory. */
long hist_grant(check_hist *h, int slot, int cid, int writer, int64_t t_wait, int64_t t_grant, uint64_t fence);
void hist_free(check_hist *h);
/* The record as text, an event a line: seconds from the start, lane, client #, what, fence, a, b. */
void hist_write(const check_hist *h, FILE *f);
void hist_analyze(const check_opts *o, check_hist *h, check_result *r);
/* One piece of evidence, the NTH of its kind (only a few are kept). */
void hist_evidence(check_result *r, long nth, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- coord.c: --queue and --group ---- */
/* --queue: after the run, takes what is left (items of takers that died
 * come back within their lease) until every item put is accounted for or
 * 3 leases + 10 s pass; records EV_DRAINED. 0, or an exit code. */
int coord_drain(const check_opts *o, check_hist *h);
/* The queue's and the group's properties (after hist_analyze's overlaps). */
void coord_analyze(const check_opts *o, check_hist *h, check_result *r);
void coord_report_text(const check_opts *o, const char *backend, const check_hist *h, const check_result *r);
void coord_report_json(const check_opts *o, const check_hist *h, const check_result *r);
/* An item's data / a member's id for key A, B, and back: 0, or -1 when S is not ours. */
int coord_key_parse(const char *s, int member, int64_t *a, int64_t *b);

int baton__cli_check(int argc, char **argv);

/* ---- loop.c ---- */
/* Runs the check; fills H. 0, or an exit code (70 internal, 69 engine gone). */
int check_run(const check_opts *o, check_hist *h);

/* ---- client.c ---- */
/* The client process on socket FD; never returns. */
void check_client(const check_opts *o, int fd, int slot) __attribute__((noreturn));

/* ---- link.c ---- */
typedef struct check_link check_link;
/* A forwarder for LANES lanes to the engine of URI; -1 with ERR (file and
 * sqlite have no link; an address that does not resolve). */
int link_open(check_link **out, const char *uri, int lanes, char *err, size_t errlen);
const char *link_uri(const check_link *l, int lane);   /* URI with the lane's addresses */
void link_freeze(check_link *l, int lane, int on);
void link_cut(check_link *l, int lane);
void link_close(check_link *l);

/* ---- tick.c ---- */
/* baton check --tick-child FD SLOT HOLD STUBBORN: the command of a --run client. */
int check_tick_main(int argc, char **argv);
/* --run-stubborn: a process outside baton run's tree (forked by the checker,
 * as a job handed to another service would be) that the command's grant sets
 * to work on FD: it ticks with the grant's fence for its hold, whatever
 * becomes of the lock; it ends without work when RUN (its baton run) does
 * first. Never returns. */
void check_escapee(int fd, pid_t run) __attribute__((noreturn));

/* ---- timeline.c ---- */
int check_svg(const check_opts *o, const check_hist *h, const check_result *r);

#endif
