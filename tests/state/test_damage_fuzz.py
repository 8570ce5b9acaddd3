"""Damage fuzz: every kind of file a job keeps is truncated, overwritten or deleted, after a completed
run and after a kill mid-run, then the job resumes. Each case must end either with exactly the
uninterrupted run's output, or with exit 3, one ``error:`` line and every window published before left
as it was. Never exit 0 with other output.

RocksDB (every database of the job: meta, records, state; every file kind in them, and the job's
key), SQLite (the database file, its write-ahead log, the key) and PostgreSQL (every row of the job:
meta, records, state; a value truncated, overwritten or the row deleted). The suite runs a fixed
sample of the cases (``GYREFLOW_FUZZ_ALL=1`` runs them all).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from _postgres import POSTGRES_SECRET
from _recovery_data import word_count_oracle
from _recovery_jobs import _create_database

ROOT = Path(__file__).resolve().parents[2]
WORD_COUNT = ROOT / "examples" / "word_count.py"
WINDOW = 4
LINES = [f"w{i % 7} w{i % 5} w{i % 3} x{i % 11}" for i in range(48)]  # 12 windows
MODES = ("truncate", "overwrite", "delete")
SAMPLE = 8  # cases per backend and moment in the suite (PostgreSQL: half as many)


def run(workdir: Path, backend: str, *flags: str, crash_at: str | None = None,
        url: str | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local",
                "GYREFLOW_STATE__BACKEND": "jdbc" if url else backend,
                "GYREFLOW_STATE__PATH": str(workdir / "state"), "COLUMNS": "400"})
    if url:
        env.update({"GYREFLOW_STATE__URL": url, "GYREFLOW_STATE__SECRET": POSTGRES_SECRET})
    if crash_at:
        env["GYREFLOW_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, "-m", "gyreflow", "run", "--quiet", *flags,
                           str(WORD_COUNT), "--", "--input", str(workdir / "in.txt"), "--window",
                           str(WINDOW), "--output", str(workdir / "out")],
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def published(workdir: Path) -> dict[str, bytes]:
    out = workdir / "out"
    if not out.exists():
        return {}
    return {n: (out / n).read_bytes() for n in sorted(os.listdir(out)) if not n.startswith(".")}


def parse(files: dict[str, bytes]) -> dict[int, dict[str, int]]:
    found: dict[int, dict[str, int]] = {}
    for data in files.values():
        for line in data.decode().splitlines():
            record = json.loads(line)
            found.setdefault(record["window"], {})[record["word"]] = record["count"]
    return found


def base(tmp_path_factory, backend: str, moment: str) -> Path:
    workdir = tmp_path_factory.mktemp(f"fuzz-{backend}-{moment}")
    (workdir / "in.txt").write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    if moment == "completed":
        assert run(workdir, backend).returncode == 0
    else:
        done = run(workdir, backend, crash_at="after-commit:7")
        assert done.returncode == -signal.SIGKILL, done.stderr
    return workdir


def damage_targets(state: Path) -> list[Path]:
    """Every file the job keeps, but the job lock (its content is only a description)."""
    return sorted(p for p in state.rglob("*") if p.is_file() and not p.name.endswith(".lock")
                  and p.stat().st_size > 0)


def damage(path: Path, mode: str, rng: random.Random) -> None:
    if mode == "delete":
        path.unlink()
        return
    data = bytearray(path.read_bytes())
    if mode == "truncate":
        path.write_bytes(bytes(data[:len(data) // 2]))
        return
    start = rng.randrange(len(data))
    for i in range(start, min(len(data), start + 8)):
        data[i] ^= 0xA5
    path.write_bytes(bytes(data))


def cases(backend: str, moment: str) -> list:
    # The files a run leaves are known only once it ran: the case ids are (file index, mode), the
    # index taken modulo the number of files found.
    rng = random.Random(f"{backend}-{moment}")
    everything = [(i, mode) for i in range(40) for mode in MODES]
    chosen = everything if os.environ.get("GYREFLOW_FUZZ_ALL") else rng.sample(everything, SAMPLE)
    return [pytest.param(backend, moment, i, mode, id=f"{backend}-{moment}-{i}-{mode}")
            for i, mode in chosen]


ALL_CASES = [c for backend in ("rocksdb", "jdbc") for moment in ("completed", "killed")
             for c in cases(backend, moment)]
_BASES: dict[tuple[str, str], Path] = {}


@pytest.mark.parametrize(("backend", "moment", "index", "mode"), ALL_CASES)
def test_damaged_state_resumes_right_or_stops_with_exit_3(backend, moment, index, mode,
                                                         tmp_path_factory, tmp_path):
    key = (backend, moment)
    if key not in _BASES:
        _BASES[key] = base(tmp_path_factory, backend, moment)
    workdir = tmp_path / "job"
    shutil.copytree(_BASES[key], workdir)
    targets = damage_targets(workdir / "state")
    target = targets[index % len(targets)]
    before = published(workdir)
    damage(target, mode, random.Random(index))
    done = run(workdir, backend, "--resume")
    assert_right_or_refused(done, workdir, before, f"{mode} of {target.relative_to(workdir)}")


def assert_right_or_refused(done, workdir: Path, before: dict[str, bytes], where: str) -> None:
    """Exit 0 with the uninterrupted run's output, or exit 3 with one ``error:`` line, no
    traceback, every window published before untouched and any published since the oracle's."""
    expected = word_count_oracle(LINES, WINDOW)
    if done.returncode == 0:
        assert parse(published(workdir)) == expected, f"exit 0 with other output after {where}"
        return
    assert done.returncode == 3, f"{where}: exit {done.returncode}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, f"{where}:\n{done.stderr[-3000:]}"
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, f"{where}:\n{done.stderr}"
    after = published(workdir)
    assert all(after.get(n) == data for n, data in before.items()), f"{where}: a published file changed"
    assert all(parse({n: d})[w] == expected[w] for n, d in after.items() for w in parse({n: d})), (
        f"{where}: a window published since is not the oracle's")


# --- PostgreSQL: rows instead of files ------------------------------------------------------------

PG_TABLES = ("gyreflow_meta", "gyreflow_records", "gyreflow_state")
PG_VALUE = {"gyreflow_meta": "body", "gyreflow_records": "v", "gyreflow_state": "v"}
PG_CASES = [pytest.param(moment, i, mode, id=f"postgresql-{moment}-{i}-{mode}")
            for moment in ("completed", "killed")
            for i, mode in (
                [(i, mode) for i in range(40) for mode in MODES]
                if os.environ.get("GYREFLOW_FUZZ_ALL")
                else random.Random(f"postgresql-{moment}").sample(
                    [(i, mode) for i in range(40) for mode in MODES], SAMPLE // 2))]
_PG_BASES: dict[str, tuple[Path, str]] = {}


def pg_rows(engine: sa.Engine) -> list[tuple[str, tuple]]:
    """Every row of every table, named by table and ctid (a stable order)."""
    rows = []
    with engine.connect() as conn:
        for table in PG_TABLES:
            found = conn.execute(sa.text(f"select ctid::text from {table} order by ctid")).scalars()
            rows.extend((table, ctid) for ctid in found)
    return rows


def pg_damage(engine: sa.Engine, table: str, ctid: str, mode: str, rng: random.Random) -> None:
    column = PG_VALUE[table]
    with engine.begin() as conn:
        if mode == "delete":
            conn.execute(sa.text(f"delete from {table} where ctid = cast(:c as tid)"), {"c": ctid})
            return
        value = bytearray(conn.execute(sa.text(f"select {column} from {table} where ctid = cast(:c as tid)"),
                                       {"c": ctid}).scalar_one())
        if mode == "truncate":
            value = value[:len(value) // 2]
        else:
            start = rng.randrange(len(value))
            for i in range(start, min(len(value), start + 8)):
                value[i] ^= 0xA5
        conn.execute(sa.text(f"update {table} set {column} = :v where ctid = cast(:c as tid)"),
                     {"v": bytes(value), "c": ctid})


@pytest.mark.parametrize(("moment", "index", "mode"), PG_CASES)
def test_damaged_postgresql_rows_resume_right_or_stop_with_exit_3(moment, index, mode, postgres_url,
                                                                  tmp_path_factory, tmp_path):
    if moment not in _PG_BASES:
        workdir = tmp_path_factory.mktemp(f"fuzz-postgresql-{moment}")
        (workdir / "in.txt").write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
        url, _ = _create_database(postgres_url)
        if moment == "completed":
            assert run(workdir, "jdbc", url=url).returncode == 0
        else:
            done = run(workdir, "jdbc", crash_at="after-commit:7", url=url)
            assert done.returncode == -signal.SIGKILL, done.stderr
        _PG_BASES[moment] = (workdir, url)
    base_dir, base_url = _PG_BASES[moment]
    workdir = tmp_path / "job"
    shutil.copytree(base_dir, workdir)
    # A copy of the base database for this case (CREATE DATABASE ... TEMPLATE).
    base_name = sa.engine.make_url(base_url).database
    name = f"{base_name}_{moment[0]}{index}{mode[0]}"
    admin = sa.create_engine(sa.engine.make_url(base_url).set(database="postgres"),
                             isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}" TEMPLATE "{base_name}"'))
    url = sa.engine.make_url(base_url).set(database=name).render_as_string(hide_password=False)
    engine = sa.create_engine(url)
    try:
        rows = pg_rows(engine)
        table, ctid = rows[index % len(rows)]
        before = published(workdir)
        pg_damage(engine, table, ctid, mode, random.Random(index))
        engine.dispose()
        done = run(workdir, "jdbc", "--resume", url=url)
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    assert_right_or_refused(done, workdir, before, f"{mode} of a row of {table}")
