#!/usr/bin/python3
"""The etcd write latency: N single Puts of one key, one after the other, over gRPC (Debian's
python3-etcd3 stubs, etcd3.etcdrpc, one channel) or the v3 JSON gateway (one keep-alive HTTP/1.1
connection, as ../shared/peers/etcdraw.py), each timed alone; p50/p99 and puts/s. A Put is one
raft entry, one fsync of the WAL on a single member: the write a lock's handoff waits for.
With GAP_MS, each Put follows a pause of that long (as a handoff's release follows the hold): an
isolated write, which costs more than one of a back-to-back loop on a loaded machine (etcd's
goroutines park between requests and must be woken).
usage: etcdput.py grpc|gateway PORT N [GAP_MS]"""
import base64, http.client, json, sys, time

transport, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
gap = float(sys.argv[4]) / 1e3 if len(sys.argv) > 4 else 0.0
k, v = b"etcdput/key", b"x" * 16
if transport == "grpc":
    import grpc
    from etcd3 import etcdrpc
    kv = etcdrpc.KVStub(grpc.insecure_channel("127.0.0.1:%d" % port))
    req = etcdrpc.PutRequest(key=k, value=v)
    put = lambda: kv.Put(req)
elif transport == "gateway":
    c = http.client.HTTPConnection("127.0.0.1", port)
    body = json.dumps({"key": base64.b64encode(k).decode(), "value": base64.b64encode(v).decode()})
    def put():
        c.request("POST", "/v3/kv/put", body)
        r = c.getresponse()
        if r.status != 200:
            raise SystemExit("etcdput: HTTP %d: %s" % (r.status, r.read()[:200]))
        r.read()
else:
    raise SystemExit("usage: etcdput.py grpc|gateway PORT N [GAP_MS]")
for _ in range(min(n // 10, 50)):       # warm-up: the connection, the server's first entries
    put()
lat = []
t0 = time.perf_counter()
for _ in range(n):
    if gap:
        time.sleep(gap)
    a = time.perf_counter()
    put()
    lat.append(time.perf_counter() - a)
dt = time.perf_counter() - t0 - gap * n
lat.sort()
print(json.dumps({"peer": "etcd put " + transport, "workload": "put", "transport": transport, "n": n, "gap_ms": gap * 1e3,
                  "puts_per_s": round(n / dt, 1), "put_p50_us": round(lat[len(lat) // 2] * 1e6, 1),
                  "put_p99_us": round(lat[int(len(lat) * 0.99)] * 1e6, 1)}))
