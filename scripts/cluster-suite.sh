#!/usr/bin/env bash
# Run the stream, batch, graph and recovery suites' Spark cases on a real standalone cluster (a master
# and two workers on 127.0.0.1, each with folders of its own, started by scripts/spark-cluster.sh)
# instead of local[2]. State moves to a checkpoint directory; cases whose state a cluster refuses are
# skipped (tests/test_spark_cluster.py checks those refusals). Extra arguments go to pytest.
#   bash scripts/cluster-suite.sh [-x] [-k EXPR]
# Exit status: pytest's (0 all passed), or 1 when the cluster did not start.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
dir=$(mktemp -d "${TMPDIR:-/tmp}/gyreflow-cluster-suite-XXXXXX")
trap 'PYTHON=$PYTHON bash scripts/spark-cluster.sh stop "$dir"; rm -rf "$dir"' EXIT
eval "$(PYTHON=$PYTHON bash scripts/spark-cluster.sh start "$dir" 2)"
export GYREFLOW_TEST_SPARK_MASTER=$GYREFLOW_SPARK__MASTER
unset GYREFLOW_SPARK__MASTER
echo "cluster suite on $GYREFLOW_TEST_SPARK_MASTER"
# One pytest worker: the cluster has two one-core workers, and each case's jobs need both.
"$PYTHON" -m pytest -p no:cacheprovider -q -k "spark" \
  tests/test_stream_operators.py tests/test_windows_and_parallelism.py tests/test_sources_sinks.py \
  tests/test_keygroups_state.py tests/test_emitted_values.py tests/test_fused_chains.py \
  tests/test_independent_cycles.py tests/test_event_time.py tests/test_graph_algorithms.py \
  tests/test_spark_dataframe_oracle.py tests/test_errors.py tests/test_notifications.py \
  tests/test_spark_recovery.py tests/test_spark_graph_recovery.py "$@"
