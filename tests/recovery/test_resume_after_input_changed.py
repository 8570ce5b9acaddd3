"""A resume whose input file was cut below the offset the job reached: one error line naming the
file and both sizes, exit 5, the windows already published kept (it used to finish without a word,
having read nothing)."""

from __future__ import annotations

import pytest
from _recovery_jobs import KILLED, WORD_COUNT, run_job

pytestmark = pytest.mark.processes


def test_a_file_cut_below_the_resumed_offset_is_named_and_the_output_kept(tmp_path):
    source = tmp_path / "in.txt"
    lines = [" ".join(f"w{(i * 7 + j) % 13}" for j in range(8)) for i in range(200)]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    env = {"GYREFLOW_STATE__BACKEND": "rocksdb", "GYREFLOW_STATE__PATH": str(tmp_path / "state")}
    args = ["--input", str(source), "--output", str(out), "--window", "20"]
    crashed = run_job(WORD_COUNT, args, {**env, "GYREFLOW_CRASH_AT": "after-commit:4"})
    assert crashed.returncode == KILLED, crashed.stderr
    published = sorted(path.name for path in out.iterdir() if path.is_file())
    assert published, "the crashed run published nothing to keep"
    kept = {name: (out / name).read_bytes() for name in published}
    size = len("\n".join(lines[:3]) + "\n")
    source.write_bytes(source.read_bytes()[:size])

    resumed = run_job(WORD_COUNT, args, env, ("--resume",))

    assert resumed.returncode == 5, resumed.stderr
    assert "Traceback" not in resumed.stderr
    [line] = [line for line in resumed.stderr.splitlines() if line.startswith("error:")]
    assert f"input file {source}: the job read it up to byte" in line
    assert f"but it now has {size} bytes" in line
    assert {name: (out / name).read_bytes() for name in published} == kept
