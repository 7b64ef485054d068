/* Garbage on the socket: a tiny loopback listener answers with bytes that are
 * not the RESP the client expects. Every case must end in a clean error
 * (BATON_EPROTO for bad replies, BATON_EUNAVAILABLE for a truncated one), no
 * crash, no leak, no hang. */
#include "faults.h"

typedef struct {
    const char *replies[4]; /* one per command received; then close */
    size_t lens[4];         /* 0 = strlen */
    int greet;              /* send replies[0] on accept, before reading */
} fake_case;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static fake_case cur;
static int lfd, lport, stop_flag;

static void send_all(int fd, const char *b, size_t n) {
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w <= 0) return;
        b += w;
        n -= (size_t)w;
    }
}

static void *fake_server(void *p) {
    (void)p;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) return NULL;
        pthread_mutex_lock(&mu);
        fake_case fc = cur;
        int stop = stop_flag;
        pthread_mutex_unlock(&mu);
        if (stop) { close(fd); return NULL; }
        int i = 0;
        if (fc.greet && fc.replies[0]) {
            send_all(fd, fc.replies[0], fc.lens[0] ? fc.lens[0] : strlen(fc.replies[0]));
            i = 1;
        }
        char buf[8192];
        struct timeval tv = { 2, 0 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        for (; i < 4 && fc.replies[i]; i++) {
            if (recv(fd, buf, sizeof buf, 0) <= 0) break;
            send_all(fd, fc.replies[i], fc.lens[i] ? fc.lens[i] : strlen(fc.replies[i]));
        }
        /* Let the client read the last reply, then hang up. */
        while (recv(fd, buf, sizeof buf, 0) > 0) {}
        close(fd);
    }
}

static void set_case(fake_case fc) {
    pthread_mutex_lock(&mu);
    cur = fc;
    pthread_mutex_unlock(&mu);
}

static char uri[512];

/* Opens a client (PING answered by the first reply), then acquires. */
static int open_and_acquire(int *open_rc) {
    baton_client *c = NULL;
    *open_rc = baton_client_open(&c, uri, NULL);
    if (*open_rc) return *open_rc;
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    baton_lock *l = NULL;
    int rc = baton_lock_open(&l, c, "garbage", &o);
    if (!rc) rc = baton_lock_acquire(l, 0);
    if (l) baton_lock_free(l);
    baton_client_close(c);
    return rc;
}

static void test_garbage_greeting(void) {
    fake_case fc = { { "HTTP/1.1 400 Bad Request\r\n\r\n", NULL, NULL, NULL }, { 0 }, 1 };
    set_case(fc);
    baton_client *c = NULL;
    CHECK_RC(baton_client_open(&c, uri, NULL), BATON_EPROTO);
    fprintf(stderr, "   %s\n", baton_error_last()->message);
    fake_case fc2 = { { "\x00\x01\x02\xff\xfe garbage\r\n", NULL, NULL, NULL }, { 12 }, 0 };
    set_case(fc2);
    CHECK_RC(baton_client_open(&c, uri, NULL), BATON_EPROTO);
    fake_case fc3 = { { "+NOT PONG\r\n", NULL, NULL, NULL }, { 0 }, 0 };
    set_case(fc3);
    CHECK_RC(baton_client_open(&c, uri, NULL), BATON_EPROTO);
}

static void test_bad_script_replies(void) {
    static const char *bad[] = {
        "+OK\r\n",                             /* status instead of an array */
        ":5\r\n",                              /* integer */
        "$-1\r\n",                             /* nil */
        "*-1\r\n",                             /* nil array */
        "*0\r\n",                              /* empty array */
        "*2\r\n:1\r\n$1\r\nx\r\n",             /* wrong element type */
        "*2\r\n:1\r\n:0\r\n",                  /* granted with fence 0 */
        "*3\r\n:1\r\n:2\r\n:3\r\n",            /* wrong arity */
        "*2147483647\r\n",                     /* absurd array: no huge allocation */
        "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", /* too deep */
        "-ERR something odd\r\n",              /* error reply */
        "!garbage\r\n",                        /* bad type byte */
        ":notanumber\r\n",                     /* bad integer */
        "$3\r\nabcdef\r\n",                    /* bulk length mismatch */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fake_case fc = { { "+PONG\r\n", bad[i], NULL, NULL }, { 0 }, 0 };
        set_case(fc);
        int orc;
        int rc = open_and_acquire(&orc);
        if (rc != BATON_EPROTO)
            fprintf(stderr, "   case %zu: %d (%s)\n", i, rc, baton_error_last()->message);
        CHECK_RC(rc, BATON_EPROTO);
    }
}

static void test_noscript_then_garbage(void) {
    fake_case fc = { { "+PONG\r\n", "-NOSCRIPT No matching script.\r\n", "+OK\r\n", NULL }, { 0 }, 0 };
    set_case(fc);
    int orc;
    CHECK_RC(open_and_acquire(&orc), BATON_EPROTO);
}

static void test_truncated_reply(void) {
    fake_case fc = { { "+PONG\r\n", "*2\r\n:1\r\n:", NULL, NULL }, { 0 }, 0 };
    set_case(fc);
    int orc;
    int64_t t0 = tl_now_ms();
    CHECK_RC(open_and_acquire(&orc), BATON_EUNAVAILABLE);
    CHECK(tl_now_ms() - t0 < 2000);
}

/* Random bytes as the reply: any clean error will do, never a crash or hang. */
static void test_random_replies(void) {
    unsigned seed = 12345;
    static char junk[64][80];
    for (int i = 0; i < 64; i++) {
        size_t n = 1 + rand_r(&seed) % 70;
        static const char alphabet[] = "*$:+-\r\n0123456789-abc\x00\xff";
        for (size_t k = 0; k < n; k++) junk[i][k] = alphabet[rand_r(&seed) % (sizeof alphabet - 1)];
        fake_case fc = { { "+PONG\r\n", junk[i], NULL, NULL }, { 0, n }, 0 };
        set_case(fc);
        int orc;
        int rc = open_and_acquire(&orc);
        CHECK(orc == 0);
        CHECK(rc == BATON_EPROTO || rc == BATON_EUNAVAILABLE);
    }
}

int main(void) {
    lfd = ft_listen(&lport);
    pthread_t t;
    pthread_create(&t, NULL, fake_server, NULL);
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d?io_timeout_ms=300&connect_timeout_ms=300", lport);
    RUN(test_garbage_greeting);
    RUN(test_bad_script_replies);
    RUN(test_noscript_then_garbage);
    RUN(test_truncated_reply);
    RUN(test_random_replies);
    pthread_mutex_lock(&mu);
    stop_flag = 1;
    pthread_mutex_unlock(&mu);
    shutdown(lfd, SHUT_RDWR);
    close(lfd);
    pthread_join(t, NULL);
    return th_finish();
}
