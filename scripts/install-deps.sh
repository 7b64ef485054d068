#!/usr/bin/env bash
# Installs every Debian package the build and the whole test suite need.
# Idempotent: does nothing when all are present; runs apt-get update only when
# something is missing.
#
#   install-deps.sh           the build and the test suite (a missing package is an error)
#   install-deps.sh --demo    only the toolchain `make demo` needs (a C compiler, make, cmake):
#                             the library and the CLI build without any optional backend
#   install-deps.sh --bench   also the peers of `make bench`: etcd (server and etcdctl),
#                             python3-etcd3 (python-etcd3, and the gRPC stubs of the etcd raw
#                             bound) and node with npm; best effort: make bench skips a peer it lacks
set -euo pipefail
bench=0
demo=0
for a in "$@"; do
  case "$a" in
    --bench) bench=1 ;;
    --demo) demo=1 ;;
    *) echo "usage: install-deps.sh [--bench | --demo]" >&2; exit 64 ;;
  esac
done
if [ $demo = 1 ]; then
  # By command, so a compiler or cmake from elsewhere counts.
  pkgs=()
  command -v cc >/dev/null || pkgs+=(gcc libc6-dev)
  command -v make >/dev/null || pkgs+=(make)
  command -v cmake >/dev/null || pkgs+=(cmake)
  if [ ${#pkgs[@]} -eq 0 ]; then
    echo "install-deps: the toolchain is present"
    exit 0
  fi
else
pkgs=(
  build-essential cmake pkg-config
  libhiredis-dev libssl-dev openssl         # Redis backend (RESP + TLS)
  redis-server redis-tools                  # test servers and redis-cli
  python3 python3-redis                     # interop tests (redis-py)
  libzookeeper-mt-dev                       # ZooKeeper backend (the official C client, 3.8)
  zookeeper                                 # test servers (tests/servers/zk.sh); Depends: default-jre,
                                            # which brings default-jre-headless (java)
  python3-kazoo                             # ZooKeeper interop tests (kazoo)
  default-jdk-headless libcurator-recipes-java  # interop_curator: javac and the real Apache Curator
  libslf4j-java                             # (slf4j-nop keeps Curator's log quiet in that test)
  libpq-dev                                 # PostgreSQL backend (libpq)
  postgresql                                # test servers (tests/servers/postgres.sh: initdb, postgres)
  libsqlite3-dev                            # SQLite backend (libsqlite3)
  sqlite3                                   # the sqlite3 CLI (tests/sqlite: a foreign write transaction)
  libmariadb-dev                            # MySQL/MariaDB backend (Connector/C)
  mariadb-server mariadb-client             # test servers (tests/servers/mysql.sh: mariadb-install-db, mariadbd)
  libcurl4-openssl-dev libjansson-dev       # etcd backend (the v3 JSON gateway over HTTP/1.1)
  libnghttp2-dev                            # etcd backend, optional: its gRPC transport (HTTP/2)
  libssl-dev                                # etcd backend, optional: etcds:// over gRPC (OpenSSL headers)
  python3-h2                                # etcd_badinput_grpc: a fake gRPC server answering garbage
  etcd-server etcd-client                   # test servers (tests/servers/etcd.sh) and etcdctl (interop)
  nginx haproxy                             # etcd_proxy: which etcd transport passes which reverse proxy
  procps iproute2 strace                    # ps/pkill/ss used by the test scripts; strace checks poll timeouts
  socat                                     # tests/servers/link.sh: a loopback link tests freeze and cut
  clang libclang-rt-dev                     # scripts/fuzz.sh (make test, make fuzz): libFuzzer, ASan, UBSan
)
fi
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for p in "${pkgs[@]}"; do
  installed "$p" || missing+=("$p")
done
# Bench peers: by command, so a node from elsewhere (e.g. a vendor's nodejs with its own npm) counts.
optional=()
# The event-loop adapters' examples (include/baton/adapters/, docs/async.md):
# their tests skip without these, so they are optional, best effort.
installed libuv1-dev || optional+=(libuv1-dev)
installed libevent-dev || optional+=(libevent-dev)
if [ $bench = 1 ]; then
  command -v etcd >/dev/null || installed etcd-server || optional+=(etcd-server)
  command -v etcdctl >/dev/null || installed etcd-client || optional+=(etcd-client)
  installed python3-etcd3 || optional+=(python3-etcd3)
  command -v node >/dev/null || optional+=(nodejs)
  command -v npm >/dev/null || optional+=(npm)
  command -v flock >/dev/null || optional+=(util-linux)
fi
if [ ${#missing[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present$([ $bench = 1 ] && echo ', and the bench peers')"
  exit 0
fi
[ ${#missing[@]} -eq 0 ] || echo "install-deps: missing: ${missing[*]}"
[ ${#optional[@]} -eq 0 ] || echo "install-deps: optional packages (bench peers, loop adapters) missing: ${optional[*]}"
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    SUDO=sudo
  elif [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: not root; make bench skips what is missing (sudo apt-get install -y ${optional[*]})" >&2
    exit 0
  else
    echo "install-deps: not root; run: sudo apt-get install -y ${missing[*]} ${optional[*]}" >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# One at a time: a peer that cannot be installed is skipped by make bench, not an error.
for p in "${optional[@]}"; do
  $SUDO apt-get install -y -qq --no-install-recommends "$p" >/dev/null ||
    echo "install-deps: could not install $p; make bench will skip what needs it" >&2
done
# The Debian packages may start a system redis on 6379 (or etcd on 2379); the tests
# and make bench never use them, they start their own servers on free ports.
echo "install-deps: done"
