/*
 * The protobuf codec of the etcd engine's gRPC transport (src/backends/etcd/
 * pb.c), without a server (test_etcd_pb):
 *
 *   - the requests the engine builds (the lock txn, the look txn, lease
 *     grant/keepalive, authenticate, watch create) encode, and decode back
 *     to the same JSON (int64 as strings, bytes as base64, enums by name);
 *   - known bytes: a TxnResponse written by hand from rpc.proto decodes to
 *     the gateway's shape (header.revision, succeeded, responses[i].
 *     response_range.kvs[0].create_revision/key/value, count); a
 *     WatchResponse's DELETE event by name, PUT (0) absent;
 *   - every truncation of that reply, and 20000 random corruptions of it,
 *     decode to 0 or BATON_EPROTO, never a crash (run under ASan);
 *   - a JSON field the schema lacks, or of the wrong type -> BATON_EINVAL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "etcd_int.h"

static json_t *roundtrip(const char *path, const char *json)
{
    const epb_method *m = epb_method_for(path);
    json_error_t je;
    json_t *in = json_loads(json, 0, &je), *out = NULL;
    unsigned char *buf = NULL;
    size_t len = 0;
    CHECK(m != NULL && in != NULL);
    if (!m || !in) return NULL;
    CHECK_RC(epb_encode(m->req, in, &buf, &len), 0);
    CHECK(len >= 5 && buf && buf[0] == 0);
    if (buf && len >= 5) {
        size_t n = (size_t)buf[1] << 24 | (size_t)buf[2] << 16 | (size_t)buf[3] << 8 | buf[4];
        CHECK(n == len - 5);
        CHECK_RC(epb_decode(m->req, buf + 5, len - 5, &out), 0);
    }
    if (out && !json_equal(in, out)) {
        char *a = json_dumps(in, JSON_SORT_KEYS), *b = json_dumps(out, JSON_SORT_KEYS);
        fprintf(stderr, "   %s:\n   in  %s\n   out %s\n", path, a, b);
        free(a), free(b);
        CHECK(!"round trip differs");
    }
    free(buf);
    json_decref(in);
    return out;
}

static void test_roundtrip(void)
{
    /* the lock's create-if-absent txn (lock.c create_key) */
    json_decref(roundtrip("/v3/kv/txn",
        "{\"compare\":[{\"key\":\"YS9i\",\"target\":\"CREATE\",\"result\":\"EQUAL\",\"create_revision\":\"0\"}],"
        "\"success\":[{\"request_put\":{\"key\":\"YS9i\",\"value\":\"aGk=\",\"lease\":\"7587870707453394443\"}},"
        "{\"request_range\":{\"key\":\"YS8=\",\"range_end\":\"YTA=\",\"sort_order\":\"ASCEND\","
        "\"sort_target\":\"CREATE\",\"limit\":\"1\"}}],"
        "\"failure\":[{\"request_range\":{\"key\":\"YS9i\"}}]}"));
    /* the look txn: keys_only, max_create_revision, DESCEND */
    json_decref(roundtrip("/v3/kv/txn",
        "{\"success\":[{\"request_range\":{\"key\":\"YS8=\",\"range_end\":\"YTA=\",\"sort_order\":\"DESCEND\","
        "\"sort_target\":\"CREATE\",\"limit\":\"1\",\"max_create_revision\":\"41\",\"keys_only\":true}},"
        "{\"request_delete_range\":{\"key\":\"YS9i\"}}]}"));
    json_decref(roundtrip("/v3/lease/grant", "{\"TTL\":\"30\"}"));
    json_decref(roundtrip("/v3/lease/keepalive", "{\"ID\":\"-5\"}"));
    json_decref(roundtrip("/v3/lease/revoke", "{\"ID\":\"9223372036854775807\"}"));
    json_decref(roundtrip("/v3/auth/authenticate", "{\"name\":\"root\",\"password\":\"p\\u00e9w\"}"));
    json_decref(roundtrip("/v3/watch",
        "{\"create_request\":{\"key\":\"AGZlbmNl\",\"range_end\":\"AA==\",\"start_revision\":\"12\"}}"));
    /* an empty key (base64 "") and a NUL byte inside one */
    json_decref(roundtrip("/v3/kv/range", "{\"key\":\"\",\"range_end\":\"AA==\",\"count_only\":true}"));
}

static void test_encode_errors(void)
{
    const epb_method *m = epb_method_for("/v3/kv/txn");
    const char *bad[] = {
        "{\"nosuch\":1}",                                              /* not in the schema */
        "{\"compare\":{}}",                                            /* repeated: not an array */
        "{\"compare\":[{\"target\":\"NOPE\"}]}",                       /* not an enum name */
        "{\"compare\":[{\"key\":\"not base64!\"}]}",
        "{\"compare\":[{\"create_revision\":\"12x\"}]}",
        "{\"compare\":[{\"create_revision\":true}]}",
        "{\"success\":[{\"request_range\":{\"keys_only\":\"yes\"}}]}",
        "{\"success\":[{\"request_put\":3}]}",
    };
    CHECK(epb_method_for("/v3/kv/nosuch") == NULL);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *o = json_loads(bad[i], 0, NULL);
        unsigned char *buf = NULL;
        size_t len;
        CHECK(o != NULL);
        CHECK_RC(epb_encode(m->req, o, &buf, &len), BATON_EINVAL);
        CHECK(buf == NULL);
        json_decref(o);
    }
}

/* A TxnResponse by hand (rpc.proto field numbers):
 *   header{cluster_id 1, member_id 2, revision 300, raft_term 4}
 *   succeeded true
 *   responses[0].response_range{ header{revision 300}, kvs[{key "a/1",
 *     create_revision 299, mod_revision 299, version 1, value "hi", lease 7}], count 2 }
 *   responses[1].response_put{ header{} }
 * plus an unknown field 15 (skipped). */
static const unsigned char txn_resp[] = {
    0x0a, 0x09, 0x08, 0x01, 0x10, 0x02, 0x18, 0xac, 0x02, 0x20, 0x04, /* header (9 bytes) */
    0x10, 0x01,                                                       /* succeeded */
    0x1a, 0x1e, 0x0a, 0x1c,                                           /* responses[0] { response_range (28) */
    0x0a, 0x03, 0x18, 0xac, 0x02,                                     /*   header{revision 300} */
    0x12, 0x13,                                                       /*   kvs[0] (19) */
    0x0a, 0x03, 'a', '/', '1', 0x10, 0xab, 0x02, 0x18, 0xab, 0x02, 0x20, 0x01, 0x2a, 0x02, 'h', 'i', 0x30, 0x07,
    0x20, 0x02,                                                       /*   count 2 } */
    0x1a, 0x02, 0x12, 0x00,                                           /* responses[1] { response_put {} } */
    0x78, 0x05,                                                       /* field 15 varint: unknown */
};

static void test_decode_known(void)
{
    const epb_method *m = epb_method_for("/v3/kv/txn");
    json_t *o = NULL, *r0, *kv;
    CHECK_RC(epb_decode(m->resp, txn_resp, sizeof txn_resp, &o), 0);
    if (!o) return;
    CHECK(egw_int(json_object_get(o, "header"), "revision") == 300);
    CHECK(json_is_string(json_object_get(json_object_get(o, "header"), "revision")));
    CHECK(json_is_true(json_object_get(o, "succeeded")));
    r0 = json_object_get(json_array_get(json_object_get(o, "responses"), 0), "response_range");
    CHECK(egw_int(r0, "count") == 2);
    kv = json_array_get(json_object_get(r0, "kvs"), 0);
    CHECK(egw_int(kv, "create_revision") == 299);
    CHECK(egw_int(kv, "lease") == 7);
    CHECK(!strcmp(json_string_value(json_object_get(kv, "key")) ?: "", "YS8x"));   /* "a/1" */
    CHECK(!strcmp(json_string_value(json_object_get(kv, "value")) ?: "", "aGk=")); /* "hi" */
    CHECK(json_is_object(json_object_get(json_array_get(json_object_get(o, "responses"), 1), "response_put")));
    json_decref(o);

    /* WatchResponse: created, then events [DELETE (type 1), PUT (type 0: absent on the wire)] */
    static const unsigned char w[] = { 0x18, 0x01, 0x5a, 0x07, 0x08, 0x01, 0x12, 0x03, 0x0a, 0x01, 'k',
                                       0x5a, 0x05, 0x12, 0x03, 0x0a, 0x01, 'k' };
    m = epb_method_for("/v3/watch");
    CHECK_RC(epb_decode(m->resp, w, sizeof w, &o), 0);
    if (!o) return;
    CHECK(json_is_true(json_object_get(o, "created")));
    json_t *ev = json_object_get(o, "events");
    CHECK(json_array_size(ev) == 2);
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(ev, 0), "type")) ?: "", "DELETE"));
    CHECK(json_object_get(json_array_get(ev, 1), "type") == NULL);
    json_decref(o);

    /* a string that is not UTF-8 (AuthenticateResponse.token) */
    static const unsigned char tok[] = { 0x12, 0x02, 0xff, 0xfe };
    m = epb_method_for("/v3/auth/authenticate");
    CHECK_RC(epb_decode(m->resp, tok, sizeof tok, &o), BATON_EPROTO);
    CHECK(o == NULL);
}

static void test_decode_garbage(void)
{
    const epb_method *m = epb_method_for("/v3/kv/txn");
    unsigned char buf[sizeof txn_resp];
    int ok = 0, proto = 0, other = 0;
    unsigned seed = 12345;

    /* every truncation */
    for (size_t n = 0; n <= sizeof txn_resp; n++) {
        json_t *o = NULL;
        int rc = epb_decode(m->resp, txn_resp, n, &o);
        rc == 0 ? ok++ : rc == BATON_EPROTO ? proto++ : other++;
        CHECK((rc == 0) == (o != NULL));
        json_decref(o);
    }
    CHECK(proto > 0);
    /* random corruptions: 1-4 bytes changed, or random lengths of random bytes */
    for (int i = 0; i < 20000; i++) {
        json_t *o = NULL;
        size_t n = sizeof buf;
        memcpy(buf, txn_resp, sizeof buf);
        if (i % 4 == 3) {
            n = (size_t)(rand_r(&seed) % (int)sizeof buf);
            for (size_t j = 0; j < n; j++) buf[j] = (unsigned char)rand_r(&seed);
        } else {
            for (int k = 0; k <= i % 4; k++) buf[rand_r(&seed) % sizeof buf] = (unsigned char)rand_r(&seed);
        }
        int rc = epb_decode(m->resp, buf, n, &o);
        rc == 0 ? ok++ : rc == BATON_EPROTO ? proto++ : other++;
        CHECK((rc == 0) == (o != NULL));
        json_decref(o);
    }
    fprintf(stderr, "   decoded %d, BATON_EPROTO %d, other %d\n", ok, proto, other);
    CHECK(other == 0);
    CHECK(proto > 1000);
    /* deep nesting (responses[0].response_txn.responses[0]... 40 levels) is refused, not recursed into */
    {
        unsigned char deep[1024];
        size_t n = 0;
        for (int lvl = 0; lvl < 80; lvl++) {
            /* wrap what there is: ResponseOp.response_txn (field 4), then TxnResponse.responses (field 3) */
            unsigned char hdr[3];
            size_t h = 0;
            hdr[h++] = lvl % 2 ? 0x1a : 0x22;
            if (n < 128) {
                hdr[h++] = (unsigned char)n;
            } else {
                hdr[h++] = (unsigned char)(n | 0x80);
                hdr[h++] = (unsigned char)(n >> 7);
            }
            memmove(deep + h, deep, n);
            memcpy(deep, hdr, h);
            n += h;
        }
        json_t *o = NULL;
        CHECK_RC(epb_decode(m->resp, deep, n, &o), BATON_EPROTO);
        CHECK(o == NULL);
        json_decref(o);
    }
}

int main(void)
{
    RUN(test_roundtrip);
    RUN(test_encode_errors);
    RUN(test_decode_known);
    RUN(test_decode_garbage);
    return th_finish();
}
