/*
 * The mux: one pipelined connection per client for the event-loop API
 * (async.c), owned by one I/O thread.
 *
 * Submitters format a command into a shared buffer under the mutex and
 * link its rmux_cmd to the submit queue; the I/O thread takes everything
 * queued at once (when its previous batch is fully written), writes it in
 * as few write()s as the socket allows and keeps the commands in flight in
 * FIFO order, which is the order of the replies. That is the
 * auto-pipelining: the acquires, releases and renewals of many locks share
 * one connection and one syscall per batch, where the blocking API takes a
 * pooled connection and a round trip per command.
 *
 * Failures: EOF or an I/O error (CLIENT KILL, a restart) breaks the
 * connection at once; so does the oldest command in flight passing its
 * deadline (a frozen link answers nothing, and nothing else tells). Every
 * command in flight then completes BATON_EUNAVAILABLE (sent = 1: its
 * outcome is unknown). The next submission reconnects; after a failed
 * connect, submissions fail at once (sent = 0) until a backoff (10 ms
 * doubling to 1 s) has passed, so a dead server costs one connect per
 * backoff, not one per command.
 *
 * The thread also runs timers (a binary heap, I/O thread only) and the
 * owner's kick callback, so async.c's state machines run on this thread
 * alone and need no locks of their own.
 */
#include "redis_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define CONNECT_BACKOFF_MIN_MS 10
#define CONNECT_BACKOFF_MAX_MS 1000
#define MUX_NAME "baton-mux"

struct rmux {
    const rcfg *cfg;
    void (*on_kick)(void *);
    void *kick_arg;

    pthread_mutex_t mu;          /* guards the fields down to "I/O thread only" */
    pthread_t thr;
    int started, stop, kicked;
    char *sbuf;                  /* formatted commands not yet taken */
    size_t slen, scap;
    rmux_cmd *sq_head, *sq_tail;
    uint64_t opened;
    int open_now;

    int evfd;                    /* wakes the thread: a submission, a kick, the stop */
    int stopfd;                  /* readable once stopping: aborts a connect under way */

    /* I/O thread only */
    int ep;
    rconn *c;
    char *wbuf;                  /* the batch being written */
    size_t wlen, woff, wcap;
    rmux_cmd *fl_head, *fl_tail; /* in flight: replies come in this order */
    uint32_t ep_events;          /* what the socket is registered for */
    int64_t next_connect;
    int backoff_ms;
    rmux_timer **heap;
    size_t nheap, capheap;
    rmux_cmd setname;            /* CLIENT SETNAME on each new connection */
};

static void signal_fd(int fd) {
    uint64_t one = 1;
    ssize_t n;
    do n = write(fd, &one, sizeof one); while (n < 0 && errno == EINTR);
}

/* ---- timers (a binary min-heap on `at`) ------------------------------------ */

static void heap_swap(rmux *m, size_t a, size_t b) {
    rmux_timer *t = m->heap[a];
    m->heap[a] = m->heap[b];
    m->heap[b] = t;
    m->heap[a]->idx = (int)a + 1;
    m->heap[b]->idx = (int)b + 1;
}

static void heap_up(rmux *m, size_t i) {
    while (i > 0 && m->heap[(i - 1) / 2]->at > m->heap[i]->at) {
        heap_swap(m, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_down(rmux *m, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, s = i;
        if (l < m->nheap && m->heap[l]->at < m->heap[s]->at) s = l;
        if (r < m->nheap && m->heap[r]->at < m->heap[s]->at) s = r;
        if (s == i) return;
        heap_swap(m, i, s);
        i = s;
    }
}

void rmux_timer_del(rmux *m, rmux_timer *t) {
    if (!t->idx) return;
    size_t i = (size_t)t->idx - 1, last = m->nheap - 1;
    t->idx = 0;
    if (i != last) {
        m->heap[i] = m->heap[last];
        m->heap[i]->idx = (int)i + 1;
    }
    m->nheap--;
    if (i < m->nheap) {
        heap_up(m, i);
        heap_down(m, (size_t)m->heap[i]->idx - 1);
    }
}

int rmux_timer_set(rmux *m, rmux_timer *t, int64_t at) {
    rmux_timer_del(m, t);
    if (m->nheap == m->capheap) {
        size_t cap = m->capheap ? m->capheap * 2 : 64;
        rmux_timer **h = realloc(m->heap, cap * sizeof *h);
        if (!h) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
        m->heap = h;
        m->capheap = cap;
    }
    t->at = at;
    m->heap[m->nheap] = t;
    t->idx = (int)++m->nheap;
    heap_up(m, m->nheap - 1);
    return 0;
}

static void run_timers(rmux *m) {
    int64_t now = baton_now_ns();
    while (m->nheap && m->heap[0]->at <= now) {
        rmux_timer *t = m->heap[0];
        rmux_timer_del(m, t);
        t->fn(t); /* may arm timers again, this one included */
    }
}

/* ---- completing commands ---------------------------------------------------- */

/* Calls every command of LIST with RC (no reply). */
static void fail_list(rmux_cmd *list, int rc, int sent) {
    while (list) {
        rmux_cmd *c = list;
        list = c->next;
        c->next = NULL;
        c->cb(c, rc, NULL, sent);
    }
}

/* The submit queue, failed at once (not connected, or stopping). */
static void fail_queued(rmux *m, int rc) {
    pthread_mutex_lock(&m->mu);
    rmux_cmd *list = m->sq_head;
    m->sq_head = m->sq_tail = NULL;
    m->slen = 0;
    pthread_mutex_unlock(&m->mu);
    fail_list(list, rc, 0);
}

/* The mux whose I/O thread this is (set as it starts): asked per command,
 * so no mutex. */
static _Thread_local rmux *tl_mux;

static void break_conn(rmux *m, int rc) {
    if (m->c) {
        epoll_ctl(m->ep, EPOLL_CTL_DEL, m->c->fd, NULL);
        m->c->broken = 1;
        rconn_free(m->c);
        m->c = NULL;
        m->ep_events = 0;
        pthread_mutex_lock(&m->mu);
        m->open_now = 0;
        pthread_mutex_unlock(&m->mu);
    }
    m->wlen = m->woff = 0;
    rmux_cmd *list = m->fl_head;
    m->fl_head = m->fl_tail = NULL;
    fail_list(list, rc, 1);
}

static void setname_cb(rmux_cmd *c, int rc, redisReply *r, int sent) {
    (void)c, (void)rc, (void)sent;
    if (r) rreply_free(r); /* an old server or an ACL may refuse it: only a label */
}

static void watch_socket(rmux *m, uint32_t ev) {
    if (!m->c || ev == m->ep_events) return;
    struct epoll_event e = { .events = ev, .data.u32 = 1 };
    epoll_ctl(m->ep, EPOLL_CTL_MOD, m->c->fd, &e);
    m->ep_events = ev;
}

/* Appends the formatted command to BUF (grown as needed). */
static int buf_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n > *cap) {
        size_t c = *cap ? *cap : 4096;
        while (c < *len + n) c *= 2;
        char *b = realloc(*buf, c);
        if (!b) return -1;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    return 0;
}

/* Opens the connection (blocking up to the connect timeout: the thread's
 * timers wait that long at most). 0, or the queue was failed. */
static int connect_now(rmux *m) {
    int64_t now = baton_now_ns();
    if (now < m->next_connect) {
        fail_queued(m, baton_seterr(BATON_EUNAVAILABLE, 0, "redis: reconnecting (backoff)"));
        return -1;
    }
    rconn *c = NULL;
    int rc = rconn_open(m->cfg, &c, now + (int64_t)m->cfg->connect_timeout_ms * 1000000);
    if (rc) {
        m->backoff_ms = m->backoff_ms ? m->backoff_ms * 2 : CONNECT_BACKOFF_MIN_MS;
        if (m->backoff_ms > CONNECT_BACKOFF_MAX_MS) m->backoff_ms = CONNECT_BACKOFF_MAX_MS;
        m->next_connect = baton_now_ns() + (int64_t)m->backoff_ms * 1000000;
        fail_queued(m, rc);
        return -1;
    }
    m->backoff_ms = 0;
    struct epoll_event e = { .events = EPOLLIN, .data.u32 = 1 };
    if (epoll_ctl(m->ep, EPOLL_CTL_ADD, c->fd, &e) != 0) {
        rconn_free(c);
        fail_queued(m, baton_seterr(BATON_EUNAVAILABLE, errno, "redis: epoll_ctl failed"));
        return -1;
    }
    m->c = c;
    m->ep_events = EPOLLIN;
    /* the label goes first, ahead of any batch */
    static const char name[] = "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$9\r\n" MUX_NAME "\r\n";
    m->wlen = m->woff = 0;
    if (buf_append(&m->wbuf, &m->wlen, &m->wcap, name, sizeof name - 1) == 0) {
        m->setname.cb = setname_cb;
        m->setname.next = NULL;
        m->setname.deadline = baton_now_ns() + (int64_t)m->cfg->io_timeout_ms * 1000000;
        m->fl_head = m->fl_tail = &m->setname;
    }
    pthread_mutex_lock(&m->mu);
    m->opened++;
    m->open_now = 1;
    pthread_mutex_unlock(&m->mu);
    return 0;
}

#define BUF_KEEP (64 * 1024)

/* Moves the submit queue into the batch when the last batch is written. */
static void take_batch(rmux *m) {
    if (m->woff < m->wlen) return;
    m->wlen = m->woff = 0;
    /* A burst (100,000 renewals due together) grows a batch to megabytes:
     * give that back once written instead of keeping it for the next. */
    if (m->wcap > BUF_KEEP) {
        free(m->wbuf);
        m->wbuf = NULL;
        m->wcap = 0;
    }
    int64_t now = baton_now_ns();
    pthread_mutex_lock(&m->mu);
    if (!m->sq_head) {
        pthread_mutex_unlock(&m->mu);
        return;
    }
    char *b = m->wbuf;
    size_t cap = m->wcap;
    m->wbuf = m->sbuf, m->wlen = m->slen, m->wcap = m->scap;
    m->sbuf = b, m->slen = 0, m->scap = cap;
    rmux_cmd *list = m->sq_head;
    m->sq_head = m->sq_tail = NULL;
    pthread_mutex_unlock(&m->mu);
    for (rmux_cmd *c = list; c; c = c->next) c->sent_ns = now;
    if (m->fl_tail) m->fl_tail->next = list;
    else m->fl_head = list;
    while (list->next) list = list->next;
    m->fl_tail = list;
}

static void do_write(rmux *m) {
    int want_read = 0;
    while (m->c && m->woff < m->wlen) {
        size_t n = 0;
        if (rconn_write_nb(m->c, m->wbuf + m->woff, m->wlen - m->woff, &n, &want_read)) {
            break_conn(m, BATON_EUNAVAILABLE);
            return;
        }
        if (!n) break;
        m->woff += n;
        if (m->woff == m->wlen) take_batch(m); /* what queued meanwhile goes out now */
    }
    if (m->c) watch_socket(m, EPOLLIN | (m->woff < m->wlen && !want_read ? EPOLLOUT : 0));
}

static void do_read(rmux *m) {
    if (rconn_read_avail(m->c)) {
        break_conn(m, BATON_EUNAVAILABLE);
        return;
    }
    for (;;) {
        redisReply *r = NULL;
        int g = m->c ? rconn_next_reply(m->c, &r) : 0;
        if (g == 0) return;
        if (g < 0 || !m->fl_head) {
            if (r) rreply_free(r);
            baton_seterr(BATON_EPROTO, 0, "redis: a reply nobody asked for (or a bad one)");
            break_conn(m, BATON_EUNAVAILABLE);
            return;
        }
        rmux_cmd *c = m->fl_head;
        if (!(m->fl_head = c->next)) m->fl_tail = NULL;
        c->next = NULL;
        c->cb(c, 0, r, 1);
    }
}

/* ms until the nearest timer or in-flight deadline; -1 = none. */
static int next_wait_ms(rmux *m) {
    int64_t at = INT64_MAX;
    if (m->nheap) at = m->heap[0]->at;
    if (m->fl_head && m->fl_head->deadline < at) at = m->fl_head->deadline;
    if (at == INT64_MAX) return -1;
    int64_t d = at - baton_now_ns();
    if (d <= 0) return 0;
    d = (d + 999999) / 1000000;
    return d > 60000 ? 60000 : (int)d;
}

static void *mux_main(void *arg) {
    rmux *m = arg;
    rconn_set_abort_fd(m->stopfd);
    tl_mux = m;
    for (;;) {
        pthread_mutex_lock(&m->mu);
        int stop = m->stop, kick = m->kicked;
        m->kicked = 0;
        pthread_mutex_unlock(&m->mu);
        if (stop) break;
        if (kick) m->on_kick(m->kick_arg);
        run_timers(m);
        /* read after the kicks and timers: what they submitted from this
         * thread signalled nothing, and must not wait for the next wake */
        pthread_mutex_lock(&m->mu);
        int queued = m->sq_head != NULL;
        pthread_mutex_unlock(&m->mu);
        if (queued && !m->c) connect_now(m);
        if (m->c) {
            take_batch(m);
            do_write(m);
        }
        /* a frozen link: nothing else tells */
        if (m->fl_head && baton_now_ns() >= m->fl_head->deadline) {
            baton_seterr(BATON_EUNAVAILABLE, ETIMEDOUT, "redis: no reply within the I/O timeout");
            break_conn(m, BATON_EUNAVAILABLE);
            continue;
        }
        /* a failed connect's callbacks may have queued again: not to sleep on */
        pthread_mutex_lock(&m->mu);
        queued = m->sq_head != NULL;
        pthread_mutex_unlock(&m->mu);
        if (queued && !m->c) continue;
        struct epoll_event ev[4];
        int n = epoll_wait(m->ep, ev, 4, next_wait_ms(m));
        for (int i = 0; i < n; i++) {
            if (ev[i].data.u32 == 0) {
                uint64_t v;
                if (read(m->evfd, &v, sizeof v) < 0) { /* EAGAIN: drained already */ }
                continue;
            }
            if (!m->c) continue;
            if (ev[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) do_read(m);
            if (m->c && (ev[i].events & EPOLLOUT)) do_write(m);
        }
    }
    break_conn(m, BATON_ECANCELED);
    fail_queued(m, BATON_ECANCELED);
    return NULL;
}

static int ensure_thread(rmux *m) {
    if (m->started) return 0;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 256 * 1024);
    int e = pthread_create(&m->thr, &at, mux_main, m);
    pthread_attr_destroy(&at);
    if (e) return baton_seterr(BATON_ENOMEM, e, "redis: cannot start the mux thread");
    m->started = 1;
    return 0;
}

int rmux_submit(rmux *m, rmux_cmd *c, int argc, const char **argv, const size_t *lens) {
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (len < 0 || !cmd) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    int rc = 0, wake = 0;
    c->next = NULL;
    pthread_mutex_lock(&m->mu);
    if (m->stop) rc = baton_seterr(BATON_ECANCELED, 0, "redis: the client is closing");
    else if (!(rc = ensure_thread(m)) && buf_append(&m->sbuf, &m->slen, &m->scap, cmd, (size_t)len))
        rc = baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    if (!rc) {
        wake = m->sq_head == NULL;   /* else the thread was woken for the first one */
        if (m->sq_tail) m->sq_tail->next = c;
        else m->sq_head = c;
        m->sq_tail = c;
    }
    pthread_mutex_unlock(&m->mu);
    redisFreeCommand(cmd);
    if (wake && !rmux_on_thread(m)) signal_fd(m->evfd);
    return rc;
}

void rmux_kick(rmux *m) {
    int wake;
    pthread_mutex_lock(&m->mu);
    wake = !m->kicked && !m->stop && ensure_thread(m) == 0;
    if (wake) m->kicked = 1;
    pthread_mutex_unlock(&m->mu);
    if (wake) signal_fd(m->evfd);
}

int rmux_on_thread(rmux *m) { return tl_mux == m; }

void rmux_stats(rmux *m, uint64_t *opened, int *open_now) {
    pthread_mutex_lock(&m->mu);
    if (opened) *opened = m->opened;
    if (open_now) *open_now = m->open_now;
    pthread_mutex_unlock(&m->mu);
}

int rmux_new(rmux **out, const rcfg *cfg, void (*on_kick)(void *), void *arg) {
    *out = NULL;
    rmux *m = calloc(1, sizeof *m);
    if (!m) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    m->cfg = cfg;
    m->on_kick = on_kick;
    m->kick_arg = arg;
    m->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    m->stopfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    m->ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event e = { .events = EPOLLIN, .data.u32 = 0 };
    if (m->evfd < 0 || m->stopfd < 0 || m->ep < 0 || epoll_ctl(m->ep, EPOLL_CTL_ADD, m->evfd, &e) != 0) {
        int err = errno;
        if (m->evfd >= 0) close(m->evfd);
        if (m->stopfd >= 0) close(m->stopfd);
        if (m->ep >= 0) close(m->ep);
        free(m);
        return baton_seterr(BATON_ENOMEM, err, "redis: cannot make the mux's descriptors");
    }
    pthread_mutex_init(&m->mu, NULL);
    *out = m;
    return 0;
}

void rmux_free(rmux *m) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->stop = 1;
    int started = m->started;
    pthread_mutex_unlock(&m->mu);
    if (started) {
        signal_fd(m->stopfd);
        signal_fd(m->evfd);
        pthread_join(m->thr, NULL);
    } else {
        fail_queued(m, BATON_ECANCELED);
    }
    close(m->evfd);
    close(m->stopfd);
    close(m->ep);
    free(m->sbuf);
    free(m->wbuf);
    free(m->heap);
    pthread_mutex_destroy(&m->mu);
    free(m);
}
