/* Rate limiters (baton_ratelimit_*): GCRA at the engine, waiting here.
 * The engine makes each decision in one atomic step on its own clock and
 * answers "admitted" or "retry after D"; this file checks options, keys
 * the per-client form, and parks a blocked acquire on the handle's waiter
 * until D has passed (or the deadline makes waiting pointless), then asks
 * again. docs/ratelimit.md. */
#include "sync.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CLIENT_ID_MAX 64
#define KEY_SEP "@client:"

struct baton_ratelimit {
    sync_obj o;                 /* first: sync.c frees the handle through it */
    baton_rate_cfg cfg;         /* what this handle believes is in force */
    int replace;
};

int64_t baton_gcra_step(const baton_rate_cfg *cfg, int64_t now_us, int64_t *tat, uint32_t n, int64_t reserve_us)
{
    int64_t per = (int64_t)cfg->interval_ms * 1000;
    int64_t inc = (int64_t)n * per / cfg->permits;
    int64_t tol = (int64_t)cfg->burst * per / cfg->permits;
    int64_t base = *tat > now_us ? *tat : now_us;
    int64_t over = base + inc - now_us - tol;
    if (over < 0) over = 0;
    /* more than the burst at once can never pass: never grant it */
    if (n > cfg->burst) return over > 0 ? over : 1;
    if (over > reserve_us) return over;
    *tat = base + inc;
    return over;
}

static int id_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > CLIENT_ID_MAX) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || strchr("._:-", *s)))
            return 0;
    return 1;
}

/* The engine's key for NAME in SCOPE: the name, or (per client) the name
 * plus the client id, so each client's TAT and configuration stand apart. */
static int make_key(const char *name, int scope, const char *client_id, char **out)
{
    size_t n;
    int rc;
    *out = NULL;
    if ((rc = baton__name_check(name))) return rc;
    if (scope != BATON_RATELIMIT_OVERALL && scope != BATON_RATELIMIT_PER_CLIENT)
        return baton_seterr(BATON_EINVAL, 0, "rate limiter %s: scope %d is neither overall nor per client", name, scope);
    if (scope == BATON_RATELIMIT_OVERALL) {
        if (!(*out = strdup(name))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
        return 0;
    }
    if (!client_id || !id_ok(client_id))
        return baton_seterr(BATON_EINVAL, 0, "rate limiter %s: client id must be 1..%d bytes of [A-Za-z0-9._:-]", name,
                            CLIENT_ID_MAX);
    n = strlen(name) + strlen(KEY_SEP) + strlen(client_id) + 1;
    if (n - 1 > BATON_MAX_NAME)
        return baton_seterr(BATON_EINVAL, 0, "rate limiter %s: name plus client id exceed %d bytes", name,
                            BATON_MAX_NAME);
    if (!(*out = malloc(n))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    snprintf(*out, n, "%s" KEY_SEP "%s", name, client_id);
    return 0;
}

static int opts_check(const char *name, const baton_ratelimit_options *o, baton_rate_cfg *cfg)
{
    if (o->version != BATON_RATELIMIT_OPTIONS_VERSION)
        return baton_seterr(BATON_EINVAL, 0, "rate limiter %s: options version %u, this library speaks %u",
                            name ? name : "", o->version, (unsigned)BATON_RATELIMIT_OPTIONS_VERSION);
    if (o->permits == 0 || o->interval_ms == 0)
        return baton_seterr(BATON_EINVAL, 0, "rate limiter %s: %" PRIu32 " permits per %" PRIu32 " ms: both must be "
                            ">= 1", name ? name : "", o->permits, o->interval_ms);
    /* The engines count in µs since their epoch: keep interval*burst in range
     * (a day of intervals times a million admissions at most). */
    if (o->interval_ms > 86400000u || o->permits > 1000000u || o->burst > 1000000u)
        return baton_seterr(BATON_EINVAL, 0, "rate limiter %s: interval at most 1 day, permits and burst at most "
                            "1000000", name ? name : "");
    cfg->permits = o->permits;
    cfg->interval_ms = o->interval_ms;
    cfg->burst = o->burst ? o->burst : o->permits;
    return 0;
}

static int cfg_eq(const baton_rate_cfg *a, const baton_rate_cfg *b)
{
    return a->permits == b->permits && a->interval_ms == b->interval_ms && a->burst == b->burst;
}

/* ---- the fallback on values ---------------------------------------------------
 * For an engine with values but no rate limiter table (ZooKeeper, etcd,
 * MariaDB): the limiter is the value "baton-rate:KEY" holding "gcra1
 * PERMITS INTERVAL_MS BURST TAT_US", and each decision is a read and a
 * compare-and-set of it on the version read, tried again when another
 * client's set came between. The clock is the CLIENT's wall clock: clients
 * whose clocks disagree by D see the TAT D apart (one ahead admits up to
 * min(D / T, burst) early; one behind waits longer), which the engines with
 * a table of their own avoid by deciding on the server's clock. Two round
 * trips per decision, more under contention. docs/ratelimit.md. */
#define VRATE_PREFIX "baton-rate:"
#define VRATE_TRIES 100

typedef struct {
    const baton_value_methods *vm;   /* set by the core after create */
    void *vst;
    char *vname;
} vrate;

static int vrate_create(void *eng, const char *key, void **st)
{
    vrate *v = calloc(1, sizeof *v);
    size_t n = strlen(VRATE_PREFIX) + strlen(key) + 1;
    (void)eng;
    if (!v || !(v->vname = malloc(n))) {
        free(v);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    snprintf(v->vname, n, VRATE_PREFIX "%s", key);
    *st = v;
    return 0;
}

static void vrate_destroy(void *eng, void *st)
{
    vrate *v = st;
    if (!v) return;
    if (v->vst) v->vm->destroy(eng, v->vst);
    free(v->vname);
    free(v);
}

static int64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The value now: 1 with it (*ver its version), 0 absent, or an error. */
static int vrate_read(void *eng, vrate *v, baton_rate_cfg *cfg, int64_t *tat, uint64_t *ver)
{
    baton_value_data d = { 0 };
    long long t = 0;
    int rc;
    if (!v->vst && (rc = v->vm->create(eng, v->vname, &v->vst))) return rc;
    rc = v->vm->get(eng, v->vst, &d);
    if (rc == BATON_ENOENT) return 0;
    if (rc) return rc;
    if (!d.data || sscanf(d.data, "gcra1 %" SCNu32 " %" SCNu32 " %" SCNu32 " %lld", &cfg->permits, &cfg->interval_ms,
                          &cfg->burst, &t) != 4 || !cfg->permits || !cfg->interval_ms || !cfg->burst) {
        baton_value_data_clear(&d);
        return baton_seterr(BATON_EPROTO, 0, "rate limiter: the value %s does not hold a rate limiter", v->vname);
    }
    *tat = t;
    *ver = d.version;
    baton_value_data_clear(&d);
    return 1;
}

static int vrate_take(void *eng, void *st, const baton_rate_cfg *cfg, int replace, uint32_t n, int64_t reserve_us,
                      int64_t *wait_us, baton_rate_cfg *stored)
{
    vrate *v = st;
    for (int i = 0; i < VRATE_TRIES; i++) {
        int64_t tat = 0, tat0, w = 0;
        uint64_t ver = 0, nv;
        char buf[96];
        int have = vrate_read(eng, v, stored, &tat, &ver), same, rc;
        if (have < 0) return have;
        same = have && cfg_eq(stored, cfg);
        if (have && !same && !replace)
            return baton_seterr(BATON_ECONFLICT, 0, "rate limiter %s is configured otherwise", v->vname);
        *stored = *cfg;
        tat0 = tat;
        if (n) w = baton_gcra_step(cfg, wall_us(), &tat, n, reserve_us);
        if (have && same && tat == tat0) {
            *wait_us = w;
            return 0;
        }
        snprintf(buf, sizeof buf, "gcra1 %" PRIu32 " %" PRIu32 " %" PRIu32 " %" PRId64, cfg->permits, cfg->interval_ms,
                 cfg->burst, tat);
        rc = v->vm->set(eng, v->vst, buf, strlen(buf), have ? ver : 0, &nv);
        if (rc == BATON_ECONFLICT) continue;   /* another client decided in between: read again */
        if (rc) return rc;
        *wait_us = w;
        return 0;
    }
    return baton_seterr(BATON_EUNAVAILABLE, 0, "rate limiter %s: %d compare-and-set conflicts in a row", v->vname,
                        VRATE_TRIES);
}

static int vrate_inspect(void *eng, void *st, baton_rate_cfg *stored, int64_t *ahead_us)
{
    vrate *v = st;
    int64_t tat = 0, now;
    uint64_t ver = 0;
    int rc = vrate_read(eng, v, stored, &tat, &ver);
    if (rc < 0) return rc;
    if (rc == 0) return baton_seterr(BATON_ENOENT, 0, "no rate limiter");
    now = wall_us();
    *ahead_us = tat > now ? tat - now : 0;
    return 0;
}

static const baton_ratelimit_methods vrate_methods = {
    .create = vrate_create,
    .destroy = vrate_destroy,
    .take = vrate_take,
    .inspect = vrate_inspect,
};

/* The engine's rate limiter table, or the fallback on its values (NULL: none). */
static const baton_ratelimit_methods *methods_of(baton_client *c)
{
    return c->be->ratelimit ? c->be->ratelimit : c->be->value ? &vrate_methods : NULL;
}

/* After create: the fallback's state learns the engine's value methods. */
static void state_bind(baton_client *c, const baton_ratelimit_methods *m, void *st)
{
    if (m == &vrate_methods) ((vrate *)st)->vm = c->be->value;
}

static int random_id(char *buf, size_t n)
{
    baton_owner o;
    int rc;
    if ((rc = baton__owner_init(&o))) return rc;
    snprintf(buf, n, "%s", o.hex);
    return 0;
}

int baton_ratelimit_open(baton_ratelimit **out, baton_client *c, const char *name,
                         const baton_ratelimit_options *opts)
{
    baton_ratelimit_options def = BATON_RATELIMIT_OPTIONS_INIT;
    const baton_ratelimit_methods *m;
    baton_ratelimit *r = NULL;
    baton_rate_cfg stored;
    char rid[40], *key = NULL;
    int64_t wait_us;
    int rc;
    NEED(out, "baton_ratelimit_open");
    *out = NULL;
    if (!c) return baton_seterr(BATON_EINVAL, 0, "baton_ratelimit_open: NULL client");
    if (!opts) opts = &def;
    if (!(r = calloc(1, sizeof *r))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if ((rc = opts_check(name, opts, &r->cfg))) goto fail;
    r->replace = opts->replace;
    if (opts->scope == BATON_RATELIMIT_PER_CLIENT && !opts->client_id) {
        if ((rc = random_id(rid, sizeof rid))) goto fail;
        rc = make_key(name, opts->scope, rid, &key);
    } else {
        rc = make_key(name, opts->scope, opts->client_id, &key);
    }
    if (rc) goto fail;
    m = methods_of(c);
    if (!m) {
        rc = baton_seterr(BATON_ENOTSUP, 0, "the %s engine has no rate limiter (baton engines: see its notes)",
                          c->be->info->name);
        goto fail;
    }
    if ((rc = baton__sync_open(&r->o, c, key, m, m->create, m->destroy, "rate limiter"))) goto fail;
    state_bind(c, m, r->o.st);
    free(key);
    key = NULL;
    /* Store or check the configuration now, so a mismatch is seen at open. */
    if ((rc = baton__member_enter(&r->o.cm))) {
        baton_ratelimit_free(r);
        return rc;
    }
    rc = m->take(c->eng, r->o.st, &r->cfg, r->replace, 0, 0, &wait_us, &stored);
    baton__member_leave(&r->o.cm);
    if (rc == BATON_ECONFLICT) {
        rc = baton_seterr(BATON_ECONFLICT, 0, "rate limiter %s is configured as %" PRIu32 " per %" PRIu32 " ms burst "
                          "%" PRIu32 ", not %" PRIu32 " per %" PRIu32 " ms burst %" PRIu32 " (open with replace "
                          "to change it)", name, stored.permits, stored.interval_ms, stored.burst, r->cfg.permits,
                          r->cfg.interval_ms, r->cfg.burst);
    }
    if (rc) {
        baton_ratelimit_free(r);
        return rc;
    }
    *out = r;
    return 0;
fail:
    free(key);
    free(r);
    return rc;
}

/* One engine step for N admissions on the configuration in force there,
 * granted when they may pass within RESERVE_US: a configuration replaced by
 * someone else since we looked is adopted (it lives at the engine), and the
 * step made again, once. */
static int step(baton_ratelimit *r, uint32_t n, int64_t reserve_us, int64_t *wait_us)
{
    const baton_ratelimit_methods *m = methods_of(r->o.c);
    baton_rate_cfg stored;
    int rc;
    if (n > r->cfg.burst)
        return baton_seterr(BATON_EINVAL, 0, "rate limiter %s: %" PRIu32 " permits at once can never pass (burst "
                            "%" PRIu32 ")", r->o.name, n, r->cfg.burst);
    rc = m->take(r->o.c->eng, r->o.st, &r->cfg, 0, n, reserve_us, wait_us, &stored);
    if (rc == BATON_ECONFLICT) {
        r->cfg = stored;
        rc = m->take(r->o.c->eng, r->o.st, &r->cfg, 0, n, reserve_us, wait_us, &stored);
    }
    if (!rc && !cfg_eq(&stored, &r->cfg)) r->cfg = stored;
    if (!rc && *wait_us > reserve_us && n > r->cfg.burst)
        return baton_seterr(BATON_EINVAL, 0, "rate limiter %s: %" PRIu32 " permits at once can never pass (burst "
                            "%" PRIu32 ")", r->o.name, n, r->cfg.burst);
    return rc;
}

static int64_t us_to_ms_up(int64_t us)
{
    return us <= 0 ? 0 : (us + 999) / 1000;
}

int baton_ratelimit_try(baton_ratelimit *r, uint32_t permits, int64_t *retry_after_ms)
{
    int64_t wait_us = 0;
    int rc;
    NEED(r, "baton_ratelimit_try");
    if (retry_after_ms) *retry_after_ms = 0;
    if (permits == 0) return baton_seterr(BATON_EINVAL, 0, "rate limiter %s: try of 0 permits", r->o.name);
    ENTER(&r->o);
    rc = step(r, permits, 0, &wait_us);
    if (!rc && wait_us > 0) {
        if (retry_after_ms) *retry_after_ms = us_to_ms_up(wait_us);
        rc = baton_seterr(BATON_ELOCKED, 0, "rate limiter %s: next admission in %" PRId64 " ms", r->o.name,
                          us_to_ms_up(wait_us));
    }
    LEAVE(&r->o, rc);
}

/* One step that reserves the admissions if they may pass by the deadline
 * (the TAT moves on for them at once, so the next waiter is told the slot
 * after ours and nobody asks twice: one engine round trip per admission),
 * then parks until the reserved time. A cancel while parked gives up the
 * call but not the slot: the limiter then admits less than its rate, never
 * more (a slot cannot be handed back without letting a later reservation
 * overtake the rate). Retries only when the engine's configuration changed
 * under us (adopted in step). */
static int acquire_loop(baton_ratelimit *r, uint32_t n, int64_t d)
{
    unsigned gen = baton_waiter_gen(&r->o.w);
    int64_t wait_us, reserve_us, now = baton_now_ns();
    int rc;
    if (d == 0) reserve_us = 0;
    else if (d == INT64_MAX) reserve_us = INT64_MAX;
    else reserve_us = d > now ? (d - now) / 1000 : 0;
    if ((rc = step(r, n, reserve_us, &wait_us))) return rc;
    if (wait_us == 0) return 0;
    if (wait_us > reserve_us) {
        if (d == 0)
            return baton_seterr(BATON_ELOCKED, 0, "rate limiter %s: next admission in %" PRId64 " ms", r->o.name,
                                us_to_ms_up(wait_us));
        return baton_seterr(BATON_ETIMEDOUT, 0, "rate limiter %s: next admission in %" PRId64 " ms, past the "
                            "deadline", r->o.name, us_to_ms_up(wait_us));
    }
    /* Reserved: the admission is ours at now + wait. */
    {
        int64_t until = now + wait_us * 1000;
        while (baton_now_ns() < until) {
            if ((rc = baton_waiter_park(&r->o.w, gen, until)))
                return baton_seterr(rc, 0, "rate limiter %s: canceled (its reserved slot is not given back)",
                                    r->o.name);
            gen = baton_waiter_gen(&r->o.w);
        }
    }
    return 0;
}

int baton_ratelimit_acquire(baton_ratelimit *r, uint32_t permits, int64_t wait_ms)
{
    int64_t d;
    int rc;
    NEED(r, "baton_ratelimit_acquire");
    if (permits == 0) return baton_seterr(BATON_EINVAL, 0, "rate limiter %s: acquire of 0 permits", r->o.name);
    ENTER(&r->o);
    if (!(rc = baton__sync_begin(&r->o, wait_ms, &d))) rc = baton__sync_end(&r->o, acquire_loop(r, permits, d));
    LEAVE(&r->o, rc);
}

static void fill_state(const baton_rate_cfg *cfg, int64_t ahead_us, baton_ratelimit_state *out)
{
    double t = (double)cfg->interval_ms * 1000.0 / cfg->permits;
    double room = (double)cfg->burst * t - (double)ahead_us;
    double late = (double)ahead_us - (double)(cfg->burst - 1) * t;
    memset(out, 0, sizeof *out);
    out->permits = cfg->permits;
    out->interval_ms = cfg->interval_ms;
    out->burst = cfg->burst;
    out->available = room >= t ? (uint64_t)(room / t) : 0;
    out->next_ms = late > 0 ? us_to_ms_up((int64_t)late) : 0;
}

int baton_ratelimit_state_get(baton_ratelimit *r, baton_ratelimit_state *out)
{
    baton_rate_cfg cfg;
    int64_t ahead = 0;
    int rc;
    NEED(r, "baton_ratelimit_state_get");
    NEED(out, "baton_ratelimit_state_get");
    ENTER(&r->o);
    rc = methods_of(r->o.c)->inspect(r->o.c->eng, r->o.st, &cfg, &ahead);
    if (!rc) fill_state(&cfg, ahead, out);
    LEAVE(&r->o, rc);
}

int baton_ratelimit_inspect(baton_client *c, const char *name, int scope, const char *client_id,
                            baton_ratelimit_state *out)
{
    const baton_ratelimit_methods *m;
    baton_rate_cfg cfg;
    int64_t ahead = 0;
    char *key = NULL;
    void *st = NULL;
    int rc;
    NEED(c, "baton_ratelimit_inspect");
    NEED(out, "baton_ratelimit_inspect");
    if ((rc = make_key(name, scope, client_id, &key))) return rc;
    if (!(m = methods_of(c))) {
        free(key);
        return baton_seterr(BATON_ENOTSUP, 0, "the %s engine has no rate limiter", c->be->info->name);
    }
    if (!(rc = m->create(c->eng, key, &st))) {
        state_bind(c, m, st);
        rc = m->inspect(c->eng, st, &cfg, &ahead);
        m->destroy(c->eng, st);
    }
    if (!rc) fill_state(&cfg, ahead, out);
    else if (rc == BATON_ENOENT)
        baton_seterr(rc, 0, "no rate limiter %s (nobody configured it)", name);
    free(key);
    return rc;
}

int baton_ratelimit_cancel(baton_ratelimit *r)
{
    NEED(r, "baton_ratelimit_cancel");
    baton__waiter_cancel(&r->o.w);
    return 0;
}

void baton_ratelimit_free(baton_ratelimit *r)
{
    if (r) baton__member_free(&r->o.cm);
}
