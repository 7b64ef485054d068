/* baton bench --svg: the CDF of a run's latencies, drawn by hand. */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <string.h>

/* US in the unit that suits it, to 3 significant digits (ticks are round anyway). */
static void fmt_us(char *buf, size_t n, double us)
{
    if (us >= 1e6) snprintf(buf, n, "%.3g s", us / 1e6);
    else if (us >= 1e3) snprintf(buf, n, "%.3g ms", us / 1e3);
    else snprintf(buf, n, "%.3g \xc2\xb5s", us);
}

typedef struct {
    int logx;
    double lo, hi;       /* log: decades (log10 of µs); linear: µs */
    double left, width;
} svg_axis;

static double svg_x(const svg_axis *a, double us)
{
    double v = a->logx ? log10(us > 0 ? us : pow(10, a->lo)) : us;
    if (v < a->lo) v = a->lo;
    if (v > a->hi) v = a->hi;
    return a->left + (v - a->lo) / (a->hi - a->lo) * a->width;
}

static void svg_xtick(FILE *f, const svg_axis *a, double us, double top, double bottom, int label)
{
    char t[32];
    double x = svg_x(a, us);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#%s\"/>\n", x, top, x, bottom,
            label ? "ddd" : "eee");
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", x, bottom, x,
            bottom + (label ? 5 : 3));
    if (label) {
        fmt_us(t, sizeof t, us);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x, bottom + 18, t);
    }
}

/* V: latencies in seconds, sorted. Writes and closes o->svg; 0 or 70. */
int svg_cdf(bench_opts *o, const char *what, const double *v, size_t n)
{
    enum { W = 720, H = 440, ML = 70, MR = 30, MT = 50, MB = 62 };
    const double top = MT, bottom = H - MB, ph = bottom - top;
    FILE *f = o->svg;
    char title[256], t[32];
    svg_axis ax = { 0, 0, 1, ML, W - ML - MR };
    int rc = 0;

    if (!f) return 0;
    o->svg = NULL;
    snprintf(title, sizeof title, "baton bench %s on %s%s: %s", o->workload, o->scheme,
             o->fair ? " (fair)" : "", what);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n"
            "<text x=\"%d\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">", W, H, W, H, W, H, W / 2);
    svg_text(f, title);
    fprintf(f, "</text>\n");
    if (!n) {
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">no samples</text>\n", W / 2, H / 2);
        goto done;
    }
    {
        double xmin = v[0] * 1e6, xmax = v[n - 1] * 1e6;
        for (size_t i = 0; xmin <= 0 && i < n; i++) xmin = v[i] * 1e6;   /* the smallest positive one */
        /* Latencies span decades (a fast path and a slow tail): log scale then. */
        if (xmin > 0 && xmax / xmin > 20) {
            ax.logx = 1;
            ax.lo = floor(log10(xmin));
            ax.hi = ceil(log10(xmax));
            if (ax.hi <= ax.lo) ax.hi = ax.lo + 1;
            for (double d = ax.lo; d <= ax.hi + 1e-9; d++) {
                svg_xtick(f, &ax, pow(10, d), top, bottom, 1);
                for (int m = 2; m <= 5 && d < ax.hi - 1e-9 && ax.hi - ax.lo <= 3; m += 3)
                    svg_xtick(f, &ax, m * pow(10, d), top, bottom, ax.hi - ax.lo <= 2);
            }
        } else {
            double lo = xmin < 0 ? 0 : xmin, range = xmax - lo, raw, mag, step;
            if (range <= 0) range = xmax > 0 ? xmax : 1;
            raw = range / 5;
            mag = pow(10, floor(log10(raw)));
            step = mag * (raw / mag < 1.5 ? 1 : raw / mag < 3.5 ? 2 : raw / mag < 7.5 ? 5 : 10);
            ax.lo = floor(lo / step) * step;
            ax.hi = ceil(xmax / step) * step;
            if (ax.hi <= ax.lo) ax.hi = ax.lo + step;
            for (double x = ax.lo; x <= ax.hi + step / 2; x += step) svg_xtick(f, &ax, x, top, bottom, 1);
        }
    }
    for (int i = 0; i <= 4; i++) {
        double y = bottom - ph * i / 4;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", ML, y, W - MR, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", ML - 8, y + 4, i / 4.0);
    }
    /* the percentiles the JSON reports: dashed lines, named in a legend at
     * the bottom right, which a CDF leaves empty */
    for (int i = 0; i < 2; i++) {
        double us = pct(v, n, i ? 0.99 : 0.5) * 1e6, x = svg_x(&ax, us);
        fmt_us(t, sizeof t, us);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c33\" stroke-dasharray=\"%s\"/>\n"
                "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#c33\" stroke-dasharray=\"%s\"/>\n"
                "<text x=\"%d\" y=\"%.1f\">p%s %s</text>\n",
                x, top, x, bottom, i ? "2 2" : "6 3", W - MR - 150, bottom - 44 + 18 * i, W - MR - 126,
                bottom - 44 + 18 * i, i ? "2 2" : "6 3", W - MR - 120, bottom - 40 + 18 * i, i ? "99" : "50", t);
    }
    /* the curve, a staircase as a CDF is; at most ~2000 steps, always the last one */
    {
        size_t step = n > 2000 ? n / 2000 : 1;
        double y = bottom;
        fprintf(f, "<polyline fill=\"none\" stroke=\"#1f5fa8\" stroke-width=\"1.6\" points=\"");
        for (size_t i = 0; i < n; i += step) {
            size_t j = i + step >= n ? n - 1 : i;
            double x = svg_x(&ax, v[j] * 1e6);
            fprintf(f, "%.1f,%.1f ", x, y);
            y = bottom - ph * (double)(j + 1) / (double)n;
            fprintf(f, "%.1f,%.1f ", x, y);
            if (j == n - 1) break;
        }
        fprintf(f, "\"/>\n");
    }
    fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"none\" stroke=\"#000\"/>\n",
            ML, top, W - ML - MR, ph);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">latency%s, %zu samples</text>\n",
            ML + (W - ML - MR) / 2, H - 16, ax.logx ? " (log scale)" : "", n);
    fprintf(f, "<text transform=\"translate(20 %.1f) rotate(-90)\" text-anchor=\"middle\">"
            "fraction of samples \xe2\x89\xa4 latency</text>\n", top + ph / 2);
done:
    fprintf(f, "</svg>\n");
    if (ferror(f)) rc = EX_SOFTWARE;
    if (fclose(f)) rc = EX_SOFTWARE;
    if (rc) fprintf(stderr, "baton bench: writing the --svg file failed: %s\n", strerror(errno));
    return rc;
}
