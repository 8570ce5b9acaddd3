#!/usr/bin/env bash
# The test command: installs gyreflow with its test dependencies, checks Java 17, runs the suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k windows).
# scripts/test.sh --fast: the in-process cases only (no Spark, no processes of their own, no docs
# build), for the edit-test loop; under 3 minutes on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
FAST=0
STARTED=$SECONDS
# Each step names itself with the seconds spent so far: where the suite's time goes.
step() { echo "== [$((SECONDS - STARTED)) s] $*"; }
if [ "${1:-}" = "--fast" ]; then
  FAST=1
  shift
fi

step "installing gyreflow and test dependencies (versions from requirements/test.txt)"
# The lock pins every test, docs and lint tool and what they pull in, so a new machine resolves
# nothing; scripts/lock.sh refreshes it. uv installs it (in 45 s where pip takes 2 minutes here).
# Every test starts Python processes (jobs, Spark's Python workers, snapshot writers): they load
# compiled bytecode, written at install for the packages and on first import for gyreflow. With
# PYTHONDONTWRITEBYTECODE set, each process would compile all it imports again (about 1 s of CPU).
unset PYTHONDONTWRITEBYTECODE
"$PYTHON" -m pip install --quiet --disable-pip-version-check "uv>=0.5,<1"
"$PYTHON" -m uv pip install --quiet --compile-bytecode --python "$PYTHON" -r requirements/test.txt \
  -e ".[test]"
"$PYTHON" -m compileall -q -j 0 api plan runtime scheduler state tests examples benchmarks >/dev/null

if [ "$FAST" = 0 ]; then
step "checking Java 17 (needed by the Spark environment)"
if ! java -version 2>&1 | grep -qE 'version "17'; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  fi
  java -version 2>&1 | grep -qE 'version "17' || {
    echo "Java 17 is required: install openjdk-17 and put java on PATH" >&2
    exit 1
  }
fi

step "a class-data archive for the Spark driver JVMs the tests start (once per machine, meanwhile the next steps)"
export GYREFLOW_TEST_SPARK_DRIVER_OPTIONS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
archive_path=$(mktemp "${TMPDIR:-/tmp}/gyreflow-class-archive.XXXXXX")
"$PYTHON" scripts/spark_class_archive.py .cache/spark-classes "$GYREFLOW_TEST_SPARK_DRIVER_OPTIONS" \
  >"$archive_path" 2>/dev/null &
archive_maker=$!

step "checking Chromium, ChromeDriver and Graphviz (the web page and explain tests)"
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
command -v dot >/dev/null || missing+=(graphviz)
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "install ${missing[*]} (Debian packages) to run the browser and Graphviz tests" >&2
    exit 1
  fi
fi

step "fetching Mermaid (its own parser checks explain's Mermaid output)"
mermaid_dir=.cache/mermaid
if [ ! -f "$mermaid_dir/package/dist/mermaid.min.js" ]; then
  mkdir -p "$mermaid_dir"
  (cd "$mermaid_dir" && npm pack --silent mermaid@11 >/dev/null && tar -xzf mermaid-*.tgz)
fi
export GYREFLOW_TEST_MERMAID_JS="$PWD/$mermaid_dir/package/dist/mermaid.min.js"

fi

step "starting a throwaway PostgreSQL server for the JDBC tests"
if [ -z "${GYREFLOW_TEST_POSTGRES_URL:-}" ]; then
  # In TMPDIR (or /tmp): scripts/postgres.sh says so when the postgres user cannot enter it.
  pgdir=$(mktemp -d "${TMPDIR:-/tmp}/gyreflow-pg.XXXXXX")
  port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  trap 'bash scripts/postgres.sh stop "$pgdir" 2>/dev/null; rm -rf "$pgdir"' EXIT
  # Assigned first: a server that does not start stops the command (set -e), eval would not.
  pg_env=$(bash scripts/postgres.sh start "$pgdir" "$port")
  eval "$pg_env"
fi

step "lint (ruff, the version pinned in the test extras)"
"$PYTHON" -m ruff check .

if [ "$FAST" = 1 ]; then
  step "running the in-process tests (no Spark, no processes of their own)"
  "$PYTHON" -m pytest -q -p no:benchmark -n "${GYREFLOW_TEST_WORKERS:-2}" --dist loadgroup \
    --max-worker-restart 0 -m "not spark and not processes" "$@"
  exit
fi

step "building the documentation and its API reference (mkdocs --strict)"
PYTHON="$PYTHON" bash scripts/build-docs.sh

step "waiting for the class-data archive"
wait "$archive_maker" || true
GYREFLOW_TEST_SPARK_CLASS_ARCHIVE=$(cat "$archive_path")
rm -f "$archive_path"
export GYREFLOW_TEST_SPARK_CLASS_ARCHIVE

step "running the tests (parallel workers; GYREFLOW_TEST_WORKERS overrides)"
# --max-worker-restart 0: a test worker that dies (a crash in an extension module) ends the run with
# that test failed and named. With --dist loadgroup, pytest-xdist 3.8 replaces a dead worker but
# can then wait for ever at the end of the run (pytest-xdist issues 1323, 1327, 1378).
"$PYTHON" -m pytest -q -p no:benchmark -n "${GYREFLOW_TEST_WORKERS:-3}" --dist loadgroup \
  --max-worker-restart 0 --durations=15 "$@"
step "finished"
