/* baton check: the link faults (--link-freeze, --link-cut). The checker puts
 * a loopback forwarder of its own between each client lane and the engine:
 * one listening port per lane and engine address, the lane's URI rewritten to
 * name them. A thread relays the bytes with poll(); the checker's loop asks it
 * to freeze a lane (nothing moves, the sockets stay open, new connections
 * wait in the backlog: what a partition or a paused VM does to a client) or
 * to cut it (every connection of the lane reset, both sides).
 *
 * The thread only relays; the decisions are the loop's. The two talk through
 * atomics and a wake-up pipe, so a frozen lane never blocks the checker. */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define LINK_MAX_HOSTS 16
#define LINK_BUF 65536

typedef struct {
    int fd;                     /* the lane's listening socket for one engine address */
    int lane, host;
} lsock;

typedef struct {
    unsigned char buf[LINK_BUF];
    size_t len, off;
    int eof;                    /* the source said EOF: shut the sink's write side once drained */
} pipe_buf;

typedef struct conn {
    int a, b;                   /* a: the client's (accepted), b: the engine's */
    int lane;
    int connecting;             /* b's non-blocking connect is under way */
    pipe_buf ab, ba;
    int a_shut, b_shut;         /* write sides shut */
    struct conn *next;
} conn;

struct check_link {
    int lanes, nhosts;
    struct sockaddr_storage target[LINK_MAX_HOSTS];
    socklen_t target_len[LINK_MAX_HOSTS];
    lsock *ls;                  /* lanes * nhosts */
    char **uris;                /* one rewritten URI per lane */
    conn *conns;
    int wake[2];
    pthread_t th;
    int started;
    atomic_int stop;
    atomic_int *frozen;         /* per lane */
    atomic_uint *cut_req;       /* per lane: bumped by link_cut */
    unsigned *cut_seen;         /* the thread's copy */
};

/* A reset, not a FIN: what a broken path looks like to both peers. */
static void reset_close(int fd)
{
    struct linger lg = { 1, 0 };
    if (fd < 0) return;
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
}

static void conn_drop(conn *c)
{
    reset_close(c->a);
    reset_close(c->b);
    free(c);
}

static int default_port(const char *scheme, size_t n)
{
    static const struct { const char *s; int port; } d[] = {
        { "redis", 6379 }, { "rediss", 6379 }, { "redlock", 6379 }, { "zk", 2181 }, { "zookeeper", 2181 },
        { "etcd", 2379 }, { "etcds", 2379 }, { "postgres", 5432 }, { "postgresql", 5432 }, { "mysql", 3306 },
        { "mariadb", 3306 },
    };
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        if (strlen(d[i].s) == n && !strncmp(d[i].s, scheme, n)) return d[i].port;
    return 0;
}

/* host[:port] or [v6][:port] of LEN chars: resolved once, here. */
static int resolve(check_link *L, const char *h, size_t len, int defport, char *err, size_t errlen)
{
    char host[256], port[16];
    const char *colon = NULL;
    struct addrinfo hints, *ai = NULL;
    int rc;

    if (L->nhosts == LINK_MAX_HOSTS) {
        snprintf(err, errlen, "more than %d engine addresses", LINK_MAX_HOSTS);
        return -1;
    }
    if (len && h[0] == '[') {
        const char *rb = memchr(h, ']', len);
        if (!rb) { snprintf(err, errlen, "bad address '%.*s'", (int)len, h); return -1; }
        snprintf(host, sizeof host, "%.*s", (int)(rb - h - 1), h + 1);
        if (rb + 1 < h + len && rb[1] == ':') colon = rb + 1;
    } else {
        for (size_t i = len; i > 0; i--)
            if (h[i - 1] == ':') { colon = h + i - 1; break; }
        snprintf(host, sizeof host, "%.*s", (int)(colon ? (size_t)(colon - h) : len), h);
    }
    if (colon) snprintf(port, sizeof port, "%.*s", (int)(h + len - colon - 1), colon + 1);
    else snprintf(port, sizeof port, "%d", defport);
    if (!*host || !*port) { snprintf(err, errlen, "bad address '%.*s'", (int)len, h); return -1; }
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    if ((rc = getaddrinfo(host, port, &hints, &ai)) || !ai) {
        snprintf(err, errlen, "%s:%s: %s", host, port, rc ? gai_strerror(rc) : "no address");
        return -1;
    }
    memcpy(&L->target[L->nhosts], ai->ai_addr, ai->ai_addrlen);
    L->target_len[L->nhosts++] = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

/* scheme://[userinfo@]host[:port][,host[:port]...][/rest]: the addresses,
 * and where the host list starts and ends in URI. */
static int parse(check_link *L, const char *uri, size_t *hs, size_t *he, char *err, size_t errlen)
{
    const char *p = strstr(uri, "://"), *auth, *end, *at, *h;
    int defport;

    if (!p) { snprintf(err, errlen, "the URI has no scheme://"); return -1; }
    if ((p - uri == 4 && !strncmp(uri, "file", 4)) || (p - uri == 6 && !strncmp(uri, "sqlite", 6))) {
        snprintf(err, errlen, "the %.*s engine has no network link to freeze or cut", (int)(p - uri), uri);
        return -1;
    }
    if (!(defport = default_port(uri, (size_t)(p - uri)))) {
        snprintf(err, errlen, "unknown scheme '%.*s'", (int)(p - uri), uri);
        return -1;
    }
    auth = p + 3;
    end = auth + strcspn(auth, "/?#");
    /* the last '@' of the authority ends the user info (a password may have one) */
    at = NULL;
    for (const char *q = auth; q < end; q++)
        if (*q == '@') at = q;
    h = at ? at + 1 : auth;
    if (h == end) { snprintf(err, errlen, "the URI names no host"); return -1; }
    *hs = (size_t)(h - uri);
    *he = (size_t)(end - uri);
    while (h < end) {
        const char *c = memchr(h, ',', (size_t)(end - h));
        size_t n = c ? (size_t)(c - h) : (size_t)(end - h);
        if (resolve(L, h, n, defport, err, errlen)) return -1;
        h += n + (c ? 1 : 0);
    }
    return 0;
}

static int listen_any(int *port)
{
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 64) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

static void accept_one(check_link *L, lsock *s)
{
    conn *c;
    int a = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK), b, one = 1;
    if (a < 0) return;
    b = socket(L->target[s->host].ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (b < 0 || !(c = calloc(1, sizeof *c))) {
        if (b >= 0) close(b);
        reset_close(a);
        return;
    }
    setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->a = a;
    c->b = b;
    c->lane = s->lane;
    if (connect(b, (struct sockaddr *)&L->target[s->host], L->target_len[s->host]) < 0) {
        if (errno != EINPROGRESS) {
            conn_drop(c);
            return;
        }
        c->connecting = 1;
    }
    c->next = L->conns;
    L->conns = c;
}

/* Moves what SRC has into P, and P into DST. -1: the pair is done (an error). */
static int relay(int src, int dst, pipe_buf *p, short rev_src, short rev_dst, int *dst_shut)
{
    if ((rev_src & (POLLIN | POLLHUP | POLLERR)) && !p->eof && p->len == 0) {
        ssize_t n = read(src, p->buf, sizeof p->buf);
        if (n > 0) {
            p->len = (size_t)n;
            p->off = 0;
        } else if (n == 0) {
            p->eof = 1;
        } else if (errno != EAGAIN && errno != EINTR) {
            return -1;
        }
    }
    if (p->len > p->off && (rev_dst & POLLOUT || p->off == 0)) {
        ssize_t n = send(dst, p->buf + p->off, p->len - p->off, MSG_NOSIGNAL);
        if (n > 0) {
            p->off += (size_t)n;
            if (p->off == p->len) p->len = p->off = 0;
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            return -1;
        }
    }
    if (p->eof && p->len == 0 && !*dst_shut) {
        shutdown(dst, SHUT_WR);
        *dst_shut = 1;
    }
    return 0;
}

static void *link_main(void *arg)
{
    check_link *L = arg;
    size_t cap = 0;
    struct pollfd *pf = NULL;
    conn **pc = NULL;           /* pf index -> connection (NULL: a listener or the pipe) */

    while (!atomic_load(&L->stop)) {
        size_t n = 0, want;
        int nconn = 0;
        for (conn *c = L->conns; c; c = c->next) nconn++;
        want = 1 + (size_t)L->lanes * (size_t)L->nhosts + 2 * (size_t)nconn;
        if (want > cap) {
            struct pollfd *npf = realloc(pf, want * sizeof *pf);
            conn **npc = npf ? realloc(pc, want * sizeof *pc) : NULL;
            if (npf) pf = npf;
            if (!npc) break;    /* out of memory: the links go dead, the clients' deadlines say so */
            pc = npc;
            cap = want;
        }
        /* cuts asked for: every connection of the lane reset */
        for (int l = 0; l < L->lanes; l++) {
            unsigned req = atomic_load(&L->cut_req[l]);
            if (req == L->cut_seen[l]) continue;
            L->cut_seen[l] = req;
            for (conn **pp = &L->conns; *pp;) {
                conn *c = *pp;
                if (c->lane == l) {
                    *pp = c->next;
                    conn_drop(c);
                } else {
                    pp = &c->next;
                }
            }
        }
        pf[n] = (struct pollfd){ L->wake[0], POLLIN, 0 };
        pc[n++] = NULL;
        /* a frozen lane: neither its listeners (new connections wait in the
         * backlog, connected but silent) nor its connections are looked at */
        for (int i = 0; i < L->lanes * L->nhosts; i++) {
            if (atomic_load(&L->frozen[L->ls[i].lane])) continue;
            pf[n] = (struct pollfd){ L->ls[i].fd, POLLIN, 0 };
            pc[n++] = NULL;
        }
        for (conn *c = L->conns; c; c = c->next) {
            short ea = 0, eb = 0;
            if (atomic_load(&L->frozen[c->lane])) continue;
            if (c->connecting) {
                eb = POLLOUT;
            } else {
                if (!c->ab.eof && c->ab.len == 0) ea |= POLLIN;
                if (!c->ba.eof && c->ba.len == 0) eb |= POLLIN;
                if (c->ab.len) eb |= POLLOUT;
                if (c->ba.len) ea |= POLLOUT;
            }
            pf[n] = (struct pollfd){ c->a, ea, 0 };
            pc[n++] = c;
            pf[n] = (struct pollfd){ c->b, eb, 0 };
            pc[n++] = c;
        }
        if (poll(pf, (nfds_t)n, 100) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (pf[0].revents & POLLIN) {
            char buf[64];
            while (read(L->wake[0], buf, sizeof buf) > 0) {}
        }
        for (size_t i = 1; i < n; i++) {
            if (!pc[i] && (pf[i].revents & POLLIN)) {
                for (int j = 0; j < L->lanes * L->nhosts; j++)
                    if (L->ls[j].fd == pf[i].fd) accept_one(L, &L->ls[j]);
            }
        }
        /* the connections polled: a then b, side by side */
        for (size_t i = 1; i + 1 < n; i++) {
            conn *c = pc[i];
            short ra, rb;
            int bad = 0;
            if (!c || pc[i + 1] != c) continue;
            ra = pf[i].revents;
            rb = pf[i + 1].revents;
            i++;
            if (c->connecting) {
                int e = 0;
                socklen_t el = sizeof e;
                if (!rb) continue;
                if (getsockopt(c->b, SOL_SOCKET, SO_ERROR, &e, &el) < 0 || e) bad = 1;
                else c->connecting = 0;
            } else {
                bad = relay(c->a, c->b, &c->ab, ra, rb, &c->b_shut) || relay(c->b, c->a, &c->ba, rb, ra, &c->a_shut);
            }
            if (bad || (c->ab.eof && c->ba.eof && !c->ab.len && !c->ba.len)) {
                /* one side went: the other is reset (a broken path), or both said goodbye */
                conn **pp = &L->conns;
                while (*pp != c) pp = &(*pp)->next;
                *pp = c->next;
                conn_drop(c);
                pc[i] = pc[i - 1] = NULL;
            }
        }
    }
    free(pf);
    free(pc);
    return NULL;
}

static void wake(check_link *L)
{
    char c = 1;
    if (write(L->wake[1], &c, 1) < 0) { /* full: the thread is due to wake anyway */ }
}

int link_open(check_link **out, const char *uri, int lanes, char *err, size_t errlen)
{
    check_link *L;
    size_t hs, he;
    int rc = -1;

    *out = NULL;
    if (!(L = calloc(1, sizeof *L))) { snprintf(err, errlen, "out of memory"); return -1; }
    L->lanes = lanes;
    L->wake[0] = L->wake[1] = -1;
    if (parse(L, uri, &hs, &he, err, errlen)) goto out;
    L->ls = calloc((size_t)lanes * (size_t)L->nhosts, sizeof *L->ls);
    L->uris = calloc((size_t)lanes, sizeof *L->uris);
    L->frozen = calloc((size_t)lanes, sizeof *L->frozen);
    L->cut_req = calloc((size_t)lanes, sizeof *L->cut_req);
    L->cut_seen = calloc((size_t)lanes, sizeof *L->cut_seen);
    if (!L->ls || !L->uris || !L->frozen || !L->cut_req || !L->cut_seen) { snprintf(err, errlen, "out of memory"); goto out; }
    for (int i = 0; i < lanes * L->nhosts; i++) L->ls[i].fd = -1;
    for (int l = 0; l < lanes; l++) {
        size_t cap = strlen(uri) + (size_t)L->nhosts * 24 + 1, len;
        char *u = malloc(cap);
        if (!u) { snprintf(err, errlen, "out of memory"); goto out; }
        L->uris[l] = u;
        memcpy(u, uri, hs);
        len = hs;
        for (int h = 0; h < L->nhosts; h++) {
            lsock *s = &L->ls[l * L->nhosts + h];
            int port;
            if ((s->fd = listen_any(&port)) < 0) {
                snprintf(err, errlen, "cannot listen on 127.0.0.1: %s", strerror(errno));
                goto out;
            }
            s->lane = l;
            s->host = h;
            len += (size_t)snprintf(u + len, cap - len, "%s127.0.0.1:%d", h ? "," : "", port);
        }
        snprintf(u + len, cap - len, "%s", uri + he);
    }
    if (pipe2(L->wake, O_CLOEXEC | O_NONBLOCK) < 0) { snprintf(err, errlen, "pipe: %s", strerror(errno)); goto out; }
    if (pthread_create(&L->th, NULL, link_main, L)) { snprintf(err, errlen, "cannot start the link thread"); goto out; }
    L->started = 1;
    *out = L;
    rc = 0;
out:
    if (rc) link_close(L);
    return rc;
}

const char *link_uri(const check_link *L, int lane)
{
    return L->uris[lane];
}

void link_freeze(check_link *L, int lane, int on)
{
    atomic_store(&L->frozen[lane], on);
    wake(L);
}

void link_cut(check_link *L, int lane)
{
    atomic_fetch_add(&L->cut_req[lane], 1);
    wake(L);
}

void link_close(check_link *L)
{
    if (!L) return;
    if (L->started) {
        atomic_store(&L->stop, 1);
        wake(L);
        pthread_join(L->th, NULL);
    }
    while (L->conns) {
        conn *c = L->conns;
        L->conns = c->next;
        conn_drop(c);
    }
    if (L->ls)
        for (int i = 0; i < L->lanes * L->nhosts; i++)
            if (L->ls[i].fd >= 0) close(L->ls[i].fd);
    if (L->uris)
        for (int l = 0; l < L->lanes; l++) free(L->uris[l]);
    for (int i = 0; i < 2; i++)
        if (L->wake[i] >= 0) close(L->wake[i]);
    free(L->ls);
    free(L->uris);
    free(L->frozen);
    free(L->cut_req);
    free(L->cut_seen);
    free(L);
}
