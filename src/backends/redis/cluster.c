/*
 * Redis Cluster (redis-cluster://h1:p1,h2:p2,... and rediss-cluster://).
 *
 * The engine above this file does not know it talks to a cluster: a pooled
 * connection of a cluster client is a *routing handle* (an rconn whose
 * `route` is set) that keeps one real connection per master, opened on first
 * use. rconn_command on a handle finds the hash slot of the command's keys
 * (EVAL/EVALSHA: every key must be in one slot, else BATON_ENOTSUP before
 * anything is sent), sends it to the master the slot map names, and follows
 * the cluster's answers:
 *
 *   MOVED slot host:port  the slot has a new owner: note it, refresh the map
 *                         (at most every RC_REFRESH_GAP_MS), retry there;
 *   ASK slot host:port    the slot is being migrated and the key has moved:
 *                         ASKING + the command on the target, once;
 *   TRYAGAIN              a multi-key command during a migration whose keys
 *                         are split: retry shortly;
 *   CLUSTERDOWN           failover under way: retry shortly, map refreshed;
 *   connect refused       the master is gone: refresh the map, retry.
 *
 * Each of these means the command was not executed, so it is retried; a
 * command that was sent and got no answer is never re-sent (the caller's
 * uncertain-grant clean-up handles it, as on one node). The retries are
 * bounded by RC_MAX_REDIRECTS and by the call's deadline.
 *
 * Commands without a key (WAIT, PING, INFO, SCRIPT) go to the node this
 * handle used last, so WAIT follows the grant it confirms. Scripts are loaded
 * per node (EVALSHA, EVAL on NOSCRIPT: the caller's fallback is routed too).
 *
 * A plain connection (rconn_open with a cluster config: the subscriber's) is
 * opened to the first node that answers: classic PUBLISH is broadcast to every
 * node of a cluster, so a pattern subscription anywhere hears it. Sharded
 * channels (SPUBLISH) and keyspace events are heard only on the slot's
 * master: sub.c keeps a subscriber connection per master for them
 * (rcluster_node_of).
 */
#include "redis_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define RC_SLOTS 16384
#define RC_MAX_NODES 64
#define RC_MAX_REDIRECTS 16
#define RC_REFRESH_GAP_MS 100
#define RC_RETRY_SLEEP_MS 50

typedef struct {
    rcfg cfg;                /* the base config with this node's host and port, cluster NULL */
} rnode;

struct rcluster {
    pthread_mutex_t mu;
    const rcfg *base;
    rnode *node[RC_MAX_NODES];   /* append-only: indices stay valid */
    int nnode;
    int nseed;                   /* the first nseed nodes are the URI's */
    short slot[RC_SLOTS];        /* owning node index, -1 = unknown */
    int64_t refreshed_ns;
    void (*notify)(void *);      /* rcluster_set_notify */
    void *notify_arg;
    int changed;                 /* a node was lost / a slot moved since rcluster_take_changed */
};

typedef struct rroute {
    rcluster *cl;
    rconn *c[RC_MAX_NODES];
    int last;                    /* the node of the last answered command, -1 none */
} rroute;

/* ---- hash slots ---------------------------------------------------------- */

/* CRC16-CCITT (XMODEM), the cluster's key hash. */
static uint16_t crc16(const char *buf, size_t len) {
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++) crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

int rcluster_slot(const char *key, size_t len) {
    /* The hash tag: the part between the first '{' and the next '}', when
     * not empty; else the whole key. */
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t rest = len - (size_t)(open + 1 - key);
        const char *close = memchr(open + 1, '}', rest);
        if (close && close > open + 1) return crc16(open + 1, (size_t)(close - open - 1)) & (RC_SLOTS - 1);
    }
    return crc16(key, len) & (RC_SLOTS - 1);
}

/* ---- nodes and the slot map ---------------------------------------------- */

/* The index of HOST:PORT, added if new; -1 when the table is full or out of
 * memory. Called with mu held. */
static int node_index(rcluster *cl, const char *host, int port) {
    for (int i = 0; i < cl->nnode; i++)
        if (cl->node[i]->cfg.port == port && !strcmp(cl->node[i]->cfg.host, host)) return i;
    if (cl->nnode >= RC_MAX_NODES) return -1;
    rnode *n = calloc(1, sizeof *n);
    if (!n) return -1;
    n->cfg = *cl->base;
    n->cfg.cluster = NULL;
    n->cfg.host = strdup(host);
    n->cfg.port = port;
    if (!n->cfg.host) { free(n); return -1; }
    cl->node[cl->nnode] = n;
    return cl->nnode++;
}

static void sleep_until(int64_t until, int ms) {
    int64_t now = baton_now_ns(), end = rmin64(until, now + (int64_t)ms * 1000000);
    if (end <= now) return;
    struct timespec ts = { (time_t)((end - now) / 1000000000), (long)((end - now) % 1000000000) };
    nanosleep(&ts, NULL);
}

/* Applies one CLUSTER SLOTS reply (FROM: the index of the node that gave it,
 * for entries without a host). 0, or -1 when the reply has no usable entry. */
static int apply_slots(rcluster *cl, const redisReply *r, int from) {
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) return -1;
    short map[RC_SLOTS];
    for (int i = 0; i < RC_SLOTS; i++) map[i] = -1;
    int used = 0;
    pthread_mutex_lock(&cl->mu);
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY ||
            e->element[2]->elements < 2 || e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        const redisReply *m = e->element[2];
        const char *host = m->element[0]->type == REDIS_REPLY_STRING && m->element[0]->len > 0 &&
                                   strcmp(m->element[0]->str, "?") != 0
                               ? m->element[0]->str
                               : cl->node[from]->cfg.host;
        int idx = node_index(cl, host, (int)m->element[1]->integer);
        if (idx < 0 || lo < 0 || hi >= RC_SLOTS || lo > hi) continue;
        for (long long s = lo; s <= hi; s++) map[s] = (short)idx;
        used = 1;
    }
    if (used) {
        memcpy(cl->slot, map, sizeof map);
        cl->refreshed_ns = baton_now_ns();
    }
    pthread_mutex_unlock(&cl->mu);
    return used ? 0 : -1;
}

/* Node FROM's CLUSTER SLOTS reply R (freed here) into the map: 0, or the
 * error that says why not (BATON_EAUTH / BATON_EINVAL end the search). */
static int slots_reply(rcluster *cl, redisReply *r, int from, const rcfg *nc) {
    if (r->type == REDIS_REPLY_ERROR) {
        int code = rreply_error(r, "CLUSTER SLOTS");
        rreply_free(r);
        if (code != BATON_EAUTH && strstr(baton_error_last()->message, "cluster support disabled"))
            return baton_seterr(BATON_EINVAL, 0, "redis: %s:%d is not a cluster node (cluster-enabled no); "
                                "use redis:// for a single server", nc->host, nc->port);
        return code == BATON_EAUTH ? code : BATON_EUNAVAILABLE;
    }
    int rc = apply_slots(cl, r, from);
    rreply_free(r);
    if (rc) return baton_seterr(BATON_EUNAVAILABLE, 0, "redis: %s:%d serves no slot yet", nc->host, nc->port);
    return 0;
}

/* Asks the nodes, the URI's first, for the slot map (CLUSTER SLOTS) until one
 * answers, by DEADLINE. FORCE = even if refreshed within RC_REFRESH_GAP_MS. */
static int refresh(rcluster *cl, int64_t deadline, int force) {
    pthread_mutex_lock(&cl->mu);
    int n = cl->nnode;
    int fresh = !force && cl->refreshed_ns &&
                baton_now_ns() - cl->refreshed_ns < (int64_t)RC_REFRESH_GAP_MS * 1000000;
    pthread_mutex_unlock(&cl->mu);
    if (fresh) return 0;
    char why[300] = ""; /* the last node's reason, for the final error */
    for (int i = 0; i < n && baton_now_ns() < deadline; i++) {
        rconn *c = NULL;
        const rcfg *nc = &cl->node[i]->cfg;
        /* a short connect per node, so one dead seed does not eat the call */
        int64_t dl = rmin64(deadline, rdeadline_ms(nc->connect_timeout_ms < 500 ? nc->connect_timeout_ms : 500));
        int rc = rconn_open(nc, &c, dl);
        /* an untrusted certificate or refused credentials will not change
         * on the next node: said as it is (as on redis://), not as "no node
         * answered" */
        if (rc == BATON_EAUTH || rc == BATON_ENOMEM) return rc;
        if (!rc) {
            const char *argv[2] = { "CLUSTER", "SLOTS" };
            size_t lens[2] = { 7, 5 };
            redisReply *r = NULL;
            rc = rconn_command(c, 2, argv, lens, &r, rmin64(deadline, rdeadline_ms(nc->io_timeout_ms)));
            rconn_free(c);
            if (!rc) rc = slots_reply(cl, r, i, nc);
            if (rc == 0 || rc == BATON_EAUTH || rc == BATON_EINVAL) return rc;
        }
        const baton_error *le = baton_error_last();
        snprintf(why, sizeof why, "%s", le->message ? le->message : "?");
    }
    return baton_seterr(BATON_EUNAVAILABLE, 0, "redis: no node of the cluster answered CLUSTER SLOTS (%s:%d first; last: %s)",
                        cl->node[0]->cfg.host, cl->node[0]->cfg.port, why[0] ? why : "the call's deadline passed");
}

int rcluster_new(rcluster **out, const rcfg *base, const char *const *hosts, const int *ports, size_t n) {
    *out = NULL;
    rcluster *cl = calloc(1, sizeof *cl);
    if (!cl) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    if (pthread_mutex_init(&cl->mu, NULL) != 0) { free(cl); return baton_seterr(BATON_ENOMEM, 0, "redis: mutex init failed"); }
    cl->base = base;
    for (int i = 0; i < RC_SLOTS; i++) cl->slot[i] = -1;
    for (size_t i = 0; i < n; i++) {
        if (node_index(cl, hosts[i], ports[i]) < 0) {
            rcluster_free(cl);
            return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory (or more than %d cluster nodes)", RC_MAX_NODES);
        }
    }
    cl->nseed = cl->nnode;
    *out = cl;
    return 0;
}

void rcluster_free(rcluster *cl) {
    if (!cl) return;
    for (int i = 0; i < cl->nnode; i++) {
        free(cl->node[i]->cfg.host);
        free(cl->node[i]);
    }
    pthread_mutex_destroy(&cl->mu);
    free(cl);
}

/* ---- failovers seen (the reconnect re-check) ----------------------------- */

/* A node's connection was lost, or a slot answered MOVED/CLUSTERDOWN: a
 * failover may have dropped a grant the replica had not received, on any
 * master, not only the subscriber's. The subscriber thread is told (it runs
 * the re-check with no lock held; this may be a renewal's own thread). */
static void note_change(rcluster *cl) {
    pthread_mutex_lock(&cl->mu);
    cl->changed = 1;
    void (*fn)(void *) = cl->notify;
    void *arg = cl->notify_arg;
    pthread_mutex_unlock(&cl->mu);
    if (fn) fn(arg);
}

void rcluster_set_notify(rcluster *cl, void (*fn)(void *), void *arg) {
    pthread_mutex_lock(&cl->mu);
    cl->notify = fn;
    cl->notify_arg = arg;
    pthread_mutex_unlock(&cl->mu);
}

int rcluster_take_changed(rcluster *cl) {
    pthread_mutex_lock(&cl->mu);
    int c = cl->changed;
    cl->changed = 0;
    pthread_mutex_unlock(&cl->mu);
    return c;
}

int rcluster_node_of(rcluster *cl, const char *key, size_t len, const rcfg **cfg, int64_t deadline) {
    int slot = rcluster_slot(key, len);
    for (int pass = 0; pass < 2; pass++) {
        pthread_mutex_lock(&cl->mu);
        int idx = cl->slot[slot];
        if (idx >= 0) *cfg = &cl->node[idx]->cfg;
        pthread_mutex_unlock(&cl->mu);
        if (idx >= 0 && idx < RSUB_MAX_NODES) return idx;
        if (pass || !deadline || refresh(cl, deadline, 0)) break;
    }
    return -1;
}

/* ---- plain connections (the subscriber) --------------------------------- */

int rcluster_open_any(rcluster *cl, rconn **out, int64_t deadline) {
    pthread_mutex_lock(&cl->mu);
    int n = cl->nnode;
    pthread_mutex_unlock(&cl->mu);
    int rc = BATON_EUNAVAILABLE;
    for (int i = 0; i < n; i++) {
        int64_t dl = deadline;
        /* all but the last candidate get a share of the time */
        if (i + 1 < n) dl = rmin64(deadline, rdeadline_ms(500));
        if (!(rc = rconn_open(&cl->node[i]->cfg, out, dl))) return 0;
        if (rc == BATON_EAUTH) return rc;
    }
    return rc;
}

/* ---- routing handles ------------------------------------------------------- */

int rcluster_conn_new(rcluster *cl, rconn **out, int64_t deadline) {
    *out = NULL;
    pthread_mutex_lock(&cl->mu);
    int known = cl->refreshed_ns != 0;
    pthread_mutex_unlock(&cl->mu);
    if (!known) {
        int rc = refresh(cl, rmin64(deadline, rdeadline_ms(cl->base->connect_timeout_ms + cl->base->io_timeout_ms)), 1);
        if (rc) return rc;
    }
    rconn *c = calloc(1, sizeof *c);
    rroute *rt = calloc(1, sizeof *rt);
    if (!c || !rt) {
        free(c);
        free(rt);
        return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    }
    c->fd = -1;
    rt->cl = cl;
    rt->last = -1;
    c->route = rt;
    *out = c;
    return 0;
}

void rcluster_conn_free(rconn *c) {
    rroute *rt = c->route;
    for (int i = 0; i < RC_MAX_NODES; i++)
        if (rt->c[i]) rconn_free(rt->c[i]);
    free(rt);
    c->route = NULL;
}

void rcluster_conn_prune(rconn *c, int (*alive)(rconn *)) {
    rroute *rt = c->route;
    for (int i = 0; i < RC_MAX_NODES; i++) {
        if (rt->c[i] && (rt->c[i]->broken || !alive(rt->c[i]))) {
            rt->c[i]->broken = 1;
            note_change(rt->cl);
            rconn_free(rt->c[i]);
            rt->c[i] = NULL;
        }
    }
}

/* The slot of a command's keys: -1 = no key (any node); -2 = keys in
 * different slots (error set). */
static int command_slot(int argc, const char **argv, const size_t *lens) {
    static const char *const keyless[] = { "PING", "INFO", "WAIT", "SCAN", "SCRIPT", "CLUSTER", "ROLE", "TIME",
                                           "DBSIZE", "CONFIG", "CLIENT", "ECHO", "ASKING", "READONLY", "KEYS",
                                           "FLUSHALL", "FLUSHDB", "COMMAND", "HELLO", "PUBLISH", NULL };
    if (argc < 2) return -1;
    for (int i = 0; keyless[i]; i++)
        if (!strcasecmp(argv[0], keyless[i])) return -1;
    if (!strcasecmp(argv[0], "EVALSHA") || !strcasecmp(argv[0], "EVAL") || !strcasecmp(argv[0], "EVALSHA_RO") ||
        !strcasecmp(argv[0], "EVAL_RO") || !strcasecmp(argv[0], "FCALL")) {
        long nk = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
        if (nk <= 0 || nk > argc - 3) return -1;
        int s = rcluster_slot(argv[3], lens[3]);
        for (long i = 1; i < nk; i++) {
            if (rcluster_slot(argv[3 + i], lens[3 + i]) != s) {
                baton_seterr(BATON_ENOTSUP, 0,
                             "redis: cluster: the keys '%.80s' and '%.80s' of one operation are in different hash "
                             "slots; put the shared part of the names in {braces} (a hash tag)",
                             argv[3], argv[3 + i]);
                return -2;
            }
        }
        return s;
    }
    return rcluster_slot(argv[1], lens[1]);
}

/* Parses "MOVED 3999 127.0.0.1:6381" / "ASK ...": the node index, -1 if bad. */
static int redirect_target(rcluster *cl, const char *s, int *slot) {
    const char *p = strchr(s, ' ');
    if (!p) return -1;
    *slot = (int)strtol(p + 1, NULL, 10);
    const char *a = strchr(p + 1, ' ');
    if (!a) return -1;
    a++;
    const char *colon = strrchr(a, ':');
    if (!colon || colon == a) return -1;
    char host[256];
    size_t hl = (size_t)(colon - a);
    if (hl >= sizeof host) return -1;
    memcpy(host, a, hl);
    host[hl] = 0;
    int port = (int)strtol(colon + 1, NULL, 10);
    pthread_mutex_lock(&cl->mu);
    int idx = node_index(cl, host, port);
    pthread_mutex_unlock(&cl->mu);
    return idx;
}

void rcluster_stale(rcluster *cl) {
    pthread_mutex_lock(&cl->mu);
    cl->refreshed_ns = 0;
    pthread_mutex_unlock(&cl->mu);
    note_change(cl);
}

void rcluster_note_moved(rcluster *cl, const char *err) {
    int slot = -1, to = redirect_target(cl, err, &slot);
    if (to < 0 || slot < 0 || slot >= RC_SLOTS) return;
    pthread_mutex_lock(&cl->mu);
    cl->slot[slot] = (short)to;
    cl->refreshed_ns = 0; /* the next call re-reads the whole map */
    pthread_mutex_unlock(&cl->mu);
    note_change(cl);
}

/* The node for SLOT (-1: the handle's last, else any mapped one). */
static int pick_node(rroute *rt, int slot) {
    rcluster *cl = rt->cl;
    pthread_mutex_lock(&cl->mu);
    int idx = slot >= 0 ? cl->slot[slot] : rt->last;
    if (idx < 0)
        for (int s = 0; s < RC_SLOTS && idx < 0; s++) idx = cl->slot[s];
    if (idx < 0 && cl->nnode) idx = 0;
    pthread_mutex_unlock(&cl->mu);
    return idx;
}

/* The handle's connection to node IDX, opened if need be. */
static int node_conn(rroute *rt, int idx, rconn **out, int64_t deadline) {
    if (rt->c[idx] && rt->c[idx]->broken) {
        rconn_free(rt->c[idx]);
        rt->c[idx] = NULL;
    }
    if (!rt->c[idx]) {
        const rcfg *nc = &rt->cl->node[idx]->cfg;
        int rc = rconn_open(nc, &rt->c[idx], rmin64(deadline, rdeadline_ms(nc->connect_timeout_ms)));
        if (rc) return rc;
    }
    *out = rt->c[idx];
    return 0;
}

static int is_err(const redisReply *r, const char *prefix) {
    return r->type == REDIS_REPLY_ERROR && r->str && !strncmp(r->str, prefix, strlen(prefix));
}

int rcluster_command(rconn *h, int argc, const char **argv, const size_t *lens, redisReply **out, int64_t deadline) {
    rroute *rt = h->route;
    rcluster *cl = rt->cl;
    *out = NULL;
    int slot = command_slot(argc, argv, lens);
    if (slot == -2) return BATON_ENOTSUP;
    int idx = pick_node(rt, slot), asking = 0, rc = 0, waits = 0;
    for (int tries = 0; tries < RC_MAX_REDIRECTS; tries++) {
        if (idx < 0) {
            if ((rc = refresh(cl, deadline, 1))) return rc;
            if ((idx = pick_node(rt, slot)) < 0)
                return baton_seterr(BATON_EUNAVAILABLE, 0, "redis: cluster: no node serves slot %d", slot);
        }
        rconn *c = NULL;
        if ((rc = node_conn(rt, idx, &c, deadline))) {
            /* Nothing was sent: the master may be gone (failover); ask the
             * others who owns the slot now, and try again while time is left. */
            if (rc == BATON_EAUTH) return rc;
            note_change(cl);
            if (baton_now_ns() >= deadline) return rc;
            sleep_until(deadline, RC_RETRY_SLEEP_MS);
            refresh(cl, deadline, 1);
            idx = pick_node(rt, slot);
            continue;
        }
        if (asking) {
            const char *aa[1] = { "ASKING" };
            size_t al[1] = { 6 };
            redisReply *ar = NULL;
            if ((rc = rconn_command(c, 1, aa, al, &ar, deadline))) return rc;
            rreply_free(ar);
            asking = 0;
        }
        redisReply *r = NULL;
        if ((rc = rconn_command(c, argc, argv, lens, &r, deadline))) {
            /* Sent without an answer: not retried (it may have run). The map
             * is re-read at the next call, in case the node failed over. */
            pthread_mutex_lock(&cl->mu);
            cl->refreshed_ns = 0;
            pthread_mutex_unlock(&cl->mu);
            note_change(cl);
            return rc;
        }
        if (is_err(r, "MOVED ") || is_err(r, "ASK ")) {
            int s = -1, to = redirect_target(cl, r->str, &s);
            int moved = r->str[0] == 'M';
            rreply_free(r);
            if (to < 0) return baton_seterr(BATON_EPROTO, 0, "redis: cluster: bad redirection");
            if (moved) {
                pthread_mutex_lock(&cl->mu);
                if (s >= 0 && s < RC_SLOTS) cl->slot[s] = (short)to;
                pthread_mutex_unlock(&cl->mu);
                note_change(cl);
                refresh(cl, deadline, 0);
            } else {
                asking = 1;
            }
            idx = to;
            continue;
        }
        if (is_err(r, "TRYAGAIN") || is_err(r, "CLUSTERDOWN")) {
            int down = r->str[0] == 'C';
            if (baton_now_ns() + (int64_t)RC_RETRY_SLEEP_MS * 1000000 >= deadline) {
                *out = r; /* the caller maps it to BATON_EUNAVAILABLE */
                return 0;
            }
            rreply_free(r);
            if (down) note_change(cl);
            sleep_until(deadline, down ? RC_RETRY_SLEEP_MS * 2 : RC_RETRY_SLEEP_MS / 5);
            if (down) refresh(cl, deadline, 1);
            idx = pick_node(rt, slot);
            if (++waits < 1000) tries--; /* bounded by the deadline, not the redirect count */
            continue;
        }
        rt->last = idx;
        *out = r;
        return 0;
    }
    if (!rc) rc = baton_seterr(BATON_EUNAVAILABLE, 0, "redis: cluster: more than %d redirections for one command",
                               RC_MAX_REDIRECTS);
    return rc;
}

/* The masters of the map, for commands every node must see (list, stats):
 * calls FN(ARG, conn) with the handle's connection to each, until it returns
 * nonzero. */
int rcluster_each_master(rconn *h, int64_t deadline, int (*fn)(void *arg, rconn *c), void *arg) {
    rroute *rt = h->route;
    rcluster *cl = rt->cl;
    int seen[RC_MAX_NODES] = { 0 }, rc = refresh(cl, deadline, 0);
    if (rc) return rc;
    pthread_mutex_lock(&cl->mu);
    for (int s = 0; s < RC_SLOTS; s++)
        if (cl->slot[s] >= 0) seen[cl->slot[s]] = 1;
    pthread_mutex_unlock(&cl->mu);
    for (int i = 0; i < RC_MAX_NODES; i++) {
        if (!seen[i]) continue;
        rconn *c = NULL;
        if ((rc = node_conn(rt, i, &c, deadline))) return rc;
        if ((rc = fn(arg, c))) return rc;
    }
    return 0;
}

int baton__redis_cluster_config(rcfg *cfg, const baton_uri *u) {
    if (cfg->db != 0)
        return baton_seterr(BATON_EINVAL, 0, "redis: a cluster has database 0 only (got /%d in %s)", cfg->db,
                            u->redacted ? u->redacted : "the uri");
    size_t n = u->nhosts ? u->nhosts : 1;
    const char **hosts = calloc(n, sizeof *hosts);
    int *ports = calloc(n, sizeof *ports);
    int rc = 0;
    if (!hosts || !ports) {
        rc = baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const char *h = u->nhosts ? u->hosts[i].host : u->host;
        int p = u->nhosts ? u->hosts[i].port : u->port;
        if (!h || !*h || p < 0 || p > 65535) {
            rc = baton_seterr(BATON_EINVAL, 0, "redis: bad host or port in %s", u->redacted ? u->redacted : "the uri");
            goto out;
        }
        hosts[i] = h;
        ports[i] = p ? p : 6379;
    }
    rc = rcluster_new(&cfg->cluster, cfg, hosts, ports, n);
out:
    free(hosts);
    free(ports);
    return rc;
}
