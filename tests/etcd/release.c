/*
 * The release of an etcd lock can be sent again (issue 21): a guarded delete
 * whose first attempt was applied but whose answer was lost ("leader
 * changed", a connection broken after the request went out) must not turn
 * into BATON_ELOST when it is repeated.
 *
 *   test_etcd_release URI      ("{port}" = the fixture's client port)
 *
 * The lost answer is played by hand: while baton holds NAME, this test sends
 * the very txn baton's release sends (delete "<name>/<lease hex>" if its
 * create revision is our fence, and record the fence in "\0fence/<name>")
 * straight to etcd's JSON gateway; baton's release then finds its work
 * done. It must answer 0, and lock_info must show the fence recorded. A key
 * deleted by someone else (no fence recorded: not our release) is still
 * BATON_ELOST, and so is a key replaced by a newer contender's.
 */
#include <baton.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"
#include "../common/testlib.h"

static char g_uri[1024];
static char g_prefix[96];
static int g_port;

static char *b64(const char *p, size_t n)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc(n / 3 * 4 + 8), *q = o;
    size_t i = 0;
    for (; i + 2 < n; i += 3) {
        unsigned v = (unsigned char)p[i] << 16 | (unsigned char)p[i + 1] << 8 | (unsigned char)p[i + 2];
        *q++ = t[v >> 18], *q++ = t[v >> 12 & 63], *q++ = t[v >> 6 & 63], *q++ = t[v & 63];
    }
    if (i < n) {
        unsigned v = (unsigned char)p[i] << 16 | (i + 1 < n ? (unsigned char)p[i + 1] << 8 : 0);
        *q++ = t[v >> 18], *q++ = t[v >> 12 & 63];
        *q++ = i + 1 < n ? t[v >> 6 & 63] : '=';
        *q++ = '=';
    }
    *q = 0;
    return o;
}

/* POSTs BODY to etcd's gateway at PATH; the answer's body into OUT. 0 = HTTP 200. */
static int post(const char *path, const char *body, char *out, size_t n)
{
    struct sockaddr_in a;
    char req[8192];
    int fd = socket(AF_INET, SOCK_STREAM, 0), len;
    size_t got = 0;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)g_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
        if (fd >= 0) close(fd);
        return -1;
    }
    len = snprintf(req, sizeof req,
                   "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                   path, strlen(body), body);
    if (write(fd, req, (size_t)len) != len) {
        close(fd);
        return -1;
    }
    for (;;) {
        ssize_t r = read(fd, out + got, n - 1 - got);
        if (r <= 0) break;
        got += (size_t)r;
        if (got + 1 >= n) break;
    }
    out[got] = 0;
    close(fd);
    return strncmp(out, "HTTP/1.1 200", 12) ? -1 : 0;
}

/* The key baton holds for NAME: "<name>/<something>", the only key under it. */
static int held_key(const char *name, char *key, size_t n)
{
    char pfx[512], end[512], body[2048], out[8192], *k, *e;
    snprintf(pfx, sizeof pfx, "%s/", name);
    snprintf(end, sizeof end, "%s0", name); /* '0' follows '/' */
    char *p64 = b64(pfx, strlen(pfx)), *e64 = b64(end, strlen(end));
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"range_end\":\"%s\",\"keys_only\":true}", p64, e64);
    free(p64), free(e64);
    if (post("/v3/kv/range", body, out, sizeof out)) return -1;
    if (!(k = strstr(out, "\"key\":\""))) return -1;
    k += 7;
    if (!(e = strchr(k, '"')) || (size_t)(e - k) >= n) return -1;
    memcpy(key, k, (size_t)(e - k)); /* still base64 */
    key[e - k] = 0;
    return 0;
}

/* What baton's release txn does, by hand: delete KEY64 if its create
 * revision is REV; with MARK also "\0fence/NAME" = REV. */
static int release_by_hand(const char *name, const char *key64, uint64_t rev, int mark)
{
    char fk[512], revs[24], body[4096], out[8192];
    size_t fl;
    snprintf(revs, sizeof revs, "%llu", (unsigned long long)rev);
    fk[0] = 0;
    memcpy(fk + 1, "fence/", 6);
    fl = 7 + (size_t)snprintf(fk + 7, sizeof fk - 7, "%s", name);
    char *f64 = b64(fk, fl), *v64 = b64(revs, strlen(revs));
    if (mark)
        snprintf(body, sizeof body,
                 "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":\"EQUAL\",\"create_revision\":\"%s\"}],"
                 "\"success\":[{\"request_delete_range\":{\"key\":\"%s\"}},{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\"}}]}",
                 key64, revs, key64, f64, v64);
    else
        snprintf(body, sizeof body, "{\"key\":\"%s\"}", key64);
    free(f64), free(v64);
    return post(mark ? "/v3/kv/txn" : "/v3/kv/deleterange", body, out, sizeof out);
}

static void test_answer_lost(void)
{
    char name[256], key64[512];
    snprintf(name, sizeof name, "%sanswer-lost", g_prefix);
    baton_client *c = tl_client_open(g_uri);
    baton_lock *l = NULL;
    MUST(baton_lock_open(&l, c, name, NULL));
    CHECK_RC(baton_lock_acquire(l, 5000), 0);
    uint64_t f = baton_lock_fence(l);
    CHECK(held_key(name, key64, sizeof key64) == 0);
    /* the first attempt of the release, applied; its answer never came */
    CHECK(release_by_hand(name, key64, f, 1) == 0);
    /* the release sent again finds its work done */
    CHECK_RC(baton_lock_release(l), 0);
    baton_lockinfo li = BATON_LOCK_INFO_INIT;
    CHECK_RC(baton_lock_info(c, name, &li), 0);
    CHECK(!li.held);
    CHECK(li.fence == f);
    /* and the lock is free */
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    CHECK(baton_lock_fence(l) > f);
    CHECK_RC(baton_lock_release(l), 0);
    baton_lock_free(l);
    baton_client_close(c);
}

static void test_deleted_by_another(void)
{
    char name[256], key64[512];
    snprintf(name, sizeof name, "%sdeleted", g_prefix);
    baton_client *c = tl_client_open(g_uri);
    baton_lock *l = NULL;
    MUST(baton_lock_open(&l, c, name, NULL));
    CHECK_RC(baton_lock_acquire(l, 5000), 0);
    CHECK(held_key(name, key64, sizeof key64) == 0);
    /* someone else deleted our key: not our release, the grant was lost */
    CHECK(release_by_hand(name, key64, 0, 0) == 0);
    CHECK_RC(baton_lock_release(l), BATON_ELOST);
    baton_lock_free(l);
    baton_client_close(c);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 2) {
        fprintf(stderr, "usage: %s URI\n", argv[0]);
        return 2;
    }
    if (tl_uri_with_port(g_uri, sizeof g_uri, argv[1], NULL) != 0 || (g_port = tl_fixture_port("etcd")) <= 0)
        return tl_skip_status("no test etcd server (no port file)", 1);
    snprintf(g_prefix, sizeof g_prefix, "release-test/%ld-%ld/", (long)getpid(), (long)(time(NULL) % 100000));
    fprintf(stderr, "etcd release: %s (names %s*)\n", g_uri, g_prefix);
    RUN(test_answer_lost);
    RUN(test_deleted_by_another);
    return th_finish();
}
