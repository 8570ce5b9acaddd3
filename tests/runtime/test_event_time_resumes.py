"""Event-time jobs killed after a commit and resumed with 2 or 1 timestamp tasks give the
uninterrupted run's output (real processes, RocksDB state)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

JOB = textwrap.dedent('''
    import json, sys, warnings
    warnings.filterwarnings("ignore")
    from gyreflow.api import Environment, SizeTumblingWindow, Tumbling
    state, stamping, resume, events = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "resume", sys.argv[4]
    events = json.loads(events)
    env = Environment.local(parallelism=2, progress=False,
                            config={"state.backend": "rocksdb", "state.path": state})
    pipeline = env.pipeline("resumes")

    @pipeline.task
    def job(ctx):
        counts = (ctx.source([(t, "k") for t in events], SizeTumblingWindow(1), parallelism=1)
                  .with_timestamps(lambda r: r[0], max_delay=0).with_parallelism(stamping)
                  .key_by(lambda r: r[1]).window(Tumbling(10)).count())
        counts.collect("results")
        counts.late().collect("late")

    result = pipeline.execute(resume=resume)["job"]
    print(json.dumps({"results": {w: sorted(map(list, v)) for w, v in result.by_window("results").items()},
                      "late": {w: sorted(map(list, v)) for w, v in result.by_window("late").items()}}))
''')

# Out of order, one record per processing window: which timestamp task gets a record decides
# which records are late and when windows fire.
SHUFFLED = [100, 0, 50, 1000, 55, 5, 990, 400, 995, 420, 1200, 430]
OUT_OF_ORDER = [t + 2000 * block for block in range(3) for t in SHUFFLED]
IN_ORDER = [10 * i for i in range(24)]


def _run(tmp_path, state: str, stamping: int, events: list, mode: str, crash: str | None = None):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    if crash:
        env["GYREFLOW_CRASH_AT"] = crash
    done = subprocess.run([sys.executable, str(script), str(tmp_path / state), str(stamping),
                           mode, json.dumps(events)], env=env, capture_output=True, text=True,
                          timeout=240, check=False)
    return done


def _output(done) -> dict:
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {part: {int(w): v for w, v in windows.items()} for part, windows in found.items()}


def _flat(output: dict, part: str, windows=None) -> list:
    return sorted(item for w, items in output[part].items() if windows is None or w in windows
                  for item in items)


@pytest.mark.parametrize(("events", "resumed_with"), [(OUT_OF_ORDER, 2), (IN_ORDER, 1)])
def test_a_resume_after_a_kill_gives_the_uninterrupted_output(tmp_path, events, resumed_with):
    reference = _output(_run(tmp_path, "reference", 2, events, "fresh"))
    killed = _run(tmp_path, "state", 2, events, "fresh", crash="after-commit:4")
    assert killed.returncode != 0
    resumed = _output(_run(tmp_path, "state", resumed_with, events, "resume"))
    first = min(resumed["results"])
    assert first > 1
    before = set(range(1, first))
    if resumed_with == 2:  # the same layout: the same results in the same processing windows
        for part in ("results", "late"):
            assert {w: v for w, v in resumed[part].items() if v} == \
                {w: v for w, v in reference[part].items() if w >= first and v}
    else:  # one task now: every window counted once, nothing late (the input is in order)
        combined = sorted(_flat(reference, "results", before) + _flat(resumed, "results"))
        assert combined == _flat(reference, "results")
        assert _flat(resumed, "late") == _flat(reference, "late") == []
