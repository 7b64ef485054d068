/* baton check: the checker. It forks the clients (each opens its own baton
 * client after the fork), keeps the two registers, injects the faults and
 * records everything, in one thread: a poll loop over one SOCK_SEQPACKET
 * socketpair per client. Being single-threaded is what makes a register's
 * check-then-write atomic, and the order of the record the order things
 * happened in (per client; across clients the times say). */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

enum { S_GONE, S_IDLE, S_WAITING, S_HOLDING };
enum { PAUSE_NONE, PAUSE_WORK, PAUSE_WRITING };
/* a fault for a holder (--run: chosen when the cycle starts) or a waiter */
enum { F_NONE, F_KILL, F_PAUSE, F_FREEZE, F_CUT };
/* --run: what a pause stops: baton run's group (a waiter), baton alone, the whole tree */
enum { P_GROUP, P_BATON, P_TREE };

typedef struct {
    pid_t pid;
    int fd, cid, state;
    long grant;                 /* the current (or last) grant of this client, -1 */
    int64_t t_wait;
    int stopped;                /* SIGSTOP'd by us */
    int64_t cont_at;
    int go_on_cont;             /* a WRITING waits for its GO until the SIGCONT */
    int pause_point, kill_at_read;
    int64_t wfault_at;          /* a fault for this waiter, if still waiting then */
    int wfault;                 /* F_* */
    int link_point;             /* F_FREEZE or F_CUT: at the holder's read (--run: at its grant) */
    int run_fault;              /* --run: this cycle's holder fault, F_* */
    int64_t link_until;         /* a link fault of this lane ends (thaw; a held read reply goes) */
    int link_frozen;
    int reply_pending;          /* a READ_REPLY held back while the link is down */
    int32_t reply_rc;
    int64_t reply_a, reply_b;
    int termed;                 /* --run: SIGTERM'd by us at the end of the run */
    int killed;                 /* by us: replaced at once */
    int64_t t_killed;
    int64_t respawn_at;         /* 0: none due */
    int paused_in_wait;
    /* --run: the command of the current grant (its GRANT says who it is) */
    pid_t cmd, cmd_pg, shim;
    int pidfd;                  /* the command's pidfd; -1 none (or it ended) */
    int cmd_said;               /* it said RELEASE or LOST before it ended */
    int cmd_gone;               /* it had ended (and been reaped) before we looked: ends once its messages are read */
    int pause_kind;             /* --run: what this pause stopped (P_*) */
    pid_t esc;                  /* --run-stubborn: this cycle's escapee; 0 none */
} slot;

typedef struct {
    const check_opts *o;
    check_hist *h;
    slot s[CHECK_MAX_CLIENTS];
    int next_cid;
    uint64_t rng;
    int64_t fv, pv;             /* the fenced and the plain register */
    uint64_t fmax;              /* the highest fence the fenced register has seen */
    pid_t parent;               /* the checker itself */
    int stopping;
    int pause_alt;              /* --run: holders' pauses alternate: baton alone, the whole tree */
    int fatal_rc;               /* a client could not open: the first code */
    /* server faults */
    int srv;                    /* 0 up, 1 stop running, 2 down, 3 start running */
    pid_t srv_pid;
    int64_t srv_at;
    check_link *link;           /* --link-freeze / --link-cut: the lanes' forwarder */
} checker;

static double rnd(checker *k)
{
    /* xorshift64*: reproducible with --seed, no libc state shared with anyone */
    k->rng ^= k->rng >> 12;
    k->rng ^= k->rng << 25;
    k->rng ^= k->rng >> 27;
    return (double)((k->rng * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static int64_t pause_ns(const check_opts *o)
{
    /* past the lease by half of it (and 0.1 s): the engine has surely let go */
    return (int64_t)((o->lease * 1.5 + 0.1) * 1e9);
}

static void say(int fd, int type, int rc, int64_t a, int64_t b)
{
    check_msg m = { type, rc, now_ns(), 0, a, b };
    /* a client that died meanwhile: its EOF comes through poll */
    while (send(fd, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno == EINTR) {}
}

/* The fault for a cycle: holders (rates of grants) or waiters (of waits). */
static int pick_fault(checker *k, int waiting)
{
    const check_opts *o = k->o;
    double kr = waiting ? o->kill_waiting : o->kill, pr = waiting ? o->pause_waiting : o->pause;
    double r;
    /* holders draw every time (the --seed sequence of runs without waiter faults) */
    if (k->stopping || (waiting && kr + pr + o->link_freeze + o->link_cut <= 0)) return F_NONE;
    r = rnd(k);
    if (r < kr) return F_KILL;
    if (r < kr + pr) return F_PAUSE;
    if (r < kr + pr + o->link_freeze) return F_FREEZE;
    if (r < kr + pr + o->link_freeze + o->link_cut) return F_CUT;
    return F_NONE;
}

/* The signal for client I. --run: baton run's process group (baton, and
 * the escapee of --run-stubborn; its shim and command are in a session of
 * their own when there is no terminal, a group of their own otherwise): a
 * kill there is a dead baton (its shim kills the command at once). */
static void sig_client(checker *k, int i, int sig)
{
    kill(k->o->run ? -k->s[i].pid : k->s[i].pid, sig);
}

/* --run: stops (or continues) what a pause of client I stops. A holder's
 * pause is one of two, in turn:
 *  - baton alone (kill -STOP of its pid: a debugger, a hung supervisor): its
 *    shim and command run on, and the shim's watchdog must kill the command
 *    before the lease can run out: it is dead before any other grant;
 *  - the whole tree (baton's group, the shim, the command's group: a frozen
 *    host or container): nothing of it can act; on SIGCONT the watchdog,
 *    whose deadline has passed, kills the command at once, which may write
 *    within 0.5 s of the SIGCONT (the fence's part).
 * A waiter's pause stops baton's group (it has no command yet). */
static void sig_pause(checker *k, int i, int sig)
{
    slot *s = &k->s[i];
    if (s->pause_kind != P_TREE) {
        kill(s->pause_kind == P_BATON ? s->pid : -s->pid, sig);
        return;
    }
    kill(-s->pid, sig);
    if (s->shim > 0) kill(s->shim, sig);
    if (s->cmd_pg > 0 && s->cmd_pg != s->pid) kill(-s->cmd_pg, sig);
    else if (s->cmd > 0) kill(s->cmd, sig);
}

static void thaw(checker *k, int i, int64_t now)
{
    slot *s = &k->s[i];
    if (s->link_frozen) {
        link_freeze(k->link, i, 0);
        s->link_frozen = 0;
        hist_ev(k->h, now, i, s->cid, EV_LINK_THAW, 0, 0, 0);
    }
    s->link_until = 0;
    if (s->reply_pending && s->state != S_GONE) {
        s->reply_pending = 0;
        say(s->fd, M_READ_REPLY, s->reply_rc, s->reply_a, s->reply_b);
    }
}

/* A link fault of lane I: frozen (or reset) now, for 1.5 x lease + 0.1 s. */
static void link_fault(checker *k, int i, int64_t now, int kind)
{
    slot *s = &k->s[i];
    check_grant *g = s->grant >= 0 ? &k->h->g[s->grant] : NULL;
    int holding = s->state == S_HOLDING;
    if (kind == F_FREEZE) {
        link_freeze(k->link, i, 1);
        s->link_frozen = 1;
        k->h->link_freezes++;
    } else {
        link_cut(k->link, i);
        k->h->link_cuts++;
    }
    s->link_until = now + pause_ns(k->o);
    if (holding && g) g->linked = 1;
    if (holding) k->h->links_holding++;
    else k->h->links_waiting++;
    hist_ev(k->h, now, i, s->cid, kind == F_FREEZE ? EV_LINK_FREEZE : EV_LINK_CUT, 0, holding, 0);
}

/* --run: how long a cycle's command works. A cycle with a fault while it
 * holds runs past the lease, so that a command its lock outlived is still
 * writing when another is granted. */
static double run_hold(const checker *k, const slot *s)
{
    return s->run_fault == F_PAUSE || s->run_fault == F_FREEZE || s->run_fault == F_CUT ? 3 * k->o->lease + 0.5
                                                                                         : k->o->work;
}

/* --run: the client is `baton run` (this binary), its command this binary's
 * tick writer, which reports on the inherited socket FD. */
static void exec_run(checker *k, int i, int fd) __attribute__((noreturn));
static void exec_run(checker *k, int i, int fd)
{
    const check_opts *o = k->o;
    const slot *s = &k->s[i];
    char lease[32], wait[32], fds[16], slots[16], hold[32];
    const char *argv[32];
    int n = 0;
    double h = run_hold(k, s);

    snprintf(lease, sizeof lease, "%.3f", o->lease);
    snprintf(wait, sizeof wait, "%.3f", o->wait);
    snprintf(fds, sizeof fds, "%d", fd);
    snprintf(slots, sizeof slots, "%d", i);
    snprintf(hold, sizeof hold, "%.3f", h);
    argv[n++] = o->self;
    argv[n++] = "run";
    if (k->link || o->uri) {
        argv[n++] = "-u";
        argv[n++] = k->link ? link_uri(k->link, i) : o->uri;
    }
    argv[n++] = "-t";
    argv[n++] = lease;
    if (o->wait >= 0) {
        argv[n++] = "-w";
        argv[n++] = wait;
    }
    if (o->fair) argv[n++] = "--fair";
    argv[n++] = o->name;
    argv[n++] = "--";
    argv[n++] = o->self;
    argv[n++] = "check";
    argv[n++] = "--tick-child";
    argv[n++] = fds;
    argv[n++] = slots;
    argv[n++] = hold;
    argv[n++] = o->run_stubborn ? "1" : "0";
    argv[n] = NULL;
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    /* the socket goes through baton run to its command */
    fcntl(fd, F_SETFD, 0);
    /* stdout is the report's */
    dup2(2, 1);
    execv(o->self, (char *const *)argv);
    fprintf(stderr, "baton check: cannot run %s: %s\n", o->self, strerror(errno));
    _exit(EX_SOFTWARE);
}

static int spawn(checker *k, int i)
{
    slot *s = &k->s[i];
    int sv[2];
    pid_t pid;
    int64_t now = now_ns();

    /* a new client gets a working link */
    if (k->link) {
        s->reply_pending = 0;
        thaw(k, i, now);
    }

    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        fprintf(stderr, "baton check: socketpair: %s\n", strerror(errno));
        return EX_SOFTWARE;
    }
    fflush(NULL);
    if ((pid = fork()) < 0) {
        fprintf(stderr, "baton check: fork: %s\n", strerror(errno));
        close(sv[0]);
        close(sv[1]);
        return EX_SOFTWARE;
    }
    if (pid == 0) {
        /* a checker that dies (killed, ^C) takes its clients with it: one
         * blocked in acquire on an engine that is down would never notice */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != k->parent) _exit(0);
        if (k->o->run) setpgid(0, 0);
        /* nothing of the checker's: the other lanes' sockets, the
         * forwarder's (a reset must not be held open by a copy here) */
        close_range(3, (unsigned)sv[1] - 1, 0);
        close_range((unsigned)sv[1] + 1, ~0U, 0);
        if (k->o->run) exec_run(k, i, sv[1]);
        if (k->link) {
            /* the lane's own addresses: its link goes through the forwarder */
            check_opts lo = *k->o;
            lo.uri = link_uri(k->link, i);
            check_client(&lo, sv[1], i);
        }
        check_client(k->o, sv[1], i);
    }
    /* both sides, so that a signal to the group right away finds it */
    if (k->o->run) setpgid(pid, pid);
    {
        int rf = s->run_fault;
        memset(s, 0, sizeof *s);
        s->run_fault = rf;
    }
    s->pidfd = -1;
    if (k->o->run && k->o->run_stubborn) {
        /* --run-stubborn: the service its command hands its work to: not
         * under baton run (nothing there can stop it), but in its group (a
         * dead or frozen host takes it too) */
        pid_t e = fork();
        if (e == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != k->parent) _exit(0);
            setpgid(0, pid);
            close_range(3, (unsigned)sv[1] - 1, 0);
            close_range((unsigned)sv[1] + 1, ~0U, 0);
            check_escapee(sv[1], pid);
        }
        if (e > 0) {
            setpgid(e, pid);
            s->esc = e;
        }
    }
    close(sv[1]);
    s->pid = pid;
    s->fd = sv[0];
    s->cid = k->next_cid++;
    s->state = S_IDLE;
    s->grant = -1;
    if (k->o->run) {
        /* a cycle is a process: it waits from now */
        s->state = S_WAITING;
        s->t_wait = now;
        hist_ev(k->h, now, i, s->cid, EV_WAIT, 0, 1, 0);
        if ((s->wfault = pick_fault(k, 1)) != F_NONE)
            s->wfault_at = now + (int64_t)(rnd(k) * k->o->lease * 0.5e9) + 1000000;
    }
    return 0;
}

/* --run: the next cycle's holder fault is chosen before its process starts
 * (its command's length depends on it). */
static int spawn_cycle(checker *k, int i)
{
    if (k->o->run) k->s[i].run_fault = pick_fault(k, 0);
    return spawn(k, i);
}

static check_grant *cur(checker *k, slot *s)
{
    return s->grant >= 0 ? &k->h->g[s->grant] : NULL;
}

static void mark_lost(check_grant *g, int64_t t)
{
    g->lost = 1;
    if (t < g->t_lost) g->t_lost = t;
}

static void end_grant(check_grant *g, int64_t t, int kind)
{
    if (g->end_kind != END_OPEN) return;
    g->t_end = t;
    g->end_kind = kind;
}

static void stop_client(checker *k, int i, int64_t now)
{
    slot *s = &k->s[i];
    check_grant *g = cur(k, s);
    int holding = g && s->state == S_HOLDING;
    if (k->o->run) {
        s->pause_kind = P_GROUP;
        if (holding) {
            s->pause_kind = (k->pause_alt ^= 1) ? P_BATON : P_TREE;
            if (s->pause_kind == P_BATON) k->h->pauses_baton++;
            else k->h->pauses_tree++;
        }
        sig_pause(k, i, SIGSTOP);
    } else {
        sig_client(k, i, SIGSTOP);
    }
    s->stopped = 1;
    s->cont_at = now + pause_ns(k->o);
    k->h->pauses++;
    if (holding) {
        g->paused = 1;
        /* --run: only a stopped command is excused its writes right after the SIGCONT */
        if (k->o->run && s->pause_kind == P_BATON) g->t_bstop = now;
        else g->t_stop = now;
    }
    /* a: 0 waiting, 1 in its work, 2 after its check; --run: 3 baton alone, 4 the whole tree */
    hist_ev(k->h, now, i, s->cid, EV_PAUSE, 0,
            !holding ? 0 : k->o->run ? (s->pause_kind == P_BATON ? 3 : 4) : s->go_on_cont ? 2 : 1, 0);
}

static void kill_client(checker *k, int i, int64_t now)
{
    slot *s = &k->s[i];
    check_grant *g = cur(k, s);
    int holding = s->state == S_HOLDING;
    sig_client(k, i, SIGKILL);
    s->killed = 1;
    s->t_killed = now;
    s->stopped = 0;
    k->h->kills++;
    /* --run: the hold ends when the command does (its shim kills it when
     * baton dies; on a lease engine the lease outlives them anyway) */
    if (holding && g && (!k->o->run || s->pidfd < 0)) end_grant(g, now, END_KILLED);
    hist_ev(k->h, now, i, s->cid, EV_KILL, 0, holding, 0);
}

static int pidfd_open_(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* --run: client I's command ended (its pidfd, or baton run's exit when
 * there is none): so does its grant. A command that said nothing was
 * SIGKILLed: by baton run (its watchdog, or --kill-after after a SIGTERM
 * it ignored) because the lock was lost or could be, unless we killed its
 * baton run (a dead host). */
static void cmd_ended(checker *k, int i, int64_t now)
{
    slot *s = &k->s[i];
    check_grant *g = cur(k, s);
    if (s->pidfd >= 0) close(s->pidfd);
    s->pidfd = -1;
    s->cmd_gone = 0;
    s->cmd = s->cmd_pg = s->shim = 0;
    if (!g || g->cid != s->cid) return;
    if (s->killed) {
        if (!g->cmd_end) g->cmd_end = CMD_OURS;
        end_grant(g, now, END_KILLED);
        return;
    }
    if (!s->cmd_said && !g->cmd_end) {
        g->cmd_end = CMD_KILLED;
        k->h->cmd_killed++;
        mark_lost(g, now);
        end_grant(g, now, END_LOST);
        hist_ev(k->h, now, i, s->cid, EV_CMD_KILLED, g->fence, 0, 0);
    }
    end_grant(g, now, END_RELEASE);
}

/* The parent of PID (/proc/PID/stat), or -1. The name may hold ')' and
 * spaces: the fields start after the last ')'. */
static pid_t parent_of(pid_t pid)
{
    char path[64], buf[512], *p;
    ssize_t n;
    int fd;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) return -1;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    if (!(p = strrchr(buf, ')')) || strlen(p) < 5) return -1;
    return (pid_t)strtol(p + 4, NULL, 10);   /* ") S 1234 ..." */
}

/* --run: the command of client I has started (its GRANT M): watch it. */
static void watch_cmd(checker *k, int i, const check_msg *m)
{
    slot *s = &k->s[i];
    s->cmd = (pid_t)(m->a & 0xffffffff);
    s->cmd_pg = (pid_t)(m->a >> 32);
    s->shim = (pid_t)m->b;
    s->cmd_said = 0;
    if (s->pidfd >= 0) close(s->pidfd);
    s->pidfd = -1;
    if (k->o->run_stubborn && s->esc > 0) {
        /* its work goes on outside its tree, for as long as it would run */
        say(s->fd, M_GO, 0, (int64_t)m->fence, (int64_t)(run_hold(k, s) * 1e9));
    }
    if (k->h->no_pidfd || s->cmd <= 0) return;
    if ((s->pidfd = pidfd_open_(s->cmd)) >= 0) {
        fcntl(s->pidfd, F_SETFD, FD_CLOEXEC);
        /* the pid may have been reaped and reused before we looked: ours
         * is still its shim's child (a zombie too) */
        if (s->shim <= 0 || parent_of(s->cmd) == s->shim) return;
        close(s->pidfd);
        s->pidfd = -1;
        s->cmd_gone = 1;
        return;
    }
    if (errno == ESRCH) {
        /* gone already (and reaped by its shim): once what it sent after
         * this GRANT (its RELEASE, its LOST) is read */
        s->cmd_gone = 1;
        return;
    }
    /* an old kernel (before 5.3): grants end at baton run's exit */
    fprintf(stderr, "baton check: --run: pidfd_open: %s; a grant ends when its baton run exits\n", strerror(errno));
    k->h->no_pidfd = 1;
}

/* on_msg's GRANT: the grant's record, the replies held for a link that is
 * down, and this cycle's fault. */
static int on_grant(checker *k, int i, const check_msg *m, int64_t now)
{
    slot *s = &k->s[i];
    check_hist *h = k->h;
    const check_opts *o = k->o;
    long gi = hist_grant(h, i, s->cid, m->rc, s->t_wait, m->t, m->fence);
    if (gi < 0) return EX_SOFTWARE;
    s->grant = gi;
    s->state = S_HOLDING;
    s->wfault_at = 0;
    h->g[gi].waited_paused = s->paused_in_wait;
    if (o->prim == PRIM_QUEUE || o->prim == PRIM_GROUP) {
        h->g[gi].ka = m->a;
        h->g[gi].kb = m->b;
    }
    hist_ev(h, m->t, i, s->cid, EV_GRANT, m->fence, m->rc, 0);
    if (o->run) {
        watch_cmd(k, i, m);
    }
    /* granted just before we killed it: the hold ended with it (--run:
     * when its command ends, which the pidfd says) */
    if (s->killed && (!o->run || h->no_pidfd)) end_grant(&h->g[gi], s->t_killed, END_KILLED);
    /* a holder whose link is down has lost its lease by now (the engine
     * granted another): it checks held() at once, while the link is
     * still down, so that only its own clock can tell it */
    for (int j = 0; j < o->clients; j++) {
        slot *t = &k->s[j];
        if (j == i || !t->reply_pending || t->state == S_GONE) continue;
        t->reply_pending = 0;
        say(t->fd, M_READ_REPLY, t->reply_rc, t->reply_a, t->reply_b);
    }
    s->pause_point = PAUSE_NONE;
    s->kill_at_read = 0;
    s->link_point = F_NONE;
    if (o->run) {
        /* the command has started: its cycle's fault, now */
        if (k->stopping || s->killed) return 0;
        switch (s->run_fault) {
        case F_KILL: kill_client(k, i, now); h->kills_holding++; break;
        case F_PAUSE: stop_client(k, i, now); h->pauses_holding++; break;
        case F_FREEZE:
        case F_CUT: link_fault(k, i, now, s->run_fault); break;
        default: break;
        }
        return 0;
    }
    switch (pick_fault(k, 0)) {
    case F_KILL: s->kill_at_read = 1; break;
    case F_PAUSE:
        /* half during the work (its check must see the loss), half
         * after its check (its write is stale: the fence must refuse it) */
        s->pause_point = m->rc && rnd(k) < 0.5 ? PAUSE_WRITING : PAUSE_WORK;
        break;
    case F_FREEZE: s->link_point = F_FREEZE; break;
    case F_CUT: s->link_point = F_CUT; break;
    default: break;
    }
    return 0;
}

/* on_msg's READ of grant G: the registers as they are (or refused below the
 * highest fence), maybe held back behind a link fault. */
static int on_read(checker *k, int i, const check_msg *m, check_grant *g, int64_t now)
{
    slot *s = &k->s[i];
    check_hist *h = k->h;
    const check_opts *o = k->o;
    int fenced = o->prim != PRIM_PERMITS;
    int refused = 0;
    if (s->kill_at_read) {
        kill_client(k, i, now);
        h->kills_holding++;
        return 0;
    }
    if (!g) return EX_SOFTWARE;
    if (k->stopping) {
        /* the run is over: no new cycle touches the registers (a QUIT
         * already sent may have made this client let go since it asked) */
        say(s->fd, M_QUIT, 0, 0, 0);
        return 0;
    }
    if (fenced && g->writer) {
        /* the fenced register refuses a read below the highest fence it saw */
        if (!o->unfenced && m->fence < k->fmax) refused = 1;
        else if (m->fence > k->fmax) k->fmax = m->fence;
    }
    if (refused) {
        h->reads_refused++;
        mark_lost(g, now);
        hist_ev(h, now, i, s->cid, EV_READ_REFUSED, m->fence, (int64_t)k->fmax, 0);
    } else {
        hist_ev(h, now, i, s->cid, EV_READ, m->fence, k->fv, k->pv);
    }
    if (s->link_point != F_NONE && !refused) {
        /* its link goes down while it works, past its lease: the reply
         * (what it read now) is held until another client is granted
         * (or the link is back), then it checks held() as ever. The
         * keeper could not renew meanwhile. */
        s->reply_pending = 1;
        s->reply_rc = refused;
        s->reply_a = k->fv;
        s->reply_b = k->pv;
        link_fault(k, i, now, s->link_point);
        return 0;
    }
    say(s->fd, M_READ_REPLY, refused, k->fv, k->pv);
    if (s->pause_point == PAUSE_WORK && !refused) {
        stop_client(k, i, now);
        h->pauses_holding++;
    }
    return 0;
}

/* on_msg's WRITE of grant G: the fenced register checks and writes in one
 * step; the plain one takes everything. */
static void on_write(checker *k, int i, const check_msg *m, check_grant *g, int64_t now)
{
    slot *s = &k->s[i];
    check_hist *h = k->h;
    const check_opts *o = k->o;

    /* the fenced register: check and write in one step (nothing else runs here) */
    if (!o->unfenced && m->fence < k->fmax) {
        h->writes_refused++;
        g->wrote = 2;
        hist_ev(h, now, i, s->cid, EV_WRITE_REFUSED, m->fence, (int64_t)k->fmax, 0);
    } else {
        if (m->fence > k->fmax) k->fmax = m->fence;
        if (m->a != k->fv) {
            /* a lost update: what it read is no longer there */
            h->stale_accepted++;
            g->wrote = 3;
            hist_ev(h, now, i, s->cid, EV_WRITE_STALE, m->fence, m->a, k->fv);
        } else {
            h->writes_ok++;
            g->wrote = 1;
            hist_ev(h, now, i, s->cid, EV_WRITE_OK, m->fence, m->a, 0);
        }
        k->fv = m->a + 1;
    }
    /* the plain register takes everything */
    if (m->b != k->pv) {
        h->plain_stale++;
        hist_ev(h, now, i, s->cid, EV_PLAIN_STALE, m->fence, m->b, k->pv);
    }
    k->pv = m->b + 1;
    say(s->fd, M_GO, 0, 0, 0);
}

/* One message from client I. */
static int on_msg(checker *k, int i, const check_msg *m)
{
    slot *s = &k->s[i];
    check_hist *h = k->h;
    const check_opts *o = k->o;
    check_grant *g = cur(k, s);
    int64_t now = now_ns();

    switch (m->type) {
    case M_WAIT:
        s->state = S_WAITING;
        s->t_wait = m->t;
        s->paused_in_wait = 0;
        s->wfault_at = 0;
        hist_ev(h, m->t, i, s->cid, EV_WAIT, 0, m->rc, 0);
        /* somewhere in the first half-lease of the wait: if still waiting then */
        if ((s->wfault = pick_fault(k, 1)) != F_NONE)
            s->wfault_at = now + (int64_t)(rnd(k) * o->lease * 0.5e9) + 1000000;
        break;
    case M_GRANT:
        return on_grant(k, i, m, now);
    case M_READ:
        return on_read(k, i, m, g, now);
    case M_CHECKLOST:
        if (!g) return EX_SOFTWARE;
        mark_lost(g, m->t);
        hist_ev(h, m->t, i, s->cid, EV_CHECKLOST, m->fence, 0, 0);
        break;
    case M_WRITING:
        if (!g) return EX_SOFTWARE;
        g->t_check = m->t;
        hist_ev(h, m->t, i, s->cid, EV_WRITING, m->fence, 0, 0);
        if (s->pause_point == PAUSE_WRITING) {
            s->go_on_cont = 1;
            stop_client(k, i, now);
            h->pauses_writing++;
        } else {
            say(s->fd, M_GO, 0, 0, 0);
        }
        break;
    case M_WRITE:
        if (!g) return EX_SOFTWARE;
        on_write(k, i, m, g, now);
        break;
    case M_RELEASE:
        if (g) end_grant(g, m->t, END_RELEASE);
        if (g && o->run) {
            s->cmd_said = 1;
            if (!g->cmd_end) g->cmd_end = CMD_DONE;
        }
        hist_ev(h, m->t, i, s->cid, EV_RELEASE, m->fence, 0, 0);
        s->state = S_IDLE;
        break;
    case M_RELEASED:
        /* a release the engine refused: the grant was gone before */
        if (g && m->rc) mark_lost(g, m->t);
        if (g && !g->released) {
            g->released = m->rc ? 2 : 1;
            g->t_released = m->t;
        }
        break;
    case M_PUT:
        h->puts++;
        hist_ev(h, m->t, i, s->cid, EV_PUT, 0, m->a, m->b);
        break;
    case M_LISTED:
        hist_ev(h, m->t, i, s->cid, EV_LISTED, 0, m->a, m->b);
        break;
    case M_LISTEND:
        h->listings++;
        hist_ev(h, m->t, i, s->cid, EV_LISTEND, 0, m->a, m->rc);
        break;
    case M_LOST:
        if (o->run && g && g->cid == s->cid) {
            s->cmd_said = 1;
            if (!g->cmd_end) g->cmd_end = CMD_TERM;
        }
        if (o->run && s->termed && g && g->cid == s->cid) {
            /* our own SIGTERM at the end of the run, forwarded to the command */
            end_grant(g, m->t, END_RELEASE);
            hist_ev(h, m->t, i, s->cid, EV_RELEASE, m->fence, 0, 0);
            break;
        }
        hist_ev(h, m->t, i, s->cid, EV_LOST, 0, 0, 0);
        if (g && g->cid == s->cid) {
            mark_lost(g, m->t);
            end_grant(g, m->t, END_LOST);
        }
        break;
    case M_TICK:
        h->ticks++;
        if (s->grant >= 0) hist_ev(h, m->t, i, s->cid, EV_TICK, m->fence, s->grant, 0);
        break;
    case M_ERROR:
        h->errors++;
        s->state = S_IDLE;
        hist_ev(h, m->t, i, s->cid, EV_ERROR, 0, m->rc, 0);
        break;
    case M_FATAL:
        /* a usage error ends the run; an engine that is away (a server
         * fault) only this client, which is started again */
        if (!k->fatal_rc && cli_exit_for(m->rc) == EX_USAGE) k->fatal_rc = EX_USAGE;
        hist_ev(h, m->t, i, s->cid, EV_ERROR, 0, m->rc, 1);
        break;
    default:
        return EX_SOFTWARE;
    }
    return 0;
}

/* Client I's socket closed: it exited or we killed it. */
static int on_gone(checker *k, int i)
{
    slot *s = &k->s[i];
    check_grant *g = cur(k, s);
    int64_t now = now_ns();
    int st = 0;

    waitpid(s->pid, &st, 0);
    if (s->esc > 0) waitpid(s->esc, NULL, 0);   /* its end closed the socket too */
    s->esc = 0;
    close(s->fd);
    s->fd = -1;
    /* everything that held the socket has exited: the command too, if its
     * pidfd was not looked at yet (or there was none) */
    if (k->o->run && (s->pidfd >= 0 || s->cmd_gone || k->h->no_pidfd)) cmd_ended(k, i, now);
    if (g && g->cid == s->cid) {
        if (s->killed) end_grant(g, s->t_killed, END_KILLED);
        else end_grant(g, now, END_RELEASE);
    }
    if (k->o->run && !s->killed) {
        /* a cycle ended: baton run's exit says how */
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        int granted = g && g->cid == s->cid;
        s->state = S_GONE;
        if (k->stopping) return 0;
        /* -w is a deadline: a wait that never got the lock must end by it
         * (0.25 s for baton run to start and exit), frozen link or not */
        if (!granted && k->o->wait >= 0 && (code == 1 || code == EX_UNAVAILABLE)) {
            double w = (double)(now - s->t_wait) / 1e9;
            if (w > k->o->wait + 0.25) {
                k->h->wait_overruns++;
                if (w > k->h->wait_overrun_max) k->h->wait_overrun_max = w;
                hist_ev(k->h, now, i, s->cid, EV_WAIT_OVERRUN, 0, (int64_t)(w * 1000), 0);
            }
        }
        if (code != 0) hist_ev(k->h, now, i, s->cid, EV_RUN_EXIT, 0, code, 0);
        if (code == 0) k->h->run_ok++;
        else if (code == 75) k->h->run_lost++;
        else if (code == 1) k->h->run_busy++;
        else if (code == EX_UNAVAILABLE) {
            /* its acquire failed: the engine went away (a server fault) */
            k->h->errors++;
            k->h->run_other++;
            s->respawn_at = now + 50000000;
            return 0;
        } else {
            k->h->run_other++;
            k->h->exits++;
            if (code == EX_USAGE && !k->fatal_rc) k->fatal_rc = EX_USAGE;
            /* the engine away (69), or worse: again, soon */
            s->respawn_at = now + 200000000;
            return 0;
        }
        return spawn_cycle(k, i);
    }
    if (!s->killed && !k->stopping) {
        k->h->exits++;
        hist_ev(k->h, now, i, s->cid, EV_EXIT, 0, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), 0);
    }
    s->state = S_GONE;
    if (k->stopping) return 0;
    if (s->killed) return spawn_cycle(k, i);
    /* it died by itself (the engine went away while it opened?): again, soon */
    s->respawn_at = now + 200000000;
    return 0;
}

static pid_t run_cmd(const char *cmd)
{
    pid_t pid;
    fflush(NULL);
    if ((pid = fork()) == 0) {
        /* stdout is the report's: the command's output goes to stderr */
        dup2(2, 1);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Server faults: stop, down for fault_down, start, up for fault_every. */
static void server_faults(checker *k, int64_t now)
{
    const check_opts *o = k->o;
    int st;
    if (!o->fault_stop) return;
    switch (k->srv) {
    case 0:
        if (k->stopping || now < k->srv_at) return;
        hist_ev(k->h, now, -1, -1, EV_SRV_STOP, 0, 0, 0);
        k->h->srv_faults++;
        k->srv_pid = run_cmd(o->fault_stop);
        k->srv = 1;
        return;
    case 1:
    case 3:
        if (k->srv_pid > 0 && waitpid(k->srv_pid, &st, WNOHANG) == 0) return;
        if (k->srv_pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
            fprintf(stderr, "baton check: the %s command failed\n", k->srv == 1 ? "stop" : "start");
        if (k->srv == 1) {
            k->srv = 2;
            k->srv_at = now + (int64_t)(o->fault_down * 1e9);
        } else {
            hist_ev(k->h, now, -1, -1, EV_SRV_START, 0, 0, 0);
            k->srv = 0;
            k->srv_at = now + (int64_t)(o->fault_every * 1e9);
        }
        return;
    case 2:
        if (!k->stopping && now < k->srv_at) return;
        k->srv_pid = run_cmd(o->fault_start);
        k->srv = 3;
        return;
    }
}

static void cont_client(checker *k, int i, int64_t now)
{
    slot *s = &k->s[i];
    check_grant *g = cur(k, s);
    if (k->o->run) sig_pause(k, i, SIGCONT);
    else sig_client(k, i, SIGCONT);
    s->stopped = 0;
    if (g && g->t_stop && !g->t_cont) g->t_cont = now;
    hist_ev(k->h, now, i, s->cid, EV_CONT, 0, 0, 0);
    if (s->go_on_cont) {
        s->go_on_cont = 0;
        say(s->fd, M_GO, 0, 0, 0);
    }
}

/* What is due now; the next due time. */
static int64_t timers(checker *k, int64_t now)
{
    int64_t next = now + 50000000;
    for (int i = 0; i < k->o->clients; i++) {
        slot *s = &k->s[i];
        if (s->link_until) {
            if (now >= s->link_until || k->stopping) thaw(k, i, now);
            else if (s->link_until < next) next = s->link_until;
        }
        if (s->state == S_GONE) {
            if (s->respawn_at && !k->stopping) {
                if (now >= s->respawn_at) {
                    if (spawn_cycle(k, i)) return -1;
                } else if (s->respawn_at < next) next = s->respawn_at;
            }
            continue;
        }
        if (s->stopped) {
            if (now >= s->cont_at || k->stopping) cont_client(k, i, now);
            else if (s->cont_at < next) next = s->cont_at;
        }
        if (s->wfault_at && s->state == S_WAITING && !s->stopped && !k->stopping) {
            if (now >= s->wfault_at) {
                s->wfault_at = 0;
                if (s->wfault == F_KILL) {
                    kill_client(k, i, now);
                    k->h->kills_waiting++;
                } else if (s->wfault == F_PAUSE) {
                    stop_client(k, i, now);
                    s->paused_in_wait = 1;
                    k->h->pauses_waiting++;
                } else {
                    link_fault(k, i, now, s->wfault);
                    s->paused_in_wait = 1;
                }
            } else if (s->wfault_at < next) next = s->wfault_at;
        }
    }
    return next;
}

/* Everything client I sent, then its end (on_gone) if it came. */
static int drain(checker *k, int i)
{
    int rc = 0;
    while (k->s[i].fd >= 0) {
        check_msg m;
        ssize_t got = recv(k->s[i].fd, &m, sizeof m, MSG_DONTWAIT);
        /* a client that exits with our replies unread makes the
         * kernel report ECONNRESET once, before what it sent last
         * (its RELEASE): read on, the error is cleared */
        if (got < 0 && (errno == EINTR || errno == ECONNRESET)) continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (got <= 0) return on_gone(k, i);
        if (got != (ssize_t)sizeof m) return EX_SOFTWARE;
        if ((rc = on_msg(k, i, &m))) return rc;
        /* killed while we read it: what it sent after counts as ever (a
         * command outlives its baton by the moment its shim takes to kill
         * it); its EOF comes */
    }
    if (k->s[i].cmd_gone) cmd_ended(k, i, now_ns());
    return rc;
}

int check_run(const check_opts *o, check_hist *h)
{
    checker *k;
    struct pollfd pf[2 * CHECK_MAX_CLIENTS];
    int rc = 0, n = o->clients;
    int64_t end, drain_end = 0;

    if (!(k = calloc(1, sizeof *k))) return EX_SOFTWARE;
    k->o = o;
    k->h = h;
    if (o->link_freeze > 0 || o->link_cut > 0) {
        char err[256];
        if (link_open(&k->link, o->uri, n, err, sizeof err)) {
            fprintf(stderr, "baton check: --link-freeze/--link-cut: %s\n", err);
            free(k);
            return EX_USAGE;
        }
    }
    k->parent = getpid();
    k->rng = o->seed ? o->seed : 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < n; i++) k->s[i].fd = -1;
    h->t0 = now_ns();
    end = h->t0 + (int64_t)(o->seconds * 1e9);
    k->srv_at = h->t0 + (int64_t)(o->fault_every * 1e9);
    for (int i = 0; i < n && !rc; i++) rc = spawn_cycle(k, i);

    while (!rc) {
        int64_t now = now_ns(), next;
        int live = 0, np = 0, idx[2 * CHECK_MAX_CLIENTS];

        if (!k->stopping && (now >= end || k->fatal_rc || (o->grants && (long)h->ng >= o->grants))) {
            /* the end: everyone runs again and is asked to go; a holder finishes its cycle */
            k->stopping = 1;
            h->t1 = now;
            /* --run: a holder's command may run 3 leases + 0.5 s */
            drain_end = now + (int64_t)(((o->run ? 5 : 2) * o->lease + 5) * 1e9);
            for (int i = 0; i < n; i++) {
                if (k->s[i].state == S_GONE) continue;
                if (!o->run) {
                    say(k->s[i].fd, M_QUIT, 0, 0, 0);
                } else if (k->s[i].state == S_WAITING) {
                    /* baton run cancels its wait on SIGTERM (or passes it
                     * to a command just started: that is no loss) */
                    k->s[i].termed = 1;
                    kill(k->s[i].pid, SIGTERM);
                }
            }
        }
        server_faults(k, now);
        if ((next = timers(k, now)) < 0) { rc = EX_SOFTWARE; break; }
        if (k->stopping) {
            for (int i = 0; i < n; i++)
                if (k->s[i].state != S_GONE) live++;
            if (!live && k->srv != 1 && k->srv != 3) break;
            if (now >= drain_end) {
                /* a client that cannot finish (an engine that stays down): the record ends here */
                for (int i = 0; i < n; i++)
                    if (k->s[i].state != S_GONE) {
                        kill_client(k, i, now);
                        k->s[i].state = S_GONE;
                        waitpid(k->s[i].pid, NULL, 0);
                        if (k->s[i].esc > 0) waitpid(k->s[i].esc, NULL, 0);
                        if (o->run && k->s[i].pidfd >= 0) cmd_ended(k, i, now);
                        close(k->s[i].fd);
                        k->s[i].fd = -1;
                    }
                fprintf(stderr, "baton check: clients did not finish within 2 leases + 5 s of the end; killed\n");
                if (k->srv == 1 || k->srv == 3) waitpid(k->srv_pid, NULL, 0);
                break;
            }
        } else if (end < next) {
            next = end;
        }
        for (int i = 0; i < n; i++) {
            if (k->s[i].state == S_GONE) continue;
            pf[np].fd = k->s[i].fd;
            pf[np].events = POLLIN;
            idx[np++] = i;
        }
        /* --run: the commands' pidfds, after the sockets (what a command
         * sent before it ended is read first) */
        for (int i = 0; i < n; i++) {
            if (k->s[i].state == S_GONE || k->s[i].pidfd < 0) continue;
            pf[np].fd = k->s[i].pidfd;
            pf[np].events = POLLIN;
            idx[np++] = i;
        }
        {
            int64_t wait = (next - now) / 1000000 + 1;
            if (wait > 50) wait = 50;
            if (poll(pf, (nfds_t)np, (int)wait) < 0 && errno != EINTR) { rc = EX_SOFTWARE; break; }
        }
        for (int p = 0; p < np && !rc; p++) {
            int i = idx[p];
            if (!(pf[p].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            if (pf[p].fd != k->s[i].fd) {
                /* a command ended: what it sent before is read first (its
                 * socket may also have closed meanwhile: on_gone ends it) */
                if (pf[p].fd != k->s[i].pidfd || k->s[i].state == S_GONE) continue;
                rc = drain(k, i);
                if (!rc && k->s[i].pidfd == pf[p].fd && k->s[i].state != S_GONE) cmd_ended(k, i, now_ns());
                continue;
            }
            rc = drain(k, i);
        }
    }
    if (rc) {
        for (int i = 0; i < n; i++)
            if (k->s[i].state != S_GONE) {
                kill(k->s[i].pid, SIGKILL);
                waitpid(k->s[i].pid, NULL, 0);
                close(k->s[i].fd);
            }
    }
    if (!h->t1) h->t1 = now_ns();
    if (!rc && k->fatal_rc && !h->ng) rc = k->fatal_rc;
    link_close(k->link);
    free(k);
    return rc;
}
