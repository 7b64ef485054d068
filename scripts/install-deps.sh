#!/usr/bin/env bash
# Installs every Debian package the build and the whole test suite need.
# Idempotent: does nothing when all are present; runs apt-get update only when
# something is missing.
set -euo pipefail
pkgs=(
  build-essential cmake pkg-config
  libhiredis-dev libssl-dev openssl         # Redis backend (RESP + TLS)
  redis-server redis-tools                  # test servers and redis-cli
  python3 python3-redis                     # interop tests (redis-py)
  procps iproute2                           # ps/pkill/ss used by the test scripts
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "install-deps: missing: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    SUDO=sudo
  else
    echo "install-deps: not root; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
# The Debian package may start a system redis on 6379; the tests never use it,
# they start their own servers on free ports.
echo "install-deps: done"
