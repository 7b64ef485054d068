/*
 * Redis Sentinel: redis-sentinel://h1:26379,h2:26379/DB?master=NAME
 * (rediss-sentinel:// = TLS to the sentinels and the data nodes).
 *
 * The data connections (pool and subscriber, conn.c/sub.c) open through
 * rsentinel_open: it takes the master's address the sentinels last gave
 * (asking them, first that answers, when there is none), connects, and
 * checks the node's ROLE is master; a node that says slave (a demoted old
 * master, a sentinel that has not heard of the failover yet) drops the
 * address and the sentinels are asked again, until the call's deadline.
 *
 * A watcher thread keeps one sentinel connection subscribed to
 * +switch-master. A switch of our master (or, after the watcher reconnects,
 * an answer that differs from the address we had) replaces the address and
 * bumps the epoch: the pool and the subscriber drop connections of an older
 * epoch (connections to the old master, which may still take writes if it
 * was only cut off), and the engine's callback re-checks every held lock
 * (baton_host_recheck), so a holder whose grant did not reach the new
 * master is told LOST.
 */
#include "redis_int.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define RETRY_MS 50            /* between rounds while no master answers as one */
#define KEEPALIVE_NS (5LL * 1000000000LL)

struct rsentinel {
    pthread_mutex_t mu;
    char *name;                /* the master's name at the sentinels */
    rcfg *nodes;               /* the sentinels (own host; auth and TLS of their own) */
    size_t n;
    size_t next;               /* the sentinel to ask first (the last that answered) */
    char *host;                /* the master's address, NULL = ask */
    int port;
    unsigned epoch;            /* bumped at every change of address */
    void (*on_switch)(void *);
    void *arg;
    pthread_t thr;
    int started, stop;
    int stopfd;                /* eventfd: aborts the watcher's waits */
};

unsigned rsentinel_epoch(rsentinel *s) {
    return __atomic_load_n(&s->epoch, __ATOMIC_ACQUIRE);
}

const char *rsentinel_name(const rsentinel *s) { return s->name; }

int rsentinel_stale(const rcfg *cfg, const rconn *c) {
    return cfg->sentinel && c->epoch != rsentinel_epoch(cfg->sentinel);
}

/* Sets the master's address; 1 when it changed (epoch bumped). s->mu held. */
static int set_addr_locked(rsentinel *s, const char *host, int port) {
    if (s->host && !strcmp(s->host, host) && s->port == port) return 0;
    char *h = strdup(host);
    if (!h) return 0; /* keep the old one; the next round asks again */
    int had = s->host != NULL;
    free(s->host);
    s->host = h;
    s->port = port;
    __atomic_add_fetch(&s->epoch, 1, __ATOMIC_RELEASE);
    return had;
}

/* Forgets HOST:PORT as the master (it said it is not, or did not answer). */
static void drop_addr(rsentinel *s, const char *host, int port) {
    pthread_mutex_lock(&s->mu);
    if (s->host && !strcmp(s->host, host) && s->port == port) {
        free(s->host);
        s->host = NULL;
    }
    pthread_mutex_unlock(&s->mu);
}

static int is_str(const redisReply *r) {
    return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

/* SENTINEL get-master-addr-by-name on C: 0 and host/port, or an error. */
static int ask_on(rsentinel *s, rconn *c, const rcfg *node, char *host, size_t hn, int *port, int64_t deadline) {
    const char *argv[3] = { "SENTINEL", "get-master-addr-by-name", s->name };
    size_t lens[3] = { 8, 23, strlen(s->name) };
    redisReply *r = NULL;
    int rc = rconn_command(c, 3, argv, lens, &r, deadline);
    if (rc) return rc;
    if (r->type == REDIS_REPLY_ERROR) {
        rc = rreply_error(r, "SENTINEL get-master-addr-by-name");
    } else if (r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_ARRAY && r->elements == 0)) {
        rc = baton_seterr(BATON_EUNAVAILABLE, 0, "redis: sentinel %s:%d knows no master named '%s'", node->host,
                          node->port, s->name);
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !is_str(r->element[0]) ||
               !is_str(r->element[1]) || (*port = atoi(r->element[1]->str)) <= 0 || *port > 65535) {
        rc = baton_seterr(BATON_EPROTO, 0, "redis: unexpected reply from sentinel %s:%d", node->host, node->port);
    } else {
        snprintf(host, hn, "%s", r->element[0]->str);
    }
    rreply_free(r);
    return rc;
}

/* Asks the sentinels in turn (the last that answered first) for the master,
 * each by the connect timeout and DEADLINE; the first answer wins. */
static int ask(rsentinel *s, int64_t deadline, int *changed) {
    int rc = BATON_EUNAVAILABLE;
    pthread_mutex_lock(&s->mu);
    size_t first = s->next;
    pthread_mutex_unlock(&s->mu);
    for (size_t k = 0; k < s->n; k++) {
        size_t i = (first + k) % s->n;
        const rcfg *node = &s->nodes[i];
        int64_t dl = rmin64(deadline, rdeadline_ms(node->connect_timeout_ms));
        rconn *c = NULL;
        char host[256];
        int port = 0;
        rc = rconn_open(node, &c, dl);
        if (!rc) rc = ask_on(s, c, node, host, sizeof host, &port, rmin64(deadline, rdeadline_ms(node->io_timeout_ms)));
        rconn_free(c);
        if (rc) {
            /* said once per round: the last sentinel's reason */
            const baton_error *le = baton_error_last();
            char m[300];
            snprintf(m, sizeof m, "%s", le->message ? le->message : "?"); /* seterr rewrites it */
            baton_seterr(rc, le->native, "redis: no sentinel gave the master '%s' (sentinel %s:%d: %s)", s->name,
                         node->host, node->port, m);
        }
        if (rc == BATON_EAUTH || rc == BATON_ENOMEM) return rc;
        if (rc) continue;
        pthread_mutex_lock(&s->mu);
        s->next = i;
        *changed = set_addr_locked(s, host, port);
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    return rc ? rc : BATON_EUNAVAILABLE;
}

/* ROLE on C: 0 when the node is a master (or will not say: an ACL without
 * ROLE), BATON_EUNAVAILABLE when it is a replica. */
static int check_role(rconn *c, const char *host, int port, int64_t deadline) {
    const char *argv[1] = { "ROLE" };
    size_t lens[1] = { 4 };
    redisReply *r = NULL;
    int rc = rconn_command(c, 1, argv, lens, &r, deadline);
    if (rc) return rc;
    if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 && is_str(r->element[0]) &&
        strcasecmp(r->element[0]->str, "master") != 0)
        rc = baton_seterr(BATON_EUNAVAILABLE, 0, "redis: %s:%d is a %s, not the master (failover under way?)",
                          host, port, r->element[0]->str);
    rreply_free(r);
    return rc;
}

static void notify(rsentinel *s) {
    void (*fn)(void *);
    void *arg;
    pthread_mutex_lock(&s->mu);
    fn = s->on_switch;
    arg = s->arg;
    pthread_mutex_unlock(&s->mu);
    if (fn) fn(arg);
}

/* Sleeps MS (bounded by DEADLINE); 0, or -1 when the watcher is stopping. */
static int pause_ms(rsentinel *s, int ms, int64_t deadline) {
    int64_t left = (deadline - baton_now_ns()) / 1000000;
    if (left < ms) ms = left > 0 ? (int)left : 0;
    struct pollfd p = { .fd = s->stopfd, .events = POLLIN, .revents = 0 };
    return poll(&p, 1, ms) > 0 ? -1 : 0;
}

int rsentinel_open(const rcfg *cfg, rconn **out, int64_t deadline) {
    rsentinel *s = cfg->sentinel;
    char why[512] = "";
    int why_rc = 0;
    *out = NULL;
    for (;;) {
        char host[256];
        int port = 0, changed = 0, rc = 0;
        pthread_mutex_lock(&s->mu);
        if (s->host) snprintf(host, sizeof host, "%s", s->host), port = s->port;
        unsigned epoch = s->epoch;
        pthread_mutex_unlock(&s->mu);
        if (!port) {
            rc = ask(s, deadline, &changed);
            if (changed) notify(s);
            if (rc == BATON_EAUTH || rc == BATON_ENOMEM) return rc;
            if (!rc) continue;
        } else {
            rcfg node = *cfg;
            node.sentinel = NULL;
            node.host = host;
            node.port = port;
            rconn *c = NULL;
            rc = rconn_open(&node, &c, deadline);
            if (!rc) rc = check_role(c, host, port, rmin64(deadline, rdeadline_ms(cfg->io_timeout_ms)));
            if (!rc) {
                c->epoch = epoch;
                *out = c;
                return 0;
            }
            rconn_free(c);
            if (rc == BATON_EAUTH || rc == BATON_ENOMEM) return rc;
            drop_addr(s, host, port);
        }
        /* A round cut short by the deadline says less than the one before. */
        if (rc && (!why_rc || baton_now_ns() < deadline)) {
            snprintf(why, sizeof why, "%s", baton_error_last()->message ? baton_error_last()->message : "");
            why_rc = rc;
        }
        if (baton_now_ns() >= deadline || pause_ms(s, RETRY_MS, deadline) < 0)
            return baton_seterr(why_rc ? why_rc : BATON_EUNAVAILABLE, ETIMEDOUT, "%s",
                                why[0] ? why : "redis: no master by the deadline");
    }
}

/* ---- the watcher --------------------------------------------------------- */

/* Handles one reply on the watcher's subscribed connection. */
static void on_message(rsentinel *s, const redisReply *r) {
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || !is_str(r->element[0]) ||
        strcasecmp(r->element[0]->str, "message") != 0 || !is_str(r->element[2]))
        return;
    char name[256], oip[256], nip[256];
    int oport, nport;
    const char *ch = is_str(r->element[1]) ? r->element[1]->str : "";
    if (!strcmp(ch, "+promoted-slave")) {
        /* "slave <ip:port> <new-ip> <new-port> @ <name> <old-ip> <old-port>": the
         * chosen replica now answers ROLE master. +switch-master comes only
         * once the other replicas are reconfigured (seconds later), and the
         * old master, if it is up, takes writes until the sentinels demote
         * it: moving now shortens the time a client may still write there. */
        if (sscanf(r->element[2]->str, "%*s %*s %255s %d @ %255s %255s %d", nip, &nport, name, oip, &oport) != 5)
            return;
    } else if (sscanf(r->element[2]->str, "%255s %255s %d %255s %d", name, oip, &oport, nip, &nport) != 5) {
        return; /* +switch-master: "<name> <old-ip> <old-port> <new-ip> <new-port>" */
    }
    if (strcmp(name, s->name) != 0 || nport <= 0 || nport > 65535) return;
    pthread_mutex_lock(&s->mu);
    int changed = set_addr_locked(s, nip, nport);
    pthread_mutex_unlock(&s->mu);
    if (changed)
        baton_log(BATON_LOG_INFO, "redis: sentinel: master '%s' moved from %s:%d to %s:%d (%s)", name, oip, oport, nip,
                  nport, ch + 1);
    if (changed) notify(s);
}

/* One session of the watcher on sentinel I: ask (to catch up on a switch
 * missed while disconnected), subscribe, read until the connection fails. */
static void watch_one(rsentinel *s, size_t i) {
    const rcfg *node = &s->nodes[i];
    rconn *c = NULL;
    char host[256];
    int port = 0, changed = 0;
    if (rconn_open(node, &c, rdeadline_ms(node->connect_timeout_ms)) != 0) return;
    if (ask_on(s, c, node, host, sizeof host, &port, rdeadline_ms(node->io_timeout_ms)) == 0) {
        pthread_mutex_lock(&s->mu);
        changed = set_addr_locked(s, host, port);
        pthread_mutex_unlock(&s->mu);
        if (changed) notify(s);
    }
    const char *argv[3] = { "SUBSCRIBE", "+switch-master", "+promoted-slave" };
    size_t lens[3] = { 9, 14, 15 };
    int rc = rconn_send(c, 3, argv, lens, rdeadline_ms(node->io_timeout_ms));
    int64_t last_rx = baton_now_ns(), ping_sent = 0;
    while (!rc) {
        pthread_mutex_lock(&s->mu);
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        struct pollfd p[2] = {
            { .fd = s->stopfd, .events = POLLIN, .revents = 0 },
            { .fd = c->fd, .events = POLLIN, .revents = 0 },
        };
        int pr = poll(p, 2, 1000);
        if (pr < 0 && errno != EINTR) break;
        if (pr > 0 && p[0].revents) break;
        if (pr > 0 && p[1].revents) {
            if ((rc = rconn_read_avail(c)) != 0) break;
            last_rx = baton_now_ns();
            ping_sent = 0; /* anything read shows the sentinel alive */
            for (;;) {
                redisReply *r = NULL;
                int g = rconn_next_reply(c, &r);
                if (g <= 0) { rc = g; break; }
                on_message(s, r);
                rreply_free(r);
            }
        }
        int64_t now = baton_now_ns();
        if (ping_sent && now - ping_sent > (int64_t)node->io_timeout_ms * 1000000) break;
        if (!ping_sent && now - last_rx > KEEPALIVE_NS) {
            const char *pa[1] = { "PING" };
            size_t pl[1] = { 4 };
            rc = rconn_send(c, 1, pa, pl, rdeadline_ms(node->io_timeout_ms));
            ping_sent = now;
        }
    }
    c->broken = 1;
    rconn_free(c);
}

static void *watch_main(void *arg) {
    rsentinel *s = arg;
    rconn_set_abort_fd(s->stopfd);
    for (size_t i = 0;; i = (i + 1) % s->n) {
        pthread_mutex_lock(&s->mu);
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        watch_one(s, i);
        if (pause_ms(s, RETRY_MS, INT64_MAX) < 0) break;
    }
    return NULL;
}

int rsentinel_watch(rsentinel *s, void (*fn)(void *), void *arg) {
    pthread_mutex_lock(&s->mu);
    s->on_switch = fn;
    s->arg = arg;
    int rc = 0;
    if (!s->started) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old); /* the thread takes no process signals */
        if (pthread_create(&s->thr, NULL, watch_main, s) == 0) s->started = 1;
        else rc = baton_seterr(BATON_ENOMEM, 0, "redis: cannot start the sentinel watcher");
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void rsentinel_stop(rsentinel *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    int started = s->started;
    s->started = 0;
    s->on_switch = NULL;
    pthread_mutex_unlock(&s->mu);
    if (!started) return;
    uint64_t one = 1;
    ssize_t n;
    do n = write(s->stopfd, &one, sizeof one); while (n < 0 && errno == EINTR);
    pthread_join(s->thr, NULL);
}

void rsentinel_free(rsentinel *s) {
    if (!s) return;
    rsentinel_stop(s);
    for (size_t i = 0; i < s->n; i++) {
        free(s->nodes[i].host);
        free(s->nodes[i].user);
        free(s->nodes[i].password);
    }
    free(s->nodes);
    free(s->name);
    free(s->host);
    if (s->stopfd >= 0) close(s->stopfd);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int rsentinel_new(rsentinel **out, const rcfg *data, const baton_uri *u, const char *name, const char *user,
                  const char *password) {
    *out = NULL;
    if (!name || !*name)
        return baton_seterr(BATON_EINVAL, 0, "redis: a sentinel URI needs ?master=NAME (the name the sentinels monitor)");
    if (!u->nhosts) return baton_seterr(BATON_EINVAL, 0, "redis: a sentinel URI needs at least one sentinel host");
    rsentinel *s = calloc(1, sizeof *s);
    if (!s) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    s->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_mutex_init(&s->mu, NULL);
    s->name = strdup(name);
    s->nodes = calloc(u->nhosts, sizeof *s->nodes);
    int ok = s->stopfd >= 0 && s->name && s->nodes;
    for (size_t i = 0; ok && i < u->nhosts; i++) {
        rcfg *nc = &s->nodes[i];
        s->n++;
        nc->host = strdup(u->hosts[i].host ? u->hosts[i].host : "");
        nc->port = u->hosts[i].port ? u->hosts[i].port : 26379;
        nc->user = user ? strdup(user) : NULL;
        nc->password = password ? strdup(password) : NULL;
        nc->tls = data->tls;
        nc->insecure = data->insecure;
        nc->ssl_ctx = data->ssl_ctx; /* shared, owned by the engine */
        nc->connect_timeout_ms = data->connect_timeout_ms;
        nc->io_timeout_ms = data->io_timeout_ms;
        ok = nc->host && *nc->host && (!user || nc->user) && (!password || nc->password);
    }
    if (!ok) {
        int bad_host = s->nodes && s->n && s->nodes[s->n - 1].host && !*s->nodes[s->n - 1].host;
        rsentinel_free(s);
        return bad_host ? baton_seterr(BATON_EINVAL, 0, "redis: empty sentinel host")
                        : baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    }
    *out = s;
    return 0;
}
