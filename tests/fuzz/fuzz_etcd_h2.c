/*
 * The etcd engine's gRPC transport (src/backends/etcd/h2.c) reading a
 * server: the fuzz input, after its first byte, is everything a server
 * sends on a new connection (HTTP/2 frames: SETTINGS, HEADERS, DATA with
 * gRPC's 5-byte message prefix, trailers...), served from a loopback socket
 * (loopback.h) and then the end of the stream. eh2_call makes one call and
 * hands each message to the protobuf decoder (pb.c), as gw.c does. The first
 * byte picks the method, whether our side half-closes (a unary call) or
 * keeps the stream open (a watch), and whether the callback stops at the
 * first message. Whatever comes, the call must end (at the end of the
 * stream, not its deadline) with 0 or an error code and no crash, and its
 * status must be well-formed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "etcd_int.h"
#include "loopback.h"

static const char *const paths[] = {
    "/v3/kv/range", "/v3/kv/put", "/v3/kv/deleterange", "/v3/kv/txn", "/v3/lease/grant", "/v3/lease/revoke",
    "/v3/lease/keepalive", "/v3/lease/timetolive", "/v3/auth/authenticate", "/v3/watch",
};
#define NPATHS (sizeof paths / sizeof paths[0])

typedef struct {
    const epb_msg *resp;
    int stop_first;
    int msgs;
} sink;

static int on_msg(void *arg, const unsigned char *p, size_t len)
{
    sink *s = arg;
    json_t *j = NULL;
    int rc = epb_decode(s->resp, p, len, &j);
    if (rc) return rc;
    json_decref(j);
    s->msgs++;
    return s->stop_first;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const unsigned char empty[5] = { 0 };   /* an empty request message, framed */
    char text[64];
    baton_uri *u = NULL;
    eh2 *h = NULL;
    eh2_status st;
    egw_config cfg = { .transport = EGW_GRPC, .connect_timeout_ms = 2000, .io_timeout_ms = 5000 };
    if (size < 1) return 0;
    const epb_method *m = epb_method_for(paths[(data[0] & 0x0f) % NPATHS]);
    sink s = { m->resp, (data[0] >> 4) & 1, 0 };
    int half_close = !((data[0] >> 5) & 1);
    const char *token = (data[0] >> 6) & 1 ? "fuzz.token" : NULL;

    snprintf(text, sizeof text, "etcd://127.0.0.1:%d", lb_port());
    if (baton__uri_parse(text, &u) || eh2_new(&h, u, &cfg)) {
        fprintf(stderr, "fuzz_etcd_h2: setup: %s\n", baton_error_last()->message);
        abort();
    }
    unsigned long before = lb_serve(data + 1, size - 1);
    int64_t t0 = baton_now_ns();
    int rc = eh2_call(h, 0, m->grpc, token, empty, sizeof empty, half_close, t0 + 5000000000LL, NULL, on_msg, &s, &st);
    if (rc > 0 || (rc && !baton_error_last()->message)) {
        fprintf(stderr, "fuzz_etcd_h2: eh2_call = %d without a message\n", rc);
        abort();
    }
    if (rc == BATON_ETIMEDOUT) {
        /* the stream ended at once: the call must not have waited for its deadline */
        fprintf(stderr, "fuzz_etcd_h2: the call waited for its deadline after the end of the stream\n");
        abort();
    }
    if (memchr(st.message, 0, sizeof st.message) == NULL) abort();
    if (getenv("BATON_FUZZ_VERBOSE"))   /* what a seed does: BATON_FUZZ_VERBOSE=1 fuzz_etcd_h2 corpus/etcd_h2 */
        fprintf(stderr, "%s: rc %d (%s) http %d grpc-status %d '%s' messages %d\n", m->grpc, rc,
                rc ? baton_error_last()->message : "ok", st.http, st.grpc_status, st.message, s.msgs);
    eh2_free(h);
    baton__uri_free(u);
    lb_wait(before, 1);
    return 0;
}
