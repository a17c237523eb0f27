#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs redis-server when it is missing, then runs every test.
#
#   scripts/test.sh [extra cargo test arguments]
#   scripts/test.sh --install-only     (installs what is missing, runs nothing)
#   scripts/test.sh --valkey [...]     (the same on Valkey 8: scripts/valkey.sh finds or fetches valkey-server)
#
# redis-server (and OpenSSL's development files, for the native-tls features, Python and Node.js for the other
# languages' lock packages in tests/interop.rs, and protoc, etcd and etcdctl for lock-etcd) come from the system's
# packages:
# apt-get (Debian, Ubuntu), dnf or yum (Fedora, RHEL), apk (Alpine), pacman (Arch), brew (macOS); as root, or
# through `sudo` when it needs no password. Anywhere else, or when the install fails, it stops at once with what to
# do. REDIS_SERVER=/path/to/redis-server uses that binary
# and installs nothing. .ci/run calls this script, so CI and a newcomer run the same command.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() {
  echo "scripts/test.sh: $*" >&2
  echo "scripts/test.sh: install it yourself, then run this script again (redis-server 7.0 or newer:" >&2
  echo "scripts/test.sh: https://redis.io/docs/latest/operate/oss_and_stack/install/, or REDIS_SERVER=/path/to/it)." >&2
  exit 1
}

have_redis() {
  if [ -n "${REDIS_SERVER:-}" ]; then
    [ -x "$REDIS_SERVER" ] || fail "REDIS_SERVER=$REDIS_SERVER is not an executable file"
    return 0
  fi
  command -v redis-server >/dev/null 2>&1
}

# Runs a package manager as root: directly, or through sudo when that needs no password.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo "$@"
  else
    fail "redis-server is missing, and installing it needs root (or sudo without a password)"
  fi
}

# Installs the named packages with the first package manager found; `names` maps each manager to its names.
install_packages() {
  local what=$1 apt=$2 dnf=$3 apk=$4 pacman=$5 brew=$6
  echo "scripts/test.sh: $what is missing; installing it from the system's packages"
  if command -v apt-get >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    as_root env DEBIAN_FRONTEND=noninteractive bash -c \
      "timeout 300 apt-get update -qq && timeout 300 apt-get install -y -qq --no-install-recommends $apt >/dev/null" \
      || fail "apt-get could not install $apt"
  elif command -v dnf >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    as_root timeout 300 dnf install -y -q $dnf || fail "dnf could not install $dnf"
  elif command -v yum >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    as_root timeout 300 yum install -y -q $dnf || fail "yum could not install $dnf"
  elif command -v apk >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    as_root timeout 300 apk add -q $apk || fail "apk could not install $apk"
  elif command -v pacman >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    as_root timeout 300 pacman -S --noconfirm --needed $pacman || fail "pacman could not install $pacman"
  elif command -v brew >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    brew install $brew || fail "brew could not install $brew"
  else
    fail "$what is missing and no known package manager (apt-get, dnf, yum, apk, pacman, brew) was found"
  fi
  hash -r
}

install_redis() {
  install_packages redis-server redis-server redis redis redis redis
  command -v redis-server >/dev/null 2>&1 || fail "the package was installed but redis-server is still not on PATH"
}

# The `tls-native-tls` features (built by --all-features) link OpenSSL through native-tls: its headers and pkg-config.
have_openssl_headers() {
  command -v pkg-config >/dev/null 2>&1 && pkg-config --exists openssl
}

install_openssl_headers() {
  install_packages "OpenSSL's development files" "libssl-dev pkg-config" "openssl-devel pkgconf-pkg-config" \
    "openssl-dev pkgconf" "openssl pkgconf" "openssl@3 pkg-config"
  have_openssl_headers || fail "OpenSSL's development files were installed but pkg-config does not find them"
}

# lock-etcd: etcd-client compiles etcd's protobuf definitions with `protoc`, and its tests start real etcd members
# and drive the real etcdctl (Debian's etcd-server and etcd-client, 3.4.23 on Debian 12).
have_etcd_tools() {
  command -v etcd >/dev/null 2>&1 && command -v etcdctl >/dev/null 2>&1 && command -v protoc >/dev/null 2>&1 &&
    protoc_has_well_known_types
}

# etcd's protos import protobuf's well-known types (descriptor.proto, struct.proto): protoc must find them.
protoc_has_well_known_types() {
  local dir
  dir=$(mktemp -d)
  printf 'syntax = "proto3";\nimport "google/protobuf/descriptor.proto";\n' >"$dir/probe.proto"
  protoc -I "$dir" --descriptor_set_out=/dev/null "$dir/probe.proto" >/dev/null 2>&1
  local status=$?
  rm -rf "$dir"
  return "$status"
}

install_etcd_tools() {
  install_packages "protoc (with its well-known types), etcd or etcdctl" \
    "protobuf-compiler libprotobuf-dev etcd-server etcd-client" "protobuf-compiler protobuf-devel etcd" \
    "protobuf-dev etcd etcd-ctl" "protobuf etcd" "protobuf etcd"
  have_etcd_tools || fail "protoc (with protobuf's well-known types), etcd and etcdctl are needed for lock-etcd"
}

# tests/interop.rs runs the other languages' lock packages (interop/setup.sh installs them from PyPI and npm): a
# Python 3.11+ with venv, Node.js and npm.
have_interop_tools() {
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 &&
    python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1
}

install_interop_tools() {
  install_packages "Python 3.11+ (with venv) or Node.js" "python3 python3-venv nodejs npm" "python3 nodejs npm" \
    "python3 py3-pip nodejs npm" "python nodejs npm" "python node"
  have_interop_tools || fail "Python 3.11+ with venv, Node.js and npm are needed for tests/interop.rs"
}

# The whole suite on Valkey 8 instead (fetched when none is installed, see scripts/valkey.sh).
if [ "${1:-}" = "--valkey" ]; then
  shift
  REDIS_SERVER=$(scripts/valkey.sh)
  export REDIS_SERVER
fi
have_redis || install_redis
have_openssl_headers || install_openssl_headers
have_interop_tools || install_interop_tools
have_etcd_tools || install_etcd_tools
# The other languages' lock packages (PyPI, npm) that tests/interop.rs contends with, each in a driver process;
# and the Python client written from WIRE.md (clients/python), which tests/cross_language.rs runs beside ours.
interop/setup.sh
clients/python/setup.sh
if [ "${1:-}" = "--install-only" ]; then
  exit 0
fi
"${REDIS_SERVER:-redis-server}" --version
# The Sentinel tests run `redis-server sentinel.conf --sentinel`: the same binary, no other package needed.
workspace=(--workspace --all-features --exclude lock-bench)
cargo test "${workspace[@]}" --no-run "$@"

# Most tests wait on locks' TTLs and servers rather than compute, so the test targets run in lanes at once
# (a lane is one `cargo test` naming its targets; the features, and so the build above, are the workspace's in
# each). Lanes A and B take the long targets, balanced by their running time; lane C takes the unit tests, the
# doctests and every other target, so a new test file is run without being listed here. Each lane's output is
# printed whole once all are done.
lane_a=(production faults cluster conformance_smol conformance)
lane_b=(explore sentinel conformance_memory redlock_memory interleavings renewal replicas)
others=()
for file in lock-*/tests/*.rs examples/tests/*.rs; do
  [ -e "$file" ] || continue
  # lock-etcd's targets run in a lane of their own (lane E below): they wait on etcd leases, whole seconds long.
  case "$file" in lock-etcd/*) continue ;; esac
  name=$(basename "$file" .rs)
  case " ${lane_a[*]} ${lane_b[*]} ${others[*]} " in
    *" $name "*) ;;
    *) others+=("$name") ;;
  esac
done
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
run_lane() {
  local lane=$1
  shift
  if "$@" >"$logs/$lane.log" 2>&1; then echo ok >"$logs/$lane.status"; else echo failed >"$logs/$lane.status"; fi
}
targets() { for name in "$@"; do printf -- '--test %s ' "$name"; done; }
# Every lane runs all of its targets even when one fails (--no-fail-fast), so one failure does not hide another.
# Lane C's two commands (doctests cannot be named beside other targets); its arguments are the `--test` options.
lane_c() {
  local status=0
  cargo test "${workspace[@]}" --no-fail-fast --lib --bins "$@" "${extra[@]}" || status=1
  cargo test "${workspace[@]}" --no-fail-fast --doc "${extra[@]}" || status=1
  return "$status"
}
extra=("$@")
# shellcheck disable=SC2046
run_lane a cargo test "${workspace[@]}" --no-fail-fast $(targets "${lane_a[@]}") "$@" &
# shellcheck disable=SC2046
run_lane b cargo test "${workspace[@]}" --no-fail-fast $(targets "${lane_b[@]}") "$@" &
# shellcheck disable=SC2046
run_lane c lane_c $(targets "${others[@]}") &
# The drivers' own tests (each adapts its package faithfully) and the Python client's, with every wire vector: they
# mostly wait on servers, so a lane of their own.
lane_d() {
  python3 wire/check_arguments.py &&
    interop/python/.venv/bin/python -m pytest -q interop/python/tests && (cd interop/node && node --test test/) &&
    clients/python/.venv/bin/python -m pytest -q clients/python/tests
}
run_lane d lane_d &
# lock-etcd on real etcd members (one, and a cluster of three) and the real etcdctl: its cases mostly sleep on leases
# of whole seconds, so they run many at a time. Its targets are named with the workspace's features, as every lane
# is, so nothing is compiled again (`-p lock-etcd` alone would resolve other features and rebuild 55 crates).
lane_e() {
  local targets=()
  for file in lock-etcd/tests/*.rs; do targets+=(--test "$(basename "$file" .rs)"); done
  RUST_TEST_THREADS=16 cargo test "${workspace[@]}" --no-fail-fast "${targets[@]}" "${extra[@]}"
}
run_lane e lane_e &
wait
failed=0
for lane in a b c d e; do
  echo "scripts/test.sh: lane $lane: $(cat "$logs/$lane.status")"
  cat "$logs/$lane.log"
  [ "$(cat "$logs/$lane.status")" = ok ] || failed=1
done
if [ "$failed" -ne 0 ]; then
  echo "scripts/test.sh: a lane failed (its output is above)" >&2
  exit 1
fi
# The smol path on its own: with every feature on, lock-core also has async-std's executor and prefers it for
# non-tokio spawns, so the run above does not show that smol alone works. This build leaves async-std out (the
# conformance suite over a real server, on smol; the in-memory suite adds no other smol path).
cargo test -p lock-redis-rs --no-default-features --features smol --test conformance_smol --test renewal "$@"
# lock-fred as most applications build it, without a TLS feature: a TLS URL is refused before any I/O instead of
# connecting over plain TCP and sending its password in clear (the run above has TLS on, where the handshake fails).
cargo test -p lock-fred --lib --test backend tls "$@"
