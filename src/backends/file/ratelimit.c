/* ---- rate limiters ------------------------------------------------------------
 * A limiter KEY is the file "ratelimits/r.<escaped key>" (keys escaped as
 * lock names are): one fixed-width text record with its configuration and
 * its GCRA theoretical arrival time in µs of the wall clock
 * (CLOCK_REALTIME: every process of the machine reads the same one, and it
 * survives a reboot with the file). Each decision is one read-modify-write
 * of the record under an exclusive OFD lock of the file itself
 * (file__lock_short: held for microseconds; one held for 5 s is a stopped
 * process's and the call answers BATON_EUNAVAILABLE), rewritten in place
 * (pwrite of one record), never replaced. A process killed at any point
 * leaves the record as it was or as it wrote it: the kernel drops its lock.
 *
 * The clock is the local wall clock: a step back makes the limiter wait
 * longer (never admit more); a step forward by D frees up to min(D, burst)
 * admissions early. docs/ratelimit.md. */
#include "file_int.h"

#define RL_FMT "baton-rate 1\npermits %010" PRIu32 "\ninterval %010" PRIu32 "\nburst %010" PRIu32 "\ntat %020" PRId64 "\n"
#define RL_LEN 94    /* strlen of RL_FMT printed */

typedef struct {
    char fname[210];
} file_rate;

static int rate_new(void *eng, const char *key, void **st)
{
    file_rate *fr = calloc(1, sizeof *fr);
    char esc[200];
    (void)eng;
    if (!fr) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    file__esc_name(key, esc, sizeof esc);
    snprintf(fr->fname, sizeof fr->fname, "r.%s", esc);
    *st = fr;
    return 0;
}

static void rate_free(void *eng, void *st)
{
    (void)eng;
    free(st);
}

static int64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The record on fd: 1 with it, 0 when the file is empty (never written),
 * or an error for one that does not read. */
static int rec_read(file_engine *e, int fd, const file_rate *fr, baton_rate_cfg *cfg, int64_t *tat)
{
    char buf[RL_LEN + 1];
    long long t;
    ssize_t n = pread(fd, buf, RL_LEN, 0);
    if (n == 0) return 0;
    if (n < 0) return baton_seterr(BATON_EIO, errno, "rate limiter file %s: read: %s", fr->fname, strerror(errno));
    buf[n] = 0;
    if (n != RL_LEN || sscanf(buf, "baton-rate 1\npermits %" SCNu32 "\ninterval %" SCNu32 "\nburst %" SCNu32 "\ntat %lld",
                              &cfg->permits, &cfg->interval_ms, &cfg->burst, &t) != 4 ||
        !cfg->permits || !cfg->interval_ms || !cfg->burst)
        return baton_seterr(BATON_EPROTO, 0, "rate limiter file %s/ratelimits/%s does not read (a power loss?); "
                            "remove it to start the limiter afresh", e->dir, fr->fname);
    *tat = t;
    return 1;
}

static int rec_write(int fd, const file_rate *fr, const baton_rate_cfg *cfg, int64_t tat)
{
    char buf[RL_LEN + 1];
    ssize_t w;
    if (snprintf(buf, sizeof buf, RL_FMT, cfg->permits, cfg->interval_ms, cfg->burst, tat) != RL_LEN)
        return baton_seterr(BATON_EIO, 0, "rate limiter file %s: cannot format the record", fr->fname);
    w = pwrite(fd, buf, RL_LEN, 0);
    if (w != RL_LEN)
        return baton_seterr(BATON_EIO, w < 0 ? errno : ENOSPC, "rate limiter file %s: write: %s", fr->fname,
                            strerror(w < 0 ? errno : ENOSPC));
    return 0;
}

/* Opens (CREATE: making it) and locks the limiter's file: 0 with *fd, or 0
 * with -1 when absent and not CREATE. */
static int rec_open(file_engine *e, file_rate *fr, int create, int *fd)
{
    int dfd, rc;
    *fd = -1;
    if ((rc = file__subdir(e, "ratelimits", create, &dfd))) return rc;
    if (dfd < 0) return 0;
    rc = file__sub_open(e, dfd, fr->fname, create ? O_RDWR | O_CREAT : O_RDWR, "rate limiter file", fd);
    close(dfd);
    if (rc || *fd < 0) return rc;
    if ((rc = file__lock_short(e, *fd, "rate limiter file"))) {
        close(*fd);
        *fd = -1;
    }
    return rc;
}

static int rate_take(void *eng, void *st, const baton_rate_cfg *cfg, int replace, uint32_t n, int64_t reserve_us,
                     int64_t *wait_us, baton_rate_cfg *stored)
{
    file_rate *fr = st;
    int64_t tat = 0, tat0;
    int fd, rc, have;
    *wait_us = 0;
    if ((rc = rec_open(eng, fr, 1, &fd))) return rc;
    if ((have = rec_read(eng, fd, fr, stored, &tat)) < 0) {
        rc = have;
        goto out;
    }
    tat0 = tat;
    if (have && (stored->permits != cfg->permits || stored->interval_ms != cfg->interval_ms ||
                 stored->burst != cfg->burst) && !replace) {
        rc = baton_seterr(BATON_ECONFLICT, 0, "rate limiter file %s is configured otherwise", fr->fname);
        goto out;
    }
    *stored = *cfg;
    if (n) *wait_us = baton_gcra_step(cfg, wall_us(), &tat, n, reserve_us);
    if (have != 1 || tat != tat0 || replace) rc = rec_write(fd, fr, cfg, tat);
out:
    close(fd);   /* also unlocks */
    return rc;
}

static int rate_inspect(void *eng, void *st, baton_rate_cfg *stored, int64_t *ahead_us)
{
    file_rate *fr = st;
    int64_t tat = 0, now;
    int fd, rc;
    if ((rc = rec_open(eng, fr, 0, &fd))) return rc;
    if (fd < 0) return baton_seterr(BATON_ENOENT, 0, "no rate limiter");
    rc = rec_read(eng, fd, fr, stored, &tat);
    close(fd);
    if (rc < 0) return rc;
    if (rc == 0) return baton_seterr(BATON_ENOENT, 0, "no rate limiter");
    now = wall_us();
    *ahead_us = tat > now ? tat - now : 0;
    return 0;
}

const baton_ratelimit_methods baton__ratelimit_file = {
    .create = rate_new,
    .destroy = rate_free,
    .take = rate_take,
    .inspect = rate_inspect,
};
