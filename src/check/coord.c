/* baton check --queue and --group: what the record proves about a work
 * queue's items and a group's members (docs/check.md), the queue's drain at
 * the end of a run, and their report.
 *
 * --queue. Each cycle of a client puts an item of its own (its key: the
 * putter's pid and count, in the item's bytes), then takes the oldest item,
 * whoever put it, "works" and calls done. A grant is a take; its hold runs
 * from the take's return to the done's call (or on_lost, or the kill). On a
 * correct queue
 *  - two live takers never hold one item at once: two holds of one key that
 *    intersect are an overlap, explained only when one of the takers was
 *    told it lost the item (history.c's overlaps, item by item);
 *  - a done is refused once the item was given to another: a done that
 *    succeeded although it was called after another taker got the item is a
 *    stale done;
 *  - done removes for good: nobody takes an item after a done of it
 *    returned;
 *  - every item put is done at least once, by a taker or by the drain
 *    (after the run, the checker takes what is left: the items of killed
 *    takers come back within their lease);
 *  - fences rise: a take begun after another take returned has a larger
 *    fence.
 *
 * --group. Lane 0 lists the members over and over; the other lanes join
 * under an id of their own (pid and count), "work", and leave. A
 * membership's end is bounded: its leave's return; its kill + the lease
 * (-t: give a session engine its session timeout); its pause + the lease
 * when the member learned it lost it. A listing that began more than
 * --bound seconds after that end and still shows the member is a member
 * listed late. A live member missing from a listing is counted, not failed
 * (a replica may serve a listing an instant behind). */
#include "check.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int coord_key_parse(const char *s, int member, int64_t *a, int64_t *b)
{
    long long x, y;
    int n = 0;
    if (!s) return -1;
    if (member ? sscanf(s, "p%llds%lld%n", &x, &y, &n) != 2 : sscanf(s, "baton-check %lld %lld%n", &x, &y, &n) != 2)
        return -1;
    if (s[n] || x <= 0 || y <= 0) return -1;
    *a = x;
    *b = y;
    return 0;
}

typedef struct {
    int64_t a, b;
} key;

static int key_cmp(const key *x, const key *y)
{
    if (x->a != y->a) return x->a < y->a ? -1 : 1;
    return x->b < y->b ? -1 : x->b > y->b;
}

static int by_key(const void *p, const void *q) { return key_cmp(p, q); }

/* The keys of the items put and not done by a taker (sorted, unique). */
static key *outstanding(const check_hist *h, size_t *n)
{
    key *put = malloc((h->nev ? h->nev : 1) * sizeof *put), *done = malloc((h->ng ? h->ng : 1) * sizeof *done);
    size_t np = 0, nd = 0, out = 0;
    if (!put || !done) {
        free(put);
        free(done);
        return NULL;
    }
    for (size_t i = 0; i < h->nev; i++)
        if (h->ev[i].type == EV_PUT) put[np++] = (key){ h->ev[i].a, h->ev[i].b };
    for (size_t i = 0; i < h->ng; i++)
        if (h->g[i].released == 1) done[nd++] = (key){ h->g[i].ka, h->g[i].kb };
    qsort(put, np, sizeof *put, by_key);
    qsort(done, nd, sizeof *done, by_key);
    for (size_t i = 0; i < np; i++) {
        if (out && !key_cmp(&put[out - 1], &put[i])) continue;
        if (bsearch(&put[i], done, nd, sizeof *done, by_key)) continue;
        put[out++] = put[i];
    }
    free(done);
    *n = out;
    return put;
}

int coord_drain(const check_opts *o, check_hist *h)
{
    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
    baton_queue_options qo = BATON_QUEUE_OPTIONS_INIT;
    baton_client *c = NULL;
    baton_queue *q = NULL;
    size_t n = 0, left;
    key *want = outstanding(h, &n);
    char *seen = NULL;
    int64_t end = now_ns() + (int64_t)((3 * o->lease + 10) * 1e9);
    int rc = 0;

    if (!want || !(seen = calloc(n ? n : 1, 1))) {
        free(want);
        return EX_SOFTWARE;
    }
    left = n;
    co.lease_ms = qo.lease_ms = (uint32_t)(o->lease * 1000);
    if (left && ((rc = baton_client_open(&c, o->uri, &co)) || (rc = baton_queue_open(&q, c, o->name, &qo)))) {
        cli_report("drain", rc);
        rc = cli_exit_for(rc);
        goto out;
    }
    while (left && now_ns() < end) {
        baton_queue_item *it = NULL;
        key k;
        key *w;
        int r = baton_queue_take(q, &it, 500);
        if (r == BATON_ETIMEDOUT || r == BATON_ENOENT) continue;
        if (r) {
            struct timespec ts = { 0, 100000000 };
            while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
            continue;
        }
        if (coord_key_parse(baton_queue_item_data(it, NULL), 0, &k.a, &k.b)) {
            k.a = 0;
            k.b = (int64_t)baton_queue_item_fence(it);
            h->foreign++;
        } else if ((w = bsearch(&k, want, n, sizeof *want, by_key)) && !seen[w - want]) {
            seen[w - want] = 1;
            left--;
        }
        h->drained++;
        hist_ev(h, now_ns(), -1, -1, EV_DRAINED, baton_queue_item_fence(it), k.a, k.b);
        baton_queue_done(it);
    }
    h->drain_short = left > 0;
out:
    baton_queue_free(q);
    baton_client_close(c);
    free(seen);
    free(want);
    return rc;
}

/* ---- the queue's properties ---- */

static const check_hist *sh;
static int g_by_key(const void *p, const void *q)
{
    const check_grant *x = &sh->g[*(const size_t *)p], *y = &sh->g[*(const size_t *)q];
    key kx = { x->ka, x->kb }, ky = { y->ka, y->kb };
    int c = key_cmp(&kx, &ky);
    if (c) return c;
    return x->t_grant < y->t_grant ? -1 : x->t_grant > y->t_grant;
}
static int g_by_grant(const void *p, const void *q)
{
    const check_grant *x = &sh->g[*(const size_t *)p], *y = &sh->g[*(const size_t *)q];
    return x->t_grant < y->t_grant ? -1 : x->t_grant > y->t_grant;
}
static int g_by_wait(const void *p, const void *q)
{
    const check_grant *x = &sh->g[*(const size_t *)p], *y = &sh->g[*(const size_t *)q];
    return x->t_wait < y->t_wait ? -1 : x->t_wait > y->t_wait;
}

static double rel(const check_hist *h, int64_t t) { return (double)(t - h->t0) / 1e9; }

/* The grants of one key, ORD[lo..hi) (by take time): stale dones, takes
 * after a done, and how soon a killed taker's item was taken again. */
static void item_history(const check_hist *h, const size_t *ord, size_t lo, size_t hi, double *backs,
                         check_result *r)
{
    for (size_t x = lo; x < hi; x++) {
        const check_grant *a = &h->g[ord[x]];
        for (size_t y = x + 1; y < hi; y++) {
            const check_grant *b = &h->g[ord[y]];
            if (a->released == 1 && a->end_kind == END_RELEASE && b->t_grant < a->t_end) {
                r->stale_dones++;
                hist_evidence(r, r->stale_dones, "stale done: client %d (#%d, fence %" PRIu64 ") called done at %.3f s and "
                              "it succeeded, but client %d (#%d, fence %" PRIu64 ") had taken the item at %.3f s",
                              a->slot, a->cid, a->fence, rel(h, a->t_end), b->slot, b->cid, b->fence,
                              rel(h, b->t_grant));
            }
            if (a->released == 1 && b->t_wait > a->t_released) {
                r->takes_after_done++;
                hist_evidence(r, r->takes_after_done, "take after done: client %d (#%d) took item %" PRId64 "/%" PRId64
                              " at %.3f s; client %d (#%d)'s done of it returned at %.3f s", b->slot, b->cid, b->ka,
                              b->kb, rel(h, b->t_grant), a->slot, a->cid, rel(h, a->t_released));
            }
        }
        if (a->end_kind == END_KILLED && x + 1 < hi) backs[r->backs++] = (double)(h->g[ord[x + 1]].t_grant - a->t_end) / 1e9;
    }
}

/* Items put and never done (by a taker or the drain). KEYS: the drained ones. */
static void items_lost(const check_hist *h, const size_t *ord, const key *drained, size_t nd, check_result *r)
{
    key *put = malloc((h->nev ? h->nev : 1) * sizeof *put);
    size_t np = 0;
    if (!put) return;
    for (size_t i = 0; i < h->nev; i++)
        if (h->ev[i].type == EV_PUT) put[np++] = (key){ h->ev[i].a, h->ev[i].b };
    qsort(put, np, sizeof *put, by_key);
    for (size_t i = 0, x = 0; i < np; i++) {
        int done = 0, unsure = 0;
        if (i && !key_cmp(&put[i - 1], &put[i])) continue;
        /* ORD is by key: move to this key's grants */
        while (x < h->ng) {
            key kx = { h->g[ord[x]].ka, h->g[ord[x]].kb };
            if (key_cmp(&kx, &put[i]) >= 0) break;
            x++;
        }
        for (size_t y = x; y < h->ng; y++) {
            const check_grant *g = &h->g[ord[y]];
            key ky = { g->ka, g->kb };
            if (key_cmp(&ky, &put[i])) break;
            if (g->released == 1) done = 1;
            /* a done called and never answered (its taker killed at the end) */
            if (!g->released && g->end_kind == END_RELEASE) unsure = 1;
        }
        if (done) {
            r->items_done++;
            continue;
        }
        if (bsearch(&put[i], drained, nd, sizeof *drained, by_key)) continue;
        if (unsure) {
            r->items_uncertain++;
            continue;
        }
        r->items_lost++;
        hist_evidence(r, r->items_lost, "item lost: %" PRId64 "/%" PRId64 " was put and never done, nor found by the "
                      "drain%s", put[i].a, put[i].b, h->drain_short ? " (which ran out of time)" : "");
    }
    free(put);
}

/* A take begun after another returned has a larger fence. */
static void fences_rise(const check_hist *h, check_result *r)
{
    size_t *bg = malloc((h->ng ? h->ng : 1) * sizeof *bg), *bw = malloc((h->ng ? h->ng : 1) * sizeof *bw);
    uint64_t maxf = 0;
    const check_grant *mg = NULL;
    if (!bg || !bw) goto out;
    for (size_t i = 0; i < h->ng; i++) bg[i] = bw[i] = i;
    sh = h;
    qsort(bg, h->ng, sizeof *bg, g_by_grant);
    qsort(bw, h->ng, sizeof *bw, g_by_wait);
    for (size_t i = 0, x = 0; i < h->ng; i++) {
        const check_grant *b = &h->g[bw[i]];
        while (x < h->ng && h->g[bg[x]].t_grant < b->t_wait) {
            if (h->g[bg[x]].fence > maxf) {
                maxf = h->g[bg[x]].fence;
                mg = &h->g[bg[x]];
            }
            x++;
        }
        if (!b->fence || b->fence > maxf) continue;
        r->item_fence_backs++;
        r->fences_ok = 0;
        hist_evidence(r, r->item_fence_backs, "fence went back: client %d (#%d) began a take at %.3f s and got fence %"
                      PRIu64 ", but client %d (#%d)'s take had returned fence %" PRIu64 " at %.3f s", b->slot, b->cid,
                      rel(h, b->t_wait), b->fence, mg->slot, mg->cid, maxf, rel(h, mg->t_grant));
    }
out:
    free(bg);
    free(bw);
}

static void queue_analyze(const check_opts *o, check_hist *h, check_result *r)
{
    size_t *ord = malloc((h->ng ? h->ng : 1) * sizeof *ord);
    double *backs = malloc((h->ng ? h->ng : 1) * sizeof *backs);
    key *drained = malloc((h->nev ? h->nev : 1) * sizeof *drained);
    size_t nd = 0;
    (void)o;
    if (!ord || !backs || !drained) goto out;
    for (size_t i = 0; i < h->ng; i++) ord[i] = i;
    sh = h;
    qsort(ord, h->ng, sizeof *ord, g_by_key);
    for (size_t i = 0; i < h->nev; i++)
        if (h->ev[i].type == EV_DRAINED && h->ev[i].a) drained[nd++] = (key){ h->ev[i].a, h->ev[i].b };
    qsort(drained, nd, sizeof *drained, by_key);
    for (size_t lo = 0, hi; lo < h->ng; lo = hi) {
        key kl = { h->g[ord[lo]].ka, h->g[ord[lo]].kb };
        for (hi = lo + 1; hi < h->ng; hi++) {
            key kh = { h->g[ord[hi]].ka, h->g[ord[hi]].kb };
            if (key_cmp(&kl, &kh)) break;
        }
        if (kl.a) item_history(h, ord, lo, hi, backs, r);
        /* a drain of an item whose done had returned is a take after done too */
        if (kl.a && bsearch(&kl, drained, nd, sizeof *drained, by_key))
            for (size_t x = lo; x < hi; x++)
                if (h->g[ord[x]].released == 1) {
                    r->takes_after_done++;
                    hist_evidence(r, r->takes_after_done, "take after done: the drain found item %" PRId64 "/%" PRId64
                                  " after client %d (#%d)'s done of it returned", kl.a, kl.b, h->g[ord[x]].slot,
                                  h->g[ord[x]].cid);
                }
    }
    items_lost(h, ord, drained, nd, r);
    fences_rise(h, r);
    qsort(backs, (size_t)r->backs, sizeof *backs, cmp_d);
    r->back_p50 = r->backs ? backs[(size_t)r->backs / 2] : 0;
    r->back_max = r->backs ? backs[r->backs - 1] : 0;
out:
    free(ord);
    free(backs);
    free(drained);
}

/* ---- the group's properties ---- */

/* The latest time membership G can have lasted to, by what the record
 * says; *why says which bound it is. INT64_MAX: it did not end. */
static int64_t member_end(const check_opts *o, const check_grant *g, const char **why)
{
    int64_t lease = (int64_t)(o->lease * 1e9), e = INT64_MAX;
    *why = "";
    if (g->released == 1) {
        *why = "its leave returned";
        return g->t_released;
    }
    if (g->end_kind == END_KILLED) {
        e = g->t_end + lease;
        *why = "killed, + the lease";
    }
    if (g->lost && g->t_stop && g->t_stop + lease < e) {
        e = g->t_stop + lease;
        *why = "stopped, + the lease";
    }
    if (g->lost && g->t_lost < e) {
        e = g->t_lost;
        *why = "it was told it lost it";
    }
    return e;
}

typedef struct {
    int64_t t0, t1;
    size_t off, n;
} listing;

static int listed_in(const key *keys, const listing *l, const key *k)
{
    return bsearch(k, keys + l->off, l->n, sizeof *keys, by_key) != NULL;
}

static void group_analyze(const check_opts *o, check_hist *h, check_result *r)
{
    size_t *ord = malloc((h->ng ? h->ng : 1) * sizeof *ord), nl = 0, nk = 0, start = 0;
    key *keys = malloc((h->nev ? h->nev : 1) * sizeof *keys);
    listing *ls = malloc((h->nev ? h->nev : 1) * sizeof *ls);
    char *late = calloc(h->ng ? h->ng : 1, 1);
    int64_t bound = (int64_t)(o->bound * 1e9);
    if (!ord || !keys || !ls || !late) goto out;
    r->members = (long)h->ng;
    for (size_t i = 0; i < h->ng; i++) ord[i] = i;
    sh = h;
    qsort(ord, h->ng, sizeof *ord, g_by_key);
    /* the listings, each with its members' keys sorted */
    for (size_t i = 0; i < h->nev; i++) {
        const check_ev *e = &h->ev[i];
        if (e->type == EV_LISTED) keys[nk++] = (key){ e->a, e->b };
        if (e->type != EV_LISTEND) continue;
        ls[nl] = (listing){ e->t, e->a, start, nk - start };
        qsort(keys + start, nk - start, sizeof *keys, by_key);
        start = nk;
        nl++;
    }
    /* late: listed when it must have ended */
    for (size_t l = 0; l < nl; l++)
        for (size_t j = ls[l].off; j < ls[l].off + ls[l].n; j++) {
            size_t lo = 0, hi = h->ng;
            const char *why;
            while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                key km = { h->g[ord[mid]].ka, h->g[ord[mid]].kb };
                if (key_cmp(&km, &keys[j]) < 0) lo = mid + 1;
                else hi = mid;
            }
            if (lo == h->ng || h->g[ord[lo]].ka != keys[j].a || h->g[ord[lo]].kb != keys[j].b) continue;
            const check_grant *g = &h->g[ord[lo]];
            int64_t e = member_end(o, g, &why);
            if (e == INT64_MAX || ls[l].t0 <= e + bound || late[ord[lo]]) continue;
            late[ord[lo]] = 1;
            r->listed_late++;
            hist_evidence(r, r->listed_late, "member listed late: client %d (#%d)'s member p%" PRId64 "s%" PRId64 " was in "
                          "a listing begun at %.3f s; its membership ended by %.3f s (%s) + bound %g s", g->slot, g->cid,
                          g->ka, g->kb, rel(h, ls[l].t0), rel(h, e), why, o->bound);
        }
    /* missing: a live member (no fault, not lost) absent from a listing made wholly within its membership */
    for (size_t i = 0; i < h->ng; i++) {
        const check_grant *g = &h->g[i];
        key k = { g->ka, g->kb };
        if (g->lost || g->paused || g->linked || g->end_kind == END_KILLED) continue;
        size_t l0 = 0, hi = nl;
        while (l0 < hi) {   /* the first listing begun after the join returned */
            size_t mid = (l0 + hi) / 2;
            if (ls[mid].t0 <= g->t_grant) l0 = mid + 1;
            else hi = mid;
        }
        for (size_t l = l0; l < nl; l++) {
            if (ls[l].t1 >= g->t_end) break;
            if (!listed_in(keys, &ls[l], &k)) {
                r->live_missing++;
                break;
            }
        }
    }
out:
    free(ord);
    free(keys);
    free(ls);
    free(late);
}

void coord_analyze(const check_opts *o, check_hist *h, check_result *r)
{
    if (o->prim == PRIM_QUEUE) queue_analyze(o, h, r);
    else group_analyze(o, h, r);
}

/* ---- reports ---- */

static void faults_line(const check_hist *h)
{
    printf("  faults                              pauses %ld (%ld holding, %ld waiting), kills %ld (%ld holding, %ld "
           "waiting), server %ld\n", h->pauses, h->pauses_holding, h->pauses_waiting, h->kills, h->kills_holding,
           h->kills_waiting, h->srv_faults);
    if (h->link_freezes || h->link_cuts)
        printf("  link faults                         freezes %ld, cuts %ld (%ld holding, %ld waiting)\n",
               h->link_freezes, h->link_cuts, h->links_holding, h->links_waiting);
}

void coord_report_text(const check_opts *o, const char *backend, const check_hist *h, const check_result *r)
{
    int q = o->prim == PRIM_QUEUE;
    printf("baton check: %s %s \"%s\", %d clients%s, %g s, lease %g s, seed %lu\n", backend, q ? "queue" : "group",
           o->name, o->clients, q ? "" : " (one lists, the others join and leave)", o->seconds, o->lease, o->seed);
    if (q) {
        printf("  takes                               %ld (items put %ld: done by takers %ld, by the drain %ld%s)\n",
               r->grants, h->puts, r->items_done, h->drained - h->foreign, h->drain_short ? ", which ran out of time" : "");
        if (h->foreign) printf("  items not put by this run           %ld (taken and done: use a queue of its own)\n", h->foreign);
        printf("  items held by two takers at once    %ld (%ld after a lost take, %ld unexplained: must be 0)\n",
               r->overlaps, r->overlaps_lost, r->overlaps_unexplained);
        printf("  items never done (must be 0)        %ld", r->items_lost);
        if (r->items_uncertain) printf(" (and %ld whose done was cut short by the end of the run)", r->items_uncertain);
        printf("\n  stale dones accepted (must be 0)    %ld\n", r->stale_dones);
        printf("  takes after a done (must be 0)      %ld\n", r->takes_after_done);
        printf("  fences of later takes larger        %s", r->item_fence_backs ? "NO" : "yes\n");
        if (r->item_fence_backs) printf(" (%ld went back)\n", r->item_fence_backs);
        printf("  items lost by takers                %ld (told: %ld)\n", r->lost, r->lost_reported + r->lost_inflight);
        if (r->backs)
            printf("  a killed taker's item taken again   p50 %.3f s, max %.3f s after the kill (%ld; lease %g s)\n",
                   r->back_p50, r->back_max, r->backs, o->lease);
    } else {
        printf("  memberships                         %ld (listings %ld)\n", r->members, h->listings);
        printf("  members listed late (must be 0)     %ld (bound: %g s after a leave returned, a kill + lease, a pause + "
               "lease)\n", r->listed_late, o->bound);
        printf("  live members missing from a listing %ld (not a failure: a replica may list an instant behind)\n",
               r->live_missing);
        printf("  memberships lost                    %ld (told: %ld)\n", r->lost, r->lost_reported + r->lost_inflight);
    }
    faults_line(h);
    printf("  client errors                       %ld failed %s, %ld exits\n", h->errors, q ? "puts or takes" :
           "joins or listings", h->exits);
    if (r->ok) {
        printf("result: every safety property held\n");
    } else {
        printf("result: FAILED\n%s", r->evidence);
        if (r->evidence_n > r->evidence_kept) printf("... and %ld more\n", r->evidence_n - r->evidence_kept);
    }
}

/* The fields after the common ones (check.c writes the object's start and end). */
void coord_report_json(const check_opts *o, const check_hist *h, const check_result *r)
{
    if (o->prim == PRIM_QUEUE) {
        printf("\"takes\":%ld,\"items_put\":%ld,\"items_done\":%ld,\"items_drained\":%ld,\"items_foreign\":%ld,"
               "\"drain_short\":%s,\"items_double_held\":%ld,\"items_double_held_after_loss\":%ld,"
               "\"items_double_held_unexplained\":%ld,\"items_lost\":%ld,\"items_uncertain\":%ld,\"stale_dones\":%ld,"
               "\"takes_after_done\":%ld,\"fence_backs\":%ld,\"items_lost_by_takers\":%ld,\"losses_told\":%ld,",
               r->grants, h->puts, r->items_done, h->drained - h->foreign, h->foreign,
               h->drain_short ? "true" : "false", r->overlaps, r->overlaps_lost, r->overlaps_unexplained,
               r->items_lost, r->items_uncertain, r->stale_dones, r->takes_after_done, r->item_fence_backs, r->lost,
               r->lost_reported + r->lost_inflight);
        if (r->backs) printf("\"item_back_p50_s\":%.4f,\"item_back_max_s\":%.4f,", r->back_p50, r->back_max);
        else printf("\"item_back_p50_s\":null,\"item_back_max_s\":null,");
    } else {
        printf("\"memberships\":%ld,\"listings\":%ld,\"bound_s\":%g,\"listed_late\":%ld,\"live_missing\":%ld,"
               "\"memberships_lost\":%ld,\"losses_told\":%ld,", r->members, h->listings, o->bound, r->listed_late,
               r->live_missing, r->lost, r->lost_reported + r->lost_inflight);
    }
    printf("\"pauses\":%ld,\"kills\":%ld,\"server_faults\":%ld,\"link_freezes\":%ld,\"link_cuts\":%ld,"
           "\"client_errors\":%ld,\"client_exits\":%ld,", h->pauses, h->kills, h->srv_faults, h->link_freezes,
           h->link_cuts, h->errors, h->exits);
}
