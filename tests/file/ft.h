/* Helpers shared by the file-engine suites in tests/file: a private lock
 * directory per run under $BATON_TEST_TMP, clients on it, and raw access to
 * the files the engine keeps there (so a test can damage them as a power loss
 * or a cleaner would). */
#ifndef BATON_TESTS_FILE_FT_H
#define BATON_TESTS_FILE_FT_H

#include <baton.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"
#include "../common/testlib.h"

static char g_dir[1024];   /* the lock directory */
static char g_uri[1100];   /* file://<g_dir> */

/* g_dir = $BATON_TEST_TMP/<suite>-<pid>, created; g_uri names it. */
static inline void ft_setup(const char *suite) {
    const char *tt = getenv("BATON_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/%s-%ld", tt && *tt ? tt : "/tmp", suite, (long)getpid());
    tl_mkdirs(g_dir);
    snprintf(g_uri, sizeof g_uri, "file://%s", g_dir);
    fprintf(stderr, "%s: %s\n", suite, g_uri);
}

static inline baton_client *client(void) {
    baton_client *c = NULL;
    MUST(baton_client_open(&c, g_uri, NULL));
    return c;
}

/* The path of a file the engine keeps in the lock dir. */
static inline const char *dir_file(char *buf, size_t n, const char *fname) {
    snprintf(buf, n, "%s/%s", g_dir, fname);
    return buf;
}

/* Replaces the whole content of PATH with LEN bytes of DATA. */
static inline void put_bytes(const char *path, const void *data, size_t len) {
    int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0 || (len && write(fd, data, len) != (ssize_t)len)) {
        perror(path);
        exit(1);
    }
    close(fd);
}

#endif
