/* recipe: registry.c */
#include <baton.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static atomic_int lost;

/* From the library's thread: only note it; the server stops serving. */
static void on_lost(baton_group *g, void *payload)
{
    (void)g;
    (void)payload;
    atomic_store(&lost, 1);
}

int main(int argc, char **argv)
{
    baton_group_options o = BATON_GROUP_OPTIONS_INIT;
    baton_client *c = NULL;
    baton_group *g = NULL;
    baton_members m = { 0 };
    int rc;

    if (argc != 3) {
        fprintf(stderr, "usage: registry ID ADDRESS\n");
        return 64;
    }
    o.on_lost = on_lost;
    if ((rc = baton_client_open(&c, getenv("BATON_URI"), NULL)) ||
        (rc = baton_group_open(&g, c, "web", &o)) ||
        (rc = baton_group_join(g, argv[1], argv[2])) ||
        (rc = baton_group_members(g, &m)))
        goto out;
    for (size_t i = 0; i < m.n; i++) printf("%s %s\n", m.members[i].id, m.members[i].value);
    /* ... serve while !atomic_load(&lost) ... then leave */
    rc = baton_group_leave(g);
out:
    if (rc) fprintf(stderr, "registry: %s\n", baton_strerror(rc));
    baton_members_clear(&m);
    baton_group_free(g);
    baton_client_close(c);
    return rc ? 1 : 0;
}
