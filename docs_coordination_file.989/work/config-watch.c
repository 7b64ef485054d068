/* recipe: config-watch.c */
#include <baton.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* Applies a new configuration; here: says so. */
static void reload(const baton_value_data *d)
{
    printf("reloaded: %s (version %" PRIu64 ")\n", d->data, d->version);
    fflush(stdout);
}

int main(void)
{
    baton_client *c = NULL;
    baton_value *v = NULL;
    baton_value_data d = { 0 };
    uint64_t known = 0;   /* 0: absent */
    int rc;

    /* the engine of $BATON_URI (NULL: the file engine) */
    if ((rc = baton_client_open(&c, getenv("BATON_URI"), NULL)) ||
        (rc = baton_value_open(&v, c, "app/config")))
        goto out;
    rc = baton_value_get(v, &d);
    if (rc == 0) {
        reload(&d);
        known = d.version;
    } else if (rc != BATON_ENOENT) {
        goto out;
    }
    /* then each change; -1: wait as long as it takes */
    while ((rc = baton_value_watch(v, known, &d, -1)) == 0) {
        if (d.version == 0) break;   /* deleted: this service stops */
        reload(&d);
        known = d.version;
    }
out:
    if (rc) fprintf(stderr, "config-watch: %s\n", baton_strerror(rc));
    baton_value_data_clear(&d);
    baton_value_free(v);
    baton_client_close(c);
    return rc ? 1 : 0;
}
