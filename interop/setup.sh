#!/usr/bin/env bash
# Installs the peer drivers' real lock packages (see README.md):
#   interop/python/.venv  <- PyPI: the python project (pyproject.toml) + pytest, pinned
#   interop/node/node_modules <- npm ci (package-lock.json)
# Idempotent: a stamp (hash of the pin files) makes a second run a no-op.
# Needs python3 (>= 3.11), node (>= 20) + npm, and, for the self-tests, redis-server.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="$HERE/python"
NODE="$HERE/node"

die() { echo "interop/setup.sh: ERROR: $*" >&2; exit 1; }
hash_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

command -v python3 >/dev/null || die "python3 not found"
command -v node >/dev/null || die "node not found"
command -v npm >/dev/null || die "npm not found"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "python3 >= 3.11 needed"
command -v redis-server >/dev/null || echo "interop/setup.sh: warning: redis-server not on PATH (the self-tests need it)" >&2

# ---- Python ---------------------------------------------------------------------------
py_stamp="$(hash_of "$PY/pyproject.toml" "$PY/constraints.txt")"
if [[ -x "$PY/.venv/bin/python" && "$(cat "$PY/.venv/.interop-stamp" 2>/dev/null)" == "$py_stamp" ]]; then
  echo "python: up to date ($PY/.venv)"
else
  echo "python: creating $PY/.venv and installing from PyPI ..."
  python3 -m venv "$PY/.venv"
  rm -f "$PY/.venv/.interop-stamp"
  if ! "$PY/.venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      --timeout 30 --retries 2 -c "$PY/constraints.txt" -e "$PY[test]"; then
    die "pip could not install the python peers (is PyPI reachable? see the pip error above)"
  fi
  echo "$py_stamp" > "$PY/.venv/.interop-stamp"
fi

# ---- Node -----------------------------------------------------------------------------
node_stamp="$(hash_of "$NODE/package.json" "$NODE/package-lock.json")"
if [[ -d "$NODE/node_modules" && "$(cat "$NODE/node_modules/.interop-stamp" 2>/dev/null)" == "$node_stamp" ]]; then
  echo "node: up to date ($NODE/node_modules)"
else
  echo "node: npm ci in $NODE ..."
  if ! (cd "$NODE" && npm ci --no-audit --no-fund --loglevel=error \
      --fetch-retries=2 --fetch-timeout=30000); then
    die "npm ci failed (is the npm registry reachable? see the npm error above)"
  fi
  echo "$node_stamp" > "$NODE/node_modules/.interop-stamp"
fi

echo "interop: ready. Self-tests: $PY/.venv/bin/python -m pytest $PY/tests ; (cd $NODE && node --test test/)"
