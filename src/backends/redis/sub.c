/*
 * The subscriber: one pub/sub connection per client, on its own thread,
 * shared by every waiter of that client.
 *
 * A waiter registers its baton_waiter on a channel; the thread SUBSCRIBEs,
 * and wakes every waiter of the channel when the subscription is confirmed,
 * on every message (keeping the last payload for them), and when the
 * connection is lost (so they re-check). A channel whose last waiter left
 * stays subscribed for LINGER_NS: a thread that waits on the same lock again
 * soon (every contended loop does) finds it ready, and a handoff costs no
 * SUBSCRIBE/UNSUBSCRIBE pair. If the connection dies the thread reconnects
 * with backoff and subscribes again.
 *
 * Channel bookkeeping (all under s->mu):
 *   intended  we want to be subscribed on the current connection (SUBSCRIBE sent)
 *   pending   SUBSCRIBE/UNSUBSCRIBE commands sent whose confirmation is still due
 *   server    the last confirmation said "subscribed"
 * A channel is ready when intended && pending == 0 && server: only then can a
 * waiter's retry rely on seeing the next unlock message.
 *
 * One-wake registrations (rsub_register_one: the plain lock's waiters; Redisson's
 * LockPubSub does the same per JVM): a message wakes the oldest waiter of
 * the channel that holds no wake yet, not all of them, so a handoff among N
 * waiters of one client costs one attempt, not N. A wake is a promise that
 * someone attempts after the message; it is kept by the entry's state:
 *   IDLE    parked, owes nothing
 *   WOKEN   woken, its attempt has not started: it will see the release
 *   TRYING  its attempt is under way (rsub_attempt) and may have read the
 *           key before the release; AGAIN: a message came meanwhile
 * A message while some entry is WOKEN (or TRYING with AGAIN) is covered by
 * that entry's coming attempt and wakes nobody (a baton release sends both
 * its publish and, with notifications on, a keyspace "del": one wake); else
 * the oldest IDLE entry is woken; else the oldest TRYING one is woken again
 * (AGAIN: it attempts once more when this one fails). A waiter that leaves
 * without the lock after a wake (timeout, cancel, error; rsub_unregister
 * without rsub_granted) passes a wake on the same way. A confirmation, a
 * lost connection or a MOVED answer still wakes every waiter: those are
 * re-checks, not releases, and each must see the key itself. Keyspace
 * entries registered for a wake channel (rsub_register_node_for) hold no
 * wake of their own: their wanted messages are delivered as one wake on the
 * wake channel of the same subscriber (once per message).
 */
#include "redis_int.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct rsub_entry {
    rsub_entry *next, *prev;
    baton_waiter *w;
    rchan *ch;
    unsigned seen;           /* msg_seq of the last message this waiter took */
    rsub_want_fn want;       /* NULL, or which messages wake this waiter */
    void *want_arg;
    rsub *owner;             /* the rsub (the client's, or a cluster node's) it is on */
    char *route;             /* cluster: the key whose master it must be on (NULL: parent) */
    char *wake;              /* a keyspace entry's wake channel (one wake there), or NULL */
    unsigned char one;       /* RSUB_ONE: messages wake one waiter of the channel */
    unsigned char state;     /* ONE_IDLE, ONE_WOKEN, ONE_TRYING */
    unsigned char again;     /* TRYING: a message came during the attempt */
    unsigned char owes;      /* woken since its last grant: leaving passes a wake on */
};

enum { ONE_IDLE, ONE_WOKEN, ONE_TRYING };

struct rchan {
    rchan *next;
    char *name;
    rsub_entry *waiters;
    int pattern;             /* PSUBSCRIBE (a glob) rather than SUBSCRIBE */
    int shard;               /* SSUBSCRIBE (cluster: sharded pub/sub) */
    int moved;               /* the node answered MOVED for it: not ready here */
    int intended, pending, server;
    int64_t idle_since;      /* when the last waiter left (lingering) */
    unsigned msg_seq;        /* messages received */
    unsigned one_serial;     /* the rsub's msg_serial of the last keyspace wake delivered here */
    char msg[RSUB_MSG_MAX];  /* its payload (truncated) */
};

#define KEEPALIVE_NS (10LL * 1000000000LL)
#define LINGER_NS (5LL * 1000000000LL)
#define LINGER_MAX 256       /* idle channels kept at most */
#define CHANGE_GAP_NS (250LL * 1000000LL) /* cluster changes re-check at most this often */

static void signal_thread(rsub *s) {
    uint64_t one = 1;
    ssize_t n;
    do n = write(s->evfd, &one, sizeof one); while (n < 0 && errno == EINTR);
}

static rchan *find_chan(rsub *s, const char *name, size_t len, int pattern) {
    for (rchan *c = s->chans; c; c = c->next)
        if (c->pattern == pattern && strlen(c->name) == len && !memcmp(c->name, name, len)) return c;
    return NULL;
}

/* Wakes one entry, keeping its one-wake state: a woken waiter attempts
 * again (TRYING: after the attempt under way). */
static void wake_entry(rsub_entry *e, int release) {
    if (e->one) {
        if (e->state == ONE_TRYING) e->again = 1;
        else e->state = ONE_WOKEN;
        if (release) e->owes = 1; /* a re-check's wake is nobody else's */
    }
    baton_waiter_wake(e->w);
}

/* Every waiter re-checks (confirmation, lost connection, MOVED). */
static void wake_chan(rchan *ch) {
    for (rsub_entry *e = ch->waiters; e; e = e->next) wake_entry(e, 0);
}

static int has_one(const rchan *ch) {
    for (const rsub_entry *e = ch->waiters; e; e = e->next)
        if (e->one) return 1;
    return 0;
}

/* One wake on CH's one-wake entries (see the top): nobody when a coming
 * attempt already covers it, else the oldest IDLE, else the oldest TRYING.
 * Entries are kept newest first, so the oldest is the last. */
static void wake_one(rchan *ch) {
    rsub_entry *last = NULL, *idle = NULL, *trying = NULL;
    for (rsub_entry *e = ch->waiters; e; e = e->next) {
        last = e;
        if (!e->one) continue;
        if (e->state == ONE_WOKEN || (e->state == ONE_TRYING && e->again)) return;
    }
    for (rsub_entry *e = last; e; e = e->prev) {
        if (!e->one) continue;
        if (e->state == ONE_IDLE && !idle) idle = e;
        if (e->state == ONE_TRYING && !trying) trying = e;
    }
    if (idle) wake_entry(idle, 1);
    else if (trying) wake_entry(trying, 1);
}

/* A message wakes the waiters that want it (all, unless they filter), and
 * one of the one-wake entries. A keyspace entry with a wake channel on this
 * subscriber wakes one there instead (once per message, SERIAL). */
static void wake_msg(rsub *s, rchan *ch, const char *payload, size_t len, unsigned serial) {
    int one = 0;
    for (rsub_entry *e = ch->waiters; e; e = e->next) {
        if (e->one) {
            one = 1;
            continue;
        }
        if (e->want && !e->want(e->want_arg, payload, len)) continue;
        rchan *t = e->wake ? find_chan(s, e->wake, strlen(e->wake), 0) : NULL;
        if (!t || !has_one(t)) {
            baton_waiter_wake(e->w); /* no wake channel here (yet): wake this one itself */
        } else if (t->one_serial != serial) {
            t->one_serial = serial;
            wake_one(t);
        }
    }
    if (one) wake_one(ch);
}

/* Forgets every subscription (connection lost); frees idle channels and wakes
 * all waiters so they re-check. Called with s->mu held. */
static void reset_locked(rsub *s) {
    rchan **pp = &s->chans;
    while (*pp) {
        rchan *c = *pp;
        c->intended = c->pending = c->server = 0;
        if (!c->waiters) {
            *pp = c->next;
            free(c->name);
            free(c);
            continue;
        }
        wake_chan(c);
        pp = &c->next;
    }
}

/* Sends the SUBSCRIBE/UNSUBSCRIBE commands the registrations call for. */
static int reconcile(rsub *s, rconn *conn) {
    int rc = 0;
    for (;;) {
        char *name = NULL;
        const char *verb = NULL;
        int64_t now = baton_now_ns();
        pthread_mutex_lock(&s->mu);
        int idle = 0;
        for (rchan *c = s->chans; c; c = c->next) idle += !c->waiters && c->intended;
        rchan **pp = &s->chans;
        while (*pp) {
            rchan *c = *pp;
            if (c->waiters && !c->intended) {
                c->intended = 1;
                c->pending++;
                verb = c->pattern ? "PSUBSCRIBE" : c->shard ? "SSUBSCRIBE" : "SUBSCRIBE";
            } else if (!c->waiters && c->intended && (idle > LINGER_MAX || now - c->idle_since >= LINGER_NS)) {
                c->intended = 0;
                c->pending++;
                verb = c->pattern ? "PUNSUBSCRIBE" : c->shard ? "SUNSUBSCRIBE" : "UNSUBSCRIBE";
            } else if (!c->waiters && !c->pending && !c->intended) {
                *pp = c->next;
                free(c->name);
                free(c);
                continue;
            }
            if (verb) {
                name = strdup(c->name);
                break;
            }
            pp = &c->next;
        }
        pthread_mutex_unlock(&s->mu);
        if (!verb) return 0;
        if (!name) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
        const char *argv[2] = { verb, name };
        size_t lens[2] = { strlen(verb), strlen(name) };
        rc = rconn_send(conn, 2, argv, lens, rdeadline_ms(s->cfg->io_timeout_ms));
        free(name);
        if (rc) return rc;
    }
}

static int is_str(const redisReply *r) {
    return r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS;
}

/* Handles one push reply. Returns 0, or <0 when the connection must go. */
static int handle_reply(rsub *s, redisReply *r, int *pong) {
    if (r->type == REDIS_REPLY_ERROR && r->str && !strncmp(r->str, "NOPERM", 6)) {
        /* The server's ACL refuses a channel (a user restricted to &channel
         * patterns cannot PSUBSCRIBE: the fair lock's queue notices). The
         * connection is fine and waiters still re-check on their own, so
         * keep it, but say so once instead of degrading silently. */
        pthread_mutex_lock(&s->mu);
        int first = !s->said_noperm;
        s->said_noperm = 1;
        pthread_mutex_unlock(&s->mu);
        if (first)
            baton_log(BATON_LOG_WARN, "redis: the server's ACL refused a subscription (%.200s): waiters are not "
                      "woken by notices and re-check on their own (at least every 2 s); give the user the "
                      "channels (allchannels, or &* patterns that cover them: docs/getting-started.md)", r->str);
        return 0;
    }
    if (r->type == REDIS_REPLY_ERROR && r->str && s->parent && !strncmp(r->str, "MOVED ", 6)) {
        /* SSUBSCRIBE on a master that no longer has the slot (a failover,
         * a resharding): its channels are not ready here; their waiters
         * re-check, and rsub_reroute moves them to the new master. */
        int slot = atoi(r->str + 6);
        rcluster_note_moved(s->parent->cfg->cluster, r->str);
        pthread_mutex_lock(&s->mu);
        for (rchan *c = s->chans; c; c = c->next) {
            if (!c->shard || !c->pending || rcluster_slot(c->name, strlen(c->name)) != slot) continue;
            c->pending--;
            c->moved = 1;
            c->server = 0;
            wake_chan(c);
        }
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    if (r->type == REDIS_REPLY_ERROR) return rreply_error(r, "subscriber");
    /* A connection subscribed to nothing (its last channel gone, or never
     * any: a holder's watch alone) answers the keepalive PING as any
     * connection does, +PONG; taking that for a broken link dropped it every
     * 10 s and re-checked (renewed) every held lock on the reconnect. */
    if (r->type == REDIS_REPLY_STATUS && r->str && !strcasecmp(r->str, "PONG")) {
        *pong = 1;
        return 0;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || !is_str(r->element[0]))
        return baton_seterr(BATON_EPROTO, 0, "redis: unexpected reply on the subscriber connection");
    const char *kind = r->element[0]->str;
    if (!strcasecmp(kind, "pong")) { *pong = 1; return 0; }
    if (!is_str(r->element[1])) return 0;
    /* message: channel, payload; pmessage: pattern, channel, payload;
     * [p][un]subscribe: name, count */
    int pat = kind[0] == 'p' || kind[0] == 'P';
    /* smessage, ssubscribe, sunsubscribe (sharded): channel names, no pattern */
    int shard = !strcasecmp(kind, "smessage") || !strcasecmp(kind, "ssubscribe") || !strcasecmp(kind, "sunsubscribe");
    int off = pat || shard;
    const char *name = r->element[1]->str;
    size_t len = r->element[1]->len;
    const redisReply *payload = NULL;
    if ((!strcasecmp(kind, "message") || !strcasecmp(kind, "smessage")) && r->elements >= 3) payload = r->element[2];
    if (!strcasecmp(kind, "pmessage") && r->elements >= 4) payload = r->element[3];
    int moved_any = 0;
    pthread_mutex_lock(&s->mu);
    rchan *c = find_chan(s, name, len, pat);
    if (c) {
        if (!strcasecmp(kind, "message") || !strcasecmp(kind, "pmessage") || !strcasecmp(kind, "smessage")) {
            if (payload && is_str(payload)) {
                size_t n = payload->len < RSUB_MSG_MAX - 1 ? payload->len : RSUB_MSG_MAX - 1;
                memcpy(c->msg, payload->str, n);
                c->msg[n] = 0;
            } else {
                c->msg[0] = 0;
            }
            c->msg_seq++;
            unsigned serial = ++s->msg_serial;
            if (payload && is_str(payload)) wake_msg(s, c, payload->str, payload->len, serial);
            else wake_msg(s, c, "", 0, serial);
        } else if (!strcasecmp(kind, "subscribe") || !strcasecmp(kind, "unsubscribe") ||
                   !strcasecmp(kind, "psubscribe") || !strcasecmp(kind, "punsubscribe") || shard) {
            int unasked = shard && !c->pending && c->intended && !strcasecmp(kind, "sunsubscribe");
            if (c->pending > 0) c->pending--;
            c->server = kind[off] == 's' || kind[off] == 'S';
            if (c->server) c->moved = 0;
            if (c->intended && !c->pending && c->server) wake_chan(c);
            if (unasked) {
                /* The master gave the slot away (failover, resharding) and
                 * dropped its subscribers: the waiters move (rsub_reroute)
                 * once the map names the new master. */
                c->moved = 1;
                moved_any = 1;
                wake_chan(c);
            }
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (moved_any && s->parent) rcluster_stale(s->parent->cfg->cluster);
    return 0;
}

static void drain_evfd(rsub *s) {
    uint64_t v;
    while (read(s->evfd, &v, sizeof v) > 0) {}
}

static int stopping(rsub *s) {
    pthread_mutex_lock(&s->mu);
    int st = s->stop;
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* Calls the client's reconnect re-check (the parent's, for a node's
 * subscriber), with no lock held. */
static void on_reconnect(rsub *s) {
    rsub *top = s->parent ? s->parent : s;
    pthread_mutex_lock(&top->mu);
    void (*fn)(void *) = top->on_reconnect;
    void *arg = top->on_reconnect_arg;
    pthread_mutex_unlock(&top->mu);
    if (fn) fn(arg);
}

static void *sub_main(void *arg) {
    rsub *s = arg;
    rconn_set_abort_fd(s->stopfd); /* close never waits for a connect to a frozen peer */
    rconn *conn = NULL;
    int backoff_ms = 50, lost = 0;
    int64_t last_rx = 0, ping_sent = 0, changed_at = 0;

    while (!stopping(s)) {
        if (!conn && s->parent) {
            /* a node's subscriber connects only while it has channels (its
             * master may be gone for good after a failover) */
            pthread_mutex_lock(&s->mu);
            int any = s->chans != NULL;
            pthread_mutex_unlock(&s->mu);
            if (!any) {
                struct pollfd p = { .fd = s->evfd, .events = POLLIN, .revents = 0 };
                poll(&p, 1, 1000);
                drain_evfd(s);
                continue;
            }
        }
        if (!conn) {
            if (rconn_open(s->cfg, &conn, rdeadline_ms(s->cfg->connect_timeout_ms)) != 0) {
                conn = NULL;
                struct pollfd p = { .fd = s->evfd, .events = POLLIN, .revents = 0 };
                poll(&p, 1, backoff_ms);
                drain_evfd(s);
                backoff_ms = backoff_ms * 2 > 1000 ? 1000 : backoff_ms * 2;
                continue;
            }
            backoff_ms = 50;
            last_rx = baton_now_ns();
            ping_sent = 0;
            if (lost) {
                /* Connected again after a drop: a restart without persistence
                 * or a failover may have taken what this client holds. */
                on_reconnect(s);
                lost = 0;
            }
        }
        /* cluster: a node lost or a slot moved anywhere (cluster.c) */
        if (s->cfg->cluster && !s->parent && baton_now_ns() - changed_at >= CHANGE_GAP_NS &&
            rcluster_take_changed(s->cfg->cluster)) {
            /* at most every CHANGE_GAP_NS: a failover's CLUSTERDOWN answers
             * come every 100 ms, and the re-check's renewals would meet them */
            changed_at = baton_now_ns();
            on_reconnect(s);
        }
        int rc = reconcile(s, conn);
        if (rc == 0) {
            struct pollfd p[2] = {
                { .fd = s->evfd, .events = POLLIN, .revents = 0 },
                { .fd = conn->fd, .events = POLLIN, .revents = 0 },
            };
            int r = poll(p, 2, s->cfg->cluster && !s->parent ? (int)(CHANGE_GAP_NS / 1000000) : 1000);
            if (r < 0 && errno != EINTR) rc = BATON_EUNAVAILABLE;
            if (r > 0 && p[0].revents) drain_evfd(s);
            if (r > 0 && p[1].revents) {
                rc = rconn_read_avail(conn);
                if (!rc) last_rx = baton_now_ns();
                while (!rc) {
                    redisReply *rep = NULL;
                    int g = rconn_next_reply(conn, &rep);
                    if (g < 0) { rc = g; break; }
                    if (g == 0) break;
                    int pong = 0;
                    rc = handle_reply(s, rep, &pong);
                    rreply_free(rep);
                    if (pong) ping_sent = 0;
                }
            }
            /* Sentinel: the master moved; this connection is to the old one. */
            if (!rc && rsentinel_stale(s->cfg, conn))
                rc = baton_seterr(BATON_EUNAVAILABLE, 0, "redis: the sentinels named a new master");
            /* Keepalive: a silent connection gets a PING; no answer within the
             * I/O timeout means it is dead. */
            int64_t now = baton_now_ns();
            if (!rc && ping_sent && now - ping_sent > (int64_t)s->cfg->io_timeout_ms * 1000000) {
                rc = baton_seterr(BATON_EUNAVAILABLE, ETIMEDOUT, "redis: subscriber ping timed out");
            } else if (!rc && !ping_sent && now - last_rx > KEEPALIVE_NS) {
                const char *argv[1] = { "PING" };
                size_t lens[1] = { 4 };
                rc = rconn_send(conn, 1, argv, lens, rdeadline_ms(s->cfg->io_timeout_ms));
                ping_sent = now;
            }
        }
        if (rc) {
            conn->broken = 1;
            rconn_free(conn);
            conn = NULL;
            lost = 1;
            pthread_mutex_lock(&s->mu);
            reset_locked(s);
            pthread_mutex_unlock(&s->mu);
        }
    }
    rconn_free(conn);
    return NULL;
}

int rsub_init(rsub *s, const rcfg *cfg) {
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    s->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->evfd < 0) return baton_seterr(BATON_ENOMEM, errno, "redis: eventfd failed: %s", strerror(errno));
    s->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->stopfd < 0) {
        int en = errno;
        close(s->evfd);
        return baton_seterr(BATON_ENOMEM, en, "redis: eventfd failed: %s", strerror(en));
    }
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        close(s->stopfd);
        close(s->evfd);
        return baton_seterr(BATON_ENOMEM, 0, "redis: mutex init failed");
    }
    return 0;
}

void rsub_destroy(rsub *s) {
    if (s->cfg->cluster && !s->parent) rcluster_set_notify(s->cfg->cluster, NULL, NULL);
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    int started = s->started;
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < RSUB_MAX_NODES; i++) {
        if (!s->node[i]) continue;
        rsub_destroy(s->node[i]);
        free(s->node[i]);
        s->node[i] = NULL;
    }
    if (started) {
        uint64_t one = 1;
        ssize_t n;
        do n = write(s->stopfd, &one, sizeof one); while (n < 0 && errno == EINTR);
        signal_thread(s);
        pthread_join(s->thr, NULL);
    }
    while (s->chans) {
        rchan *c = s->chans;
        s->chans = c->next;
        while (c->waiters) {
            rsub_entry *e = c->waiters;
            c->waiters = e->next;
            free(e->route);
            free(e->wake);
            free(e);
        }
        free(c->name);
        free(c);
    }
    pthread_mutex_destroy(&s->mu);
    close(s->stopfd);
    close(s->evfd);
}

/* s->mu held. */
static int start_locked(rsub *s) {
    if (s->started) return 0;
    /* The thread blocks every signal (it inherits the mask), so signals
     * meant for the application (e.g. SIGCHLD read from a signalfd) are
     * never delivered to it. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int cerr = pthread_create(&s->thr, NULL, sub_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (cerr != 0) return baton_seterr(BATON_ENOMEM, 0, "redis: cannot start the subscriber thread");
    s->started = 1;
    return 0;
}

static void kick(void *arg) { signal_thread(arg); }

int rsub_watch(rsub *s, void (*fn)(void *), void *arg) {
    pthread_mutex_lock(&s->mu);
    s->on_reconnect = fn;
    s->on_reconnect_arg = arg;
    int rc = start_locked(s);
    pthread_mutex_unlock(&s->mu);
    /* cluster: a node lost or a slot moved anywhere re-checks too */
    if (!rc && s->cfg->cluster && !s->parent) rcluster_set_notify(s->cfg->cluster, kick, s);
    return rc;
}

/* ---- cluster routing ------------------------------------------------------ */

/* The subscriber of node IDX (config NC), made and started on first use. */
static rsub *node_sub(rsub *s, int idx, const rcfg *nc) {
    pthread_mutex_lock(&s->mu);
    rsub *n = s->node[idx];
    if (!n && !s->stop && (n = calloc(1, sizeof *n)) != NULL) {
        if (rsub_init(n, nc) != 0) {
            free(n);
            n = NULL;
        } else {
            n->parent = s;
            n->node_idx = idx;
            s->node[idx] = n;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Where a channel goes on a cluster: *ROUTE = the key whose master must
 * carry it (NULL: this connection, any node), *SHARD = SSUBSCRIBE. baton's
 * scripts SPUBLISH every channel on a cluster but the fair lock's queue
 * entries (heard through a pattern, which sharded pub/sub has not);
 * keyspace events are node-local, on the key's master. */
static void route_of(const rsub *s, const char *channel, int pattern, const char **route, int *shard) {
    *route = NULL;
    *shard = 0;
    if (!s->cfg->cluster || s->parent || pattern) return;
    if (!strncmp(channel, "__keyspace@", 11)) {
        const char *k = strstr(channel, "__:");
        *route = k ? k + 3 : channel;
        return;
    }
    if (!strncmp(channel, "__keyevent@", 11)) return; /* callers give the key (rsub_register_node) */
    *route = channel;
    *shard = 1;
}

/* Registers on S itself (no routing). */
/* A new entry for W (ROUTE, WAKE copied); NULL when out of memory. */
static rsub_entry *entry_new(baton_waiter *w, const char *route, int one, const char *wake) {
    rsub_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    if ((route && !(e->route = strdup(route))) || (wake && !(e->wake = strdup(wake)))) {
        free(e->route);
        free(e);
        return NULL;
    }
    e->w = w;
    e->one = one != 0;
    return e;
}

static void entry_free(rsub_entry *e) {
    free(e->route);
    free(e->wake);
    free(e);
}

static int register_here(rsub *s, const char *channel, int pattern, int shard, const char *route, baton_waiter *w,
                         rsub_want_fn want, void *want_arg, int one, const char *wake, rsub_entry **out) {
    *out = NULL;
    rsub_entry *e = entry_new(w, route, one, wake);
    if (!e) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    e->want = want;
    e->want_arg = want_arg;
    e->owner = s;
    pthread_mutex_lock(&s->mu);
    if (start_locked(s) != 0) {
        pthread_mutex_unlock(&s->mu);
        entry_free(e);
        return BATON_ENOMEM;
    }
    rchan *c = find_chan(s, channel, strlen(channel), pattern);
    if (c && c->moved && !c->pending) {
        /* this master said MOVED, and the map still names it: ask again */
        c->moved = 0;
        c->intended = 0;
    }
    if (!c) {
        c = calloc(1, sizeof *c);
        if (c) c->name = strdup(channel), c->pattern = pattern, c->shard = shard;
        if (!c || !c->name) {
            pthread_mutex_unlock(&s->mu);
            if (c) free(c);
            entry_free(e);
            return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
        }
        c->next = s->chans;
        s->chans = c;
    }
    e->ch = c;
    e->seen = c->msg_seq;
    e->next = c->waiters;
    if (c->waiters) c->waiters->prev = e;
    c->waiters = e;
    int need = !c->intended; /* a lingering subscription needs no SUBSCRIBE */
    pthread_mutex_unlock(&s->mu);
    if (need) signal_thread(s);
    *out = e;
    return 0;
}

/* The rsub for ROUTE's master (S itself without a route); NULL when the
 * slot's master is unknown. DEADLINE 0: never re-read the map. */
static rsub *route_sub(rsub *s, const char *route, int64_t deadline) {
    if (!route) return s;
    const rcfg *nc = NULL;
    int idx = rcluster_node_of(s->cfg->cluster, route, strlen(route), &nc, deadline);
    return idx < 0 ? NULL : node_sub(s, idx, nc);
}

static int register_routed(rsub *s, const char *channel, int pattern, int shard, const char *route,
                           baton_waiter *w, rsub_want_fn want, void *want_arg, int one, const char *wake,
                           rsub_entry **out) {
    *out = NULL;
    rsub *t = route_sub(s, route, rdeadline_ms(s->cfg->io_timeout_ms));
    /* no master known for the slot: no wake-ups, the caller's waiting loop
     * re-checks on its own (as without pub/sub) */
    if (!t) return baton_seterr(BATON_EUNAVAILABLE, 0, "redis: cluster: no master known for '%.80s'", route);
    return register_here(t, channel, pattern, shard, route, w, want, want_arg, one, wake, out);
}

int rsub_register(rsub *s, const char *channel, int pattern, baton_waiter *w, rsub_entry **out) {
    return rsub_register_want(s, channel, pattern, w, NULL, NULL, out);
}

int rsub_register_want(rsub *s, const char *channel, int pattern, baton_waiter *w, rsub_want_fn want,
                       void *want_arg, rsub_entry **out) {
    const char *route;
    int shard;
    route_of(s, channel, pattern, &route, &shard);
    return register_routed(s, channel, pattern, shard, route, w, want, want_arg, 0, NULL, out);
}

int rsub_register_one(rsub *s, const char *channel, baton_waiter *w, rsub_entry **out) {
    const char *route;
    int shard;
    route_of(s, channel, 0, &route, &shard);
    return register_routed(s, channel, 0, shard, route, w, NULL, NULL, 1, NULL, out);
}

int rsub_register_node_for(rsub *s, const char *channel, const char *route_key, const char *wake, baton_waiter *w,
                           rsub_want_fn want, void *want_arg, rsub_entry **out) {
    if (!s->cfg->cluster) return register_here(s, channel, 0, 0, NULL, w, want, want_arg, 0, wake, out);
    return register_routed(s, channel, 0, 0, route_key, w, want, want_arg, 0, wake, out);
}

int rsub_register_node(rsub *s, const char *channel, const char *route_key, baton_waiter *w, rsub_want_fn want,
                       void *want_arg, rsub_entry **out) {
    return rsub_register_node_for(s, channel, route_key, NULL, w, want, want_arg, out);
}

int rsub_reroute(rsub *s, rsub_entry **ep, baton_waiter *w) {
    rsub_entry *e = *ep;
    if (!e || !e->route || !s->cfg->cluster) return 0;
    rsub *o = e->owner;
    const rcfg *nc = NULL;
    int idx = rcluster_node_of(s->cfg->cluster, e->route, strlen(e->route), &nc, 0);
    pthread_mutex_lock(&o->mu);
    int moved = e->ch->moved;
    char *name = strdup(e->ch->name);
    int pattern = e->ch->pattern, shard = e->ch->shard;
    int state = e->state, again = e->again, owes = e->owes;
    pthread_mutex_unlock(&o->mu);
    if (!name) return 0;
    rsub_entry *n = NULL;
    int r = 0;
    /* the map names another master (a MOVED answer to a command updated it),
     * or this one said MOVED to the subscription itself */
    if ((idx >= 0 && idx != o->node_idx) || moved) {
        if (register_routed(s, name, pattern, shard, e->route, w, e->want, e->want_arg, e->one, e->wake, &n) == 0) {
            /* the wake it holds moves with it: the old channel's waiters
             * are not owed one */
            pthread_mutex_lock(&n->owner->mu);
            n->state = (unsigned char)state, n->again = (unsigned char)again, n->owes = (unsigned char)owes;
            pthread_mutex_unlock(&n->owner->mu);
            pthread_mutex_lock(&o->mu);
            e->state = ONE_IDLE, e->again = 0, e->owes = 0;
            pthread_mutex_unlock(&o->mu);
            rsub_unregister(s, e);
            *ep = n;
            r = 1;
        }
    }
    free(name);
    return r;
}

int rsub_ready(rsub *s, rsub_entry *e) {
    (void)s;
    if (!e) return 0;
    rsub *o = e->owner;
    pthread_mutex_lock(&o->mu);
    rchan *c = e->ch;
    int r = c->intended && c->pending == 0 && c->server;
    pthread_mutex_unlock(&o->mu);
    return r;
}

void rsub_unregister(rsub *s, rsub_entry *e) {
    (void)s;
    if (!e) return;
    rsub *o = e->owner;
    pthread_mutex_lock(&o->mu);
    rchan *c = e->ch;
    if (e->prev) e->prev->next = e->next;
    else c->waiters = e->next;
    if (e->next) e->next->prev = e->prev;
    if (!c->waiters) c->idle_since = baton_now_ns();
    /* woken and leaving without the lock: a release may be waiting for an
     * attempt that this waiter will not make */
    if (e->one && (e->owes || e->state != ONE_IDLE || e->again)) wake_one(c);
    pthread_mutex_unlock(&o->mu);
    entry_free(e);
    /* No signal: the channel lingers; the thread's periodic pass drops it. */
}

int rsub_message(rsub *s, rsub_entry *e, char *buf, size_t n) {
    (void)s;
    if (!e || !n) return 0;
    rsub *o = e->owner;
    pthread_mutex_lock(&o->mu);
    rchan *c = e->ch;
    int got = e->seen != c->msg_seq;
    if (got) {
        e->seen = c->msg_seq;
        snprintf(buf, n, "%s", c->msg);
    }
    pthread_mutex_unlock(&o->mu);
    return got;
}

static int register_ready(rsub *s, const char *channel, int pattern, int one, baton_waiter *w, rsub_entry **out) {
    *out = NULL;
    const char *route;
    int shard;
    route_of(s, channel, pattern, &route, &shard);
    char *rcopy = route ? strdup(route) : NULL;
    if (route && !rcopy) return 0;
    rsub *t = route_sub(s, route, 0);
    if (!t) {
        free(rcopy);
        return 0;
    }
    pthread_mutex_lock(&t->mu);
    rchan *c = find_chan(t, channel, strlen(channel), pattern);
    int ready = c && c->intended && c->pending == 0 && c->server;
    rsub_entry *e = ready ? entry_new(w, NULL, one, NULL) : NULL;
    if (e) {
        e->ch = c;
        e->owner = t;
        e->route = rcopy;
        rcopy = NULL;
        e->seen = c->msg_seq;
        e->next = c->waiters;
        if (c->waiters) c->waiters->prev = e;
        c->waiters = e;
    }
    pthread_mutex_unlock(&t->mu);
    free(rcopy);
    *out = e;
    return e != NULL;
}

int rsub_register_ready(rsub *s, const char *channel, int pattern, baton_waiter *w, rsub_entry **out) {
    return register_ready(s, channel, pattern, 0, w, out);
}

int rsub_register_ready_one(rsub *s, const char *channel, baton_waiter *w, rsub_entry **out) {
    return register_ready(s, channel, 0, 1, w, out);
}

/* ---- one-wake attempts (see the top) --------------------------------------- */

void rsub_attempt(rsub *s, rsub_entry *e) {
    (void)s;
    if (!e || !e->one) return;
    pthread_mutex_lock(&e->owner->mu);
    e->state = ONE_TRYING; /* this attempt sees every release before it */
    e->again = 0;
    pthread_mutex_unlock(&e->owner->mu);
}

void rsub_attempt_failed(rsub *s, rsub_entry *e) {
    (void)s;
    if (!e || !e->one) return;
    pthread_mutex_lock(&e->owner->mu);
    /* a message during the attempt: it is owed another (its waiter was
     * woken, so it does not park) */
    e->state = e->again ? ONE_WOKEN : ONE_IDLE;
    e->again = 0;
    pthread_mutex_unlock(&e->owner->mu);
}

void rsub_granted(rsub *s, rsub_entry *e) {
    (void)s;
    if (!e || !e->one) return;
    pthread_mutex_lock(&e->owner->mu);
    e->state = ONE_IDLE;
    e->again = 0;
    e->owes = 0;
    pthread_mutex_unlock(&e->owner->mu);
}
