/* baton bench: worker processes. The multi-process workloads (contended,
 * handoff) re-execute this binary as `baton bench --worker KIND ... DIR I`;
 * the workers share DIR and the block mapped from DIR/shm, and report
 * through DIR/wI: a line "DONE NSAMPLES", then NSAMPLES doubles. procs_close
 * removes DIR with everything in it. */
#include "bench.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

void procs_path(const procs *p, const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", p->dir, name);
}

int procs_open(procs *p, const void *shm_init, size_t shm_size)
{
    char path[64];
    int fd;
    memset(p, 0, sizeof *p);
    snprintf(p->dir, sizeof p->dir, "/tmp/baton-bench.XXXXXX");
    if (!mkdtemp(p->dir)) {
        p->dir[0] = 0;
        return EX_SOFTWARE;
    }
    if (!shm_size) return 0;
    procs_path(p, "shm", path, sizeof path);
    if ((fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) return EX_SOFTWARE;
    if (write(fd, shm_init, shm_size) != (ssize_t)shm_size) {
        close(fd);
        return EX_SOFTWARE;
    }
    p->shm = mmap(NULL, shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p->shm == MAP_FAILED) {
        p->shm = NULL;
        return EX_SOFTWARE;
    }
    p->shm_size = shm_size;
    return 0;
}

int procs_start(procs *p, const bench_opts *o, const char *kind, int n)
{
    char secs[32], rounds[16], idx[16];
    if (!(p->pids = calloc((size_t)n, sizeof *p->pids))) return EX_SOFTWARE;
    p->n = n;
    snprintf(secs, sizeof secs, "%g", o->seconds);
    snprintf(rounds, sizeof rounds, "%d", o->rounds);
    for (int i = 0; i < n; i++) {
        char *av[16];
        int k = 0;
        av[k++] = "baton";
        av[k++] = "bench";
        av[k++] = "--worker";
        av[k++] = (char *)kind;
        av[k++] = "-u";
        av[k++] = (char *)(o->uri ? o->uri : "");
        av[k++] = "--seconds";
        av[k++] = secs;
        if (o->rounds > 0) {
            av[k++] = "--rounds";
            av[k++] = rounds;
        }
        if (o->fair) av[k++] = "--fair";
        av[k++] = p->dir;
        snprintf(idx, sizeof idx, "%d", i);
        av[k++] = idx;
        av[k] = NULL;
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            execv("/proc/self/exe", av);
            _exit(127);
        }
        if (pid < 0) {
            fprintf(stderr, "baton bench: fork: %s\n", strerror(errno));
            /* the others may be waiting for it: none of them counts now */
            for (int j = 0; j < p->started; j++) kill(p->pids[j], SIGKILL);
            for (int j = 0; j < p->started; j++) waitpid(p->pids[j], NULL, 0);
            p->started = 0;
            return EX_SOFTWARE;
        }
        p->pids[p->started++] = pid;
    }
    return 0;
}

int procs_wait(procs *p, procs_result *r)
{
    int rc = 0;
    memset(r, 0, sizeof *r);
    r->min = -1;
    for (int i = 0; i < p->started; i++) {
        char path[64], name[16];
        long done;
        size_t ns;
        double *all;
        int st = 0;
        FILE *f = NULL;
        waitpid(p->pids[i], &st, 0);
        snprintf(name, sizeof name, "w%d", i);
        procs_path(p, name, path, sizeof path);
        if (!WIFEXITED(st) || WEXITSTATUS(st) || !(f = fopen(path, "r")) || fscanf(f, "%ld %zu\n", &done, &ns) != 2) {
            fprintf(stderr, "baton bench: worker %d failed\n", i);
            if (f) fclose(f);
            unlink(path);
            /* the worker's own code: 69 for an unreachable engine, 64 for a bad URI */
            if (!rc) rc = WIFEXITED(st) && WEXITSTATUS(st) ? WEXITSTATUS(st) : EX_SOFTWARE;
            continue;
        }
        if ((all = realloc(r->samples, (r->nsamples + ns + 1) * sizeof *all))) {
            r->samples = all;
            if (fread(all + r->nsamples, sizeof *all, ns, f) == ns) r->nsamples += ns;
        }
        fclose(f);
        unlink(path);
        r->total += done;
        if (r->min < 0 || done < r->min) r->min = done;
        if (done > r->max) r->max = done;
    }
    if (r->min < 0) r->min = 0;
    return rc;
}

void procs_close(procs *p)
{
    DIR *d;
    if (p->shm) munmap(p->shm, p->shm_size);
    if (p->dir[0] && (d = opendir(p->dir))) {
        /* the shared block, what the workload put there, what a failed worker left */
        for (struct dirent *e; (e = readdir(d));) {
            char path[320];
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            procs_path(p, e->d_name, path, sizeof path);
            unlink(path);
        }
        closedir(d);
        rmdir(p->dir);
    }
    free(p->pids);
    memset(p, 0, sizeof *p);
}

void *procs_worker_shm(const char *dir, size_t size)
{
    char path[64];
    void *s;
    int fd;
    snprintf(path, sizeof path, "%s/shm", dir);
    if ((fd = open(path, O_RDWR | O_CLOEXEC)) < 0) return NULL;
    s = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return s == MAP_FAILED ? NULL : s;
}

void procs_worker_unmap(void *shm, size_t size)
{
    if (shm) munmap(shm, size);
}

int procs_report(const char *dir, int idx, long done, const double *samples, size_t n)
{
    char path[64];
    FILE *f;
    snprintf(path, sizeof path, "%s/w%d", dir, idx);
    if (!(f = fopen(path, "w"))) return EX_SOFTWARE;
    fprintf(f, "%ld %zu\n", done, n);
    fwrite(samples, sizeof *samples, n, f);
    return fclose(f) ? EX_SOFTWARE : 0;
}
