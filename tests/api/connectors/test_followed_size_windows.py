"""A followed directory cut into size windows goes on when a window fills and the next record is a
while away: the input ends only when the source says so (idle for until_idle), not because the
look-ahead after a full window found nothing yet."""

from __future__ import annotations

import os
import threading
import time

from gyreflow.api import DirectorySource, Environment, SizeTumblingWindow


def land(folder, name: str, lines: list[str]) -> None:
    hidden = folder / f"_{name}"
    hidden.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    os.replace(hidden, folder / name)  # complete when it appears


def test_a_full_window_then_a_pause_does_not_end_a_followed_directory(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    files = {"a.txt": ["a1", "a2"], "b.txt": ["b1", "b2"], "c.txt": ["c1"]}
    land(landing, "a.txt", files["a.txt"])

    def later() -> None:  # each file fills a window, then nothing comes for a while
        for name in ("b.txt", "c.txt"):
            time.sleep(1.5)
            land(landing, name, files[name])

    lander = threading.Thread(target=later)
    pipeline = Environment.local(progress=False).pipeline("followed")

    @pipeline.task
    def read(ctx):
        source = DirectorySource(str(landing), "*.txt", format="text", follow=True,
                                 poll_interval=0.1, until_idle=3.0)
        ctx.source(source, SizeTumblingWindow(2), parallelism=1).collect("lines")

    lander.start()
    try:
        by_window = pipeline.execute()["read"].by_window("lines")
    finally:
        lander.join()
    # independent oracle: the files in name order, cut into windows of 2 lines
    lines = [line for name in sorted(files) for line in files[name]]
    assert by_window == {i // 2 + 1: lines[i:i + 2] for i in range(0, len(lines), 2)}
