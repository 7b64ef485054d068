/* baton check: the record of a run, and what it proves.
 *
 * A grant's hold interval runs from its acquire's return to its release call
 * (or its on_lost, or its kill): the engine cannot have granted it before the
 * first nor let another have it before the second, so on a correct engine two
 * holders' intervals never intersect. When they do, the earlier grant was
 * taken away (its lease ran out while it was stopped, the server forgot it):
 * that is allowed only if the holder lost it (on_lost, held() said 0, a
 * refused release) and had been told before it wrote. */
#include "check.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int hist_ev(check_hist *h, int64_t t, int slot, int cid, int type, uint64_t fence, int64_t a, int64_t b)
{
    if (h->nev == h->cev) {
        size_t c = h->cev ? h->cev * 2 : 1024;
        check_ev *v = realloc(h->ev, c * sizeof *v);
        if (!v) return -1;
        h->ev = v;
        h->cev = c;
    }
    h->ev[h->nev++] = (check_ev){ t, slot, cid, type, fence, a, b };
    return 0;
}

long hist_grant(check_hist *h, int slot, int cid, int writer, int64_t t_wait, int64_t t_grant, uint64_t fence)
{
    check_grant *g;
    if (h->ng == h->cg) {
        size_t c = h->cg ? h->cg * 2 : 256;
        check_grant *v = realloc(h->g, c * sizeof *v);
        if (!v) return -1;
        h->g = v;
        h->cg = c;
    }
    g = &h->g[h->ng];
    memset(g, 0, sizeof *g);
    g->slot = slot;
    g->cid = cid;
    g->writer = writer;
    g->t_wait = t_wait;
    g->t_grant = t_grant;
    g->t_end = INT64_MAX;
    g->fence = fence;
    g->end_kind = END_OPEN;
    g->t_lost = INT64_MAX;
    g->t_taken = INT64_MAX;
    return (long)h->ng++;
}

void hist_free(check_hist *h)
{
    free(h->ev);
    free(h->g);
    memset(h, 0, sizeof *h);
}

void hist_write(const check_hist *h, FILE *f)
{
    static const char *const names[] = {
        "?", "wait", "grant", "read", "read-refused", "check-lost", "writing", "write", "write-refused",
        "write-stale-accepted", "plain-lost-update", "release", "lost", "pause", "cont", "kill", "acquire-error",
        "exit", "server-stop", "server-start", "link-freeze", "link-thaw", "link-cut", "tick", "run-exit", "wait-overrun",
        "command-killed", "put", "listed", "list-end", "drained",
    };
    for (size_t i = 0; i < h->nev; i++) {
        const check_ev *e = &h->ev[i];
        const char *n = e->type > 0 && e->type < (int)(sizeof names / sizeof names[0]) ? names[e->type] : "?";
        fprintf(f, "%.6f %d %d %s %" PRIu64 " %" PRId64 " %" PRId64 "\n", (double)(e->t - h->t0) / 1e9, e->slot,
                e->cid, n, e->fence, e->a, e->b);
    }
}

/* A piece of evidence; the Nth of its kind. Only the first 4 of a kind and
 * 12 in all are kept (the count says the rest), so that one kind of
 * failure does not hide another. */
void hist_evidence(check_result *r, long nth, const char *fmt, ...)
{
    char line[512];
    size_t n = strlen(r->evidence), m;
    va_list ap;
    r->evidence_n++;
    if (nth > 4 || r->evidence_kept >= 12) return;
    r->evidence_kept++;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    m = strlen(line);
    if (n + m + 2 > sizeof r->evidence) return;
    memcpy(r->evidence + n, line, m);
    r->evidence[n + m] = '\n';
    r->evidence[n + m + 1] = 0;
}

static const check_hist *sort_h;
static int by_grant(const void *a, const void *b)
{
    const check_grant *x = &sort_h->g[*(const size_t *)a], *y = &sort_h->g[*(const size_t *)b];
    return x->t_grant < y->t_grant ? -1 : x->t_grant > y->t_grant;
}

static int by_fence(const void *a, const void *b)
{
    const check_grant *x = &sort_h->g[*(const size_t *)a], *y = &sort_h->g[*(const size_t *)b];
    if (x->fence != y->fence) return x->fence < y->fence ? -1 : 1;
    return x->t_grant < y->t_grant ? -1 : x->t_grant > y->t_grant;
}

static double rel(const check_hist *h, int64_t t)
{
    return (double)(t - h->t0) / 1e9;
}

/* Do A and B exclude each other? */
static int conflict(const check_opts *o, const check_grant *a, const check_grant *b)
{
    if (o->prim == PRIM_RWLOCK) return a->writer || b->writer;
    /* a queue's takers exclude each other item by item; members never do */
    if (o->prim == PRIM_QUEUE) return a->ka == b->ka && a->kb == b->kb;
    if (o->prim == PRIM_GROUP) return 0;
    return 1;
}

static const char *cmd_end_name(int e)
{
    switch (e) {
    case CMD_DONE: return "it finished";
    case CMD_TERM: return "baton run SIGTERMed it for a loss";
    case CMD_KILLED: return "baton run SIGKILLed it";
    case CMD_OURS: return "its baton run was killed";
    default: return "it ran to the end of the record";
    }
}

/* --run: is an overlap of A's command with B's grant explained? A grant
 * there is its command's life: an overlap means A's command still ran when
 * B's started. That is allowed only to a command baton run stopped for the
 * loss (SIGTERM or SIGKILL) that was itself stopped (its whole tree: a
 * frozen host) when B was granted, and ended within 0.5 s of its SIGCONT:
 * nothing of it could act across B's grant. A command that ran while B
 * held was not stopped in time, whatever it was told. */
static int run_explained(const check_grant *a, const check_grant *b)
{
    if (!a->lost || (a->cmd_end != CMD_TERM && a->cmd_end != CMD_KILLED)) return 0;
    if (!a->t_stop || a->t_stop > b->t_grant) return 0;
    if (a->t_cont && a->t_cont < b->t_grant) return 0;
    return a->t_cont && a->t_end <= a->t_cont + 500000000;
}

/* Each grant that began while a conflicting one was held counts once: an
 * overlap. It is explained when every such earlier grant, or itself, was
 * lost (a pause that outlived the lease shows once per grant made during it,
 * not once per pair); --run: see run_explained. */
static void overlaps_pairwise(const check_opts *o, check_hist *h, const size_t *ord, check_result *r)
{
    unsigned char *seen = calloc(h->ng ? h->ng : 1, 1);   /* 1 overlapped, 2 unexplained */
    if (!seen) return;
    for (size_t x = 0; x < h->ng; x++) {
        check_grant *a = &h->g[ord[x]];
        for (size_t y = x + 1; y < h->ng; y++) {
            check_grant *b = &h->g[ord[y]];
            if (b->t_grant >= a->t_end) break;
            if (!conflict(o, a, b)) continue;
            if (b->t_grant < a->t_taken) a->t_taken = b->t_grant;
            if (!seen[y]) seen[y] = 1;
            if (o->run) {
                if (run_explained(a, b)) continue;
                if (seen[y] != 2) {
                    r->overlaps_unexplained++;
                    hist_evidence(r, r->overlaps_unexplained, "overlap: client %d (#%d, fence %" PRIu64 ")'s command ran "
                             "%.4f..%.4f s (%s%s) and client %d (#%d, fence %" PRIu64 ")'s command started at %.4f s",
                             a->slot, a->cid, a->fence, rel(h, a->t_grant), rel(h, a->t_end), cmd_end_name(a->cmd_end),
                             a->t_bstop ? "; its baton had been stopped alone" : a->t_stop ? "; its tree had been stopped" : "",
                             b->slot, b->cid, b->fence, rel(h, b->t_grant));
                }
                seen[y] = 2;
                continue;
            }
            if (a->lost || b->lost) continue;
            if (seen[y] != 2)
                hist_evidence(r, r->overlaps_unexplained + 1, "overlap: client %d (#%d, fence %" PRIu64 ") held %.3f..%.3f s "
                         "and client %d (#%d, fence %" PRIu64 ") was granted at %.3f s; neither was told of a loss",
                         a->slot, a->cid, a->fence, rel(h, a->t_grant), rel(h, a->t_end), b->slot, b->cid, b->fence,
                         rel(h, b->t_grant));
            if (seen[y] != 2) r->overlaps_unexplained++;
            seen[y] = 2;
        }
    }
    for (size_t y = 0; y < h->ng; y++) {
        if (seen[y]) r->overlaps++;
        if (seen[y] == 1) r->overlaps_lost++;
    }
    free(seen);
}

/* Permits: more than N holders at once. */
static void overlaps_permits(const check_opts *o, check_hist *h, const size_t *ord, check_result *r)
{
    size_t *act = calloc(h->ng ? h->ng : 1, sizeof *act), na = 0;
    if (!act) return;
    for (size_t x = 0; x < h->ng; x++) {
        check_grant *b = &h->g[ord[x]];
        int lost = b->lost;
        /* drop the holds that ended before this grant */
        for (size_t k = 0; k < na;) {
            if (h->g[act[k]].t_end <= b->t_grant) act[k] = act[--na];
            else k++;
        }
        if ((int)na + 1 > o->permits) {
            r->overlaps++;
            for (size_t k = 0; k < na; k++) {
                check_grant *a = &h->g[act[k]];
                if (a->lost) lost = 1;
                if (b->t_grant < a->t_taken) a->t_taken = b->t_grant;
            }
            if (lost) {
                r->overlaps_lost++;
            } else {
                r->overlaps_unexplained++;
                hist_evidence(r, r->overlaps_unexplained, "overlap: client %d (#%d) was granted a permit at %.3f s while %zu of %d were held, "
                         "none of them lost", b->slot, b->cid, rel(h, b->t_grant), na, o->permits);
            }
        }
        act[na++] = ord[x];
    }
    free(act);
}

/* 3b. --run: a command's writes after another client's grant. Another
 * grant is one with a higher fence (the engine's order; a grant's time
 * here is its command's start, and a command started late on an old
 * grant must not make the newer holder look stale): if one of them had
 * started by the time of A's tick, A's command was writing while
 * another held the lock. Allowed only to a command whose whole process
 * group was stopped across that grant (a paused host: nothing on it can
 * act), within 0.5 s of its SIGCONT; that write is the fence's to refuse.
 * -1 when out of memory. */
static int ticks_after_grant(const check_opts *o, check_hist *h, check_result *r)
{
    size_t *pos = malloc(h->ng * sizeof *pos), *byf = malloc(h->ng * sizeof *byf);
    size_t *first = malloc((h->ng + 1) * sizeof *first);   /* the earliest start among byf[x..] */
    unsigned char *told = calloc(h->ng, 1);
    long nth = 0;
    if (!pos || !byf || !first || !told) {
        free(pos);
        free(byf);
        free(first);
        free(told);
        return -1;
    }
    for (size_t x = 0; x < h->ng; x++) byf[x] = x;
    sort_h = h;
    qsort(byf, h->ng, sizeof *byf, by_fence);
    for (size_t x = 0; x < h->ng; x++) pos[byf[x]] = x;
    first[h->ng] = SIZE_MAX;
    for (size_t x = h->ng; x-- > 0;)
        first[x] = first[x + 1] != SIZE_MAX && h->g[first[x + 1]].t_grant <= h->g[byf[x]].t_grant ? first[x + 1] : byf[x];
    for (size_t i = 0; i < h->nev; i++) {
        const check_ev *e = &h->ev[i];
        const check_grant *a, *b;
        size_t p, q;
        if (e->type != EV_TICK || e->a < 0 || (size_t)e->a >= h->ng) continue;
        a = &h->g[e->a];
        /* the first grant of a higher fence (ties: the same grant again, none) */
        for (p = pos[e->a] + 1; p < h->ng && h->g[byf[p]].fence <= a->fence; p++) {}
        if (p >= h->ng || (q = first[p]) == SIZE_MAX) continue;
        b = &h->g[q];
        if (b->t_grant > e->t) continue;
        if (a->t_stop && a->t_stop <= b->t_grant && a->t_cont && e->t <= a->t_cont + 500000000) {
            r->ticks_after_pause++;
            continue;
        }
        r->ticks_after_grant++;
        if ((double)(e->t - b->t_grant) / 1e9 > r->tick_late_max) r->tick_late_max = (double)(e->t - b->t_grant) / 1e9;
        /* one line per grant that wrote late: its first late write */
        if (told[e->a]) continue;
        told[e->a] = 1;
        hist_evidence(r, ++nth, "write after another grant: client %d (#%d, fence %" PRIu64 ")'s command wrote at %.3f s; "
                 "client %d (#%d, fence %" PRIu64 ")'s command had started at %.3f s%s", a->slot, a->cid, a->fence,
                 rel(h, e->t), b->slot, b->cid, b->fence, rel(h, b->t_grant),
                 o->run_stubborn ? " (--run-stubborn: its work runs outside its process tree)" : "");
    }
    free(pos);
    free(byf);
    free(first);
    free(told);
    return 0;
}

/* 4. fences strictly increasing, in grant order ORD (exclusive grants) */
static void fences_in_order(const check_opts *o, const check_hist *h, const size_t *ord, check_result *r)
{
    uint64_t last = 0;
    const check_grant *lg = NULL;
    for (size_t x = 0; x < h->ng; x++) {
        const check_grant *g = &h->g[ord[x]];
        if (!g->writer || !g->fence) continue;
        if (lg && g->fence <= last) {
            r->fence_backs++;
            r->fences_ok = 0;
            hist_evidence(r, r->fence_backs, "fence went back: client %d (#%d) got fence %" PRIu64 " at %.3f s after client %d "
                     "(#%d) got %" PRIu64 " at %.3f s%s", g->slot, g->cid, g->fence, rel(h, g->t_grant),
                     lg->slot, lg->cid, last, rel(h, lg->t_grant),
                     o->run ? " (--run: the times are the commands' starts: a command started on a grant older than "
                              "one whose command was running)" : "");
        }
        last = g->fence;
        lg = g;
    }
}

/* 5. recovery: a holder killed to the next grant (ORD: grant order). -1
 * when out of memory. */
static int recovery(const check_hist *h, const size_t *ord, check_result *r)
{
    double *rec = malloc((h->kills ? (size_t)h->kills : 1) * sizeof *rec);

    if (!rec) return -1;
    for (size_t i = 0; i < h->nev; i++) {
        const check_ev *e = &h->ev[i];
        size_t lo = 0, hi = h->ng;
        if (e->type != EV_KILL || !e->a) continue;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (h->g[ord[mid]].t_grant <= e->t) lo = mid + 1;
            else hi = mid;
        }
        if (lo < h->ng && r->recoveries < h->kills) rec[r->recoveries++] = (double)(h->g[ord[lo]].t_grant - e->t) / 1e9;
        else r->kills_unrecovered++;
    }
    qsort(rec, (size_t)r->recoveries, sizeof *rec, cmp_d);
    r->rec_p50 = pct(rec, (size_t)r->recoveries, 0.5);
    r->rec_max = r->recoveries ? rec[r->recoveries - 1] : 0;
    free(rec);
    return 0;
}

/* 6. fair: nobody granted before a waiter that came 0.1 s earlier (the WAIT
 * is told before acquire queues it: a tie is no inversion). Waiters paused
 * or killed, and server faults (FAULTS), reorder legitimately: not checked
 * then. ORD: grant order. */
static void fair_order(const check_hist *h, const size_t *ord, int faults, check_result *r)
{
    int64_t latest = INT64_MIN;
    r->fair_checked = !faults;
    for (size_t x = 0; x < h->ng; x++) {
        const check_grant *g = &h->g[ord[x]];
        if (g->waited_paused) continue;
        if (g->t_wait + 100000000 < latest) {
            r->fair_inversions++;
            if (r->fair_checked)
                hist_evidence(r, r->fair_inversions, "fair order: client %d (#%d) waited from %.3f s, granted at %.3f s after one "
                         "that came at %.3f s", g->slot, g->cid, rel(h, g->t_wait), rel(h, g->t_grant),
                         rel(h, latest));
        }
        if (g->t_wait > latest) latest = g->t_wait;
    }
    r->fair_ok = !r->fair_checked || !r->fair_inversions;
}

void hist_analyze(const check_opts *o, check_hist *h, check_result *r)
{
    size_t *ord = NULL;
    int faults = o->pause > 0 || o->pause_waiting > 0 || o->kill_waiting > 0 || o->kill > 0 || o->fault_stop ||
                 o->link_freeze > 0 || o->link_cut > 0;

    memset(r, 0, sizeof *r);
    r->fences_ok = 1;
    r->fair_ok = 1;
    r->grants = (long)h->ng;
    if (!(ord = malloc((h->ng ? h->ng : 1) * sizeof *ord))) goto out;
    for (size_t i = 0; i < h->ng; i++) {
        ord[i] = i;
        if (h->g[i].t_end == INT64_MAX) h->g[i].t_end = h->t1 > h->g[i].t_grant ? h->t1 : h->g[i].t_grant;
    }
    sort_h = h;
    qsort(ord, h->ng, sizeof *ord, by_grant);

    /* 1. overlaps (and which grants the engine gave away) */
    if (o->prim == PRIM_PERMITS) overlaps_permits(o, h, ord, r);
    else overlaps_pairwise(o, h, ord, r);

    /* 1b. --run: the watchdog's promise. A holder whose baton alone was
     * stopped (its shim and command ran on): its command must be dead before
     * any other client's grant (t_taken: the first grant made while it ran). */
    if (o->run)
        for (size_t i = 0; i < h->ng; i++) {
            const check_grant *g = &h->g[i];
            if (!g->t_bstop) continue;
            r->wd_cases++;
            if (g->t_taken == INT64_MAX) r->wd_dead++;
        }

    /* 2. stale writes accepted by the fenced register */
    for (size_t i = 0, nth = 0; i < h->nev; i++) {
        const check_ev *e = &h->ev[i];
        if (e->type != EV_WRITE_STALE) continue;
        hist_evidence(r, (long)++nth, "stale write accepted: client %d (#%d, fence %" PRIu64 ") wrote %" PRId64 " + 1 at %.3f s "
                 "over %" PRId64 "%s", e->slot, e->cid, e->fence, e->a, rel(h, e->t), e->b,
                 o->unfenced ? " (--unfenced: the register ignores fences)" : "");
    }

    /* 3. losses: told before the next write? */
    for (size_t i = 0; i < h->ng; i++) {
        check_grant *g = &h->g[i];
        int64_t t = g->t_lost < g->t_taken ? g->t_lost : g->t_taken;
        if (!g->lost && g->t_taken == INT64_MAX) continue;
        r->lost++;
        if (g->t_check && g->t_check >= t) {
            r->lost_unreported++;
            hist_evidence(r, r->lost_unreported, "loss not reported: client %d (#%d, fence %" PRIu64 ") lost its grant by %.3f s, yet "
                     "baton_lock_held() said 1 at %.3f s and it wrote", g->slot, g->cid, g->fence, rel(h, t),
                     rel(h, g->t_check));
        } else if (g->t_check) {
            r->lost_inflight++;   /* checked before the loss: its write is the fence's to refuse */
        } else {
            r->lost_reported++;
        }
    }

    /* 3b. --run: a command's writes after another client's grant */
    if (o->run && h->ng && ticks_after_grant(o, h, r)) goto out;

    if (o->prim != PRIM_PERMITS) fences_in_order(o, h, ord, r);
    if (recovery(h, ord, r)) goto out;
    if (o->fair) fair_order(h, ord, faults, r);
    if (o->prim == PRIM_QUEUE || o->prim == PRIM_GROUP) coord_analyze(o, h, r);
out:
    r->ok = !r->overlaps_unexplained && !h->stale_accepted && !r->lost_unreported && r->fences_ok && r->fair_ok &&
            !r->ticks_after_grant && !r->items_lost && !r->stale_dones && !r->takes_after_done &&
            !r->item_fence_backs && !r->listed_late;
    free(ord);
}
