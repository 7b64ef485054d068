/*
 * The etcd engine's protobuf decoder (src/backends/etcd/pb.c, epb_decode):
 * the first byte picks the message (a reply or a request of one of the
 * methods the codec knows), the rest is its protobuf bytes. Anything must
 * decode to JSON or fail with BATON_EPROTO; what decodes must encode back
 * (epb_encode) and decode again to the same JSON (the gateway's shape is
 * one the encoder accepts). A broken promise aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_int.h"

static const char *const paths[] = {
    "/v3/kv/range", "/v3/kv/put", "/v3/kv/deleterange", "/v3/kv/txn", "/v3/lease/grant", "/v3/lease/revoke",
    "/v3/lease/keepalive", "/v3/lease/timetolive", "/v3/auth/authenticate", "/v3/watch",
};
#define NPATHS (sizeof paths / sizeof paths[0])

static void fail(const char *what, const json_t *a, const json_t *b)
{
    char *x = a ? json_dumps(a, JSON_SORT_KEYS) : NULL, *y = b ? json_dumps(b, JSON_SORT_KEYS) : NULL;
    fprintf(stderr, "fuzz_etcd_pb: %s (%s)\n  first  %s\n  second %s\n", what, baton_error_last()->message,
            x ? x : "-", y ? y : "-");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *j = NULL, *again = NULL;
    unsigned char *enc = NULL;
    size_t elen = 0;
    int rc;
    if (size < 1) return 0;
    const epb_method *m = epb_method_for(paths[(data[0] >> 1) % NPATHS]);
    if (!m) fail("a method the codec does not know", NULL, NULL);
    const epb_msg *msg = data[0] & 1 ? m->req : m->resp;
    rc = epb_decode(msg, data + 1, size - 1, &j);
    if (rc) {
        if (rc != BATON_EPROTO || j) fail("a decode error other than BATON_EPROTO", NULL, NULL);
        return 0;
    }
    if (!json_is_object(j)) fail("decoded to something else than an object", j, NULL);
    if (epb_encode(msg, j, &enc, &elen)) fail("what decoded does not encode", j, NULL);
    if (elen < 5 || enc[0] != 0 ||
        ((size_t)enc[1] << 24 | (size_t)enc[2] << 16 | (size_t)enc[3] << 8 | enc[4]) != elen - 5)
        fail("a bad gRPC prefix", j, NULL);
    if (epb_decode(msg, enc + 5, elen - 5, &again)) fail("what encoded does not decode", j, NULL);
    if (!json_equal(j, again)) fail("the round trip differs", j, again);
    json_decref(again);
    json_decref(j);
    free(enc);
    return 0;
}
