#!/usr/bin/env bash
# Refreshes requirements/test.txt, the exact versions the test command installs (the test, docs and
# lint tools and everything gyreflow needs); pyproject.toml keeps the lower bounds users install with.
# Run it when a dependency or a lower bound changes, then run bash scripts/test.sh and commit both.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
tools=$(mktemp -d "${TMPDIR:-/tmp}/gyreflow-lock.XXXXXX")
trap 'rm -rf "$tools"' EXIT

# uv's resolver settles the whole set at once (pip's backtracks through s3fs/aiobotocore releases).
"$PYTHON" -m venv "$tools/venv"
"$tools/venv/bin/python" -m pip install --quiet --disable-pip-version-check "uv>=0.5"
"$tools/venv/bin/uv" pip compile pyproject.toml --extra test --universal --python-version 3.11 \
  --quiet --custom-compile-command "bash scripts/lock.sh" --output-file requirements/test.txt
echo "requirements/test.txt: $(grep -c '==' requirements/test.txt) pinned packages"
