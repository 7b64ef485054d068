/* baton_dl_load: the engines' client libraries loaded on first use. */
#include "baton/sys/backend.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int baton_dl_load(const char *soname, const char *hint, const baton_dl_sym *syms, size_t n, char *err, size_t errlen)
{
    /* RTLD_LOCAL keeps the library's names out of the program's namespace,
     * as when it was not loaded at all; never unloaded, since its state
     * (connections, process-wide initialisation) outlives any one engine. */
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    size_t i;

    if (!h) {
        const char *why = dlerror();
        snprintf(err, errlen, "cannot load %s%s%s%s: %s", soname, hint ? " (" : "", hint ? hint : "", hint ? ")" : "",
                 why ? why : "unknown error");
        return -1;
    }
    for (i = 0; i < n; i++) {
        void *p = dlsym(h, syms[i].name);
        if (!p) {
            snprintf(err, errlen, "%s has no %s (another version of the library?)", soname, syms[i].name);
            break;
        }
        /* an object pointer into a function pointer, without a cast */
        memcpy(syms[i].slot, &p, sizeof p);
    }
    if (i == n) return 0;
    while (i--) memset(syms[i].slot, 0, sizeof(void *));
    dlclose(h);
    return -1;
}
