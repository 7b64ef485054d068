/* baton_fence_admit / baton_fence_enter / baton_fence_leave (docs/fencing.md,
 * "In C"): what is admitted and stored, what is refused and how, bad input
 * and odd files, and guards that keep every other admit out until leave —
 * threads of one process included (each enter has its own open file
 * description, and flock(2) locks conflict between those).
 *
 *   test_fencing_admit DIR */
#include "baton.h"
#include "../harness.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char dir[512];

static void path_of(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(1); }
    fputs(text, f);
    fclose(f);
}

/* the fence file's content, "" when missing */
static const char *get(const char *path)
{
    static char buf[64];
    FILE *f = fopen(path, "r");
    size_t n = 0;
    buf[0] = 0;
    if (f) {
        n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
    }
    return buf;
}

static void test_admit_store_refuse(void)
{
    char p[600];
    uint64_t seen = 99;
    path_of(p, sizeof p, "a.fence");
    unlink(p);

    CHECK_RC(baton_fence_admit(p, 5, &seen), 0);
    CHECK(seen == 0);                       /* a missing file: nothing seen yet */
    CHECK(!strcmp(get(p), "5\n"));
    CHECK_RC(baton_fence_admit(p, 3, &seen), BATON_ESTALE);
    CHECK(seen == 5);
    CHECK(baton_error_last()->code == BATON_ESTALE);
    CHECK(!strcmp(baton_error_last()->message, "fenced off: stored 5 > yours 3"));
    CHECK(!strcmp(get(p), "5\n"));          /* unchanged */
    CHECK_RC(baton_fence_admit(p, 5, &seen), 0);   /* equal: the same holder again */
    CHECK(seen == 5);
    CHECK_RC(baton_fence_admit(p, 6, NULL), 0);
    CHECK(!strcmp(get(p), "6\n"));
    CHECK_RC(baton_fence_admit(p, 5, NULL), BATON_ESTALE);
    CHECK_RC(baton_fence_admit(p, UINT64_MAX, &seen), 0);
    CHECK(seen == 6);
    CHECK_RC(baton_fence_admit(p, UINT64_MAX, &seen), 0);
    CHECK(seen == UINT64_MAX);
    CHECK_RC(baton_fence_admit(p, UINT64_MAX - 1, NULL), BATON_ESTALE);
    CHECK(strcmp(baton_strerror(BATON_ESTALE), "unknown error") != 0);
    CHECK(BATON_ESTALE == -16);   /* never renumbered */
}

static void test_files_of_others(void)
{
    char p[600];
    uint64_t seen = 0;
    path_of(p, sizeof p, "b.fence");

    put(p, "41");                           /* no newline */
    CHECK_RC(baton_fence_admit(p, 40, &seen), BATON_ESTALE);
    CHECK(seen == 41);
    put(p, "41\n");                         /* echo's */
    CHECK_RC(baton_fence_admit(p, 42, &seen), 0);
    CHECK(seen == 41);
    put(p, "");                             /* empty: none yet */
    CHECK_RC(baton_fence_admit(p, 1, &seen), 0);
    CHECK(seen == 0);

    /* not a fence: refused, left alone (never a number guessed out of it) */
    static const char *const junk[] = { "x\n", "12 13\n", "-1\n", " 7\n", "7\n\n", "18446744073709551616\n",
                                        "0123456789012345678901234567890123456789\n" };
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        put(p, junk[i]);
        CHECK_RC(baton_fence_admit(p, 1000, NULL), BATON_EIO);
        CHECK(strstr(baton_error_last()->message, "does not hold a fence") != NULL);
        CHECK(!strcmp(get(p), junk[i]));
    }

    /* a directory, a symbolic link where the fence file belongs */
    path_of(p, sizeof p, "d.fence");
    mkdir(p, 0700);
    CHECK_RC(baton_fence_admit(p, 1, NULL), BATON_EIO);
    char target[600];
    path_of(target, sizeof target, "target");
    put(target, "1\n");
    path_of(p, sizeof p, "link.fence");
    unlink(p);
    CHECK(symlink(target, p) == 0);
    CHECK_RC(baton_fence_admit(p, 2, NULL), BATON_EIO);
    CHECK(!strcmp(get(target), "1\n"));
    /* a directory that does not exist */
    path_of(p, sizeof p, "no/such/dir/x.fence");
    CHECK_RC(baton_fence_admit(p, 2, NULL), BATON_EIO);
}

static void test_bad_input(void)
{
    char p[600];
    baton_fence_guard *g = (baton_fence_guard *)&g;
    uint64_t seen = 7;
    path_of(p, sizeof p, "c.fence");

    CHECK_RC(baton_fence_admit(NULL, 1, NULL), BATON_EINVAL);
    CHECK_RC(baton_fence_admit("", 1, NULL), BATON_EINVAL);
    CHECK_RC(baton_fence_enter(&g, p, 0, &seen), BATON_EINVAL);
    CHECK(g == NULL);
    CHECK(seen == 0);
    CHECK(strstr(baton_error_last()->message, "fence 0") != NULL);
    baton_fence_leave(NULL);
    /* a failed enter leaves no flock behind */
    put(p, "9\n");
    CHECK_RC(baton_fence_enter(&g, p, 8, NULL), BATON_ESTALE);
    CHECK(g == NULL);
    CHECK_RC(baton_fence_admit(p, 9, NULL), 0);
}

/* ---- guards ---------------------------------------------------------------- */

typedef struct {
    const char *path;
    uint64_t fence;
    int rc, done;
} waiter;

static void *admit_later(void *p)
{
    waiter *w = p;
    int rc = baton_fence_admit(w->path, w->fence, NULL);
    w->rc = rc;
    __atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void test_guard_blocks_others(void)
{
    char p[600];
    baton_fence_guard *g = NULL;
    pthread_t t;
    waiter w = { 0 };
    struct timespec ts = { 0, 300 * 1000 * 1000 };
    path_of(p, sizeof p, "e.fence");
    unlink(p);

    CHECK_RC(baton_fence_enter(&g, p, 10, NULL), 0);
    CHECK(g != NULL);
    w.path = p;
    w.fence = 11;
    pthread_create(&t, NULL, admit_later, &w);
    /* A newer holder's admit must wait for the guard: whatever the load, it
     * cannot have finished while we hold it (a broken guard is caught only
     * when the thread got to run within these 300 ms, which it nearly always
     * does; the check itself never fails spuriously). */
    nanosleep(&ts, NULL);
    CHECK(__atomic_load_n(&w.done, __ATOMIC_SEQ_CST) == 0);
    CHECK(!strcmp(get(p), "10\n"));
    baton_fence_leave(g);
    pthread_join(t, NULL);
    CHECK(w.done == 1);
    CHECK_RC(w.rc, 0);
    CHECK(!strcmp(get(p), "11\n"));
}

#define THREADS 8
#define ROUNDS 60

static char g_counter[600], g_fencefile[600];
static uint64_t g_next_fence = 1;      /* the "engine": hands out increasing fences */
static uint64_t g_last_admitted;       /* written only under a guard */
static int g_order_broken, g_admitted;

/* A read-modify-write of a plain file under the guard: lost updates show
 * when two guards overlap. And the admitted fences, in the order their
 * holders got in, must increase. */
static void *writer(void *p)
{
    (void)p;
    for (int i = 0; i < ROUNDS; i++) {
        uint64_t fence = __atomic_fetch_add(&g_next_fence, 1, __ATOMIC_SEQ_CST);
        baton_fence_guard *g;
        int rc = baton_fence_enter(&g, g_fencefile, fence, NULL);
        if (rc == BATON_ESTALE) continue;     /* a newer one got in first */
        if (rc) { __atomic_store_n(&g_order_broken, 1000 + rc, __ATOMIC_SEQ_CST); continue; }
        if (fence < g_last_admitted) g_order_broken = 1;
        g_last_admitted = fence;
        long n = atol(get(g_counter));
        char buf[32];
        snprintf(buf, sizeof buf, "%ld\n", n + 1);
        sched_yield();
        put(g_counter, buf);
        g_admitted++;
        baton_fence_leave(g);
    }
    return NULL;
}

static void test_guards_serialize(void)
{
    pthread_t t[THREADS];
    path_of(g_counter, sizeof g_counter, "counter");
    path_of(g_fencefile, sizeof g_fencefile, "s.fence");
    unlink(g_fencefile);
    put(g_counter, "0\n");
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, writer, NULL);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    CHECK(g_order_broken == 0);
    CHECK(g_admitted > 0);
    CHECK(atol(get(g_counter)) == g_admitted);
    CHECK(strtoull(get(g_fencefile), NULL, 10) == g_last_admitted);
    fprintf(stderr, "   %d of %d admitted\n", g_admitted, THREADS * ROUNDS);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    mkdir(dir, 0700);
    RUN(test_admit_store_refuse);
    RUN(test_files_of_others);
    RUN(test_bad_input);
    RUN(test_guard_blocks_others);
    RUN(test_guards_serialize);
    return th_finish();
}
