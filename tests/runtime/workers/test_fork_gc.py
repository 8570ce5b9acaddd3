"""A job's worker processes never finalize the objects of the process that started them: a
collection in a worker leaves the starting process's garbage alone (a native library's object
hung in its destructor there, its threads not copied by the fork)."""

from __future__ import annotations

import gc
import os

import pytest

from gyreflow.api import Environment, SizeTumblingWindow


class Finalized:
    """Garbage only a collection frees (a cycle), which notes the process that finalized it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.me = self

    def __del__(self) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()}\n")


def collected(record):
    gc.collect()  # in the worker process that runs this task
    return record


@pytest.mark.processes
def test_a_worker_never_finalizes_the_starting_process_objects(tmp_path):
    marker = tmp_path / "finalized"
    gc.collect()
    gc.disable()  # the garbage below stays until a collection, here or in a worker
    try:
        Finalized(str(marker))
        env = Environment.local(2, progress=False,
                                config={"environment.workers": 2, "control.enabled": False,
                                        "state.backend": "memory"})
        pipeline = env.pipeline("fork-gc")

        @pipeline.task
        def job(ctx):
            ctx.source(list(range(40)), SizeTumblingWindow(10)).map(collected).collect("out")

        out = pipeline.execute()["job"].output("out")
    finally:
        gc.enable()
    assert sorted(out) == list(range(40))
    gc.collect()  # here: the one process that finalizes it
    assert marker.read_text(encoding="utf-8").split() == [str(os.getpid())]
