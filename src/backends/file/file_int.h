/*
 * The file engine's shared state and the functions its parts share: file.c
 * (the lock directory, open/close, identity, the backend table), lock.c,
 * wait.c, rw.c, path.c (names that are absolute paths), fair.c (the line
 * of fair waiters), sem.c, permits.c and admin.c (list, break). See file.c for the design.
 */
#ifndef BATON_FILE_INT_H
#define BATON_FILE_INT_H
#include "core/internal.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <limits.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The record at the start of every lock file; fixed width so it is rewritten in place. */
#define REC_SIZE 256
#define REC_FMT "baton-lock 1\nfence %020" PRIu64 "\nheld %d\nholder %-200.200s\n"

/* One waiter on a semaphore file, woken by the inotify watcher. */
typedef struct watch_reg {
    int wd;
    char name[256];      /* wake only for events on this entry of a watched folder; "" = any */
    baton_waiter *w;
    struct watch_reg *next;
} watch_reg;

typedef struct {
    int dirfd;
    char dir[4096];
    int shared;          /* ?shared=group: a directory shared with a group on purpose */
    mode_t fmode;        /* files we create: 0600, or 0660 in a group-shared dir */
    /* The inotify watcher: started by the first semaphore wait. */
    pthread_mutex_t wmu;
    int ino_fd, stop_pipe[2];
    pthread_t wth;
    int wth_started;
    watch_reg *regs;
    /* The async waiter (async.c): one thread for every async acquire of
     * this client, started by the first. */
    pthread_mutex_t amu;
    struct file_aop *aops;       /* waiting async acquires; guarded by amu */
    baton_waiter aw;             /* woken by inotify, a new op, a cancel, the close */
    watch_reg areg;
    pthread_t ath;
    int ath_started, astop;
} file_engine;

enum { K_PLAIN, K_READ, K_WRITE, K_MEMBER, K_TAKER };

struct file_lock;

/* What the two sides of a read-write lock share. */
typedef struct {
    pthread_mutex_t mu;
    int wr_fd;                 /* the write side's fd while it is held, else -1 */
    int wr_gfd;                /* path locks: the write side's fence file (gate held), else -1 */
    int rd_borrows;            /* the read side rides on wr_fd (a downgrade) */
    struct file_lock *rd;
    int refs;
} file_rw;

typedef struct file_lock {
    int fd;          /* open and locked while held, else -1 */
    int kind;
    file_rw *rw;
    char *path;      /* a name that is an absolute path: that very file, locked with flock(2); else NULL */
    int gfd;         /* path locks: the fence file in the lock dir, kept while the write side holds
                      * (its gate byte holds new readers back), else -1 */
    char *fname;     /* the lock file's name; a plain lock's is malloc'd with the state, exactly as
                      * long as it is (a state per lock: 100,000 of them add up) */
} file_lock;

/* Byte ranges: a plain lock covers the whole file; a read-write lock uses a
 * gate byte (writers hold it while they wait for readers to leave, so new
 * readers queue behind a waiting writer) and a data byte (shared by readers,
 * exclusive for the writer). A plain lock therefore excludes both sides. */
#define WHOLE 0, 0
#define GATE 0, 1
#define DATA 1, 1
#define COUNTER 2, 1   /* serializes fence bumps by concurrent readers */


/* A lock file that is replaced again on every try is someone else's doing;
 * give up after a few with a clear error rather than loop. */
#define RELINK_TRIES 8


/* The helper that blocks in F_OFD_SETLKW (or, for a path lock, flock(2))
 * for one wait, so the kernel queues us and grants the lock the instant it
 * is free. Giving up (deadline or cancel) interrupts the helper with a signal
 * of our own (a real-time signal whose disposition was the default, given a
 * handler that does nothing and no SA_RESTART: both calls then fail with
 * EINTR), joins it, and closes the fd: nothing of an abandoned wait outlives
 * the call. Only the helper thread ever unblocks that signal. */
typedef struct {
    pthread_mutex_t mu;
    baton_waiter *w;
    int fd, done, granted, err, abandon;
    int how;            /* flock(2): LOCK_EX or LOCK_SH; 0: the OFD range below */
    short type;
    off_t start, len;
} file_wait;

/* ---- file.c: the lock directory ---- */
/* What lstat finds at a path we refused to open, in words. */
const char *file__kind_of(const struct stat *st);
int file__dir_open(file_engine *e, const char *fname, int flags, const char *what, int *fdout);
/* The file (inside the lock dir) that lock NAME maps to. */
int baton__file_name(const char *name, char *out, size_t n);

/* ---- lock.c: records, fences, lock files; the plain lock ---- */
int file__setlk_range(int fd, int cmd, short type, off_t start, off_t len);
int file__setlk(int fd, int cmd, short type);
int file__read_rec(int fd, uint64_t *fence, int *held, char *holder, size_t hn);
int file__write_rec(int fd, uint64_t fence, int held, const char *holder);
int file__bump_fence(int fd, const char *desc, uint64_t *fence);
void file__mark_released(int fd);
int file__open_lock_file(file_engine *e, const char *fname);
int file__still_linked(int fd);
int file__replaced_err(file_engine *e, const char *fname);

/* ---- wait.c: waiting in the kernel ---- */
int file__take_lock(int fd, file_wait *fw, baton_acquire_req *req, const char *what);
int file__take_range(int fd, short type, off_t start, off_t len, baton_acquire_req *req, const char *fname);

/* The plain lock's take (lock.c), for the async waiter's tries. */
int file__plain_take(file_engine *e, file_lock *fl, baton_acquire_req *req);
/* The async waiter (async.c): its table, set up at open, stopped at close. */
extern const baton_async_methods file__async_methods;
int file__async_init(file_engine *e);
void file__async_stop(file_engine *e);

/* the inotify watcher (wait.c): wake W on events at PATH (a file, or a
 * folder's entry NAME; NULL = any) */
int file__watch_add(file_engine *e, const char *path, uint32_t mask, const char *name, watch_reg *reg,
                    baton_waiter *w);
void file__watch_remove(file_engine *e, watch_reg *reg);

/* ---- kv.c: the folders of values, groups and queues ---- */
/* Opens (with create: making it, and any folder above it, mode 0700 or
 * 02770 when shared) the folder REL ("values", "groups/<g>") under the lock
 * dir, refusing a link there. 0 with the fd; 0 with -1 when absent and not
 * create; or an error. */
int file__subdir(file_engine *e, const char *rel, int create, int *fdout);
/* The escaped form of NAME (baton__file_name without its "lock." prefix). */
void file__esc_name(const char *name, char *out, size_t n);
/* Takes an exclusive OFD lock on fd, waiting a short bounded time (a
 * holder keeps it for one read-modify-write): a lock held for seconds is a
 * stopped process's, BATON_EUNAVAILABLE naming WHAT. */
int file__lock_short(file_engine *e, int fd, const char *what);
/* Opens FNAME in the folder DFD as file__dir_open does in the lock dir. */
int file__sub_open(file_engine *e, int dfd, const char *fname, int flags, const char *what, int *fdout);
/* 1 when another open file description holds a lock on fd, 0 when not, or an error. */
int file__locked_by_other(int fd);
/* The time-based floor of a counter that lost its file (see lock.c). */
uint64_t file__wall_us(void);
/* Reads the whole file on fd (at most max bytes): malloc'd, NUL-terminated. */
int file__slurp(int fd, size_t max, char **out, size_t *len, const char *what);

/* value.c, group.c, queue.c */
int file__member_join(file_engine *e, file_lock *fl, baton_acquire_req *req);
int file__member_leave(file_lock *fl);
void file__member_free(file_lock *fl);
int file__taker_take(file_engine *e, file_lock *fl, baton_acquire_req *req);
int file__taker_release(file_lock *fl);
void file__taker_free(file_lock *fl);
extern const baton_value_methods file__value_methods;
extern const baton_group_methods file__group_methods;
extern const baton_queue_methods file__queue_methods;

/* ---- rw.c, path.c ---- */
int file__rw_acquire_write(file_engine *e, file_lock *fl, baton_acquire_req *req);
int file__rw_acquire_read(file_engine *e, file_lock *fl, baton_acquire_req *req);
int file__rw_release(file_lock *fl);
int file__path_acquire(file_engine *e, file_lock *fl, baton_acquire_req *req);
int file__path_release(file_lock *fl);
int file__path_info(file_engine *e, const char *path, baton_lockinfo *out);

/* ---- fair.c ---- */
/* A fair (FIFO) acquire: waits in the line of fair/<name>/ until this
 * waiter is its head, then TAKE (the plain lock's acquire). */
int file__fair_acquire(file_engine *e, file_lock *fl, baton_acquire_req *req,
                       int (*take)(file_engine *e, file_lock *fl, baton_acquire_req *req));
/* The number of live waiters in the line of the lock file FNAME ("lock.<escaped>"). */
int file__fair_info(file_engine *e, const char *fname, int64_t *queued);

/* ---- permits.c ---- */
int file__permits_info(file_engine *e, const char *name, int64_t *out);

/* ---- the methods the backend table in file.c names (their names kept so
 * the table is unchanged) ---- */
int file__lock_new(void *eng, const char *name, const baton_lock_options *o, void **st);
void file__lock_free(void *eng, void *st);
int file__acquire(void *eng, void *st, baton_acquire_req *req);
int file__release(void *eng, void *st, const baton_owner *o);
int file__info(void *eng, const char *name, baton_lockinfo *out);
int file__rwlock_new(void *eng, const char *name, const baton_lock_options *o, void **rd, void **wr);
int file__sem_new(void *eng, const char *name, void **st);
void file__sem_free(void *eng, void *st);
int file__sem_acquire(void *eng, void *st, uint32_t permits, int64_t deadline_ns, baton_waiter *w);
int file__sem_release(void *eng, void *st, uint32_t permits);
int file__sem_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out);
int file__permits_new(void *eng, const char *name, void **st);
void file__permits_free(void *eng, void *st);
int file__permits_acquire(void *eng, void *st, uint32_t lease_ms, int64_t deadline_ns, baton_waiter *w,
                         char id[BATON_PERMIT_ID_SIZE]);
int file__permits_release(void *eng, void *st, const char *id);
int file__permits_renew(void *eng, void *st, const char *id, uint32_t lease_ms);
int file__permits_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out);
int file__list(void *eng, const char *prefix, int (*fn)(void *arg, const char *name), void *arg);
int file__break(void *eng, const char *name, uint64_t *fence);

#endif
