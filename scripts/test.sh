#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs redis-server when it is missing, then runs every test.
#
#   scripts/test.sh [extra cargo test arguments]
#
# redis-server comes from the system's packages: apt-get (Debian, Ubuntu), dnf or yum (Fedora, RHEL), apk
# (Alpine), pacman (Arch), brew (macOS); as root, or through `sudo` when it needs no password. Anywhere else, or
# when the install fails, it stops at once with what to do. REDIS_SERVER=/path/to/redis-server uses that binary
# and installs nothing. .ci/run calls this script, so CI and a newcomer run the same command.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() {
  echo "scripts/test.sh: $*" >&2
  echo "scripts/test.sh: install redis-server 7.0 or newer yourself (https://redis.io/docs/latest/operate/oss_and_stack/install/)," >&2
  echo "scripts/test.sh: or point REDIS_SERVER at one, then run this script again." >&2
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

install_redis() {
  echo "scripts/test.sh: redis-server is not installed; installing it from the system's packages"
  if command -v apt-get >/dev/null 2>&1; then
    as_root env DEBIAN_FRONTEND=noninteractive bash -c \
      'timeout 300 apt-get update -qq && timeout 300 apt-get install -y -qq --no-install-recommends redis-server >/dev/null' \
      || fail "apt-get could not install redis-server"
  elif command -v dnf >/dev/null 2>&1; then
    as_root timeout 300 dnf install -y -q redis || fail "dnf could not install redis"
  elif command -v yum >/dev/null 2>&1; then
    as_root timeout 300 yum install -y -q redis || fail "yum could not install redis"
  elif command -v apk >/dev/null 2>&1; then
    as_root timeout 300 apk add -q redis || fail "apk could not install redis"
  elif command -v pacman >/dev/null 2>&1; then
    as_root timeout 300 pacman -S --noconfirm --needed redis || fail "pacman could not install redis"
  elif command -v brew >/dev/null 2>&1; then
    brew install redis || fail "brew could not install redis"
  else
    fail "redis-server is missing and no known package manager (apt-get, dnf, yum, apk, pacman, brew) was found"
  fi
  hash -r
  command -v redis-server >/dev/null 2>&1 || fail "the package was installed but redis-server is still not on PATH"
}

have_redis || install_redis
"${REDIS_SERVER:-redis-server}" --version
# The Sentinel tests run `redis-server sentinel.conf --sentinel`: the same binary, no other package needed.
exec cargo test --workspace --all-features --exclude lock-bench "$@"
