/*
 * Internal declarations shared by the Redis backend modules:
 *   conn.c   sockets, TLS, RESP round trips, the connection pool
 *   sub.c    the per-client subscriber thread (pub/sub wake-ups)
 *   redis.c  URI/options, lock scripts, the backend table
 */
#ifndef BATON_REDIS_INT_H
#define BATON_REDIS_INT_H

#include "baton/sys/backend.h"

#include <hiredis/hiredis.h>
#include "util/ossl.h"
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rcluster rcluster;
typedef struct rsentinel rsentinel;

/* Where and how to connect. Owned by the engine, read-only after open. */
typedef struct {
    char *host;
    int port;
    char *user;              /* NULL = AUTH with password only */
    char *password;          /* NULL = no AUTH */
    int db;                  /* SELECT when non-zero */
    int tls;
    int insecure;            /* TLS without verification (only when asked) */
    SSL_CTX *ssl_ctx;        /* when tls */
    int connect_timeout_ms;
    int io_timeout_ms;
    rcluster *cluster;       /* redis-cluster:// (cluster.c); NULL: one server */
    char *unix_path;         /* redis+unix://: connect to this socket, not host:port */
    rsentinel *sentinel;     /* redis-sentinel://: host/port come from the sentinels (sentinel.c) */
} rcfg;

/* One connection: a socket, optionally TLS, and a RESP reader. */
typedef struct rconn {
    int fd;
    SSL *ssl;
    redisReader *rd;
    int broken;              /* set on any I/O or protocol error: never reused */
    struct rroute *route;    /* cluster: a routing handle (fd -1), see cluster.c */
    unsigned epoch;          /* sentinel: the master's address epoch it was opened in */
} rconn;

/* Redis Cluster (cluster.c). A pooled connection of a cluster client is a
 * routing handle: rconn_command sends each command to the master of its
 * keys' hash slot and follows MOVED/ASK; rconn_open with a cluster config
 * opens a plain connection to the first node that answers. */
/* The cluster of a redis[s]-cluster:// URI U into CFG->cluster (CFG parsed
 * already: TLS, AUTH, timeouts); BATON_EINVAL for a database other than 0. */
int baton__redis_cluster_config(rcfg *cfg, const baton_uri *u);
int rcluster_new(rcluster **out, const rcfg *base, const char *const *hosts, const int *ports, size_t n);
void rcluster_free(rcluster *cl);
int rcluster_slot(const char *key, size_t len);
int rcluster_open_any(rcluster *cl, rconn **out, int64_t deadline_ns);
int rcluster_conn_new(rcluster *cl, rconn **out, int64_t deadline_ns);
void rcluster_conn_free(rconn *c);
void rcluster_conn_prune(rconn *c, int (*alive)(rconn *));
int rcluster_command(rconn *c, int argc, const char **argv, const size_t *lens, redisReply **out,
                     int64_t deadline_ns);
/* Calls FN(ARG, conn) on a connection to every master of the slot map (from
 * routing handle C) until FN returns nonzero, which is returned. */
int rcluster_each_master(rconn *c, int64_t deadline_ns, int (*fn)(void *arg, rconn *node), void *arg);
/* The index (< RSUB_MAX_NODES) and config of the master serving KEY's slot
 * in the map (re-read by DEADLINE when the slot is unknown; 0: never), or -1. */
#define RSUB_MAX_NODES 64
int rcluster_node_of(rcluster *cl, const char *key, size_t len, const rcfg **cfg, int64_t deadline_ns);
/* FN(ARG) is called (from any thread, so it must only signal) whenever a
 * node's connection is lost or a slot is seen to have moved (MOVED,
 * CLUSTERDOWN): a failover may have taken a lock this client holds.
 * rcluster_take_changed says (once) whether that happened since last asked. */
void rcluster_set_notify(rcluster *cl, void (*fn)(void *), void *arg);
/* A "MOVED slot host:port" answer seen outside rcluster_command (a
 * subscription): the map notes the slot's new master. */
void rcluster_note_moved(rcluster *cl, const char *err);
/* The map may be out of date (a node dropped its sharded subscribers). */
void rcluster_stale(rcluster *cl);
int rcluster_take_changed(rcluster *cl);

/* Option values and derived key names, shared by the Redis and RedLock backends. */
int rparse_int(const char *s, long lo, long hi, long *out);   /* 0 or -1 */
int rparse_bool(const char *s, int *out);                     /* 0 or -1 */
/* Redisson's rule for derived names: "prefix:{key}", or "prefix:key" when the
 * key already carries a hash tag, so every key of a lock shares one slot. */
char *baton__redis_prefixed(const char *prefix, const char *key);
/* FN(ARG, name, calls) for each "cmdstat_NAME:calls=N,..." line of an INFO
 * commandstats reply (redis.c; RedLock reads its nodes' with it too). */
void baton__redis_cmdstats(const char *s, size_t len, void (*fn)(void *arg, const char *op, uint64_t count),
                           void *arg);

/* The operator's list (admin.c; RedLock walks its nodes with it too). */
/* Copies S into OUT (room for 2 * strlen(S) + 1) with the glob characters of
 * SCAN MATCH / PSUBSCRIBE escaped. */
void baton__redis_glob_escape(char *out, const char *s);
/* 1 when KEY is one of the side keys a lock keeps beside it (fence counters,
 * holder descriptions, fair queues, writer intents): never a lock name. */
int baton__redis_side_key(const char *key);
/* Sorts NAMES (N of them), drops repeats and calls FN on each until it
 * returns nonzero. */
void baton__redis_names_emit(char **names, size_t n, int (*fn)(void *arg, const char *name), void *arg);
/* Walks the keys matching PATTERN on C with SCAN, by DEADLINE, and calls
 * FN(ARG, key, what) for each lock of the layout (SIMPLE: the SET NX layout
 * too) that the list script (BATON_LUA_LIST, whose SHA1 is LIST_SHA) finds:
 * WHAT is "#" for a lock hash, "=" and the value for a string. FN returns 0
 * or an error code, which ends the walk. A key may come twice. */
int baton__redis_scan_locks(rconn *c, const char *list_sha, const char *pattern, int simple, int64_t deadline,
                            int (*fn)(void *arg, const char *key, const char *what), void *arg);

/* Deadline helpers (monotonic ns). */
int64_t rdeadline_ms(int ms);
int64_t rmin64(int64_t a, int64_t b);

/* conn.c */
int rconn_open(const rcfg *cfg, rconn **out, int64_t deadline_ns);
void rconn_free(rconn *c);
/* Sends one command and reads its reply (which may be an error reply). */
int rconn_command(rconn *c, int argc, const char **argv, const size_t *lens,
                  redisReply **out, int64_t deadline_ns);
/* Writes one formatted command (subscriber). */
int rconn_send(rconn *c, int argc, const char **argv, const size_t *lens, int64_t deadline_ns);
/* Reads whatever is available without blocking into the reader.
 * Returns 0 (possibly nothing read), or an error code (EOF, I/O, TLS). */
int rconn_read_avail(rconn *c);
/* Takes the next complete reply from the reader: 1 = *out set, 0 = none yet, <0 = error. */
int rconn_next_reply(rconn *c, redisReply **out);
/* Makes every wait of this thread's rconn calls end (as a timeout) once FD
 * is readable; -1 = none. */
void rconn_set_abort_fd(int fd);
/* Frees a reply from rconn_command / rconn_next_reply. */
void rreply_free(void *reply);
/* Maps a server error reply to a baton code and sets the thread's error. */
int rreply_error(const redisReply *r, const char *what);
int rtls_ctx_new(SSL_CTX **out, const char *cacert, const char *cert, const char *key, int insecure);

/* The subscriber (sub.c). */
typedef struct rsub_entry rsub_entry;
typedef struct rchan rchan;

typedef struct rsub_s {
    pthread_mutex_t mu;
    pthread_t thr;
    int started;
    int stop;
    int evfd;                /* eventfd: wakes the subscriber thread */
    int stopfd;              /* eventfd: written once at destroy; aborts the thread's I/O waits */
    rchan *chans;
    const rcfg *cfg;
    void (*on_reconnect)(void *arg);   /* rsub_watch */
    void *on_reconnect_arg;
    int said_noperm;         /* the ACL refusal was reported once */
    unsigned msg_serial;     /* messages received (one keyspace wake per message) */
    /* Cluster (sub.c): this rsub's own connection goes to any node (classic
     * PUBLISH is broadcast, PSUBSCRIBE patterns); sharded channels
     * (SSUBSCRIBE) and node-local ones (keyspace events) go to a child rsub
     * per master, made on first use, whose PARENT is this one. */
    struct rsub_s *node[RSUB_MAX_NODES];
    struct rsub_s *parent;
    int node_idx;
} rsub;

int rsub_init(rsub *s, const rcfg *cfg);
void rsub_destroy(rsub *s);
/* Registers W for messages on CHANNEL (PATTERN: a PSUBSCRIBE glob); the
 * subscriber wakes W on every message, on subscription confirmation and when
 * its connection is lost. */
int rsub_register(rsub *s, const char *channel, int pattern, baton_waiter *w, rsub_entry **out);
/* The same, but a message wakes W only when WANT(ARG, payload, len) says 1
 * (called on the subscriber thread with its mutex held: it must not block or
 * call back into the subscriber). Confirmations and a lost connection wake W
 * regardless. ARG must outlive the registration. */
typedef int (*rsub_want_fn)(void *arg, const char *payload, size_t len);
int rsub_register_want(rsub *s, const char *channel, int pattern, baton_waiter *w, rsub_want_fn want,
                       void *want_arg, rsub_entry **out);
/* 1 when the channel's subscription is confirmed on the live connection. */
int rsub_ready(rsub *s, rsub_entry *e);
void rsub_unregister(rsub *s, rsub_entry *e);
/* 1 and the payload (truncated to RSUB_MSG_MAX - 1) of the last message on
 * E's channel when one arrived since E registered or last took one; 0 if not. */
#define RSUB_MSG_MAX 48
int rsub_message(rsub *s, rsub_entry *e, char *buf, size_t n);
/* Registers W on CHANNEL only if its subscription is live right now (a
 * lingering one): 1 and *out set, else 0 and nothing registered. */
int rsub_register_ready(rsub *s, const char *channel, int pattern, baton_waiter *w, rsub_entry **out);
/* On a cluster: registers W on CHANNEL (classic SUBSCRIBE) on the master of
 * ROUTE_KEY's slot (keyspace events are node-local), else as rsub_register_want. */
int rsub_register_node(rsub *s, const char *channel, const char *route_key, baton_waiter *w, rsub_want_fn want,
                       void *want_arg, rsub_entry **out);
/* On a cluster: when *E is not on the master its channel's slot has now
 * (a failover, a MOVED answer), registers W again there and frees the old
 * entry. 1 when it moved *E. */
int rsub_reroute(rsub *s, rsub_entry **e, baton_waiter *w);
/* One-wake registrations (the plain lock's waiters; sub.c's top comment has
 * the rules). rsub_register_one: like rsub_register (no pattern), but a
 * message wakes only the oldest waiter of the channel that holds no wake
 * (or nobody, when a waiter already woken has yet to attempt); a
 * confirmation or a lost connection still wakes all. rsub_register_ready_one:
 * the same for rsub_register_ready. A one-wake waiter must tell the
 * subscriber about its attempts, whoever drives it (a parked thread or an
 * async callback):
 *   rsub_attempt         right before each attempt is sent;
 *   rsub_attempt_failed  the attempt was answered "held" and it waits on
 *                        (if a message came meanwhile, its waiter was woken
 *                        again: it must attempt once more, not park);
 *   rsub_granted         the attempt got the lock (before rsub_unregister).
 * rsub_unregister without rsub_granted after a wake passes the wake on to
 * the next waiter (timeout, cancel, error). All three are no-ops on other
 * entries (and on NULL). */
int rsub_register_one(rsub *s, const char *channel, baton_waiter *w, rsub_entry **out);
int rsub_register_ready_one(rsub *s, const char *channel, baton_waiter *w, rsub_entry **out);
void rsub_attempt(rsub *s, rsub_entry *e);
void rsub_attempt_failed(rsub *s, rsub_entry *e);
void rsub_granted(rsub *s, rsub_entry *e);
/* rsub_register_node, for a keyspace channel whose wanted messages mean
 * "WAKE may be free": each is delivered as one wake on channel WAKE's
 * one-wake waiters on the same subscriber (once per message, however many
 * entries want it), or wakes W itself when WAKE has none there (a cluster
 * whose key and channel live on different masters). */
int rsub_register_node_for(rsub *s, const char *channel, const char *route_key, const char *wake, baton_waiter *w,
                           rsub_want_fn want, void *want_arg, rsub_entry **out);
/* Keeps the subscriber connected from now on (starting its thread), and calls
 * FN(ARG) on that thread, with no lock held, each time it connects again after
 * losing the connection: the server may have restarted or failed over, so
 * what the client holds must be re-checked. 0 or BATON_ENOMEM. */
int rsub_watch(rsub *s, void (*fn)(void *), void *arg);

/* Sentinel (sentinel.c). rconn_open goes through rsentinel_open when
 * cfg->sentinel is set: the master the sentinels name, checked with ROLE. */
int rsentinel_new(rsentinel **out, const rcfg *data, const baton_uri *u, const char *name, const char *user,
                  const char *password);
void rsentinel_free(rsentinel *s);
int rsentinel_open(const rcfg *cfg, rconn **out, int64_t deadline_ns);
/* Starts the +switch-master watcher; FN(ARG) runs on its thread after every
 * change of the master's address. */
int rsentinel_watch(rsentinel *s, void (*fn)(void *), void *arg);
void rsentinel_stop(rsentinel *s);
unsigned rsentinel_epoch(rsentinel *s);
const char *rsentinel_name(const rsentinel *s);
/* 1 when C was opened to a master the sentinels have since replaced. */
int rsentinel_stale(const rcfg *cfg, const rconn *c);

/* The connection pool (conn.c). */
typedef struct {
    pthread_mutex_t mu;
    rconn **idle;
    size_t nidle, cap;
    const rcfg *cfg;
} rpool;

int rpool_init(rpool *p, const rcfg *cfg);
void rpool_destroy(rpool *p);
/* An idle live connection, or a new one (connecting by the earlier of
 * DEADLINE and the connect timeout). */
int rpool_get(rpool *p, rconn **out, int64_t deadline);
void rpool_put(rpool *p, rconn *c);

#endif
