#!/usr/bin/python3
"""Writes the seed inputs of tests/fuzz/corpus/<target>/seed-*: a few valid
inputs per target, in the target's input format (see each fuzz_*.c). Run
once by hand when a format changes (the seeds are checked in):

    /usr/bin/python3 tests/fuzz/gen_seeds.py

fuzz_etcd_h2's seeds are a server's side of a real HTTP/2 exchange, made
with python3-h2 (Debian's python3-h2, as tests/etcd's fake server)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# ---- protobuf, by hand (field numbers from etcd's rpc.proto, as pb.c) ----
def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def vfield(num, v):
    return varint(num << 3) + varint(v)


def lfield(num, payload):
    if isinstance(payload, str):
        payload = payload.encode()
    return varint(num << 3 | 2) + varint(len(payload)) + payload


HEADER = lfield(1, vfield(1, 14841639068965178418) + vfield(2, 10276657743932975437) + vfield(3, 42) + vfield(4, 2))
KV = (lfield(1, "app/job/694d8a3b2c1e0f07") + vfield(2, 40) + vfield(3, 41) + vfield(4, 1) + lfield(5, "host 1 2")
      + vfield(6, 7587870707453394443))
RANGE_RESP = HEADER + lfield(2, KV) + vfield(4, 1)
PUT_RESP = HEADER
DEL_RESP = HEADER + vfield(2, 1) + lfield(3, KV)
TXN_RESP = HEADER + vfield(2, 1) + lfield(3, lfield(1, RANGE_RESP)) + lfield(3, lfield(2, PUT_RESP))
GRANT_RESP = HEADER + vfield(2, 7587870707453394443) + vfield(3, 30)
KA_RESP = HEADER + vfield(2, 7587870707453394443) + vfield(3, 30)
TTL_RESP = HEADER + vfield(2, 7587870707453394443) + vfield(3, 29) + vfield(4, 30) + lfield(5, "app/job/1")
AUTH_RESP = HEADER + lfield(2, "XzNlZmJmZGcuMTI")
WATCH_CREATED = HEADER + vfield(2, 1) + vfield(3, 1)
WATCH_EVENT = HEADER + vfield(2, 1) + lfield(11, vfield(1, 1) + lfield(2, KV) + lfield(3, KV))
TXN_REQ = (lfield(1, vfield(1, 0) + vfield(2, 1) + lfield(3, "app/job/1") + vfield(5, 0))
           + lfield(2, lfield(2, lfield(1, "app/job/1") + lfield(2, "host 1 2") + vfield(3, 7587870707453394443)))
           + lfield(3, lfield(1, lfield(1, "app/job/1") + vfield(3, 1) + vfield(5, 1) + vfield(6, 2))))
WATCH_REQ = lfield(1, lfield(1, "app/job/1") + vfield(3, 42) + varint(5 << 3 | 2) + varint(1) + varint(0))

# (paths index in fuzz_etcd_pb.c, reply bytes)
PATHS = ["/v3/kv/range", "/v3/kv/put", "/v3/kv/deleterange", "/v3/kv/txn", "/v3/lease/grant", "/v3/lease/revoke",
         "/v3/lease/keepalive", "/v3/lease/timetolive", "/v3/auth/authenticate", "/v3/watch"]
REPLIES = [("range", 0, RANGE_RESP), ("put", 1, PUT_RESP), ("deleterange", 2, DEL_RESP), ("txn", 3, TXN_RESP),
           ("grant", 4, GRANT_RESP), ("revoke", 5, HEADER), ("keepalive", 6, KA_RESP), ("timetolive", 7, TTL_RESP),
           ("authenticate", 8, AUTH_RESP), ("watch-created", 9, WATCH_CREATED), ("watch-event", 9, WATCH_EVENT)]


def pb_seeds():
    for name, i, b in REPLIES:
        write("etcd_pb", name, bytes([i << 1]) + b)
    write("etcd_pb", "txn-request", bytes([3 << 1 | 1]) + TXN_REQ)
    write("etcd_pb", "watch-request", bytes([9 << 1 | 1]) + WATCH_REQ)


def grpc_frame(msg):
    return b"\0" + len(msg).to_bytes(4, "big") + msg


def h2_server_bytes(messages, status=0, message=None, http=200, ctype=b"application/grpc"):
    """What an etcd member sends for one call on a new connection."""
    import h2.config
    import h2.connection
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    client.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", "/x"), (":authority", "a"),
                            ("content-type", "application/grpc"), ("te", "trailers")])
    client.send_data(1, grpc_frame(b""), end_stream=True)
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, validate_inbound_headers=False,
                                                                  validate_outbound_headers=False,
                                                                  normalize_outbound_headers=False))
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    server.send_headers(1, [(":status", str(http)), ("content-type", ctype)])
    for m in messages:
        server.send_data(1, grpc_frame(m))
    trailers = [("grpc-status", str(status))]
    if message:
        trailers.append(("grpc-message", message))
    server.send_headers(1, trailers, end_stream=True)
    return server.data_to_send()


def h2_seeds():
    # first byte: the method (index in PATHS), bit 4 stop at the first message,
    # bit 5 keep the stream open (a watch), bit 6 send a token
    for name, i, b in REPLIES:
        flags = i | (0x30 if i == 9 else 0)
        write("etcd_h2", name, bytes([flags]) + h2_server_bytes([b]))
    write("etcd_h2", "watch-two-messages", bytes([9]) + h2_server_bytes([WATCH_CREATED, WATCH_EVENT]))
    write("etcd_h2", "error-status", bytes([3 | 0x40]) + h2_server_bytes([], 9, "etcdserver: request timed out%2E"))
    write("etcd_h2", "auth-error", bytes([8]) + h2_server_bytes([], 3, "etcdserver: authentication failed"))
    write("etcd_h2", "http-503", bytes([0]) + h2_server_bytes([], 14, None, 503, b"text/plain"))


def redis_seeds():
    # first byte: bit 0 AUTH with a password, bit 1 with a user, bit 2 SELECT 3;
    # then the replies in order (AUTH's, SELECT's, PING's, then any more)
    write("redis", "pong", b"\0+PONG\r\n")
    write("redis", "auth-select-pong", b"\x07+OK\r\n+OK\r\n+PONG\r\n")
    write("redis", "auth-wrongpass", b"\x01-WRONGPASS invalid username-password pair or user is disabled.\r\n")
    write("redis", "noauth", b"\0-NOAUTH Authentication required.\r\n")
    write("redis", "bulk", b"\0$5\r\nhello\r\n")
    write("redis", "nil", b"\0$-1\r\n*-1\r\n")
    write("redis", "integer", b"\0:1234567890123\r\n")
    write("redis", "array", b"\0*3\r\n$7\r\nmessage\r\n$14\r\nbaton:{a}:chan\r\n:1\r\n")
    write("redis", "nested", b"\0*2\r\n$1\r\n0\r\n*2\r\n$3\r\nk/a\r\n$3\r\nk/b\r\n")
    info = b"# Commandstats\r\ncmdstat_evalsha:calls=12,usec=40\r\ncmdstat_ping:calls=3,usec=1,usec_per_call=0.3\r\n"
    write("redis", "info-commandstats", b"\0$%d\r\n%s\r\n" % (len(info), info))
    write("redis", "subscriber", b"\0+PONG\r\n*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$2\r\nhi\r\n")


def uri_seeds():
    for i, u in enumerate([
        "file:///tmp/baton-1000",
        "file://localhost/var/lock/app?shared=group",
        "redis://127.0.0.1:6379/0?prefix=app&layout=simple",
        "rediss://user:s3cret@redis.example:6380/2?cacert=ca.pem&insecure=0",
        "redlock://h1:6379,h2:6380,[::1]:6381/0?node_timeout_ms=50",
        "zk://zk1:2181,zk2:2181/baton?session_timeout_ms=10000",
        "postgres://baton:p%40ss@[2001:db8::1]:5432/app?mode=row&sslmode=require",
        "mysql://:pw@db/app?mode=lease&table=t",
        "etcd://u:p@a:2379,b:2379/prefix/?transport=grpc&ttl=10",
        "sqlite:///var/lib/app/locks.db?busy_timeout_ms=100",
    ]):
        write("uri", "%02d" % i, u)


def options_seeds():
    # first byte: the scheme (index in fuzz_options.c), then "path?options"
    # (file and sqlite: the options alone); no '/' (see fuzz_options.c)
    for name, s, rest in [
        ("file", 0, "shared=group"),
        ("sqlite", 1, "mode=lease&busy_timeout_ms=100&table=t"),
        ("redis", 2, "0?prefix=app&layout=simple&wait_replicas=1&wait_ms=100"),
        ("rediss", 3, "1?insecure=1&connect_timeout_ms=100&io_timeout_ms=200"),
        ("redlock", 4, "0?retry_delay_ms=10&node_timeout_ms=50&prefix=p"),
        ("zk", 5, "baton?session_timeout_ms=1000&lost_after_ms=500"),
        ("postgres", 6, "app?mode=row&schema=s&table=t&prepare=0&sslmode=disable&application_name=x"),
        ("mysql", 7, "app?mode=lease&table=t&connect_timeout_ms=100"),
        ("etcd", 8, "prefix?transport=gateway&ttl=10&timeout_ms=100"),
        ("etcds", 9, "?transport=grpc&cacert=ca.pem"),
    ]:
        write("options", name, bytes([s]) + rest.encode())


def file_seeds():
    # first byte: 0 lock.fz, 1 sem..fz, 2 perm.fz, 3 perm.fz+0 (fuzz_file.c)
    holder = "host-a 4242 4243"
    write("file", "lock-record", b"\0" + ("baton-lock 1\nfence %020d\nheld %d\nholder %-200.200s\n"
                                         % (1764000000000000, 0, holder)).encode())
    write("file", "lock-held", b"\0" + ("baton-lock 1\nfence %020d\nheld %d\nholder %-200.200s\n"
                                       % (17, 1, holder)).encode())
    write("file", "lock-empty", b"\0")
    write("file", "sem-count", b"\1baton-sem 1\npermits 3\nset 1\n")
    write("file", "perm-count", b"\2" + ("baton-permits 1\npermits %+020d\nslots %010d\n" % (2, 2)).encode())
    write("file", "perm-slot", b"\3")


if __name__ == "__main__":
    uri_seeds()
    options_seeds()
    file_seeds()
    redis_seeds()
    pb_seeds()
    h2_seeds()
    print("seeds written under", os.path.join(HERE, "corpus"))
