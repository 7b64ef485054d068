/*
 * The main of a fuzz target built without libFuzzer (gcc, or the ASan
 * build): runs LLVMFuzzerTestOneInput once on each file named, or on each
 * file of each directory named, so the corpus (seeds and every input that
 * once crashed) is a regression test in every build. libFuzzer's own
 * binaries (BATON_FUZZ=ON, scripts/fuzz.sh) do the fuzzing.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    if (!f) {
        perror(path);
        return -1;
    }
    for (;;) {
        if (len == cap) {
            unsigned char *nb = realloc(buf, cap = cap ? cap * 2 : 4096);
            if (!nb) {
                fclose(f);
                free(buf);
                return -1;
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        if (!n) break;
        len += n;
    }
    fclose(f);
    /* a copy of exactly LEN bytes, so ASan sees a read past the input */
    unsigned char *in = malloc(len ? len : 1);
    if (!in) {
        free(buf);
        return -1;
    }
    memcpy(in, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(in, len);
    free(in);
    return 0;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    int files = 0;
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st)) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i])) return 1;
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        char **names = NULL;
        size_t n = 0;
        if (!d) {
            perror(argv[i]);
            return 1;
        }
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char **nn = realloc(names, (n + 1) * sizeof *names);
            if (!nn) return 1;
            names = nn;
            size_t l = strlen(argv[i]) + strlen(e->d_name) + 2;
            if (!(names[n] = malloc(l))) return 1;
            snprintf(names[n++], l, "%s/%s", argv[i], e->d_name);
        }
        closedir(d);
        qsort(names, n, sizeof *names, cmp);
        for (size_t k = 0; k < n; k++) {
            fprintf(stderr, "replay %s\n", names[k]);
            if (run_file(names[k])) return 1;
            files++;
            free(names[k]);
        }
        free(names);
    }
    if (!files) {
        fprintf(stderr, "replay: no input files\n");
        return 1;
    }
    printf("replay: %d inputs, no crash\n", files);
    return 0;
}
