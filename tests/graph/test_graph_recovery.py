"""A growing graph survives SIGKILL: ``gyreflow run --resume`` of examples/incremental_wcc.py gives
the output of an uninterrupted run.

The job reads a stream of edges in windows and writes, per window, the vertices whose component label
changed. It runs as ``python -m gyreflow run`` in a subprocess with a RocksDB or SQLite state backend
and a crash point (``GYREFLOW_CRASH_AT=POINT:WINDOW``: the job SIGKILLs itself there). After the
crash the visible output must be whole files of the first windows; after ``--resume`` it must equal
the uninterrupted run's: the same file names (no staged file left) and the same lines per file. The
uninterrupted run is itself checked against a plain-Python oracle: folding windows 1..w gives the
union-find components of the edges of windows 1..w, and a window lists changed vertices only.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import graph_reference as ref
import pytest
from _staged_output import read_dir as read_staged_dir

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "incremental_wcc.py"
EDGES = 2_400
WINDOW = 200  # 12 windows
WINDOWS = 12
VERTICES = 2_000
KILLED = -signal.SIGKILL
TIMEOUT = 300


def make_edges(seed: int = 17) -> list[tuple[int, int]]:
    """Random edges over ``VERTICES`` ids: small components that keep merging, and self-loops."""
    rng = random.Random(seed)
    return [(rng.randrange(VERTICES), rng.randrange(VERTICES)) for _ in range(EDGES)]


def oracle() -> dict[int, dict[int, int]]:
    """For each window, the components (smallest id) of every vertex of the edges so far."""
    edges = make_edges()
    after = {}
    for window in range(1, WINDOWS + 1):
        so_far = edges[:window * WINDOW]
        vertices = list(dict.fromkeys(v for edge in so_far for v in edge))
        after[window] = ref.wcc(vertices, so_far)
    return after


def read_dir(directory: Path) -> dict[str, list[str]]:
    """Every file of ``directory``, staged ones included (see ``_staged_output.read_dir``)."""
    return read_staged_dir(directory)


def fold(files: dict[str, list[str]], windows: int = WINDOWS) -> dict[int, dict[int, int]]:
    """The labelling after each window: the window files folded in order; each window must list a
    vertex once and only when its label changed."""
    labels: dict[int, int] = {}
    after = {}
    for window in range(1, windows + 1):
        seen = set()
        for line in files.get(f"window-{window:06d}.jsonl", []):
            record = json.loads(line)
            assert record["window"] == window, line
            vertex, component = record["vertex"], record["component"]
            assert vertex not in seen, f"vertex {vertex} twice in window {window}"
            assert labels.get(vertex) != component, f"window {window}: {vertex} did not change"
            seen.add(vertex)
            labels[vertex] = component
        after[window] = dict(labels)
    return after


def environ(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"COLUMNS": "400", "GYREFLOW_ENVIRONMENT__TYPE": "local"})
    env.update(extra)
    return env


def run_job(args: list[str], extra: dict[str, str], flags: tuple[str, ...] = ()):
    command = [sys.executable, "-m", "gyreflow", "run", "--quiet", *flags, str(SCRIPT), "--", *args]
    return subprocess.run(command, env=environ(extra), capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)


@pytest.fixture(scope="module")
def edge_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("graph-input") / "edges.txt"
    path.write_text("".join(f"{s} {d}\n" for s, d in make_edges()), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def reference(edge_file, tmp_path_factory) -> dict[str, list[str]]:
    """An uninterrupted run on the memory backend, checked against the oracle."""
    out = tmp_path_factory.mktemp("graph-reference") / "out"
    done = run_job(["--edges", str(edge_file), "--window", str(WINDOW), "--output", str(out)],
                   {"GYREFLOW_STATE__BACKEND": "memory"})
    assert done.returncode == 0, done.stderr
    return read_dir(out)


def test_reference_matches_the_oracle(reference):
    assert sorted(reference) == [f"window-{w:06d}.jsonl" for w in range(1, WINDOWS + 1)]
    assert fold(reference) == oracle()


def test_the_oracle_check_can_fail(reference):
    broken = dict(reference)
    name = "window-000004.jsonl"
    broken[name] = broken[name][1:]
    with pytest.raises(AssertionError):
        assert fold(broken) == oracle()


def assert_visible_prefix(directory: Path, reference: dict[str, list[str]]) -> None:
    actual = read_dir(directory)
    visible = sorted(name for name in actual if not name.startswith("."))
    assert visible == [f"window-{w:06d}.jsonl" for w in range(1, len(visible) + 1)], visible
    for name in visible:
        assert actual[name] == reference[name], f"{name} is visible but differs from the reference"


# (backend, crash point, parallelism of the crashed run, parallelism of the resumed run)
CASES = [
    ("rocksdb", "window-finished:1", 1, 1),
    ("rocksdb", "window-finished:6", 2, 2),
    ("rocksdb", "window-finished:12", 1, 1),  # the last window
    ("rocksdb", "after-commit:4", 2, 3),  # resumed with another parallelism
    ("sqlite", "window-finished:8", 1, 1),
    ("sqlite", "before-commit:3", 3, 1),
]


@pytest.mark.parametrize(("backend", "moment", "parallelism", "resume_parallelism"), CASES)
def test_crash_then_resume_equals_the_uninterrupted_run(edge_file, reference, tmp_path, backend,
                                                        moment, parallelism, resume_parallelism):
    store = {"GYREFLOW_STATE__BACKEND": "rocksdb" if backend == "rocksdb" else "jdbc",
             "GYREFLOW_STATE__PATH": str(tmp_path / "state")}
    out = tmp_path / "out"
    args = ["--edges", str(edge_file), "--window", str(WINDOW), "--output", str(out)]
    crashed = run_job([*args, "--parallelism", str(parallelism)],
                      {**store, "GYREFLOW_CRASH_AT": moment})
    assert crashed.returncode == KILLED, (
        f"crash point {moment} was armed but the job exited {crashed.returncode}:\n{crashed.stderr}")
    assert_visible_prefix(out, reference)
    resumed = run_job([*args, "--parallelism", str(resume_parallelism)], store, ("--resume",))
    assert resumed.returncode == 0, resumed.stderr
    actual = read_dir(out)
    assert sorted(actual) == sorted(reference), "file names differ (a staged file left?)"
    different = [name for name in sorted(reference) if actual[name] != reference[name]]
    assert not different, f"files with other content than the reference: {different}"


# --- a changing graph: removals survive a crash too ----------------------------------------------

CHANGING_LINES = 1_200
CHANGING_WINDOW = 150  # 8 windows


def make_changes(seed: int = 23) -> list[tuple]:
    """Edge lines over 300 ids; one line in six removes a present edge (``("-", s, d)``)."""
    rng = random.Random(seed)
    present: list[tuple[int, int]] = []
    lines: list[tuple] = []
    while len(lines) < CHANGING_LINES:
        if present and rng.random() < 1 / 6:
            src, dst = present.pop(rng.randrange(len(present)))
            lines.append(("-", src, dst))
        else:
            edge = (rng.randrange(300), rng.randrange(300))
            present.append(edge)
            lines.append(edge)
    return lines


def changing_versions() -> dict[int, tuple[list, list]]:
    """Every version (0: empty) as ``(vertices seen, edges)``: a removal takes every edge between
    its two ids, and no vertex."""
    lines = make_changes()
    versions: dict[int, tuple[list, list]] = {0: ([], [])}
    edges: list = []
    seen: dict = {}
    for window in range(1, CHANGING_LINES // CHANGING_WINDOW + 1):
        for line in lines[(window - 1) * CHANGING_WINDOW:window * CHANGING_WINDOW]:
            if line[0] == "-":
                pair = {line[1], line[2]}
                edges = [e for e in edges if {e[0], e[1]} != pair]
            else:
                edges.append(line)
                seen.update(dict.fromkeys(line))
        versions[window] = (list(seen), list(edges))
    return versions


def changing_oracle() -> dict[int, dict[int, int]]:
    """The components after each window."""
    return {window: ref.wcc(*version) for window, version in changing_versions().items() if window}


def write_changes(path: Path) -> Path:
    """``make_changes()`` as the examples read it: ``src dst`` and ``- src dst`` lines."""
    path.write_text("".join(" ".join(map(str, line)) + "\n" for line in make_changes()),
                    encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def changing_file(tmp_path_factory) -> Path:
    return write_changes(tmp_path_factory.mktemp("changing-input") / "changes.txt")


@pytest.fixture(scope="module")
def changing_reference(changing_file, tmp_path_factory) -> dict[str, list[str]]:
    out = tmp_path_factory.mktemp("changing-reference") / "out"
    done = run_job(["--edges", str(changing_file), "--window", str(CHANGING_WINDOW), "--output",
                    str(out), "--parallelism", "2"], {"GYREFLOW_STATE__BACKEND": "memory"})
    assert done.returncode == 0, done.stderr
    files = read_dir(out)
    assert fold(files, CHANGING_LINES // CHANGING_WINDOW) == changing_oracle()
    return files


# (backend, crash point, parallelism, resumed parallelism, iteration snapshot interval)
CHANGING_CASES = [
    ("rocksdb", "window-finished:3", 2, 2, 0),
    ("sqlite", "before-commit:6", 2, 1, 0),
    ("rocksdb", "superstep:5.3", 2, 2, 1),  # killed inside a window's supersteps
]


@pytest.mark.parametrize(("backend", "moment", "parallelism", "resume_parallelism", "every"),
                         CHANGING_CASES)
def test_a_changing_graph_resumes_to_the_uninterrupted_output(changing_file, changing_reference,
                                                              tmp_path, backend, moment,
                                                              parallelism, resume_parallelism,
                                                              every):
    store = {"GYREFLOW_STATE__BACKEND": "rocksdb" if backend == "rocksdb" else "jdbc",
             "GYREFLOW_STATE__PATH": str(tmp_path / "state"),
             "GYREFLOW_STATE__ITERATION_CHECKPOINT_INTERVAL": str(every)}
    out = tmp_path / "out"
    args = ["--edges", str(changing_file), "--window", str(CHANGING_WINDOW), "--output", str(out)]
    crashed = run_job([*args, "--parallelism", str(parallelism)],
                      {**store, "GYREFLOW_CRASH_AT": moment})
    assert crashed.returncode == KILLED, crashed.stderr
    resumed = run_job([*args, "--parallelism", str(resume_parallelism)], store, ("--resume",))
    assert resumed.returncode == 0, resumed.stderr
    assert read_dir(out) == changing_reference


@pytest.mark.parametrize(("backend", "first", "then"), [("rocksdb", 2, 1), ("sqlite", 1, 2)])
def test_a_changing_graph_resumed_in_a_new_layout_then_crashed_again_resumes_exactly(
        changing_file, changing_reference, tmp_path, backend, first, then):
    """A resume with another parallelism writes each key group's graph whole in its first
    snapshot; the changes logged under the old layout must go with it, or the next resume reads
    them again on top of the new base (vertices removed before the rescale came back)."""
    store = {"GYREFLOW_STATE__BACKEND": "rocksdb" if backend == "rocksdb" else "jdbc",
             "GYREFLOW_STATE__PATH": str(tmp_path / "state")}
    out = tmp_path / "out"
    args = ["--edges", str(changing_file), "--window", str(CHANGING_WINDOW), "--output", str(out)]
    crashed = run_job([*args, "--parallelism", str(first)],
                      {**store, "GYREFLOW_CRASH_AT": "after-commit:3"})
    assert crashed.returncode == KILLED, crashed.stderr
    rescaled = run_job([*args, "--parallelism", str(then)],
                       {**store, "GYREFLOW_CRASH_AT": "after-commit:6"}, ("--resume",))
    assert rescaled.returncode == KILLED, rescaled.stderr
    resumed = run_job([*args, "--parallelism", str(then)], store, ("--resume",))
    assert resumed.returncode == 0, resumed.stderr
    assert read_dir(out) == changing_reference


# --- versions: the history of a snapshot survives a crash -----------------------------------------

VERSIONS_SCRIPT = ROOT / "examples" / "graph_versions.py"


def run_versions_job(args: list[str], extra: dict[str, str], flags: tuple[str, ...] = ()):
    command = [sys.executable, "-m", "gyreflow", "run", "--quiet", *flags, str(VERSIONS_SCRIPT),
               "--", *args]
    return subprocess.run(command, env=environ(extra), capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)


def versions_oracle() -> dict[int, dict[int, int]]:
    """Window w lists the components of version w - 1 (version 0: the empty graph)."""
    after = changing_oracle()
    return {window: after.get(window - 1, {}) for window in range(1, len(after) + 1)}


def read_versions(directory: Path) -> dict[int, dict[int, int]]:
    found: dict[int, dict[int, int]] = {}
    for name, lines in read_dir(directory).items():
        for line in lines:
            record = json.loads(line)
            assert record["version"] == record["window"] - 1 and name.endswith(
                f"{record['window']:06d}.jsonl"), line
            found.setdefault(record["window"], {})[record["vertex"]] = record["component"]
    return found


def make_requests(windows: int, seed: int = 29) -> list[tuple]:
    """Per window 3 requests about version w - 2, w - 1 or the current one (``-``)."""
    rng = random.Random(seed)
    return [(f"w{w}r{i}", rng.randrange(300), rng.choice(["-", w - 1, max(0, w - 2)]))
            for w in range(1, windows + 1) for i in range(3)]


def khop_oracle(requests: list[tuple]) -> dict[str, dict[int, int]]:
    """Each request's vertices within two hops (either direction) on the version it names."""
    import networkx as nx

    versions = {window: edges for window, (_, edges) in changing_versions().items()}
    answers = {}
    for number, (key, start, version) in enumerate(requests):
        window = number // 3 + 1
        graph = nx.Graph(versions[window if version == "-" else version])
        answers[key] = (nx.single_source_shortest_path_length(graph, start, cutoff=2)
                        if start in graph else {})
    return answers


@pytest.mark.parametrize(("backend", "moment", "program"),
                         [("rocksdb", "window-finished:4", "per-vertex"),
                          ("sqlite", "before-commit:6", "per-vertex"),
                          ("rocksdb", "before-commit:5", "arrays")])
def test_snapshots_and_versioned_requests_resume_after_a_crash(changing_file, tmp_path,
                                                               backend, moment, program):
    """The history a later window reads (two versions back) was written before the crash; the
    array program's history is the chunks the windows replaced."""
    windows = CHANGING_LINES // CHANGING_WINDOW
    requests = make_requests(windows)
    request_file = tmp_path / "requests.txt"
    request_file.write_text("".join(f"{k} {s} {v}\n" for k, s, v in requests), encoding="utf-8")
    store = {"GYREFLOW_STATE__BACKEND": "rocksdb" if backend == "rocksdb" else "jdbc",
             "GYREFLOW_STATE__PATH": str(tmp_path / "state")}
    out = tmp_path / "out"
    args = ["--edges", str(changing_file), "--window", str(CHANGING_WINDOW), "--output", str(out),
            "--parallelism", "2", "--requests", str(request_file), "--requests-window", "3"]
    args += ["--arrays"] if program == "arrays" else []
    crashed = run_versions_job(args, {**store, "GYREFLOW_CRASH_AT": moment})
    assert crashed.returncode == KILLED, crashed.stderr
    resumed = run_versions_job(args, store, ("--resume",))
    assert resumed.returncode == 0, resumed.stderr
    got = read_versions(out)
    assert {w: got.get(w, {}) for w in range(1, windows + 1)} == versions_oracle()
    answers: dict = {}
    for lines in read_dir(tmp_path / "out-khop").values():
        for line in lines:
            record = json.loads(line)
            answers.setdefault(record["key"], {})[record["vertex"]] = record["hops"]
    want = khop_oracle(requests)
    assert {key: answers.get(key, {}) for key in want} == want


def test_a_request_for_a_version_no_longer_kept_is_one_error_line(changing_file, tmp_path):
    """Piped as a log sees it: exit status 5 (the input asked for it, no user function failed),
    one ``error:`` line naming the version, the readable range, the window and how many versions
    to keep, no traceback; the windows published before it are whole and right."""
    request_file = tmp_path / "requests.txt"
    request_file.write_text("a 1 -\nb 2 -\nc 3 -\nd 4 -\ne 5 0\n", encoding="utf-8")
    out = tmp_path / "out"
    done = run_versions_job(["--edges", str(changing_file), "--window", str(CHANGING_WINDOW),
                             "--output", str(out), "--requests", str(request_file)],
                            {"GYREFLOW_STATE__BACKEND": "memory"})
    assert done.returncode == 5, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert "version 0, which is not readable in window 5" in errors[0], errors
    assert "3..5" in errors[0] and "keep at least 5 with" in errors[0], errors
    assert "retained_versions" in errors[0] and "--fresh" in errors[0], errors
    assert "Traceback" not in done.stderr and "fix the function" not in done.stderr
    got, want = read_versions(out), versions_oracle()
    assert set(got) <= {1, 2, 3, 4} and 2 in got  # window 1 (version 0) has no vertex to write
    assert all(got[window] == want[window] for window in got)
