/* The command's environment: BATON_LOCK, BATON_FENCE, and a BATON_URI that
 * a nested baton can use as it is. */
#include "cli.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

/* "file://" + DIR, with every byte but [A-Za-z0-9/._~-] as %XX. */
static char *file_uri(const char *dir)
{
    static const char hx[] = "0123456789ABCDEF";
    size_t n = strlen(dir);
    char *out = malloc(7 + 3 * n + 1), *p;
    if (!out) return NULL;
    p = out + 7;
    memcpy(out, "file://", 7);
    for (const unsigned char *d = (const unsigned char *)dir; *d; d++) {
        if ((*d >= 'a' && *d <= 'z') || (*d >= 'A' && *d <= 'Z') || (*d >= '0' && *d <= '9') ||
            *d == '/' || *d == '.' || *d == '_' || *d == '~' || *d == '-') {
            *p++ = (char)*d;
        } else {
            *p++ = '%';
            *p++ = hx[*d >> 4];
            *p++ = hx[*d & 15];
        }
    }
    *p = 0;
    return out;
}

/* The file engine's directory when the URI names none (what it does itself:
 * $BATON_DIR, else $XDG_RUNTIME_DIR/baton, else /tmp/baton-<uid>). The
 * engine has opened it already, so $BATON_DIR, if set, is absolute. */
static char *file_default_uri(void)
{
    const char *env;
    char *buf, *u;
    if ((env = getenv("BATON_DIR")) && *env) return file_uri(env);
    /* any length: a cut directory would name another one */
    if ((env = getenv("XDG_RUNTIME_DIR")) && env[0] == '/') {
        if (asprintf(&buf, "%s/baton", env) < 0) return NULL;
    } else if (asprintf(&buf, "/tmp/baton-%lu", (unsigned long)geteuid()) < 0) {
        return NULL;
    }
    u = file_uri(buf);
    free(buf);
    return u;
}

int cli_child_uri(baton_client *c, const char *given, char **uri, char **password, const char **password_var)
{
    const char *red = baton_client_uri(c), *backend = baton_client_backend(c);
    const char *auth, *auth_end;

    *uri = *password = NULL;
    *password_var = NULL;
    if (!given || !*given) given = "file://";
    if (!red) red = given;
    auth = strstr(given, "://");
    auth = auth ? auth + 3 : given;
    auth_end = auth + strcspn(auth, "/?");
    if (!strcmp(backend, "file")) {
        /* file://, file://localhost: no directory in it, the default one */
        const char *path = auth_end, *q = strchr(path, '?');
        size_t plen = q ? (size_t)(q - path) : strlen(path);
        *uri = plen ? strdup(red) : file_default_uri();
        return *uri ? 0 : -1;
    }
    /* The credentials go to the variable the engine reads when a URI has
     * none (the engine names it), never into the child's URI. */
    if (baton_client_secret(c, password_var, password)) return -1;
    /* The redacted URI without an empty user info: "redis://@host" (what is
     * left of "redis://:pw@host") is "redis://host". */
    if (!(*uri = strdup(red))) {
        cli_secret_free(*password);
        *password = NULL;
        return -1;
    }
    {
        char *s = strstr(*uri, "://");
        if (s && s[3] == '@') memmove(s + 3, s + 4, strlen(s + 4) + 1);
    }
    return 0;
}

void cli_secret_free(char *s)
{
    if (!s) return;
    explicit_bzero(s, strlen(s));
    free(s);
}

static int listed(const char *v, const char *const *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t k = strlen(keys[i]);
        if (!strncmp(v, keys[i], k) && v[k] == '=') return 1;
    }
    return 0;
}

int cli_env_make(cli_env *e, const char *const *keys, const char *const *vals, size_t n)
{
    size_t have = 0, k = 0;
    e->env = NULL;
    e->ours = 0;
    while (environ && environ[have]) have++;
    char **v = calloc(have + n + 1, sizeof *v);
    if (!v) return -1;
    for (size_t i = 0; i < have; i++)
        if (!listed(environ[i], keys, n)) v[k++] = environ[i];
    e->env = v;
    e->ours = k;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        if (!vals[i]) continue;
        len = strlen(keys[i]) + strlen(vals[i]) + 2;
        if (!(v[k] = malloc(len))) {
            cli_env_free(e);
            return -1;
        }
        snprintf(v[k], len, "%s=%s", keys[i], vals[i]);
        k++;
    }
    v[k] = NULL;
    return 0;
}

void cli_env_free(cli_env *e)
{
    if (!e->env) return;
    for (size_t i = e->ours; e->env[i]; i++) cli_secret_free(e->env[i]);   /* may hold a password */
    free(e->env);
    e->env = NULL;
}

char *cli_env_blob(size_t *len, ...)
{
    va_list ap;
    size_t n = 0, o = 0;
    const char *k, *v;
    char *b;

    va_start(ap, len);
    while ((k = va_arg(ap, const char *))) {
        v = va_arg(ap, const char *);
        n += strlen(k) + 1 + (v ? strlen(v) + 1 : 0);
    }
    va_end(ap);
    if (!(b = malloc(n ? n : 1))) return NULL;
    va_start(ap, len);
    while ((k = va_arg(ap, const char *))) {
        v = va_arg(ap, const char *);
        o += (size_t)sprintf(b + o, v ? "%s=%s" : "%s", k, v ? v : "") + 1;
    }
    va_end(ap);
    *len = o;
    return b;
}

void cli_blob_free(char *b, size_t len)
{
    if (!b) return;
    explicit_bzero(b, len);
    free(b);
}
