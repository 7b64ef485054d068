/* baton check: one client process. Forked by the checker, it opens its own
 * baton client (nothing of the parent's is shared) and runs the cycle
 *
 *   WAIT, acquire, GRANT(fence), READ -> reply, work, held()?, WRITING -> GO,
 *   WRITE, RELEASE
 *
 * reporting each step to the checker on FD. A careful user checks
 * baton_lock_held() before writing: a holder that finds it lost writes
 * nothing (CHECKLOST). The checker may stop this process at any point
 * (SIGSTOP, SIGKILL); that is the test.
 *
 * --queue: the acquire is a put of an item of its own, then a take of the
 * oldest item (anyone's); the release is its done. --group: the acquire is
 * a join under an id of its own, the release a leave; lane 0 joins nothing
 * and lists the members over and over instead (lister()). */
#include "check.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const check_opts *o;
    int fd;
    baton_client *c;
    baton_lock *l;               /* PRIM_LOCK, or the side of the rwlock this client takes */
    baton_rwlock *rw;
    baton_permits *pm;
    baton_queue *q;              /* --queue */
    baton_queue_item *it;        /* the item this client holds */
    baton_group *g;              /* --group */
    long seq;                    /* items put / joins made: a key is (pid, seq) */
    int64_t ka, kb;              /* the key of the item held / of this membership */
    char id[BATON_PERMIT_ID_SIZE];
    int writer;
    int64_t permit_until;        /* a permit's lease as this client counts it */
    int holding;                 /* between GRANT and RELEASE */
    uint64_t fence;
} cclient;

static void tell(int fd, int type, int rc, int64_t t, uint64_t fence, int64_t a, int64_t b)
{
    check_msg m = { type, rc, t, fence, a, b };
    /* one packet; a checker that is gone ends us (EPIPE: MSG_NOSIGNAL) */
    while (send(fd, &m, sizeof m, MSG_NOSIGNAL) < 0) {
        if (errno == EINTR) continue;
        _exit(0);
    }
}

/* The next message from the checker; a QUIT or a closed socket ends us. */
static void hear(cclient *k, check_msg *m);

static int release(cclient *k);
static void finish(cclient *k, int code) __attribute__((noreturn));
static void finish(cclient *k, int code)
{
    /* a QUIT in the middle of a grant: the hold ends here, before the free
     * below gives the lock back (the checker's record must not make it
     * longer than it was) */
    if (k->holding) {
        int rc;
        tell(k->fd, M_RELEASE, 0, now_ns(), k->fence, 0, 0);
        /* released here rather than by the free: a grant that was gone
         * (a holder stopped past its lease when the run ended) shows as
         * a refused release, as it would in the middle of a run */
        k->holding = 0;
        rc = release(k);
        tell(k->fd, M_RELEASED, rc, now_ns(), k->fence, 0, 0);
    }
    baton_rwlock_free(k->rw);
    if (!k->rw) baton_lock_free(k->l);
    baton_permits_free(k->pm);
    baton_queue_item_free(k->it);   /* gives it back */
    baton_queue_free(k->q);
    baton_group_free(k->g);
    baton_client_close(k->c);
    close(k->fd);
    _exit(code);
}

static void hear(cclient *k, check_msg *m)
{
    ssize_t n;
    do n = recv(k->fd, m, sizeof *m, 0);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof *m || m->type == M_QUIT) finish(k, 0);
}

/* A QUIT waiting for us before the next acquire. */
static void quit_if_asked(cclient *k)
{
    check_msg m;
    ssize_t n = recv(k->fd, &m, sizeof m, MSG_DONTWAIT);
    if (n == 0 || (n == (ssize_t)sizeof m && m.type == M_QUIT)) finish(k, 0);
}

static void on_lost(baton_lock *l, void *payload)
{
    cclient *k = payload;
    (void)l;
    tell(k->fd, M_LOST, 0, now_ns(), 0, 0, 0);
}

static void item_lost(baton_queue_item *it, void *payload)
{
    cclient *k = payload;
    (void)it;
    tell(k->fd, M_LOST, 0, now_ns(), 0, 0, 0);
}

static void member_lost(baton_group *g, void *payload)
{
    cclient *k = payload;
    (void)g;
    tell(k->fd, M_LOST, 0, now_ns(), 0, 0, 0);
}

static void sleep_s(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
}

/* --queue: an item of ours at the tail, then the oldest item (whoever's). */
static int take(cclient *k)
{
    char data[64];
    int n, rc;
    k->seq++;
    n = snprintf(data, sizeof data, "baton-check %ld %ld", (long)getpid(), k->seq);
    if ((rc = baton_queue_put(k->q, data, (size_t)n))) return rc;
    tell(k->fd, M_PUT, 0, now_ns(), 0, (int64_t)getpid(), k->seq);
    if ((rc = baton_queue_take(k->q, &k->it, -1))) return rc;
    /* an item not ours (left by someone else): key 0 0 */
    if (coord_key_parse(baton_queue_item_data(k->it, NULL), 0, &k->ka, &k->kb)) {
        k->ka = 0;   /* an item not put by this run: keyed by its take's fence */
        k->kb = (int64_t)baton_queue_item_fence(k->it);
    }
    return 0;
}

static int join(cclient *k)
{
    char id[64];
    k->seq++;
    snprintf(id, sizeof id, "p%lds%ld", (long)getpid(), k->seq);
    k->ka = (int64_t)getpid();
    k->kb = k->seq;
    return baton_group_join(k->g, id, "");
}

static int acquire(cclient *k)
{
    uint32_t lease_ms = (uint32_t)(k->o->lease * 1000);
    if (k->q) return take(k);
    if (k->g) return join(k);
    if (k->pm) {
        int64_t sent = now_ns();
        int rc = baton_permits_acquire(k->pm, lease_ms, -1, k->id);
        /* a permit has no keeper: its lease counts from the request, less a
         * margin for clock drift, as for locks */
        k->permit_until = sent + (int64_t)lease_ms * 1000000 * 99 / 100 - 2000000;
        return rc;
    }
    return baton_lock_acquire(k->l, -1);
}

static uint64_t fence_of(cclient *k)
{
    if (k->q) return baton_queue_item_fence(k->it);
    if (k->g) return 0;
    return k->pm ? 0 : baton_lock_fence(k->l);
}

static int held(cclient *k)
{
    if (k->q) return baton_queue_item_held(k->it);
    if (k->g) return baton_group_is_member(k->g);
    return k->pm ? now_ns() < k->permit_until : baton_lock_held(k->l);
}

static int release(cclient *k)
{
    if (k->q) {
        int rc = baton_queue_done(k->it);   /* frees it, done or not */
        k->it = NULL;
        return rc;
    }
    if (k->g) return baton_group_leave(k->g);
    if (k->pm) {
        int rc = baton_permits_release(k->pm, k->id);
        k->id[0] = 0;
        return rc;
    }
    return baton_lock_release(k->l);
}

/* --group, lane 0: lists the members over and over, each listing told as
 * its members (M_LISTED) and its end (M_LISTEND), with its start time. */
static void lister(cclient *k) __attribute__((noreturn));
static void lister(cclient *k)
{
    baton_members m = { 0 };
    for (;;) {
        int64_t t0, t1;
        int rc;
        quit_if_asked(k);
        t0 = now_ns();
        rc = baton_group_members(k->g, &m);
        t1 = now_ns();
        if (rc) {
            if (rc == BATON_EINVAL || rc == BATON_ENOTSUP) {
                baton_members_clear(&m);
                tell(k->fd, M_FATAL, rc, now_ns(), 0, 0, 0);
                finish(k, cli_exit_for(rc));
            }
            tell(k->fd, M_ERROR, rc, t1, 0, 0, 0);
        } else {
            for (size_t i = 0; i < m.n; i++) {
                int64_t a = 0, b = 0;
                if (!coord_key_parse(m.members[i].id, 1, &a, &b)) tell(k->fd, M_LISTED, 0, t0, 0, a, b);
            }
            tell(k->fd, M_LISTEND, (int)m.n, t0, 0, t1, 0);
        }
        sleep_s(0.01);
    }
}

void check_client(const check_opts *o, int fd, int slot)
{
    cclient k;
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
    int rc;

    memset(&k, 0, sizeof k);
    k.o = o;
    k.fd = fd;
    /* the checker's SIGINT/SIGTERM are for the checker: it ends us with QUIT */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    lo.lease_ms = (uint32_t)(o->lease * 1000);
    lo.fair = o->fair;
    lo.on_lost = on_lost;
    lo.on_lost_payload = &k;
    co.lease_ms = lo.lease_ms;   /* -t also for etcd's client lease (the URI's ttl= wins) */
    if ((rc = baton_client_open(&k.c, o->uri, &co))) goto fatal;
    switch (o->prim) {
    case PRIM_LOCK:
        rc = baton_lock_open(&k.l, k.c, o->name, &lo);
        k.writer = 1;
        break;
    case PRIM_RWLOCK:
        /* even slots write, odd ones read: both sides contend */
        if (!(rc = baton_rwlock_open(&k.rw, k.c, o->name, &lo))) {
            k.writer = slot % 2 == 0;
            k.l = k.writer ? baton_rwlock_write(k.rw) : baton_rwlock_read(k.rw);
        }
        break;
    case PRIM_QUEUE: {
        baton_queue_options qo = BATON_QUEUE_OPTIONS_INIT;
        qo.lease_ms = lo.lease_ms;
        qo.on_lost = item_lost;
        qo.on_lost_payload = &k;
        rc = baton_queue_open(&k.q, k.c, o->name, &qo);
        break;
    }
    case PRIM_GROUP: {
        baton_group_options go = BATON_GROUP_OPTIONS_INIT;
        go.lease_ms = lo.lease_ms;
        go.on_lost = member_lost;
        go.on_lost_payload = &k;
        rc = baton_group_open(&k.g, k.c, o->name, &go);
        break;
    }
    default:
        rc = baton_permits_open(&k.pm, k.c, o->name);
        break;
    }
    if (rc) goto fatal;
    if (o->prim == PRIM_GROUP && slot == 0) lister(&k);

    for (;;) {
        check_msg m;
        int64_t t;
        uint64_t fence;

        quit_if_asked(&k);
        tell(fd, M_WAIT, k.writer, now_ns(), 0, 0, 0);
        if ((rc = acquire(&k))) {
            if (rc == BATON_EINVAL || rc == BATON_ENOTSUP || rc == BATON_EDISABLED) goto fatal;
            /* the engine is down (a server fault) or refused: say so, and again */
            tell(fd, M_ERROR, rc, now_ns(), 0, 0, 0);
            sleep_s(0.05);
            continue;
        }
        t = now_ns();
        fence = fence_of(&k);
        k.holding = 1;
        k.fence = fence;
        tell(fd, M_GRANT, k.writer, t, fence, k.ka, k.kb);
        tell(fd, M_READ, 0, now_ns(), fence, 0, 0);
        hear(&k, &m);
        if (m.type == M_READ_REPLY && !m.rc && k.writer) {
            int64_t fv = m.a, pv = m.b;
            sleep_s(o->work);
            /* the check a careful user makes before writing */
            t = now_ns();
            if (!held(&k)) {
                tell(fd, M_CHECKLOST, 0, t, fence, 0, 0);
            } else {
                tell(fd, M_WRITING, 0, t, fence, 0, 0);
                hear(&k, &m);
                tell(fd, M_WRITE, 0, now_ns(), fence, fv, pv);
                /* the checker reads each client's socket in turn, not in the
                 * order of time: the write must be done before the release
                 * lets the next holder read */
                hear(&k, &m);
            }
        } else if (m.type == M_READ_REPLY && !m.rc) {
            /* a reader (or a permit) reads, works and goes; still held by then? */
            sleep_s(o->work);
            t = now_ns();
            if (!held(&k)) tell(fd, M_CHECKLOST, 0, t, fence, 0, 0);
        }
        tell(fd, M_RELEASE, 0, now_ns(), fence, 0, 0);
        k.holding = 0;
        rc = release(&k);
        tell(fd, M_RELEASED, rc, now_ns(), fence, 0, 0);
    }

fatal:
    fprintf(stderr, "baton check: client %d: %s\n", slot, baton_error_last()->message);
    tell(fd, M_FATAL, rc, now_ns(), 0, 0, 0);
    finish(&k, cli_exit_for(rc));
}
