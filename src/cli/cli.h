/* baton(1): what the CLI's files share. The CLI uses the public API only. */
#ifndef BATON_CLI_H
#define BATON_CLI_H

#include <baton.h>
#include <getopt.h>
#include <stdio.h>

#define EX_BUSY_DEFAULT 1
#define EX_USAGE 64
#define EX_UNAVAILABLE 69
#define EX_IOERR 74        /* the lock store is in a state baton refuses (a planted file, an I/O error) */
#define EX_SOFTWARE 70
#define EX_LOST 75
#define EX_FENCED 65       /* baton fence: a newer fence was seen (BATON_ESTALE) */

extern const char *const cli_prog;   /* "baton" */

/* ---- options (opts.c) ---------------------------------------------------
 *
 * A long option that is another spelling of a short one has the value
 * CLI_LONG(c); cli_next() returns c for both, and names the option as it was
 * typed ("-w" or "--timeout") in messages. Long-only options use values from
 * CLI_LONG_ONLY up. */
#define CLI_LONG(c) (0x100 | (c))
#define CLI_LONG_ONLY 0x200
#define CLI_OPERAND (-2)
#define CLI_END (-1)
#define CLI_BAD (-3)

typedef struct {
    int argc;
    char **argv;
    const char *cmd;            /* "run", "status", ...: for messages */
    const char *shorts;         /* getopt's short options, without a leading "+:" */
    const struct option *lo;
    /* 0: options end at the first operand (baton run: what follows NAME is
     * the command's). 1: options may come between operands; "--" ends
     * them, and a negative number ("-2") is an operand, not an option. */
    int permute;
    /* out: */
    const char *arg;            /* the option's argument, or the operand */
    char name[64];              /* the option as typed: "-w" or "--timeout" */
    /* private */
    int started, mid, only_ops;
    char shorts_buf[64];
} cli_opts;

/* The next option (its short letter, or its CLI_LONG_ONLY value), an
 * operand (CLI_OPERAND, in permute mode), CLI_END, or CLI_BAD after an
 * unknown option or a missing argument, which it has reported (with the
 * "Try 'baton CMD --help'" line). In non-permute mode, optind is the first
 * operand after CLI_END. */
int cli_next(cli_opts *o);

/* Reports a usage error of "baton CMD" in one line, then the Try line;
 * returns EX_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Seconds in [lo, hi] (fractions allowed): 0, or a usage error reported for
 * option NAME (as typed), with the limits and WHY (may be NULL), and EX_USAGE. */
int cli_secs(const char *cmd, const char *name, const char *s, double lo, double hi, const char *why, double *out);
/* A whole number in [lo, hi]: 0, or -1 (the caller reports). */
int cli_int(const char *s, long long lo, long long hi, long long *out);

/* ---- common (main.c) ----------------------------------------------------- */
int cli_exit_for(int rc);
void cli_report(const char *what, int rc);
const char *cli_default_uri(const char *u);

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

/* ---- commands ------------------------------------------------------------- */
int cli_run(int argc, char **argv);
void cli_usage_run(FILE *f);
int cli_elect(int argc, char **argv);
void cli_usage_elect(FILE *f);
int baton__cli_bench(int argc, char **argv);
int baton__cli_check(int argc, char **argv);
int cli_fence(int argc, char **argv);
int cli_hold(int argc, char **argv);
void cli_usage_hold(FILE *f);
int cli_release(int argc, char **argv);
/* baton list / baton unlock --force (admin.c). */
int cli_list(int argc, char **argv);
int cli_unlock(int argc, char **argv);
/* baton engines (engines.c) */
int cli_engines(int argc, char **argv);
void cli_usage_fence(FILE *f);

#endif
