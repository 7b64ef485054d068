/* The counts of one engine_ops call (what `baton bench` counts a handoff
 * with), per operation, for the tests of each engine's engine_ops. */
#ifndef BATON_TEST_OPCOUNTS_H
#define BATON_TEST_OPCOUNTS_H

#include <baton.h>
#include <baton/sys/stats.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char op[32][64];
    uint64_t n[32];
    int k, calls;
} tl_ops;

/* engine_ops' callback: a quorum names one operation once per member. */
static inline void tl_ops_add(void *arg, const char *op, uint64_t count) {
    tl_ops *c = arg;
    c->calls++;
    for (int i = 0; i < c->k; i++)
        if (!strcmp(c->op[i], op)) {
            c->n[i] += count;
            return;
        }
    if (c->k < 32) {
        snprintf(c->op[c->k], sizeof c->op[0], "%s", op);
        c->n[c->k++] = count;
    }
}

static inline int tl_ops_read(baton_client *cl, tl_ops *c) {
    memset(c, 0, sizeof *c);
    return baton__client_engine_ops(cl, tl_ops_add, c);
}

/* -1 when OP was not reported. */
static inline long long tl_ops_get(const tl_ops *c, const char *op) {
    for (int i = 0; i < c->k; i++)
        if (!strcmp(c->op[i], op)) return (long long)c->n[i];
    return -1;
}

static inline long long tl_ops_total(const tl_ops *c) {
    long long t = 0;
    for (int i = 0; i < c->k; i++) t += (long long)c->n[i];
    return t;
}

#endif
