/* Samples: sorting and percentiles (see tool.h). */
#include "tool.h"

int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double pct(const double *v, size_t n, double p)
{
    if (!n) return 0;
    size_t i = (size_t)(n * p);
    if (i >= n) i = n - 1;
    return v[i];
}
