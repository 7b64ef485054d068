/*
 * RedLock rounds: one command sent to several independent Redis nodes at
 * once, the replies read in one poll loop over their sockets with a common
 * deadline (the small per-node timeout), so an attempt costs one round trip
 * to the slowest live node, never the sum of them.
 *
 * Connections come from a small pool per node. A node without an idle
 * connection is connected before the round's first request goes out (the
 * validity clock starts at that first send); when several nodes need one,
 * they connect in parallel on short-lived threads. A node whose connect
 * failed is not tried again for a short, growing while (20 ms doubling to
 * 500 ms), so a dead node costs nothing per attempt -- unless the round
 * needs it for a quorum, or is a release (which tries every node).
 */
#include "redlock_int.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


#define DOWN_FIRST_NS (20LL * 1000000)
#define DOWN_MAX_NS (500LL * 1000000)

/* ---- slots ----------------------------------------------------------------- */

static void slot_fail(rl_slot *s, int code, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void slot_fail(rl_slot *s, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->msg, sizeof s->msg, fmt, ap);
    va_end(ap);
    s->err = code;
    s->state = RS_FAIL;
}

/* Fails the slot with the thread's last error (set by the rconn layer). */
static void slot_fail_last(rl_slot *s, const rl_node *nd, int code) {
    const baton_error *le = baton_error_last();
    slot_fail(s, code, "%s: %s", nd->label, le->message && *le->message ? le->message : baton_strerror(code));
}

/* ---- the per-node pool ------------------------------------------------------- */

/* An idle connection is reused only if the server has not closed it and sent
 * nothing while it sat idle (TLS: unless it was a post-handshake message). */
static int conn_alive(rconn *c) {
    struct pollfd p = { .fd = c->fd, .events = POLLIN, .revents = 0 };
    int r = poll(&p, 1, 0);
    if (r == 0) return 1;
    if (r < 0 || (p.revents & (POLLERR | POLLHUP | POLLNVAL))) return 0;
    if (!c->ssl) return 0;
    char b[1];
    ERR_clear_error();
    int n = SSL_read(c->ssl, b, 1);
    if (n > 0) return 0;
    int e = SSL_get_error(c->ssl, n);
    ERR_clear_error();
    return e == SSL_ERROR_WANT_READ;
}

static rconn *pool_pop(rl_node *nd) {
    for (;;) {
        rconn *c = NULL;
        pthread_mutex_lock(&nd->mu);
        if (nd->nidle) c = nd->idle[--nd->nidle];
        pthread_mutex_unlock(&nd->mu);
        if (!c) return NULL;
        if (conn_alive(c)) return c;
        c->broken = 1;
        rconn_free(c);
    }
}

static void pool_put(rl_node *nd, rconn *c) {
    if (!c) return;
    if (!c->broken) {
        pthread_mutex_lock(&nd->mu);
        if (nd->nidle < RL_POOL_MAX) {
            nd->idle[nd->nidle++] = c;
            c = NULL;
        }
        pthread_mutex_unlock(&nd->mu);
    }
    if (c) rconn_free(c);
}

/* 1 when a recent connect to the node failed and the next is not due yet. */
static int node_down(rl_node *nd, int64_t now) {
    pthread_mutex_lock(&nd->mu);
    int d = nd->down_until > now;
    pthread_mutex_unlock(&nd->mu);
    return d;
}

static void node_connected(rl_node *nd, int ok) {
    pthread_mutex_lock(&nd->mu);
    if (ok) {
        nd->fails = 0;
        nd->down_until = 0;
    } else {
        int64_t d = DOWN_FIRST_NS << (nd->fails < 6 ? nd->fails : 6);
        if (d > DOWN_MAX_NS) d = DOWN_MAX_NS;
        nd->fails++;
        nd->down_until = baton_now_ns() + d;
    }
    pthread_mutex_unlock(&nd->mu);
}

/* A connect runs on its own detached thread and reports to the round through
 * the job, under e->cj_mu. A round waits for its connects until they are
 * done, or until its hard deadline, or -- once enough nodes have a
 * connection for the round -- the round's timeout longer: a node whose
 * connect hangs (a frozen link completes TCP in the kernel's backlog, then
 * AUTH or the TLS handshake gets no answer) must not hold up the quorum of
 * the others. Such a connect is abandoned: it finishes on its own (by the
 * connect timeout), pools its connection if it got one and frees the job;
 * the engine's close waits for it. One connect per node is in flight at a
 * time, so a frozen node costs one thread, not one per round. */
typedef struct {
    rl_eng *e;
    rl_node *nd;
    int64_t deadline;
    rconn *c;                /* the result, when done */
    int rc;
    char msg[200];
    int done, abandoned;     /* under e->cj_mu */
} conn_job;

static void *conn_run(void *arg) {
    conn_job *j = arg;
    rl_eng *e = j->e;
    rconn *c = NULL;
    rconn_set_abort_fd(e->cj_stopfd); /* close ends an abandoned connect at once */
    int rc = rconn_open(&j->nd->cfg, &c, j->deadline);
    node_connected(j->nd, rc == 0);
    const baton_error *le = baton_error_last();
    pthread_mutex_lock(&e->cj_mu);
    j->rc = rc;
    j->c = c;
    if (rc) snprintf(j->msg, sizeof j->msg, "%s", le->message && *le->message ? le->message : baton_strerror(rc));
    j->done = 1;
    int abandoned = j->abandoned;
    pthread_cond_broadcast(&e->cj_cv);
    pthread_mutex_unlock(&e->cj_mu);
    if (!abandoned) return NULL; /* the round takes the result and frees the job */
    pthread_mutex_lock(&j->nd->mu);
    j->nd->connecting--;
    pthread_mutex_unlock(&j->nd->mu);
    if (c) pool_put(j->nd, c);
    free(j);
    /* last: the engine may be freed once the count reaches 0 */
    pthread_mutex_lock(&e->cj_mu);
    e->cj_live--;
    pthread_cond_broadcast(&e->cj_cv);
    pthread_mutex_unlock(&e->cj_mu);
    return NULL;
}

/* Gives every RS_ON slot a connection, or fails it, by HARD (0 = none);
 * GRACE: how long to wait for the remaining connects once enough slots
 * have one. */
static void connect_all(rl_eng *e, rl_slot *s, int all_nodes, int64_t hard, int64_t grace) {
    conn_job *jobs[RL_MAX_NODES];
    size_t slot_of[RL_MAX_NODES];
    size_t nj = 0;
    int64_t now = baton_now_ns();
    unsigned char down[RL_MAX_NODES];
    size_t on = 0, ndown = 0, have = 0;
    for (size_t i = 0; i < e->n; i++) {
        down[i] = 0;
        if (s[i].state != RS_ON) continue;
        on++;
        if (!all_nodes && node_down(&e->nodes[i], now)) {
            down[i] = 1;
            ndown++;
        }
    }
    /* Skipping the nodes that just failed must leave enough for a quorum. */
    if (ndown && on - ndown < e->quorum) memset(down, 0, sizeof down);
    sigset_t all, old;
    sigfillset(&all);
    for (size_t i = 0; i < e->n; i++) {
        if (s[i].state != RS_ON) continue;
        rl_node *nd = &e->nodes[i];
        s[i].c = pool_pop(nd);
        if (s[i].c) {
            have++;
            continue;
        }
        if (down[i]) {
            slot_fail(&s[i], BATON_EUNAVAILABLE, "%s: not reachable (the last connect failed; retrying shortly)",
                      nd->label);
            continue;
        }
        /* A node whose last connect failed is probed by one connect at a
         * time (no thread storm against a black hole); a healthy one gets a
         * connect per call that finds no idle connection, as many calls at
         * once as the caller runs (a pool of async workers, 32 threads). */
        pthread_mutex_lock(&nd->mu);
        int busy = nd->connecting > 0 && nd->fails > 0;
        if (!busy) nd->connecting++;
        pthread_mutex_unlock(&nd->mu);
        if (busy) {
            slot_fail(&s[i], BATON_EUNAVAILABLE, "%s: not reachable (a connect to it is still in flight)", nd->label);
            continue;
        }
        conn_job *j = calloc(1, sizeof *j);
        pthread_t th;
        pthread_attr_t ta;
        int started = 0;
        if (j) {
            j->e = e;
            j->nd = nd;
            j->deadline = now + (int64_t)nd->cfg.connect_timeout_ms * 1000000;
            if (hard > 0 && hard < j->deadline) j->deadline = hard;
            pthread_attr_init(&ta);
            pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
            pthread_sigmask(SIG_BLOCK, &all, &old); /* the thread takes no process signals */
            started = pthread_create(&th, &ta, conn_run, j) == 0;
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            pthread_attr_destroy(&ta);
        }
        if (!started) {
            free(j);
            pthread_mutex_lock(&nd->mu);
            nd->connecting--;
            pthread_mutex_unlock(&nd->mu);
            slot_fail(&s[i], BATON_ENOMEM, "%s: cannot start a connect thread", nd->label);
            continue;
        }
        slot_of[nj] = i;
        jobs[nj++] = j;
    }
    if (nj == 0) return;
    size_t want = on < e->quorum ? on : e->quorum;
    int64_t enough_at = 0;
    pthread_mutex_lock(&e->cj_mu);
    for (;;) {
        size_t done = 0, ok = have;
        for (size_t k = 0; k < nj; k++) {
            done += jobs[k]->done;
            ok += jobs[k]->done && !jobs[k]->rc;
        }
        if (done == nj) break;
        now = baton_now_ns();
        if (ok >= want && !enough_at) enough_at = now;
        int64_t until = INT64_MAX;
        if (hard > 0) until = hard;
        if (enough_at && enough_at + grace < until) until = enough_at + grace;
        if (now >= until) break;
        struct timespec ts = { (time_t)(until / 1000000000LL), (long)(until % 1000000000LL) };
        if (until == INT64_MAX) pthread_cond_wait(&e->cj_cv, &e->cj_mu);
        else pthread_cond_timedwait(&e->cj_cv, &e->cj_mu, &ts);
    }
    for (size_t k = 0; k < nj; k++) {
        conn_job *j = jobs[k];
        if (!j->done) {
            j->abandoned = 1;
            e->cj_live++;
            jobs[k] = NULL;
        }
    }
    pthread_mutex_unlock(&e->cj_mu);
    for (size_t k = 0; k < nj; k++) {
        rl_slot *sl = &s[slot_of[k]];
        rl_node *nd = &e->nodes[slot_of[k]];
        conn_job *j = jobs[k];
        if (!j) {
            slot_fail(sl, BATON_EUNAVAILABLE, "%s: no connection within the call's time (still connecting)", nd->label);
            continue;
        }
        pthread_mutex_lock(&nd->mu);
        nd->connecting--;
        pthread_mutex_unlock(&nd->mu);
        if (j->rc) slot_fail(sl, j->rc, "%s: %s", nd->label, j->msg);
        else sl->c = j->c;
        free(j);
    }
}

/* ---- one round ------------------------------------------------------------------ */

#ifdef BATON_TEST_HOOKS
/* Test builds only (see redlock_int.h). */
static void test_pause(rl_eng *e) {
    if (e->pause_ms < 0) {
        raise(SIGSTOP);
        return;
    }
    struct timespec ts = { e->pause_ms / 1000, (long)(e->pause_ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}
#endif

typedef struct {
    const char *argv[4 + 2 * 8];
    size_t lens[4 + 2 * 8];
    int argc;
    char nk[8];
} cmdv;

static void build_cmd(const rl_call *call, int eval, cmdv *v) {
    if (call->raw) {
        v->argc = 0;
        for (int i = 0; i < call->nraw && i < 8; i++) v->argv[v->argc++] = call->raw[i];
        for (int i = 0; i < v->argc; i++) v->lens[i] = strlen(v->argv[i]);
        return;
    }
    snprintf(v->nk, sizeof v->nk, "%d", call->nkeys);
    v->argc = 0;
    v->argv[v->argc++] = eval ? "EVAL" : "EVALSHA";
    v->argv[v->argc++] = eval ? call->body : call->sha;
    v->argv[v->argc++] = v->nk;
    for (int i = 0; i < call->nkeys && i < 8; i++) v->argv[v->argc++] = call->keys[i];
    for (int i = 0; i < call->nargs && i < 8; i++) v->argv[v->argc++] = call->args[i];
    for (int i = 0; i < v->argc; i++) v->lens[i] = strlen(v->argv[i]);
}

/* Takes the slot's reply if a complete one is in. 1 = the slot is settled or
 * waits for a resent request, 0 = nothing yet. */
static int take_reply(rl_eng *e, rl_slot *s, rl_node *nd, const rl_call *call, int64_t deadline) {
    redisReply *r = NULL;
    int g = rconn_next_reply(s->c, &r);
    if (g < 0) {
        slot_fail_last(s, nd, g);
        return 1;
    }
    if (g == 0) return 0;
    if (r->type == REDIS_REPLY_ERROR) {
        if (!s->evaled && !call->raw && r->str && !strncmp(r->str, "NOSCRIPT", 8)) {
            rreply_free(r);
            cmdv v;
            build_cmd(call, 1, &v);
            s->evaled = 1;
            int rc = rconn_send(s->c, v.argc, v.argv, v.lens, deadline);
            if (rc) slot_fail_last(s, nd, rc);
            return 1;
        }
        int code = rreply_error(r, "script failed");
        rreply_free(r);
        slot_fail_last(s, nd, code);
        return 1;
    }
    (void)e;
    s->reply = r;
    s->state = RS_DONE;
    return 1;
}

void rl_round(rl_eng *e, rl_slot *s, const rl_call *call, const rl_round_opts *o, int64_t *first_sent) {
    int64_t timeout_ns = o->timeout_ns, grace_ns = o->grace_ns, hard_deadline = o->hard_deadline;
    size_t enough = o->enough;
    if (first_sent) *first_sent = 0;
    connect_all(e, s, o->all_nodes, hard_deadline, timeout_ns);

    cmdv v;
    build_cmd(call, 0, &v);
    int64_t first = 0;
    for (size_t i = 0; i < e->n; i++) {
        if (s[i].state != RS_ON) continue;
        if (!first) first = baton_now_ns();
        int rc = rconn_send(s[i].c, v.argc, v.argv, v.lens, first + timeout_ns);
        s[i].sent = 1; /* even a failed write may have delivered it */
        if (rc) slot_fail_last(&s[i], &e->nodes[i], rc);
        else s[i].state = RS_SENT;
    }
    if (first_sent) *first_sent = first;
    if (!first) return;
#ifdef BATON_TEST_HOOKS
    if (o->hook != RL_HOOK_NONE && o->hook == e->pause_at) test_pause(e);
#endif

    int64_t deadline = first + timeout_ns, grace_end = deadline + grace_ns;
    if (hard_deadline > 0 && hard_deadline < deadline) deadline = hard_deadline;
    if (hard_deadline > 0 && hard_deadline < grace_end) grace_end = hard_deadline;
    for (;;) {
        struct pollfd pf[RL_MAX_NODES];
        size_t map[RL_MAX_NODES], np = 0;
        for (size_t i = 0; i < e->n; i++) {
            if (s[i].state != RS_SENT) continue;
            pf[np].fd = s[i].c->fd;
            pf[np].events = POLLIN;
            pf[np].revents = 0;
            map[np++] = i;
        }
        if (!np) break;
        int64_t left = deadline - baton_now_ns();
        if (left < 0) left = 0;
        struct timespec ts = { left / 1000000000LL, left % 1000000000LL };
        int r = ppoll(pf, np, &ts, NULL);
        if (r < 0) {
            if (errno == EINTR) continue;
            int en = errno;
            for (size_t k = 0; k < np; k++) {
                s[map[k]].c->broken = 1;
                slot_fail(&s[map[k]], BATON_EUNAVAILABLE, "%s: poll failed: %s", e->nodes[map[k]].label,
                          strerror(en));
            }
            break;
        }
        if (r == 0) {
            if (left > 0) continue;
            if (grace_end > deadline) {
                size_t done = 0;
                for (size_t i = 0; i < e->n; i++) done += s[i].state == RS_DONE;
                if (done < enough) {
                    deadline = grace_end; /* too few answers yet: wait for the slow ones */
                    continue;
                }
            }
            /* Past the deadline and nothing more arrived: the rest timed out. */
            for (size_t k = 0; k < np; k++) {
                s[map[k]].c->broken = 1; /* a late reply would be read as the next one */
                slot_fail(&s[map[k]], BATON_EUNAVAILABLE, "%s: no reply within %lld ms", e->nodes[map[k]].label,
                          (long long)((deadline - first) / 1000000));
            }
            break;
        }
        for (size_t k = 0; k < np; k++) {
            if (!pf[k].revents) continue;
            size_t i = map[k];
            rl_slot *sl = &s[i];
            /* Read what is there, then take a reply even if the read ended
             * in EOF (the reply may have come just before the close). */
            int rc = rconn_read_avail(sl->c);
            int took = take_reply(e, sl, &e->nodes[i], call, deadline);
            if (!took && rc) slot_fail_last(sl, &e->nodes[i], rc);
        }
    }
}

void rl_slots_reset(rl_eng *e, rl_slot *s) {
    for (size_t i = 0; i < e->n; i++) {
        if (s[i].reply) rreply_free(s[i].reply);
        if (s[i].c) {
            if (s[i].state == RS_SENT || s[i].state == RS_ON) s[i].c->broken = 1;
            pool_put(&e->nodes[i], s[i].c);
        }
        memset(&s[i], 0, sizeof s[i]);
    }
}

/* ---- one node alone ------------------------------------------------------------- */

int rl_node_conn(rl_eng *e, size_t i, rconn **out, int64_t deadline) {
    rl_node *nd = &e->nodes[i];
    int64_t cd = baton_now_ns() + (int64_t)nd->cfg.connect_timeout_ms * 1000000;
    int rc;
    (void)e;
    if ((*out = pool_pop(nd))) return 0;
    rc = rconn_open(&nd->cfg, out, deadline < cd ? deadline : cd);
    node_connected(nd, rc == 0);
    return rc;
}

void rl_node_conn_put(rl_eng *e, size_t i, rconn *c) { pool_put(&e->nodes[i], c); }

/* ---- nodes ------------------------------------------------------------------------- */

int rl_nodes_init(rl_eng *e) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int bad = pthread_mutex_init(&e->cj_mu, NULL) != 0;
    if (!bad && pthread_cond_init(&e->cj_cv, &ca) != 0) {
        pthread_mutex_destroy(&e->cj_mu);
        bad = 1;
    }
    pthread_condattr_destroy(&ca);
    if (bad) return baton_seterr(BATON_ENOMEM, 0, "redlock: mutex init failed");
    e->cj_stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (e->cj_stopfd < 0) {
        pthread_cond_destroy(&e->cj_cv);
        pthread_mutex_destroy(&e->cj_mu);
        return baton_seterr(BATON_ENOMEM, errno, "redlock: eventfd failed: %s", strerror(errno));
    }
    e->cj_init = 1;
    for (size_t i = 0; i < e->n; i++) {
        rl_node *nd = &e->nodes[i];
        if (pthread_mutex_init(&nd->mu, NULL) != 0) return baton_seterr(BATON_ENOMEM, 0, "redlock: mutex init failed");
        int rc = rsub_init(&nd->sub, &nd->cfg);
        if (rc) {
            pthread_mutex_destroy(&nd->mu);
            return rc;
        }
        nd->sub_init = 1;
    }
    return 0;
}

void rl_nodes_destroy(rl_eng *e) {
    if (e->cj_init) {
        /* abandoned connects end at once (their waits watch cj_stopfd) */
        uint64_t one = 1;
        ssize_t n;
        do n = write(e->cj_stopfd, &one, sizeof one); while (n < 0 && errno == EINTR);
        pthread_mutex_lock(&e->cj_mu);
        while (e->cj_live > 0) pthread_cond_wait(&e->cj_cv, &e->cj_mu);
        pthread_mutex_unlock(&e->cj_mu);
        pthread_cond_destroy(&e->cj_cv);
        pthread_mutex_destroy(&e->cj_mu);
        close(e->cj_stopfd);
        e->cj_init = 0;
    }
    for (size_t i = 0; i < e->n; i++) {
        rl_node *nd = &e->nodes[i];
        if (!nd->sub_init) continue;
        rsub_destroy(&nd->sub);
        for (size_t k = 0; k < nd->nidle; k++) rconn_free(nd->idle[k]);
        nd->nidle = 0;
        pthread_mutex_destroy(&nd->mu);
        nd->sub_init = 0;
    }
}
