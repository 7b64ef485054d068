/* baton check --svg: the run as a timeline, one lane per client, in the
 * manner of Jepsen's: waits thin and grey, holds as bars (blue; orange when
 * from the moment the grant was lost or given to another; red outline when
 * it overlapped another for no reason),
 * pauses shaded, kills, losses, refused and accepted-stale writes marked,
 * server faults as grey bands across every lane. */
#include "check.h"

#include <errno.h>
#include <string.h>

typedef struct {
    double left, width, top, lane;
    int64_t t0, t1;
} tl_axis;

static double tx(const tl_axis *a, int64_t t)
{
    if (t < a->t0) t = a->t0;
    if (t > a->t1) t = a->t1;
    return a->left + (double)(t - a->t0) / (double)(a->t1 - a->t0) * a->width;
}

static double ty(const tl_axis *a, int slot)
{
    return a->top + a->lane * slot;
}

static void mark(FILE *f, const tl_axis *a, const check_ev *e, const char *shape, const char *color, const char *title)
{
    double x = tx(a, e->t), y = ty(a, e->slot) + a->lane / 2;
    if (!strcmp(shape, "x"))
        fprintf(f, "<path d=\"M%.1f %.1f l8 8 m0 -8 l-8 8\" stroke=\"%s\" stroke-width=\"2\"><title>", x - 4, y - 4,
                color);
    else if (!strcmp(shape, "tri"))
        fprintf(f, "<path d=\"M%.1f %.1f l5 -9 l5 9 z\" fill=\"%s\"><title>", x - 5, y + 4, color);
    else if (!strcmp(shape, "diamond"))
        fprintf(f, "<path d=\"M%.1f %.1f l4 -5 l4 5 l-4 5 z\" fill=\"%s\"><title>", x - 4, y, color);
    else
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>", x, y, color);
    svg_text(f, title);
    fprintf(f, " at %.3f s, fence %llu</title></%s>\n", (double)(e->t - a->t0) / 1e9, (unsigned long long)e->fence,
            !strcmp(shape, "dot") ? "circle" : "path");
}

int check_svg(const check_opts *o, const check_hist *h, const check_result *r)
{
    enum { W = 1100, ML = 80, MR = 20, MT = 56, LANE = 22, LEGEND = 64 };
    FILE *f = o->svg;
    tl_axis ax = { ML, W - ML - MR, MT, LANE, h->t0, h->t1 };
    int height = MT + LANE * o->clients + 30 + LEGEND, rc = 0;
    char title[512];

    if (!f) return 0;
    for (size_t i = 0; i < h->nev; i++)
        if (h->ev[i].t > ax.t1) ax.t1 = h->ev[i].t;
    if (ax.t1 <= ax.t0) ax.t1 = ax.t0 + 1;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n",
            W, height, W, height, W, height);
    snprintf(title, sizeof title, "baton check: %s, %d clients, lease %g s: %ld grants, %ld stale writes refused, "
             "%ld accepted%s", o->name, o->clients, o->lease, r->grants, h->writes_refused, h->stale_accepted,
             r->ok ? "" : " \xe2\x80\x94 FAILED");
    fprintf(f, "<text x=\"%d\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">", W / 2);
    svg_text(f, title);
    fprintf(f, "</text>\n");

    /* lanes and the time axis */
    for (int i = 0; i < o->clients; i++) {
        fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n", ML, ty(&ax, i),
                W - ML - MR, LANE, i % 2 ? "#fafafa" : "#f2f2f2");
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">client %d</text>\n", ML - 6, ty(&ax, i) + 15, i);
    }
    {
        double secs = (double)(ax.t1 - ax.t0) / 1e9, step = 1;
        static const double steps[] = { 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600 };
        double yb = ty(&ax, o->clients);
        for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
            if (secs / steps[i] <= 12) { step = steps[i]; break; }
        if (secs / step > 12) step = secs / 10;
        for (double s = 0; s <= secs + 1e-9; s += step) {
            double x = tx(&ax, ax.t0 + (int64_t)(s * 1e9));
            fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ccc\"/>\n"
                    "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g s</text>\n", x, MT, x, yb + 4, x, yb + 18, s);
        }
    }
    /* server faults: from each stop to its start */
    for (size_t i = 0; i < h->nev; i++) {
        int64_t t_end = h->t1;
        if (h->ev[i].type != EV_SRV_STOP) continue;
        for (size_t j = i + 1; j < h->nev; j++)
            if (h->ev[j].type == EV_SRV_START) { t_end = h->ev[j].t; break; }
        fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"#888\" opacity=\"0.25\">"
                "<title>server fault</title></rect>\n", tx(&ax, h->ev[i].t), MT,
                tx(&ax, t_end) - tx(&ax, h->ev[i].t) + 1, LANE * o->clients);
    }
    /* pauses: each PAUSE to the client's next CONT */
    for (size_t i = 0; i < h->nev; i++) {
        const check_ev *e = &h->ev[i];
        int64_t t_end = h->t1;
        if (e->type != EV_PAUSE) continue;
        for (size_t j = i + 1; j < h->nev; j++)
            if (h->ev[j].cid == e->cid && (h->ev[j].type == EV_CONT || h->ev[j].type == EV_KILL)) {
                t_end = h->ev[j].t;
                break;
            }
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"#f2c200\" opacity=\"0.45\">"
                "<title>paused (SIGSTOP) %s</title></rect>\n", tx(&ax, e->t), ty(&ax, e->slot),
                tx(&ax, t_end) - tx(&ax, e->t) + 1, LANE,
                e->a == 2 ? "after its check" : e->a == 1 ? "during its work" : "while waiting");
    }
    /* link freezes: each FREEZE to the lane's next THAW */
    for (size_t i = 0; i < h->nev; i++) {
        const check_ev *e = &h->ev[i];
        int64_t t_end = h->t1;
        if (e->type != EV_LINK_FREEZE) continue;
        for (size_t j = i + 1; j < h->nev; j++)
            if (h->ev[j].slot == e->slot && h->ev[j].type == EV_LINK_THAW) {
                t_end = h->ev[j].t;
                break;
            }
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"#b07cff\" opacity=\"0.35\">"
                "<title>link frozen %s</title></rect>\n", tx(&ax, e->t), ty(&ax, e->slot),
                tx(&ax, t_end) - tx(&ax, e->t) + 1, LANE, e->a ? "holding" : "while waiting");
    }
    /* waits and holds */
    for (size_t i = 0; i < h->ng; i++) {
        const check_grant *g = &h->g[i];
        double y = ty(&ax, g->slot), x0 = tx(&ax, g->t_grant), x1 = tx(&ax, g->t_end);
        int bad = g->t_taken != INT64_MAX && !g->lost;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\"/>\n", tx(&ax, g->t_wait),
                y + LANE / 2.0, x0, y + LANE / 2.0);
        int64_t tl = g->t_lost < g->t_taken ? g->t_lost : g->t_taken;
        double xl = tl == INT64_MAX ? x1 : tx(&ax, tl);
        if (xl < x0) xl = x0;
        if (xl > x1) xl = x1;
        /* held: blue up to the first sign that it was lost or taken, orange after */
        if (xl > x0 || xl >= x1)
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>\n", x0, y + 4,
                    xl - x0 > 0.8 ? xl - x0 : 0.8, LANE - 8, g->writer ? "#1f5fa8" : "#6fa0d8");
        if (xl < x1)
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"#e8892b\"/>\n", xl, y + 4,
                    x1 - xl, LANE - 8);
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill-opacity=\"0\"%s><title>client %d #%d "
                "fence %llu: %.3f..%.3f s%s</title></rect>\n", x0, y + 4, x1 - x0 > 0.8 ? x1 - x0 : 0.8, LANE - 8,
                bad ? " stroke=\"#d00\" stroke-width=\"2\"" : "", g->slot, g->cid, (unsigned long long)g->fence,
                (double)(g->t_grant - h->t0) / 1e9, (double)(g->t_end - h->t0) / 1e9,
                g->lost ? ", lost" : g->end_kind == END_KILLED ? ", killed" : "");
    }
    /* the marks */
    for (size_t i = 0; i < h->nev; i++) {
        const check_ev *e = &h->ev[i];
        switch (e->type) {
        case EV_KILL: mark(f, &ax, e, "x", "#000", e->a ? "killed (SIGKILL) holding" : "killed (SIGKILL) waiting"); break;
        case EV_LOST: mark(f, &ax, e, "dot", "#d00", "on_lost"); break;
        case EV_CHECKLOST: mark(f, &ax, e, "dot", "#a0f", "baton_lock_held() said lost: no write"); break;
        case EV_WRITE_REFUSED: mark(f, &ax, e, "diamond", "#0a0", "stale write refused by the fence"); break;
        case EV_READ_REFUSED: mark(f, &ax, e, "diamond", "#6c6", "stale read refused by the fence"); break;
        case EV_WRITE_STALE: mark(f, &ax, e, "tri", "#d00", "STALE WRITE ACCEPTED"); break;
        case EV_LINK_CUT: mark(f, &ax, e, "x", "#b07cff", e->a ? "link cut (reset) holding" : "link cut (reset) waiting"); break;
        default: break;
        }
    }
    /* the legend */
    {
        int y = MT + LANE * o->clients + 40;
        fprintf(f,
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#999\"/><text x=\"%d\" y=\"%d\">waiting</text>\n"
            "<rect x=\"%d\" y=\"%d\" width=\"24\" height=\"12\" fill=\"#1f5fa8\"/><text x=\"%d\" y=\"%d\">held</text>\n"
            "<rect x=\"%d\" y=\"%d\" width=\"24\" height=\"12\" fill=\"#e8892b\"/><text x=\"%d\" y=\"%d\">lost or taken"
            "</text>\n"
            "<rect x=\"%d\" y=\"%d\" width=\"24\" height=\"12\" fill=\"#f2c200\" opacity=\"0.45\"/><text x=\"%d\" y=\"%d\">"
            "paused</text>\n"
            "<rect x=\"%d\" y=\"%d\" width=\"24\" height=\"12\" fill=\"#888\" opacity=\"0.25\"/><text x=\"%d\" y=\"%d\">"
            "server fault</text>\n",
            ML, y - 4, ML + 24, y - 4, ML + 30, y, ML + 110, y - 10, ML + 140, y, ML + 200, y - 10, ML + 230, y,
            ML + 350, y - 10, ML + 380, y, ML + 450, y - 10, ML + 480, y);
        y += 22;
        fprintf(f,
            "<path d=\"M%d %d l8 8 m0 -8 l-8 8\" stroke=\"#000\" stroke-width=\"2\"/><text x=\"%d\" y=\"%d\">killed</text>\n"
            "<circle cx=\"%d\" cy=\"%d\" r=\"3.5\" fill=\"#d00\"/><text x=\"%d\" y=\"%d\">on_lost</text>\n"
            "<circle cx=\"%d\" cy=\"%d\" r=\"3.5\" fill=\"#a0f\"/><text x=\"%d\" y=\"%d\">held() said lost</text>\n"
            "<path d=\"M%d %d l4 -5 l4 5 l-4 5 z\" fill=\"#0a0\"/><text x=\"%d\" y=\"%d\">stale write refused</text>\n"
            "<path d=\"M%d %d l5 -9 l5 9 z\" fill=\"#d00\"/><text x=\"%d\" y=\"%d\">stale write accepted</text>\n",
            ML, y - 8, ML + 14, y, ML + 84, y - 4, ML + 92, y, ML + 164, y - 4, ML + 172, y, ML + 294, y - 4,
            ML + 306, y, ML + 446, y, ML + 460, y);
    }
    fprintf(f, "</svg>\n");
    if (ferror(f)) rc = EX_SOFTWARE;
    if (fclose(f)) rc = EX_SOFTWARE;
    if (rc) fprintf(stderr, "baton check: writing the --svg file failed: %s\n", strerror(errno));
    return rc;
}
