"""Files in, files out, through a SIGKILL and ``--resume``: a real ``gyreflow run`` reads directories
of CSV, JSON-lines and text files (blank lines, CRLF and lone CR, quotes, delimiters and line breaks
in cells, a .gz file) and writes them with CsvSink and FileSink; killed at several moments and
resumed, its published output equals what the csv and json modules (and plain Python) read from
the input, window by window: nothing lost, nothing duplicated."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

WINDOW = 5
KILLED = -signal.SIGKILL
TIMEOUT = 180

JOB = """
import sys
from gyreflow.api import CsvSink, DirectorySource, Environment, FileSink, SizeTumblingWindow

data, out, window = sys.argv[1], sys.argv[2], int(sys.argv[3])
pipeline = Environment.from_config().pipeline("formats")

@pipeline.task
def copy(ctx):
    size = SizeTumblingWindow(window)
    ctx.source(DirectorySource(f"{data}/csv", format="csv"), size).sink(CsvSink(f"{out}/csv"))
    ctx.source(DirectorySource(f"{data}/jsonl", format="jsonl"), size).sink(FileSink(f"{out}/jsonl"))
    ctx.source(DirectorySource(f"{data}/text"), size).sink(
        FileSink(f"{out}/text", format=lambda _window, line: line, extension=".txt"))

pipeline.execute()
"""

CELLS = ["Oslo", "", " ", "a,b", 'say "hi"', "two\nlines", "cr\rinside", "crlf\r\nin", "\U0001f600",
         "tab\there", '"', "\r", "x" * 300]


def generate(folder: Path, seed: int = 7) -> None:
    """Input files with blank lines, CRLF and lone CR endings, quoted cells and a .gz file."""
    rng = random.Random(seed)
    (folder / "csv").mkdir(parents=True)
    for number in range(4):
        buffer = io.StringIO(newline="")
        writer = csv.writer(buffer, lineterminator="\r\n")  # quotes cells holding CR or LF
        ending = ["\n", "\r\n", "\r", "\n"][number]
        text = ""
        for row in [["id", "city", "note"]] + [
                [f"{number}-{i}", rng.choice(CELLS), rng.choice(CELLS)] for i in range(12)]:
            buffer.seek(0)
            buffer.truncate()
            writer.writerow(row)
            text += buffer.getvalue().removesuffix("\r\n") + ending
            text += rng.choice(["", "", ending, ending * 2])  # empty lines between rows
        name = f"part-{number}.csv" + (".gz" if number == 2 else "")
        data = text.encode("utf-8")
        (folder / "csv" / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    (folder / "jsonl").mkdir()
    for number in range(3):
        text = ""
        for i in range(15):
            text += rng.choice(["", "\n", " \t\r\n", "\r\n\r\n"])
            value = {"file": number, "i": i, "text": rng.choice(CELLS)}
            text += json.dumps(value, ensure_ascii=rng.random() < 0.5) + rng.choice(["\n", "\r\n"])
        (folder / "jsonl" / f"events-{number}.jsonl").write_text(text, encoding="utf-8",
                                                                  newline="")
    (folder / "text").mkdir()
    lines = [rng.choice(["", " ", "a\rb", "quote \"", "\U0001f600", "tab\t"]) + str(i)
             for i in range(30)]
    endings = [rng.choice(["\n", "\r\n"]) for _ in lines]
    (folder / "text" / "lines.txt").write_bytes(
        "".join(line + end for line, end in zip(lines, endings, strict=True)).encode("utf-8"))


# --- oracles: the csv and json modules and plain Python on the input ------------------------------


def opened(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.name.endswith(".gz") else data).decode("utf-8")


def csv_records(text: str) -> list[dict]:
    header, *rows = [row for row in csv.reader(io.StringIO(text, newline=""), strict=True) if row]
    return [dict(zip(header, row, strict=True)) for row in rows]


def expected_output(data: Path) -> dict[str, list]:
    csv_in = [r for p in sorted((data / "csv").iterdir()) for r in csv_records(opened(p))]
    jsonl_in = [json.loads(line) for p in sorted((data / "jsonl").iterdir())
                for line in opened(p).split("\n") if line.strip(" \t\r\n")]
    text_in = []
    for path in sorted((data / "text").iterdir()):
        *lines, last = opened(path).split("\n")
        text_in += [line.removesuffix("\r") for line in lines] + ([last] if last else [])
    assert len(csv_in) == 48 and len(jsonl_in) == 45 and len(text_in) == 30
    return {"csv": csv_in, "jsonl": jsonl_in, "text": text_in}


def windows_of(records: list) -> dict[int, list]:
    return {1 + i // WINDOW: records[i:i + WINDOW] for i in range(0, len(records), WINDOW)}


def published(out: Path) -> dict[str, dict[int, list]]:
    """The visible window files of each sink, read back by the csv and json modules."""
    found: dict[str, dict[int, list]] = {}
    for kind, extension in (("csv", ".csv"), ("jsonl", ".jsonl"), ("text", ".txt")):
        windows = found[kind] = {}
        folder = out / kind
        for path in sorted(folder.glob(f"window-*{extension}")) if folder.is_dir() else ():
            number = int(path.name.split("-")[1].split(".")[0])
            text = path.read_bytes().decode("utf-8")
            if kind == "csv":
                windows[number] = csv_records(text) if text else []
            elif kind == "jsonl":
                windows[number] = [json.loads(line) for line in text.split("\n")[:-1]]
            else:
                windows[number] = text.split("\n")[:-1]
    return found


# --- running ----------------------------------------------------------------------------------------


def command(tmp_path: Path, *flags: str) -> list[str]:
    script = tmp_path / "job.py"
    if not script.exists():
        script.write_text(JOB, encoding="utf-8")
    # in this process: a mid-window crash point then kills the job, not a worker it restarts
    return [sys.executable, "-m", "gyreflow", "run", "--quiet", "--env", "local", "--workers", "1",
            *flags,
            str(script), "--", str(tmp_path / "data"), str(tmp_path / "out"), str(WINDOW)]


def environ(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"COLUMNS": "400", "GYREFLOW_STATE__BACKEND": "rocksdb",
                "GYREFLOW_STATE__PATH": str(tmp_path / "state"), **extra})
    return env


def run(tmp_path: Path, *flags: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(command(tmp_path, *flags), env=environ(tmp_path, **extra),
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)


def kill_when_published(tmp_path: Path, windows: int) -> int:
    """SIGKILL the job from outside once ``windows`` CSV window files are visible."""
    process = subprocess.Popen(command(tmp_path), env=environ(tmp_path),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(list((tmp_path / "out" / "csv").glob("window-*.csv"))) < windows:
            assert process.poll() is None, f"the job ended first: {process.stderr.read()}"
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.002)
        os.kill(process.pid, signal.SIGKILL)
        process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode


@pytest.fixture
def data(tmp_path) -> dict[str, dict[int, list]]:
    generate(tmp_path / "data")
    return {kind: windows_of(records) for kind, records in expected_output(tmp_path / "data").items()}


def test_an_uninterrupted_run_publishes_what_the_oracles_read(tmp_path, data):
    done = run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert published(tmp_path / "out") == data


@pytest.mark.parametrize("moment", ["mid-window:3", "before-commit:4", "after-commit:6",
                                    "mid-publish:8", "kill@5"])
def test_a_run_killed_and_resumed_publishes_each_record_once(tmp_path, data, moment):
    if moment.startswith("kill@"):
        status = kill_when_published(tmp_path, int(moment[5:]))
    else:
        status = run(tmp_path, GYREFLOW_CRASH_AT=moment).returncode
    assert status == KILLED, moment
    before = published(tmp_path / "out")
    for kind, windows in before.items():  # whole windows of the oracle's, nothing else
        assert all(windows[w] == data[kind][w] for w in windows), (kind, moment)
    done = run(tmp_path, "--resume")
    assert done.returncode == 0, done.stderr
    assert published(tmp_path / "out") == data
    assert not any((tmp_path / "out" / kind / ".staging").exists() for kind in data)
