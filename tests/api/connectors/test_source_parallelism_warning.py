"""A size-windowed source running with parallelism above 1 is warned about at plan time, once per
source, naming the source, the line that opened it and how to pin it; the windows it warns about
are the per-task windows a plain loop computes."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from gyreflow.api import AllWindow, Environment, SizeTumblingWindow
from gyreflow.api.language.source_windows import SourceParallelismWarning

WORDS = ["a", "b", "c", "d", "e", "f", "g"]


def per_task_windows(data: list, size: int, parallelism: int) -> dict[int, list]:
    """By definition: task i reads data[i::p] (a list source) and cuts it into chunks of ``size``;
    window w holds chunk w of every task."""
    windows: dict[int, list] = {}
    for task in range(parallelism):
        share = data[task::parallelism]
        for start in range(0, len(share), size):
            windows.setdefault(start // size + 1, []).extend(share[start:start + size])
    return windows


def run_collect(parallelism: int, source_parallelism: int | None = None, window=None,
                pin_after: bool = False):
    pipeline = Environment.local(parallelism=parallelism, progress=False).pipeline("warned")

    @pipeline.task
    def job(ctx):
        stream = ctx.source(WORDS, window or SizeTumblingWindow(2), name="words",
                            parallelism=source_parallelism)
        if pin_after:
            stream.with_parallelism(1)
        stream.collect("out")

    return pipeline, pipeline.execute()["job"].by_window("out")


def caught(action) -> tuple[object, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        value = action()
    return value, [w for w in seen if issubclass(w.category, SourceParallelismWarning)]


def test_a_split_size_window_is_warned_about_and_the_warning_is_true():
    (_, windows), seen = caught(lambda: run_collect(2))
    assert len(seen) == 1
    message = str(seen[0].message)
    assert "source 'words' runs with parallelism 2 and SizeTumblingWindow(2)" in message
    assert "ctx.source(..., parallelism=1)" in message
    assert Path(seen[0].filename) == Path(__file__)  # the line that opened the source
    assert "ctx.source(WORDS" in Path(__file__).read_text().splitlines()[seen[0].lineno - 1]
    # what it warns about: windows per source task, not windows of 2 consecutive records
    assert {w: sorted(r) for w, r in windows.items()} == {
        w: sorted(r) for w, r in per_task_windows(WORDS, 2, 2).items()}
    assert windows != {i // 2 + 1: WORDS[i:i + 2] for i in range(0, len(WORDS), 2)}


@pytest.mark.parametrize("case", [
    {"parallelism": 1},
    {"parallelism": 2, "source_parallelism": 1},
    {"parallelism": 2, "pin_after": True},
    {"parallelism": 2, "window": AllWindow()},
])
def test_no_warning_where_the_windows_do_not_depend_on_the_parallelism(case):
    (_, windows), seen = caught(lambda: run_collect(**case))
    assert seen == []
    if not isinstance(case.get("window"), AllWindow):  # windows of 2 consecutive records
        assert windows == {i // 2 + 1: WORDS[i:i + 2] for i in range(0, len(WORDS), 2)}


def test_once_per_source_under_the_default_filter():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        pipeline, _ = run_collect(3)
        pipeline.execute(fresh=True)  # built again: not warned again
        pipeline.explain()
    assert [w.category for w in seen] == [SourceParallelismWarning]


def changing_graph_blocks() -> list[str]:
    """docs/graphs.md's examples of graphs that change window by window (a size-windowed list)."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "graphs.md").read_text(encoding="utf-8")
    return [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S)
            if "SizeTumblingWindow(" in b and "GraphView(" in b]


@pytest.mark.parametrize("index", range(3))
def test_the_changing_graph_examples_print_the_same_at_parallelism_2(index, tmp_path, monkeypatch,
                                                                    capsys):
    """Their sources are pinned: an environment at parallelism 2 changes nothing they print."""
    block = changing_graph_blocks()[index]
    assert "Environment.local(progress=False)" in block
    shown = [line[2:] for line in block.rstrip().splitlines() if line.startswith("# ")]
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SourceParallelismWarning)
        exec(compile(block.replace("Environment.local(progress=False)",
                                   "Environment.local(parallelism=2, progress=False)"),
                     "docs/graphs.md", "exec"), {})
    assert capsys.readouterr().out.splitlines() == shown
