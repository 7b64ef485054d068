/* Acquires N locks asynchronously on one libuv loop, then releases them:
 * include/baton/adapters/libuv.h. Usage: async_libuv [URI] [N] (default
 * file:// and 100). Exits 0 when every lock was granted (with a fence) and
 * released. */
#include <baton.h>
#include <uv.h>
#include <baton/adapters/libuv.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    baton_uv uv;
    baton_lock **locks;
    int granted, released, failed, n;
} state;

static void on_released(baton_lock *l, int rc, void *arg)
{
    state *s = arg;
    if (rc) { fprintf(stderr, "release %s: %s\n", baton_lock_name(l), baton_strerror(rc)); s->failed++; }
    if (++s->released == s->n) baton_uv_detach(&s->uv, NULL);   /* the loop ends: nothing left to watch */
}

static void on_granted(baton_lock *l, int rc, void *arg)
{
    state *s = arg;
    if (rc || baton_lock_fence(l) == 0) {
        fprintf(stderr, "acquire %s: %s\n", baton_lock_name(l), baton_strerror(rc));
        s->failed++;
        baton_uv_detach(&s->uv, NULL);
        return;
    }
    if (++s->granted < s->n) return;
    /* all held at once: release them all, from inside the callback */
    for (int i = 0; i < s->n; i++)
        if (baton_lock_release_async(s->locks[i], on_released, s)) {
            s->failed++;
            s->released++;
        }
}

int main(int argc, char **argv)
{
    const char *uri = argc > 1 ? argv[1] : "file://";
    int n = argc > 2 ? atoi(argv[2]) : 100, rc = 1;
    uv_loop_t *loop = uv_default_loop();
    baton_client *c = NULL;
    state s = { 0 };

    s.n = n;
    if (n <= 0 || !(s.locks = calloc((size_t)n, sizeof *s.locks))) return 2;
    if (baton_client_open(&c, uri, NULL)) {
        fprintf(stderr, "open %s: %s\n", uri, baton_error_last()->message);
        free(s.locks);
        return 1;
    }
    if (baton_uv_attach(&s.uv, loop, c)) goto out;
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "example-async-libuv-%d", i);
        if (baton_lock_open(&s.locks[i], c, name, NULL) ||
            baton_lock_acquire_async(s.locks[i], 10000, on_granted, &s)) {
            fprintf(stderr, "start %s: %s\n", name, baton_error_last()->message);
            baton_uv_detach(&s.uv, NULL);
            uv_run(loop, UV_RUN_DEFAULT);
            goto out;
        }
    }
    uv_run(loop, UV_RUN_DEFAULT);
    if (s.failed || s.granted != n || s.released != n) goto out;
    printf("async_libuv: %d locks acquired and released on one libuv loop\n", n);
    rc = 0;
out:
    for (int i = 0; i < n; i++) baton_lock_free(s.locks[i]);
    baton_client_close(c);
    uv_loop_close(loop);
    free(s.locks);
    return rc;
}
