#!/usr/bin/python3
"""Raw etcd bound for a lock cycle over gRPC: the two writes of ../shared/peers/etcdraw.py (a
create-if-absent Txn, then a DeleteRange) sent with the generated stubs Debian's python3-etcd3
ships (etcd3.etcdrpc), on one channel, N cycles. Same JSON fields as etcdraw.py.
usage: etcdgrpcraw.py PORT N"""
import json, sys, time

import grpc
from etcd3 import etcdrpc

port, n = int(sys.argv[1]), int(sys.argv[2])
ch = grpc.insecure_channel("127.0.0.1:%d" % port)
kv = etcdrpc.KVStub(ch)
k = b"etcdgrpcraw/lock"
# The request objects are built once: the bound is the round trips, not protobuf's constructors.
txn = etcdrpc.TxnRequest(
    compare=[etcdrpc.Compare(key=k, result=etcdrpc.Compare.EQUAL, target=etcdrpc.Compare.CREATE,
                             create_revision=0)],
    success=[etcdrpc.RequestOp(request_put=etcdrpc.PutRequest(key=k, value=b""))])
dele = etcdrpc.DeleteRangeRequest(key=k)
kv.Range(etcdrpc.RangeRequest(key=k))      # connect before the clock starts, as etcdraw's first request does not
t0 = time.perf_counter()
for _ in range(n):
    if not kv.Txn(txn).succeeded:
        raise SystemExit("etcdgrpcraw: the create-if-absent txn failed: is another client on %r?" % k)
    kv.DeleteRange(dele)
print(json.dumps({"peer": "etcd-raw grpc txn+delete", "n": n,
                  "pairs_per_s": round(n / (time.perf_counter() - t0), 1)}))
