/*
 * The file engine's on-disk records, through the public API only (so the
 * target does not depend on how src/backends/file/ is split): the fuzz
 * input, after its first byte, is written as the content of one of the
 * engine's files in a private lock directory, and a file:// client then
 * reads and rewrites it as a user would. The first byte picks the file:
 *   0 lock.fz    a lock's record (fence counter, held, holder): lock_info,
 *                a try-acquire of the lock, then of a read-write lock's
 *                write and read sides, list, break
 *   1 sem..fz    a semaphore's count: info, available, try-acquire, release,
 *                try_set, add (also INT64_MAX and INT64_MIN), drain
 *   2 perm.fz    a permit-expirable semaphore's count and slots: info,
 *                available, try_set, try-acquire, renew, release, add (also
 *                INT64_MAX and INT64_MIN)
 *   3 perm.fz+0  a permit slot file: the same calls
 * Whatever the file holds, every call must return 0 or an error code with
 * its message, never crash, hang or hand out a fence of 0, and a granted
 * lock's fence must be above the counter an intact record held (below
 * UINT64_MAX).
 *
 * The directory: $BATON_TEST_TMP/fuzz_file (ctest) or a new one under
 * $TMPDIR (scripts/fuzz.sh sets it inside the fuzz build). It is emptied
 * before each input.
 */
#include <baton.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPECT(c) do { if (!(c)) { fprintf(stderr, "fuzz_file: %s:%d: %s (%s)\n", __FILE__, __LINE__, #c, \
                                           baton_error_last()->message ? baton_error_last()->message : "-"); abort(); } } while (0)
/* 0 or a baton error code with a message */
#define RC_OK(rc) EXPECT((rc) == 0 || ((rc) < 0 && baton_error_last()->message))

static char g_dir[4096];
static baton_client *g_c;

static void setup(void)
{
    const char *t = getenv("BATON_TEST_TMP");
    char uri[4200];
    if (t && *t) {
        snprintf(g_dir, sizeof g_dir, "%s/fuzz_file", t);
        mkdir(g_dir, 0700);
    } else {
        snprintf(g_dir, sizeof g_dir, "%s/baton-fuzz-file-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(g_dir)) {
            perror("fuzz_file: mkdtemp");
            exit(1);
        }
    }
    chmod(g_dir, 0700);
    snprintf(uri, sizeof uri, "file://%s", g_dir);
    if (baton_client_open(&g_c, uri, NULL)) {
        fprintf(stderr, "fuzz_file: %s: %s\n", uri, baton_error_last()->message);
        exit(1);
    }
}

static void empty_dir(void)
{
    DIR *d = opendir(g_dir);
    struct dirent *e;
    if (!d) {
        perror(g_dir);
        exit(1);
    }
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' || (e->d_name[1] && strcmp(e->d_name, "..")))
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
}

static int on_name(void *arg, const char *name)
{
    EXPECT(name && *name);
    ++*(int *)arg;
    return 0;
}

/* The fence counter of an intact lock record (the layout the engine writes:
 * "baton-lock 1\nfence " and 20 digits), else 0. */
static uint64_t record_fence(const uint8_t *p, size_t n)
{
    static const char head[] = "baton-lock 1\nfence ";
    const size_t hl = sizeof head - 1;
    uint64_t v = 0;
    if (n < hl + 21 || memcmp(p, head, hl) || p[hl + 20] != '\n') return 0;
    for (size_t i = hl; i < hl + 20; i++) {
        if (p[i] < '0' || p[i] > '9' || v > (UINT64_MAX - (p[i] - '0')) / 10) return 0;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

/* 1 for a permit count the engine accepts (its layout, counts within
 * 1,000,000) that is above 1000: the engine scans every slot file up to the
 * highest count, by design, so such a count is slow (seconds under ASan),
 * not wrong; skipped. A count the engine rejects is not skipped: nothing of
 * it may be used. */
static int big_count(const uint8_t *d, size_t n)
{
    static const char head[] = "baton-permits 1\npermits ";
    char buf[128], *end, *p;
    long long c, slots;
    if (n > sizeof buf - 1) n = sizeof buf - 1;   /* what the engine reads */
    memcpy(buf, d, n);
    buf[n] = 0;
    if (n < sizeof head - 1 || memcmp(buf, head, sizeof head - 1)) return 0;
    errno = 0;
    c = strtoll(buf + sizeof head - 1, &end, 10);
    if (errno || *end != '\n' || strncmp(end, "\nslots ", 7)) return 0;
    p = end + 7;
    slots = strtoll(p, &end, 10);
    if (errno || *end != '\n' || p == end || c < -1000000 || c > 1000000 || slots < 0 || slots > 1000000) return 0;
    return c > 1000 || slots > 1000;
}

static void lock_calls(uint64_t before)
{
    baton_lock *l = NULL;
    baton_rwlock *rw = NULL;
    uint64_t f = 0;
    int rc, n = 0;
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;

    RC_OK(rc = baton_lock_open(&l, g_c, "fz", &o));
    if (!rc) {
        RC_OK(rc = baton_lock_acquire(l, 0));
        if (!rc) {
            f = baton_lock_fence(l);
            EXPECT(f > 0 && baton_lock_held(l));
            /* above an intact counter; except at UINT64_MAX, which has no
             * next: the engine restarts from the clock floor, as for a lost
             * counter (next_fence), by design */
            if (before && before < UINT64_MAX && f <= before) {
                fprintf(stderr, "fuzz_file: fence %" PRIu64 " granted after the record's %" PRIu64 "\n", f, before);
                abort();
            }
            RC_OK(baton_lock_release(l));
        }
        baton_lock_free(l);
    }
    RC_OK(rc = baton_rwlock_open(&rw, g_c, "fz", &o));
    if (!rc) {
        if (!(rc = baton_lock_acquire(baton_rwlock_write(rw), 0))) {
            EXPECT(baton_lock_fence(baton_rwlock_write(rw)) > 0);
            RC_OK(baton_lock_release(baton_rwlock_write(rw)));
        }
        RC_OK(rc);
        if (!(rc = baton_lock_acquire(baton_rwlock_read(rw), 0))) RC_OK(baton_lock_release(baton_rwlock_read(rw)));
        RC_OK(rc);
        baton_rwlock_free(rw);
    }
    RC_OK(baton_lock_list(g_c, "", on_name, &n));
    RC_OK(baton_lock_list(g_c, "f", on_name, &n));
    rc = baton_lock_break(g_c, "fz", &f);
    EXPECT(rc != 0);     /* the file engine cannot break a lock */
}

static void sem_calls(void)
{
    baton_semaphore *s = NULL;
    uint64_t v = 0;
    int rc, was = 0;
    RC_OK(rc = baton_semaphore_open(&s, g_c, "fz"));
    if (rc) return;
    RC_OK(baton_semaphore_available(s, &v));
    RC_OK(rc = baton_semaphore_acquire(s, 1, 0));
    if (!rc) RC_OK(baton_semaphore_release(s, 1));
    RC_OK(baton_semaphore_try_set(s, 2, &was));
    RC_OK(baton_semaphore_add(s, 1));
    RC_OK(baton_semaphore_add(s, -1));
    /* the ends of the delta's range: refused or done, never wrapped */
    RC_OK(baton_semaphore_add(s, INT64_MAX));
    RC_OK(baton_semaphore_add(s, INT64_MIN));
    RC_OK(baton_semaphore_drain(s, &v));
    RC_OK(baton_semaphore_available(s, &v));
    baton_semaphore_free(s);
}

static void permit_calls(void)
{
    baton_permits *p = NULL;
    char id[BATON_PERMIT_ID_SIZE];
    uint64_t v = 0;
    int rc, was = 0;
    RC_OK(rc = baton_permits_open(&p, g_c, "fz"));
    if (rc) return;
    RC_OK(baton_permits_available(p, &v));
    RC_OK(rc = baton_permits_acquire(p, 1000, 0, id));
    if (!rc) {
        EXPECT(memchr(id, 0, sizeof id));
        RC_OK(baton_permits_renew(p, id, 1000));
        RC_OK(baton_permits_release(p, id));
    }
    RC_OK(baton_permits_try_set(p, 2, &was));
    RC_OK(rc = baton_permits_acquire(p, 1000, 0, id));
    if (!rc) RC_OK(baton_permits_release(p, id));
    RC_OK(baton_permits_add(p, 1));
    RC_OK(baton_permits_add(p, -1));
    RC_OK(baton_permits_add(p, INT64_MAX));
    RC_OK(baton_permits_add(p, INT64_MIN));
    RC_OK(baton_permits_available(p, &v));
    baton_permits_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const files[] = { "lock.fz", "sem..fz", "perm.fz", "perm.fz+0" };
    baton_lockinfo info = BATON_LOCK_INFO_INIT;
    char path[4200];
    int fd, rc;
    if (size < 1) return 0;
    if ((data[0] & 3) == 2 && big_count(data + 1, size - 1)) return 0;
    if (!g_c) setup();
    empty_dir();
    snprintf(path, sizeof path, "%s/%s", g_dir, files[data[0] & 3]);
    if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 ||
        (size > 1 && write(fd, data + 1, size - 1) != (ssize_t)(size - 1)) || close(fd)) {
        perror(path);
        exit(1);
    }
    RC_OK(rc = baton_lock_info(g_c, "fz", &info));
    if (!rc) EXPECT(memchr(info.holder, 0, sizeof info.holder));
    switch (data[0] & 3) {
    case 0:
        lock_calls(record_fence(data + 1, size - 1));
        break;
    case 1:
        sem_calls();
        break;
    default:
        permit_calls();
        break;
    }
    return 0;
}
