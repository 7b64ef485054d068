/* URI options, checked once here against each engine's declarative spec
 * (baton_engine_info.options) so that no engine hand-writes a parser and
 * every option `baton engines` lists is exactly what the engine takes. */
#include "internal.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct baton_opts {
    const baton_engine_info *e;
    size_t n;
    const char **given;      /* per spec entry: the URI's value, or NULL */
};

static const baton_engine_option *spec_find(const baton_engine_info *e, const char *name, size_t *idx)
{
    for (size_t i = 0; e->options && e->options[i].name; i++)
        if (!strcmp(e->options[i].name, name) || (e->options[i].alias && !strcmp(e->options[i].alias, name))) {
            if (idx) *idx = i;
            return &e->options[i];
        }
    return NULL;
}

static int applies(const baton_engine_option *o, const char *scheme)
{
    size_t n = strlen(scheme);
    const char *p = o->schemes;
    if (!p) return 1;
    while ((p = strstr(p, scheme))) {
        if ((p == o->schemes || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return 1;
        p += n;
    }
    return 0;
}

static int parse_int(const char *v, long long *out)
{
    char *end;
    errno = 0;
    *out = strtoll(v, &end, 10);
    return errno || end == v || *end;
}

static int parse_bool(const char *v, int *out)
{
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on")) *out = 1;
    else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off")) *out = 0;
    else return 1;
    return 0;
}

static int choice_index(const baton_engine_option *o, const char *v)
{
    for (int i = 0; o->choices && o->choices[i]; i++)
        if (!strcmp(o->choices[i], v)) return i;
    return -1;
}

/* "known: a, b, c" for an error message. */
static void known_list(const baton_engine_info *e, const char *scheme, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; e->options && e->options[i].name; i++) {
        if (!applies(&e->options[i], scheme)) continue;
        int w = snprintf(buf + len, n - len, "%s%s", len ? ", " : "", e->options[i].name);
        if (w < 0 || (size_t)w >= n - len) break;
        len += (size_t)w;
    }
    if (!len) snprintf(buf, n, "none");
}

static int check_value(const baton_engine_info *e, const baton_engine_option *o, const char *v)
{
    long long x;
    int b;
    if (!strcmp(o->type, "int") || !strcmp(o->type, "ms")) {
        if (parse_int(v, &x) || x < o->min || x > o->max)
            return baton_seterr(BATON_EINVAL, 0, "%s: option %s=%s: want a whole number%s from %lld to %lld", e->name,
                                o->name, v, !strcmp(o->type, "ms") ? " of milliseconds" : "", o->min, o->max);
    } else if (!strcmp(o->type, "bool")) {
        if (parse_bool(v, &b))
            return baton_seterr(BATON_EINVAL, 0, "%s: option %s=%s: want 0 or 1", e->name, o->name, v);
    } else if (!strcmp(o->type, "enum")) {
        if (choice_index(o, v) < 0) {
            char list[256] = "";
            for (int i = 0; o->choices && o->choices[i]; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", o->choices[i]);
            return baton_seterr(BATON_EINVAL, 0, "%s: option %s=%s: want one of %s", e->name, o->name, v, list);
        }
    } else if (!strcmp(o->type, "path")) {
        if (!*v) return baton_seterr(BATON_EINVAL, 0, "%s: option %s: empty file name", e->name, o->name);
    }
    return 0;
}

/* Is COND ("name=value" or "name") true of the URI's options? */
static int cond_holds(const baton_opts *o, const baton_uri *u, const char *cond, size_t n)
{
    const char *eq = memchr(cond, '=', n);
    size_t kl = eq ? (size_t)(eq - cond) : n;
    for (size_t i = 0; i < u->nparams; i++) {
        const char *k = u->params[i].key ? u->params[i].key : "", *v = u->params[i].value ? u->params[i].value : "";
        const baton_engine_option *s = spec_find(o->e, k, NULL);
        /* match the option by its name or alias, as the URI spelled it */
        if (!s || !((strlen(s->name) == kl && !strncmp(s->name, cond, kl)) ||
                    (s->alias && strlen(s->alias) == kl && !strncmp(s->alias, cond, kl))))
            continue;
        if (!eq) return 1;
        if (strlen(v) == n - kl - 1 && !strncmp(v, eq + 1, n - kl - 1)) return 1;
    }
    return 0;
}

/* An option given where it has no effect (its spec's needs hold for none
 * of its conditions) is said, not ignored in silence. */
static void warn_unused(const baton_opts *o, const baton_uri *u)
{
    for (size_t i = 0; i < o->n; i++) {
        const char *needs = o->e->options[i].needs, *p;
        int ok = 0;
        if (!o->given[i] || !needs) continue;
        for (p = needs; *p && !ok;) {
            size_t n = strcspn(p, " ");
            if (n) ok = cond_holds(o, u, p, n);
            p += n;
            while (*p == ' ') p++;
        }
        if (!ok)
            baton_log(BATON_LOG_WARN, "%s: option '%s' has no effect here: it is used only with %s", o->e->name,
                      o->e->options[i].name, needs);
    }
}

int baton__opts_parse(const baton_engine_info *e, const baton_uri *u, baton_opts **out)
{
    baton_opts *o;
    size_t n = 0;
    char known[512];

    *out = NULL;
    while (e->options && e->options[n].name) n++;
    if (!(o = calloc(1, sizeof *o)) || !(o->given = calloc(n ? n : 1, sizeof *o->given))) {
        free(o);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    o->e = e;
    o->n = n;
    for (size_t i = 0; i < u->nparams; i++) {
        const char *k = u->params[i].key ? u->params[i].key : "", *v = u->params[i].value ? u->params[i].value : "";
        const baton_engine_option *s;
        size_t idx;
        int rc;
        if (!(s = spec_find(e, k, &idx)) || !applies(s, u->scheme)) {
            known_list(e, u->scheme, known, sizeof known);
            if (s)
                rc = baton_seterr(BATON_EINVAL, 0, "%s: option '%s' applies to %s:// only", e->name, k, s->schemes);
            else
                rc = baton_seterr(BATON_EINVAL, 0, "%s: unknown option '%s' (known on %s://: %s; `baton engines "
                                  "%s` says what each does)", e->name, k, u->scheme, known, e->name);
            baton__opts_free(o);
            return rc;
        }
        if (o->given[idx]) {
            baton__opts_free(o);
            return baton_seterr(BATON_EINVAL, 0, "%s: option '%s' given twice", e->name, s->name);
        }
        if ((rc = check_value(e, s, v))) {
            baton__opts_free(o);
            return rc;
        }
        o->given[idx] = v;
    }
    warn_unused(o, u);
    *out = o;
    return 0;
}

void baton__opts_free(baton_opts *o)
{
    if (!o) return;
    free(o->given);
    free(o);
}

static const baton_engine_option *lookup(const baton_opts *o, const char *name, size_t *idx)
{
    const baton_engine_option *s = o ? spec_find(o->e, name, idx) : NULL;
    if (!s) baton_log(BATON_LOG_ERROR, "baton: engine %s reads option '%s', which its spec lacks",
                      o ? o->e->name : "?", name);
    return s;
}

int baton_opts_given(const baton_opts *o, const char *name)
{
    size_t i;
    return lookup(o, name, &i) && o->given[i];
}

const char *baton_opts_str(const baton_opts *o, const char *name)
{
    size_t i;
    const baton_engine_option *s = lookup(o, name, &i);
    if (!s) return NULL;
    return o->given[i] ? o->given[i] : s->def;
}

int64_t baton_opts_int(const baton_opts *o, const char *name)
{
    const char *v = baton_opts_str(o, name);
    long long x;
    return v && !parse_int(v, &x) ? (int64_t)x : 0;
}

int baton_opts_bool(const baton_opts *o, const char *name)
{
    const char *v = baton_opts_str(o, name);
    int b;
    return v && !parse_bool(v, &b) ? b : 0;
}

int baton_opts_enum(const baton_opts *o, const char *name)
{
    size_t i;
    const baton_engine_option *s = lookup(o, name, &i);
    const char *v;
    int c;
    if (!s) return 0;
    v = o->given[i] ? o->given[i] : s->def;
    c = v ? choice_index(s, v) : -1;
    return c < 0 ? 0 : c;
}

int baton__opts_copy(void *dst, const void *src, const size_t *sizes, unsigned nvers, const char *what)
{
    unsigned v;
    if (!src) return 0;
    v = *(const unsigned *)src;
    if (v < 1 || v > nvers) return baton_seterr(BATON_EINVAL, 0, "%s: unknown version %u", what, v);
    memcpy(dst, src, sizes[v - 1]);
    return 0;
}
