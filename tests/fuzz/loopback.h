/*
 * A one-connection-at-a-time loopback server for the fuzz targets that feed
 * a peer's bytes through a real connection layer (fuzz_redis, fuzz_etcd_h2):
 * the target points the client at lb_port(), sets the bytes the "server"
 * sends with lb_serve(), makes its call, and frees the client. The server
 * thread accepts one connection, writes the bytes, shuts its side for
 * writing (the client sees the end of the stream after them, so no call
 * waits for its deadline), and reads until the client closes.
 *
 * Header-only: each target is one translation unit.
 */
#ifndef BATON_FUZZ_LOOPBACK_H
#define BATON_FUZZ_LOOPBACK_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int lfd, port;
    const unsigned char *data;   /* what the next connection is sent */
    size_t len;
    unsigned long served;        /* connections finished */
} lb = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, -1, 0, NULL, 0, 0 };

static void *lb_main(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(lb.lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            perror("fuzz loopback: accept");
            exit(1);
        }
        pthread_mutex_lock(&lb.mu);
        const unsigned char *p = lb.data;
        size_t n = lb.len;
        pthread_mutex_unlock(&lb.mu);
        while (n > 0) {
            ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
            if (w <= 0) break;   /* the client went away */
            p += w, n -= (size_t)w;
        }
        shutdown(fd, SHUT_WR);
        /* until the client closes (bounded: a client that neither reads nor
         * closes within 10 s is a hang the fuzzer's -timeout reports) */
        char buf[4096];
        struct pollfd pf = { .fd = fd, .events = POLLIN };
        while (poll(&pf, 1, 10000) > 0 && recv(fd, buf, sizeof buf, 0) > 0) {}
        close(fd);
        pthread_mutex_lock(&lb.mu);
        lb.served++;
        pthread_cond_broadcast(&lb.cv);
        pthread_mutex_unlock(&lb.mu);
    }
    return NULL;
}

/* Starts the server once; its port. */
static int lb_port(void)
{
    if (lb.lfd >= 0) return lb.port;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    pthread_t th;
    int one = 1;
    lb.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lb.lfd < 0 || setsockopt(lb.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(lb.lfd, (struct sockaddr *)&a, sizeof a) || listen(lb.lfd, 16) ||
        getsockname(lb.lfd, (struct sockaddr *)&a, &al) || pthread_create(&th, NULL, lb_main, NULL)) {
        perror("fuzz loopback: listen");
        exit(1);
    }
    pthread_detach(th);
    lb.port = ntohs(a.sin_port);
    return lb.port;
}

/* The bytes the next connections are sent (kept by the caller until
 * lb_wait). Returns the count of connections served so far. */
static unsigned long lb_serve(const unsigned char *p, size_t n)
{
    unsigned long s;
    pthread_mutex_lock(&lb.mu);
    lb.data = p, lb.len = n;
    s = lb.served;
    pthread_mutex_unlock(&lb.mu);
    return s;
}

/* Waits until the server has finished with every connection made since
 * lb_serve returned BEFORE (CONNS of them), so the next input does not
 * meet this one's connection. */
static void lb_wait(unsigned long before, unsigned long conns)
{
    pthread_mutex_lock(&lb.mu);
    while (lb.served < before + conns) pthread_cond_wait(&lb.cv, &lb.mu);
    pthread_mutex_unlock(&lb.mu);
}

#endif
