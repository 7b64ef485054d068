/* baton engines [--json] [NAME]: what each engine does, read from the
 * library (baton_engines()): the one source the docs are made from
 * (scripts/gendocs.py) and checked against (tests/docs/drift). */
#include "cli.h"
#include <string.h>

static const struct { unsigned bit; const char *name; } prims[] = {
    { BATON_PRIM_LOCK, "lock" },         { BATON_PRIM_FAIR, "fair" },         { BATON_PRIM_RWLOCK, "rwlock" },
    { BATON_PRIM_SEM, "semaphore" },     { BATON_PRIM_PERMITS, "permits" },   { BATON_PRIM_LATCH, "latch" },
    { BATON_PRIM_ELECTION, "election" }, { BATON_PRIM_LIST, "list" },         { BATON_PRIM_BREAK, "force-unlock" },
    { BATON_PRIM_INFO, "status" },       { BATON_PRIM_VALUE, "value" },       { BATON_PRIM_GROUP, "group" },
    { BATON_PRIM_QUEUE, "queue" },       { BATON_PRIM_RATELIMIT, "ratelimit" },
};
static const struct { unsigned bit; const char *name; } features[] = {
    { BATON_FEATURE_LEASE, "lease" },
    { BATON_FEATURE_NOTIFY, "notify" },
    { BATON_FEATURE_FAIR, "fifo" },
    { BATON_FEATURE_SESSION, "session" },
};

static void json_str(FILE *f, const char *s)
{
    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void json_list(FILE *f, const char *const *l)
{
    fputc('[', f);
    for (size_t i = 0; l && l[i]; i++) {
        if (i) fputs(", ", f);
        json_str(f, l[i]);
    }
    fputc(']', f);
}

static void json_engine(FILE *f, const baton_engine_info *e)
{
    size_t i, k;
    fputs("  {\"name\": ", f);
    json_str(f, e->name);
    fputs(", \"schemes\": ", f);
    json_list(f, e->schemes);
    fputs(", \"built\": ", f);
    fputs(e->built ? "true" : "false", f);
    fputs(", \"why_not\": ", f);
    json_str(f, e->why_not);
    fputs(",\n   \"summary\": ", f);
    json_str(f, e->summary);
    fputs(",\n   \"uri\": ", f);
    json_str(f, e->uri);
    fputs(",\n   \"primitives\": [", f);
    for (i = k = 0; i < sizeof prims / sizeof prims[0]; i++)
        if (e->primitives & prims[i].bit) fprintf(f, "%s\"%s\"", k++ ? ", " : "", prims[i].name);
    fputs("],\n   \"features\": [", f);
    for (i = k = 0; i < sizeof features / sizeof features[0]; i++)
        if (e->features & features[i].bit) fprintf(f, "%s\"%s\"", k++ ? ", " : "", features[i].name);
    fputs("],\n   \"notes\": ", f);
    json_list(f, e->notes);
    fputs(",\n   \"options\": [", f);
    for (i = 0; e->options && e->options[i].name; i++) {
        const baton_engine_option *o = &e->options[i];
        fputs(i ? ",\n     {\"name\": " : "\n     {\"name\": ", f);
        json_str(f, o->name);
        fputs(", \"type\": ", f);
        json_str(f, o->type);
        fputs(", \"default\": ", f);
        json_str(f, o->def);
        if (!strcmp(o->type, "int") || !strcmp(o->type, "ms")) fprintf(f, ", \"min\": %lld, \"max\": %lld", o->min, o->max);
        if (o->choices) {
            fputs(", \"choices\": ", f);
            json_list(f, o->choices);
        }
        fputs(", \"schemes\": ", f);
        json_str(f, o->schemes);
        fputs(", \"alias\": ", f);
        json_str(f, o->alias);
        fputs(", \"needs\": ", f);
        json_str(f, o->needs);
        fputs(", \"help\": ", f);
        json_str(f, o->help);
        fputc('}', f);
    }
    fputs("]}", f);
}

static void text_engine(FILE *f, const baton_engine_info *e)
{
    size_t i, k;
    fprintf(f, "%s: %s\n", e->name, e->summary);
    fprintf(f, "  built:      %s%s%s\n", e->built ? "yes" : "no", e->built ? "" : " - ", e->built ? "" : e->why_not);
    fprintf(f, "  URI:        %s\n", e->uri);
    fputs("  primitives:", f);
    for (i = k = 0; i < sizeof prims / sizeof prims[0]; i++)
        if (e->primitives & prims[i].bit) fprintf(f, "%s%s", k++ ? ", " : " ", prims[i].name);
    fputs("\n  behaviour: ", f);
    for (i = k = 0; i < sizeof features / sizeof features[0]; i++)
        if (e->features & features[i].bit) fprintf(f, "%s%s", k++ ? ", " : " ", features[i].name);
    fputc('\n', f);
    for (i = 0; e->notes && e->notes[i]; i++) fprintf(f, "  note:       %s\n", e->notes[i]);
    for (i = 0; e->options && e->options[i].name; i++) {
        const baton_engine_option *o = &e->options[i];
        fprintf(f, "  ?%s=%s", o->name, o->type);
        if (o->choices) {
            fputs(" (", f);
            for (k = 0; o->choices[k]; k++) fprintf(f, "%s%s", k ? "|" : "", o->choices[k]);
            fputc(')', f);
        }
        if (!strcmp(o->type, "int") || !strcmp(o->type, "ms")) fprintf(f, " [%lld..%lld]", o->min, o->max);
        if (o->def) fprintf(f, " default %s", *o->def ? o->def : "\"\"");
        if (o->schemes) fprintf(f, " (%s:// only)", o->schemes);
        if (o->needs) fprintf(f, " (used only with %s)", o->needs);
        fprintf(f, "\n      %s\n", o->help);
    }
}

static void usage_engines(FILE *f)
{
    fprintf(f,
        "usage: baton engines [--json] [NAME]\n"
        "What every engine baton knows does (built here or not, and why): its URI,\n"
        "primitives, behaviour and URI options, read from the library itself.\n"
        "\n"
        "      --json      one JSON array (an object with NAME)\n"
        "  -h, --help      this help\n"
        "\n"
        "exit: 0, 64 usage (an unknown NAME).\n");
}

int cli_engines(int argc, char **argv)
{
    static const struct option lo[] = {
        { "json", no_argument, NULL, CLI_LONG_ONLY },
        { "help", no_argument, NULL, CLI_LONG('h') },
        { NULL, 0, NULL, 0 },
    };
    cli_opts o = { .argc = argc, .argv = argv, .cmd = "engines", .shorts = "h", .lo = lo, .permute = 1 };
    const baton_engine_info *const *all, *one = NULL;
    const char *name = NULL;
    int json = 0, c;
    size_t n;

    while ((c = cli_next(&o)) != CLI_END) {
        if (c == CLI_BAD) return EX_USAGE;
        if (c == 'h') {
            usage_engines(stdout);
            return 0;
        }
        if (c == CLI_LONG_ONLY) json = 1;
        else if (c == CLI_OPERAND) {
            if (name) return cli_usage_error("engines", "one engine name at most");
            name = o.arg;
        }
    }
    all = baton_engines(&n);
    if (name && !(one = baton_engine_find(name)))
        return cli_usage_error("engines", "no engine '%s' (baton engines lists them)", name);
    if (json && one) {
        json_engine(stdout, one);
        fputc('\n', stdout);
    } else if (json) {
        fputs("[\n", stdout);
        for (size_t i = 0; i < n; i++) {
            json_engine(stdout, all[i]);
            fputs(i + 1 < n ? ",\n" : "\n", stdout);
        }
        fputs("]\n", stdout);
    } else {
        for (size_t i = 0; i < n; i++)
            if (!one || all[i] == one) {
                if (!one && i) fputc('\n', stdout);
                text_engine(stdout, all[i]);
            }
    }
    return 0;
}
