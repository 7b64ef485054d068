/* baton bench: many --async: N locks on one client cycling
 * acquire_async -> release_async on one loop thread (issue 27's
 * auto-pipelining target; docs/PERFORMANCE.md). Reports pairs/s, the
 * client's CPU per pair (getrusage: the loop thread and every engine
 * thread) and the sockets the client holds (/proc/self/fd). */
#include "bench.h"

#include <baton/adapters/poll.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct many_async many_async;

typedef struct {
    many_async *m;
    baton_lock *l;
} alock;

struct many_async {
    double end;
    long pairs;
    int inflight;            /* locks with an op started */
    int err;                 /* the first failure */
    alock *locks;
};

static void on_release(baton_lock *l, int rc, void *arg);

static void next_acquire(alock *a);

static void on_grant(baton_lock *l, int rc, void *arg)
{
    alock *a = arg;
    many_async *m = a->m;
    if (rc) {
        if (!m->err) {
            m->err = rc;
            fprintf(stderr, "baton bench: many --async: acquire: %s\n", baton_strerror(rc));
        }
        m->inflight--;
        return;
    }
    if ((rc = baton_lock_release_async(l, on_release, a))) {
        if (!m->err) m->err = rc;
        m->inflight--;
    }
}

static void on_release(baton_lock *l, int rc, void *arg)
{
    alock *a = arg;
    (void)l;
    if (rc && !a->m->err) {
        a->m->err = rc;
        fprintf(stderr, "baton bench: many --async: release: %s\n", baton_strerror(rc));
    }
    a->m->pairs++;
    a->m->inflight--;
    next_acquire(a);
}

static void next_acquire(alock *a)
{
    many_async *m = a->m;
    if (m->err || now_s() >= m->end) return;
    if (baton_lock_acquire_async(a->l, -1, on_grant, a) == 0) m->inflight++;
    else if (!m->err) m->err = baton_error_last()->code;
}

/* The sockets this process holds now. */
static int count_sockets(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    int n = 0;
    if (!d) return -1;
    while ((de = readdir(d))) {
        char p[300], t[64];
        ssize_t k;
        snprintf(p, sizeof p, "/proc/self/fd/%s", de->d_name);
        if ((k = readlink(p, t, sizeof t - 1)) > 0) {
            t[k] = 0;
            n += !strncmp(t, "socket:", 7);
        }
    }
    closedir(d);
    return n;
}

int w_many_async(bench_opts *o)
{
    int N = o->locks > 0 ? o->locks : 1000, rc = 0, socks = -1, base;
    baton_client *c = NULL;
    many_async m = { 0 };
    double t0, dt, u0, s0, u1, s1;
    char name[64], out[512];
    bench_raise_nofile();
    base = count_sockets();
    if (!(m.locks = calloc((size_t)N, sizeof *m.locks))) return EX_SOFTWARE;
    if ((rc = baton_client_open(&c, o->uri, NULL))) {
        fprintf(stderr, "baton bench: %s\n", baton_error_last()->message);
        rc = cli_exit_for(rc);
        goto out;
    }
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "bench-amany-%ld-%d", (long)getpid(), i);
        m.locks[i].m = &m;
        if ((rc = baton_lock_open(&m.locks[i].l, c, name, NULL))) {
            fprintf(stderr, "baton bench: %s\n", baton_error_last()->message);
            rc = cli_exit_for(rc);
            goto out;
        }
    }
    cpu_times(&u0, &s0);
    t0 = now_s();
    m.end = t0 + o->seconds;
    for (int i = 0; i < N; i++) next_acquire(&m.locks[i]);
    while (m.inflight > 0) {
        struct pollfd pfd;
        int t = -1;
        if ((rc = baton_poll_prepare(c, &pfd, &t))) break;
        if (t < 0 || t > 100) t = 100;
        poll(&pfd, 1, t);
        if ((rc = baton_poll_handle(c, &pfd)) < 0) break;
        rc = 0;
        if (socks < 0 && now_s() >= t0 + o->seconds / 2) socks = count_sockets() - base;
    }
    dt = now_s() - t0;
    cpu_times(&u1, &s1);
    if (rc || m.err) {
        rc = cli_exit_for(rc ? rc : m.err);   /* no rate of a run that stopped short */
        goto out;
    }
    snprintf(out, sizeof out, "{\"peer\": \"baton\", \"workload\": \"many-async\", \"locks\": %d, \"seconds\": %g, "
             "\"pairs_per_s\": %.1f, \"scripts_per_s\": %.1f, \"cpu_us_per_pair\": %.2f, \"sockets\": %d}",
             N, o->seconds, m.pairs / dt, 2 * m.pairs / dt, ((u1 - u0) + (s1 - s0)) / (m.pairs ? m.pairs : 1) * 1e6,
             socks);
    bench_emit(o, out);
out:
    for (int i = 0; i < N && m.locks; i++) baton_lock_free(m.locks[i].l);
    baton_client_close(c);
    free(m.locks);
    return rc;
}
