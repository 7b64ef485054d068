/* Lock-name mapping on the file backend: any name maps to one safe file
 * inside the lock dir; nothing is created outside it; distinct names never
 * collide; the empty name is refused. */
#include <baton.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness.h"

static char g_root[1024];    /* everything this test touches is under here */
static char g_lockdir[1200]; /* g_root/outer/inner/locks */

static void mkdirs(const char *path, mode_t mode) {
    char buf[1200];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(buf, mode);
            *p = '/';
        }
    mkdir(buf, mode);
}

/* ---- a recursive listing ---- */

#define MAXENT 4096
static char *g_list[MAXENT];
static int g_nlist;

static int collect(const char *path, const struct stat *st, int flag, struct FTW *f) {
    (void)st;
    (void)flag;
    (void)f;
    if (g_nlist < MAXENT) g_list[g_nlist++] = strdup(path);
    return 0;
}

static int cmpstr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef struct {
    char **v;
    int n;
} listing;

static listing list_tree(const char *root) {
    g_nlist = 0;
    nftw(root, collect, 16, FTW_PHYS);
    listing l = { malloc(sizeof(char *) * (size_t)(g_nlist + 1)), g_nlist };
    memcpy(l.v, g_list, sizeof(char *) * (size_t)g_nlist);
    qsort(l.v, (size_t)l.n, sizeof(char *), cmpstr);
    return l;
}

static void free_listing(listing *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

static int inside_lockdir(const char *p) {
    size_t n = strlen(g_lockdir);
    return !strncmp(p, g_lockdir, n) && (p[n] == 0 || p[n] == '/');
}

static int in_listing(const listing *l, const char *p) {
    return bsearch(&p, l->v, (size_t)l->n, sizeof(char *), cmpstr) != NULL;
}

/* Entries outside the lock dir that appeared or vanished. */
static int outside_changes(const listing *before, const listing *after) {
    int bad = 0;
    for (int i = 0; i < after->n; i++)
        if (!inside_lockdir(after->v[i]) && !in_listing(before, after->v[i])) {
            fprintf(stderr, "   created outside the lock dir: %s\n", after->v[i]);
            bad++;
        }
    for (int i = 0; i < before->n; i++)
        if (!inside_lockdir(before->v[i]) && !in_listing(after, before->v[i])) {
            fprintf(stderr, "   removed outside the lock dir: %s\n", before->v[i]);
            bad++;
        }
    return bad;
}

/* ---- names ---- */

static char g_long1[4097], g_long2[4097], g_255[256], g_256[257], g_1000[1001];

static const char *g_names[] = {
    "a/b", "a_b", "a%2Fb", "a%2fb", "a\\b", "a.b", "a", "b", "A", "a.lock", ".a", "..", ".", "...",
    "../x", "../../x", "../../etc/passwd", "../../../../../../../../tmp/baton-escape",
    "a/../b", "b/..", "./a", "a/", "x\x80\xff", "\xff\xfe", "\xc3\xa9t\xc3\xa9",
    "\xe2\x80\xae", "a b", "a\nb", "a\tb", "\x01", "~", "~root", "$HOME", "*", "?", "-", "-rf",
    "lock", "orders/42", "orders:42", "orders|42", "con", "nul", NULL, NULL, NULL, NULL, NULL, NULL,
};

static int g_nnames;

static void build_names(void) {
    memset(g_long1, 'x', 4096);
    memcpy(g_long2, g_long1, 4096);
    g_long1[4095] = 'a';
    g_long2[4095] = 'b';
    memset(g_255, 'n', 255);
    memset(g_256, 'n', 256);
    memset(g_1000, 'm', 1000);
    int i = 0;
    while (g_names[i]) i++;
    g_nnames = i;
}

static baton_client *open_dir_client(const char *dir) {
    char uri[1300];
    snprintf(uri, sizeof uri, "file://%s", dir);
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    if (rc != 0) {
        fprintf(stderr, "FATAL: open(%s) = %d (%s)\n", uri, rc, baton_strerror(rc));
        exit(1);
    }
    return c;
}

/* Long names: either refused with EINVAL (at open or acquire) or usable; if
 * usable, names differing only in their last byte are distinct locks. */
static int try_long(baton_client *c, const char *name, baton_lock **out) {
    *out = NULL;
    int rc = baton_lock_open(out, c, name, NULL);
    if (rc == 0) {
        rc = baton_lock_acquire(*out, 0);
        if (rc != 0) {
            baton_lock_free(*out);
            *out = NULL;
        }
    }
    if (rc != 0 && rc != BATON_EINVAL) {
        th_failed++;
        fprintf(stderr, "FAIL [%s]: a %zu-byte name gave %d (%s), want 0 or EINVAL\n", th_current,
                strlen(name), rc, baton_strerror(rc));
    }
    return rc;
}

static void test_names_stay_inside_and_are_distinct(void) {
    const char *longs[] = { g_255, g_256, g_1000, g_long1, g_long2 };
    const int nlong = 5;
    listing before = list_tree(g_root);
    struct stat pw0, pw1;
    int have_pw = stat("/etc/passwd", &pw0) == 0;

    baton_client *c1 = open_dir_client(g_lockdir), *c2 = open_dir_client(g_lockdir);
    /* every name (the usable long ones too), held at once by c1 */
    const char *all[128];
    baton_lock *held[128];
    int n = 0;
    for (int i = 0; i < g_nnames; i++) {
        baton_lock *l = NULL;
        int rc = baton_lock_open(&l, c1, g_names[i], NULL);
        if (rc == 0) rc = baton_lock_acquire(l, 0);
        if (rc != 0) {
            th_failed++;
            fprintf(stderr, "FAIL [%s]: name #%d (\"%s\") gave %d (%s): %s\n", th_current, i, g_names[i], rc,
                    baton_strerror(rc), baton_error_last()->message ? baton_error_last()->message : "");
            if (l) baton_lock_free(l);
            continue;
        }
        th_passed++;
        all[n] = g_names[i];
        held[n++] = l;
    }
    int long_ok = 0;
    for (int i = 0; i < nlong; i++) {
        baton_lock *l;
        if (try_long(c1, longs[i], &l) == 0) {
            all[n] = longs[i];
            held[n++] = l;
            long_ok++;
        }
    }
    fprintf(stderr, "   %d names held at once (%d of %d long names accepted)\n", n, long_ok, nlong);

    /* each is really held: another client's try fails */
    int not_locked = 0;
    for (int i = 0; i < n; i++) {
        baton_lock *o = NULL;
        if (baton_lock_open(&o, c2, all[i], NULL) == 0) {
            int rc = baton_lock_acquire(o, 0);
            if (rc != BATON_ELOCKED) {
                not_locked++;
                fprintf(stderr, "   name #%d: other client's try = %d, want ELOCKED\n", i, rc);
            }
            baton_lock_free(o);
        }
    }
    CHECK(not_locked == 0);

    /* no collisions: free one name while all others stay held; another
     * client gets exactly that one */
    int collide = 0;
    for (int i = 0; i < n; i++) {
        CHECK_RC(baton_lock_release(held[i]), 0);
        baton_lock *o = NULL;
        if (baton_lock_open(&o, c2, all[i], NULL) == 0) {
            int rc = baton_lock_acquire(o, 0);
            if (rc != 0) {
                collide++;
                fprintf(stderr, "   name #%d (%.40s) collides with a held name: %d (%s)\n", i, all[i], rc,
                        baton_strerror(rc));
            }
            baton_lock_free(o);
        }
        CHECK_RC(baton_lock_acquire(held[i], 0), 0);
    }
    CHECK(collide == 0);

    /* info on a hostile name works and does not escape either */
    baton_lockinfo info;
    memset(&info, 0, sizeof info);
    info.version = BATON_LOCK_INFO_VERSION;
    CHECK_RC(baton_lock_info(c2, "../../etc/passwd", &info), 0);
    CHECK(info.held == 1);
    memset(&info, 0, sizeof info);
    info.version = BATON_LOCK_INFO_VERSION;
    CHECK_RC(baton_lock_info(c2, "../../never/used", &info), 0);
    CHECK(info.held == 0);

    for (int i = 0; i < n; i++) baton_lock_free(held[i]);
    baton_client_close(c1);
    baton_client_close(c2);

    listing after = list_tree(g_root);
    CHECK(outside_changes(&before, &after) == 0);
    /* whatever is in the lock dir resolves to a place inside it */
    char real_lockdir[PATH_MAX];
    CHECK(realpath(g_lockdir, real_lockdir) != NULL);
    int escaped = 0;
    for (int i = 0; i < after.n; i++) {
        if (!inside_lockdir(after.v[i])) continue;
        char rp[PATH_MAX];
        if (realpath(after.v[i], rp) && strncmp(rp, real_lockdir, strlen(real_lockdir)) != 0) {
            escaped++;
            fprintf(stderr, "   %s resolves to %s\n", after.v[i], rp);
        }
    }
    CHECK(escaped == 0);
    if (have_pw) {
        CHECK(stat("/etc/passwd", &pw1) == 0 && pw1.st_size == pw0.st_size && pw1.st_mtime == pw0.st_mtime);
    }
    struct stat st;
    CHECK(stat("/tmp/baton-escape", &st) != 0);
    free_listing(&before);
    free_listing(&after);
}

static void test_empty_name(void) {
    baton_client *c = open_dir_client(g_lockdir);
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(&l, c, "", NULL), BATON_EINVAL);
    CHECK(l == NULL);
    baton_lockinfo info;
    memset(&info, 0, sizeof info);
    info.version = BATON_LOCK_INFO_VERSION;
    CHECK_RC(baton_lock_info(c, "", &info), BATON_EINVAL);
    baton_client_close(c);
}

/* A symlink planted where a lock file lives is not followed. */
static void test_symlink_not_followed(void) {
    char dir[1300], target[1400];
    snprintf(dir, sizeof dir, "%s/symlinkdir", g_root);
    mkdirs(dir, 0700);
    snprintf(target, sizeof target, "%s/target", g_root);
    FILE *f = fopen(target, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("original\n", f);
    fclose(f);

    baton_client *c = open_dir_client(dir);
    listing before = list_tree(dir);
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(&l, c, "victim", NULL), 0);
    if (!l) return;
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    CHECK_RC(baton_lock_release(l), 0);
    listing after = list_tree(dir);
    /* the files "victim" added */
    char *added[8];
    int nadded = 0;
    for (int i = 0; i < after.n; i++) {
        struct stat st;
        if (!in_listing(&before, after.v[i]) && lstat(after.v[i], &st) == 0 && S_ISREG(st.st_mode) && nadded < 8)
            added[nadded++] = after.v[i];
    }
    if (nadded == 0) {
        fprintf(stderr, "   (no per-name lock file found; symlink case skipped)\n");
    } else {
        for (int i = 0; i < nadded; i++) {
            unlink(added[i]);
            CHECK(symlink(target, added[i]) == 0);
        }
        int rc = baton_lock_acquire(l, 0);
        fprintf(stderr, "   acquire through a planted symlink: %d (%s)\n", rc, baton_strerror(rc));
        if (rc == 0) baton_lock_release(l);
        struct stat st;
        char buf[64] = { 0 };
        f = fopen(target, "r");
        if (f) {
            size_t r = fread(buf, 1, sizeof buf - 1, f);
            buf[r] = 0;
            fclose(f);
        }
        CHECK(!strcmp(buf, "original\n"));
        CHECK(stat(target, &st) == 0 && st.st_size == 9);
        for (int i = 0; i < nadded; i++) unlink(added[i]);
    }
    baton_lock_free(l);
    baton_client_close(c);
    free_listing(&before);
    free_listing(&after);
}

/* A default dir ($BATON_DIR) owned by someone else is refused. */
static void test_foreign_dir_refused(void) {
    if (geteuid() != 0) {
        fprintf(stderr, "   (not root; skipped)\n");
        return;
    }
    char dir[1300];
    snprintf(dir, sizeof dir, "%s/foreign", g_root);
    mkdirs(dir, 0700);
    CHECK(chown(dir, 65534, 65534) == 0);
    setenv("BATON_DIR", dir, 1);
    baton_client *c = NULL;
    int rc = baton_client_open(&c, NULL, NULL);
    if (rc == 0) {
        baton_lock *l = NULL;
        rc = baton_lock_open(&l, c, "x", NULL);
        if (rc == 0) {
            rc = baton_lock_acquire(l, 0);
            baton_lock_free(l);
        }
        baton_client_close(c);
    }
    fprintf(stderr, "   foreign-owned dir: %d (%s)\n", rc, baton_strerror(rc));
    CHECK(rc != 0 && rc != BATON_ELOCKED);
    if (chown(dir, 0, 0) != 0) perror("chown back");
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f) {
    (void)st;
    (void)flag;
    (void)f;
    remove(p);
    return 0;
}

int main(void) {
    const char *tt = getenv("BATON_TEST_TMP");
    snprintf(g_root, sizeof g_root, "%s/unit_names/%ld", tt ? tt : ".", (long)getpid());
    mkdirs(g_root, 0700);
    char real[PATH_MAX];
    if (realpath(g_root, real)) snprintf(g_root, sizeof g_root, "%.1000s", real);
    snprintf(g_lockdir, sizeof g_lockdir, "%s/outer/inner/locks", g_root);
    mkdirs(g_lockdir, 0700);
    build_names();
    RUN(test_names_stay_inside_and_are_distinct);
    RUN(test_empty_name);
    RUN(test_symlink_not_followed);
    RUN(test_foreign_dir_refused);
    int rc = th_finish();
    if (rc == 0) nftw(g_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
