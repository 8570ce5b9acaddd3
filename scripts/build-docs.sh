#!/usr/bin/env bash
# Build the documentation site (mkdocs, API reference by mkdocstrings) with --strict: any broken
# link, missing page or docstring the reference cannot render fails the build.
# The packages live in top-level folders (api/, plan/, ...) mapped to gyreflow.* at install time;
# the reference reads them statically through a folder of links laid out as the installed package.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
src=.cache/docs-src/gyreflow
rm -rf .cache/docs-src
mkdir -p "$src"
for file in gyreflow/*.py; do ln -s "$PWD/$file" "$src/$(basename "$file")"; done
for package in api plan scheduler runtime state; do ln -s "$PWD/$package" "$src/$package"; done
exec "$PYTHON" -m mkdocs build --strict --quiet "$@"
