/*
 * The URI parser (src/core/uri.c, baton__uri_parse): any bytes, and for a
 * URI it accepts, what its result promises:
 *   - the scheme is lower case, hosts[0] is host/port, ports are 1..65535
 *     (0 = none), no decoded host is empty;
 *   - baton_uri_get finds every option (the last one of a repeated name);
 *   - the redacted form (what errors and baton_client_uri show) is itself a
 *     URI that parses to the same scheme, user, hosts, path and options,
 *     without a password.
 * A broken promise aborts (the fuzzer's crash).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

#define EXPECT(c) do { if (!(c)) { fprintf(stderr, "fuzz_uri: %s:%d: %s\n", __FILE__, __LINE__, #c); abort(); } } while (0)

static int same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    baton_uri *u = NULL, *r = NULL;
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;      /* an embedded NUL ends the text, as it would for a caller */
    if (baton__uri_parse(text, &u)) {
        EXPECT(u == NULL);
        EXPECT(baton_error_last()->code != 0 && baton_error_last()->message);
        goto out;
    }
    EXPECT(u && u->scheme && *u->scheme && u->path && u->redacted);
    for (const char *c = u->scheme; *c; c++) EXPECT(!(*c >= 'A' && *c <= 'Z'));
    EXPECT(u->nhosts ? u->host == u->hosts[0].host && u->port == u->hosts[0].port : !u->host && !u->port);
    for (size_t i = 0; i < u->nhosts; i++) {
        EXPECT(u->hosts[i].host && *u->hosts[i].host);
        EXPECT(u->hosts[i].port >= 0 && u->hosts[i].port <= 65535);
    }
    for (size_t i = 0; i < u->nparams; i++) {
        const char *v = baton_uri_get(u, u->params[i].key);
        EXPECT(u->params[i].key && *u->params[i].key && u->params[i].value && v);
        for (size_t k = i + 1; k < u->nparams; k++)
            if (!strcmp(u->params[k].key, u->params[i].key)) v = NULL;
        EXPECT(!v || v == u->params[i].value);   /* the last of a repeated name */
    }
    if (u->password) EXPECT(strlen(u->redacted) < strlen(text));
    else EXPECT(!strcmp(u->redacted, text));
    if (baton__uri_parse(u->redacted, &r)) {
        fprintf(stderr, "fuzz_uri: the redacted form of a URI does not parse: %s\n", baton_error_last()->message);
        abort();
    }
    EXPECT(!r->password && !strcmp(r->redacted, u->redacted));
    EXPECT(same(r->scheme, u->scheme) && same(r->user, u->user) && same(r->path, u->path));
    EXPECT(r->nhosts == u->nhosts && r->nparams == u->nparams);
    for (size_t i = 0; i < u->nhosts; i++)
        EXPECT(same(r->hosts[i].host, u->hosts[i].host) && r->hosts[i].port == u->hosts[i].port);
    for (size_t i = 0; i < u->nparams; i++)
        EXPECT(same(r->params[i].key, u->params[i].key) && same(r->params[i].value, u->params[i].value));
out:
    baton__uri_free(u);
    baton__uri_free(r);
    free(text);
    return 0;
}
