#!/usr/bin/env bash
# Creates clients/python/.venv and installs the package (editable, so the scripts are found in ../../wire/scripts)
# with its test extra, from PyPI, pinned by constraints.txt. Idempotent: a stamp keyed on the SHA-256 of
# pyproject.toml + constraints.txt makes a re-run a no-op.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
venv="$here/.venv"
python="${PYTHON:-python3}"
stamp="$venv/.wirelock-setup-stamp"

key="$(cat pyproject.toml constraints.txt | "$python" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$key" && -x "$venv/bin/python" ]]; then
    echo "setup.sh: $venv is up to date (nothing to do)"
    exit 0
fi

if [[ ! -x "$venv/bin/python" ]]; then
    echo "setup.sh: creating $venv"
    if ! "$python" -m venv "$venv"; then
        echo "setup.sh: ERROR: '$python -m venv' failed (is the venv module installed?)" >&2
        exit 1
    fi
fi
rm -f "$stamp"

echo "setup.sh: installing redis-wire-lock[test] (pinned by constraints.txt)"
if ! PIP_CONSTRAINT="$here/constraints.txt" "$venv/bin/python" -m pip install --disable-pip-version-check -q \
        -c "$here/constraints.txt" -e "$here[test]"; then
    echo "setup.sh: ERROR: pip install failed (see above); is PyPI reachable? $venv left without a stamp" >&2
    exit 1
fi

echo "$key" > "$stamp"
echo "setup.sh: done. Run the tests with: $venv/bin/python -m pytest -q $here/tests"
