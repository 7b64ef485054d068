/*
 * The file engine's read-write lock: the gate and data bytes of one lock
 * file (see the byte ranges in file_int.h), and a write side's downgrade.
 */
#include "file_int.h"

int file__rwlock_new(void *eng, const char *name, const baton_lock_options *o, void **rd, void **wr)
{
    file_lock *r = NULL, *w = NULL;
    file_rw *rw = calloc(1, sizeof *rw);
    if (!rw || file__lock_new(eng, name, o, (void **)&r) || file__lock_new(eng, name, o, (void **)&w)) {
        if (r) file__lock_free(eng, r);
        if (w) file__lock_free(eng, w);
        free(rw);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    pthread_mutex_init(&rw->mu, NULL);
    rw->wr_fd = rw->wr_gfd = -1;
    rw->rd = r;
    rw->refs = 2;
    r->kind = K_READ;
    w->kind = K_WRITE;
    r->rw = w->rw = rw;
    *rd = r;
    *wr = w;
    return 0;
}

/* The write side: the gate first (new readers now queue behind us), then the
 * data byte once the readers inside have left. */
int file__rw_acquire_write(file_engine *e, file_lock *fl, baton_acquire_req *req)
{
    int fd, rc;
    for (int tries = 0;; tries++) {
        if (tries == RELINK_TRIES) return file__replaced_err(e, fl->fname);
        if ((fd = file__open_lock_file(e, fl->fname)) < 0) return fd;
        req->sent_ns = baton_now_ns();
        if ((rc = file__take_range(fd, F_WRLCK, GATE, req, fl->fname))) return rc;
        if ((rc = file__take_range(fd, F_WRLCK, DATA, req, fl->fname))) return rc;   /* closing fd drops the gate */
        if (file__still_linked(fd)) break;
        close(fd);
    }
    if ((rc = file__bump_fence(fd, req->owner->desc, &req->fence))) { close(fd); return rc; }
    fl->fd = fd;
    pthread_mutex_lock(&fl->rw->mu);
    fl->rw->wr_fd = fd;
    pthread_mutex_unlock(&fl->rw->mu);
    return 0;
}

/* The read side: pass the gate (waiting behind any writer), share the data
 * byte, leave the gate. */
int file__rw_acquire_read(file_engine *e, file_lock *fl, baton_acquire_req *req)
{
    int fd, rc;
    pthread_mutex_lock(&fl->rw->mu);
    if (fl->rw->wr_fd >= 0) {
        /* Downgrade: the write side's own data lock turns shared in place.
         * The gate stays ours, so no other reader can enter before a failed
         * fence write turns it back. */
        int wfd = fl->rw->wr_fd;
        if (file__setlk_range(wfd, F_OFD_SETLK, F_RDLCK, DATA) < 0) {
            rc = baton_seterr(BATON_EIO, errno, "downgrade: %s", strerror(errno));
        } else if ((rc = file__bump_fence(wfd, req->owner->desc, &req->fence))) {
            file__setlk_range(wfd, F_OFD_SETLK, F_WRLCK, DATA);
        } else {
            fl->rw->rd_borrows = 1;
            req->sent_ns = baton_now_ns();
        }
        pthread_mutex_unlock(&fl->rw->mu);
        return rc;
    }
    pthread_mutex_unlock(&fl->rw->mu);
    for (int tries = 0;; tries++) {
        if (tries == RELINK_TRIES) return file__replaced_err(e, fl->fname);
        if ((fd = file__open_lock_file(e, fl->fname)) < 0) return fd;
        req->sent_ns = baton_now_ns();
        if ((rc = file__take_range(fd, F_RDLCK, GATE, req, fl->fname))) return rc;
        if ((rc = file__take_range(fd, F_RDLCK, DATA, req, fl->fname))) return rc;
        if (file__still_linked(fd)) break;
        close(fd);
    }
    file__setlk_range(fd, F_OFD_SETLK, F_UNLCK, GATE);
    /* Every grant gets a new fence, readers too; readers bump it one at a
     * time. A reader that cannot serialize its bump must not race another. */
    while ((rc = file__setlk_range(fd, F_OFD_SETLKW, F_WRLCK, COUNTER)) < 0 && errno == EINTR) {}
    if (rc < 0) {
        rc = baton_seterr(BATON_EIO, errno, "lock file %s: fence lock: %s", fl->fname, strerror(errno));
        close(fd);
        return rc;
    }
    rc = file__bump_fence(fd, req->owner->desc, &req->fence);
    file__setlk_range(fd, F_OFD_SETLK, F_UNLCK, COUNTER);
    if (rc) { close(fd); return rc; }
    fl->fd = fd;
    return 0;
}

int file__rw_release(file_lock *fl)
{
    file_rw *rw = fl->rw;
    pthread_mutex_lock(&rw->mu);
    if (fl->kind == K_WRITE) {
        file__mark_released(fl->fd);
        if (rw->rd_borrows && rw->rd) {
            /* Finish a downgrade: the read side keeps the fd and its shared data lock. */
            file__setlk_range(fl->fd, F_OFD_SETLK, F_UNLCK, GATE);
            rw->rd->fd = fl->fd;
            rw->rd_borrows = 0;
        } else {
            file__setlk(fl->fd, F_OFD_SETLK, F_UNLCK);
            close(fl->fd);
        }
        rw->wr_fd = -1;
        fl->fd = -1;
    } else if (rw->rd_borrows) {
        /* The read side leaves first: the writer's data lock is exclusive again.
         * Nobody else can hold it meanwhile: the gate is still ours. */
        file__setlk_range(rw->wr_fd, F_OFD_SETLK, F_WRLCK, DATA);
        rw->rd_borrows = 0;
    } else {
        file__setlk(fl->fd, F_OFD_SETLK, F_UNLCK);
        close(fl->fd);
        fl->fd = -1;
    }
    pthread_mutex_unlock(&rw->mu);
    return 0;
}
