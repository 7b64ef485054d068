#!/bin/bash
# Makes a throwaway CA and a server certificate for loopback TLS deployments
# (tests/servers/redis-sentinel.sh and redis-cluster.sh in TLS mode):
#
#   redis-tls-certs.sh DIR    writes DIR/ca.crt, DIR/server.{crt,key} (CN and
#                             subjectAltName 127.0.0.1 / localhost, signed by
#                             ca.crt; the nodes use it as server and client
#                             certificate) and DIR/wrong.crt (an unrelated CA)
#
# Exits 77 when the openssl command is missing. Certificates already there are kept.
set -u
dir=${1:?usage: redis-tls-certs.sh DIR}
command -v openssl >/dev/null || { echo "redis-tls-certs.sh: the openssl command is not installed" >&2; exit 77; }
mkdir -p "$dir" && cd "$dir" || exit 1
[ -s ca.crt ] && [ -s server.crt ] && [ -s server.key ] && [ -s wrong.crt ] && exit 0
set -e
EC=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${EC[@]}" -keyout ca.key -out ca.crt -days 2 -subj '/CN=baton test CA' 2>/dev/null
openssl req -x509 "${EC[@]}" -keyout wrong.key -out wrong.crt -days 2 -subj '/CN=some other CA' 2>/dev/null
openssl req "${EC[@]}" -keyout server.key -out server.csr -subj '/CN=127.0.0.1' 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >server.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 \
    -extfile server.ext 2>/dev/null
chmod 600 ca.key wrong.key server.key
