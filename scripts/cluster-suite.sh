#!/usr/bin/env bash
# Run the stream, batch, graph and recovery suites' Spark cases on a real standalone cluster (a master
# and two workers on 127.0.0.1, each with folders of its own, started by scripts/spark-cluster.sh)
# instead of local[2]. State moves to a checkpoint directory; cases whose state a cluster refuses are
# skipped (tests/spark/test_spark_cluster.py checks those refusals). Extra arguments go to pytest.
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
  tests/api/test_stream_operators.py tests/api/test_keyed_operators.py tests/api/test_windows_and_parallelism.py \
  tests/api/connectors/test_sources_sinks.py \
  tests/state/test_keygroups_state.py tests/api/test_emitted_values.py tests/runtime/test_fused_chains.py \
  tests/api/test_independent_cycles.py tests/runtime/test_event_time.py tests/graph/test_graph_algorithms.py \
  tests/graph/test_graph_examples_and_docs.py \
  tests/spark/test_spark_dataframe_oracle.py tests/api/test_errors.py tests/api/test_notifications.py \
  tests/spark/test_spark_recovery.py tests/spark/test_spark_graph_recovery.py "$@"
