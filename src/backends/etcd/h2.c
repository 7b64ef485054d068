/*
 * gRPC over HTTP/2 (h2c, prior knowledge) with nghttp2's client session on
 * a plain TCP socket: the `transport=grpc` of the etcd engine. gw.c keeps
 * the engine's interface (members, failover, auth, error mapping) and calls
 * eh2_call for the bytes; pb.c turns JSON into protobuf and back.
 *
 * A connection carries one call at a time (like gw.c's easy handles): calls
 * take one for their member from a small pool, or connect. A watch is a
 * stream like any other, kept open (no END_STREAM from us) until the event
 * comes; then it is reset (CANCEL) and the connection goes back to the pool.
 * The socket is non-blocking and polled in slices of at most
 * WATCH_SLICE_MS, so a cancel or the deadline is seen quickly. A pooled
 * connection the server closed meanwhile (etcd restarted, GOAWAY) is
 * noticed before use; one that breaks before any answer on a call is
 * retried once on a new connection, as curl does.
 *
 * etcds:// (BATON_ETCD_GRPC_TLS): the same over TLS with OpenSSL (loaded
 * with dlopen on the first etcds:// open, src/util/ossl.c), ALPN "h2", the server's
 * certificate checked against `cacert` (or the system's CAs) and the member's
 * name or IP, the client's certificate from `cert`/`key`. The handshake is
 * non-blocking, within the connect timeout; reads and writes go through SSL
 * in the same poll loop (SSL_read until it wants more from the socket, so no
 * decrypted bytes wait in OpenSSL's buffer while we poll the socket).
 *
 * gRPC framing: each message is 1 byte "compressed" (always 0 here: we
 * offer no encodings) + 4 bytes big-endian length + the protobuf bytes;
 * headers `content-type: application/grpc`, `te: trailers`, the auth token
 * in the `token` metadata (etcd's name for it); the status comes in the
 * trailers (`grpc-status`, `grpc-message`, percent-encoded).
 */
#include "etcd_int.h"

#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifdef BATON_ETCD_GRPC_TLS
#include "util/ossl.h"
#endif

#define POOL_MAX 16
#define WATCH_SLICE_MS 50
#define MSG_MAX (16u << 20)  /* larger replies are not etcd's answers to our requests */

typedef struct h2c {
    size_t member;
    int fd;
#ifdef BATON_ETCD_GRPC_TLS
    SSL *ssl;                /* etcds:// */
#endif
    nghttp2_session *s;
    int unusable;            /* GOAWAY, an error: not back into the pool */
    int h2ok;                /* the server's SETTINGS came: it speaks HTTP/2 */
    size_t rx;               /* bytes received */
    /* the call in progress */
    int32_t sid;
    const unsigned char *out;
    size_t outlen, outpos;
    int half_close;
    unsigned char *in;       /* DATA of the stream not yet cut into messages */
    size_t inlen, incap;
    int oom;
    int answered;            /* the server sent anything on this stream */
    int closed;              /* the stream is over */
    uint32_t rst;            /* its error code when reset */
    eh2_status *st;
} h2c;

struct eh2 {
    char **host;
    int *port;
    size_t n;
    char **authority;        /* "host:port" */
    int connect_timeout_ms;
#ifdef BATON_ETCD_GRPC_TLS
    SSL_CTX *tls;            /* etcds://: CA, client certificate, ALPN h2 */
#endif
    pthread_mutex_t mu;
    h2c *pool[POOL_MAX];     /* guarded by mu */
    int npool;
};

/* What a user behind an HTTP/1.1 reverse proxy or TLS terminator is told:
 * such a proxy passes the JSON gateway and never gRPC (measured with nginx
 * and haproxy: docs/etcd-engine.md, "Why two transports"). */
#define H1_PROXY_HINT                                                                              \
    "a proxy that speaks HTTP/1.1 to etcd passes only transport=gateway (nginx: grpc_pass passes " \
    "gRPC; haproxy: proto h2)"

/* ---- nghttp2 callbacks --------------------------------------------------- */

static int pct_val(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* grpc-message is percent-encoded. */
static void pct_decode(char *dst, size_t n, const uint8_t *s, size_t len)
{
    size_t k = 0;
    for (size_t i = 0; i < len && k + 1 < n; i++) {
        int a, b;
        if (s[i] == '%' && i + 2 < len && (a = pct_val(s[i + 1])) >= 0 && (b = pct_val(s[i + 2])) >= 0) {
            dst[k++] = (char)(a << 4 | b);
            i += 2;
        } else {
            dst[k++] = (char)s[i];
        }
    }
    dst[k] = 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *arg)
{
    h2c *c = arg;
    (void)s, (void)flags;
    if (f->hd.stream_id != c->sid || !c->st) return 0;
    c->answered = 1;
    if (nlen == 7 && !memcmp(name, ":status", 7)) {
        c->st->http = 0;
        for (size_t i = 0; i < vlen && i < 4; i++)
            if (value[i] >= '0' && value[i] <= '9') c->st->http = c->st->http * 10 + (value[i] - '0');
    } else if (nlen == 11 && !memcmp(name, "grpc-status", 11)) {
        int v = vlen ? 0 : -2;
        for (size_t i = 0; i < vlen && v >= 0; i++)
            v = value[i] >= '0' && value[i] <= '9' && i < 4 ? v * 10 + (value[i] - '0') : -2;
        c->st->grpc_status = v;     /* -2: not a number */
    } else if (nlen == 12 && !memcmp(name, "grpc-message", 12)) {
        pct_decode(c->st->message, sizeof c->st->message, value, vlen);
    } else if (nlen == 12 && !memcmp(name, "content-type", 12)) {
        c->st->is_grpc = vlen >= 16 && !memcmp(value, "application/grpc", 16);
    }
    return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t sid, const uint8_t *data, size_t len, void *arg)
{
    h2c *c = arg;
    (void)s, (void)flags;
    if (sid != c->sid) return 0;
    c->answered = 1;
    if (!len) return 0;
    if (c->inlen + len > c->incap) {
        size_t cap = c->incap ? c->incap * 2 : 4096;
        while (cap < c->inlen + len) cap *= 2;
        if (cap > MSG_MAX + 4096) {
            c->oom = 2;      /* too large */
            return 0;
        }
        unsigned char *p = realloc(c->in, cap);
        if (!p) {
            c->oom = 1;
            return 0;
        }
        c->in = p, c->incap = cap;
    }
    memcpy(c->in + c->inlen, data, len);
    c->inlen += len;
    return 0;
}

static int on_close(nghttp2_session *s, int32_t sid, uint32_t err, void *arg)
{
    h2c *c = arg;
    (void)s;
    if (sid == c->sid) {
        c->closed = 1;
        c->rst = err;
    }
    return 0;
}

static int on_frame(nghttp2_session *s, const nghttp2_frame *f, void *arg)
{
    h2c *c = arg;
    (void)s;
    if (f->hd.type == NGHTTP2_GOAWAY) c->unusable = 1;
    if (f->hd.type == NGHTTP2_SETTINGS) c->h2ok = 1;
    return 0;
}

static ssize_t read_body(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *arg)
{
    h2c *c = arg;
    size_t n = c->outlen - c->outpos;
    (void)s, (void)sid, (void)src;
    if (n == 0 && !c->half_close) return NGHTTP2_ERR_DEFERRED;  /* a watch: the stream stays open */
    if (n > len) n = len;
    memcpy(buf, c->out + c->outpos, n);
    c->outpos += n;
    if (c->outpos == c->outlen && c->half_close) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

/* ---- connections ---------------------------------------------------------- */

static void conn_free(h2c *c)
{
    if (!c) return;
    if (c->s) nghttp2_session_del(c->s);
#ifdef BATON_ETCD_GRPC_TLS
    if (c->ssl) {
        /* close_notify, best effort (non-blocking: never waits) */
        ERR_clear_error();
        if (!c->unusable) SSL_shutdown(c->ssl);
        SSL_free(c->ssl);
        ERR_clear_error();
    }
#endif
    if (c->fd >= 0) close(c->fd);
    free(c->in);
    free(c);
}

static int wait_fd(int fd, short ev, int64_t deadline_ns)
{
    for (;;) {
        int64_t left = (deadline_ns - baton_now_ns()) / 1000000;
        struct pollfd p = { .fd = fd, .events = ev };
        if (left <= 0) return BATON_ETIMEDOUT;
        int r = poll(&p, 1, left > WATCH_SLICE_MS ? WATCH_SLICE_MS : (int)left);
        if (r > 0) return 0;
        if (r < 0 && errno != EINTR) return BATON_EIO;
    }
}

/* ---- TLS (etcds://) ------------------------------------------------------- */

#ifdef BATON_ETCD_GRPC_TLS
/* A socket BIO of our own: send() with MSG_NOSIGNAL, so a member that closed
 * the connection is an error, not a SIGPIPE (OpenSSL's writes with write()). */
static BIO_METHOD *sock_method;
static pthread_once_t sock_once = PTHREAD_ONCE_INIT;

static int sbio_write(BIO *b, const char *buf, int len)
{
    ssize_t n = send((int)(intptr_t)BIO_get_data(b), buf, (size_t)len, MSG_NOSIGNAL);
    BIO_clear_retry_flags(b);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_write(b);
    return n < 0 ? -1 : (int)n;
}

static int sbio_read(BIO *b, char *buf, int len)
{
    ssize_t n = recv((int)(intptr_t)BIO_get_data(b), buf, (size_t)len, 0);
    BIO_clear_retry_flags(b);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_read(b);
    return n < 0 ? -1 : (int)n;
}

static long sbio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b, (void)num, (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int sbio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static int sbio_destroy(BIO *b)
{
    (void)b;
    return 1;
}

static void sock_method_init(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "baton-etcd-socket");
    if (!m) return;
    BIO_meth_set_write(m, sbio_write);
    BIO_meth_set_read(m, sbio_read);
    BIO_meth_set_ctrl(m, sbio_ctrl);
    BIO_meth_set_create(m, sbio_create);
    BIO_meth_set_destroy(m, sbio_destroy);
    sock_method = m;
}

static const char *tls_errstr(char *buf, size_t n)
{
    unsigned long e = ERR_peek_last_error();
    if (!e) snprintf(buf, n, "unknown TLS error");
    else ERR_error_string_n(e, buf, n);
    return buf;
}

/* FILE (the option WHAT names) must be readable: OpenSSL's own message for
 * a missing file is "system lib". */
static int tls_readable(const char *what, const char *opt, const char *file)
{
    if (access(file, R_OK))
        return baton_seterr(BATON_EAUTH, errno, "etcd: TLS: cannot read the %s (%s) %s: %s", what, opt, file,
                            strerror(errno));
    return 0;
}

/* The context every connection of H starts from: a missing or unreadable
 * CA, certificate or key is BATON_EAUTH now, before anything is sent. */
static int tls_ctx_new(eh2 *h, const egw_config *cfg)
{
    char eb[256];
    const char *key = cfg->key ? cfg->key : cfg->cert;   /* as curl: the key may be in the certificate's file */
    SSL_CTX *ctx;
    int rc;

    if ((rc = baton__ossl_load())) return rc;
    pthread_once(&sock_once, sock_method_init);
    if (!sock_method) return baton_seterr(BATON_ENOMEM, 0, "etcd: TLS: cannot make a BIO method");
    if (cfg->key && !cfg->cert)
        return baton_seterr(BATON_EINVAL, 0, "etcd: option key needs cert (the client certificate)");
    if ((cfg->cacert && (rc = tls_readable("CA file", "cacert", cfg->cacert))) ||
        (cfg->cert && (rc = tls_readable("client certificate", "cert", cfg->cert))) ||
        (cfg->cert && (rc = tls_readable("client key", "key", key))))
        return rc;
    ERR_clear_error();
    if (!(ctx = SSL_CTX_new(TLS_client_method())))
        return baton_seterr(BATON_ENOMEM, 0, "etcd: TLS: cannot make a context: %s", tls_errstr(eb, sizeof eb));
    /* HTTP/2 wants TLS 1.2 at least (RFC 9113 9.2) */
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* send_all retries a write from the same bytes, maybe after a partial one */
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE);
    if (SSL_CTX_set_alpn_protos(ctx, (const unsigned char *)"\x02h2", 3)) {   /* 0 is success here */
        rc = baton_seterr(BATON_ENOMEM, 0, "etcd: TLS: cannot offer ALPN h2: %s", tls_errstr(eb, sizeof eb));
        goto fail;
    }
    if (cfg->cacert) {
        if (SSL_CTX_load_verify_locations(ctx, cfg->cacert, NULL) != 1) {
            rc = baton_seterr(BATON_EAUTH, 0, "etcd: TLS: cannot read the CA file (cacert) %s: %s", cfg->cacert,
                              tls_errstr(eb, sizeof eb));
            goto fail;
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        rc = baton_seterr(BATON_EAUTH, 0, "etcd: TLS: cannot load the system's CA certificates: %s",
                          tls_errstr(eb, sizeof eb));
        goto fail;
    }
    if (cfg->cert) {
        if (SSL_CTX_use_certificate_chain_file(ctx, cfg->cert) != 1) {
            rc = baton_seterr(BATON_EAUTH, 0, "etcd: TLS: cannot read the client certificate (cert) %s: %s",
                              cfg->cert, tls_errstr(eb, sizeof eb));
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
            rc = baton_seterr(BATON_EAUTH, 0, "etcd: TLS: cannot use the client key (key) %s: %s", key,
                              tls_errstr(eb, sizeof eb));
            goto fail;
        }
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    ERR_clear_error();
    h->tls = ctx;
    return 0;
fail:
    SSL_CTX_free(ctx);
    ERR_clear_error();
    return rc;
}

/* The handshake on C's connected socket, before DEADLINE_NS: the member's
 * certificate checked against its name or IP, then ALPN must say h2. */
static int tls_handshake(eh2 *h, h2c *c, int64_t deadline_ns)
{
    const char *host = h->host[c->member], *who = h->authority[c->member];
    unsigned char a[16];
    const unsigned char *proto = NULL;
    unsigned int plen = 0;
    char eb[256];
    int ip = inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
    BIO *b;

    ERR_clear_error();
    if (!(c->ssl = SSL_new(h->tls)) || !(b = BIO_new(sock_method)))
        return baton_seterr(BATON_ENOMEM, 0, "etcd: %s: TLS: out of memory", who);
    BIO_set_data(b, (void *)(intptr_t)c->fd);
    SSL_set_bio(c->ssl, b, b);
    if (ip) {
        /* an IP literal: no SNI (RFC 6066 3), the certificate must name the IP */
        if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), host) != 1)
            return baton_seterr(BATON_EINVAL, 0, "etcd: %s: TLS: bad IP address", who);
    } else if (!SSL_set_tlsext_host_name(c->ssl, host) || SSL_set1_host(c->ssl, host) != 1) {
        return baton_seterr(BATON_ENOMEM, 0, "etcd: %s: TLS: cannot set the host name", who);
    }
    for (;;) {
        int r, e, w;
        ERR_clear_error();
        if ((r = SSL_connect(c->ssl)) == 1) break;
        e = SSL_get_error(c->ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            w = wait_fd(c->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline_ns);
            if (w == BATON_ETIMEDOUT)
                return baton_seterr(BATON_EUNAVAILABLE, ETIMEDOUT, "etcd: %s: TLS handshake: no answer within %d ms",
                                    who, h->connect_timeout_ms);
            if (w) return baton_seterr(BATON_EUNAVAILABLE, errno, "etcd: %s: poll: %s", who, strerror(errno));
            continue;
        }
        long v = SSL_get_verify_result(c->ssl);
        if (v != X509_V_OK)
            return baton_seterr(BATON_EAUTH, (int)v, "etcd: %s: TLS: the server's certificate is not trusted: %s",
                                who, X509_verify_cert_error_string(v));
        if (e == SSL_ERROR_SYSCALL && !ERR_peek_last_error())
            return baton_seterr(BATON_EUNAVAILABLE, errno, "etcd: %s: TLS handshake: %s", who,
                                errno ? strerror(errno) : "the connection was closed");
        /* a TLS terminator that speaks only HTTP/1.1 refuses our ALPN h2
         * outright (nginx without http2): not a matter of credentials */
        if (ERR_GET_REASON(ERR_peek_last_error()) == SSL_R_TLSV1_ALERT_NO_APPLICATION_PROTOCOL)
            return baton_seterr(BATON_EPROTO, e, "etcd: %s: TLS: the server refused HTTP/2 (ALPN h2): " H1_PROXY_HINT,
                                who);
        /* the server refused us (no or a wrong client certificate under TLS
         * 1.2, no common version or cipher) or does not speak TLS */
        return baton_seterr(BATON_EAUTH, e, "etcd: %s: TLS handshake failed: %s", who, tls_errstr(eb, sizeof eb));
    }
    SSL_get0_alpn_selected(c->ssl, &proto, &plen);
    if (plen != 2 || memcmp(proto, "h2", 2))
        return baton_seterr(BATON_EPROTO, 0, "etcd: %s: TLS: the server did not agree to HTTP/2 (ALPN h2%s%.*s); "
                            "use transport=gateway", who, plen ? ", it chose " : "", (int)plen, (const char *)proto);
    return 0;
}
#endif

/* Writes up to N bytes: how many (> 0), 0 when the socket would block (*EV:
 * what to poll for), -1 with the error set. */
static ssize_t io_send(eh2 *h, h2c *c, const uint8_t *p, size_t n, short *ev)
{
    *ev = POLLOUT;
#ifdef BATON_ETCD_GRPC_TLS
    if (c->ssl) {
        char eb[256];
        int r, e;
        ERR_clear_error();
        if ((r = SSL_write(c->ssl, p, n > 1 << 30 ? 1 << 30 : (int)n)) > 0) return r;
        e = SSL_get_error(c->ssl, r);
        if (e == SSL_ERROR_WANT_WRITE) return 0;
        if (e == SSL_ERROR_WANT_READ) return *ev = POLLIN, 0;
        if (e == SSL_ERROR_SYSCALL && !ERR_peek_last_error())
            return baton_seterr(BATON_EUNAVAILABLE, errno, "etcd: %s: %s", h->authority[c->member],
                                errno ? strerror(errno) : "the connection was closed"), -1;
        return baton_seterr(BATON_EUNAVAILABLE, e, "etcd: %s: TLS: %s", h->authority[c->member],
                            tls_errstr(eb, sizeof eb)), -1;
    }
#endif
    ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
    if (w > 0) return w;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    return baton_seterr(BATON_EUNAVAILABLE, errno, "etcd: %s: %s", h->authority[c->member], strerror(errno)), -1;
}

/* Reads up to N bytes: how many (> 0), 0 when nothing more has come (*EV:
 * POLLOUT when TLS must write first), -1 with the error set, -2 at the end
 * of the connection. */
static ssize_t io_recv(eh2 *h, h2c *c, uint8_t *buf, size_t n, short *ev)
{
    *ev = POLLIN;
#ifdef BATON_ETCD_GRPC_TLS
    if (c->ssl) {
        char eb[256];
        int r, e;
        ERR_clear_error();
        if ((r = SSL_read(c->ssl, buf, (int)n)) > 0) return r;
        e = SSL_get_error(c->ssl, r);
        if (e == SSL_ERROR_WANT_READ) return 0;
        if (e == SSL_ERROR_WANT_WRITE) return *ev = POLLOUT, 0;
        if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && !ERR_peek_last_error() && !errno)) return -2;
        if (e == SSL_ERROR_SYSCALL && !ERR_peek_last_error())
            return baton_seterr(BATON_EUNAVAILABLE, errno, "etcd: %s: %s", h->authority[c->member],
                                strerror(errno)), -1;
        /* under TLS 1.3 the server checks our certificate after our side
         * of the handshake is done: its refusal is the first thing we read */
        if (!c->rx)
            return baton_seterr(BATON_EAUTH, e, "etcd: %s: TLS: the server refused the connection: %s",
                                h->authority[c->member], tls_errstr(eb, sizeof eb)), -1;
        return baton_seterr(BATON_EUNAVAILABLE, e, "etcd: %s: TLS: %s", h->authority[c->member],
                            tls_errstr(eb, sizeof eb)), -1;
    }
#endif
    ssize_t r = recv(c->fd, buf, n, 0);
    if (r > 0) return r;
    if (r == 0) return -2;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
    return baton_seterr(BATON_EUNAVAILABLE, errno, "etcd: %s: %s", h->authority[c->member], strerror(errno)), -1;
}

/* Bytes OpenSSL has decrypted and we have not read: poll() cannot see them. */
static int io_pending(h2c *c)
{
#ifdef BATON_ETCD_GRPC_TLS
    if (c->ssl) return SSL_pending(c->ssl) > 0;
#endif
    (void)c;
    return 0;
}

/* A name lookup that ends at a deadline. getaddrinfo() has none (a silent
 * DNS server costs resolv.conf's timeout × attempts, 10 s and more), so a
 * name that is not an address is looked up on a thread of its own; the
 * caller waits for it until DEADLINE and then leaves it to finish alone
 * (the lookup and its caller share a reference-counted record). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* CLOCK_MONOTONIC */
    int refs, done, rc;
    char *host, *port;
    struct addrinfo *res;
} lookup_t;

static void lookup_put(lookup_t *l)
{
    int last;
    pthread_mutex_lock(&l->mu);
    last = --l->refs == 0;
    pthread_mutex_unlock(&l->mu);
    if (!last) return;
    if (l->res) freeaddrinfo(l->res);
    free(l->host);
    free(l->port);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

static void *lookup_main(void *arg)
{
    lookup_t *l = arg;
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC }, *res = NULL;
    int rc = getaddrinfo(l->host, l->port, &hints, &res);
    pthread_mutex_lock(&l->mu);
    l->rc = rc;
    l->res = res;
    l->done = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    lookup_put(l);
    return NULL;
}

/* 0 with *RES (freeaddrinfo it), a getaddrinfo error, or EAI_AGAIN when
 * DEADLINE came first. */
static int resolve(const char *host, const char *port, int64_t deadline, struct addrinfo **res)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC, .ai_flags = AI_NUMERICHOST };
    pthread_condattr_t ca;
    pthread_attr_t ta;
    pthread_t th;
    lookup_t *l;
    int rc;

    *res = NULL;
    if (!getaddrinfo(host, port, &hints, res)) return 0; /* an address: no lookup */
    if (!(l = calloc(1, sizeof *l)) || !(l->host = strdup(host)) || !(l->port = strdup(port))) {
        if (l) free(l->host);
        free(l);
        return EAI_MEMORY;
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    l->refs = 2;
    pthread_attr_init(&ta);
    pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&th, &ta, lookup_main, l);
    pthread_attr_destroy(&ta);
    if (rc) {
        l->refs = 1;
        lookup_put(l);
        return EAI_AGAIN;
    }
    pthread_mutex_lock(&l->mu);
    while (!l->done && baton_now_ns() < deadline) {
        struct timespec ts = { .tv_sec = (time_t)(deadline / 1000000000LL), .tv_nsec = (long)(deadline % 1000000000LL) };
        pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    }
    if (l->done) {
        rc = l->rc;
        *res = l->res;
        l->res = NULL;
    } else {
        rc = EAI_AGAIN;
    }
    pthread_mutex_unlock(&l->mu);
    lookup_put(l);
    return rc;
}

/* A new connection to MEMBER: lookup, connect (and TLS) by the connect
 * timeout, and never past DEADLINE (the call's own). */
static int conn_new(eh2 *h, size_t member, int64_t call_deadline, h2c **out)
{
    struct addrinfo *res = NULL, *ai;
    char port[16];
    nghttp2_session_callbacks *cb = NULL;
    nghttp2_settings_entry set[] = { { NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
                                     { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20 } };
    int64_t deadline = baton_now_ns() + (int64_t)h->connect_timeout_ms * 1000000;
    int fd = -1, rc, one = 1, err = 0;
    h2c *c;

    *out = NULL;
    if (call_deadline < deadline) deadline = call_deadline;
    snprintf(port, sizeof port, "%d", h->port[member]);
    if ((rc = resolve(h->host[member], port, deadline, &res)))
        return baton_seterr(BATON_EUNAVAILABLE, rc, "etcd: %s: %s", h->authority[member],
                            rc == EAI_AGAIN && baton_now_ns() >= deadline ? "no name lookup answer in time"
                                                                          : gai_strerror(rc));
    for (ai = res; ai && fd < 0; ai = ai->ai_next) {
        if ((fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol)) < 0) {
            err = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS) {
            err = errno;
        } else if ((rc = wait_fd(fd, POLLOUT, deadline))) {
            err = rc == BATON_ETIMEDOUT ? ETIMEDOUT : errno;
        } else {
            socklen_t sl = sizeof err;
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl)) err = errno;
        }
        if (err) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        return baton_seterr(BATON_EUNAVAILABLE, err, "etcd: %s: cannot connect: %s", h->authority[member],
                            strerror(err ? err : ECONNREFUSED));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (!(c = calloc(1, sizeof *c))) {
        close(fd);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    c->fd = fd;
    c->member = member;
    c->sid = -1;
#ifdef BATON_ETCD_GRPC_TLS
    if (h->tls && (rc = tls_handshake(h, c, deadline))) {
        c->unusable = 1;
        conn_free(c);
        return rc;
    }
#endif
    if (nghttp2_session_callbacks_new(&cb)) goto nomem;
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame);
    rc = nghttp2_session_client_new(&c->s, cb, c);
    nghttp2_session_callbacks_del(cb);
    if (rc || nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, set, sizeof set / sizeof set[0])) goto nomem;
    /* the connection's own window too, so a burst of watch events never waits on it */
    nghttp2_session_set_local_window_size(c->s, NGHTTP2_FLAG_NONE, 0, 1 << 24);
    *out = c;
    return 0;
nomem:
    conn_free(c);
    return baton_seterr(BATON_ENOMEM, 0, "out of memory");
}

static int send_all(eh2 *h, h2c *c, const uint8_t *p, size_t n, int64_t deadline_ns)
{
    while (n > 0) {
        short ev;
        ssize_t w = io_send(h, c, p, n, &ev);
        if (w > 0) {
            p += w, n -= (size_t)w;
            continue;
        }
        if (w < 0) {
            c->unusable = 1;
            return baton_error_last()->code;
        }
        if (wait_fd(c->fd, ev, deadline_ns) == BATON_ETIMEDOUT) {
            /* part of a frame may be out: the connection is not reused */
            c->unusable = 1;
            return BATON_ETIMEDOUT;
        }
    }
    return 0;
}

/* Sends what the session has to send, before DEADLINE: the frames of a
 * call (HEADERS, DATA, a WINDOW_UPDATE) gathered into one send. */
static int flush(eh2 *h, h2c *c, int64_t deadline_ns)
{
    uint8_t buf[16384];
    size_t used = 0;
    int rc;
    for (;;) {
        const uint8_t *p;
        ssize_t n = nghttp2_session_mem_send(c->s, &p);
        if (n < 0) {
            c->unusable = 1;
            return baton_seterr(BATON_EPROTO, (int)n, "etcd: grpc: %s", nghttp2_strerror((int)n));
        }
        if (n == 0) break;
        if (used + (size_t)n <= sizeof buf) {
            memcpy(buf + used, p, (size_t)n);
            used += (size_t)n;
            continue;
        }
        if ((rc = send_all(h, c, buf, used, deadline_ns)) || (rc = send_all(h, c, p, (size_t)n, deadline_ns)))
            return rc;
        used = 0;
    }
    return send_all(h, c, buf, used, deadline_ns);
}

static int not_h2(eh2 *h, h2c *c)
{
    return baton_seterr(BATON_EPROTO, 0, "etcd: %s: not an HTTP/2 server (is it etcd's client port? " H1_PROXY_HINT ")",
                        h->authority[c->member]);
}

/* Reads what has arrived (nothing when nothing has): 0, or an error when the
 * connection ended or broke. */
static int pump(eh2 *h, h2c *c)
{
    uint8_t buf[16384];
    size_t got = 0;
    for (;;) {
        short ev;
        ssize_t n = io_recv(h, c, buf, sizeof buf, &ev);
        if (n == 0 && ev == POLLOUT) {
            /* TLS wants to write before it reads (a key update): let it */
            if (wait_fd(c->fd, POLLOUT, baton_now_ns() + 1000000000LL)) return 0;
            continue;
        }
        if (n == 0) return 0;
        if (n < 0) {
            int rc = n == -1 ? baton_error_last()->code : 0;
            c->unusable = 1;
            if (c->rx && !c->h2ok) return not_h2(h, c);
            if (rc) return rc;
            return baton_seterr(BATON_EUNAVAILABLE, 0, "etcd: %s: the connection was closed", h->authority[c->member]);
        }
        c->rx += (size_t)n;
        got += (size_t)n;
        ssize_t r = nghttp2_session_mem_recv(c->s, buf, (size_t)n);
        if (r < 0) {
            c->unusable = 1;
            return baton_seterr(BATON_EPROTO, (int)r, "etcd: %s: not an HTTP/2 (gRPC) answer: %s",
                                h->authority[c->member], nghttp2_strerror((int)r));
        }
        /* a short read emptied the socket; but what OpenSSL decrypted and
         * holds must be read now: poll() would not wake for it. After 1 MB
         * the rest waits for the next turn of the caller's loop. */
        if (((size_t)n < sizeof buf || got >= 1u << 20) && !io_pending(c)) return 0;
    }
}

/* A pooled connection still usable: whatever the server sent while it sat
 * there (a GOAWAY, the end) is read now. */
static int conn_alive(eh2 *h, h2c *c)
{
    return !c->unusable && !pump(h, c) && !c->unusable && nghttp2_session_want_read(c->s);
}

static h2c *pool_get(eh2 *h, size_t member)
{
    h2c *c = NULL;
    pthread_mutex_lock(&h->mu);
    for (int i = h->npool - 1; i >= 0; i--)
        if (h->pool[i]->member == member) {
            c = h->pool[i];
            h->pool[i] = h->pool[--h->npool];
            break;
        }
    pthread_mutex_unlock(&h->mu);
    return c;
}

static void pool_put(eh2 *h, h2c *c)
{
    if (!c) return;
    c->sid = -1;
    c->st = NULL;
    c->inlen = 0;
    if (!c->unusable && !c->oom) {
        pthread_mutex_lock(&h->mu);
        if (h->npool < POOL_MAX) {
            h->pool[h->npool++] = c;
            c = NULL;
        }
        pthread_mutex_unlock(&h->mu);
    }
    conn_free(c);
}

/* ---- setup ---------------------------------------------------------------- */

int eh2_new(eh2 **out, const baton_uri *u, const egw_config *cfg)
{
    eh2 *h;
#ifdef BATON_ETCD_GRPC_TLS
    int rc;
#endif

    *out = NULL;
#ifndef BATON_ETCD_GRPC_TLS
    if (cfg->tls)
        return baton_seterr(BATON_ENOTSUP, 0, "etcd: transport=grpc: this build has no TLS for it (OpenSSL headers, "
                            "libssl-dev, missing at build time): use etcds://...?transport=gateway");
#endif
    if (!(h = calloc(1, sizeof *h))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    pthread_mutex_init(&h->mu, NULL);
    h->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 2000;
#ifdef BATON_ETCD_GRPC_TLS
    /* OpenSSL is loaded here, on the first etcds:// open, never for etcd:// */
    if (cfg->tls && (rc = tls_ctx_new(h, cfg))) {
        eh2_free(h);
        return rc;
    }
#endif
    if (!(h->host = calloc(u->nhosts, sizeof *h->host)) || !(h->port = calloc(u->nhosts, sizeof *h->port)) ||
        !(h->authority = calloc(u->nhosts, sizeof *h->authority)))
        goto nomem;
    for (size_t i = 0; i < u->nhosts; i++) {
        const char *host = u->hosts[i].host;
        size_t n = strlen(host) + 16;
        int v6 = strchr(host, ':') != NULL;
        h->port[i] = u->hosts[i].port > 0 ? u->hosts[i].port : 2379;
        if (!(h->host[i] = strdup(host)) || !(h->authority[i] = malloc(n))) goto nomem;
        snprintf(h->authority[i], n, "%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", h->port[i]);
        h->n++;
    }
    *out = h;
    return 0;
nomem:
    if (h->host && h->n < u->nhosts) free(h->host[h->n]);
    eh2_free(h);
    return baton_seterr(BATON_ENOMEM, 0, "out of memory");
}

void eh2_free(eh2 *h)
{
    if (!h) return;
    for (int i = 0; i < h->npool; i++) conn_free(h->pool[i]);
    for (size_t i = 0; i < h->n; i++) free(h->host[i]), free(h->authority[i]);
    free(h->host), free(h->port), free(h->authority);
#ifdef BATON_ETCD_GRPC_TLS
    if (h->tls) SSL_CTX_free(h->tls);
#endif
    pthread_mutex_destroy(&h->mu);
    free(h);
}

const char *eh2_authority(eh2 *h, size_t member)
{
    return h->authority[member % h->n];
}

/* ---- a call --------------------------------------------------------------- */

/* Cuts the complete messages off c->in and hands them to CB: 1 when CB
 * said it has what it waited for, an error for a bad frame. */
static int deliver(h2c *c, eh2_on_msg cb, void *arg)
{
    size_t at = 0;
    int rc = 0;
    while (c->inlen - at >= 5) {
        const unsigned char *p = c->in + at;
        uint32_t len = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
        if (p[0] != 0) {
            rc = baton_seterr(BATON_EPROTO, 0, "etcd: grpc: a compressed message (none was offered)");
            break;
        }
        if (len > MSG_MAX) {
            rc = baton_seterr(BATON_EPROTO, 0, "etcd: grpc: a message of %u bytes", len);
            break;
        }
        if (c->inlen - at - 5 < len) break;
        at += 5 + len;
        if ((rc = cb(arg, p + 5, len))) break;
    }
    if (at) {
        memmove(c->in, c->in + at, c->inlen - at);
        c->inlen -= at;
    }
    return rc;
}

static int call_once(eh2 *h, h2c *c, const char *path, const char *token, const unsigned char *msg, size_t len,
                     int half_close, int64_t deadline_ns, baton_waiter *w, eh2_on_msg cb, void *arg, eh2_status *st)
{
    char tmo[32];
    nghttp2_nv hdr[8];
    size_t nh = 0;
    nghttp2_data_provider prd = { .read_callback = read_body };
    int rc = 0;

#define NV(n, v) (hdr[nh++] = (nghttp2_nv){ (uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE })
    NV(":method", "POST");
#ifdef BATON_ETCD_GRPC_TLS
    NV(":scheme", h->tls ? "https" : "http");
#else
    NV(":scheme", "http");
#endif
    NV(":path", path);
    NV(":authority", h->authority[c->member]);
    NV("content-type", "application/grpc");
    NV("te", "trailers");
    if (deadline_ns != INT64_MAX) {
        int64_t ms = (deadline_ns - baton_now_ns()) / 1000000;
        /* at most 8 digits; a longer deadline is sent as none */
        snprintf(tmo, sizeof tmo, "%lldm", (long long)(ms > 1 ? ms : 1));
        if (ms <= 99999999) NV("grpc-timeout", tmo);
    }
    if (token) NV("token", token);
#undef NV
    memset(st, 0, sizeof *st);
    st->grpc_status = -1;
    c->out = msg, c->outlen = len, c->outpos = 0, c->half_close = half_close;
    c->inlen = 0, c->answered = 0, c->closed = 0, c->rst = 0, c->st = st;
    c->sid = nghttp2_submit_request(c->s, NULL, hdr, nh, &prd, c);
    if (c->sid < 0) {
        c->unusable = 1;
        return baton_seterr(c->sid == NGHTTP2_ERR_NOMEM ? BATON_ENOMEM : BATON_EUNAVAILABLE, c->sid,
                            "etcd: grpc: cannot start a stream: %s", nghttp2_strerror(c->sid));
    }
    for (;;) {
        int64_t now, slice = WATCH_SLICE_MS;
        struct pollfd p = { .fd = c->fd, .events = POLLIN };
        if ((rc = flush(h, c, deadline_ns))) break;
        /* a body that is not gRPC (a proxy that took our HTTP/2 and asked
         * etcd in HTTP/1.1 gets its 404 page) is not read as messages */
        if (c->inlen && !st->is_grpc) {
            c->unusable = 1;
            rc = baton_seterr(BATON_EPROTO, st->http, "etcd: %s%s: not a gRPC answer (HTTP %d): " H1_PROXY_HINT,
                              h->authority[c->member], path, st->http);
            break;
        }
        if ((rc = deliver(c, cb, arg))) break;
        if (c->oom) {
            rc = c->oom == 2 ? baton_seterr(BATON_EPROTO, 0, "etcd: grpc: an answer too large")
                             : baton_seterr(BATON_ENOMEM, 0, "out of memory");
            break;
        }
        if (c->closed) break;
        if (!nghttp2_session_want_read(c->s) && !nghttp2_session_want_write(c->s)) {
            c->unusable = 1;
            rc = !c->h2ok ? not_h2(h, c) : baton_seterr(BATON_EUNAVAILABLE, 0, "etcd: %s: the HTTP/2 session ended", h->authority[c->member]);
            break;
        }
        if (w && baton_waiter_canceled(w)) {
            rc = BATON_ECANCELED;
            break;
        }
        now = baton_now_ns();
        if (deadline_ns != INT64_MAX && now >= deadline_ns) {
            rc = BATON_ETIMEDOUT;
            break;
        }
        if (deadline_ns != INT64_MAX && (deadline_ns - now) / 1000000 < slice) slice = (deadline_ns - now) / 1000000 + 1;
        /* a unary call has no waiter to look at: it sleeps until data or the deadline */
        if (!w) slice = deadline_ns == INT64_MAX || deadline_ns - now > 1000000000LL ? 1000 : (deadline_ns - now) / 1000000 + 1;
        int r = poll(&p, 1, (int)slice);
        if (r < 0 && errno != EINTR) {
            rc = baton_seterr(BATON_EIO, errno, "etcd: poll: %s", strerror(errno));
            break;
        }
        if (r > 0 && (rc = pump(h, c))) break;
    }
    if (rc == 1) rc = 0, st->stopped = 1;
    if (!c->closed && !c->unusable) {
        /* we stop listening before the server stops talking (a watch, a
         * deadline): the stream goes, the connection stays */
        nghttp2_submit_rst_stream(c->s, NGHTTP2_FLAG_NONE, c->sid, NGHTTP2_CANCEL);
        if (flush(h, c, baton_now_ns() + 200000000LL)) c->unusable = 1;
    }
    if (!rc && st->grpc_status == -2) {
        rc = baton_seterr(BATON_EPROTO, 0, "etcd: %s%s: a grpc-status that is not a number", h->authority[c->member],
                          path);
    } else if (c->closed && !rc && st->grpc_status < 0 && !st->stopped) {
        if (c->rst)
            rc = baton_seterr(BATON_EUNAVAILABLE, (int)c->rst, "etcd: %s: the stream was reset (HTTP/2 error %u)",
                              h->authority[c->member], c->rst);
        else if (!st->is_grpc)
            rc = baton_seterr(BATON_EPROTO, st->http, "etcd: %s%s: not a gRPC answer (HTTP %d)",
                              h->authority[c->member], path, st->http);
        else
            rc = baton_seterr(BATON_EPROTO, st->http, "etcd: %s%s: a gRPC answer without grpc-status",
                              h->authority[c->member], path);
    }
    st->answered = c->answered;
    return rc;
}

int eh2_call(eh2 *h, size_t member, const char *path, const char *token, const unsigned char *msg, size_t len,
             int half_close, int64_t deadline_ns, baton_waiter *w, eh2_on_msg cb, void *arg, eh2_status *st)
{
    member %= h->n;
    for (int attempt = 0; attempt < 2; attempt++) {
        h2c *c = pool_get(h, member);
        int reused = c != NULL, rc;
        if (c && !conn_alive(h, c)) {
            conn_free(c);
            c = NULL, reused = 0;
        }
        if (!c && (rc = conn_new(h, member, deadline_ns, &c))) return rc;
        rc = call_once(h, c, path, token, msg, len, half_close, deadline_ns, w, cb, arg, st);
        /* a unary call that timed out: a silent member, not this connection
         * again (a watch's deadline is only the caller's) */
        if (rc == BATON_ETIMEDOUT && half_close) c->unusable = 1;
        pool_put(h, c);
        /* a kept connection that broke before any answer: the server had
         * closed it meanwhile; once more on a new one */
        if (rc == BATON_EUNAVAILABLE && reused && !st->answered) continue;
        return rc;
    }
    return BATON_EUNAVAILABLE;
}
