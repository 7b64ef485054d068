/* Keeping passwords out of sight: a URI given with -u has its password
 * overwritten in our argv as soon as it is read (what mysql(1) does), so
 * /proc/PID/cmdline and ps show "redis://:xxxxxx@host" for the rest of the
 * run; --uri-file FILE and $BATON_URI keep it out of argv altogether. */
#include "cli.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Overwrites with 'x' the password of every "user:password@" in the URI's
 * authority (several hosts may each carry one) and the value of a
 * "password=" query parameter. */
static void scrub(char *u)
{
    char *a = strstr(u, "://"), *end, *q;
    if (a) {
        a += 3;
        end = a + strcspn(a, "/?#");
        for (char *seg = a; seg < end;) {
            char *segend = seg;
            char *at = NULL, *colon = NULL;
            while (segend < end && *segend != ',') segend++;
            for (char *p = seg; p < segend; p++) {
                if (*p == '@') at = p;
            }
            if (at) {
                for (char *p = seg; p < at; p++) {
                    if (*p == ':') { colon = p; break; }
                }
                if (colon)
                    for (char *p = colon + 1; p < at; p++) *p = 'x';
            }
            seg = segend < end ? segend + 1 : end;
        }
    }
    if ((q = strchr(u, '?'))) {
        for (char *p = q; (p = strstr(p, "password=")); ) {
            if (p[-1] != '?' && p[-1] != '&') { p++; continue; }
            p += 9;
            while (*p && *p != '&' && *p != '#') *p++ = 'x';
        }
    }
}

char *cli_uri_arg(const char *arg)
{
    char *copy = strdup(arg);
    if (!copy) {
        fprintf(stderr, "%s: out of memory\n", cli_prog);
        return NULL;
    }
    /* arg points into our argv (writable, and what /proc/PID/cmdline reads) */
    scrub((char *)arg);
    return copy;
}

char *cli_read_uri_file(const char *cmd, const char *path)
{
    FILE *f = fopen(path, "re");
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    if (!f) {
        cli_usage_error(cmd, "--uri-file %s: %s", path, strerror(errno));
        return NULL;
    }
    n = getline(&line, &cap, f);
    fclose(f);
    if (n <= 0) {
        free(line);
        cli_usage_error(cmd, "--uri-file %s: empty (want the URI on its first line)", path);
        return NULL;
    }
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ')) line[--n] = 0;
    return line;
}

/* ---- lock names ----------------------------------------------------------- */

char *cli_lock_name(baton_client *c, const char *name)
{
    char cwd[4096];
    size_t n;
    char *out;
    if (strcmp(baton_client_backend(c), "file") || (strncmp(name, "./", 2) && strncmp(name, "../", 3)))
        return strdup(name);
    if (!getcwd(cwd, sizeof cwd)) {
        fprintf(stderr, "%s: %s: the current directory: %s\n", cli_prog, name, strerror(errno));
        return NULL;
    }
    n = strlen(cwd) + strlen(name) + 2;
    if ((out = malloc(n))) snprintf(out, n, "%s%s%s", cwd, cwd[1] ? "/" : "", name);
    return out;
}
