/* Helpers for the Redis fault tests: a fresh temp dir per test and tiny
 * loopback listeners. Servers (tl_server_start("redis", ...)), timing and
 * the rest come from tests/common/testlib.h. */
#ifndef BATON_FAULTS_H
#define BATON_FAULTS_H

#include "baton.h"
#include "../harness.h"
#include "../common/testlib.h"

#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef FT_TMP
#define FT_TMP "/tmp"
#endif

/* A fresh directory FT_TMP/faults_<name>. */
static inline const char *ft_dir(const char *name) {
    static char buf[4][1024];
    static int n;
    char *d = buf[n++ % 4];
    const char *base = getenv("BATON_TEST_TMP");
    snprintf(d, sizeof buf[0], "%s/faults_%s", base && *base ? base : FT_TMP, name);
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", d, d);
    if (system(cmd) != 0) { fprintf(stderr, "cannot create %s\n", d); exit(1); }
    return d;
}

/* A loopback TCP listener on a free port. */
static inline int ft_listen(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0) {
        perror("listen");
        exit(1);
    }
    socklen_t sl = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &sl);
    *port = ntohs(a.sin_port);
    return fd;
}

#endif
