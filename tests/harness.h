/* A tiny test harness: CHECK records a failure and goes on; each test binary
 * ends with "N passed, N failed" and exits 1 on any failure, 77 when skipped. */
#ifndef BATON_TEST_HARNESS_H
#define BATON_TEST_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int th_passed, th_failed;
static const char *th_current = "";

#define CHECK(cond) do { \
    if (cond) th_passed++; \
    else { th_failed++; fprintf(stderr, "FAIL %s:%d [%s]: %s\n", __FILE__, __LINE__, th_current, #cond); } \
} while (0)

#define CHECK_RC(expr, want) do { \
    int th_rc_ = (expr); \
    if (th_rc_ == (want)) th_passed++; \
    else { th_failed++; fprintf(stderr, "FAIL %s:%d [%s]: %s = %d (%s), want %d (%s)\n", __FILE__, __LINE__, \
        th_current, #expr, th_rc_, baton_strerror(th_rc_), (want), baton_strerror(want)); } \
} while (0)

#define RUN(fn) do { th_current = #fn; fprintf(stderr, "-- %s\n", #fn); fn(); } while (0)

static inline int th_finish(void) {
    printf("%d passed, %d failed\n", th_passed, th_failed);
    return th_failed ? 1 : 0;
}

#define TH_SKIP 77

#endif
