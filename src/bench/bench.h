/*
 * baton bench: the peers' workloads (../shared/peers) on baton, one JSON line
 * (or a table) per result, with the peers' field names so runs compare side
 * by side. A client of the public API, plus baton__client_engine_ops for the
 * engine's own operation counts.
 *
 *   bench.c      the command: options, the workload table, output, exit codes
 *   workloads.c  uncontended, contended, handoff, many
 *   herd.c       herd: W waiters on one lock (latency and engine operations per handoff)
 *   memory.c     memory: client heap per held and per waiting lock
 *   ratelimit.c  ratelimit: C clients on one rate limiter (admitted vs the rate, requests per admission)
 *   procs.c      worker processes: the multi-process workloads re-execute this binary
 *   stats.c      CPU/heap/RSS, the engine's operation counts (clocks and
 *                percentiles: src/tool)
 *   svg.c        --svg: the latency CDF of a run
 *   progress.c   the progress line on a terminal
 */
#ifndef BATON_BENCH_H
#define BATON_BENCH_H

#include "tool/tool.h"   /* options, exit codes, clocks, percentiles: shared with the CLI and check */

#include <baton.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <pthread.h>
#include <time.h>

#define HERD_MAX_WAITERS 4096
#define MEM_MAX_WAITING 256          /* waiting locks need a thread each */
#define MEM_STACK_BYTES (512 * 1024) /* the waiting threads' stacks (mmap'd, not heap) */

typedef struct {
    const char *uri;
    const char *workload;
    int clients, n, rounds, waiters, fair, json;  /* 0 = not given: the workload's default */
    int async, locks;     /* many --async [--locks N] */
    int lease_ms;         /* --lease (memory-async); 0 = the lock default */
    int shared_client;    /* herd: the W waiters share one client (threads on it), not one each */
    double seconds;
    FILE *svg;            /* --svg, opened (so known writable) before the run */
    char scheme[16];      /* the URI's scheme alone: safe to print, never a password */
} bench_opts;

/* ---- bench.c ---- */

int baton__cli_bench(int argc, char **argv);
/* A client on O's URI and a lock NAME on it (fair as asked); the message on stderr. */
int bench_open_lock(const bench_opts *o, const char *name, baton_client **c, baton_lock **l);
/* One result: JSON is the whole line; a table of its fields without --json. */
void bench_emit(const bench_opts *o, const char *json);
/* Many clients or parked locks hold a few descriptors each. */
void bench_raise_nofile(void);

/* ---- the workloads: an exit code each (0 = ran and checked out) ---- */

int w_uncontended(bench_opts *o);
int w_contended(bench_opts *o);
int w_handoff(bench_opts *o);
int w_herd(bench_opts *o);
int w_many(bench_opts *o);
int w_many_async(bench_opts *o);  /* many_async.c */
int w_memory(bench_opts *o);
int w_memory_async(bench_opts *o);   /* memory.c */
int w_ratelimit(bench_opts *o);   /* ratelimit.c */
/* The worker side of the multi-process ones (`--worker KIND DIR INDEX`). */
int worker_contended(const bench_opts *o, const char *dir, int idx);
int worker_handoff(const bench_opts *o, const char *dir, int idx);

/* ---- stats.c ---- */

static inline double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void cpu_times(double *user, double *sys);
/* Bytes the allocator has handed out and not taken back; -1 where it cannot say. */
long long heap_bytes(void);
/* 0 when another allocator (ASan's, a preloaded one) leaves those counters still. */
int heap_measurable(void);
long long rss_bytes(void);

/* The engine's operation counts (baton__client_engine_ops): one entry per
 * kind, as the engine names them ("evalsha"; Redis's INFO commandstats). */
typedef struct {
    char name[64];
    long long calls;
} opstat;

typedef struct {
    opstat *v;
    size_t n;
} opstats;

/* Reads C's engine's counts into OUT (replacing what it held): 0, or
 * BATON_ENOTSUP when the engine keeps none, or another code; ERR says why. */
int opstats_read(baton_client *c, opstats *out, char *err, size_t en);
void opstats_free(opstats *s);
/* 1 when A and B agree on every counted operation (counts only grow, so B's
 * list covers A's). */
int opstats_same(const opstats *a, const opstats *b);
/* Adds AFTER - BEFORE, operation by operation, to ACC. -1 when out of memory. */
int opstats_accum(opstats *acc, const opstats *before, const opstats *after);
/* The JSON fields of the operations in ACC (deltas) over COUNT events:
 * "commands_per_PER" (every counted operation, including the ones the lock
 * scripts run inside the server), "requests_per_PER" (the ones clients send
 * themselves), PINGS (raw keepalive PINGs, a count; NULL: no field) and TOP
 * (the eight most frequent, per event). Nulls when ACC is NULL. */
void opstats_fields(char *out, size_t n, const opstats *acc, long count, const char *per, const char *pings,
                    const char *top);

/* ---- svg.c ---- */

/* V: latencies in seconds, sorted. Writes and closes o->svg (if any); 0 or 70. */
int svg_cdf(bench_opts *o, const char *what, const double *v, size_t n);

/* ---- progress.c: one line on a terminal, and only for runs over a second ---- */

typedef struct {
    const char *label, *unit;
    double started, t0, seconds;  /* seconds > 0: a timed run from t0 */
    long target;                  /* otherwise: COUNT() out of TARGET */
    long (*count)(void *);
    void *ctx;
    int on, width, stop;          /* stop under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;            /* CLOCK_MONOTONIC */
    pthread_t th;
} progress;

/* Nothing at all when stderr is not a terminal (logs, pipes, bench/run.py). */
void progress_start(progress *pr, const char *label, const char *unit, double t0, double seconds, long target,
                    long (*count)(void *), void *ctx);
void progress_stop(progress *pr);
/* A count for progress_start: the long at P, read atomically. */
long count_long(void *p);

/* ---- procs.c: worker processes ----
 *
 * A multi-process workload runs N copies of this binary as
 * `baton bench --worker KIND -u URI --seconds S --rounds R [--fair] DIR I`,
 * sharing DIR (a fresh temp dir) and, mapped from DIR/shm, a block the
 * workload lays out. Worker I ends by writing its count and its samples to
 * DIR/wI (procs_report), read back by procs_wait. */

typedef struct {
    char dir[32];
    void *shm;            /* DIR/shm, mapped shared; NULL when the workload has none */
    size_t shm_size;
    pid_t *pids;
    int n, started;
} procs;

typedef struct {
    long total, min, max;  /* the workers' counts */
    double *samples;       /* all workers' samples, unsorted */
    size_t nsamples;
} procs_result;

/* A temp dir, and DIR/shm holding SHM_SIZE bytes from SHM_INIT (none if 0). 0 or 70. */
int procs_open(procs *p, const void *shm_init, size_t shm_size);
/* DIR/NAME into BUF. */
void procs_path(const procs *p, const char *name, char *buf, size_t n);
/* Starts N workers of KIND (exec of /proc/self/exe). 0, or 70 when one could
 * not be started (the started ones are stopped and reaped). */
int procs_start(procs *p, const bench_opts *o, const char *kind, int n);
/* Waits for every started worker and gathers what they wrote: 0, or the
 * first failed worker's own exit code (69 for an unreachable engine, 64 for
 * a bad URI; 70 when it died or wrote nothing readable). */
int procs_wait(procs *p, procs_result *r);
/* Unmaps, removes DIR and what is in it, frees. */
void procs_close(procs *p);

/* Worker side: DIR/shm mapped (SIZE bytes), NULL when it cannot be. */
void *procs_worker_shm(const char *dir, size_t size);
void procs_worker_unmap(void *shm, size_t size);
/* Worker side: DIR/wIDX := DONE and N samples. 0 or 70. */
int procs_report(const char *dir, int idx, long done, const double *samples, size_t n);

#endif
