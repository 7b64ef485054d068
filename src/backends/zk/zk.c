/*
 * The ZooKeeper backend: URI and options, sessions, the watcher, the
 * session check thread, paths and errors, identity, engine_ops, and the
 * backend table. Locks live in lock.c, permits in sem.c.
 *
 * URI: zk://[user:password@]host[:port][,host[:port]...][/chroot][?options]
 * Options: session_timeout_ms, connect_timeout_ms, root, lost_after_ms, fence_note
 * (docs/zk-engine.md).
 *
 * Sessions. A client has one zhandle at a time (zsess). The C client
 * reconnects a session by itself; what it cannot do is tell us in time that
 * the session is gone: it learns of an expiry only when it reaches a server
 * again. So the check thread decides on the monotonic clock: a session whose
 * connection has been down for lost_after_ms (default a third of the
 * negotiated session timeout, see docs/zk-engine.md) is given up, exactly as
 * if the server had expired it. A given-up session is closed as soon as no
 * call uses it, every grant made on it is reported lost (baton_host_lost,
 * per state and fence), and the next call opens a new session.
 */
#include "zk_int.h"
#include "core/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_PORT 2181
#define CHECK_TICK_MS 100
/* How long a loss is re-reported: a grant that was being confirmed while
 * its session died reaches the core a moment after the first report. */
#define REPORT_AGAIN_MS 2000
/* How long closing a session waits for its requests in flight (zk_sess_put). */
#define CLOSE_WAIT_MS 500
/* How often the C client may resolve the host names again (see sess_new). */
#define RESOLVE_MS 10000

static const int64_t MS = 1000000LL;

int64_t zk_deadline_ms(int ms) { return baton_now_ns() + ms * MS; }

int64_t zk_call_deadline(zeng *e, int64_t deadline)
{
    int64_t now = baton_now_ns(), io = now + e->io_timeout_ms * MS, end;
    if (deadline == 0 || deadline == INT64_MAX) return io;
    end = (deadline > now ? deadline : now) + ZK_GRACE_MS * MS;
    return end < io ? end : io;
}

/* The C client logs through this (per handle), never to stderr. */
static void zk_log(const char *message) { baton_log(BATON_LOG_DEBUG, "zookeeper: %s", message); }

/* ---- errors ------------------------------------------------------------- */

int zk_retryable(int zrc)
{
    return zrc == ZCONNECTIONLOSS || zrc == ZOPERATIONTIMEOUT;
}

int zk_err(int zrc, const char *what, const char *path)
{
    int code;
    switch (zrc) {
    case ZCONNECTIONLOSS:
    case ZOPERATIONTIMEOUT:
    case ZSESSIONEXPIRED:
    case ZSESSIONMOVED:
    case ZINVALIDSTATE:
    case ZCLOSING:
        code = BATON_EUNAVAILABLE;
        break;
    case ZNOAUTH:
    case ZAUTHFAILED:
        code = BATON_EAUTH;
        break;
    case ZBADARGUMENTS:
    case ZINVALIDACL:
    case ZNOCHILDRENFOREPHEMERALS:
        code = BATON_EINVAL;
        break;
    case ZMARSHALLINGERROR:
    case ZSYSTEMERROR:
        code = BATON_EIO;
        break;
    default:
        code = BATON_EPROTO;
        break;
    }
    return baton_seterr(code, zrc, "zk: %s %s: %s", what, path ? path : "", zerror(zrc));
}

/* ---- slots -------------------------------------------------------------- */

uint64_t zk_slot_open(zeng *e)
{
    zslot *s = calloc(1, sizeof *s);
    uint64_t id = 0;
    if (!s) return 0;
    pthread_mutex_lock(&e->mu);
    s->id = id = ++e->next_slot;
    s->next = e->slots;
    e->slots = s;
    pthread_mutex_unlock(&e->mu);
    return id;
}

void zk_slot_close(zeng *e, uint64_t id)
{
    pthread_mutex_lock(&e->mu);
    for (zslot **p = &e->slots; *p; p = &(*p)->next)
        if ((*p)->id == id) {
            zslot *s = *p;
            *p = s->next;
            free(s);
            break;
        }
    pthread_mutex_unlock(&e->mu);
}

void zk_slot_arm(zeng *e, uint64_t id, baton_waiter *w)
{
    pthread_mutex_lock(&e->mu);
    for (zslot *s = e->slots; s; s = s->next)
        if (s->id == id) {
            s->w = w;
            break;
        }
    pthread_mutex_unlock(&e->mu);
}

/* e->mu held. */
static void wake_all(zeng *e)
{
    for (zslot *s = e->slots; s; s = s->next)
        if (s->w) baton_waiter_wake(s->w);
}

void zk_node_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    zsess *s = (zsess *)zoo_get_context(zh);
    uint64_t id = (uint64_t)(uintptr_t)ctx;
    (void)type, (void)state, (void)path;
    if (!s) return;
    pthread_mutex_lock(&s->e->mu);
    for (zslot *sl = s->e->slots; sl; sl = sl->next)
        if (sl->id == id) {
            if (sl->w) baton_waiter_wake(sl->w);
            break;
        }
    pthread_mutex_unlock(&s->e->mu);
}

/* ---- lock states and orphans -------------------------------------------- */

void zk_lock_link(zeng *e, zlock *l)
{
    pthread_mutex_lock(&e->mu);
    l->prev = NULL;
    l->next = e->locks;
    if (e->locks) e->locks->prev = l;
    e->locks = l;
    pthread_mutex_unlock(&e->mu);
}

void zk_lock_unlink(zeng *e, zlock *l)
{
    pthread_mutex_lock(&e->mu);
    if (l->prev) l->prev->next = l->next;
    else e->locks = l->next;
    if (l->next) l->next->prev = l->prev;
    l->next = l->prev = NULL;
    pthread_mutex_unlock(&e->mu);
}

void zk_orphan_add(zeng *e, const char *path, uint64_t gen)
{
    zorphan *o = calloc(1, sizeof *o);
    if (!o || !(o->path = strdup(path))) {
        /* The node then lives until its session ends: late, not wrong. */
        free(o);
        return;
    }
    o->gen = gen;
    pthread_mutex_lock(&e->mu);
    o->next = e->orphans;
    e->orphans = o;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void timedwait(zeng *e, int64_t deadline);

int zk_orphan_claim(zeng *e, const char *path)
{
    int found = 0;
    int64_t until = zk_deadline_ms(e->io_timeout_ms);
    pthread_mutex_lock(&e->mu);
    /* a delete of PATH in flight ends before we make PATH again */
    for (int busy = 1; busy && baton_now_ns() < until;) {
        busy = 0;
        for (zorphan *o = e->cur ? e->cur->deleting : NULL; o; o = o->next)
            if (!strcmp(o->path, path)) busy = 1;
        if (busy) timedwait(e, until);
    }
    for (zorphan **p = &e->orphans; *p;) {
        zorphan *o = *p;
        if (!strcmp(o->path, path)) {
            *p = o->next;
            free(o->path);
            free(o);
            found = 1;
        } else {
            p = &o->next;
        }
    }
    pthread_mutex_unlock(&e->mu);
    return found;
}

/* ---- sessions ----------------------------------------------------------- */

static void session_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    zsess *s = ctx;
    zeng *e = s->e;
    (void)path;
    if (type != ZOO_SESSION_EVENT) return;
    pthread_mutex_lock(&e->mu);
    s->state = state;
    if (state == ZOO_CONNECTED_STATE) {
        /* the server (re)validated the session just now: its expiry is at
         * least a timeout away (a round trip early at worst: MARGIN) */
        int64_t now = baton_now_ns();
        if (now > s->confirmed) s->confirmed = now;
        s->down_since = 0;
        if (s == e->cur) e->negotiated_ms = zoo_recv_timeout(zh);
    } else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
        if (!s->dead) baton_log(BATON_LOG_INFO, "zk: session %" PRIu64 " %s", s->gen,
                                state == ZOO_EXPIRED_SESSION_STATE ? "expired" : "failed authentication");
        s->dead = 1;
        if (state == ZOO_AUTH_FAILED_STATE) {
            s->auth_pending = 0;
            s->auth_rc = ZAUTHFAILED;
        }
    } else if (!s->down_since) {
        s->down_since = baton_now_ns();
    }
    /* Waiters re-check (their session may be gone); the check thread and
     * zk_sess_get look at the new state. */
    wake_all(e);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void auth_done(int rc, const void *data)
{
    zsess *s = (zsess *)data;
    pthread_mutex_lock(&s->e->mu);
    s->auth_pending = 0;
    s->auth_rc = rc;
    if (rc != ZOK) s->dead = 1;
    pthread_cond_broadcast(&s->e->cv);
    pthread_mutex_unlock(&s->e->mu);
}

/* A new session (connecting in the background); e->mu held. zookeeper_init
 * resolves the host names here. */
static zsess *sess_start(zeng *e)
{
    zsess *s = calloc(1, sizeof *s);
    if (!s) {
        baton_seterr(BATON_ENOMEM, 0, "out of memory");
        return NULL;
    }
    s->e = e;
    s->gen = ++e->next_gen;
    s->refs = 1; /* the engine's */
    s->state = ZOO_CONNECTING_STATE;
    s->down_since = baton_now_ns();
    s->zh = zookeeper_init2(e->hosts, session_watcher, e->session_timeout_ms, NULL, s, 0, zk_log);
    if (!s->zh) {
        int err = errno;
        free(s);
        /* zookeeper_init fails when no host resolves (errno is not telling then) */
        baton_seterr(BATON_EUNAVAILABLE, err, "zk: cannot start a session with %s (do the hosts resolve?)", e->hosts);
        return NULL;
    }
    /* The C client resolves the host list again each time its I/O thread
     * wakes (a netlink socket and /dev/urandom: about ten system calls per
     * request sent or answer read). Once per RESOLVE_MS is enough to follow
     * DNS changes; a connection loss still resolves at once. */
    zoo_set_servers_resolution_delay(s->zh, RESOLVE_MS);
    if (e->auth) {
        int zrc;
        s->auth_pending = 1;
        zrc = zoo_add_auth(s->zh, "digest", e->auth, (int)strlen(e->auth), auth_done, s);
        if (zrc != ZOK) {
            s->auth_pending = 0;
            s->auth_rc = zrc;
            s->dead = 1;
        }
    }
    return s;
}

/* e->mu held. */
static int zk_old_session_locked(zeng *e, int64_t id)
{
    for (unsigned i = 0; i < e->nold; i++)
        if (e->old_ids[i] == (uint64_t)id) return 1;
    return 0;
}

int zk_old_session(zeng *e, int64_t id)
{
    int r;
    pthread_mutex_lock(&e->mu);
    r = zk_old_session_locked(e, id);
    pthread_mutex_unlock(&e->mu);
    return r;
}

/* Gives up S as the engine's current session (e->mu held): every grant on
 * it is lost from now on; the caller drops the engine's reference (*old). */
static void sess_retire(zeng *e, zsess *s, zsess **old)
{
    int64_t now = baton_now_ns();
    const clientid_t *cid = s->zh ? zoo_client_id(s->zh) : NULL;
    if (cid && cid->client_id && !zk_old_session_locked(e, cid->client_id)) {
        if (e->nold == 16) memmove(e->old_ids, e->old_ids + 1, 15 * sizeof e->old_ids[0]);
        else e->nold++;
        e->old_ids[e->nold - 1] = (uint64_t)cid->client_id;
    }
    s->dead = 1;
    if (e->cur == s) {
        e->cur = NULL;
        *old = s;
    }
    for (zlock *l = e->locks; l; l = l->next)
        if (l->node && l->gen == s->gen && !l->lost) {
            l->lost = 1;
            l->report_until = now + REPORT_AGAIN_MS * MS;
        }
    wake_all(e);
    pthread_cond_broadcast(&e->cv);
}

static void timedwait(zeng *e, int64_t deadline);

/* Closes S (no reference left). The C client (3.8, threaded) never calls
 * the completion of a request still unanswered when zookeeper_close runs (it
 * queues a ZCLOSING answer and stops its completion thread first): ASan saw
 * those requests leak. So requests in flight (a probe, a call given up at its
 * deadline, an orphan's delete) get a moment to answer first — a silent
 * server is not waited for longer — and ours are freed after the close.
 * Closing a live session deletes its ephemeral nodes at once; a disconnected
 * one just ends here and the server expires it. */
static void sess_close(zeng *e, zsess *s)
{
    pthread_mutex_lock(&e->mu);
    s->closing = 1;
    for (int64_t until = baton_now_ns() + CLOSE_WAIT_MS * MS;
         (s->probe_sent || s->calls || s->deleting) && baton_now_ns() < until;)
        timedwait(e, until);
    pthread_mutex_unlock(&e->mu);
    zookeeper_close(s->zh);
    zk_calls_release(s);
    while (s->deleting) {
        zorphan *o = s->deleting;
        s->deleting = o->next;
        free(o->path);
        free(o);
    }
    free(s);
}

static void *closer_main(void *arg)
{
    zsess *s = arg;
    zeng *e = s->e;
    sess_close(e, s);
    pthread_mutex_lock(&e->mu);
    e->closers--;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

void zk_sess_put(zeng *e, zsess *s)
{
    int last, stop;
    pthread_t th;
    pthread_attr_t ta;
    if (!s) return;
    pthread_mutex_lock(&e->mu);
    last = --s->refs == 0;
    stop = e->stop;
    if (last && !stop) e->closers++;
    pthread_mutex_unlock(&e->mu);
    if (!last) return;
    if (!stop) {
        /* A session given up is closed on a thread of its own: zookeeper_close
         * on a link gone silent takes seconds (it sends the close request and
         * waits for it), which neither a caller past its deadline nor the
         * check thread may spend. zk_close waits for these threads. */
        int rc;
        pthread_attr_init(&ta);
        pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&th, &ta, closer_main, s);
        pthread_attr_destroy(&ta);
        if (rc == 0) return;
        pthread_mutex_lock(&e->mu);
        e->closers--;
        pthread_mutex_unlock(&e->mu);
    }
    sess_close(e, s);
}

int zk_sess_dead(zeng *e, zsess *s)
{
    int d;
    pthread_mutex_lock(&e->mu);
    /* the client's I/O thread finds an expiry before our watcher hears of
     * it (on the completion thread): a caller retrying on this session
     * meanwhile would spin on ZINVALIDSTATE (call.c, zk_start_marked) */
    if (!s->dead && s->zh && zoo_state(s->zh) == ZOO_EXPIRED_SESSION_STATE) {
        baton_log(BATON_LOG_INFO, "zk: session %" PRIu64 " expired", s->gen);
        s->dead = 1;
    }
    d = s->dead;
    pthread_mutex_unlock(&e->mu);
    return d;
}

uint64_t zk_live_gen(zeng *e)
{
    uint64_t g;
    pthread_mutex_lock(&e->mu);
    g = e->cur && !e->cur->dead ? e->cur->gen : 0;
    pthread_mutex_unlock(&e->mu);
    return g;
}

static void timedwait(zeng *e, int64_t deadline)
{
    struct timespec ts;
    int64_t d = deadline;
    int64_t cap = baton_now_ns() + CHECK_TICK_MS * MS;
    if (d > cap) d = cap;
    ts.tv_sec = (time_t)(d / 1000000000LL);
    ts.tv_nsec = (long)(d % 1000000000LL);
    pthread_cond_timedwait(&e->cv, &e->mu, &ts);
}

int zk_sess_get(zeng *e, int64_t deadline, zsess **out)
{
    zsess *old = NULL;
    int rc = 0;
    *out = NULL;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        zsess *s = e->cur;
        if (s && s->dead) {
            if (s->auth_rc != ZOK && !s->auth_pending) {
                /* the credentials do not change: every session would fail */
                rc = zk_err(s->auth_rc, "digest authentication", "");
                break;
            }
            sess_retire(e, s, &old);
            if (old) {
                /* never close under e->mu: the watcher takes it */
                pthread_mutex_unlock(&e->mu);
                zk_sess_put(e, old);
                old = NULL;
                pthread_mutex_lock(&e->mu);
            }
            continue;
        }
        if (!s) {
            if (!(s = sess_start(e))) {
                rc = baton_error_last()->code;
                break;
            }
            e->cur = s;
        }
        if (s->state == ZOO_CONNECTED_STATE && !s->auth_pending) {
            if (s->auth_rc != ZOK) {
                rc = zk_err(s->auth_rc, "digest authentication", "");
                break;
            }
            s->refs++;
            *out = s;
            break;
        }
        if (baton_now_ns() >= deadline) {
            rc = baton_seterr(BATON_EUNAVAILABLE, 0, "zk: no connection to %s in time", e->hosts);
            break;
        }
        timedwait(e, deadline);
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

int zk_sess_wait(zeng *e, zsess *s, int64_t deadline)
{
    int rc = 0;
    pthread_mutex_lock(&e->mu);
    while (!s->dead && s->state != ZOO_CONNECTED_STATE) {
        if (baton_now_ns() >= deadline) break;
        timedwait(e, deadline);
    }
    if (s->dead || s->state != ZOO_CONNECTED_STATE)
        rc = baton_seterr(BATON_EUNAVAILABLE, 0, "zk: the connection to %s did not come back in time", e->hosts);
    pthread_mutex_unlock(&e->mu);
    return rc;
}

/* e->mu held. */
static int64_t lost_after_ns(zeng *e)
{
    int ms = e->lost_after_ms;
    if (ms <= 0) ms = (e->negotiated_ms > 0 ? e->negotiated_ms : e->session_timeout_ms) / 3;
    return ms * MS;
}

/* e->mu held. How long this process may be stopped without its session
 * possibly expiring: the C client pings after a third of the timeout idle,
 * so the server heard from it at most T/3 before a stop, and expires it T
 * after that; half the timeout leaves room for a ping's round trip. */
static int64_t pause_ns(zeng *e)
{
    return (int64_t)(e->negotiated_ms > 0 ? e->negotiated_ms : e->session_timeout_ms) * MS / 2;
}

/* e->mu held. The session timeout T: what the server granted, else what we
 * asked for. */
static int64_t timeout_ns(zeng *e)
{
    return (int64_t)(e->negotiated_ms > 0 ? e->negotiated_ms : e->session_timeout_ms) * MS;
}

/* e->mu held. How long before T runs out (counted from a confirmation) a
 * session is given up: room for on_lost to act (and a round trip of the
 * confirmation, and the server's expiry buckets rounding the other way). */
static int64_t margin_ns(zeng *e) { return timeout_ns(e) / 6; }

/* e->mu held. Until when S is known alive: the server expires a session T
 * after it last heard from the client, and it heard from us at or after
 * S->confirmed. */
static int64_t confirmed_until(zeng *e, zsess *s)
{
    return s->confirmed ? s->confirmed + timeout_ns(e) - margin_ns(e) : INT64_MAX;
}

/* The probe's answer (the completion thread, or zookeeper_close's with
 * ZCLOSING): an answer from the server to a request sent at probe_sent means
 * the session was alive then — after a stop, that it outlived the stop. */
static void probe_done(int rc, const struct Stat *stat, const void *data)
{
    zsess *s = (zsess *)data;
    (void)stat;
    pthread_mutex_lock(&s->e->mu);
    /* any answer of the server's (a refusal too: ACLs on "/") */
    if (rc == ZOK || rc == ZNONODE || rc == ZNOAUTH) {
        if (s->probe_sent > s->confirmed) s->confirmed = s->probe_sent;
        if (s->suspect && s->probe_sent >= s->suspect) {
            baton_log(BATON_LOG_INFO, "zk: session %" PRIu64 " confirmed after the stop", s->gen);
            s->suspect = 0;
        }
    }
    s->probe_sent = 0;
    pthread_cond_broadcast(&s->e->cv);
    pthread_mutex_unlock(&s->e->mu);
}

/* The backend's session_deadline. The C client's own threads notice a stop
 * only after a round trip to the server; until then a holder resumed past
 * its session timeout would believe it still holds. The check thread runs
 * every CHECK_TICK_MS: when it has not run for pause_ns, or found that it
 * had not, the session is in doubt and its grants with it. */
static int64_t zk_session_deadline(void *eng)
{
    zeng *e = eng;
    int64_t d;
    pthread_mutex_lock(&e->mu);
    zsess *s = e->cur;
    if (!s || s->dead || s->suspect) d = 0;
    else if (!e->tick) d = INT64_MAX;
    else d = e->tick + pause_ns(e);
    if (s && d > 0) {
        int64_t c = confirmed_until(e, s);
        if (c < d) d = c;
    }
    pthread_mutex_unlock(&e->mu);
    return d;
}

typedef struct {
    void *st;
    uint64_t fence;
} lost_rec;

/* An orphan's delete answered (or zookeeper_close ended it: ZCLOSING, the
 * node goes with its session). A connection loss or a timeout queues it
 * again for the session's next connected tick. */
static void orphan_deleted(int rc, const void *data)
{
    zorphan *o = (zorphan *)data;
    zeng *e = o->e;
    pthread_mutex_lock(&e->mu);
    for (zorphan **p = &o->s->deleting; *p; p = &(*p)->next)
        if (*p == o) {
            *p = o->next;
            break;
        }
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (zk_retryable(rc)) zk_orphan_add(e, o->path, o->gen);
    else if (rc != ZOK && rc != ZNONODE && rc != ZCLOSING && rc != ZSESSIONEXPIRED && rc != ZINVALIDSTATE)
        baton_log(BATON_LOG_WARN, "zk: cannot delete %s: %s", o->path, zerror(rc));
    free(o->path);
    free(o);
}

/* The check thread: gives up sessions disconnected too long, reports lost
 * grants, and deletes orphaned contender nodes. */
static void *check_main(void *arg)
{
    zeng *e = arg;
    pthread_mutex_lock(&e->mu);
    while (!e->stop) {
        int64_t now = baton_now_ns();
        zsess *s = e->cur, *old = NULL, *live = NULL;
        lost_rec *recs = NULL;
        size_t nrec = 0, cap = 0;
        zorphan **todo = NULL;
        size_t ntodo = 0;
        zsess *probe = NULL;

        /* A gap in our own ticks: this process (or the machine) was stopped. */
        if (s && !s->dead && e->tick && now - e->tick >= pause_ns(e)) {
            if (!s->suspect)
                baton_log(BATON_LOG_WARN, "zk: this process did not run for %lld ms (session timeout %lld ms): "
                          "session %" PRIu64 " in doubt until the server answers", (long long)((now - e->tick) / MS),
                          (long long)(pause_ns(e) * 2 / MS), s->gen);
            s->suspect = now;
        }
        e->tick = now;
        /* A probe after a stop, and one every T/3 anyway: each answer moves
         * `confirmed` on. The C client's own pings keep the session but say
         * nothing we can see; a frozen link answers neither. (The probe
         * resets the C client's idle timer, so it replaces a ping.) */
        if (s && !s->dead && !s->probe_sent && s->state == ZOO_CONNECTED_STATE &&
            (s->suspect || now - s->last_probe >= timeout_ns(e) / 3)) {
            /* sent with mu released: the C client may call our watcher from
             * inside zoo_aexists's queueing */
            s->probe_sent = s->last_probe = now;
            probe = s;
            probe->refs++;
        }
        if (s && !s->dead && now >= confirmed_until(e, s)) {
            baton_log(BATON_LOG_WARN, "zk: no answer from the server for %lld ms (session timeout %lld ms): "
                      "session %" PRIu64 " given up, its locks are lost", (long long)((now - s->confirmed) / MS),
                      (long long)(timeout_ns(e) / MS), s->gen);
            s->dead = 1;
        }

        if (s && !s->dead && s->down_since && now - s->down_since >= lost_after_ns(e)) {
            baton_log(BATON_LOG_WARN, "zk: no connection for %lld ms: session %" PRIu64 " given up, "
                      "its locks are lost", (long long)((now - s->down_since) / MS), s->gen);
            s->dead = 1;
        }
        if (s && s->dead && !(s->auth_rc != ZOK && !s->auth_pending)) sess_retire(e, s, &old);
        for (zlock *l = e->locks; l; l = l->next) {
            if (!l->lost || now >= l->report_until) continue;
            if (nrec == cap) {
                size_t nc = cap ? cap * 2 : 8;
                lost_rec *r = realloc(recs, nc * sizeof *r);
                if (!r) break;
                recs = r;
                cap = nc;
            }
            recs[nrec].st = l;
            recs[nrec++].fence = l->fence;
        }
        /* Orphans on the live session get deleted; the others died with
         * their session. They are listed in flight (live->deleting) here,
         * under the same lock that takes them off the list, so that
         * zk_orphan_claim always finds a name it must wait for. */
        if (e->orphans && e->cur && !e->cur->dead && e->cur->state == ZOO_CONNECTED_STATE) {
            size_t n = 0;
            for (zorphan *o = e->orphans; o; o = o->next) n++;
            if ((todo = malloc(n * sizeof *todo))) {
                live = e->cur;
                live->refs++;
                while (e->orphans) {
                    zorphan *o = e->orphans;
                    e->orphans = o->next;
                    if (o->gen == live->gen) {
                        o->e = e;
                        o->s = live;
                        o->next = live->deleting;
                        live->deleting = o;
                        todo[ntodo++] = o;
                    } else {
                        free(o->path);
                        free(o);
                    }
                }
            }
        }
        pthread_mutex_unlock(&e->mu);

        if (probe) {
            if (zoo_aexists(probe->zh, "/", 0, probe_done, probe) != ZOK) {
                pthread_mutex_lock(&e->mu);
                probe->probe_sent = 0;
                pthread_mutex_unlock(&e->mu);
            }
            zk_sess_put(e, probe);
        }
        /* losses first: closing the old session may take a moment */
        for (size_t i = 0; i < nrec; i++) baton_host_lost(e->host, recs[i].st, recs[i].fence);
        free(recs);
        if (old) zk_sess_put(e, old);
        for (size_t i = 0; i < ntodo; i++) {
            /* sent, not waited for: this thread decides losses on time and
             * must never sit in a request to a silent server */
            zorphan *o = todo[i];
            if (zoo_adelete(live->zh, o->path, -1, orphan_deleted, o) != ZOK) orphan_deleted(ZCONNECTIONLOSS, o);
        }
        free(todo);
        if (live) zk_sess_put(e, live);

        pthread_mutex_lock(&e->mu);
        if (!e->stop) timedwait(e, baton_now_ns() + CHECK_TICK_MS * MS);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- paths -------------------------------------------------------------- */

/* One path component ZooKeeper accepts: not empty, ".", ".."; no control
 * characters (the server rejects them; some would end the C string). */
static int component_ok(const char *s, size_t n)
{
    if (n == 0) return 0;
    if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.')) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) return 0;
        /* U+0080..U+009F (C1 controls) */
        if (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 && (unsigned char)s[i + 1] <= 0x9f) return 0;
    }
    return 1;
}

/* "a/b/c" → 1 when every component is acceptable. */
static int rel_path_ok(const char *p)
{
    while (*p) {
        const char *sl = strchr(p, '/');
        size_t n = sl ? (size_t)(sl - p) : strlen(p);
        if (!component_ok(p, n)) return 0;
        if (!sl) break;
        p = sl + 1;
        if (!*p) return 0; /* trailing '/' */
    }
    return 1;
}

int zk_path_in(zeng *e, const char *base, const char *name, const char *suffix, char **out)
{
    size_t n;
    char *p;
    *out = NULL;
    if (!name || !*name || !rel_path_ok(name))
        return baton_seterr(BATON_EINVAL, 0, "zk: name '%s' cannot be a ZooKeeper path (names are '/'-separated "
                            "components, none empty, '.' or '..', without control characters)", name ? name : "");
    if (!*base && (!strcmp(name, "zookeeper") || !strncmp(name, "zookeeper/", 10)))
        return baton_seterr(BATON_EINVAL, 0, "zk: name '%s' is in ZooKeeper's reserved /zookeeper tree", name);
    (void)e;
    n = strlen(base) + strlen(name) + (suffix ? strlen(suffix) + 1 : 0) + 2;
    if (!(p = malloc(n))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    snprintf(p, n, "%s/%s%s%s", base, name, suffix ? "/" : "", suffix ? suffix : "");
    *out = p;
    return 0;
}

int zk_path(zeng *e, const char *name, const char *suffix, char **out)
{
    return zk_path_in(e, e->base, name, suffix, out);
}

const struct ACL_vector *zk_acl(zeng *e) { return e->auth ? &ZOO_CREATOR_ALL_ACL : &ZOO_OPEN_ACL_UNSAFE; }

/* The part of the base that is the chroot: its nodes are persistent (they are
 * the user's namespace); everything from the root down is a container, which
 * the server removes once its last child is gone. */
static int is_chroot_part(zeng *e, size_t len) { return len <= e->chroot_len; }

static int mkdirs_at(zeng *e, zsess *s, char *path, size_t len, int depth, int64_t deadline)
{
    char save = path[len];
    int zrc, mode;
    if (len == 0 || depth > 256) return ZOK;
    path[len] = 0;
    mode = is_chroot_part(e, len) ? ZOO_PERSISTENT : ZOO_CONTAINER;
    zrc = zk_create(s, path, NULL, -1, zk_acl(e), mode, NULL, 0, NULL, deadline);
    if (zrc == ZNONODE) {
        char *sl = strrchr(path, '/');
        if (sl && sl != path) {
            zrc = mkdirs_at(e, s, path, (size_t)(sl - path), depth + 1, deadline);
            if (zrc == ZOK || zrc == ZNODEEXISTS)
                zrc = zk_create(s, path, NULL, -1, zk_acl(e), mode, NULL, 0, NULL, deadline);
        }
    }
    path[len] = save;
    return zrc == ZNODEEXISTS ? ZOK : zrc;
}

int zk_mkdirs(zeng *e, zsess *s, const char *path, int64_t deadline)
{
    char *p = strdup(path);
    int zrc;
    if (!p) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    zrc = mkdirs_at(e, s, p, strlen(p), 0, deadline ? deadline : zk_deadline_ms(e->io_timeout_ms));
    free(p);
    return zrc == ZOK ? 0 : zk_err(zrc, "create", path);
}

int zk_mkpath(zeng *e, zsess *s, const char *path, int mode, int64_t deadline)
{
    int zrc = zk_create(s, path, NULL, -1, zk_acl(e), mode, NULL, 0, NULL, deadline);
    if (zrc == ZNONODE) {
        /* the parents first (containers), then PATH again */
        char *p = strdup(path), *sl;
        if (!p) return ZSYSTEMERROR;
        sl = strrchr(p, '/');
        if (sl && sl != p) {
            zrc = mkdirs_at(e, s, p, (size_t)(sl - p), 0, deadline);
            if (zrc == ZOK) zrc = zk_create(s, path, NULL, -1, zk_acl(e), mode, NULL, 0, NULL, deadline);
        }
        free(p);
    }
    return zrc == ZNODEEXISTS ? ZOK : zrc;
}

/* ---- open / close ------------------------------------------------------- */

/* "/a/b" with valid components, no trailing '/'; "" or "/" = the top. */
static int norm_abs(const char *what, const char *in, char **out)
{
    size_t n;
    char *p;
    while (*in == '/') in++;
    n = strlen(in);
    while (n && in[n - 1] == '/') n--;
    if (!(p = malloc(n + 2))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    p[0] = 0;
    if (n) {
        p[0] = '/';
        memcpy(p + 1, in, n);
        p[n + 1] = 0;
        if (!rel_path_ok(p + 1)) {
            free(p);
            return baton_seterr(BATON_EINVAL, 0, "zk: %s '%s' is not a valid ZooKeeper path", what, in);
        }
    }
    *out = p;
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* "zk://<resolved addresses, sorted>/<base>": equal for two spellings of
 * one ensemble (names or addresses, any order). */
static int make_ident(zeng *e, const baton_uri *u)
{
    char **parts = calloc(u->nhosts ? u->nhosts : 1, sizeof *parts);
    size_t len = 16 + strlen(e->base);
    int rc = 0;
    if (!parts) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    for (size_t i = 0; i < u->nhosts; i++) {
        struct addrinfo hints, *ai = NULL;
        char addr[INET6_ADDRSTRLEN + 2] = "", port[8];
        int p = u->hosts[i].port ? u->hosts[i].port : DEFAULT_PORT;
        memset(&hints, 0, sizeof hints);
        hints.ai_socktype = SOCK_STREAM;
        snprintf(port, sizeof port, "%d", p);
        if (getaddrinfo(u->hosts[i].host, port, &hints, &ai) == 0 && ai) {
            const void *a = ai->ai_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr
                                                      : (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr;
            inet_ntop(ai->ai_family, a, addr, sizeof addr);
        }
        if (ai) freeaddrinfo(ai);
        /* unresolvable now: the name stands for itself */
        len += strlen(addr[0] ? addr : u->hosts[i].host) + 10;
        if (!(parts[i] = malloc(strlen(addr[0] ? addr : u->hosts[i].host) + 10))) {
            rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
            goto out;
        }
        sprintf(parts[i], strchr(addr[0] ? addr : u->hosts[i].host, ':') ? "[%s]:%d" : "%s:%d",
                addr[0] ? addr : u->hosts[i].host, p);
    }
    qsort(parts, u->nhosts, sizeof *parts, cmp_str);
    if (!(e->ident = malloc(len))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    strcpy(e->ident, "zk://");
    for (size_t i = 0; i < u->nhosts; i++) {
        if (i) strcat(e->ident, ",");
        strcat(e->ident, parts[i]);
    }
    strcat(e->ident, *e->base ? e->base : "/");
out:
    for (size_t i = 0; i < u->nhosts; i++) free(parts[i]);
    free(parts);
    return rc;
}

static void eng_free(zeng *e)
{
    free(e->hosts);
    free(e->base);
    free(e->vbase);
    free(e->gbase);
    free(e->qbase);
    free(e->sbase);
    free(e->ident);
    if (e->auth) {
        memset(e->auth, 0, strlen(e->auth));
        free(e->auth);
    }
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

/* *OUT = CHROOT + the normalised ROOT (option WHAT), outside /zookeeper. */
static int base_of(zeng *e, const char *chroot, const char *what, const char *root, char **out)
{
    char *rootn = NULL;
    int rc;
    (void)e;
    if ((rc = norm_abs(what, root ? root : "", &rootn))) return rc;
    if (!(*out = malloc(strlen(chroot) + strlen(rootn) + 1))) {
        free(rootn);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    sprintf(*out, "%s%s", chroot, rootn);
    free(rootn);
    if (!strcmp(*out, "/zookeeper") || !strncmp(*out, "/zookeeper/", 11))
        return baton_seterr(BATON_EINVAL, 0, "zk: %s is ZooKeeper's reserved tree", *out);
    return 0;
}

static int configure(zeng *e, const baton_uri *u, const baton_opts *uo, const baton_client_options *opts)
{
    const char *root, *env;
    char *chroot = NULL;
    size_t hl = 1;
    int rc;

    e->connect_timeout_ms = opts && opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : 2000;
    e->io_timeout_ms = opts && opts->io_timeout_ms > 0 ? opts->io_timeout_ms : 5000;
    e->session_timeout_ms = (int)baton_opts_int(uo, "session_timeout_ms");
    if (baton_opts_given(uo, "connect_timeout_ms")) e->connect_timeout_ms = (int)baton_opts_int(uo, "connect_timeout_ms");
    e->lost_after_ms = (int)baton_opts_int(uo, "lost_after_ms"); /* 0 = a third of the session timeout */
    e->fence_note = baton_opts_bool(uo, "fence_note");
    root = baton_opts_str(uo, "root");
    if (!u->nhosts || !u->hosts[0].host || !*u->hosts[0].host)
        return baton_seterr(BATON_EINVAL, 0, "zk: the URI names no server (zk://host:port[,host:port...])");

    /* the connect string: host:port,... (IPv6 in brackets) */
    for (size_t i = 0; i < u->nhosts; i++) {
        if (!u->hosts[i].host || !*u->hosts[i].host || strpbrk(u->hosts[i].host, ",/ "))
            return baton_seterr(BATON_EINVAL, 0, "zk: bad host in the URI");
        hl += strlen(u->hosts[i].host) + 10;
    }
    if (!(e->hosts = malloc(hl))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    e->hosts[0] = 0;
    for (size_t i = 0; i < u->nhosts; i++) {
        char one[300];
        snprintf(one, sizeof one, strchr(u->hosts[i].host, ':') ? "%s[%s]:%d" : "%s%s:%d", i ? "," : "",
                 u->hosts[i].host, u->hosts[i].port ? u->hosts[i].port : DEFAULT_PORT);
        strcat(e->hosts, one);
    }

    /* base = /<chroot><root>, and the roots of values, groups and queues */
    if ((rc = norm_abs("chroot", u->path ? u->path : "", &chroot))) return rc;
    e->chroot_len = strlen(chroot);
    rc = base_of(e, chroot, "root", root, &e->base);
    if (!rc) rc = base_of(e, chroot, "value_root", baton_opts_str(uo, "value_root"), &e->vbase);
    if (!rc) rc = base_of(e, chroot, "group_root", baton_opts_str(uo, "group_root"), &e->gbase);
    if (!rc) rc = base_of(e, chroot, "queue_root", baton_opts_str(uo, "queue_root"), &e->qbase);
    if (!rc) rc = base_of(e, chroot, "sem_root", baton_opts_str(uo, "sem_root"), &e->sbase);
    free(chroot);
    if (rc) return rc;
    {
        /* one NAME of two kinds must never be one node */
        const char *b[5] = { e->base, e->vbase, e->gbase, e->qbase, e->sbase };
        static const char *const opt[5] = { "root", "value_root", "group_root", "queue_root", "sem_root" };
        for (int i = 0; i < 5; i++)
            for (int j = i + 1; j < 5; j++)
                if (!strcmp(b[i], b[j]))
                    return baton_seterr(BATON_EINVAL, 0, "zk: %s and %s are both %s: locks, values, groups, queues "
                                        "and semaphores need roots of their own", opt[i], opt[j], *b[i] ? b[i] : "/");
    }

    /* digest credentials: the client option's password with the URI's user,
     * else the URI's user:password, else $BATON_ZK_AUTH */
    env = getenv("BATON_ZK_AUTH");
    if (opts && opts->password) {
        if (!u->user || !*u->user)
            return baton_seterr(BATON_EINVAL, 0, "zk: a password needs a user in the URI (zk://user@host)");
        e->auth = malloc(strlen(u->user) + strlen(opts->password) + 2);
        if (e->auth) sprintf(e->auth, "%s:%s", u->user, opts->password);
    } else if (u->user && *u->user && u->password) {
        e->auth = malloc(strlen(u->user) + strlen(u->password) + 2);
        if (e->auth) sprintf(e->auth, "%s:%s", u->user, u->password);
    } else if (env && *env) {
        if (!strchr(env, ':')) return baton_seterr(BATON_EINVAL, 0, "zk: $BATON_ZK_AUTH is not user:password");
        if (u->user && *u->user && strncmp(env, u->user, strlen(u->user)))
            return baton_seterr(BATON_EINVAL, 0, "zk: the URI's user is not the one in $BATON_ZK_AUTH");
        e->auth = strdup(env);
    } else if (u->user && *u->user) {
        return baton_seterr(BATON_EINVAL, 0, "zk: user '%s' without a password (URI, $BATON_ZK_AUTH or the "
                            "client option)", u->user);
    } else {
        return 0;
    }
    if (!e->auth) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    return 0;
}

static int zk_open(void **eng, const baton_uri *u, const baton_opts *uo, const baton_client_options *opts)
{
    pthread_condattr_t ca;
    zsess *s = NULL;
    zeng *e;
    int rc;

    *eng = NULL;
    if (!(e = calloc(1, sizeof *e))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &ca);
    pthread_condattr_destroy(&ca);
    if ((rc = configure(e, u, uo, opts))) goto fail;
    if ((rc = make_ident(e, u))) goto fail;
    /* connect now, so a wrong address or credentials show at open */
    if ((rc = zk_sess_get(e, zk_deadline_ms(e->connect_timeout_ms), &s))) goto fail_sess;
    zk_sess_put(e, s);
    if (pthread_create(&e->thr, NULL, check_main, e)) {
        rc = baton_seterr(BATON_ENOMEM, 0, "zk: cannot start the session thread");
        goto fail_sess;
    }
    e->thr_started = 1;
    *eng = e;
    return 0;
fail_sess:
    pthread_mutex_lock(&e->mu);
    s = e->cur;
    e->cur = NULL;
    e->stop = 1; /* closed here, not on a thread that would outlive e */
    pthread_mutex_unlock(&e->mu);
    zk_sess_put(e, s);
fail:
    eng_free(e);
    return rc;
}

static void zk_close(void *eng)
{
    zeng *e = eng;
    zsess *s;
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->thr_started) pthread_join(e->thr, NULL);
    pthread_mutex_lock(&e->mu);
    s = e->cur;
    e->cur = NULL;
    pthread_mutex_unlock(&e->mu);
    /* orphans of the live session die with it now */
    zk_sess_put(e, s);
    /* sessions given up earlier, still closing on their own threads */
    pthread_mutex_lock(&e->mu);
    while (e->closers > 0) timedwait(e, baton_now_ns() + CHECK_TICK_MS * MS);
    pthread_mutex_unlock(&e->mu);
    while (e->orphans) {
        zorphan *o = e->orphans;
        e->orphans = o->next;
        free(o->path);
        free(o);
    }
    while (e->slots) {
        zslot *sl = e->slots;
        e->slots = sl->next;
        free(sl);
    }
    eng_free(e);
}

static void zk_attach(void *eng, baton_host *host)
{
    zeng *e = eng;
    pthread_mutex_lock(&e->mu);
    e->host = host;
    pthread_mutex_unlock(&e->mu);
}

static int zk_identity(void *eng, char *buf, size_t n)
{
    zeng *e = eng;
    snprintf(buf, n, "%s", e->ident);
    return 0;
}

/* describe: the session `baton status` shows. Opens one when there is none
 * yet (status runs on a fresh client), so the timeout is the negotiated one. */
static int zk_describe(void *eng, char *buf, size_t n)
{
    zeng *e = eng;
    zsess *s = NULL;
    const clientid_t *id;
    struct sockaddr_storage ss;
    socklen_t alen = sizeof ss;
    char where[INET6_ADDRSTRLEN + 24] = "";
    int rc, neg;

    if ((rc = zk_sess_get(e, zk_deadline_ms(e->connect_timeout_ms), &s))) return rc;
    id = zoo_client_id(s->zh);
    neg = zoo_recv_timeout(s->zh);
    memset(&ss, 0, sizeof ss);
    if (zookeeper_get_connected_host(s->zh, (struct sockaddr *)&ss, &alen)) {
        char a[INET6_ADDRSTRLEN] = "?";
        if (ss.ss_family == AF_INET) {
            const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &in->sin_addr, a, sizeof a);
            snprintf(where, sizeof where, " via %s:%u", a, (unsigned)ntohs(in->sin_port));
        } else if (ss.ss_family == AF_INET6) {
            const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &in6->sin6_addr, a, sizeof a);
            snprintf(where, sizeof where, " via [%s]:%u", a, (unsigned)ntohs(in6->sin6_port));
        }
    }
    snprintf(buf, n, "0x%llx timeout %d ms (negotiated; asked %d)%s", (unsigned long long)(id ? id->client_id : 0),
             neg, e->session_timeout_ms, where);
    zk_sess_put(e, s);
    return 0;
}

/* ---- engine_ops: the four-letter word mntr ------------------------------ */

/* Sends "mntr" to ADDR and reads the whole answer (the server closes). */
static int mntr_read(const struct sockaddr *addr, socklen_t alen, int64_t deadline, char **out)
{
    size_t len = 0, cap = 8192;
    char *buf = malloc(cap);
    int fd = -1, rc = 0;
    *out = NULL;
    if (!buf) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        rc = baton_seterr(BATON_EIO, errno, "zk: socket: %s", strerror(errno));
        goto out;
    }
    if (connect(fd, addr, alen) && errno != EINPROGRESS) {
        rc = baton_seterr(BATON_EUNAVAILABLE, errno, "zk: mntr: connect: %s", strerror(errno));
        goto out;
    }
    for (int sent = 0;;) {
        struct pollfd p = { fd, (short)(sent ? POLLIN : POLLOUT), 0 };
        int64_t left = (deadline - baton_now_ns()) / MS;
        ssize_t n;
        if (left <= 0) {
            rc = baton_seterr(BATON_EUNAVAILABLE, 0, "zk: mntr: no answer in time");
            goto out;
        }
        if (poll(&p, 1, (int)(left > INT_MAX ? INT_MAX : left)) < 0) {
            if (errno == EINTR) continue;
            rc = baton_seterr(BATON_EIO, errno, "zk: mntr: poll: %s", strerror(errno));
            goto out;
        }
        if (!p.revents) continue;
        if (!sent) {
            if (send(fd, "mntr", 4, MSG_NOSIGNAL) != 4) {
                rc = baton_seterr(BATON_EUNAVAILABLE, errno, "zk: mntr: send: %s", strerror(errno));
                goto out;
            }
            sent = 1;
            continue;
        }
        if (len + 1 >= cap) {
            char *nb = cap > (1u << 22) ? NULL : realloc(buf, cap * 2);
            if (!nb) {
                rc = baton_seterr(BATON_EPROTO, 0, "zk: mntr: answer too long");
                goto out;
            }
            buf = nb;
            cap *= 2;
        }
        n = recv(fd, buf + len, cap - len - 1, 0);
        if (n == 0) break;
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            rc = baton_seterr(BATON_EUNAVAILABLE, errno, "zk: mntr: recv: %s", strerror(errno));
            goto out;
        }
        len += (size_t)n;
    }
    buf[len] = 0;
    *out = buf;
    buf = NULL;
out:
    if (fd >= 0) close(fd);
    free(buf);
    return rc;
}

/* Reports the server's zk_packets_received as "packets_received": every
 * request a client sends is one packet, so its growth is the number of
 * requests all clients made (pings included; the mntr reads of this
 * engine, which the server counts too, left out). */
static int zk_engine_ops(void *eng, void (*fn)(void *arg, const char *op, uint64_t count), void *arg)
{
    zeng *e = eng;
    struct sockaddr_storage ss;
    socklen_t alen = sizeof ss;
    zsess *s = NULL;
    char *text = NULL, *p;
    unsigned long long v;
    uint64_t reads;
    int rc;

    if ((rc = zk_sess_get(e, zk_deadline_ms(e->connect_timeout_ms), &s))) return rc;
    memset(&ss, 0, sizeof ss);
    if (!zookeeper_get_connected_host(s->zh, (struct sockaddr *)&ss, &alen)) {
        zk_sess_put(e, s);
        return baton_seterr(BATON_EUNAVAILABLE, 0, "zk: not connected to a server");
    }
    zk_sess_put(e, s);
    if ((rc = mntr_read((struct sockaddr *)&ss, alen, zk_deadline_ms(e->io_timeout_ms), &text))) return rc;
    /* the server counts each mntr among the packets it received: leave our
     * own reads out, so two reads with nothing served between them agree */
    reads = __atomic_add_fetch(&e->mntr_reads, 1, __ATOMIC_SEQ_CST);
    if (strstr(text, "not in the whitelist") || strstr(text, "not executed")) {
        rc = baton_seterr(BATON_ENOTSUP, 0, "zk: the server refuses mntr (add it to 4lw.commands.whitelist)");
    } else if (!(p = strstr(text, "zk_packets_received\t")) ||
               sscanf(p + strlen("zk_packets_received\t"), "%llu", &v) != 1) {
        rc = baton_seterr(BATON_EPROTO, 0, "zk: mntr answered without zk_packets_received");
    } else {
        fn(arg, "packets_received", v >= reads ? v - reads : 0);
    }
    free(text);
    return rc;
}

/* ---- the table ---------------------------------------------------------- */

static int zk_lock_renew(void *eng, void *st, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns)
{
    (void)eng, (void)st, (void)owner, (void)lease_ms, (void)deadline_ns;
    return baton_seterr(BATON_ENOTSUP, 0, "zk: locks live as long as the session; there is no lease to renew");
}

static const baton_lock_methods zk_lock_methods = {
    .create = zk_lock_new,
    .destroy = zk_lock_free,
    .acquire = zk_lock_acquire,
    .release = zk_lock_release,
    .renew = zk_lock_renew,
    .info = zk_lock_info,
    .list = zk_lock_list,
    .force_unlock = zk_lock_break,
};

static const baton_rw_methods zk_rw_methods = {
    .create = zk_rwlock_new,
};

static const baton_permits_methods zk_permits_methods = {
    .create = zk_permits_new,
    .destroy = zk_permits_free,
    .acquire = zk_permits_acquire,
    .release = zk_permits_release,
    .renew = zk_permits_renew,
    .ctl = zk_permits_ctl,
};

static const baton_sem_methods zk_sem_methods = {
    .create = zk_sem_new,
    .destroy = zk_sem_free,
    .acquire = zk_sem_acquire,
    .release = zk_sem_release,
    .ctl = zk_sem_ctl,
};

static const baton_election_methods zk_election_methods = {
    .create = zk_election_new,
    .leader = zk_election_leader,
    .proclaim = zk_election_proclaim,
};

static const baton_value_methods zk_value_methods = {
    .create = zk_value_new,
    .destroy = zk_value_free,
    .get = zk_value_get,
    .set = zk_value_set,
    .del = zk_value_del,
    .watch = zk_value_watch,
};

static const baton_group_methods zk_group_methods = {
    .create = zk_member_new,
    .list = zk_group_list,
    .watch = zk_group_watch,
};

static const baton_queue_methods zk_queue_methods = {
    .create = zk_queue_new,
    .destroy = zk_queue_free,
    .put = zk_queue_put,
    .taker = zk_queue_taker,
    .item = zk_queue_item,
    .done = zk_queue_done,
    .size = zk_queue_size,
};

static const baton_services zk_services_methods = {
    .attach = zk_attach,
    .identity = zk_identity,
    .session_deadline = zk_session_deadline,
    .engine_ops = zk_engine_ops,
    .describe = zk_describe,
    .secret_env = "BATON_ZK_AUTH",
    .secret_userinfo = 1,
};

const baton_backend baton__backend_zk = {
    .version = BATON_BACKEND_VERSION,
    .info = &baton__info_zk,
    .caps = BATON_CAP_FAIR | BATON_CAP_NOTIFY | BATON_CAP_SESSION,
    .open = zk_open,
    .close = zk_close,
    .lock = &zk_lock_methods,
    .rw = &zk_rw_methods,
    .sem = &zk_sem_methods,
    .permits = &zk_permits_methods,
    .election = &zk_election_methods,
    .value = &zk_value_methods,
    .group = &zk_group_methods,
    .queue = &zk_queue_methods,
    .services = &zk_services_methods,
};
