"""examples/directory_etl.py as users run it: a folder of CSV files (some compressed, some rows bad),
read whole or followed while files land, killed and resumed; its Parquet files against the csv module
and a plain-Python total per window and city."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

pq = pytest.importorskip("pyarrow.parquet")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "directory_etl.py"
WINDOW = 25
CITIES = [" oslo", "LIMA ", "Paris", "", "new york"]


def order_rows(start: int, count: int) -> list[list[str]]:
    rows = []
    for i in range(start, start + count):
        price = "n/a" if i % 37 == 5 else f"{(i % 9) * 1.5 + 0.25:.2f}"  # n/a: a dead letter
        quantity = str((i % 4) - 1)  # -1 and 0: filtered out as invalid
        rows.append([str(i), CITIES[i % len(CITIES)], quantity, price])
    return rows


def write_orders(path: Path, rows: list[list[str]]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["order_id", "city", "quantity", "price"])
    writer.writerows(rows)
    data = buffer.getvalue().encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)


FILES = {"2026-11-01.csv": order_rows(0, 60), "2026-11-02.csv.gz": order_rows(60, 45),
         "2026-11-03.csv": order_rows(105, 70)}


def oracle(names: list[str], files: dict | None = None) -> dict[int, dict[str, tuple[int, float]]]:
    """Window -> city -> (orders, revenue): the csv module reads the files in name order, rows
    whose price is no number are dead letters, windows are WINDOW readable rows, invalid rows are
    dropped, cities trimmed and capitalised."""
    readable = []
    for name in sorted(names):
        for row in csv.DictReader(io.StringIO("order_id,city,quantity,price\n" + "".join(
                ",".join(r) + "\n" for r in (files or FILES)[name]))):
            try:
                price = float(row["price"])
            except ValueError:
                continue
            readable.append((row["city"], int(row["quantity"]), price))
    out: dict[int, dict[str, tuple[int, float]]] = {}
    for index in range(0, len(readable), WINDOW):
        totals: dict[str, list] = defaultdict(lambda: [0, 0.0])
        for city, quantity, price in readable[index:index + WINDOW]:
            if city.strip() and quantity > 0:
                entry = totals[city.strip().title()]
                entry[0] += 1
                entry[1] += quantity * price
        out[index // WINDOW + 1] = {c: (n, round(r, 2)) for c, (n, r) in totals.items()}
    return {w: t for w, t in out.items() if t}


def parquet_output(out: Path) -> dict[int, dict[str, tuple[int, float]]]:
    got: dict[int, dict[str, tuple[int, float]]] = {}
    for name in sorted(os.listdir(out)):
        assert name.endswith(".parquet"), f"left in {out}: {name}"
        window = int(name.split("-")[1].split(".")[0])
        for row in pq.read_table(out / name).to_pylist():
            got.setdefault(window, {})[row["city"]] = (row["orders"], row["revenue"])
    return got


def run(tmp_path: Path, *flags: str, follow: bool = False, crash_at: str | None = None,
        wait: bool = True):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_STATE__BACKEND": "rocksdb",
                "GYREFLOW_STATE__PATH": str(tmp_path / "state"), "COLUMNS": "400"})
    if crash_at:
        env["GYREFLOW_CRASH_AT"] = crash_at
        env["GYREFLOW_ENVIRONMENT__WORKERS"] = "1"  # the crash point kills the job, not a worker
    command = [sys.executable, "-m", "gyreflow", "run", "--quiet", *flags, str(EXAMPLE), "--",
               "--input", str(tmp_path / "landing"), "--output", str(tmp_path / "out"),
               "--window", str(WINDOW), "--dead-letters", str(tmp_path / "dead")]
    if follow:
        command.append("--follow")
    if not wait:
        return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def land(tmp_path: Path, names: list[str], files: dict | None = None) -> None:
    landing = tmp_path / "landing"
    landing.mkdir(exist_ok=True)
    for name in names:
        write_orders(landing / f"_{name}", (files or FILES)[name])  # hidden until complete
        os.replace(landing / f"_{name}", landing / name)


def dead_letters(tmp_path: Path) -> list[int]:
    path = tmp_path / "dead" / "dead-letters-0000.jsonl"
    return sorted(int(json.loads(line)["text"].split(",")[0]) for line in
                  path.read_text(encoding="utf-8").splitlines())


EXPECTED_DEAD = sorted(i for i in range(175) if i % 37 == 5)


def test_a_folder_read_whole_matches_the_oracle(tmp_path):
    land(tmp_path, sorted(FILES))
    done = run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert parquet_output(tmp_path / "out") == oracle(sorted(FILES))
    assert dead_letters(tmp_path) == EXPECTED_DEAD


@pytest.mark.parametrize("crash_at", ["after-commit:3", "mid-window:5"])
def test_killed_then_resumed_reads_every_file_once(tmp_path, crash_at):
    land(tmp_path, sorted(FILES))
    done = run(tmp_path, crash_at=crash_at)
    assert done.returncode == -signal.SIGKILL, done.stderr
    done = run(tmp_path, "--resume")
    assert done.returncode == 0, done.stderr
    assert parquet_output(tmp_path / "out") == oracle(sorted(FILES))
    assert dead_letters(tmp_path) == EXPECTED_DEAD


def test_a_followed_folder_takes_files_as_they_land_and_ends_when_idle(tmp_path):
    names = sorted(FILES)
    land(tmp_path, names[:1])
    process = run(tmp_path, "--until-idle", "4", follow=True, wait=False)
    try:
        for name in names[1:]:
            time.sleep(1.5)
            land(tmp_path, [name])
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert parquet_output(tmp_path / "out") == oracle(names)
    assert dead_letters(tmp_path) == EXPECTED_DEAD


def test_a_followed_folder_runs_until_stopped_then_resumes(tmp_path):
    """SIGTERM ends the unbounded run after the window in progress (exit 143); files that landed
    meanwhile are read by the resumed run, each once."""
    names = sorted(FILES)
    land(tmp_path, names[:2])
    process = run(tmp_path, follow=True, wait=False)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "out").is_dir() or len(os.listdir(tmp_path / "out")) < 3:
            assert process.poll() is None, process.stderr.read()
            assert time.monotonic() < deadline, "no output within 120 s"
            time.sleep(0.05)
        time.sleep(0.5)  # waiting for the files that have not landed yet
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143, stderr
    assert "stopped after window" in stderr
    land(tmp_path, names[2:])
    done = run(tmp_path, "--resume", "--until-idle", "2", follow=True)
    assert done.returncode == 0, done.stderr
    assert parquet_output(tmp_path / "out") == oracle(names)
    assert dead_letters(tmp_path) == EXPECTED_DEAD


def test_a_bad_row_without_dead_letters_stops_with_exit_5_and_keeps_completed_windows(tmp_path):
    """Exit 5 with one error naming the file and line; the windows before it stay published; the
    fixed file is read by --resume from where the job stopped."""
    clean = {name: [[*row[:3], "1.00" if row[3] == "n/a" else row[3]] for row in rows]
             for name, rows in FILES.items()}
    names = sorted(clean)
    land(tmp_path, names, clean)
    bad = tmp_path / "landing" / names[2]
    good = bad.read_text(encoding="utf-8")
    lines = good.splitlines(keepends=True)
    lines[30] = "135,Oslo,2,1.5,extra\n"  # line 31: five cells, the header has four
    bad.write_text("".join(lines), encoding="utf-8")
    command = [sys.executable, "-m", "gyreflow", "run", "--quiet", str(EXAMPLE), "--",
               "--input", str(tmp_path / "landing"), "--output", str(tmp_path / "out"),
               "--window", str(WINDOW)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_STATE__BACKEND": "rocksdb",
                "GYREFLOW_STATE__PATH": str(tmp_path / "state"), "COLUMNS": "400"})
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 5, done.stderr
    assert f"{bad}, line 31: 5 cells, the header has 4" in done.stderr
    assert "Traceback" not in done.stderr
    published = parquet_output(tmp_path / "out")
    expected = oracle(names, clean)
    assert published and all(published[w] == expected[w] for w in published)
    bad.write_text(good, encoding="utf-8")
    done = subprocess.run([*command[:5], "--resume", *command[5:]], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert parquet_output(tmp_path / "out") == expected


README = ROOT / "README.md"


def readme_etl() -> tuple[str, list[str]]:
    """The README's ETL snippet (the Python block that writes landing/orders.csv) and the
    directory_etl.py command given below it, as words."""
    text = README.read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S)
                 if "landing/orders.csv" in b)
    command = re.search(r"`(gyreflow run [^`]*examples/directory_etl\.py[^`]*)`", text).group(1)
    return block, command.split()


def test_the_readme_snippet_then_the_readme_command_totals_the_snippets_orders(tmp_path):
    block, command = readme_etl()
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    done = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, "GYREFLOW_ENVIRONMENT__TYPE":
                                                         "local"})
    assert done.returncode == 0, done.stderr
    # as written, but idle for 1 s instead of 30 before the followed folder ends
    command[command.index("--until-idle") + 1] = "1"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "COLUMNS": "400"})
    done = subprocess.run([sys.executable, "-m", "gyreflow", *command[1:]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    # independent oracle: the csv module over what the snippet wrote
    totals: dict[str, list] = defaultdict(lambda: [0, 0.0])
    with open(tmp_path / "landing" / "orders.csv", newline="") as file:
        for row in csv.DictReader(file):
            totals[row["city"].strip().title()][0] += 1
            totals[row["city"].strip().title()][1] += int(row["quantity"]) * float(row["price"])
    assert totals, "the snippet wrote no orders"
    assert parquet_output(tmp_path / "out" / "revenue") == {
        1: {city: (n, round(revenue, 2)) for city, (n, revenue) in totals.items()}}


@pytest.mark.parametrize("name", ["orders.csv", "orders.csv.gz"])
def test_a_file_without_a_column_the_example_reads_is_refused_in_one_line(tmp_path, name):
    landing = tmp_path / "landing"
    landing.mkdir()
    write_orders(landing / "2026-11-01.csv", order_rows(0, 3))
    data = b"city,price\nOslo,9.5\nRome,20\n"
    (landing / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "COLUMNS": "400"})
    done = subprocess.run([sys.executable, "-m", "gyreflow", "run", "--quiet", str(EXAMPLE), "--",
                           "--input", "landing/", "--output", "out/revenue"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"error: landing/{name}: no column 'quantity' (directory_etl.py reads the columns city, "
        "quantity, price; the file has city, price)"]
    assert not (tmp_path / "out").exists()


def test_a_file_without_a_column_that_lands_while_followed_stops_the_job_naming_it(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    write_orders(landing / "2026-11-01.csv", order_rows(0, 3))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "COLUMNS": "400"})
    process = subprocess.Popen(
        [sys.executable, "-m", "gyreflow", "run", "--quiet", "--until-idle", "20", str(EXAMPLE),
         "--", "--input", "landing/", "--output", "out/revenue", "--window", "1", "--follow"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)
        (landing / "_2026-11-02.csv").write_text("city,price\nOslo,3\n")
        os.replace(landing / "_2026-11-02.csv", landing / "2026-11-02.csv")
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, stderr
    first = stderr.splitlines()[0]
    assert first.startswith("error: ") and (
        "landing/2026-11-02.csv: no column 'quantity' (directory_etl.py reads the columns city, "
        "quantity, price; the file has city, price)") in first, stderr
