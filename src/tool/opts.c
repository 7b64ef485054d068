/* Option parsing for baton's commands: getopt_long underneath, with the
 * messages of flock(1) and the GNU tools ("unrecognized option '--frob'",
 * then "Try 'baton run --help' for more information."), options named as
 * the user typed them. */
#include "tool.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *const cli_prog = "baton";

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s%s%s: ", cli_prog, cmd ? " " : "", cmd ? cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s%s%s --help' for more information.\n", cli_prog, cmd ? " " : "", cmd ? cmd : "");
    return EX_USAGE;
}

/* cli_usage_error for cli_next: reports, returns CLI_BAD */
#define bad(...) (cli_usage_error(__VA_ARGS__), CLI_BAD)

/* "-5", "-12": an operand (sem add -2), never an option (no option is a digit). */
static int is_negative_number(const char *a)
{
    if (a[0] != '-' || !a[1]) return 0;
    for (const char *p = a + 1; *p; p++)
        if (!isdigit((unsigned char)*p)) return 0;
    return 1;
}

/* The element as typed, up to any '=': "--timeout" of "--timeout=5". */
static void typed_long(cli_opts *o, const char *elem)
{
    size_t n = strcspn(elem, "=");
    if (n >= sizeof o->name) n = sizeof o->name - 1;
    memcpy(o->name, elem, n);
    o->name[n] = 0;
}

/* An unknown or ambiguous long option: which, and why. The messages quote
 * the element as typed, whole (o->name may have cut a long one). */
static int bad_long(cli_opts *o, const char *elem)
{
    const char *typed = elem + 2;
    size_t n = strcspn(typed, "="), cap = 0;
    char *list = NULL;
    FILE *f = open_memstream(&list, &cap);
    int matches = 0, last_val = 0, rc;

    typed_long(o, elem);
    for (const struct option *p = o->lo; p && p->name; p++) {
        if (strncmp(p->name, typed, n)) continue;
        if (matches && p->val == last_val) continue;   /* two spellings of one option */
        if (f) fprintf(f, "%s--%s", matches ? ", " : "", p->name);
        last_val = p->val;
        matches++;
    }
    if (f) fclose(f);
    if (matches > 1) rc = bad(o->cmd, "option '%.*s' is ambiguous (%s)", (int)(n + 2), elem, list ? list : "");
    else rc = bad(o->cmd, "unrecognized option '%.*s'", (int)(n + 2), elem);
    free(list);
    return rc;
}

int cli_next(cli_opts *o)
{
    int c, before, idx = -1;

    if (!o->started) {
        snprintf(o->shorts_buf, sizeof o->shorts_buf, "+:%s", o->shorts);
        optind = 1;
        opterr = 0;
        o->started = 1;
    }
    o->arg = NULL;
    o->name[0] = 0;
    if (o->permute && !o->mid) {
        for (;;) {
            const char *a;
            if (optind >= o->argc) return CLI_END;
            a = o->argv[optind];
            if (o->only_ops || a[0] != '-' || !a[1] || is_negative_number(a)) {
                o->arg = a;
                optind++;
                return CLI_OPERAND;
            }
            if (!strcmp(a, "--")) {
                o->only_ops = 1;
                optind++;
                continue;
            }
            break;
        }
    }
    before = optind;
    c = getopt_long(o->argc, o->argv, o->shorts_buf, o->lo, &idx);
    /* a short option with more letters after it in the same word ("-nx"):
     * getopt goes on inside that word next time */
    o->mid = c > 0 && c < 0x100 && c != '?' && c != ':' && optind == before;
    if (c == -1) return CLI_END;
    if (c == ':') {
        if (optopt > 0 && optopt < 0x100)
            return bad(o->cmd, "option requires an argument -- '%c'", optopt);
        typed_long(o, o->argv[optind - 1]);
        return bad(o->cmd, "option '%.*s' requires an argument", (int)strcspn(o->argv[optind - 1], "="),
                   o->argv[optind - 1]);
    }
    if (c == '?') {
        if (optopt > 0 && optopt < 0x100) {
            if (isprint(optopt)) return bad(o->cmd, "invalid option -- '%c'", optopt);
            return bad(o->cmd, "invalid option -- '\\x%02x'", optopt);
        }
        if (optopt >= 0x100) {
            typed_long(o, o->argv[optind - 1]);
            return bad(o->cmd, "option '%.*s' doesn't allow an argument", (int)strcspn(o->argv[optind - 1], "="),
                       o->argv[optind - 1]);
        }
        return bad_long(o, o->argv[optind - 1]);
    }
    o->arg = optarg;
    if (c >= 0x100 && idx >= 0) {
        snprintf(o->name, sizeof o->name, "--%s", o->lo[idx].name);
        if (c < CLI_LONG_ONLY) c &= 0xff;
    } else {
        snprintf(o->name, sizeof o->name, "-%c", c);
    }
    return c;
}

int cli_secs(const char *cmd, const char *name, const char *s, double lo, double hi, const char *why, double *out)
{
    char *end;
    double v;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        return cli_usage_error(cmd, "%s: bad number of seconds '%s' (want %g to %.15g%s%s)", name, s, lo, hi,
                               why ? ": " : "", why ? why : "");
    }
    *out = v;
    return 0;
}

int cli_int(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    long long v;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}
