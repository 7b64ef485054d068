/*
 * Host names resolved with a deadline. libpq resolves a host name inside
 * PQconnectPoll with getaddrinfo(), which waits as long as the resolver
 * says (resolv.conf: 5 s per try, per server, per address family) whatever
 * our connect timeout is. So names are resolved here, on a detached thread
 * that the connecting call waits for until its deadline, and libpq is given
 * the addresses (hostaddr=) beside the names (host=, still used for TLS
 * verification and .pgpass). A resolver still busy at the deadline is left
 * to finish on its own: its thread owns what it touches.
 */
#include "pg_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;                /* the caller and the thread */
    int done;
    int gai;                 /* getaddrinfo's answer */
    struct addrinfo *res;
    char name[];
} job;

static void job_unref(job *j)
{
    int last;
    pthread_mutex_lock(&j->mu);
    last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last) return;
    if (j->res) freeaddrinfo(j->res);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

static void *resolve_main(void *arg)
{
    job *j = arg;
    struct addrinfo hints, *res = NULL;
    int gai;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    gai = getaddrinfo(j->name, NULL, &hints, &res);
    pthread_mutex_lock(&j->mu);
    j->gai = gai;
    j->res = res;
    j->done = 1;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    job_unref(j);
    return NULL;
}

int pg_host_numeric(const char *h)
{
    unsigned char buf[sizeof(struct in6_addr)];
    /* a unix socket directory, or libpq's default: nothing to resolve */
    if (!*h || *h == '/' || *h == '@') return 1;
    return inet_pton(AF_INET, h, buf) == 1 || inet_pton(AF_INET6, h, buf) == 1;
}

int pg_resolve(const char *name, int64_t deadline, char ***addrs, size_t *n)
{
    size_t len = strlen(name);
    job *j = calloc(1, sizeof *j + len + 1);
    pthread_condattr_t ca;
    pthread_attr_t ta;
    pthread_t t;
    int rc = 0, started;

    *addrs = NULL;
    *n = 0;
    if (!j) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    memcpy(j->name, name, len + 1);
    j->refs = 2;
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_attr_init(&ta);
    pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
    started = pthread_create(&t, &ta, resolve_main, j) == 0;
    pthread_attr_destroy(&ta);
    if (!started) {
        j->refs = 1;
        job_unref(j);
        return baton_seterr(BATON_EIO, 0, "postgres: cannot start a resolver thread");
    }
    pthread_mutex_lock(&j->mu);
    while (!j->done && baton_now_ns() < deadline) {
        struct timespec ts = { (time_t)(deadline / 1000000000LL), (long)(deadline % 1000000000LL) };
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
    if (!j->done) {
        rc = baton_seterr(BATON_EUNAVAILABLE, ETIMEDOUT, "postgres: cannot resolve '%s' by the connect deadline",
                          name);
    } else if (j->gai) {
        rc = baton_seterr(BATON_EUNAVAILABLE, j->gai, "postgres: cannot resolve '%s': %s", name, gai_strerror(j->gai));
    } else {
        size_t cap = 0;
        for (struct addrinfo *a = j->res; a; a = a->ai_next) cap++;
        if (!(*addrs = calloc(cap ? cap : 1, sizeof **addrs))) {
            rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        } else {
            for (struct addrinfo *a = j->res; a; a = a->ai_next) {
                char buf[INET6_ADDRSTRLEN];
                const void *src = a->ai_family == AF_INET ? (const void *)&((struct sockaddr_in *)a->ai_addr)->sin_addr
                                : a->ai_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr
                                : NULL;
                int dup = 0;
                if (!src || !inet_ntop(a->ai_family, src, buf, sizeof buf)) continue;
                for (size_t k = 0; k < *n; k++) dup |= !strcmp((*addrs)[k], buf);
                if (dup) continue;
                if (!((*addrs)[*n] = strdup(buf))) {
                    rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
                    break;
                }
                (*n)++;
            }
            if (!rc && !*n) rc = baton_seterr(BATON_EUNAVAILABLE, 0, "postgres: '%s' has no address", name);
        }
    }
    pthread_mutex_unlock(&j->mu);
    job_unref(j);
    if (rc) {
        for (size_t k = 0; *addrs && k < *n; k++) free((*addrs)[k]);
        free(*addrs);
        *addrs = NULL;
        *n = 0;
    }
    return rc;
}
