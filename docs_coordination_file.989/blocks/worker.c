/* recipe: worker.c */
#include <baton.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The work; here photo-2.jpg fails the first time. 0 when done. */
static int make_thumbnail(const char *photo)
{
    static int failed_once;
    if (!strcmp(photo, "photo-2.jpg") && !failed_once) {
        failed_once = 1;
        return -1;
    }
    return 0;
}

int main(void)
{
    baton_client *c = NULL;
    baton_queue *q = NULL;
    baton_queue_item *it;
    int rc;

    if ((rc = baton_client_open(&c, getenv("BATON_URI"), NULL)) ||
        (rc = baton_queue_open(&q, c, "thumbnails", NULL)))
        goto out;
    /* until the queue is empty: wait_ms 0 (a long-running worker waits: -1) */
    while ((rc = baton_queue_take(q, &it, 0)) == 0) {
        const char *photo = baton_queue_item_data(it, NULL);
        if (make_thumbnail(photo) == 0) {
            printf("done: %s\n", photo);
            rc = baton_queue_done(it);     /* removed for good; frees it */
        } else {
            printf("failed: %s\n", photo);
            rc = baton_queue_return(it);   /* back to the queue; frees it */
        }
        if (rc) goto out;
    }
    if (rc == BATON_ENOENT) rc = 0;        /* empty */
out:
    if (rc) fprintf(stderr, "worker: %s\n", baton_strerror(rc));
    baton_queue_free(q);
    baton_client_close(c);
    return rc ? 1 : 0;
}
