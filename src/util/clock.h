/*
 * The one monotonic clock of baton: the library's lease deadlines and
 * timers, and the commands' (run's watchdog, bench's and check's timings).
 * It is public (baton.h: the clock of baton_lock_deadline), so the commands
 * stay clients of the public API; backend.h declares it for engines too.
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
