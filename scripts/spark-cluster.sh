#!/usr/bin/env bash
# Start, stop or inspect a Spark standalone cluster on 127.0.0.1 from the installed pyspark (nothing is
# downloaded): one master and N workers (default 2), each worker with its own work, local, temporary
# and working directories under DIR, none of them the driver's. Usage:
#   eval "$(scripts/spark-cluster.sh start DIR [WORKERS])"   # prints: export GYREFLOW_SPARK__MASTER=spark://...
#   scripts/spark-cluster.sh status DIR                        # the master URL and the live workers
#   scripts/spark-cluster.sh stop DIR
# Exit statuses: 0 done; 1 the cluster did not come up (its logs are under DIR); 2 bad usage.
set -euo pipefail
action=${1:-}; dir=${2:-}; workers=${3:-2}
[ -n "$action" ] && [ -n "$dir" ] || { echo "usage: $0 start DIR [WORKERS] | status DIR | stop DIR" >&2; exit 2; }
PYTHON=${PYTHON:-python3}

free_port() {
  "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

spark_home() {
  "$PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'
}

# The master's JSON view lists the registered workers; prints how many are ALIVE.
alive_workers() {
  "$PYTHON" - "$1" <<'EOF' 2>/dev/null || echo 0
import json, sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/json/", timeout=2) as reply:
    print(sum(w.get("state") == "ALIVE" for w in json.load(reply).get("workers", [])))
EOF
}

start_daemon() {  # name, working directory, then the spark-class arguments
  local name=$1 cwd=$2; shift 2
  mkdir -p "$cwd"
  (cd "$cwd" && exec setsid "$home/bin/spark-class" "$@" >"$dir/$name.log" 2>&1 </dev/null) &
  echo $! >"$dir/$name.pid"
}

case "$action" in
  start)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    home=$(spark_home)
    chmod +x "$home"/bin/* 2>/dev/null || true
    port=$(free_port); ui=$(free_port)
    export SPARK_HOME=$home SPARK_LOCAL_IP=127.0.0.1 SPARK_NO_DAEMONIZE=1
    export PYSPARK_PYTHON=${PYSPARK_PYTHON:-$(command -v "$PYTHON")}
    TMPDIR="$dir/master/tmp" start_daemon master "$dir/master/cwd" \
      org.apache.spark.deploy.master.Master --host 127.0.0.1 --port "$port" --webui-port "$ui"
    mkdir -p "$dir/master/tmp"
    url="spark://127.0.0.1:$port"
    for i in $(seq 1 "$workers"); do
      w="$dir/worker-$i"
      mkdir -p "$w/work" "$w/local" "$w/tmp"
      TMPDIR="$w/tmp" SPARK_LOCAL_DIRS="$w/local" SPARK_WORKER_DIR="$w/work" \
        SPARK_JAVA_OPTS="-Djava.io.tmpdir=$w/tmp" \
        start_daemon "worker-$i" "$w/cwd" org.apache.spark.deploy.worker.Worker \
        --host 127.0.0.1 --cores 1 --memory 1g --work-dir "$w/work" --webui-port 0 "$url"
    done
    echo "$url" >"$dir/master.url"; echo "$ui" >"$dir/master.ui"
    for _ in $(seq 1 120); do
      [ "$(alive_workers "$ui")" -ge "$workers" ] && {
        echo "export GYREFLOW_SPARK__MASTER=$url"; exit 0; }
      sleep 0.5
    done
    echo "the Spark cluster did not register $workers workers in 60 s; logs: $dir/*.log" >&2
    exit 1
    ;;
  status)
    [ -f "$dir/master.url" ] || { echo "no cluster started in $dir"; exit 1; }
    echo "master $(cat "$dir/master.url"), web UI http://127.0.0.1:$(cat "$dir/master.ui")," \
      "$(alive_workers "$(cat "$dir/master.ui")") live workers"
    ;;
  stop)
    for pidfile in "$dir"/worker-*.pid "$dir"/master.pid; do
      [ -f "$pidfile" ] || continue
      pid=$(cat "$pidfile")
      kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
      rm -f "$pidfile"
    done
    rm -f "$dir/master.url" "$dir/master.ui"
    ;;
  *)
    echo "usage: $0 start DIR [WORKERS] | status DIR | stop DIR" >&2; exit 2 ;;
esac
