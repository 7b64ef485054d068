/*
 * Internal declarations shared by the etcd backend modules:
 *   gw.c    the transport: etcd's v3 JSON gateway (POST /v3/...) over libcurl
 *           + jansson; a pool of keep-alive easy handles, endpoint failover,
 *           auth tokens, error mapping, base64, and the watch stream; with
 *           transport=grpc the same calls go to h2.c instead
 *   h2.c    gRPC over HTTP/2 (nghttp2; h2c, or TLS with ALPN h2 through
 *           src/util/ossl.c's dlopen'd OpenSSL): connections, streams, framing
 *   pb.c    the gateway's JSON <-> etcd's protobuf messages
 *   etcd.c  URI/options, the client's lease and its keep-alive thread,
 *           identity/describe and the backend table
 *   lock.c  the mutex in the layout of etcd's concurrency.Mutex, election
 *   rw.c    the read-write lock in the layout of etcd's recipe.RWMutex
 *   sem.c   the semaphore: one counter key, changed by compare-and-swap
 *   permits.c permits with ids, one key each on the taker's lease
 *   value.c values: the plain key NAME, version = its mod_revision
 *   group.c group members: a key each on the member's client lease
 *   queue.c work queues: items by create revision, claims on the taker's lease
 *
 * Layout and rules: docs/etcd-engine.md.
 */
#ifndef BATON_ETCD_INT_H
#define BATON_ETCD_INT_H

#include "baton/sys/backend.h"
#include "util/base64.h"

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* ---- gw.c ---------------------------------------------------------------- */

typedef struct egw egw;

enum { EGW_GATEWAY, EGW_GRPC };

typedef struct {
    int transport;           /* EGW_GATEWAY or EGW_GRPC */
    int tls;                 /* etcds:// */
    const char *cacert, *cert, *key;
    const char *user, *password;   /* NULL user = no auth */
    int connect_timeout_ms;
    int io_timeout_ms;
} egw_config;

/* A transport to the members U lists. Nothing is sent yet. */
int egw_new(egw **out, const baton_uri *u, const egw_config *cfg);
void egw_free(egw *g);
/* POST PATH (e.g. "/v3/kv/txn") with the body REQ (taken over, freed here);
 * 0 with the answer in *RESP (json_decref it). A connection that cannot be
 * made moves on to the next member (each tried once a call):
 * BATON_EUNAVAILABLE when none answers, BATON_EAUTH for authentication
 * errors, BATON_EPROTO for a reply that is not the JSON object expected, else
 * the server's error as BATON_EIO with its message. TIMEOUT_MS 0 = the
 * configured io timeout. */
int egw_call(egw *g, const char *path, json_t *req, json_t **resp, int timeout_ms);
/* egw_call for a request that does the same when applied twice (reads,
 * writes guarded by a compare on the caller's own key): it is also sent
 * again when the leader changed under it. Both ask again while the cluster
 * is electing a leader. TIMEOUT_MS bounds the whole call: every member, every
 * pass, authentication. */
int egw_call_idem(egw *g, const char *path, json_t *req, json_t **resp, int timeout_ms);
/* egw_call_idem, and *RESENT = 1 when the request was sent more than once
 * (an earlier attempt may have been applied: its answer was lost). */
int egw_call_idem_resent(egw *g, const char *path, json_t *req, json_t **resp, int timeout_ms, int *resent);
/* Waits for KEY (KLEN bytes) to be deleted at or after revision REV (a watch
 * stream from REV on): 0 when it was (or the stream ended: the caller looks
 * again), BATON_ETIMEDOUT at DEADLINE_NS, BATON_ECANCELED when W is
 * cancelled. */
int egw_wait_delete(egw *g, const char *key, size_t klen, int64_t rev, int64_t deadline_ns, baton_waiter *w);
/* The same for any event (put or delete) on KEY alone; *FIRED = 1 when an
 * event came, -1 when REV was compacted away, 0 when the stream ended
 * without either (the member went away, an error: a new stream from REV
 * misses nothing). */
int egw_wait_key(egw *g, const char *key, size_t klen, int64_t rev, int64_t deadline_ns, baton_waiter *w,
                 int *fired);
/* The same for any event (put or delete) on the keys starting with PREFIX. */
int egw_wait_prefix(egw *g, const char *prefix, size_t plen, int64_t rev, int64_t deadline_ns, baton_waiter *w);
/* egw_wait_prefix with *FIRED as for egw_wait_key. */
int egw_wait_prefix_fired(egw *g, const char *prefix, size_t plen, int64_t rev, int64_t deadline_ns,
                          baton_waiter *w, int *fired);
/* "http://127.0.0.1:2379" of the member the last call reached. */
void egw_endpoint(egw *g, char *buf, size_t n);

/* The number of members in the URI, and a plain HTTP GET of PATH (e.g.
 * "/metrics") from member I, whatever the transport: 0 with the body in
 * *BODY (malloc'd, NUL-terminated, *LEN bytes); BATON_EUNAVAILABLE when the
 * member cannot be reached, BATON_EPROTO for a status other than 200. */
size_t egw_members(egw *g);
int egw_get(egw *g, size_t member, const char *path, char **body, size_t *len);

/* base64 of LEN bytes (malloc'd, NUL-terminated), NULL when out of memory. */
static inline char *egw_b64(const void *p, size_t len) { return baton__base64(p, len); }
/* Decodes S into a malloc'd buffer (NUL-terminated, *LEN bytes); -1 when S is
 * not base64. */
static inline int egw_unb64(const char *s, char **out, size_t *len) { return baton__unbase64(s, out, len); }
/* An int64 field of O, sent as a string or a number (absent = 0). */
int64_t egw_int(const json_t *o, const char *key);
/* The range end that covers every key starting with P (LEN bytes): P with
 * its last byte below 0xff incremented (malloc'd, *OUTLEN bytes). */
char *egw_prefix_end(const char *p, size_t len, size_t *outlen);

/* 1 when this build has the gRPC transport (libnghttp2 was found), and
 * TLS for it (OpenSSL's headers too). */
int egw_have_grpc(void);
int egw_have_grpc_tls(void);

/* ---- pb.c ---------------------------------------------------------------- */

typedef struct epb_msg epb_msg;

/* A gateway path and the gRPC method behind it. */
typedef struct {
    const char *path;        /* "/v3/kv/txn" */
    const char *grpc;        /* "/etcdserverpb.KV/Txn" */
    const epb_msg *req, *resp;
    int stream;              /* a streaming method: the gateway wraps its answers in {"result": ...} */
} epb_method;

/* The method of PATH, NULL when the codec does not know it. */
const epb_method *epb_method_for(const char *path);
/* REQ (the gateway's JSON) as message M, framed for gRPC (5-byte prefix):
 * *OUT malloc'd, *LEN bytes. BATON_EINVAL for a field M does not have or of
 * the wrong type. */
int epb_encode(const epb_msg *m, const json_t *req, unsigned char **out, size_t *len);
/* The LEN protobuf bytes at P (no prefix) as message M in the gateway's
 * JSON shape: *OUT (json_decref it). BATON_EPROTO when they are not. */
int epb_decode(const epb_msg *m, const unsigned char *p, size_t len, json_t **out);

/* ---- h2.c ---------------------------------------------------------------- */

typedef struct eh2 eh2;

typedef struct {
    int http;                /* :status */
    int grpc_status;         /* -1 when none came */
    char message[256];       /* grpc-message, decoded */
    int is_grpc;             /* content-type application/grpc */
    int stopped;             /* the callback had what it wanted */
    int answered;            /* the server sent anything on the stream */
} eh2_status;

/* Called with each message of a stream (protobuf bytes, no prefix): 0 for
 * more, 1 to stop (the stream is reset), or an error. */
typedef int (*eh2_on_msg)(void *arg, const unsigned char *p, size_t len);

/* The members of U, over TLS when CFG->tls (CA, certificate and key read
 * now: BATON_EAUTH when they cannot be; BATON_ENOTSUP in a build without
 * OpenSSL's headers). Nothing is sent yet. */
int eh2_new(eh2 **out, const baton_uri *u, const egw_config *cfg);
void eh2_free(eh2 *h);
/* "host:port" of MEMBER. */
const char *eh2_authority(eh2 *h, size_t member);
/* One call of the gRPC method PATH on MEMBER: sends MSG (framed), ending
 * our side when HALF_CLOSE, and hands each answer to CB until the stream
 * ends (0 with *ST: look at st->grpc_status) or CB says stop (0,
 * st->stopped). BATON_ETIMEDOUT at DEADLINE_NS, BATON_ECANCELED when W (may
 * be NULL) is cancelled, BATON_EUNAVAILABLE when the member cannot be
 * reached or the connection breaks, BATON_EPROTO when the answer is not
 * gRPC, or CB's error. */
int eh2_call(eh2 *h, size_t member, const char *path, const char *token, const unsigned char *msg, size_t len,
             int half_close, int64_t deadline_ns, baton_waiter *w, eh2_on_msg cb, void *arg, eh2_status *st);

/* ---- etcd.c -------------------------------------------------------------- */

/* A lock state of one name held locally: two states of one client on one
 * name would share a key (the key is per lease), so they queue here first. */
typedef struct ename_wait {
    baton_waiter *w;
    struct ename_wait *next;
} ename_wait;
typedef struct ename {
    char *name;
    void *holder;            /* the state that goes to etcd for this name now */
    int refs;                /* states of this name that exist */
    /* states waiting for holder to go, oldest first: the head is woken on
     * release and takes it, so one client's states of a name are served in
     * arrival order, as etcd serves clients (a fair lock stays fair) */
    ename_wait *head, *tail;
    struct ename *next;
} ename;

/* A contender's key that could not be deleted in time (see etcd_withdraw). */
typedef struct eorphan {
    char *name, *key;
    size_t klen;
    int64_t rev;             /* delete it only while its create revision is this */
    uint64_t gen;            /* the lease it lives on: gone with it */
    int busy;                /* the keep-alive thread is deleting it now */
    int64_t next_try;
    struct eorphan *next;
} eorphan;

/* A grant whose key the keep-alive thread checks (someone may delete it:
 * `baton unlock --force`, etcdctl del): gone, the grant is reported lost. */
typedef struct eheld {
    void *st;
    char *key;
    size_t klen;
    int64_t rev;             /* the key's create revision = the grant's fence */
    int reported;
    struct eheld *next;
} eheld;

typedef struct eeng {
    egw *gw;
    char *prefix;            /* "" or "app/" */
    char *ident;
    int ttl_s;               /* asked for */
    int connect_timeout_ms;
    int io_timeout_ms;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* CLOCK_MONOTONIC: the keep-alive thread sleeps on it */
    /* guarded by mu */
    int64_t lease;           /* the client's lease, 0 when it has none */
    uint64_t lease_gen;      /* 1, 2, ...: which lease of this client */
    int granted_ttl_s;
    int64_t lease_deadline;  /* monotonic ns after which the lease may have expired */
    int64_t next_keepalive;
    int granting;            /* a thread is granting a new lease: others wait for it */
    ename *names;
    eorphan *orphans;
    eheld *held;             /* grants whose keys are checked at each keep-alive */
    baton_host *host;
    int stop;
    pthread_t thr;
    int thr_started;
} eeng;

/* The client's live lease (granted now when it has none, within TIMEOUT_MS;
 * 0 = the io timeout): 0 with *ID and *GEN, or an error. */
int etcd_lease_get(eeng *e, int64_t *id, uint64_t *gen, int timeout_ms);
/* 1 when lease GEN is still the live one. */
int etcd_lease_live(eeng *e, uint64_t gen);
/* The lease is gone (its key creation said so): lose its grants now. */
void etcd_lease_dead(eeng *e, uint64_t gen);
/* ST's grant (KEY, created at REV) is checked at each keep-alive from now
 * on (replacing what ST had); etcd_held_del before it is released or freed. */
void etcd_held_add(eeng *e, void *st, const char *key, size_t klen, int64_t rev);
void etcd_held_del(eeng *e, void *st);

/* The timeout of one request made for a call that ends at DEADLINE
 * (monotonic ns; 0 = a try, INT64_MAX = no end): the io timeout, but never
 * more than ETCD_GRACE_MS past DEADLINE (a request made at or after the
 * deadline, the last look of a wait or the withdrawal of its key, still
 * gets ETCD_GRACE_MS). */
#define ETCD_GRACE_MS 250
int etcd_call_ms(eeng *e, int64_t deadline);
/* Leaves a line: deletes our contender KEY if its create revision is still
 * REV, within TIMEOUT_MS; when that fails (no answer in time) the
 * keep-alive thread deletes it later, while lease GEN lives. The last
 * error is kept. */
void etcd_withdraw(eeng *e, const char *name, const char *key, size_t klen, int64_t rev, uint64_t gen,
                   int timeout_ms);
/* Before KEY is created again: waits until no withdrawal of it is pending
 * (the keep-alive thread's guarded delete must not meet the new key).
 * 0, or BATON_EUNAVAILABLE at DEADLINE. */
int etcd_orphan_settle(eeng *e, const char *key, size_t klen, int64_t deadline);

/* ---- metrics.c ----------------------------------------------------------- */

/* engine_ops: etcd's gRPC request counts (/metrics), every member summed. */
int etcd_engine_ops(void *eng, void (*fn)(void *arg, const char *op, uint64_t count), void *arg);
/* Parses Prometheus text TEXT for grpc_server_msg_received_total and calls
 * FN(ARG, lower-case method, count) per method with a count (exposed for the
 * unit test). -1 when TEXT has no such line at all (not etcd's /metrics). */
int etcd_metrics_parse(const char *text, void (*fn)(void *arg, const char *op, uint64_t count), void *arg);

/* ---- lock.c -------------------------------------------------------------- */

/* Every lock state starts with an int saying what it is, so the table's
 * lock_acquire/release/free serve mutexes, candidates and the two sides of
 * a read-write lock (lock.c hands ETCD_READ/ETCD_WRITE states to rw.c),
 * group members (group.c) and queue takers (queue.c). */
enum { ETCD_MUTEX = 1, ETCD_CANDIDATE, ETCD_READ, ETCD_WRITE, ETCD_MEMBER, ETCD_TAKER };

int etcd_lock_new(void *eng, const char *name, const baton_lock_options *opts, void **st);
void etcd_lock_free(void *eng, void *st);
int etcd_lock_acquire(void *eng, void *st, baton_acquire_req *req);
int etcd_lock_release(void *eng, void *st, const baton_owner *owner);
int etcd_lock_info(void *eng, const char *name, baton_lockinfo *out);
/* admin.c: baton list, baton unlock --force */
int etcd_lock_list(void *eng, const char *prefix, int (*fn)(void *arg, const char *name), void *arg);
int etcd_lock_break(void *eng, const char *name, uint64_t *fence);
int etcd_election_new(void *eng, const char *name, const baton_lock_options *opts, void **st);
int etcd_election_leader(void *eng, const char *name, uint64_t known_fence, const char *known_value, char *value,
                         size_t n, uint64_t *fence, int64_t deadline_ns, baton_waiter *w);
int etcd_election_proclaim(void *eng, void *st, const baton_owner *owner, const char *value);

/* Helpers rw.c shares. {"request_range": the first key of [P, P's end) by
 * create revision} (NULL when out of memory; json_pack's "o" takes that). */
json_t *etcd_first_create(const char *p, size_t len);
/* The first kv of the I-th range response of a txn answer (*COUNT: its count). */
json_t *etcd_txn_kv(json_t *resp, size_t i, int64_t *count);
/* Deletes KEY if its create revision is still REV; with MARK, records REV
 * as NAME's last fence. *DELETED = 1 when it was our key. */
int etcd_delete_own(eeng *e, const char *name, const char *key, size_t klen, int64_t rev, int mark, int *deleted,
                    int timeout_ms);
/* Whether KEY, under "<prefix><name>/" (PLEN bytes), is one of NAME's own
 * keys (a contender or a read-write side), not one of a name below it. */
int etcd_own_key(const char *key, size_t klen, size_t plen);
/* etcd_own_key of the key of KV, a kv of a range answer. */
int etcd_own_kv(json_t *kv, size_t plen);
/* The nearest own key (etcd_own_key) of [FROM, TO) by create revision, from
 * BOUND on (ASCEND: create revision >= BOUND; DESC: <= BOUND), read past the
 * keys of names below it page by page. *KV is NULL when there is none; it
 * lives in *RESP (the caller's to json_decref, also when NULL). */
int etcd_own_next(eeng *e, const char *from, size_t flen, const char *to, size_t tlen, size_t plen, int desc,
                  int64_t bound, int keys_only, json_t **resp, json_t **kv, int timeout_ms);
/* 1 when the last error says the lease a request named is gone. */
int etcd_is_lease_gone(void);

/* ---- rw.c ----------------------------------------------------------------- */

int etcd_rwlock_new(void *eng, const char *name, const baton_lock_options *opts, void **rd, void **wr);
int etcd_rw_acquire(eeng *e, void *st, baton_acquire_req *req);
int etcd_rw_release(eeng *e, void *st);
void etcd_rw_free(eeng *e, void *st);

/* ---- sem.c ---------------------------------------------------------------- */

int etcd_sem_new(void *eng, const char *name, void **st);
void etcd_sem_free(void *eng, void *st);
int etcd_sem_acquire(void *eng, void *st, uint32_t permits, int64_t deadline_ns, baton_waiter *w);
int etcd_sem_release(void *eng, void *st, uint32_t permits);
int etcd_sem_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out);
/* "<prefix>\0sem/<name>", the counter key (malloc'd, *LEN bytes). */
char *etcd_sem_key(eeng *e, const char *name, size_t *len);

/* ---- permits.c ------------------------------------------------------------ */

int etcd_permits_new(void *eng, const char *name, void **st);
void etcd_permits_free(void *eng, void *st);
int etcd_permits_acquire(void *eng, void *st, uint32_t lease_ms, int64_t deadline_ns, baton_waiter *w,
                         char id[BATON_PERMIT_ID_SIZE]);
int etcd_permits_release(void *eng, void *st, const char *id);
int etcd_permits_renew(void *eng, void *st, const char *id, uint32_t lease_ms);
int etcd_permits_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out);

/* ---- value.c, group.c, queue.c ------------------------------------------- */

extern const baton_value_methods etcd_value_methods;
extern const baton_group_methods etcd_group_methods;
extern const baton_queue_methods etcd_queue_methods;
/* The lock methods of member and taker states (lock.c dispatches to them). */
int etcd_member_acquire(eeng *e, void *st, baton_acquire_req *req);
int etcd_member_release(eeng *e, void *st);
void etcd_member_free(eeng *e, void *st);
int etcd_taker_acquire(eeng *e, void *st, baton_acquire_req *req);
int etcd_taker_release(eeng *e, void *st);
void etcd_taker_free(eeng *e, void *st);

#endif
