/* baton run: flock(1) across machines. */
#include "cli.h"
#include "shim.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define prog cli_prog

/* ---- baton run --------------------------------------------------------------
 *
 * One thread (main) owns the command: it blocks INT/TERM/HUP/CHLD before
 * anything else, reads them from a signalfd, forks the command and waits for
 * it. The acquire, which may block for as long as -w allows, runs on a helper
 * thread so that a signal during the wait can cancel it (and the engine drops
 * our queue entry or writer intent) instead of killing us inside it. */

/* Bytes on ev_pipe: the acquire helper has finished, or the lock's lease was
 * lost (on_lost runs on the library's keeper thread, so it only writes). */
#define EV_DONE 'D'
#define EV_LOST 'L'
#define EV_PLOST 'P'   /* the permit's renewal thread: lost (why in run_state.msg) */
static int ev_pipe[2] = { -1, -1 };

static void on_lost(baton_lock *l, void *p)
{
    char c = EV_LOST;
    (void)l; (void)p;
    /* A blocking pipe only we read: the write cannot fail, at worst it waits. */
    if (write(ev_pipe[1], &c, 1) < 0) { /* nothing to do */ }
}

/* The same for a lost leadership (baton elect). */
static void on_lost_lead(baton_election *e, void *p)
{
    char c = EV_LOST;
    (void)e; (void)p;
    /* A blocking pipe only we read: the write cannot fail, at worst it waits. */
    if (write(ev_pipe[1], &c, 1) < 0) { /* nothing to do */ }
}

/* The same for a lost membership (baton member) and a taken item's lock
 * lost (baton queue take). */
static void on_lost_member(baton_group *g, void *p)
{
    char c = EV_LOST;
    (void)g; (void)p;
    if (write(ev_pipe[1], &c, 1) < 0) { /* see on_lost */ }
}

static void on_lost_item(baton_queue_item *it, void *p)
{
    char c = EV_LOST;
    (void)it; (void)p;
    if (write(ev_pipe[1], &c, 1) < 0) { /* see on_lost */ }
}

/* Deadlines are int64 ns; INT64_MAX = none. Saturating, so a huge
 * --kill-after or lease never wraps. */
static int64_t add_ns(int64_t a, int64_t b)
{
    return b > 0 && a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* SECS (at most 1e9 by cli_secs) as ns: 1e18 fits in int64. */
static int64_t secs_ns(double s)
{
    return (int64_t)(s * 1e9);
}

/* A poll timeout for DEADLINE: -1 for none, else [0, INT_MAX] ms, rounded up
 * so we do not wake just before it and spin. */
static int poll_ms(int64_t now, int64_t deadline)
{
    int64_t ms;
    if (deadline == INT64_MAX) return -1;
    if (deadline <= now) return 0;
    ms = (deadline - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* The margin a deadline keeps for the kill to land: a tenth of the lease,
 * 20 ms..2 s. */
static int64_t margin_ns(int64_t lease)
{
    int64_t m = lease / 10;
    return m < 20000000 ? 20000000 : m > 2000000000 ? 2000000000 : m;
}

static void shim_say(int fd, char type, int32_t a, int64_t b)
{
    cli_shim_msg m;
    memset(&m, 0, sizeof m);
    m.type = type;
    m.a = a;
    m.b = b;
    /* 16 bytes: atomic on a pipe, from any thread; the shim gone is noticed
     * by its exit */
    if (fd >= 0 && write(fd, &m, sizeof m) < 0) { /* see above */ }
}

typedef struct {
    const char *name;
    baton_lock *l;                  /* a plain lock or a side of a rwlock */
    baton_permits *pm;              /* --permits instead */
    baton_election *el;             /* baton elect instead */
    baton_group *g;                 /* baton member instead: joined as member_id (NULL: random) */
    const char *member_id;
    baton_queue *q;                 /* baton queue take instead: the item once taken */
    baton_queue_item *it;
    baton_client *c;                /* their client (the watchdog asks it for a session's bound) */
    const char *value;              /* what el proclaims while it leads; g's member value */
    char id[BATON_PERMIT_ID_SIZE];  /* the permit we hold ("" when none) */
    uint32_t lease_ms;
    int64_t wait_ms;
    int sfd;
    /* The library renews locks itself; a permit is renewed here. */
    int keep;                       /* 1 while the permit has a lease to renew */
    int64_t renew_at;               /* monotonic ns; the renewal thread's once the command runs */
    _Atomic int64_t lease_end;      /* the permit's lease ends (the last renewal sent + lease) */
    int shim_ctl;                   /* where a renewal's watchdog deadline goes (-1: nowhere) */
    int64_t wd_lease;               /* what can run out while we are stopped (0: the lease) */
    int64_t shim_deadline;          /* the watchdog deadline of the last renewal */
    pthread_mutex_t pmu;            /* the renewal thread's sleep and stop */
    pthread_cond_t pcv;
    int pstop;
    /* Filled by the acquire helper; read after it is joined (or done is set). */
    int rc;
    char *msg;                      /* its error message, whole (malloc'd; the engines' can be
                                       long: a DDL to hand to a DBA): baton_error_last() is per thread */
    atomic_int done;
} run_state;

/* r->msg = the message, whole (a failed allocation leaves the old one, or
 * none: the code's text is printed then). */
static void set_msg(run_state *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_msg(run_state *r, const char *fmt, ...)
{
    va_list ap;
    char *m;
    int n;
    va_start(ap, fmt);
    n = vasprintf(&m, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    free(r->msg);
    r->msg = m;
}

static void *acquire_main(void *arg)
{
    run_state *r = arg;
    const baton_error *e;
    char c = EV_DONE;

    r->rc = r->pm ? baton_permits_acquire(r->pm, r->lease_ms, r->wait_ms, r->id)
          : r->el ? baton_election_campaign(r->el, r->value, r->wait_ms)
          : r->g  ? baton_group_join(r->g, r->member_id, r->value)
          : r->q  ? baton_queue_take(r->q, &r->it, r->wait_ms)
                  : baton_lock_acquire(r->l, r->wait_ms);
    e = baton_error_last();
    if (r->rc && e->code == r->rc && e->message) set_msg(r, "%s", e->message);
    atomic_store(&r->done, 1);
    if (write(ev_pipe[1], &c, 1) < 0) { /* cannot fail (see on_lost); done is set anyway */ }
    return NULL;
}

static void cancel_wait(run_state *r)
{
    if (r->pm) baton_permits_cancel(r->pm);
    else if (r->el) baton_election_cancel(r->el);
    else if (r->g) baton_group_cancel(r->g);
    else if (r->q) baton_queue_cancel(r->q);
    else baton_lock_cancel(r->l);
}

/* Gives back what we hold: the lock, the permit, the membership, or the
 * item (back to the queue: done is run_result's). */
static int give_back(run_state *r)
{
    if (r->pm) return r->id[0] ? baton_permits_release(r->pm, r->id) : 0;
    if (r->el) return baton_election_resign(r->el);
    if (r->g) return baton_group_leave(r->g);
    if (r->q) {
        baton_queue_item *it = r->it;
        r->it = NULL;
        return it ? baton_queue_return(it) : 0;
    }
    return baton_lock_release(r->l);
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
}

/* Runs the acquire on a helper thread and watches the signalfd meanwhile.
 * Returns 0 when granted (r->rc == 0), or the exit code: the busy code is the
 * caller's, so for a refusal this returns -1 and leaves r->rc set. *lost is set
 * when the lease was lost before we saw the grant. */
static int wait_grant(run_state *r, int *lost)
{
    pthread_t th;
    int err, sig = 0, fail_errno = 0;
    const char *failed = NULL;

    atomic_store(&r->done, 0);
    if ((err = pthread_create(&th, NULL, acquire_main, r))) {
        fprintf(stderr, "%s: cannot start the acquire thread: %s\n", prog, strerror(err));
        return EX_SOFTWARE;
    }
    for (;;) {
        struct pollfd p[2] = { { r->sfd, POLLIN, 0 }, { ev_pipe[0], POLLIN, 0 } };
        int n;
        if (failed) {
            /* We cannot watch any more: stop the wait and collect the helper. */
            if (atomic_load(&r->done)) break;
            cancel_wait(r);
            sleep_ms(50);
            continue;
        }
        /* The acquire resets its cancel flag when it starts waiting, so a
         * cancel sent before that is forgotten: repeat it until it returns. */
        n = poll(p, 2, sig ? 50 : -1);
        if (n < 0) {
            if (errno != EINTR) { failed = "poll"; fail_errno = errno; }
            continue;
        }
        if (sig) cancel_wait(r);
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            ssize_t k = read(r->sfd, &si, sizeof si);
            if (k == (ssize_t)sizeof si) {
                if (si.ssi_signo != SIGCHLD && !sig) {
                    sig = (int)si.ssi_signo;
                    cancel_wait(r);
                }
            } else if (k < 0 && errno != EAGAIN && errno != EINTR) {
                failed = "read(signalfd)";
                fail_errno = errno;
            }
        }
        if (p[1].revents & POLLIN) {
            char c;
            ssize_t k = read(ev_pipe[0], &c, 1);
            if (k == 1 && c == EV_LOST) *lost = 1;
            else if (k == 1 && c == EV_DONE) break;
            else if (k < 0 && errno != EINTR) { failed = "read(pipe)"; fail_errno = errno; }
        }
    }
    if ((err = pthread_join(th, NULL))) {
        /* only a bug of ours can make a join fail; the helper has returned */
        fprintf(stderr, "%s: pthread_join: %s\n", prog, strerror(err));
    }
    if (failed || sig) {
        if (r->rc == 0) give_back(r);   /* granted meanwhile */
        if (failed) {
            fprintf(stderr, "%s: %s: %s\n", prog, failed, strerror(fail_errno));
            return EX_SOFTWARE;
        }
        fprintf(stderr, "%s: %s: the wait was canceled by %s\n", prog, r->name,
                sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP");
        return 128 + sig;
    }
    return r->rc ? -1 : 0;
}

/* A renewal answer that says nothing about the permit (the engine was not
 * reached, or not in time): retry; the deadline decides. */
static int transient(int rc)
{
    return rc == BATON_EUNAVAILABLE || rc == BATON_EIO || rc == BATON_ETIMEDOUT ||
           rc == BATON_EPROTO || rc == BATON_ENOMEM;
}

/* Renews the permit when due. Returns NULL while it is ours, else why it is
 * not: the engine said it is gone, or no renewal succeeded within a lease
 * (the lease counts from when the last successful renewal was sent).
 * ASK (before the command starts): past that bound, ask the engine once
 * rather than give up: a renewal that succeeds proves the permit never
 * expired (an expired one is reclaimed, not renewed), and engines whose
 * permits have no lease (file, zk) say so or that it still exists. While
 * the command runs the bound is final: it may not run on unknown. */
/* How often a held permit is renewed: a third of its lease, and at least
 * every second, so that an engine which learns of a loss on its own (a
 * ZooKeeper session given up) is asked soon: a permit has no on_lost. */
static int64_t permit_period(int64_t lease_ns)
{
    return lease_ns / 3 < 1000000000 ? lease_ns / 3 : 1000000000;
}

/* The watchdog's deadline after a renewal sent at SENT: the permit's lease,
 * or the engine's session when that is shorter (a ZooKeeper session ends
 * its timeout after the last request the server saw), less a margin. */
static int64_t permit_wd_deadline(const run_state *r, int64_t sent)
{
    int64_t wl = (int64_t)r->lease_ms * 1000000;
    if (r->wd_lease > 0 && r->wd_lease < wl) wl = r->wd_lease;
    return sent + wl - margin_ns(wl);
}

static const char *permit_keep(run_state *r, int ask)
{
    int64_t now = now_ns(), sent, lease = (int64_t)r->lease_ms * 1000000, retry;
    int rc;

    if (!r->keep) return NULL;
    if (now >= r->lease_end && !ask) return "the permit's lease ran out";
    if (now < r->renew_at && now < r->lease_end) return NULL;
    sent = now;
    rc = baton_permits_renew(r->pm, r->id, r->lease_ms);
    now = now_ns();
    if (rc == 0) {
        r->lease_end = sent + lease;
        r->renew_at = sent + permit_period(lease);
        /* the shim kills the command before this lease can end, should we
         * be stopped; our own loop acts a margin earlier */
        r->shim_deadline = permit_wd_deadline(r, sent);
        shim_say(r->shim_ctl, SHIM_DEADLINE, 0, r->shim_deadline);
        return NULL;
    }
    if (rc == BATON_ENOTSUP) {
        /* This engine's permits have no lease (file: the kernel frees the
         * slot when we die): nothing to renew, nothing to lose. */
        r->keep = 0;
        shim_say(r->shim_ctl, SHIM_DEADLINE, 0, INT64_MAX);
        return NULL;
    }
    if (!transient(rc)) {
        const baton_error *e = baton_error_last();
        set_msg(r, "permit lost (%s)",
                 e->code == rc && e->message && *e->message ? e->message : baton_strerror(rc));
        return r->msg;
    }
    /* as the library's lock keeper: a quarter of the period, 20 ms..1 s */
    retry = lease / 12;
    if (retry < 20000000) retry = 20000000;
    if (retry > 1000000000) retry = 1000000000;
    r->renew_at = now + retry;
    return now >= r->lease_end ? "the permit's lease ran out" : NULL;
}

/* ---- the permit's renewals: a thread of their own --------------------------
 * A renewal can block for the engine's whole I/O timeout (a frozen link),
 * longer than the lease: it must never hold up the loop that watches the
 * command. The thread renews; the loop kills on the monotonic deadline the
 * last successful renewal set (its send time + the lease), whatever the
 * thread is blocked in. */
static void *permit_main(void *arg)
{
    run_state *r = arg;
    const char *why = NULL;
    char c = EV_PLOST;

    pthread_mutex_lock(&r->pmu);
    while (!r->pstop && r->keep && !why) {
        struct timespec ts = { (time_t)(r->renew_at / 1000000000), (long)(r->renew_at % 1000000000) };
        if (now_ns() < r->renew_at) {
            pthread_cond_timedwait(&r->pcv, &r->pmu, &ts);
            continue;
        }
        pthread_mutex_unlock(&r->pmu);
        why = permit_keep(r, 0);
        pthread_mutex_lock(&r->pmu);
    }
    pthread_mutex_unlock(&r->pmu);
    if (why && write(ev_pipe[1], &c, 1) < 0) { /* cannot fail (see on_lost) */ }
    return NULL;
}

/* ---- supervising the command through the shim ------------------------------ */

typedef struct {
    pid_t shim;
    int ctl, rep;                /* our ends of the shim's pipes */
    int group;                   /* CLI_GROUP_* */
    int child_only;              /* -o */
    int64_t kill_after;          /* ns */
    /* the watchdog: lease engines only (the file engine's lock cannot run
     * out while baton is stopped) */
    int64_t wd_lease, wd_push;   /* 0 = no watchdog; how often we push a deadline */
    /* what happened */
    int exited, status, exec_err, exec_step, shim_reaped;
    int lost_running, lost_after, watchdog, shim_died;
} sup;

/* What a loss is called in messages. */
static const char *lost_what(const run_state *r)
{
    return r->el ? "leadership lost" : r->g ? "membership lost" : r->q ? "the item's lock lost" : "lease lost";
}

static int confirmed(run_state *r)
{
    return r->el ? baton_election_is_leader(r->el) : r->l ? baton_lock_held(r->l)
         : r->g ? baton_group_is_member(r->g) : r->it ? baton_queue_item_held(r->it) : 1;
}

static int grant_deadline(run_state *r, baton_client *c, int64_t *d);

/* The watchdog's deadline: the grant's own (baton_lock_deadline), less a
 * margin for the kill to land. NOW when we no longer hold it (the loss is
 * being reported: kill). */
static int64_t wd_deadline(const sup *S, run_state *r, int64_t now)
{
    int64_t d;
    if (grant_deadline(r, r->c, &d) != 0) return now;
    return d == INT64_MAX ? INT64_MAX : d - margin_ns(S->wd_lease);
}

static void lose(run_state *r, sup *S, const char *why)
{
    if (S->lost_running || S->lost_after || S->watchdog) return;
    /* the lease is gone: --kill-after decides now, not the watchdog */
    shim_say(S->ctl, SHIM_DEADLINE, 0, INT64_MAX);
    if (!S->exited) {
        S->lost_running = 1;
        fprintf(stderr, "%s: %s: %s; terminating the command\n", prog, r->name, why);
    } else {
        S->lost_after = 1;
        fprintf(stderr, "%s: %s: %s after the command exited; terminating what it left running\n", prog, r->name, why);
    }
    shim_say(S->ctl, SHIM_SIGNAL, SIGTERM, S->kill_after);
}

/* Everything of the command is ours to kill (the shim is gone): its tree
 * was re-parented to us (we are a subreaper too). */
static void reap_all(sup *S)
{
    int st;
    (void)S;
    for (int i = 0;; i++) {
        pid_t w;
        while ((w = waitpid(-1, &st, WNOHANG)) > 0) {}
        if (w < 0 && errno != EINTR) return;   /* ECHILD: none left (the usual case: no /proc walk) */
        if (i) sleep_ms(i < 10 ? 5 : 20);
        /* everything left is a descendant of ours (we are a subreaper) */
        cli_tree_kill(getpid(), 0, SIGKILL);
    }
}

/* Reads what the shim said (one record); 0 once its pipe is closed or
 * empty after it exited. */
static int shim_news(run_state *r, sup *S, int *done)
{
    cli_shim_msg m;
    ssize_t k = read(S->rep, &m, sizeof m);
    if (k == (ssize_t)sizeof m) {
        if (m.type == SHIM_DONE) {
            *done = 1;
            if (m.b == 1) { S->exited = 1; S->status = m.a; }
        }
        else if (m.type == SHIM_EXITED) { S->exited = 1; S->status = m.a; }
        else if (m.type == SHIM_EXEC_FAILED) { S->exec_err = m.a; S->exec_step = (int)m.b; }
        else if (m.type == SHIM_WATCHDOG && !S->lost_running && !S->lost_after) {
            S->watchdog = 1;
            fprintf(stderr, "%s: %s: baton could not confirm the lease in time (stopped or hung); "
                    "the watchdog killed the command\n", prog, r->name);
        }
        return 1;
    }
    if (k < 0 && errno == EINTR) return 1;
    /* EOF, or empty (EAGAIN): the caller polls again, or (the shim is gone) stops */
    return k < 0 && errno == EAGAIN && !S->shim_reaped;
}

/* Forwards signals, keeps the watchdog fed, notices a lost lease, and waits
 * until the shim reports the command's tree empty (or, with -o, the command
 * itself exited). Returns 0 (S filled), or EX_SOFTWARE after a failure of
 * ours. Either way nothing of the command is running any more, unless -o
 * left it: the caller may give the lock back. */
static int supervise(run_state *r, sup *S)
{
    int64_t next_push = S->wd_push ? now_ns() : INT64_MAX;
    int64_t lm = r->pm ? 2 * margin_ns((int64_t)r->lease_ms * 1000000) : 0;
    const char *failed = NULL;
    int fail_errno = 0, rep_open = 1, shim_done = 0;

    while (!shim_done) {
        struct pollfd p[3] = { { r->sfd, POLLIN, 0 }, { ev_pipe[0], POLLIN, 0 }, { S->rep, POLLIN, 0 } };
        int64_t now = now_ns(), due = INT64_MAX, lend;

        if (r->pm && r->keep && !S->lost_running && !S->lost_after) {
            lend = atomic_load(&r->lease_end);
            if (now >= lend - lm) lose(r, S, "the permit's lease ran out");
            else due = lend - lm;
        }
        if (!S->lost_running && !S->lost_after && !S->watchdog && now >= next_push) {
            if (confirmed(r)) shim_say(S->ctl, SHIM_DEADLINE, 0, wd_deadline(S, r, now));
            next_push = now + S->wd_push;
        }
        if (S->wd_push && next_push < due) due = next_push;
        if (poll(p, rep_open ? 3 : 2, poll_ms(now, due)) < 0) {
            if (errno == EINTR) continue;
            failed = "poll";
            fail_errno = errno;
            break;
        }
        /* the shim's news first: a watchdog that fired while we were stopped
         * explains the loss we find on waking */
        if (rep_open && (p[2].revents & (POLLIN | POLLHUP | POLLERR))) rep_open = shim_news(r, S, &shim_done);
        if (p[1].revents & POLLIN) {
            char c;
            ssize_t k = read(ev_pipe[0], &c, 1);
            if (k == 1 && c == EV_LOST) lose(r, S, lost_what(r));
            else if (k == 1 && c == EV_PLOST) lose(r, S, r->msg ? r->msg : "permit lost");
            else if (k < 0 && errno != EINTR) { failed = "read(pipe)"; fail_errno = errno; break; }
        }
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            ssize_t k;
            while ((k = read(r->sfd, &si, sizeof si)) == (ssize_t)sizeof si) {
                if (si.ssi_signo == SIGCHLD) continue;
                /* The terminal's own (Ctrl-C, a hang-up) reached the command
                 * directly when it shares our group: it is the command's
                 * to handle (an editor keeps running on Ctrl-C). */
                if (S->group == CLI_GROUP_SAME && si.ssi_code == SI_KERNEL) continue;
                /* the whole tree gets it; SIGKILL after --kill-after */
                shim_say(S->ctl, SHIM_SIGNAL, (int32_t)si.ssi_signo, S->kill_after);
            }
            if (k < 0 && errno != EAGAIN && errno != EINTR) { failed = "read(signalfd)"; fail_errno = errno; break; }
        }
        for (;;) {
            int st;
            pid_t w = waitpid(-1, &st, WNOHANG);
            if (w <= 0) break;
            if (w == S->shim) {
                S->shim_reaped = 1;
                /* what it said before it exited is all in the pipe now */
                while (rep_open && !shim_done) rep_open = shim_news(r, S, &shim_done);
                /* done is said just before a clean exit: without it the
                 * shim died (killed), and what it kept is now ours */
                if (!shim_done) {
                    shim_done = 1;
                    S->shim_died = 1;
                }
            }
        }
    }
    if (!failed && !S->shim_died) {
        /* the tree is empty (-o: the command exited, and what it left behind
         * is not ours); the shim's exit need not be waited for: it is our
         * child, and init's once we exit */
        return 0;
    }
    if (failed) fprintf(stderr, "%s: %s: %s; killing the command\n", prog, failed, strerror(fail_errno));
    else fprintf(stderr, "%s: the supervising process died; killing the command\n", prog);
    /* Without the loop we can neither forward signals nor notice a lost
     * lease: nothing of the command may run on unwatched, and the lock may
     * only be given back once it is all gone. */
    if (!shim_done) kill(S->shim, SIGKILL);
    reap_all(S);
    return EX_SOFTWARE;
}

enum { M_PLAIN, M_FAIR, M_SHARED, M_WRITE, M_PERMITS };
enum { O_KILL_AFTER = CLI_LONG_ONLY, O_FAIR, O_PERMITS, O_VERBOSE, O_VALUE, O_LISTEN, O_LEADER, O_LOST_CODE,
       O_URI_FILE };

/* The longest lease: the engines count leases in 32-bit milliseconds. */
#define LEASE_MAX_S 4294967.295
#define LEASE_MIN_S 0.05

/* Where the command's process group goes (shim.h). With a controlling
 * terminal whose foreground is our group, the command stays in it: the
 * terminal's Ctrl-C and Ctrl-Z reach it and it may read the terminal (a
 * group of its own would be a background job: stopped on its first read).
 * Its tree is then found through the shim (a subreaper) alone. */
static int group_mode(void)
{
    int fd = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC), fg;
    if (fd < 0) return CLI_GROUP_SESSION;
    fg = tcgetpgrp(fd) == getpgrp();
    close(fd);
    return fg ? CLI_GROUP_SAME : CLI_GROUP_OWN;
}

/* Until when what we hold is ours (baton_lock_deadline and friends):
 * INT64_MAX when it cannot run out while we are stopped (a file lock). */
static int grant_deadline(run_state *r, baton_client *c, int64_t *d)
{
    if (r->el) return baton_election_deadline(r->el, d);
    if (r->l) return baton_lock_deadline(r->l, d);
    if (r->g) return baton_group_deadline(r->g, d);
    if (r->it) return baton_queue_item_deadline(r->it, d);
    /* a permit: its own lease is counted by us (permit_wd_deadline); the
     * session it may hang on, by the client */
    return baton_client_deadline(c, d);
}

/* The watchdog's lease: what can run out while baton is stopped, measured
 * on the grant just made (the engine's lease, a ZooKeeper session's
 * timeout, an etcd client lease's TTL: whichever bounds this grant). */
static void watchdog_setup(sup *S, run_state *r, baton_client *c, uint32_t lease_ms)
{
    int64_t now = now_ns(), d, lease, push;
    if (grant_deadline(r, c, &d) != 0) return;
    if (d == INT64_MAX) {
        if (!r->pm) return;   /* a file lock: nothing to run out */
        lease = (int64_t)lease_ms * 1000000;
    } else {
        lease = d - now;
        if (r->pm && lease > (int64_t)lease_ms * 1000000) lease = (int64_t)lease_ms * 1000000;
    }
    if (lease < 1000000) lease = 1000000;
    /* a confirmation every twelfth of the lease (at most 1 s apart) keeps
     * the deadline well in front */
    push = lease / 12;
    if (push > 1000000000) push = 1000000000;
    if (push < 1000000) push = 1000000;
    S->wd_lease = lease;
    S->wd_push = push;
}

/* The URI of -u / --uri-file (malloc'd): freed by cli_run / cli_elect
 * whichever way run_main returns. */
static char *uri_owned;

/* One `baton run` or `baton elect`: its options, then what it holds and
 * owns on the way, released at run_main's end whichever way it goes. */
typedef struct {
    int elect;
    const cli_hold_spec *hold;      /* baton member / baton queue take instead (cli_run_hold) */
    int item_fd;                    /* take: the item, the command's standard input (a memfd) */
    const char *cmdn;               /* "run" or "elect", for messages */
    int argc;
    char **argv;                    /* argv[optind...]: COMMAND ARG... once the options are read */
    /* the options */
    const char *uri, *name, *cmdstr, *value, *cmdname;
    char value_buf[300];
    char n_name[64], w_name[64], c_name[64], mode_name[64];   /* the options as typed */
    double wait_s, lease_s, kill_after;
    int mode, verbose, nowait, busy_code, child_only, lost_code, listen_mode, leader_mode;
    long long permits;
    /* the run */
    baton_client *c;
    baton_rwlock *rw;
    baton_lock_options lo_opts;
    sigset_t old;                   /* the signal mask we started with: the command's */
    struct sigaction chld_old, chld_dfl;
    char buf[32];                   /* the fence, as text */
    char **shv, *child_uri, *child_pw;
    char *sh_argv[4];
    char *blob, *name_owned;
    size_t blob_len;
    pthread_t pth;
    int pth_started, lost;
    int64_t acq_start;
    run_state r;
    cli_shim_cfg cfg;
    sup S;
} run_ctx;

/* run_ctx's steps: RUN_GO to go on, else the exit code */
#define RUN_GO (-1)

/* The options, up to NAME. */
static int run_options(run_ctx *x)
{
    static const struct option lo[] = {
        { "uri", required_argument, NULL, CLI_LONG('u') },
        { "nonblock", no_argument, NULL, CLI_LONG('n') },
        { "nb", no_argument, NULL, CLI_LONG('n') },
        { "timeout", required_argument, NULL, CLI_LONG('w') },
        { "wait", required_argument, NULL, CLI_LONG('w') },
        { "conflict-exit-code", required_argument, NULL, CLI_LONG('E') },
        { "command", required_argument, NULL, CLI_LONG('c') },
        { "shared", no_argument, NULL, CLI_LONG('s') },
        { "exclusive", no_argument, NULL, CLI_LONG('x') },
        { "write", no_argument, NULL, CLI_LONG('x') },
        { "lease", required_argument, NULL, CLI_LONG('t') },
        { "close", no_argument, NULL, CLI_LONG('o') },
        { "no-fork", no_argument, NULL, CLI_LONG('F') },
        { "help", no_argument, NULL, CLI_LONG('h') },
        { "version", no_argument, NULL, CLI_LONG('V') },
        { "verbose", no_argument, NULL, O_VERBOSE },
        { "kill-after", required_argument, NULL, O_KILL_AFTER },
        { "fair", no_argument, NULL, O_FAIR },
        { "permits", required_argument, NULL, O_PERMITS },
        { "value", required_argument, NULL, O_VALUE },
        { "listen", no_argument, NULL, O_LISTEN },
        { "leader", no_argument, NULL, O_LEADER },
        { "lost-exit-code", required_argument, NULL, O_LOST_CODE },
        { "uri-file", required_argument, NULL, O_URI_FILE },
        { NULL, 0, NULL, 0 },
    };
    const char *cmdn = x->cmdn;
    cli_opts o = { .argc = x->argc, .argv = x->argv, .cmd = cmdn,
                   .shorts = x->elect ? "u:nw:E:c:t:loFhV" : "u:nw:E:c:sxet:oFhV", .lo = lo, .permute = 0 };
    long long v;
    int opt;

    while ((opt = cli_next(&o)) != CLI_END) {
        int m = M_PLAIN;
        switch (opt) {
        case CLI_BAD: return EX_USAGE;
        case 'u':
            free(uri_owned);
            if (!(x->uri = uri_owned = cli_uri_arg(o.arg))) return EX_SOFTWARE;
            break;
        case 'n': x->nowait = 1; snprintf(x->n_name, sizeof x->n_name, "%s", o.name); break;
        case 'w':
            if (cli_secs(cmdn, o.name, o.arg, 0, 1e9, NULL, &x->wait_s)) return EX_USAGE;
            snprintf(x->w_name, sizeof x->w_name, "%s", o.name);
            break;
        case 't':
            if (cli_secs(cmdn, o.name, o.arg, LEASE_MIN_S, LEASE_MAX_S, "leases are 32-bit milliseconds", &x->lease_s))
                return EX_USAGE;
            break;
        case O_KILL_AFTER:
            if (cli_secs(cmdn, o.name, o.arg, 0, 1e9, NULL, &x->kill_after)) return EX_USAGE;
            break;
        case 'E':
            if (cli_int(o.arg, 0, 255, &v))
                return cli_usage_error(cmdn, "%s: bad exit code '%s' (want 0 to 255)", o.name, o.arg);
            x->busy_code = (int)v;
            break;
        case 'c':
            if (x->cmdstr) return cli_usage_error(cmdn, "%s given twice", o.name);
            x->cmdstr = o.arg;
            snprintf(x->c_name, sizeof x->c_name, "%s", o.name);
            break;
        case 's': m = M_SHARED; break;
        case 'x': case 'e': m = M_WRITE; break;
        case O_FAIR: m = M_FAIR; break;
        case O_PERMITS:
            if (cli_int(o.arg, 1, 1000000, &x->permits))
                return cli_usage_error(cmdn, "%s: bad number of permits '%s' (want 1 to 1000000)", o.name, o.arg);
            m = M_PERMITS;
            break;
        case O_VERBOSE: x->verbose = 1; break;
        case O_VALUE: case O_LISTEN: case O_LEADER: case 'l':
            if (!x->elect) return cli_usage_error(cmdn, "%s is an option of baton elect", o.name);
            if (opt == O_VALUE) {
                /* --listen and --leader print it on one line */
                if (strchr(o.arg, '\n'))
                    return cli_usage_error(cmdn, "%s: the value must be one line", o.name);
                if (strlen(o.arg) > BATON_ELECTION_VALUE_MAX)
                    return cli_usage_error(cmdn, "%s: the value is %zu bytes; the limit is %d", o.name,
                                           strlen(o.arg), BATON_ELECTION_VALUE_MAX);
                x->value = o.arg;
            }
            else if (opt == O_LEADER) x->leader_mode = 1;
            else x->listen_mode = 1;
            break;
        case 'o': x->child_only = 1; break;   /* flock's --close: the lock is COMMAND's, not its children's */
        case O_LOST_CODE:
            if (cli_int(o.arg, 0, 255, &v))
                return cli_usage_error(cmdn, "%s: bad exit code '%s' (want 0 to 255)", o.name, o.arg);
            x->lost_code = (int)v;
            break;
        case O_URI_FILE:
            free(uri_owned);
            if (!(uri_owned = cli_read_uri_file(cmdn, o.arg))) return EX_USAGE;
            x->uri = uri_owned;
            break;
        case 'F':
            return cli_usage_error(cmdn, "%s is not supported: baton stays to renew the lease and release the lock",
                                   o.name);
        case 'h': if (x->elect) cli_usage_elect(stdout); else cli_usage_run(stdout); return 0;
        case 'V': printf("baton %s\n", baton_version()); return 0;
        default: return cli_usage_error(cmdn, "option '%s' is not handled", o.name);   /* a bug of ours */
        }
        if (m != M_PLAIN) {
            if (x->elect)
                return cli_usage_error(cmdn, "%s is an option of baton run: an election has one leader", o.name);
            if (x->mode != M_PLAIN && x->mode != m)
                return cli_usage_error(cmdn, "%s and %s exclude each other (choose one of --shared, --write, "
                                       "--permits, --fair)", x->mode_name, o.name);
            x->mode = m;
            snprintf(x->mode_name, sizeof x->mode_name, "%s", o.name);
        }
    }
    return RUN_GO;
}

/* NAME and COMMAND (or -c COMMAND_STRING) after the options; baton elect
 * --listen / --leader end here. */
static int run_operands(run_ctx *x)
{
    const char *cmdn = x->cmdn;
    int argc = x->argc;
    char **argv = x->argv;

    if (x->nowait && x->w_name[0]) return cli_usage_error(cmdn, "%s and %s exclude each other", x->n_name, x->w_name);
    if (optind >= argc) return cli_usage_error(cmdn, "missing NAME");
    x->name = argv[optind++];
    if (x->listen_mode || x->leader_mode) {
        if (x->listen_mode && x->leader_mode) return cli_usage_error(cmdn, "--listen and --leader exclude each other");
        if (optind < argc && !strcmp(argv[optind], "--")) optind++;
        if (optind < argc || x->cmdstr)
            return cli_usage_error(cmdn, "%s takes no COMMAND", x->listen_mode ? "--listen" : "--leader");
        return cli_elect_watch(cli_default_uri(x->uri), x->name, x->listen_mode,
                           x->nowait ? 0 : x->wait_s < 0 ? -1 : (int64_t)(x->wait_s * 1000));
    }
    if (x->elect && !x->value) {
        /* what etcdctl elect calls the proposal: by default who we are */
        char host[256] = "?";
        gethostname(host, sizeof host - 1);
        snprintf(x->value_buf, sizeof x->value_buf, "%s %ld", host, (long)getpid());
        x->value = x->value_buf;
    }
    if (optind < argc && (!strcmp(argv[optind], "-c") || !strcmp(argv[optind], "--command") ||
                          !strncmp(argv[optind], "--command=", 10))) {
        /* flock's form: NAME -c COMMAND_STRING */
        const char *f = argv[optind];
        if (x->cmdstr) return cli_usage_error(cmdn, "%.*s given twice", (int)strcspn(f, "="), f);
        if (!strncmp(f, "--command=", 10)) {
            x->cmdstr = f + 10;
            optind++;
        } else if (optind + 1 < argc) {
            x->cmdstr = argv[optind + 1];
            optind += 2;
        } else {
            return cli_usage_error(cmdn, "option '%s' requires an argument", f);
        }
        snprintf(x->c_name, sizeof x->c_name, "%.*s", (int)strcspn(f, "="), f);
        if (optind < argc)
            return cli_usage_error(cmdn, "%s takes one command string, and no COMMAND ARG... after it "
                                   "(quote the whole command)", x->c_name);
    } else if (optind < argc && !strcmp(argv[optind], "--")) {
        optind++;
    }
    if (x->cmdstr && optind < argc)
        return cli_usage_error(cmdn, "%s CMD and COMMAND ARG... exclude each other", x->c_name);
    if (!x->cmdstr && optind >= argc) return cli_usage_error(cmdn, "missing COMMAND (or -c COMMAND_STRING)");
    return RUN_GO;
}

/* Signals as signalfd reads, before any thread exists. */
static int run_signals(run_ctx *x)
{
    sigset_t fwd, all;
    int err;

    /* An inherited SIG_IGN for SIGCHLD would have the kernel reap the command
     * itself and waitpid fail: we take the default; the command gets it back. */
    memset(&x->cfg, 0, sizeof x->cfg);
    if (sigaction(SIGCHLD, NULL, &x->chld_old)) { perror("baton: sigaction"); return EX_SOFTWARE; }
    if (!(x->chld_old.sa_flags & SA_SIGINFO) && x->chld_old.sa_handler == SIG_IGN) {
        memset(&x->chld_dfl, 0, sizeof x->chld_dfl);
        x->chld_dfl.sa_handler = SIG_DFL;
        sigemptyset(&x->chld_dfl.sa_mask);
        if (sigaction(SIGCHLD, &x->chld_dfl, NULL)) { perror("baton: sigaction"); return EX_SOFTWARE; }
        x->cfg.chld = &x->chld_old;
    }
    /* From the start, signals come to this thread only as signalfd reads (the
     * library's threads and the acquire helper block them): a Ctrl-C during
     * the wait cancels it rather than killing us inside it. SIGPIPE is
     * blocked too (a write to a shim that died answers EPIPE); the shim
     * gives the command the mask we started with. */
    sigemptyset(&fwd);
    sigaddset(&fwd, SIGINT); sigaddset(&fwd, SIGTERM); sigaddset(&fwd, SIGHUP); sigaddset(&fwd, SIGCHLD);
    all = fwd;
    sigaddset(&all, SIGPIPE);
    if ((err = pthread_sigmask(SIG_BLOCK, &all, &x->old))) {
        fprintf(stderr, "%s: sigprocmask: %s\n", prog, strerror(err));
        return EX_SOFTWARE;
    }
    if ((x->r.sfd = signalfd(-1, &fwd, SFD_CLOEXEC | SFD_NONBLOCK)) < 0) {
        fprintf(stderr, "%s: signalfd: %s\n", prog, strerror(errno));
        return EX_SOFTWARE;
    }
    if (pipe2(ev_pipe, O_CLOEXEC)) {
        fprintf(stderr, "%s: pipe: %s\n", prog, strerror(errno));
        return EX_SOFTWARE;
    }
    return RUN_GO;
}

/* The shim (shim.c), forked now while we have no thread: it will start
 * the command once we hold the lock, and keep its whole tree. */
static int run_fork_shim(run_ctx *x)
{
    int argc = x->argc;
    char **argv = x->argv;
    int ctl[2], rep[2], err;

    if (x->cmdstr) {
        x->sh_argv[2] = (char *)x->cmdstr;
    } else if (!(x->shv = calloc((size_t)(argc - optind) + 2, sizeof *x->shv))) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return EX_SOFTWARE;
    } else {
        x->shv[0] = "sh";
        for (int i = optind; i < argc; i++) x->shv[i - optind + 1] = argv[i];
    }
    /* -c: /bin/sh -c CMD, as flock -c (which runs $SHELL; baton runs sh
     * whatever the caller's login shell is) */
    x->cfg.file = x->cmdstr ? "/bin/sh" : argv[optind];
    x->cfg.argv = x->cmdstr ? x->sh_argv : argv + optind;
    x->cfg.shv = x->cmdstr ? x->sh_argv : x->shv;
    x->cfg.mask = &x->old;
    x->cfg.group = group_mode();
    x->cfg.child_only = x->child_only;
    x->cfg.stdin_fd = -1;
    if (x->hold && x->hold->kind == CLI_HOLD_TAKE) {
        /* the item, once taken, is written here: the command's standard input */
        if ((x->item_fd = memfd_create("baton-item", MFD_CLOEXEC)) < 0) {
            fprintf(stderr, "%s: memfd_create: %s\n", prog, strerror(errno));
            return EX_SOFTWARE;
        }
        x->cfg.stdin_fd = x->item_fd;
    }
    x->cmdname = x->cmdstr ? "sh" : argv[optind];
    x->S.group = x->cfg.group;
    x->S.child_only = x->child_only;
    x->S.kill_after = secs_ns(x->kill_after);
    if (pipe2(ctl, O_CLOEXEC)) {
        fprintf(stderr, "%s: pipe: %s\n", prog, strerror(errno));
        return EX_SOFTWARE;
    }
    if (pipe2(rep, O_CLOEXEC)) {
        fprintf(stderr, "%s: pipe: %s\n", prog, strerror(errno));
        close(ctl[0]);
        close(ctl[1]);
        return EX_SOFTWARE;
    }
    /* orphans of the command come back to us should the shim die */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    x->S.shim = fork();
    if (x->S.shim == 0) {
        close(ctl[1]);
        close(rep[0]);
        close(x->r.sfd);
        close(ev_pipe[0]);
        close(ev_pipe[1]);
        x->cfg.ctl = ctl[0];
        x->cfg.rep = rep[1];
        cli_shim_main(&x->cfg);
    }
    err = errno;
    close(ctl[0]);
    close(rep[1]);
    x->S.ctl = ctl[1];
    x->S.rep = rep[0];
    if (x->S.shim < 0) {
        fprintf(stderr, "%s: fork: %s\n", prog, strerror(err));
        return EX_SOFTWARE;
    }
    fcntl(x->S.rep, F_SETFL, O_NONBLOCK);
    return RUN_GO;
}

/* The group or the queue of cli_run_hold. NAME is theirs as typed: a
 * file-engine path (cli_lock_name) names a lock file, not these. */
static int hold_open(run_ctx *x)
{
    run_state *r = &x->r;
    const char *what;
    int rc;

    if (x->hold->kind == CLI_HOLD_MEMBER) {
        baton_group_options go = BATON_GROUP_OPTIONS_INIT;
        go.lease_ms = r->lease_ms;
        go.on_lost = on_lost_member;
        r->member_id = x->hold->id;
        r->value = x->hold->value ? x->hold->value : "";
        what = "groups";
        rc = baton_group_open(&r->g, x->c, x->name, &go);
    } else {
        baton_queue_options qo = BATON_QUEUE_OPTIONS_INIT;
        qo.lease_ms = r->lease_ms;
        qo.on_lost = on_lost_item;
        what = "queues";
        rc = baton_queue_open(&r->q, x->c, x->name, &qo);
    }
    if (rc == BATON_ENOTSUP)
        fprintf(stderr, "%s: %s are not supported by the %s engine\n", prog, what, baton_client_backend(x->c));
    else if (rc)
        cli_report(x->cmdn, rc);
    return rc ? cli_exit_for(rc) : RUN_GO;
}

/* The client, and the lock, permits or election on it. */
static int run_open(run_ctx *x)
{
    run_state *r = &x->r;
    int rc;

    x->uri = cli_default_uri(x->uri);
    {
        /* -t also for engines whose lease is the client's (etcd's TTL,
         * unless the URI sets ttl=) */
        baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
        co.lease_ms = r->lease_ms;
        if ((rc = baton_client_open(&x->c, x->uri, &co))) { cli_report("open", rc); return cli_exit_for(rc); }
    }
    if (x->hold) return hold_open(x);
    if (!(x->name_owned = cli_lock_name(x->c, x->name))) return EX_SOFTWARE;
    r->name = x->name = x->name_owned;
    x->lo_opts.lease_ms = r->lease_ms;
    x->lo_opts.on_lost = on_lost;
    x->lo_opts.fair = x->mode == M_FAIR;
    if (x->elect) {
        baton_election_options eo = BATON_ELECTION_OPTIONS_INIT;
        eo.lease_ms = r->lease_ms;
        eo.on_lost = on_lost_lead;
        r->value = x->value;
        if ((rc = cli_election_open(&r->el, x->c, x->name, &eo))) return cli_exit_for(rc);
    } else if (x->mode == M_PERMITS) {
        /* One of N permits, each with its own lease: a killed holder's slot
         * comes back when its lease runs out (or, on engines without leases,
         * when it dies). The first user sets N; later users join it. */
        if ((rc = baton_permits_open(&r->pm, x->c, x->name)) ||
            (rc = baton_permits_try_set(r->pm, (uint32_t)x->permits, NULL))) {
            if (rc == BATON_ENOTSUP)
                fprintf(stderr, "%s: %s is not supported by the %s engine\n", prog, x->mode_name,
                        baton_client_backend(x->c));
            else
                cli_report("permits", rc);
            return cli_exit_for(rc);
        }
    } else if (x->mode == M_SHARED || x->mode == M_WRITE) {
        if ((rc = baton_rwlock_open(&x->rw, x->c, x->name, &x->lo_opts))) {
            cli_report("rwlock", rc);
            return cli_exit_for(rc);
        }
        r->l = x->mode == M_SHARED ? baton_rwlock_read(x->rw) : baton_rwlock_write(x->rw);
    } else if ((rc = baton_lock_open(&r->l, x->c, x->name, &x->lo_opts))) {
        cli_report("lock", rc);
        return cli_exit_for(rc);
    }
    return RUN_GO;
}

/* Waits for the grant; then the watchdog, and a permit's first renewal. */
static int run_acquire(run_ctx *x)
{
    run_state *r = &x->r;
    const char *why;
    int code, rc;

    /* Every attempt of the acquire is sent after this: a lower bound for
     * when the permit's lease started. */
    x->acq_start = now_ns();
    if ((code = wait_grant(r, &x->lost)) > 0) return code;
    if (code < 0) {
        rc = r->rc;
        if (r->g && rc == BATON_ELOCKED) {
            fprintf(stderr, "%s: %s: a live member has the id %s\n", prog, x->name, r->member_id ? r->member_id : "?");
            return x->busy_code;
        }
        if (r->q && (rc == BATON_ENOENT || rc == BATON_ETIMEDOUT)) {
            if (x->verbose) fprintf(stderr, "%s: %s: no item after %.3f s\n", prog, x->name,
                                    (double)(now_ns() - x->acq_start) / 1e9);
            return x->busy_code;
        }
        if (rc == BATON_ELOCKED || rc == BATON_ETIMEDOUT) {
            /* quiet, as flock -n: a cron job's skipped run mails nothing */
            if (x->verbose && r->wait_ms == 0)
                fprintf(stderr, "%s: %s: busy\n", prog, x->name);
            else if (x->verbose)
                fprintf(stderr, "%s: %s: still busy after %.3f s; gave up\n", prog, x->name,
                        (double)(now_ns() - x->acq_start) / 1e9);
            return x->busy_code;
        }
        fprintf(stderr, "%s: acquire: %s\n", prog, r->msg ? r->msg : baton_strerror(rc));
        return cli_exit_for(rc);
    }

    /* Granted. Anything that fails from here until the command runs gives
     * the lock back first. The watchdog's lease is known now (an etcd
     * client's lease exists once something was granted on it). */
    r->c = x->c;
    watchdog_setup(&x->S, r, x->c, r->lease_ms);
    if (x->mode == M_PERMITS) {
        /* a permit's renewals feed the watchdog themselves, with their send times */
        r->wd_lease = x->S.wd_lease;
        x->S.wd_push = 0;
    }
    if (r->pm) {
        int64_t lease = (int64_t)r->lease_ms * 1000000;
        r->keep = 1;
        r->lease_end = add_ns(x->acq_start, lease);
        r->renew_at = add_ns(x->acq_start, permit_period(lease));
        r->shim_deadline = permit_wd_deadline(r, x->acq_start);
        /* after a long wait the first renewal is due (or late) already:
         * acq_start is only a lower bound for when the lease began */
        if ((why = permit_keep(r, 1))) {
            fprintf(stderr, "%s: %s: %s before the command started\n", prog, x->name, why);
            give_back(r);
            return EX_LOST;
        }
    }
    if (x->lost) {
        fprintf(stderr, "%s: %s: %s before the command started\n", prog, x->name, lost_what(r));
        give_back(r);
        return EX_LOST;
    }
    return RUN_GO;
}

/* take: the item into the memfd that is the command's standard input,
 * read from its start. 0, or -1 reported. */
static int item_to_stdin(run_ctx *x)
{
    size_t len, off = 0;
    const char *d = baton_queue_item_data(x->r.it, &len);

    while (off < len) {
        ssize_t k = write(x->item_fd, d + off, len - off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            fprintf(stderr, "%s: %s: the item for the command's input: %s\n", prog, x->name, strerror(errno));
            return -1;
        }
        off += (size_t)k;
    }
    /* one open file shared with the shim: the command reads from here */
    if (lseek(x->item_fd, 0, SEEK_SET) < 0) {
        fprintf(stderr, "%s: lseek: %s\n", prog, strerror(errno));
        return -1;
    }
    return 0;
}

/* The go to the shim: the command's environment and the watchdog's first
 * deadline. */
static int run_go(run_ctx *x)
{
    run_state *r = &x->r;
    const char *pw_var = NULL;
    char *nb;
    size_t len;
    cli_shim_msg m;

    const char *ka = "BATON_FENCE", *va = NULL, *kb = "BATON_MEMBER_ID", *vb = NULL;

    snprintf(x->buf, sizeof x->buf, "%" PRIu64, r->l ? baton_lock_fence(r->l) : r->el ? baton_election_fence(r->el)
                                                : r->it ? baton_queue_item_fence(r->it) : 0);
    if (r->l || r->el) va = x->buf;
    if (r->g) {
        ka = "BATON_GROUP", va = x->name, vb = baton_group_id(r->g);
        if (x->verbose) fprintf(stderr, "%s: %s: a member, id %s\n", prog, x->name, vb ? vb : "?");
    } else if (r->it) {
        ka = "BATON_QUEUE", va = x->name, kb = "BATON_FENCE", vb = x->buf;
        if (x->verbose) fprintf(stderr, "%s: %s: took an item after %.3f s, fence %s\n", prog, x->name,
                                (double)(now_ns() - x->acq_start) / 1e9, x->buf);
        if (item_to_stdin(x)) {
            give_back(r);
            return EX_SOFTWARE;
        }
    } else if (x->verbose && r->pm)
        fprintf(stderr, "%s: %s: got a permit after %.3f s (%s)\n", prog, x->name,
                (double)(now_ns() - x->acq_start) / 1e9, r->id);
    else if (x->verbose && r->el)
        fprintf(stderr, "%s: %s: leading after %.3f s, term %s\n", prog, x->name,
                (double)(now_ns() - x->acq_start) / 1e9, x->buf);
    else if (x->verbose)
        fprintf(stderr, "%s: %s: got the lock after %.3f s, fence %s\n", prog, x->name,
                (double)(now_ns() - x->acq_start) / 1e9, x->buf);
    /* The command's BATON_URI names the engine so that a nested baton can
     * use it: with no password in it (that goes to the variable the engine
     * reads, baton_client_secret), with the file engine's directory. The
     * shim puts these into the command's environment: "KEY=VAL" sets,
     * a bare "KEY" removes. */
    if (cli_child_uri(x->c, x->uri, &x->child_uri, &x->child_pw, &pw_var) ||
        !(x->blob = cli_env_blob(&x->blob_len, "BATON_LOCK", x->hold ? NULL : x->name, ka, va, kb, vb,
                                 "BATON_URI", x->child_uri, x->child_pw && pw_var ? pw_var : NULL, x->child_pw,
                                 (const char *)NULL))) {
        fprintf(stderr, "%s: out of memory\n", prog);
        give_back(r);
        return EX_SOFTWARE;
    }
    /* the header and the blob in one write: one wake-up of the shim */
    len = x->blob_len + sizeof(cli_shim_msg);
    if (!(nb = realloc(x->blob, len))) {
        fprintf(stderr, "%s: out of memory\n", prog);
        give_back(r);
        return EX_SOFTWARE;
    }
    x->blob = nb;
    memmove(x->blob + sizeof m, x->blob, x->blob_len);
    memset(&m, 0, sizeof m);
    m.type = SHIM_GO;
    m.a = (int32_t)x->blob_len;
    /* The watchdog's first deadline travels with the go: sent after
     * it, a baton stopped in between would leave the command
     * running with no deadline at all. */
    m.b = r->pm ? (r->keep ? r->shim_deadline : 0) : x->S.wd_push ? wd_deadline(&x->S, r, now_ns()) : 0;
    memcpy(x->blob, &m, sizeof m);
    x->blob_len = len;
    for (size_t off = 0; off < len;) {
        ssize_t k = write(x->S.ctl, x->blob + off, len - off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;   /* the shim died: supervise sees it */
        off += (size_t)k;
    }
    return RUN_GO;
}

/* A permit's renewals, on their own thread from here; a lock's watchdog
 * deadline. */
static void run_keep(run_ctx *x)
{
    run_state *r = &x->r;
    int err;

    if (r->pm) {
        pthread_condattr_t ca;
        r->shim_ctl = x->S.ctl;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&r->pcv, &ca);
        pthread_condattr_destroy(&ca);
        pthread_mutex_init(&r->pmu, NULL);
        if (r->keep) shim_say(x->S.ctl, SHIM_DEADLINE, 0, r->shim_deadline);
        if ((err = pthread_create(&x->pth, NULL, permit_main, r))) {
            fprintf(stderr, "%s: cannot start the renewal thread: %s\n", prog, strerror(err));
            shim_say(x->S.ctl, SHIM_SIGNAL, SIGKILL, -1);
        } else {
            x->pth_started = 1;
        }
    } else if (x->S.wd_push) {
        shim_say(x->S.ctl, SHIM_DEADLINE, 0, wd_deadline(&x->S, r, now_ns()));
    }
}

/* The exit code once the command is gone (supervise said CODE), the lock
 * given back. */
static int run_result(run_ctx *x, int code)
{
    run_state *r = &x->r;
    sup *S = &x->S;
    int rc;

    if (x->pth_started) {
        pthread_mutex_lock(&r->pmu);
        r->pstop = 1;
        pthread_cond_signal(&r->pcv);
        pthread_mutex_unlock(&r->pmu);
        /* at most one renewal's I/O timeout: the command is gone already */
        pthread_join(x->pth, NULL);
    }
    if (r->it && !code && !S->exec_err && !S->lost_running && !S->watchdog && S->exited &&
        WIFEXITED(S->status) && WEXITSTATUS(S->status) == 0) {
        /* take: the command did the item's work */
        baton_queue_item *it = r->it;
        r->it = NULL;
        rc = baton_queue_done(it);
    } else {
        rc = give_back(r);
    }
    if (code) return code;   /* supervise's failure, reported; the command is gone */
    if (S->exec_err) {
        if (S->exec_step == 0) {
            fprintf(stderr, "%s: prctl(PR_SET_PDEATHSIG): %s\n", prog, strerror(S->exec_err));
            return EX_SOFTWARE;
        }
        fprintf(stderr, "%s: %s: %s%s\n", prog, x->cmdname, S->exec_step == 2 ? "cannot start it: " : "",
                strerror(S->exec_err));
        /* 127: not found; 126: found but not runnable; the exec itself failing is ours */
        return S->exec_err == ENOENT ? 127
               : (S->exec_err == EAGAIN || S->exec_err == ENOMEM || S->exec_step == 2) ? EX_SOFTWARE : 126;
    }
    if (S->lost_running || S->watchdog) {
        /* 75 means this only: baton stopped the command because the lock
         * was lost (or could not be confirmed in time) */
        return EX_LOST;
    }
    if (!S->exited) {
        fprintf(stderr, "%s: %s: the command's exit status was not reported\n", prog, x->name);
        return EX_SOFTWARE;
    }
    int lost_late = S->lost_after || rc == BATON_ELOST || (r->pm && rc == BATON_ENOTOWNER) ||
                    (r->el && rc == BATON_ENOTHELD) || (r->g && rc == BATON_ENOTHELD);
    code = WIFSIGNALED(S->status) ? 128 + WTERMSIG(S->status) : WEXITSTATUS(S->status);
    if (lost_late) {
        /* It ended on its own: its status is the truth about its work.
         * The loss is worth knowing (what it wrote may have raced a
         * newer holder), and --lost-exit-code makes it a failure. */
        fprintf(stderr, "%s: warning: %s: the %s was found lost after the command ended; "
                "keeping its exit status %d%s\n", prog, x->name,
                r->el ? "leadership" : r->g ? "membership" : r->q ? "item's lock" : "lock", code,
                r->q ? " (the item went back to the queue)" : "");
        if (x->lost_code >= 0 && code == 0) code = x->lost_code;
    } else if (rc) {
        cli_report("release", rc);
    }
    return code;
}

/* Whatever run_main's steps left: the shim (if the command never started),
 * descriptors, memory, the engine's objects. */
static void run_free(run_ctx *x)
{
    sup *S = &x->S;

    if (S->shim > 0) {
        /* never started the command: closing our end sends the shim away */
        if (S->ctl >= 0) close(S->ctl);
        S->ctl = -1;
        while (waitpid(S->shim, NULL, 0) < 0 && errno == EINTR) {}
    }
    if (S->ctl >= 0) close(S->ctl);
    if (S->rep >= 0) close(S->rep);
    free(x->shv);
    cli_blob_free(x->blob, x->blob_len);
    free(x->child_uri);
    cli_secret_free(x->child_pw);
    free(x->name_owned);
    free(x->r.msg);
    if (x->rw) baton_rwlock_free(x->rw);
    else baton_lock_free(x->r.l);
    baton_permits_free(x->r.pm);
    baton_election_free(x->r.el);
    baton_group_free(x->r.g);
    baton_queue_item_free(x->r.it);
    baton_queue_free(x->r.q);
    if (x->item_fd >= 0) close(x->item_fd);
    baton_client_close(x->c);
    if (x->r.sfd >= 0) close(x->r.sfd);
    for (int i = 0; i < 2; i++) {
        if (ev_pipe[i] >= 0) close(ev_pipe[i]);
        ev_pipe[i] = -1;
    }
}

/* baton run and baton elect: one supervisor, two ways of holding. */
/* run_ctx's defaults */
static void run_init(run_ctx *x)
{
    memset(x, 0, sizeof *x);
    x->wait_s = -1;
    x->lease_s = 30;
    x->kill_after = 10;
    x->mode = M_PLAIN;
    x->busy_code = EX_BUSY_DEFAULT;
    x->lost_code = -1;
    x->lo_opts = (baton_lock_options)BATON_LOCK_OPTIONS_INIT;
    x->sh_argv[0] = "sh";
    x->sh_argv[1] = "-c";
    x->S.shim = x->S.ctl = x->S.rep = -1;
    x->r.sfd = -1;
    x->r.shim_ctl = -1;
    x->item_fd = -1;
}

/* From the options read to the command's end: the exit code. */
static int run_steps(run_ctx *x)
{
    int code;

    x->r.name = x->name;
    /* within [50, UINT32_MAX] by cli_secs */
    x->r.lease_ms = (uint32_t)fmin(llround(x->lease_s * 1000), (double)UINT32_MAX);
    /* at most 1e12 ms: no overflow here, and the core saturates its deadlines */
    x->r.wait_ms = x->nowait || x->wait_s == 0 ? 0 : x->wait_s < 0 ? -1 : (int64_t)(x->wait_s * 1000);

    if ((code = run_signals(x)) == RUN_GO && (code = run_fork_shim(x)) == RUN_GO && (code = run_open(x)) == RUN_GO &&
        (code = run_acquire(x)) == RUN_GO && (code = run_go(x)) == RUN_GO) {
        run_keep(x);
        code = supervise(&x->r, &x->S);
        x->S.shim = -1;   /* done (and exiting), or reaped */
        code = run_result(x, code);
    }
    run_free(x);
    return code;
}

static int run_main(int argc, char **argv, int elect)
{
    run_ctx ctx, *x = &ctx;
    int code;

    run_init(x);
    x->elect = elect;
    x->cmdn = elect ? "elect" : "run";
    x->argc = argc;
    x->argv = argv;
    if ((code = run_options(x)) != RUN_GO || (code = run_operands(x)) != RUN_GO) return code;
    return run_steps(x);
}

int cli_run_hold(const cli_hold_spec *h)
{
    run_ctx ctx, *x = &ctx;

    run_init(x);
    x->hold = h;
    x->cmdn = h->cmdn;
    x->uri = h->uri;
    x->name = h->name;
    x->wait_s = h->kind == CLI_HOLD_TAKE ? h->wait_s : 0;
    x->lease_s = h->lease_s;
    x->kill_after = h->kill_after;
    x->verbose = h->verbose;
    x->busy_code = h->busy_code;
    /* COMMAND ARG... from argv[0] (run_fork_shim reads them from optind) */
    x->argc = h->argc;
    x->argv = h->argv;
    optind = 0;
    return run_steps(x);
}


static int run_main_free(int argc, char **argv, int elect)
{
    int code = run_main(argc, argv, elect);
    free(uri_owned);
    uri_owned = NULL;
    return code;
}

int cli_run(int argc, char **argv) { return run_main_free(argc, argv, 0); }
int cli_elect(int argc, char **argv) { return run_main_free(argc, argv, 1); }
