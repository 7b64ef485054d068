/* The engines' descriptions (baton_engines) against their tables and the
 * core's option parser: every built engine's table provides exactly the
 * primitives and behaviour its description says (the docs are made from the
 * description); a URI option that an engine does not take, or a bad value,
 * is refused before the engine runs, naming the option. No server needed: an
 * option error comes before any connection. */
#include <baton.h>

#include <stdio.h>
#include <string.h>

#include "../harness.h"
#include "core/internal.h"

static void expect_msg(const char *uri, int want, const char *must_say)
{
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    const char *m = rc ? baton_error_last()->message : "";
    if (rc != want || (must_say && !strstr(m ? m : "", must_say)))
        fprintf(stderr, "   %s: %d (%s): %s\n", uri, rc, baton_strerror(rc), m ? m : "");
    CHECK_RC(rc, want);
    if (must_say) CHECK(m && strstr(m, must_say));
    if (c) baton_client_close(c);
}

/* Every scheme resolves to its engine, and a built engine's table agrees
 * with its description (baton__registry_find checks it). */
static void test_tables_match_descriptions(void)
{
    size_t n;
    const baton_engine_info *const *es = baton_engines(&n);
    CHECK(n >= 8);
    for (size_t i = 0; i < n; i++) {
        const baton_engine_info *e = es[i];
        CHECK(e->name && e->summary && e->uri && e->schemes && e->schemes[0]);
        CHECK(baton_engine_find(e->name) == e);
        CHECK(e->built || (e->why_not && *e->why_not));
        CHECK(e->primitives & BATON_PRIM_LOCK);
        for (const char *const *s = e->schemes; *s; s++) {
            const baton_backend *b = NULL;
            int rc = baton__registry_find(*s, &b);
            CHECK(baton_engine_find(*s) == e);
            if (e->built) {
                if (rc) fprintf(stderr, "   %s: %s\n", *s, baton_error_last()->message);
                CHECK_RC(rc, 0);
                if (!rc) CHECK(baton__backend_prims(b) == e->primitives);
            } else {
                CHECK_RC(rc, BATON_EDISABLED);
                CHECK(strstr(baton_error_last()->message, e->why_not) != NULL);
            }
        }
        for (size_t k = 0; e->options && e->options[k].name; k++) {
            const baton_engine_option *o = &e->options[k];
            CHECK(o->type && o->help && *o->help);
            if (!strcmp(o->type, "enum")) CHECK(o->choices && o->choices[0]);
            if (!strcmp(o->type, "int") || !strcmp(o->type, "ms")) CHECK(o->min <= o->max);
        }
    }
    CHECK(baton_engine_find("nosuch") == NULL);
    CHECK(baton_engine_find(NULL) == NULL);
}

/* A table that disagrees with its description is refused, not used. */
static void test_disagreeing_table_refused(void)
{
    const baton_backend *b = NULL;
    baton_backend copy;
    baton_lock_methods lm;
    CHECK_RC(baton__registry_find("file", &b), 0);
    if (!b) return;
    copy = *b;
    copy.version = BATON_BACKEND_VERSION + 1;
    CHECK_RC(baton__backend_check(&copy, b->info), BATON_EINVAL);
    copy = *b;
    copy.sem = NULL; /* the description says the file engine has semaphores */
    CHECK_RC(baton__backend_check(&copy, b->info), BATON_EINVAL);
    CHECK(strstr(baton_error_last()->message, "description") != NULL);
    copy = *b;
    lm = *b->lock;
    lm.acquire = NULL;
    copy.lock = &lm;
    CHECK_RC(baton__backend_check(&copy, b->info), BATON_EINVAL);
    copy = *b;
    copy.caps |= BATON_CAP_LEASE;
    CHECK_RC(baton__backend_check(&copy, b->info), BATON_EINVAL);
}

/* The core's parser, on every built engine: an unknown option, a value out
 * of range, a bad enum, an option of another scheme, an option twice. */
static void test_options_refused(void)
{
    size_t n;
    const baton_engine_info *const *es = baton_engines(&n);
    char uri[512];
    for (size_t i = 0; i < n; i++) {
        const baton_engine_info *e = es[i];
        const char *auth = !strcmp(e->name, "file") || !strcmp(e->name, "sqlite") ? "" : "127.0.0.1:1";
        const char *path = !strcmp(e->name, "file") ? "/tmp" : !strcmp(e->name, "sqlite") ? "/tmp/x.db" : "/d";
        if (!e->built) continue;
        snprintf(uri, sizeof uri, "%s://%s%s?no_such_option=1", e->schemes[0], auth, path);
        expect_msg(uri, BATON_EINVAL, "unknown option 'no_such_option'");
        for (size_t k = 0; e->options && e->options[k].name; k++) {
            const baton_engine_option *o = &e->options[k];
            char sch[32];
            /* value checks on a scheme the option applies to */
            snprintf(sch, sizeof sch, "%s", o->schemes ? o->schemes : e->schemes[0]);
            sch[strcspn(sch, " ")] = 0;
            if (!strcmp(o->type, "int") || !strcmp(o->type, "ms")) {
                snprintf(uri, sizeof uri, "%s://%s%s?%s=%lld", sch, auth, path, o->name, o->max + 1);
                expect_msg(uri, BATON_EINVAL, o->name);
                snprintf(uri, sizeof uri, "%s://%s%s?%s=12x", sch, auth, path, o->name);
                expect_msg(uri, BATON_EINVAL, "want a whole number");
            } else if (!strcmp(o->type, "enum")) {
                snprintf(uri, sizeof uri, "%s://%s%s?%s=nonsense", sch, auth, path, o->name);
                expect_msg(uri, BATON_EINVAL, "want one of");
            } else if (!strcmp(o->type, "bool")) {
                snprintf(uri, sizeof uri, "%s://%s%s?%s=maybe", sch, auth, path, o->name);
                expect_msg(uri, BATON_EINVAL, "want 0 or 1");
            }
            if (o->schemes && !strstr(o->schemes, e->schemes[0])) {
                snprintf(uri, sizeof uri, "%s://%s%s?%s=/x", e->schemes[0], auth, path, o->name);
                expect_msg(uri, BATON_EINVAL, "applies to");
            }
        }
        if (e->options && e->options[0].name) {
            const baton_engine_option *o = &e->options[0];
            const char *v = o->choices ? o->choices[0] : o->def ? o->def : "1";
            snprintf(uri, sizeof uri, "%s://%s%s?%s=%s&%s=%s", e->schemes[0], auth, path, o->name, v, o->name, v);
            expect_msg(uri, BATON_EINVAL, "given twice");
        }
    }
}

static char g_log[2048];
static void capture(int level, const char *msg, void *p)
{
    (void)p;
    if (level == BATON_LOG_WARN) snprintf(g_log + strlen(g_log), sizeof g_log - strlen(g_log), "%s\n", msg);
}

/* An option given where its spec says it has no effect warns (never
 * silence); given where it is used, it does not. Every built engine's
 * options with needs, on an unreachable address (the warning comes first). */
static void test_unused_option_warns(void)
{
    size_t n;
    const baton_engine_info *const *es = baton_engines(&n);
    char uri[512], want[256];
    int seen = 0;
    baton_log_set(capture, NULL);
    for (size_t i = 0; i < n; i++) {
        const baton_engine_info *e = es[i];
        if (!e->built) continue;
        for (size_t k = 0; e->options && e->options[k].name; k++) {
            const baton_engine_option *o = &e->options[k];
            baton_client *c = NULL;
            char first[64];
            if (!o->needs) continue;
            seen++;
            snprintf(want, sizeof want, "option '%s' has no effect here", o->name);
            g_log[0] = 0;
            snprintf(uri, sizeof uri, "%s://127.0.0.1:1/0?%s=%s", e->schemes[0], o->name, o->def ? o->def : "1");
            if (!baton_client_open(&c, uri, NULL)) baton_client_close(c);
            if (!strstr(g_log, want)) fprintf(stderr, "   %s: logged '%s'\n", uri, g_log);
            CHECK(strstr(g_log, want) != NULL);
            /* with its first condition met: no warning */
            snprintf(first, sizeof first, "%.*s", (int)strcspn(o->needs, " "), o->needs);
            g_log[0] = 0;
            snprintf(uri, sizeof uri, "%s://127.0.0.1:1/0?%s=%s&%s%s", e->schemes[0], o->name, o->def ? o->def : "1",
                     first, strchr(first, '=') ? "" : "=1");
            c = NULL;
            if (!baton_client_open(&c, uri, NULL)) baton_client_close(c);
            if (strstr(g_log, want)) fprintf(stderr, "   %s: logged '%s'\n", uri, g_log);
            CHECK(strstr(g_log, want) == NULL);
        }
    }
    baton_log_set(NULL, NULL);
    if (es && baton_engine_find("redis") && baton_engine_find("redis")->built) CHECK(seen > 0);
}

/* A version 1 options struct is read at version 1's size. */
static void test_versioned_copy(void)
{
    baton_client_options o = BATON_CLIENT_OPTIONS_INIT;
    baton_client *c = NULL;
    o.version = 0;
    CHECK_RC(baton_client_open(&c, "file:///tmp", &o), BATON_EINVAL);
    o.version = BATON_CLIENT_OPTIONS_VERSION + 1;
    CHECK_RC(baton_client_open(&c, "file:///tmp", &o), BATON_EINVAL);
    o.version = BATON_CLIENT_OPTIONS_VERSION;
    CHECK_RC(baton_client_open(&c, NULL, &o), 0); /* the default directory */
    if (c) baton_client_close(c);
}

int main(void)
{
    RUN(test_tables_match_descriptions);
    RUN(test_disagreeing_table_refused);
    RUN(test_options_refused);
    RUN(test_unused_option_warns);
    RUN(test_versioned_copy);
    return th_finish();
}
