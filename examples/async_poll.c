/* Acquires N locks asynchronously on one poll(2) loop thread, then releases
 * them: include/baton/adapters/poll.h. Usage: async_poll [URI] [N]
 * (default file:// and 100). Exits 0 when every lock was granted and
 * released, each grant with a fence. */
#include <baton.h>
#include <baton/adapters/poll.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    int granted, released, failed, n;
    volatile int stop;
} state;

static void on_released(baton_lock *l, int rc, void *arg)
{
    state *s = arg;
    if (rc) { fprintf(stderr, "release %s: %s\n", baton_lock_name(l), baton_strerror(rc)); s->failed++; }
    if (++s->released == s->n) s->stop = 1;
}

static void on_granted(baton_lock *l, int rc, void *arg)
{
    state *s = arg;
    if (rc || baton_lock_fence(l) == 0) {
        fprintf(stderr, "acquire %s: %s\n", baton_lock_name(l), baton_strerror(rc));
        s->failed++;
        s->stop = 1;
        return;
    }
    /* all held at once: the loop returns and main releases them */
    if (++s->granted == s->n) s->stop = 1;
}

int main(int argc, char **argv)
{
    const char *uri = argc > 1 ? argv[1] : "file://";
    int n = argc > 2 ? atoi(argv[2]) : 100, rc = 1;
    baton_client *c = NULL;
    baton_lock **locks;
    state s = { 0, 0, 0, n, 0 };

    if (n <= 0 || !(locks = calloc((size_t)n, sizeof *locks))) return 2;
    if (baton_client_open(&c, uri, NULL)) {
        fprintf(stderr, "open %s: %s\n", uri, baton_error_last()->message);
        free(locks);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "example-async-poll-%d", i);
        if (baton_lock_open(&locks[i], c, name, NULL) ||
            baton_lock_acquire_async(locks[i], 10000, on_granted, &s)) {
            fprintf(stderr, "start %s: %s\n", name, baton_error_last()->message);
            goto out;
        }
    }
    if (baton_poll_run(c, &s.stop, 60000) || s.failed || s.granted != n) goto out;
    s.stop = 0;
    for (int i = 0; i < n; i++)
        if (baton_lock_release_async(locks[i], on_released, &s)) goto out;
    if (baton_poll_run(c, &s.stop, 60000) || s.failed || s.released != n) goto out;
    printf("async_poll: %d locks acquired and released on one poll loop\n", n);
    rc = 0;
out:
    for (int i = 0; i < n; i++) baton_lock_free(locks[i]);
    baton_client_close(c);
    free(locks);
    return rc;
}
