"""Bad input and output paths get one ``error:`` line and a documented exit status, never a
traceback: a file that is not valid UTF-8 names the file and the byte offset (exit 5; the windows
before it stay published, and after the bytes are fixed ``--resume`` gives the oracle's output); a
missing input file or an output path that is a file is refused before any data moves (exit 2). Real
processes, local and Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _recovery_data import word_count_oracle

ROOT = Path(__file__).resolve().parents[3]
WORD_COUNT = ROOT / "examples" / "word_count.py"
WINDOW = 3
LINES = [f"w{i % 5} w{i % 3}" for i in range(15)]  # 5 windows of 3 lines
BAD_LINE = 7  # in window 3


def run(tmp_path: Path, environment: str, data: Path, out: Path, *flags: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": environment, "GYREFLOW_SPARK__MASTER": "local[2]",
                "GYREFLOW_SPARK__CONF": json.dumps({"spark.ui.enabled": "false"}),
                "GYREFLOW_STATE__BACKEND": "rocksdb", "GYREFLOW_STATE__PATH": str(tmp_path / "st"),
                "COLUMNS": "400"})
    return subprocess.run([sys.executable, "-m", "gyreflow", "run", "--quiet", *flags,
                           str(WORD_COUNT), "--", "--input", str(data), "--window", str(WINDOW),
                           "--output", str(out)],
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def one_error(done) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    return " ".join(done.stderr.split())


def windows(out: Path) -> dict[int, dict[str, int]]:
    found: dict[int, dict[str, int]] = {}
    for name in sorted(n for n in os.listdir(out) if not n.startswith(".")):
        for line in (out / name).read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            found.setdefault(record["window"], {})[record["word"]] = record["count"]
    return found


@pytest.mark.parametrize("environment", ["local", "spark"])
def test_invalid_utf8_names_the_file_and_offset_and_keeps_completed_windows(environment, tmp_path):
    encoded = [(line + "\n").encode() for line in LINES]
    offset = sum(len(b) for b in encoded[:BAD_LINE])
    good = encoded[BAD_LINE]
    encoded[BAD_LINE] = b"\xff" + good[1:]  # same length: fixing it later keeps every offset
    data = tmp_path / "in.txt"
    data.write_bytes(b"".join(encoded))
    out = tmp_path / "out"
    done = run(tmp_path, environment, data, out)
    assert done.returncode == 5, done.stderr
    message = one_error(done)
    assert str(data.name) in message and f"byte offset {offset}" in message, message
    assert "window 3" in message, message
    expected = word_count_oracle(LINES, WINDOW)
    assert windows(out) == {w: expected[w] for w in (1, 2)}  # the windows before it completed
    data.write_bytes(b"".join([*encoded[:BAD_LINE], good, *encoded[BAD_LINE + 1:]]))
    done = run(tmp_path, environment, data, out, "--resume")
    assert done.returncode == 0, done.stderr
    assert windows(out) == expected


@pytest.mark.parametrize("case", ["missing input", "input is a directory", "output is a file"])
def test_bad_paths_are_refused_before_any_data_moves(case, tmp_path):
    data = tmp_path / "in.txt"
    data.write_text("a b\n", encoding="utf-8")
    out = tmp_path / "out"
    if case == "missing input":
        data = tmp_path / "nope.txt"
    elif case == "input is a directory":
        data = tmp_path
    else:
        out.write_text("not a directory", encoding="utf-8")
    done = run(tmp_path, "local", data, out)
    assert done.returncode == 2, done.stderr
    message = one_error(done)
    assert (str(out.name) if case == "output is a file" else str(data.name)) in message, message
    assert not (tmp_path / "st").exists() or not any((tmp_path / "st").iterdir())
