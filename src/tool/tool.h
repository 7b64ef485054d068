/*
 * What the commands of baton(1) share: the CLI (src/cli), `baton bench`
 * (src/bench) and `baton check` (src/check) each use this library and none
 * calls into another (src/cli's main() only dispatches to bench's and
 * check's entry points). The cli_ prefix says "command line", not src/cli.
 *
 *   opts.c    option parsing with flock(1)'s and the GNU tools' messages;
 *             numbers and seconds from arguments
 *   report.c  exit codes for BATON_E* codes, error reports, the default URI
 *   stats.c   sorting and percentiles of samples
 *   svg.c     text into an SVG document
 *
 * Times come from the library's one monotonic clock (util/clock.h).
 */
#ifndef BATON_TOOL_H
#define BATON_TOOL_H

#include "util/clock.h"

#include <baton.h>
#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- exit codes (sysexits.h's numbers, as flock(1)) ---------------------- */
#define EX_BUSY_DEFAULT 1
#define EX_USAGE 64        /* what the user asked wrong: a bad URI, an option the engine lacks */
#define EX_UNAVAILABLE 69  /* the engine cannot be reached or refused us */
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

/* ---- reports (report.c) -------------------------------------------------- */

/* The exit code for a BATON_E* code: 64 usage or not supported, 69
 * unreachable or refused, 74 the lock store refused, 70 the rest. */
int cli_exit_for(int rc);
/* "baton: WHAT: the error's message" on stderr (the library's message for
 * RC when it has one, else baton_strerror(RC)). */
void cli_report(const char *what, int rc);
/* U, else $BATON_URI when set and not empty, else NULL (the file engine). */
const char *cli_default_uri(const char *u);

/* ---- samples (stats.c) ------------------------------------------------------ */

/* qsort order of doubles. */
int cmp_d(const void *a, const void *b);
/* The P quantile (0..1) of V[0..N), sorted; 0 when empty. */
double pct(const double *v, size_t n, double p);

/* ---- clocks --------------------------------------------------------------- */

/* The monotonic clock (baton_now_ns) in ns and in seconds. */
static inline int64_t now_ns(void) { return baton_now_ns(); }
static inline double now_s(void) { return baton__now_s(); }

/* ---- svg.c ---------------------------------------------------------------- */

/* S into an SVG document, its markup characters escaped. */
void svg_text(FILE *f, const char *s);

#endif
