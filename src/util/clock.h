/*
 * The one monotonic clock of baton: the library's lease deadlines and
 * timers, and the commands' (run's watchdog, bench's and check's timings).
 * backend.h declares the same function for engines; this header is for the
 * code that does not include backend.h (src/tool, src/cli, src/bench,
 * src/check, which link libbaton statically).
 */
#ifndef BATON_UTIL_CLOCK_H
#define BATON_UTIL_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC, in ns. */
int64_t baton_now_ns(void);

/* The same clock in seconds. */
static inline double baton__now_s(void)
{
    return (double)baton_now_ns() / 1e9;
}

#endif
