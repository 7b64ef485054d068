/*
 * engine_ops for etcd: the server's own request counts from /metrics
 * (Prometheus text on the client port). grpc_server_msg_received_total counts
 * the messages each gRPC method received: one per unary call, one per
 * request on a stream (a watch created, a lease kept alive). The JSON gateway
 * is a gRPC client of its own server, so baton's requests are counted there
 * whatever the transport. Each member counts what it received: they are all
 * read and their counts reported one by one (they add up, as a quorum's do).
 */
#include "etcd_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define METRIC "grpc_server_msg_received_total{"

typedef struct {
    char op[64];
    uint64_t n;
} opcount;

/* The value of LABEL="..." in the label set that starts at P (up to '}'),
 * copied lower-cased into OUT; 0 when found. */
static int label(const char *p, const char *label, char *out, size_t n)
{
    size_t ll = strlen(label);
    const char *end = strchr(p, '}');
    if (!end) return -1;
    while (p < end) {
        if (!strncmp(p, label, ll) && p[ll] == '=' && p[ll + 1] == '"') {
            const char *v = p + ll + 2, *q = memchr(v, '"', (size_t)(end - v));
            size_t k = 0;
            if (!q || (size_t)(q - v) >= n || q == v) return -1;
            for (; v < q; v++) out[k++] = (char)tolower((unsigned char)*v);
            out[k] = 0;
            return 0;
        }
        /* the next label: after the closing quote of this one and a comma */
        const char *q = strchr(p, '"');
        if (!q || q >= end || !(q = memchr(q + 1, '"', (size_t)(end - q - 1)))) return -1;
        p = q + 1;
        if (*p == ',') p++;
    }
    return -1;
}

int etcd_metrics_parse(const char *text, void (*fn)(void *arg, const char *op, uint64_t count), void *arg)
{
    opcount ops[64];
    int nops = 0, seen = 0;
    const char *line = text;

    while (line && *line) {
        const char *nl = strchr(line, '\n');
        if (!strncmp(line, METRIC, sizeof METRIC - 1)) {
            char m[64];
            const char *v = strchr(line, '}');
            seen = 1;
            if (v && (!nl || v < nl) && !label(line + sizeof METRIC - 1, "grpc_method", m, sizeof m)) {
                /* "} 123" or "} 1.23e+06" (Prometheus writes floats) */
                char *e;
                double d = strtod(v + 1, &e);
                if (e != v + 1 && d >= 0 && d < 1.8e19) {
                    int i;
                    for (i = 0; i < nops && strcmp(ops[i].op, m); i++) {}
                    if (i == nops && nops < (int)(sizeof ops / sizeof ops[0])) {
                        memcpy(ops[nops].op, m, sizeof m);
                        ops[nops++].n = 0;
                    }
                    if (i < nops) ops[i].n += (uint64_t)d;
                }
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    if (!seen) return -1;
    for (int i = 0; i < nops; i++)
        if (ops[i].n) fn(arg, ops[i].op, ops[i].n);
    return 0;
}

int etcd_engine_ops(void *eng, void (*fn)(void *arg, const char *op, uint64_t count), void *arg)
{
    eeng *e = eng;
    size_t n = egw_members(e->gw), ok = 0;
    int rc = 0;
    char **bodies = calloc(n, sizeof *bodies);

    if (!bodies) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* every member first, so that FN is not called at all on an error */
    for (size_t i = 0; i < n; i++) {
        size_t len;
        int r = egw_get(e->gw, i, "/metrics", &bodies[i], &len);
        if (!r) ok++;
        /* a member that is down counts nothing now; one that answers
         * something other than metrics is not etcd */
        else if (r != BATON_EUNAVAILABLE) rc = r;
        if (!rc && bodies[i] && strstr(bodies[i], METRIC) == NULL)
            rc = baton_seterr(BATON_EPROTO, 0, "etcd: /metrics has no grpc_server_msg_received_total");
        if (rc) goto out;
    }
    if (!ok) {
        rc = baton_seterr(BATON_EUNAVAILABLE, 0, "etcd: no member answered /metrics");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        if (bodies[i]) etcd_metrics_parse(bodies[i], fn, arg);
out:
    for (size_t i = 0; i < n; i++) free(bodies[i]);
    free(bodies);
    return rc;
}
