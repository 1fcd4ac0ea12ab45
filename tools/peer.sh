#!/usr/bin/env bash
# Runs the reference system's own test files against this checkout (../shared/peer/run.sh, from the project root)
# with the deliberate differences in tools/peer_deselect.txt deselected: each is a test where the spec-era file and
# the reference's current release (tinygrad 0.14) or a clear-error rule disagree, and fusegrad follows the release.
# Usage: tools/peer.sh [TEST_FILE...] [pytest args]     e.g. tools/peer.sh test/test_ops.py -n 2
set -euo pipefail
cd "$(dirname "$0")/.."
deselect=()
while IFS= read -r line; do
  case "$line" in '' | '#'*) continue ;; esac
  # "--deselect=ID" in one word: run.sh takes a bare test/*.py::* word for a file to run
  deselect+=("--deselect=${line%% | *}")
done <tools/peer_deselect.txt
exec bash ../shared/peer/run.sh "$@" "${deselect[@]}"
