/* The one monotonic clock (see clock.h). */
#include "baton.h"       /* the public declaration (exported from libbaton.so) */
#include "clock.h"
#include "baton/sys/backend.h"   /* the engines' declaration: the compiler checks both agree */

#include <time.h>

int64_t baton_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);   /* cannot fail for this clock */
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
