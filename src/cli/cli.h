/* baton(1): what the CLI's files share. The CLI uses the public API, and the
 * commands' tool library (src/tool) it shares with bench and check. */
#ifndef BATON_CLI_H
#define BATON_CLI_H

#include "tool/tool.h"   /* options, exit codes, reports: shared with bench and check */

#include <baton.h>
#include <stdio.h>

/* ---- secrets (secret.c) --------------------------------------------------- */

/* A copy of the URI option's argument ARG (malloc'd; NULL, reported, when out
 * of memory); ARG itself, which lives in our argv, has its password
 * overwritten with 'x' so that /proc/PID/cmdline does not show it. */
char *cli_uri_arg(const char *arg);
/* The URI on the first line of PATH (malloc'd), or NULL with a usage error
 * of CMD reported. */
char *cli_read_uri_file(const char *cmd, const char *path);

/* NAME as the engine of C should see it (malloc'd; NULL, reported, on
 * failure): on the file engine a NAME that starts with "./" or "../" is a
 * path, like an absolute one, resolved against the current directory now
 * (flock(1) takes it so: `flock ./x` and `baton run ./x` exclude each
 * other). The library keeps such names inside its lock directory; it is
 * the command line that reads them as paths. */
char *cli_lock_name(baton_client *c, const char *name);

/* ---- the command's environment (childenv.c) ------------------------------ */

/* BATON_URI for the command: the engine's URI as a nested baton can use it.
 * No password in it; the file engine's actual directory when the URI did not
 * name one. *password is the URI's credentials for the variable the engine
 * reads, *password_var (baton_client_secret: BATON_REDIS_PASSWORD,
 * BATON_ZK_AUTH, PGPASSWORD, MYSQL_PWD), or NULL. Both malloc'd; free the
 * password with cli_secret_free. 0, or -1 when out of memory. */
int cli_child_uri(baton_client *c, const char *given, char **uri, char **password, const char **password_var);
void cli_secret_free(char *s);

/* The command's environment: ours without the variables named in keys, then
 * KEY=VAL for each non-NULL vals[i]. 0, or -1 when out of memory. */
typedef struct {
    char **env;
    size_t ours;    /* env[ours...] are ours to free */
} cli_env;
int cli_env_make(cli_env *e, const char *const *keys, const char *const *vals, size_t n);
void cli_env_free(cli_env *e);
/* "KEY=VAL\0KEY=VAL\0..." from KEY, VAL pairs ending at a NULL KEY; a NULL
 * VAL gives a bare "KEY\0" (remove it). malloc'd (*len bytes), or NULL.
 * Wipe it with cli_blob_free (it may hold a password). */
char *cli_env_blob(size_t *len, ...);
void cli_blob_free(char *b, size_t len);

/* ---- the coordination commands' options (coordopts.c) ---------------------- */
enum {
    CO_WAIT = 1 << 0,     /* -w SECS */
    CO_NOWAIT = 1 << 1,   /* -n (no wait) */
    CO_COUNT = 1 << 2,    /* -n N (a count) instead */
    CO_LEASE = 1 << 3,    /* -t SECS, --kill-after SECS */
    CO_IFVER = 1 << 4,    /* --if-version V */
    CO_CREATE = 1 << 5,   /* --create */
    CO_VERSION = 1 << 6,  /* --version */
    CO_NULL = 1 << 7,     /* -z, --null */
    CO_RAW = 1 << 8,      /* --raw */
    CO_VALUE = 1 << 9,    /* --value V */
    CO_ID = 1 << 10,      /* --id ID */
    CO_WATCH = 1 << 11,   /* --watch */
    CO_VERBOSE = 1 << 12, /* --verbose */
    CO_CMD = 1 << 13,     /* COMMAND after "--" or after the operands */
    CO_BUSY = 1 << 14     /* -E CODE: the exit code for "none" (default 1) */
};
typedef struct {
    const char *cmd;              /* "value set": for messages */
    unsigned allow;               /* CO_* */
    int maxops;                   /* operands (before COMMAND) */
    /* out */
    const char *uri;
    char *uri_owned;
    const char *ops[4];
    int nops;
    double wait_s, lease_s, kill_after;   /* -1 (forever), 30, 10 unless given */
    int nowait, create, version, null, raw, watch, verbose, have_if, busy_code;
    uint64_t if_version;
    long long count;              /* -n N (0 unless given) */
    const char *value, *id;
    char **cmdv;                  /* COMMAND ARG... (NULL: none) */
    int cmdc;
} cli_co;
/* Moves the operation (one of OPS, NULL-ended) to argv[1] when options
 * come before it ("baton value -u URI get NAME"). */
void cli_co_op_first(int argc, char **argv, const char *const *ops);
/* -1 to go on, else the exit code (-h printed USAGE: 0). */
int cli_co_parse(cli_co *o, int argc, char **argv, void (*usage)(FILE *));
void cli_co_free(cli_co *o);
/* The client of -u (else $BATON_URI, else the file engine): 0, or the exit code, reported. */
int cli_co_client(cli_co *o, baton_client **c);
/* An open of WHAT ("values", "groups", "queues") failed with RC: reported, the exit code. */
int cli_co_open_failed(baton_client *c, const char *what, const char *cmd, int rc);
/* INT, TERM, HUP: to the command of cli_co_run while it runs (we end after
 * it: cli_co_stopped() is the signal), else our end at once. */
void cli_co_signals(void);
/* All of standard input (at most MAX bytes; malloc'd): 0, or the exit code, reported. */
int cli_co_read_stdin(const char *cmd, size_t max, char **out, size_t *len);
int cli_co_stopped(void);
/* Runs ARGV with our environment plus KEYS[i]=VALS[i] (NULL removes) and IN
 * on its standard input; waits for it: its status (128+N for signal N), or
 * -1 when it could not be run (reported). IN NULL: our standard input. */
int cli_co_run(char **argv, const char *const *keys, const char *const *vals, size_t n, const void *in, size_t inlen);

/* ---- commands ------------------------------------------------------------- */
int cli_run(int argc, char **argv);
int cli_rate(int argc, char **argv);   /* rate.c */

/* What baton member and baton queue take hold while their COMMAND runs,
 * under baton run's supervisor (run.c): the process tree, signals, the
 * watchdog, and the command stopped (exit 75) when the hold is lost. */
enum { CLI_HOLD_MEMBER, CLI_HOLD_TAKE };
typedef struct {
    int kind;                /* CLI_HOLD_* */
    const char *cmdn;        /* "member", "queue take": for messages */
    const char *uri;         /* -u (NULL: $BATON_URI, else the file engine) */
    const char *name;        /* the group, or the queue */
    const char *id, *value;  /* member: its id (NULL: a random one) and value */
    double wait_s;           /* take: how long to wait for an item (-1: forever) */
    double lease_s, kill_after;
    int verbose, busy_code;
    int argc;                /* COMMAND ARG... (argv[argc] is NULL) */
    char **argv;
} cli_hold_spec;
/* Runs the command while holding what SPEC says; the exit code. take: the
 * command gets the item on its standard input; the item is done when it
 * exits 0 and goes back to the queue otherwise. */
int cli_run_hold(const cli_hold_spec *spec);

void cli_usage_run(FILE *f);
int cli_elect(int argc, char **argv);
void cli_usage_elect(FILE *f);
/* baton_election_open, its failure reported (elect.c). */
int cli_election_open(baton_election **e, baton_client *c, const char *name, const baton_election_options *o);
/* baton elect --listen (LISTEN) or --leader: the exit code (elect.c). */
int cli_elect_watch(const char *uri, const char *name, int listen, int64_t wait_ms);
int baton__cli_bench(int argc, char **argv);
int baton__cli_check(int argc, char **argv);
int cli_fence(int argc, char **argv);
int cli_hold(int argc, char **argv);
void cli_usage_hold(FILE *f);
int cli_release(int argc, char **argv);
int cli_extend(int argc, char **argv);
/* baton list / baton unlock --force (admin.c). */
int cli_list(int argc, char **argv);
int cli_unlock(int argc, char **argv);
/* baton engines (engines.c) */
int cli_engines(int argc, char **argv);
/* baton value, baton counter (value.c); member, members, barrier (group.c);
 * queue (queue.c). ARGV[0] is the command's word. */
int cli_value(int argc, char **argv);
int cli_counter(int argc, char **argv);
int cli_member(int argc, char **argv);
int cli_members(int argc, char **argv);
int cli_barrier(int argc, char **argv);
int cli_queue(int argc, char **argv);
void cli_usage_fence(FILE *f);

#endif
