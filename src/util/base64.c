/*
 * Base64 after RFC 4648 (see base64.h). Encoding is moved here from the etcd
 * engine's gateway and the MySQL engine's lock names; decoding from etcd's.
 */
#include "base64.h"

#include <stdlib.h>
#include <string.h>

static const char std_abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char url_abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

size_t baton__base64_len(size_t n, unsigned flags)
{
    if (flags & BATON_B64_NOPAD) return n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0);
    return (n + 2) / 3 * 4;
}

size_t baton__base64_encode(char *out, const void *in, size_t n, unsigned flags)
{
    const unsigned char *s = in;
    const char *abc = flags & BATON_B64_URL ? url_abc : std_abc;
    const int pad = !(flags & BATON_B64_NOPAD);
    char *o = out;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)s[i] << 16;
        if (i + 1 < n) v |= (unsigned)s[i + 1] << 8;
        if (i + 2 < n) v |= s[i + 2];
        *o++ = abc[(v >> 18) & 63];
        *o++ = abc[(v >> 12) & 63];
        if (i + 1 < n) *o++ = abc[(v >> 6) & 63];
        else if (pad) *o++ = '=';
        if (i + 2 < n) *o++ = abc[v & 63];
        else if (pad) *o++ = '=';
    }
    *o = 0;
    return (size_t)(o - out);
}

char *baton__base64(const void *in, size_t n)
{
    char *out = malloc(baton__base64_len(n, 0) + 1);
    if (out) baton__base64_encode(out, in, n, 0);
    return out;
}

static int b64v(int c)
{
    const char *p = c ? strchr(std_abc, c) : NULL;
    return p ? (int)(p - std_abc) : -1;
}

int baton__unbase64(const char *s, char **out, size_t *len)
{
    size_t n = strlen(s), k = 0;
    char *buf;
    *out = NULL;
    if (n % 4) return -1;
    if (!(buf = malloc(n / 4 * 3 + 1))) return -1;
    for (size_t i = 0; i < n; i += 4) {
        int a = b64v(s[i]), b = b64v(s[i + 1]), c = s[i + 2] == '=' ? 0 : b64v(s[i + 2]),
            d = s[i + 3] == '=' ? 0 : b64v(s[i + 3]);
        if (a < 0 || b < 0 || c < 0 || d < 0 || (s[i + 2] == '=' && s[i + 3] != '=') ||
            (i + 4 < n && (s[i + 2] == '=' || s[i + 3] == '='))) {
            free(buf);
            return -1;
        }
        unsigned v = (unsigned)a << 18 | (unsigned)b << 12 | (unsigned)c << 6 | (unsigned)d;
        buf[k++] = (char)(v >> 16);
        if (s[i + 2] != '=') buf[k++] = (char)(v >> 8);
        if (s[i + 3] != '=') buf[k++] = (char)v;
    }
    buf[k] = 0;
    *out = buf;
    *len = k;
    return 0;
}
