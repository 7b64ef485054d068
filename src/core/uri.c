/* URI parsing: scheme://[user[:password]@]host[:port][,host[:port]...][/path][?k=v&...] */
#include "internal.h"
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decodes [s, s+n) into a new string; NULL on bad escapes or NUL. */
static char *decode(const char *s, size_t n, int *rc)
{
    char *out = malloc(n + 1), *p = out;
    if (!out) {
        *rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            int h, l;
            if (i + 2 >= n) goto bad;
            h = hexval((unsigned char)s[i + 1]);
            l = hexval((unsigned char)s[i + 2]);
            if (h < 0 || l < 0 || (h == 0 && l == 0)) goto bad;
            *p++ = (char)(h * 16 + l);
            i += 2;
        } else {
            *p++ = s[i];
        }
    }
    *p = 0;
    return out;
bad:
    free(out);
    *rc = baton_seterr(BATON_EINVAL, 0, "URI: bad percent escape");
    return NULL;
}

void baton__uri_free(baton_uri *u)
{
    if (!u) return;
    free(u->scheme); free(u->user); free(u->password); free(u->path); free(u->redacted);
    for (size_t i = 0; i < u->nhosts; i++) free(u->hosts[i].host);
    free(u->hosts);
    for (size_t i = 0; i < u->nparams; i++) { free(u->params[i].key); free(u->params[i].value); }
    free(u->params);
    free(u);
}

const char *baton_uri_get(const baton_uri *u, const char *key)
{
    for (size_t i = u->nparams; i-- > 0;)
        if (!strcmp(u->params[i].key, key))
            return u->params[i].value;
    return NULL;
}

static int parse_port(const char *s, size_t n, int *port)
{
    long v = 0;
    if (n == 0 || n > 5) return -1;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < 1 || v > 65535) return -1;
    *port = (int)v;
    return 0;
}

static int parse_host(baton_uri *u, const char *s, size_t n)
{
    const char *colon = NULL, *hs = s;
    size_t hn = n;
    int port = 0, rc = 0;
    baton_uri_host *nh;
    if (n && s[0] == '[') {
        const char *rb = memchr(s, ']', n);
        if (!rb) return baton_seterr(BATON_EINVAL, 0, "URI: unterminated [ in host");
        hs = s + 1;
        hn = (size_t)(rb - s - 1);
        if (rb + 1 < s + n) {
            if (rb[1] != ':') return baton_seterr(BATON_EINVAL, 0, "URI: junk after ]");
            colon = rb + 1;
        }
    } else {
        colon = memchr(s, ':', n);
        if (colon) hn = (size_t)(colon - s);
    }
    if (colon && parse_port(colon + 1, (size_t)(s + n - colon - 1), &port))
        return baton_seterr(BATON_EINVAL, 0, "URI: bad port '%.*s'", (int)(s + n - colon - 1), colon + 1);
    if (hn == 0) return baton_seterr(BATON_EINVAL, 0, "URI: empty host");
    for (size_t i = 0; i < hn; i++)
        if (isspace((unsigned char)hs[i]) || hs[i] == '/' || hs[i] == '@')
            return baton_seterr(BATON_EINVAL, 0, "URI: bad character in host");
    nh = realloc(u->hosts, (u->nhosts + 1) * sizeof *nh);
    if (!nh) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    u->hosts = nh;
    nh[u->nhosts].host = decode(hs, hn, &rc);
    if (!nh[u->nhosts].host) return rc;
    nh[u->nhosts].port = port;
    u->nhosts++;
    return 0;
}

static int parse_query(baton_uri *u, const char *q)
{
    int rc = 0;
    while (*q) {
        const char *amp = strchr(q, '&'), *end = amp ? amp : q + strlen(q);
        const char *eq = memchr(q, '=', (size_t)(end - q));
        const char *kend = eq ? eq : end;
        baton_uri_param *np;
        if (end == q) { q = amp ? amp + 1 : end; continue; }
        if (kend == q) return baton_seterr(BATON_EINVAL, 0, "URI: empty option name");
        np = realloc(u->params, (u->nparams + 1) * sizeof *np);
        if (!np) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
        u->params = np;
        np[u->nparams].key = decode(q, (size_t)(kend - q), &rc);
        if (!np[u->nparams].key) return rc;
        np[u->nparams].value = eq ? decode(eq + 1, (size_t)(end - eq - 1), &rc) : strdup("");
        if (!np[u->nparams].value) {
            free(np[u->nparams].key);
            return rc ? rc : baton_seterr(BATON_ENOMEM, 0, "out of memory");
        }
        u->nparams++;
        q = amp ? amp + 1 : end;
    }
    return 0;
}

int baton__uri_parse(const char *text, baton_uri **out)
{
    baton_uri *u;
    const char *p, *auth, *auth_end, *at = NULL, *path, *query;
    int rc = 0;
    size_t n;

    *out = NULL;
    if (!text) return baton_seterr(BATON_EINVAL, 0, "URI: missing");
    for (const char *c = text; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            return baton_seterr(BATON_EINVAL, 0, "URI: control character");
    p = strstr(text, "://");
    if (!p || p == text) return baton_seterr(BATON_EINVAL, 0, "URI '%s': expected scheme://...", text);
    for (const char *c = text; c < p; c++)
        if (!(isalnum((unsigned char)*c) || *c == '+' || *c == '-' || *c == '.') || (c == text && !isalpha((unsigned char)*c)))
            return baton_seterr(BATON_EINVAL, 0, "URI: bad scheme");
    if (strchr(text, '#')) return baton_seterr(BATON_EINVAL, 0, "URI: fragments are not allowed");

    u = calloc(1, sizeof *u);
    if (!u) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    u->scheme = strndup(text, (size_t)(p - text));
    if (!u->scheme) goto nomem;
    for (char *c = u->scheme; *c; c++) *c = (char)tolower((unsigned char)*c);

    auth = p + 3;
    auth_end = auth + strcspn(auth, "/?");
    for (const char *c = auth; c < auth_end; c++)
        if (*c == '@') at = c;
    if (at) {
        const char *colon = memchr(auth, ':', (size_t)(at - auth));
        const char *uend = colon ? colon : at;
        if (uend > auth && !(u->user = decode(auth, (size_t)(uend - auth), &rc))) goto fail;
        if (colon && !(u->password = decode(colon + 1, (size_t)(at - colon - 1), &rc))) goto fail;
        auth = at + 1;
    }
    while (auth < auth_end) {
        const char *comma = memchr(auth, ',', (size_t)(auth_end - auth));
        const char *hend = comma ? comma : auth_end;
        if ((rc = parse_host(u, auth, (size_t)(hend - auth)))) goto fail;
        auth = comma ? comma + 1 : auth_end;
        if (comma && auth == auth_end) { rc = baton_seterr(BATON_EINVAL, 0, "URI: empty host"); goto fail; }
    }
    if (u->nhosts) { u->host = u->hosts[0].host; u->port = u->hosts[0].port; }

    path = auth_end;
    query = strchr(path, '?');
    n = query ? (size_t)(query - path) : strlen(path);
    if (n && path[0] == '/' && strcmp(u->scheme, "file")) { path++; n--; }
    if (!(u->path = decode(path, n, &rc))) goto fail;
    if (query && (rc = parse_query(u, query + 1))) goto fail;

    /* The redacted form: the original text without ":password". */
    if (u->password) {
        const char *colon = memchr(p + 3, ':', (size_t)(at - p - 3));
        size_t head = (size_t)(colon - text);
        u->redacted = malloc(strlen(text) + 1);
        if (!u->redacted) goto nomem;
        memcpy(u->redacted, text, head);
        /* no user: drop the '@' too ("redis://host", never "redis://@host") */
        strcpy(u->redacted + head, head == (size_t)(p + 3 - text) ? at + 1 : at);
    } else {
        u->redacted = strdup(text);
        if (!u->redacted) goto nomem;
    }
    *out = u;
    return 0;
nomem:
    rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
fail:
    /* host aliases hosts[0]; free through hosts only */
    u->host = NULL;
    baton__uri_free(u);
    return rc;
}
