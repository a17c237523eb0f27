#!/usr/bin/env bash
# The semver check of a release (issue 56): cargo-semver-checks compares the public API of every published crate
# with the baseline tag's and names each change that needs a major (or minor) version, so a release says what it
# breaks. A release script, not part of .ci/run: installing the tool compiles it (minutes on two cores), and it
# builds each crate's rustdoc twice (the baseline and the tree). api/*.txt (scripts/public_api.py, checked by CI)
# catches every change of the API between releases; this names the semver class of the sum of them.
#
#   scripts/semver.sh [BASELINE]     # default: the tag api-baseline, this wave's API
set -euo pipefail
cd "$(dirname "$0")/.."
baseline=${1:-api-baseline}
version=0.51.0
if ! cargo semver-checks --version 2>/dev/null | grep -q "$version"; then
  cargo install cargo-semver-checks --locked --version "$version"
fi
git rev-parse --verify --quiet "$baseline^{commit}" >/dev/null || {
  echo "semver: no baseline $baseline (git fetch --tags)" >&2
  exit 2
}
cargo semver-checks check-release --baseline-rev "$baseline" --all-features \
  -p lock-core -p lock-redis-rs -p lock-fred -p lock-etcd -p lock-testkit
