/*
 * Redis connections: nonblocking TCP connect with a deadline, optional TLS
 * (OpenSSL over our own socket BIO, so no SIGPIPE), RESP formatting and
 * parsing with hiredis' formatter and reader, and a small connection pool.
 *
 * Every wait goes through poll() with a monotonic deadline; no call can block
 * longer than the deadline it was given.
 */
#include "redis_int.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <arpa/inet.h>


#define POOL_MAX_IDLE 32
#define MAX_REPLY_ELEMENTS (1 << 20)

/* ---- reply objects -------------------------------------------------------
 * Our own constructors for hiredis' reader, so a hostile or broken server
 * cannot make us allocate a huge array ("*2147483647\r\n"): such a reply is
 * a protocol error. The objects are plain redisReply structs. */

static void *attach(const redisReadTask *t, redisReply *r) {
    if (t->parent) {
        redisReply *p = t->parent->obj;
        if (p && p->type == REDIS_REPLY_ARRAY && t->idx >= 0 && (size_t)t->idx < p->elements)
            p->element[t->idx] = r;
    }
    return r;
}

static void *mk_string(const redisReadTask *t, char *s, size_t len) {
    redisReply *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->type = t->type;
    r->str = malloc(len + 1);
    if (!r->str) { free(r); return NULL; }
    memcpy(r->str, s, len);
    r->str[len] = 0;
    r->len = len;
    return attach(t, r);
}

static void *mk_array(const redisReadTask *t, int n) {
    if (n < 0 || n > MAX_REPLY_ELEMENTS) return NULL;
    redisReply *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->type = REDIS_REPLY_ARRAY;
    if (n > 0) {
        r->element = calloc((size_t)n, sizeof *r->element);
        if (!r->element) { free(r); return NULL; }
    }
    r->elements = (size_t)n;
    return attach(t, r);
}

static void *mk_integer(const redisReadTask *t, long long v) {
    redisReply *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->type = REDIS_REPLY_INTEGER;
    r->integer = v;
    return attach(t, r);
}

static void *mk_nil(const redisReadTask *t) {
    redisReply *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->type = REDIS_REPLY_NIL;
    return attach(t, r);
}

void rreply_free(void *p) {
    redisReply *r = p;
    if (!r) return;
    if (r->type == REDIS_REPLY_ARRAY && r->element) {
        for (size_t i = 0; i < r->elements; i++) rreply_free(r->element[i]);
        free(r->element);
    }
    free(r->str);
    free(r);
}

static redisReplyObjectFunctions reply_fns = {
    mk_string, mk_array, mk_integer, mk_nil, rreply_free,
};

int64_t rdeadline_ms(int ms) {
    if (ms < 0) return INT64_MAX;
    return baton_now_ns() + (int64_t)ms * 1000000;
}

int64_t rmin64(int64_t a, int64_t b) { return a < b ? a : b; }

/* A thread's abort descriptor (-1: none): readable = give up every wait now
 * (the subscriber thread's stop signal, so closing a client never waits for
 * its connect or handshake with a frozen peer). */
static _Thread_local int abort_fd = -1;

void rconn_set_abort_fd(int fd) { abort_fd = fd; }

/* Waits for EV on FD until DEADLINE: 1 ready, 0 timed out (or aborted),
 * -1 error (errno). */
static int wait_fd(int fd, short ev, int64_t deadline) {
    for (;;) {
        int64_t now = baton_now_ns();
        if (now >= deadline) return 0;
        int64_t ms = (deadline - now + 999999) / 1000000;
        if (ms > 1000) ms = 1000;
        struct pollfd p[2] = {
            { .fd = fd, .events = ev, .revents = 0 },
            { .fd = abort_fd, .events = POLLIN, .revents = 0 },
        };
        int r = poll(p, abort_fd >= 0 ? 2 : 1, (int)ms);
        if (r > 0 && abort_fd >= 0 && p[1].revents) return 0;
        if (r > 0) return 1;
        if (r < 0 && errno != EINTR) return -1;
    }
}

/* ---- socket BIO: send/recv with MSG_NOSIGNAL ---------------------------- */

static BIO_METHOD *sock_method;
static pthread_once_t sock_once = PTHREAD_ONCE_INIT;

static int sbio_write(BIO *b, const char *buf, int len) {
    int fd = (int)(intptr_t)BIO_get_data(b);
    BIO_clear_retry_flags(b);
    ssize_t n = send(fd, buf, (size_t)len, MSG_NOSIGNAL);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) BIO_set_retry_write(b);
        return -1;
    }
    return (int)n;
}

static int sbio_read(BIO *b, char *buf, int len) {
    int fd = (int)(intptr_t)BIO_get_data(b);
    BIO_clear_retry_flags(b);
    ssize_t n = recv(fd, buf, (size_t)len, 0);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) BIO_set_retry_read(b);
        return -1;
    }
    return (int)n;
}

static long sbio_ctrl(BIO *b, int cmd, long num, void *ptr) {
    (void)b; (void)num; (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int sbio_create(BIO *b) { BIO_set_init(b, 1); return 1; }
static int sbio_destroy(BIO *b) { (void)b; return 1; }

static void sock_method_init(void) {
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "baton-socket");
    if (!m) return;
    BIO_meth_set_write(m, sbio_write);
    BIO_meth_set_read(m, sbio_read);
    BIO_meth_set_ctrl(m, sbio_ctrl);
    BIO_meth_set_create(m, sbio_create);
    BIO_meth_set_destroy(m, sbio_destroy);
    sock_method = m;
}

/* ---- TLS context -------------------------------------------------------- */

static const char *ssl_errstr(char *buf, size_t n) {
    unsigned long e = ERR_peek_last_error();
    if (!e) { snprintf(buf, n, "unknown TLS error"); return buf; }
    ERR_error_string_n(e, buf, n);
    return buf;
}

int rtls_ctx_new(SSL_CTX **out, const char *cacert, const char *cert, const char *key, int insecure) {
    char eb[256];
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) return baton_seterr(BATON_ENOMEM, 0, "redis: cannot create a TLS context: %s", ssl_errstr(eb, sizeof eb));
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE);
    if (cacert) {
        if (SSL_CTX_load_verify_locations(ctx, cacert, NULL) != 1) {
            SSL_CTX_free(ctx);
            return baton_seterr(BATON_EINVAL, 0, "redis: cannot load cacert '%s': %s", cacert, ssl_errstr(eb, sizeof eb));
        }
    } else if (!insecure) {
        SSL_CTX_set_default_verify_paths(ctx);
    }
    if (cert) {
        if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
            SSL_CTX_free(ctx);
            return baton_seterr(BATON_EINVAL, 0, "redis: cannot load cert '%s': %s", cert, ssl_errstr(eb, sizeof eb));
        }
        const char *k = key ? key : cert;
        if (SSL_CTX_use_PrivateKey_file(ctx, k, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
            SSL_CTX_free(ctx);
            return baton_seterr(BATON_EINVAL, 0, "redis: cannot load key '%s': %s", k, ssl_errstr(eb, sizeof eb));
        }
    }
    SSL_CTX_set_verify(ctx, insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
    ERR_clear_error();
    *out = ctx;
    return 0;
}

/* ---- connect ------------------------------------------------------------ */

/* ---- name resolution with a deadline -------------------------------------
 * getaddrinfo() has no timeout (a dead DNS server costs resolv.conf's
 * timeout x attempts x servers, 10 s and more). A host name is resolved on a
 * short-lived detached thread that the caller waits for until its deadline;
 * a caller that gives up leaves the thread to finish and free the job. An IP
 * literal is converted in place (AI_NUMERICHOST never blocks). */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs, done, rc;
    char *host;
    char port[16];
    struct addrinfo *res;
} gai_job;

static void gai_hints(struct addrinfo *h, int numeric) {
    memset(h, 0, sizeof *h);
    h->ai_family = AF_UNSPEC;
    h->ai_socktype = SOCK_STREAM;
    if (numeric) h->ai_flags = AI_NUMERICHOST;
}

static void gai_unref(gai_job *j) {
    pthread_mutex_lock(&j->mu);
    int last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last) return;
    if (j->res) freeaddrinfo(j->res);
    free(j->host);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

static void *gai_main(void *p) {
    gai_job *j = p;
    struct addrinfo hints, *res = NULL;
    gai_hints(&hints, 0);
    int g = getaddrinfo(j->host, j->port, &hints, &res);
    pthread_mutex_lock(&j->mu);
    j->rc = g;
    j->res = res;
    j->done = 1;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    gai_unref(j);
    return NULL;
}

/* 0 and *out, or a getaddrinfo code in *gerr (EAI_AGAIN when the deadline
 * passed, EAI_MEMORY when no thread could be started). */
static int resolve(const rcfg *cfg, int64_t deadline, struct addrinfo **out, int *gerr) {
    char port[16];
    struct addrinfo hints;
    *out = NULL;
    snprintf(port, sizeof port, "%d", cfg->port);
    gai_hints(&hints, 1);
    int g = getaddrinfo(cfg->host, port, &hints, out);
    if (g != EAI_NONAME) {
        *gerr = g;
        return g ? -1 : 0;
    }
    gai_job *j = calloc(1, sizeof *j);
    if (!j || !(j->host = strdup(cfg->host))) {
        free(j);
        *gerr = EAI_MEMORY;
        return -1;
    }
    snprintf(j->port, sizeof j->port, "%s", port);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    j->refs = 2;
    pthread_attr_t ta;
    pthread_t t;
    sigset_t all, old;
    pthread_attr_init(&ta);
    pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old); /* the thread takes no process signals */
    int cerr = pthread_create(&t, &ta, gai_main, j);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&ta);
    if (cerr) {
        j->refs = 1;
        gai_unref(j);
        *gerr = EAI_MEMORY;
        return -1;
    }
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        if (deadline == INT64_MAX) {
            pthread_cond_wait(&j->cv, &j->mu);
            continue;
        }
        struct timespec ts = { (time_t)(deadline / 1000000000LL), (long)(deadline % 1000000000LL) };
        if (pthread_cond_timedwait(&j->cv, &j->mu, &ts) == ETIMEDOUT && !j->done) break;
    }
    int done = j->done;
    if (done) {
        *gerr = j->rc;
        *out = j->res;
        j->res = NULL;
    }
    pthread_mutex_unlock(&j->mu);
    gai_unref(j);
    if (!done) *gerr = EAI_AGAIN;
    return *gerr ? -1 : 0;
}

/* redis+unix://: a stream socket on the server's unixsocket path. */
static int unix_connect(const rcfg *cfg, int64_t deadline, int *out) {
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(cfg->unix_path) >= sizeof sa.sun_path)
        return baton_seterr(BATON_EINVAL, 0, "redis: socket path '%s' is too long", cfg->unix_path);
    memcpy(sa.sun_path, cfg->unix_path, strlen(cfg->unix_path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int err = fd < 0 ? errno : 0;
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        err = errno;
        if (err == EINPROGRESS || err == EAGAIN) {
            int r = wait_fd(fd, POLLOUT, deadline);
            socklen_t sl = sizeof err;
            if (r == 1) err = getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) == 0 ? err : errno;
            else err = r == 0 ? ETIMEDOUT : errno;
        }
    }
    if (!err) { *out = fd; return 0; }
    if (fd >= 0) close(fd);
    return baton_seterr(BATON_EUNAVAILABLE, err, "redis: cannot connect to %s: %s", cfg->unix_path, strerror(err));
}

static int tcp_connect(const rcfg *cfg, int64_t deadline, int *out) {
    if (cfg->unix_path) return unix_connect(cfg, deadline, out);
    struct addrinfo *res = NULL;
    int g = 0;
    if (resolve(cfg, deadline, &res, &g) != 0)
        return baton_seterr(BATON_EUNAVAILABLE, g, "redis: cannot resolve '%s': %s", cfg->host,
                            g == EAI_AGAIN && baton_now_ns() >= deadline ? "no answer before the deadline"
                                                                         : gai_strerror(g));
    int err = ECONNREFUSED;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) { err = errno; continue; }
        int ok = 0;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            ok = 1;
        } else if (errno == EINPROGRESS) {
            int r = wait_fd(fd, POLLOUT, deadline);
            if (r == 1) {
                int soerr = 0;
                socklen_t sl = sizeof soerr;
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0) ok = 1;
                else err = soerr ? soerr : errno;
            } else if (r == 0) {
                err = ETIMEDOUT;
            } else {
                err = errno;
            }
        } else {
            err = errno;
        }
        if (ok) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
            freeaddrinfo(res);
            *out = fd;
            return 0;
        }
        close(fd);
        if (err == ETIMEDOUT) break;
    }
    freeaddrinfo(res);
    return baton_seterr(BATON_EUNAVAILABLE, err, "redis: cannot connect to %s:%d: %s", cfg->host, cfg->port,
                        err == ETIMEDOUT ? "connect timed out" : strerror(err));
}

static int is_ip_literal(const char *h) {
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, h, buf) == 1 || inet_pton(AF_INET6, h, buf) == 1;
}

static int tls_handshake(rconn *c, const rcfg *cfg, int64_t deadline) {
    char eb[256];
    pthread_once(&sock_once, sock_method_init);
    if (!sock_method) return baton_seterr(BATON_ENOMEM, 0, "redis: cannot create the TLS socket method");
    ERR_clear_error();
    c->ssl = SSL_new(cfg->ssl_ctx);
    if (!c->ssl) return baton_seterr(BATON_ENOMEM, 0, "redis: SSL_new failed: %s", ssl_errstr(eb, sizeof eb));
    BIO *b = BIO_new(sock_method);
    if (!b) return baton_seterr(BATON_ENOMEM, 0, "redis: BIO_new failed");
    BIO_set_data(b, (void *)(intptr_t)c->fd);
    SSL_set_bio(c->ssl, b, b);
    int ip = is_ip_literal(cfg->host);
    if (!ip) SSL_set_tlsext_host_name(c->ssl, cfg->host);
    if (!cfg->insecure) {
        if (ip) X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), cfg->host);
        else SSL_set1_host(c->ssl, cfg->host);
    }
    for (;;) {
        ERR_clear_error();
        int r = SSL_connect(c->ssl);
        if (r == 1) return 0;
        int e = SSL_get_error(c->ssl, r);
        int w;
        if (e == SSL_ERROR_WANT_READ) w = wait_fd(c->fd, POLLIN, deadline);
        else if (e == SSL_ERROR_WANT_WRITE) w = wait_fd(c->fd, POLLOUT, deadline);
        else {
            long v = SSL_get_verify_result(c->ssl);
            if (v != X509_V_OK)
                return baton_seterr(BATON_EAUTH, v, "redis: TLS certificate of %s:%d not trusted: %s",
                                    cfg->host, cfg->port, X509_verify_cert_error_string(v));
            int en = errno;
            if (e == SSL_ERROR_SYSCALL && ERR_peek_last_error() == 0)
                return baton_seterr(BATON_EUNAVAILABLE, en, "redis: TLS handshake with %s:%d failed: %s",
                                    cfg->host, cfg->port, en ? strerror(en) : "connection closed");
            return baton_seterr(BATON_EUNAVAILABLE, e, "redis: TLS handshake with %s:%d failed: %s",
                                cfg->host, cfg->port, ssl_errstr(eb, sizeof eb));
        }
        if (w == 0)
            return baton_seterr(BATON_EUNAVAILABLE, ETIMEDOUT, "redis: TLS handshake with %s:%d timed out",
                                cfg->host, cfg->port);
        if (w < 0)
            return baton_seterr(BATON_EUNAVAILABLE, errno, "redis: poll failed: %s", strerror(errno));
    }
}

int rreply_error(const redisReply *r, const char *what) {
    const char *s = r->str ? r->str : "";
    int code = BATON_EPROTO;
    if (!strncmp(s, "NOAUTH", 6) || !strncmp(s, "WRONGPASS", 9) || !strncmp(s, "NOPERM", 6) ||
        !strncmp(s, "DENIED", 6) || strstr(s, "invalid password") || strstr(s, "invalid username-password"))
        code = BATON_EAUTH;
    else if (!strncmp(s, "LOADING", 7) || !strncmp(s, "BUSY", 4) || !strncmp(s, "MASTERDOWN", 10) ||
             !strncmp(s, "READONLY", 8) || !strncmp(s, "CLUSTERDOWN", 11) || !strncmp(s, "TRYAGAIN", 8) ||
             !strncmp(s, "OOM", 3))
        code = BATON_EUNAVAILABLE;
    return baton_seterr(code, 0, "redis: %s: %s", what, s);
}

static int simple_cmd(rconn *c, const char *what, int argc, const char **argv, int64_t deadline) {
    size_t lens[8];
    for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
    redisReply *r = NULL;
    int rc = rconn_command(c, argc, argv, lens, &r, deadline);
    if (rc) return rc;
    if (r->type == REDIS_REPLY_ERROR) {
        /* A password given to a server without one is not fatal (redis-cli does the same). */
        if (!strcmp(argv[0], "AUTH") && r->str && strstr(r->str, "without any password configured")) {
            rreply_free(r);
            return 0;
        }
        rc = rreply_error(r, what);
        rreply_free(r);
        c->broken = 1;
        return rc;
    }
    rreply_free(r);
    return 0;
}

int rconn_open(const rcfg *cfg, rconn **out, int64_t deadline) {
    *out = NULL;
    if (cfg->cluster) return rcluster_open_any(cfg->cluster, out, deadline);
    if (cfg->sentinel) return rsentinel_open(cfg, out, deadline);
    rconn *c = calloc(1, sizeof *c);
    if (!c) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    c->fd = -1;
    c->rd = redisReaderCreateWithFunctions(&reply_fns);
    if (!c->rd) { free(c); return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory"); }
    int rc = tcp_connect(cfg, deadline, &c->fd);
    if (!rc && cfg->tls) rc = tls_handshake(c, cfg, deadline);
    if (!rc && cfg->password) {
        const char *argv[3] = { "AUTH", cfg->user ? cfg->user : cfg->password, cfg->password };
        rc = simple_cmd(c, "AUTH failed", cfg->user ? 3 : 2, argv, deadline);
    }
    if (!rc && cfg->db) {
        char db[16];
        snprintf(db, sizeof db, "%d", cfg->db);
        const char *argv[2] = { "SELECT", db };
        rc = simple_cmd(c, "SELECT failed", 2, argv, deadline);
    }
    if (rc) { rconn_free(c); return rc; }
    *out = c;
    return 0;
}

void rconn_free(rconn *c) {
    if (!c) return;
    if (c->route) rcluster_conn_free(c);
    if (c->ssl) {
        if (!c->broken) { ERR_clear_error(); SSL_shutdown(c->ssl); }
        SSL_free(c->ssl);
        ERR_clear_error();
    }
    if (c->fd >= 0) close(c->fd);
    if (c->rd) redisReaderFree(c->rd);
    free(c);
}

/* ---- I/O ---------------------------------------------------------------- */

static int io_fail(rconn *c, int code, long native, const char *what) {
    c->broken = 1;
    return baton_seterr(code, native, "redis: %s", what);
}

static int write_all(rconn *c, const char *buf, size_t len, int64_t deadline) {
    size_t off = 0;
    while (off < len) {
        short ev = POLLOUT;
        if (c->ssl) {
            ERR_clear_error();
            size_t chunk = len - off > INT_MAX ? INT_MAX : len - off;
            int n = SSL_write(c->ssl, buf + off, (int)chunk);
            if (n > 0) { off += (size_t)n; continue; }
            int e = SSL_get_error(c->ssl, n);
            if (e == SSL_ERROR_WANT_READ) ev = POLLIN;
            else if (e != SSL_ERROR_WANT_WRITE)
                return io_fail(c, BATON_EUNAVAILABLE, errno, "TLS write failed (connection lost)");
        } else {
            ssize_t n = send(c->fd, buf + off, len - off, MSG_NOSIGNAL);
            if (n > 0) { off += (size_t)n; continue; }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                char m[160];
                snprintf(m, sizeof m, "write failed: %s", strerror(errno));
                return io_fail(c, BATON_EUNAVAILABLE, errno, m);
            }
        }
        int w = wait_fd(c->fd, ev, deadline);
        if (w == 0) return io_fail(c, BATON_EUNAVAILABLE, ETIMEDOUT, "write timed out");
        if (w < 0) return io_fail(c, BATON_EUNAVAILABLE, errno, "poll failed");
    }
    return 0;
}

/* Reads once: >0 bytes fed, 0 would block (*want = poll events), <0 error. */
static int read_once(rconn *c, short *want) {
    char buf[16384];
    *want = POLLIN;
    if (c->ssl) {
        ERR_clear_error();
        int n = SSL_read(c->ssl, buf, sizeof buf);
        if (n <= 0) {
            int e = SSL_get_error(c->ssl, n);
            if (e == SSL_ERROR_WANT_READ) return 0;
            if (e == SSL_ERROR_WANT_WRITE) { *want = POLLOUT; return 0; }
            if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno == 0))
                return io_fail(c, BATON_EUNAVAILABLE, ECONNRESET, "connection closed by the server");
            return io_fail(c, BATON_EUNAVAILABLE, errno, "TLS read failed (connection lost)");
        }
        if (redisReaderFeed(c->rd, buf, (size_t)n) != REDIS_OK)
            return io_fail(c, BATON_ENOMEM, 0, "out of memory");
        return n;
    }
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n > 0) {
            if (redisReaderFeed(c->rd, buf, (size_t)n) != REDIS_OK)
                return io_fail(c, BATON_ENOMEM, 0, "out of memory");
            return (int)n;
        }
        if (n == 0) return io_fail(c, BATON_EUNAVAILABLE, ECONNRESET, "connection closed by the server");
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        char m[160];
        snprintf(m, sizeof m, "read failed: %s", strerror(errno));
        return io_fail(c, BATON_EUNAVAILABLE, errno, m);
    }
}

int rconn_next_reply(rconn *c, redisReply **out) {
    void *r = NULL;
    if (redisReaderGetReply(c->rd, &r) != REDIS_OK) {
        c->broken = 1;
        return baton_seterr(BATON_EPROTO, 0, "redis: bad reply from the server: %s", c->rd->errstr);
    }
    if (!r) return 0;
    *out = r;
    return 1;
}

int rconn_read_avail(rconn *c) {
    for (;;) {
        short want;
        int n = read_once(c, &want);
        if (n < 0) return n;
        if (n == 0) return 0; /* would block: everything available was read */
    }
}

int rconn_send(rconn *c, int argc, const char **argv, const size_t *lens, int64_t deadline) {
    if (c->broken) return baton_seterr(BATON_EUNAVAILABLE, 0, "redis: connection is broken");
    /* Nothing is sent once the call's deadline has passed: a request that
     * goes out with no time left to read its answer only makes the outcome
     * uncertain (a grant nobody hears of). The connection stays usable. */
    if (baton_now_ns() >= deadline)
        return baton_seterr(BATON_EUNAVAILABLE, ETIMEDOUT, "redis: the call's deadline passed before the request was sent");
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (len < 0 || !cmd) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    int rc = write_all(c, cmd, (size_t)len, deadline);
    redisFreeCommand(cmd);
    return rc;
}

int rconn_command(rconn *c, int argc, const char **argv, const size_t *lens, redisReply **out,
                  int64_t deadline) {
    *out = NULL;
    if (c->route) return rcluster_command(c, argc, argv, lens, out, deadline);
    int rc = rconn_send(c, argc, argv, lens, deadline);
    if (rc) return rc;
    /* Read before polling: on loopback the reply is often already there when
     * send returns, and a recv is cheaper than sleeping in poll. */
    for (;;) {
        redisReply *r = NULL;
        int g = rconn_next_reply(c, &r);
        if (g < 0) return g;
        if (g > 0) {
            /* A demoted master: never reuse the connection, so the next one
             * finds the current master (sentinel.c checks ROLE). */
            if (r->type == REDIS_REPLY_ERROR && r->str && !strncmp(r->str, "READONLY", 8)) c->broken = 1;
            *out = r;
            return 0;
        }
        short want;
        int n = read_once(c, &want);
        if (n < 0) return n;
        if (n > 0) continue;
        int w = wait_fd(c->fd, want, deadline);
        if (w == 0) return io_fail(c, BATON_EUNAVAILABLE, ETIMEDOUT, "no reply from the server within the I/O timeout");
        if (w < 0) return io_fail(c, BATON_EUNAVAILABLE, errno, "poll failed");
    }
}

/* ---- pool --------------------------------------------------------------- */


/* A pooled connection is reused only if the server has not closed it and
 * sent nothing unexpected while it sat idle. */
static int conn_alive(rconn *c) {
    if (c->route) { rcluster_conn_prune(c, conn_alive); return 1; }
    struct pollfd p = { .fd = c->fd, .events = POLLIN, .revents = 0 };
    int r = poll(&p, 1, 0);
    if (r == 0) return 1;
    if (r < 0) return 0;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return 0;
    if (!c->ssl) return 0;
    /* TLS: the readable bytes may be post-handshake messages (session tickets). */
    char b[1];
    ERR_clear_error();
    int n = SSL_read(c->ssl, b, 1);
    if (n > 0) return 0;
    int e = SSL_get_error(c->ssl, n);
    ERR_clear_error();
    return e == SSL_ERROR_WANT_READ;
}

int rpool_init(rpool *p, const rcfg *cfg) {
    memset(p, 0, sizeof *p);
    p->cfg = cfg;
    if (pthread_mutex_init(&p->mu, NULL) != 0) return baton_seterr(BATON_ENOMEM, 0, "redis: mutex init failed");
    return 0;
}

void rpool_destroy(rpool *p) {
    for (size_t i = 0; i < p->nidle; i++) rconn_free(p->idle[i]);
    free(p->idle);
    p->idle = NULL;
    p->nidle = p->cap = 0;
    pthread_mutex_destroy(&p->mu);
}

int rpool_get(rpool *p, rconn **out, int64_t deadline) {
    for (;;) {
        rconn *c = NULL;
        pthread_mutex_lock(&p->mu);
        if (p->nidle) c = p->idle[--p->nidle];
        pthread_mutex_unlock(&p->mu);
        if (!c) break;
        /* Always checked, even if it was used a moment ago: a connection the
         * server closed meanwhile (CLIENT KILL, failover) would fail the call,
         * and a release that fails leaves the lock to its lease. */
        if (conn_alive(c) && !rsentinel_stale(p->cfg, c)) { *out = c; return 0; }
        c->broken = 1;
        rconn_free(c);
    }
    if (p->cfg->cluster) return rcluster_conn_new(p->cfg->cluster, out, deadline);
    return rconn_open(p->cfg, out, rmin64(deadline, rdeadline_ms(p->cfg->connect_timeout_ms)));
}

void rpool_put(rpool *p, rconn *c) {
    if (!c) return;
    if (c->broken) { rconn_free(c); return; }
    pthread_mutex_lock(&p->mu);
    if (p->nidle == p->cap && p->cap < POOL_MAX_IDLE) {
        size_t nc = p->cap ? p->cap * 2 : 4;
        if (nc > POOL_MAX_IDLE) nc = POOL_MAX_IDLE;
        rconn **ni = realloc(p->idle, nc * sizeof *ni);
        if (ni) { p->idle = ni; p->cap = nc; }
    }
    if (p->nidle < p->cap) {
        p->idle[p->nidle++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    if (c) rconn_free(c);
}

/* ---- option values and derived key names (shared with RedLock) ---- */

int rparse_int(const char *s, long lo, long hi, long *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int rparse_bool(const char *s, int *out) {
    if (!strcmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on")) { *out = 1; return 0; }
    if (!strcmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcasecmp(s, "off")) { *out = 0; return 0; }
    return -1;
}

char *baton__redis_prefixed(const char *prefix, const char *key) {
    int tagged = strchr(key, '{') != NULL;
    size_t n = strlen(prefix) + strlen(key) + 4;
    char *s = malloc(n);
    if (!s) return NULL;
    snprintf(s, n, tagged ? "%s:%s" : "%s:{%s}", prefix, key);
    return s;
}

/* ---- non-blocking writes (mux.c) ------------------------------------------ */

int rconn_write_nb(rconn *c, const char *buf, size_t len, size_t *wrote, int *want_read) {
    *wrote = 0;
    *want_read = 0;
    if (c->ssl) {
        /* TLS: a retry after WANT_* must repeat the same buffer and length,
         * which holds because the caller only moves BUF past what was
         * written (OpenSSL writes a record all or nothing without
         * SSL_MODE_ENABLE_PARTIAL_WRITE). */
        ERR_clear_error();
        int n = SSL_write(c->ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
        if (n > 0) { *wrote = (size_t)n; return 0; }
        int e = SSL_get_error(c->ssl, n);
        if (e == SSL_ERROR_WANT_READ) { *want_read = 1; return 0; }
        if (e == SSL_ERROR_WANT_WRITE) return 0;
        return io_fail(c, BATON_EUNAVAILABLE, errno, "TLS write failed (connection lost)");
    }
    for (;;) {
        ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);
        if (n >= 0) { *wrote = (size_t)n; return 0; }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        char m[160];
        snprintf(m, sizeof m, "write failed: %s", strerror(errno));
        return io_fail(c, BATON_EUNAVAILABLE, errno, m);
    }
}
