/* baton run's shim (shim.c): the process between baton and the command. */
#ifndef BATON_CLI_SHIM_H
#define BATON_CLI_SHIM_H

#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

/* Where the command's process group is. */
enum {
    CLI_GROUP_SESSION, /* no controlling terminal: a session of its own */
    CLI_GROUP_OWN,     /* a terminal, baton in the background: a group of its own */
    CLI_GROUP_SAME     /* baton in the terminal's foreground: baton's group, so the
                          terminal's keys (Ctrl-C, Ctrl-Z) and reads reach it */
};

/* One record on either pipe: atomic, read whole. */
typedef struct {
    char type;
    char pad[3];
    int32_t a;
    int64_t b;
} cli_shim_msg;

/* baton -> shim */
#define SHIM_GO       'G'   /* a = bytes of "KEY=VAL\0..." that follow: the command's extra environment; b = the first watchdog deadline (0 = none) */
#define SHIM_DEADLINE 'D'   /* b = watchdog deadline, CLOCK_MONOTONIC ns (INT64_MAX: none) */
#define SHIM_SIGNAL   'S'   /* a = signal for the whole tree; b >= 0: SIGKILL b ns later if any is left */
/* shim -> baton */
#define SHIM_DONE        'z' /* the tree is empty (or -o: the command exited); the shim exits.
                               b = 1: a = the command's wait status (no 'x' was sent) */
#define SHIM_EXEC_FAILED 'e' /* a = errno, b = step (0 prctl, 1 exec, 2 fork) */
#define SHIM_EXITED      'x' /* a = the command's wait status */
#define SHIM_WATCHDOG    'w' /* the watchdog deadline passed: the tree is being killed */

typedef struct {
    int ctl, rep;                  /* our ends: read baton's orders, write reports */
    int group;                     /* CLI_GROUP_* */
    int child_only;                /* -o: done when the command itself exits */
    int stdin_fd;                  /* >= 0: the command's standard input (baton queue take's item) */
    const char *file;              /* what to execute: searched in PATH unless it has a '/' */
    char *const *argv;
    char *const *shv;              /* "sh" + argv, for a script without #! */
    const sigset_t *mask;          /* the mask baton started with */
    const struct sigaction *chld;  /* SIGCHLD back to SIG_IGN, when it was; else NULL */
} cli_shim_cfg;

_Noreturn void cli_shim_main(cli_shim_cfg *s);

/* Sends SIG to every descendant of ROOT (found in /proc) and to process
 * group PGID when > 1. Returns how many were signalled. */
int cli_tree_kill(pid_t root, pid_t pgid, int sig);

#endif
