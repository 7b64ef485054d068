/*
 * A small schema-driven protobuf codec for the gRPC transport (h2.c): it
 * turns the JSON objects the engine builds for the v3 JSON gateway into
 * etcd's protobuf messages, and the protobuf replies back into the JSON the
 * gateway would have answered (grpc-gateway with original field names:
 * int64/uint64 as strings, bytes as base64, enums by name, zero values
 * absent), so lock.c and etcd.c do not know which transport they use.
 *
 * Only the messages the engine uses are described (field numbers from
 * etcd's api/etcdserverpb/rpc.proto and api/mvccpb/kv.proto). A JSON field
 * the schema does not know is an error (a new request shape needs its field
 * here first); a reply field it does not know is skipped, as protobuf says.
 * A reply that is not well-formed protobuf is BATON_EPROTO, never a crash:
 * every length is checked against what is left, nesting is bounded.
 */
#include "etcd_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_INT64, T_UINT64, T_BOOL, T_ENUM, T_BYTES, T_STRING, T_MSG };

typedef struct pb_field {
    const char *name;
    uint32_t num;
    uint8_t type;
    uint8_t repeated;
    const struct epb_msg *msg;        /* T_MSG */
    const char *const *enums;         /* T_ENUM: names by value, NULL-terminated */
} pb_field;

struct epb_msg {
    const char *name;
    const pb_field *f;
    size_t n;
};

#define MSG(var, fields) const epb_msg var = { #var, fields, sizeof fields / sizeof fields[0] }
#define F(n, num, t) { n, num, t, 0, NULL, NULL }
#define R(n, num, t) { n, num, t, 1, NULL, NULL }
#define M(n, num, m) { n, num, T_MSG, 0, &m, NULL }
#define RM(n, num, m) { n, num, T_MSG, 1, &m, NULL }
#define E(n, num, e) { n, num, T_ENUM, 0, NULL, e }
#define RE(n, num, e) { n, num, T_ENUM, 1, NULL, e }

static const char *const sort_order[] = { "NONE", "ASCEND", "DESCEND", NULL };
static const char *const sort_target[] = { "KEY", "VERSION", "CREATE", "MOD", "VALUE", NULL };
static const char *const cmp_result[] = { "EQUAL", "GREATER", "LESS", "NOT_EQUAL", NULL };
static const char *const cmp_target[] = { "VERSION", "CREATE", "MOD", "VALUE", "LEASE", NULL };
static const char *const event_type[] = { "PUT", "DELETE", NULL };
static const char *const watch_filter[] = { "NOPUT", "NODELETE", NULL };

extern const epb_msg TxnRequest, TxnResponse;

static const pb_field f_header[] = {
    F("cluster_id", 1, T_UINT64), F("member_id", 2, T_UINT64), F("revision", 3, T_INT64), F("raft_term", 4, T_UINT64),
};
static MSG(ResponseHeader, f_header);

static const pb_field f_kv[] = {
    F("key", 1, T_BYTES), F("create_revision", 2, T_INT64), F("mod_revision", 3, T_INT64),
    F("version", 4, T_INT64), F("value", 5, T_BYTES), F("lease", 6, T_INT64),
};
static MSG(KeyValue, f_kv);

static const pb_field f_range_req[] = {
    F("key", 1, T_BYTES), F("range_end", 2, T_BYTES), F("limit", 3, T_INT64), F("revision", 4, T_INT64),
    E("sort_order", 5, sort_order), E("sort_target", 6, sort_target), F("serializable", 7, T_BOOL),
    F("keys_only", 8, T_BOOL), F("count_only", 9, T_BOOL), F("min_mod_revision", 10, T_INT64),
    F("max_mod_revision", 11, T_INT64), F("min_create_revision", 12, T_INT64), F("max_create_revision", 13, T_INT64),
};
static MSG(RangeRequest, f_range_req);

static const pb_field f_range_resp[] = {
    M("header", 1, ResponseHeader), RM("kvs", 2, KeyValue), F("more", 3, T_BOOL), F("count", 4, T_INT64),
};
static MSG(RangeResponse, f_range_resp);

static const pb_field f_put_req[] = {
    F("key", 1, T_BYTES), F("value", 2, T_BYTES), F("lease", 3, T_INT64),
    F("prev_kv", 4, T_BOOL), F("ignore_value", 5, T_BOOL), F("ignore_lease", 6, T_BOOL),
};
static MSG(PutRequest, f_put_req);

static const pb_field f_put_resp[] = { M("header", 1, ResponseHeader), M("prev_kv", 2, KeyValue) };
static MSG(PutResponse, f_put_resp);

static const pb_field f_del_req[] = { F("key", 1, T_BYTES), F("range_end", 2, T_BYTES), F("prev_kv", 3, T_BOOL) };
static MSG(DeleteRangeRequest, f_del_req);

static const pb_field f_del_resp[] = {
    M("header", 1, ResponseHeader), F("deleted", 2, T_INT64), RM("prev_kvs", 3, KeyValue),
};
static MSG(DeleteRangeResponse, f_del_resp);

static const pb_field f_reqop[] = {
    M("request_range", 1, RangeRequest), M("request_put", 2, PutRequest),
    M("request_delete_range", 3, DeleteRangeRequest), M("request_txn", 4, TxnRequest),
};
static MSG(RequestOp, f_reqop);

static const pb_field f_respop[] = {
    M("response_range", 1, RangeResponse), M("response_put", 2, PutResponse),
    M("response_delete_range", 3, DeleteRangeResponse), M("response_txn", 4, TxnResponse),
};
static MSG(ResponseOp, f_respop);

static const pb_field f_compare[] = {
    E("result", 1, cmp_result), E("target", 2, cmp_target), F("key", 3, T_BYTES), F("version", 4, T_INT64),
    F("create_revision", 5, T_INT64), F("mod_revision", 6, T_INT64), F("value", 7, T_BYTES),
    F("lease", 8, T_INT64), F("range_end", 64, T_BYTES),
};
static MSG(Compare, f_compare);

static const pb_field f_txn_req[] = { RM("compare", 1, Compare), RM("success", 2, RequestOp), RM("failure", 3, RequestOp) };
MSG(TxnRequest, f_txn_req);

static const pb_field f_txn_resp[] = {
    M("header", 1, ResponseHeader), F("succeeded", 2, T_BOOL), RM("responses", 3, ResponseOp),
};
MSG(TxnResponse, f_txn_resp);

static const pb_field f_grant_req[] = { F("TTL", 1, T_INT64), F("ID", 2, T_INT64) };
static MSG(LeaseGrantRequest, f_grant_req);
static const pb_field f_grant_resp[] = {
    M("header", 1, ResponseHeader), F("ID", 2, T_INT64), F("TTL", 3, T_INT64), F("error", 4, T_STRING),
};
static MSG(LeaseGrantResponse, f_grant_resp);

static const pb_field f_id_req[] = { F("ID", 1, T_INT64) };
static MSG(LeaseRevokeRequest, f_id_req);
static const pb_field f_header_only[] = { M("header", 1, ResponseHeader) };
static MSG(LeaseRevokeResponse, f_header_only);
static MSG(LeaseKeepAliveRequest, f_id_req);
static const pb_field f_ka_resp[] = { M("header", 1, ResponseHeader), F("ID", 2, T_INT64), F("TTL", 3, T_INT64) };
static MSG(LeaseKeepAliveResponse, f_ka_resp);

static const pb_field f_ttl_req[] = { F("ID", 1, T_INT64), F("keys", 2, T_BOOL) };
static MSG(LeaseTimeToLiveRequest, f_ttl_req);
static const pb_field f_ttl_resp[] = {
    M("header", 1, ResponseHeader), F("ID", 2, T_INT64), F("TTL", 3, T_INT64), F("grantedTTL", 4, T_INT64),
    R("keys", 5, T_BYTES),
};
static MSG(LeaseTimeToLiveResponse, f_ttl_resp);

static const pb_field f_auth_req[] = { F("name", 1, T_STRING), F("password", 2, T_STRING) };
static MSG(AuthenticateRequest, f_auth_req);
static const pb_field f_auth_resp[] = { M("header", 1, ResponseHeader), F("token", 2, T_STRING) };
static MSG(AuthenticateResponse, f_auth_resp);

static const pb_field f_wcreate[] = {
    F("key", 1, T_BYTES), F("range_end", 2, T_BYTES), F("start_revision", 3, T_INT64),
    F("progress_notify", 4, T_BOOL), RE("filters", 5, watch_filter), F("prev_kv", 6, T_BOOL),
    F("watch_id", 7, T_INT64), F("fragment", 8, T_BOOL),
};
static MSG(WatchCreateRequest, f_wcreate);
static const pb_field f_wcancel[] = { F("watch_id", 1, T_INT64) };
static MSG(WatchCancelRequest, f_wcancel);
static const pb_field f_wreq[] = { M("create_request", 1, WatchCreateRequest), M("cancel_request", 2, WatchCancelRequest) };
static MSG(WatchRequest, f_wreq);

static const pb_field f_event[] = { E("type", 1, event_type), M("kv", 2, KeyValue), M("prev_kv", 3, KeyValue) };
static MSG(Event, f_event);
static const pb_field f_wresp[] = {
    M("header", 1, ResponseHeader), F("watch_id", 2, T_INT64), F("created", 3, T_BOOL), F("canceled", 4, T_BOOL),
    F("compact_revision", 5, T_INT64), F("cancel_reason", 6, T_STRING), F("fragment", 7, T_BOOL),
    RM("events", 11, Event),
};
static MSG(WatchResponse, f_wresp);

/* The gateway's paths and their gRPC methods. The gateway answers a
 * streaming method's message inside {"result": ...}. */
static const epb_method methods[] = {
    { "/v3/kv/range", "/etcdserverpb.KV/Range", &RangeRequest, &RangeResponse, 0 },
    { "/v3/kv/put", "/etcdserverpb.KV/Put", &PutRequest, &PutResponse, 0 },
    { "/v3/kv/deleterange", "/etcdserverpb.KV/DeleteRange", &DeleteRangeRequest, &DeleteRangeResponse, 0 },
    { "/v3/kv/txn", "/etcdserverpb.KV/Txn", &TxnRequest, &TxnResponse, 0 },
    { "/v3/lease/grant", "/etcdserverpb.Lease/LeaseGrant", &LeaseGrantRequest, &LeaseGrantResponse, 0 },
    { "/v3/lease/revoke", "/etcdserverpb.Lease/LeaseRevoke", &LeaseRevokeRequest, &LeaseRevokeResponse, 0 },
    { "/v3/lease/keepalive", "/etcdserverpb.Lease/LeaseKeepAlive", &LeaseKeepAliveRequest, &LeaseKeepAliveResponse, 1 },
    { "/v3/lease/timetolive", "/etcdserverpb.Lease/LeaseTimeToLive", &LeaseTimeToLiveRequest,
      &LeaseTimeToLiveResponse, 0 },
    { "/v3/auth/authenticate", "/etcdserverpb.Auth/Authenticate", &AuthenticateRequest, &AuthenticateResponse, 0 },
    { "/v3/watch", "/etcdserverpb.Watch/Watch", &WatchRequest, &WatchResponse, 1 },
};

const epb_method *epb_method_for(const char *path)
{
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (!strcmp(methods[i].path, path)) return &methods[i];
    return NULL;
}

/* ---- encoding ------------------------------------------------------------- */

typedef struct {
    unsigned char *p;
    size_t len, cap;
} obuf;

static int put(obuf *b, const void *p, size_t n)
{
    if (!n) return 0;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n) cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) return -1;
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

static int put_varint(obuf *b, uint64_t v)
{
    unsigned char t[10];
    size_t n = 0;
    do {
        t[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return put(b, t, n);
}

static int put_tag(obuf *b, uint32_t num, int wire)
{
    return put_varint(b, (uint64_t)num << 3 | (uint64_t)wire);
}

static int nomem(void)
{
    return baton_seterr(BATON_ENOMEM, 0, "out of memory");
}

static int put_lenbytes(obuf *b, uint32_t num, const void *p, size_t n)
{
    return put_tag(b, num, 2) || put_varint(b, n) || put(b, p, n) ? nomem() : 0;
}

static int enc_msg(const epb_msg *m, const json_t *o, obuf *b, int depth);

static int bad(const epb_msg *m, const char *field, const char *what)
{
    return baton_seterr(BATON_EINVAL, 0, "etcd: grpc: %s.%s: %s", m->name, field, what);
}

/* An integer from a JSON number or a decimal string (the gateway's int64). */
static int json_i64(const json_t *v, int unsig, uint64_t *out)
{
    if (json_is_integer(v)) {
        *out = (uint64_t)json_integer_value(v);
        return 0;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        if (!*s) return -1;
        *out = unsig ? strtoull(s, &end, 10) : (uint64_t)strtoll(s, &end, 10);
        return *end ? nomem() : 0;
    }
    return -1;
}

static int enc_value(const epb_msg *m, const pb_field *f, const json_t *v, obuf *b, int depth)
{
    uint64_t n;
    switch (f->type) {
    case T_INT64:
    case T_UINT64:
        if (json_i64(v, f->type == T_UINT64, &n)) return bad(m, f->name, "not an integer");
        return put_tag(b, f->num, 0) || put_varint(b, n) ? nomem() : 0;
    case T_BOOL:
        if (!json_is_boolean(v)) return bad(m, f->name, "not a boolean");
        return put_tag(b, f->num, 0) || put_varint(b, json_is_true(v)) ? nomem() : 0;
    case T_ENUM:
        if (json_is_string(v)) {
            const char *s = json_string_value(v);
            for (n = 0; f->enums[n] && strcmp(f->enums[n], s); n++) {}
            if (!f->enums[n]) return bad(m, f->name, "not a known enum name");
        } else if (json_is_integer(v)) {
            n = (uint64_t)json_integer_value(v);
        } else {
            return bad(m, f->name, "not an enum");
        }
        return put_tag(b, f->num, 0) || put_varint(b, n) ? nomem() : 0;
    case T_STRING:
        if (!json_is_string(v)) return bad(m, f->name, "not a string");
        return put_lenbytes(b, f->num, json_string_value(v), json_string_length(v));
    case T_BYTES: {
        char *raw;
        size_t rl;
        int rc;
        if (!json_is_string(v) || egw_unb64(json_string_value(v), &raw, &rl)) return bad(m, f->name, "not base64");
        rc = put_lenbytes(b, f->num, raw, rl);
        free(raw);
        return rc;
    }
    case T_MSG: {
        obuf sub = { 0 };
        int rc;
        if (!json_is_object(v)) return bad(m, f->name, "not an object");
        if ((rc = enc_msg(f->msg, v, &sub, depth + 1))) {
            free(sub.p);
            return rc;
        }
        rc = put_lenbytes(b, f->num, sub.p ? (const void *)sub.p : "", sub.len);
        free(sub.p);
        return rc;
    }
    }
    return bad(m, f->name, "unknown type");
}

static int enc_msg(const epb_msg *m, const json_t *o, obuf *b, int depth)
{
    const char *k;
    json_t *v;
    if (depth > 16) return baton_seterr(BATON_EINVAL, 0, "etcd: grpc: %s nested too deep", m->name);
    json_object_foreach((json_t *)o, k, v) {
        const pb_field *f = NULL;
        int rc;
        for (size_t i = 0; i < m->n && !f; i++)
            if (!strcmp(m->f[i].name, k)) f = &m->f[i];
        if (!f) return bad(m, k, "no such field in the schema (src/backends/etcd/pb.c)");
        if (json_is_null(v)) continue;
        if (f->repeated) {
            size_t i;
            json_t *x;
            if (!json_is_array(v)) return bad(m, k, "not an array");
            json_array_foreach(v, i, x) {
                if ((rc = enc_value(m, f, x, b, depth))) return rc;
            }
        } else if ((rc = enc_value(m, f, v, b, depth))) {
            return rc;
        }
    }
    return 0;
}

int epb_encode(const epb_msg *m, const json_t *req, unsigned char **out, size_t *len)
{
    obuf b = { 0 };
    unsigned char hdr[5] = { 0 };
    int rc;

    *out = NULL;
    *len = 0;
    if (!json_is_object(req)) return baton_seterr(BATON_EINVAL, 0, "etcd: grpc: %s: not an object", m->name);
    /* room for the gRPC message prefix, filled in below */
    if (put(&b, hdr, 5)) goto nomem;
    if ((rc = enc_msg(m, req, &b, 0))) {
        free(b.p);
        return rc;
    }
    if (b.len - 5 > 0xffffffffu) {
        free(b.p);
        return baton_seterr(BATON_EINVAL, 0, "etcd: grpc: %s too large", m->name);
    }
    b.p[0] = 0; /* not compressed */
    b.p[1] = (unsigned char)((b.len - 5) >> 24);
    b.p[2] = (unsigned char)((b.len - 5) >> 16);
    b.p[3] = (unsigned char)((b.len - 5) >> 8);
    b.p[4] = (unsigned char)(b.len - 5);
    *out = b.p;
    *len = b.len;
    return 0;
nomem:
    free(b.p);
    return baton_seterr(BATON_ENOMEM, 0, "out of memory");
}

/* ---- decoding ------------------------------------------------------------- */

typedef struct {
    const unsigned char *p, *end;
} ibuf;

static int get_varint(ibuf *in, uint64_t *v)
{
    uint64_t r = 0;
    for (int sh = 0; sh < 64; sh += 7) {
        if (in->p >= in->end) return -1;
        unsigned char c = *in->p++;
        r |= (uint64_t)(c & 0x7f) << sh;
        if (!(c & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;               /* more than 10 bytes */
}

static int dec_msg(const epb_msg *m, const unsigned char *p, size_t len, json_t *o, int depth);

static int eproto(const epb_msg *m, const char *what)
{
    return baton_seterr(BATON_EPROTO, 0, "etcd: grpc: a malformed %s in the reply (%s)", m->name, what);
}

/* The JSON value of one scalar or message F from its wire form. */
static json_t *dec_value(const epb_msg *m, const pb_field *f, uint64_t v, const unsigned char *p, size_t len, int depth,
                         int *rc)
{
    char num[24];
    json_t *j = NULL;
    *rc = 0;
    switch (f->type) {
    case T_INT64:
        snprintf(num, sizeof num, "%lld", (long long)(int64_t)v);
        j = json_string(num);
        break;
    case T_UINT64:
        snprintf(num, sizeof num, "%llu", (unsigned long long)v);
        j = json_string(num);
        break;
    case T_BOOL:
        j = json_boolean(v != 0);
        break;
    case T_ENUM: {
        size_t i = 0;
        while (f->enums[i] && i < v) i++;
        j = f->enums[i] && i == v ? json_string(f->enums[i]) : json_integer((json_int_t)v);
        break;
    }
    case T_STRING:
        /* jansson wants UTF-8: anything else is not what etcd sends */
        if (!(j = json_stringn((const char *)p, len))) {
            *rc = eproto(m, "a string that is not UTF-8");
            return NULL;
        }
        return j;
    case T_BYTES: {
        char *s = egw_b64(p, len);
        if (s) j = json_string(s);
        free(s);
        break;
    }
    case T_MSG:
        if (!(j = json_object())) break;
        if ((*rc = dec_msg(f->msg, p, len, j, depth + 1))) {
            json_decref(j);
            return NULL;
        }
        return j;
    }
    if (!j) *rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
    return j;
}

/* Adds V as field F of O (appended when repeated). */
static int add(json_t *o, const pb_field *f, json_t *v)
{
    if (!f->repeated) return json_object_set_new(o, f->name, v) ? baton_seterr(BATON_ENOMEM, 0, "out of memory") : 0;
    json_t *a = json_object_get(o, f->name);
    if (!a) {
        if (!(a = json_array()) || json_object_set_new(o, f->name, a)) {
            json_decref(v);
            return baton_seterr(BATON_ENOMEM, 0, "out of memory");
        }
    }
    return json_array_append_new(a, v) ? baton_seterr(BATON_ENOMEM, 0, "out of memory") : 0;
}

static int is_varint_type(int t)
{
    return t == T_INT64 || t == T_UINT64 || t == T_BOOL || t == T_ENUM;
}

static int dec_msg(const epb_msg *m, const unsigned char *p, size_t len, json_t *o, int depth)
{
    ibuf in = { p, p + len };
    if (depth > 32) return eproto(m, "nested too deep");
    while (in.p < in.end) {
        uint64_t tag, v = 0;
        const pb_field *f = NULL;
        const unsigned char *data = NULL;
        size_t dlen = 0;
        int wire, rc;
        json_t *j;

        if (get_varint(&in, &tag)) return eproto(m, "a truncated tag");
        wire = (int)(tag & 7);
        if ((tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) return eproto(m, "field number 0");
        for (size_t i = 0; i < m->n && !f; i++)
            if (m->f[i].num == (tag >> 3)) f = &m->f[i];
        switch (wire) {
        case 0:
            if (get_varint(&in, &v)) return eproto(m, "a truncated varint");
            break;
        case 1:
            if (in.end - in.p < 8) return eproto(m, "a truncated fixed64");
            in.p += 8;
            break;
        case 5:
            if (in.end - in.p < 4) return eproto(m, "a truncated fixed32");
            in.p += 4;
            break;
        case 2:
            if (get_varint(&in, &v) || v > (uint64_t)(in.end - in.p)) return eproto(m, "a length past the end");
            data = in.p;
            dlen = (size_t)v;
            in.p += dlen;
            break;
        default:
            return eproto(m, "an unknown wire type");
        }
        if (!f) continue;    /* a field this schema does not know: skipped */
        if (is_varint_type(f->type) && wire == 0) {
            if (!(j = dec_value(m, f, v, NULL, 0, depth, &rc))) return rc;
            if ((rc = add(o, f, j))) return rc;
        } else if (is_varint_type(f->type) && wire == 2 && f->repeated) {
            /* packed */
            ibuf pk = { data, data + dlen };
            while (pk.p < pk.end) {
                if (get_varint(&pk, &v)) return eproto(m, "a truncated packed varint");
                if (!(j = dec_value(m, f, v, NULL, 0, depth, &rc))) return rc;
                if ((rc = add(o, f, j))) return rc;
            }
        } else if (!is_varint_type(f->type) && wire == 2) {
            if (!(j = dec_value(m, f, 0, data, dlen, depth, &rc))) return rc;
            if ((rc = add(o, f, j))) return rc;
        } else {
            return eproto(m, "a field of the wrong wire type");
        }
    }
    return 0;
}

int epb_decode(const epb_msg *m, const unsigned char *p, size_t len, json_t **out)
{
    json_t *o = json_object();
    int rc;
    *out = NULL;
    if (!o) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if ((rc = dec_msg(m, p, len, o, 0))) {
        json_decref(o);
        return rc;
    }
    *out = o;
    return 0;
}
