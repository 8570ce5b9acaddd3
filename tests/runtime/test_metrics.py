"""Per-window metrics in bounded memory: the first and last windows kept, every window summed."""

from __future__ import annotations

import random

from gyreflow.api import SizeTumblingWindow
from gyreflow.runtime.metrics import TaskResult, WindowMetrics
from gyreflow.scheduler.events import OperatorMetrics


def window(w: int, seconds: float, records: int) -> WindowMetrics:
    return WindowMetrics("t", 0, w, seconds, {"src": OperatorMetrics(0, records),
                                                "map": OperatorMetrics(records, 2 * records)})


def test_a_long_run_keeps_the_first_and_last_windows_and_sums_all():
    rng = random.Random(7)
    result = TaskResult("t", kept=3)
    seconds = [rng.uniform(0.0001, 0.5) for _ in range(10_000)]
    records = [rng.randrange(100) for _ in range(10_000)]
    for w, (s, r) in enumerate(zip(seconds, records, strict=True), start=1):
        result.add_window(window(w, s, r))
    assert [m.window for m in result.windows] == [1, 2, 3, 9998, 9999, 10000]
    assert result.window_count == 10_000
    assert abs(result.summary.seconds - sum(seconds)) < 1e-6
    assert result.summary.operators == {"src": [0, sum(records)],
                                        "map": [sum(records), 2 * sum(records)]}
    ordered = sorted(seconds)
    for fraction in (0.5, 0.9, 0.99):
        exact = ordered[int(fraction * len(ordered)) - 1]
        bound = result.summary.percentile(fraction)
        assert exact <= bound <= 2 * exact, (fraction, exact, bound)


def test_kept_windows_from_config_and_totals_of_a_real_run(make_env):
    data = list(range(40))
    env = make_env(2, **{"metrics.kept_windows": 2})
    pipeline = env.pipeline("metrics")

    @pipeline.task(name="job")
    def job(ctx):
        (ctx.source(data, SizeTumblingWindow(4)).with_name("numbers")
         .flat_map(lambda x: [x] * (x % 3)).with_name("copies").collect("out"))

    result = pipeline.execute()["job"]
    assert result.window_count == len(data) // (4 * 2)  # 4 records per source task and window
    assert [m.window for m in result.windows] == [1, 2, 4, 5]
    copies = sum(x % 3 for x in data)  # plain-Python oracle of the records the flat_map emits
    assert result.summary.operators["copies"] == [len(data), copies]
    assert len(result.output("out")) == copies
