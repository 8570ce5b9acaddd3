#!/usr/bin/env bash
# Start or stop a throwaway PostgreSQL server for the JDBC tests (PostgreSQL refuses to run as root,
# so as root it runs as the postgres system user). Usage:
#   eval "$(scripts/postgres.sh start DIR PORT)"   # prints: export GYREFLOW_TEST_POSTGRES_URL=...
#   scripts/postgres.sh stop DIR
set -euo pipefail
action=$1; dir=$2; port=${3:-55432}

find_bin() {
  for candidate in /usr/lib/postgresql/*/bin; do
    [ -x "$candidate/pg_ctl" ] && { echo "$candidate"; return; }
  done
  command -v pg_ctl >/dev/null && dirname "$(command -v pg_ctl)" && return
  return 1
}

bin=$(find_bin) || {
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    bin=$(find_bin)
  else
    echo "PostgreSQL server binaries not found: install PostgreSQL (Debian: apt-get install postgresql)" >&2
    exit 1
  fi
}

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$action" in
  start)
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
      chown postgres "$dir"
      # The server runs as postgres: every folder above DIR must let it through.
      runuser -u postgres -- test -w "$dir" || {
        echo "error: the postgres user cannot enter $dir (a folder above it is private to root):" \
          "choose a folder it can reach, e.g. TMPDIR=/tmp" >&2
        exit 1
      }
    fi
    as_owner "$bin/initdb" -A trust -U gyreflow -D "$dir/data" >/dev/null
    # Without fsync: a server that lives for one test run need not survive a crash of this
    # machine. A killed server process still loses no committed transaction (its WAL is written
    # before a commit returns, to the operating system's cache), and a database is created in
    # milliseconds instead of an fsync of every file of its template.
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off" \
      -w start >/dev/null
    as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U gyreflow gyreflow_test
    echo "export GYREFLOW_TEST_POSTGRES_URL=postgresql+psycopg://gyreflow@127.0.0.1:$port/gyreflow_test"
    ;;
  stop)
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast stop >/dev/null || true
    ;;
  *)
    echo "usage: $0 start DIR [PORT] | stop DIR" >&2; exit 2 ;;
esac
