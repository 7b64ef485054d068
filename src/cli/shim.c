/* baton run's shim: the process between baton and the command.
 *
 *   baton (lock, renewals, signals)
 *     └─ shim (child subreaper, watchdog; forked before baton opens its client)
 *          └─ COMMAND (its own process group / session, PDEATHSIG from the shim)
 *               └─ whatever it starts (orphans come back to the shim)
 *
 * Why a separate process: baton itself can be stopped (SIGSTOP, a debugger,
 * a frozen container) or killed -9, and then nothing in it can act. The shim
 * is forked while baton is still single-threaded (before any client exists),
 * so it may use anything libc has. It keeps the command's whole process tree:
 *  - it is PR_SET_CHILD_SUBREAPER, so every descendant whose parent dies is
 *    re-parented to it and stays a descendant; the tree is empty exactly when
 *    the shim has no child left (waitpid answers ECHILD);
 *  - a signal for the command goes to every descendant (a /proc walk) and to
 *    the command's process group when it has one of its own;
 *  - baton's end of the control pipe closing (baton died, even by kill -9)
 *    kills the tree at once;
 *  - baton pushes a watchdog deadline (monotonic) after each confirmed
 *    renewal; when it passes, baton did not keep its promise (stopped, hung)
 *    and the shim kills the tree before the lease can run out anywhere.
 * The command leads a process group of its own (unless it shares baton's,
 * in a terminal's foreground), so a group-wide SIGKILL spares the shim,
 * which must still wait for the rest. The shim blocks every signal it can
 * (a terminal's Ctrl-C reaches it in baton's group; it must not die of a
 * signal meant for the command) and gives the command the mask baton
 * started with. */
#include "cli.h"
#include "shim.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the process tree ----------------------------------------------------- */

/* The parent of PID from /proc/PID/stat, or -1. comm may hold ')' and
 * spaces: the fields start after the last ')'. */
static pid_t ppid_of(const char *pid)
{
    char path[64], buf[512], *p;
    ssize_t n;
    int fd;
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) return -1;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    if (!(p = strrchr(buf, ')'))) return -1;
    /* ") S 1234 ..." */
    if (p[1] != ' ' || !p[2] || p[3] != ' ') return -1;
    return (pid_t)strtol(p + 4, NULL, 10);
}

#define TREE_MAX 8192

int cli_tree_kill(pid_t root, pid_t pgid, int sig)
{
    static pid_t pids[TREE_MAX], pps[TREE_MAX];
    size_t n = 0;
    int hit = 0;
    DIR *d;
    struct dirent *de;

    /* the group first: one call, no race with a fork in it */
    if (pgid > 1 && kill(-pgid, sig) == 0) hit++;
    if (!(d = opendir("/proc"))) return hit;
    while ((de = readdir(d)) && n < TREE_MAX) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9') continue;
        pids[n] = (pid_t)strtol(de->d_name, NULL, 10);
        pps[n] = ppid_of(de->d_name);
        n++;
    }
    closedir(d);
    /* A descendant of root: its chain of parents reaches root. The chain is
     * followed through the table (depth bounded by its size). */
    for (size_t i = 0; i < n; i++) {
        pid_t p = pps[i];
        if (pids[i] == root) continue;
        for (size_t depth = 0; p > 1 && p != root && depth < n; depth++) {
            size_t j;
            for (j = 0; j < n && pids[j] != p; j++) {}
            p = j < n ? pps[j] : -1;
        }
        if (p == root && kill(pids[i], sig) == 0) hit++;
    }
    return hit;
}

/* ---- the shim ------------------------------------------------------------- */

static void say(int fd, char type, int32_t a, int64_t b)
{
    cli_shim_msg m;
    memset(&m, 0, sizeof m);
    m.type = type;
    m.a = a;
    m.b = b;
    /* a 16-byte write to a pipe is atomic; baton reads them whole */
    if (write(fd, &m, sizeof m) < 0) { /* baton is gone: the ctl pipe says so too */ }
}

/* Reads exactly n bytes (the pipe is blocking): 0, or -1 at EOF / error. */
static int read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t k = read(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Runs in the vfork child of the shim until exec: only async-signal-safe
 * calls, never a return. */
static _Noreturn void exec_side(cli_shim_cfg *s, volatile int *err, volatile int *step, char *const *envp)
{
    /* the command dies with the shim; its children are the shim's anyway */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
        *err = errno;
        _exit(EX_SOFTWARE);
    }
    /* a group of its own (not the shim's: a SIGKILL to the group must not
     * reach the shim, which still has to wait for the rest) */
    if (s->group != CLI_GROUP_SAME && setpgid(0, 0) != 0) {
        *err = errno;
        _exit(EX_SOFTWARE);
    }
    if (s->chld) sigaction(SIGCHLD, s->chld, NULL);
    /* the item of baton queue take (a close-on-exec memfd: the copy on 0
     * stays open) */
    if (s->stdin_fd > 0 && dup2(s->stdin_fd, 0) < 0) {
        *err = errno;
        _exit(EX_SOFTWARE);
    }
    if (s->stdin_fd == 0) fcntl(0, F_SETFD, 0);
    sigprocmask(SIG_SETMASK, s->mask, NULL);
    *step = 1;
    execvpe(s->file, s->argv, envp);
    /* a script without a #! line: what execvp does, run it with sh */
    if (errno == ENOEXEC) execve("/bin/sh", s->shv, envp);
    *err = errno;
    _exit(*err == ENOENT ? 127 : 126);
}

typedef struct {
    volatile int err, step;
} exec_result;

static pid_t start_command(cli_shim_cfg *s, char *const *envp, exec_result *x)
{
    pid_t pid = vfork();
    if (pid == 0) exec_side(s, &x->err, &x->step, envp);
    return pid;
}

/* The environment baton sent: "KEY=VAL\0KEY=VAL\0..." replacing ours. */
static char **make_env(char *blob, size_t len)
{
    extern char **environ;
    size_t have = 0, k = 0, add = 0;
    char **v;
    for (size_t i = 0; i < len; i += strlen(blob + i) + 1) add++;
    while (environ && environ[have]) have++;
    if (!(v = calloc(have + add + 1, sizeof *v))) return NULL;
    for (size_t i = 0; i < have; i++) {
        int dup = 0;
        for (size_t j = 0; j < len && !dup; j += strlen(blob + j) + 1) {
            size_t kl = strcspn(blob + j, "=");
            if (!strncmp(environ[i], blob + j, kl) && environ[i][kl] == '=') dup = 1;
        }
        if (!dup) v[k++] = environ[i];
    }
    for (size_t j = 0; j < len; j += strlen(blob + j) + 1)
        if (strchr(blob + j, '=')) v[k++] = blob + j;
    v[k] = NULL;
    return v;
}

static int poll_ms(int64_t now, int64_t deadline)
{
    int64_t ms;
    if (deadline == INT64_MAX) return -1;
    if (deadline <= now) return 0;
    ms = (deadline - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

_Noreturn void cli_shim_main(cli_shim_cfg *s)
{
    sigset_t all, chld;
    int sfd, child_done = 0, baton_gone = 0, killing = 0, child_status = 0, told = 0;
    pid_t child = -1, pgid = 0, w;
    int64_t deadline = INT64_MAX, kill_at = INT64_MAX;
    cli_shim_msg m;
    char **envp = NULL, *blob = NULL;
    exec_result x = { 0, 0 };

    /* Nothing meant for the command (our group's) may stop or kill us. */
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    /* no controlling terminal: a session of our own, which the command's
     * group joins (a terminal's hang-up cannot concern it) */
    if (s->group == CLI_GROUP_SESSION) setsid();
    if ((sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK)) < 0) _exit(EX_SOFTWARE);

    /* Wait for the go (the lock is held) or for baton to give up (EOF). */
    if (read_all(s->ctl, &m, sizeof m) || m.type != SHIM_GO) _exit(0);
    /* the go carries the blob's length and the first watchdog deadline (0 = none) */
    if (m.b > 0) deadline = m.b;
    if (m.a < 0 || m.a > (1 << 20) || !(blob = malloc((size_t)m.a + 1)) ||
        read_all(s->ctl, blob, (size_t)m.a)) _exit(EX_SOFTWARE);
    blob[m.a] = 0;
    if (!(envp = make_env(blob, (size_t)m.a))) {
        say(s->rep, SHIM_EXEC_FAILED, ENOMEM, 0);
        say(s->rep, SHIM_DONE, 0, 0);
        _exit(0);
    }
    child = start_command(s, envp, &x);
    if (child < 0 || x.err) {
        if (child > 0) while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {}
        say(s->rep, SHIM_EXEC_FAILED, child < 0 ? errno : x.err, child < 0 ? 2 : x.step);
        say(s->rep, SHIM_DONE, 0, 0);
        _exit(0);
    }
    if (s->group != CLI_GROUP_SAME) pgid = child;

    for (;;) {
        struct pollfd p[2] = { { sfd, POLLIN, 0 }, { s->ctl, POLLIN, 0 } };
        int64_t now = now_ns(), due;
        int status;

        /* reap whatever ended; the tree is empty when we have no child */
        while ((w = waitpid(-1, &status, WNOHANG)) > 0) {
            if (w == child) {
                child_done = 1;
                child_status = status;
            }
        }
        /* the usual end (the command exited, nothing left, or -o: the lock
         * is COMMAND's alone and what it left behind runs on) is said in
         * one record with the status */
        if ((w < 0 && errno == ECHILD) || (child_done && s->child_only)) break;
        if (child_done && !told) {
            say(s->rep, SHIM_EXITED, child_status, 0);
            told = 1;
        }
        if (deadline != INT64_MAX && now >= deadline && !killing) {
            /* baton has not confirmed the lease in time: it is stopped or
             * hung, and may not be able to renew it. Kill now: the lease
             * must not run out while anything of the command runs. */
            killing = 1;
            say(s->rep, SHIM_WATCHDOG, 0, 0);
        }
        if (kill_at != INT64_MAX && now >= kill_at) {
            killing = 1;
            kill_at = INT64_MAX;
        }
        if (killing) cli_tree_kill(getpid(), pgid, SIGKILL);
        due = killing ? now + 20000000 : kill_at < deadline ? kill_at : deadline;
        if (poll(p, baton_gone ? 1 : 2, poll_ms(now, due)) < 0 && errno != EINTR) {
            killing = 1;
            continue;
        }
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {}
        }
        if (!baton_gone && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            if (read_all(s->ctl, &m, sizeof m)) {
                /* baton died (or closed us off): nobody holds the lock for
                 * the command any more */
                baton_gone = 1;
                killing = 1;
                continue;
            }
            switch (m.type) {
            case SHIM_DEADLINE:
                deadline = m.b;
                break;
            case SHIM_SIGNAL:
                cli_tree_kill(getpid(), pgid, m.a);
                if (m.a == SIGKILL) killing = 1;
                else if (m.b >= 0 && kill_at == INT64_MAX) kill_at = now + m.b;
                break;
            default:
                break;
            }
        }
    }
    /* said before our exit, so that baton need not wait for our teardown */
    say(s->rep, SHIM_DONE, child_status, child_done && !told);
    _exit(0);
}
