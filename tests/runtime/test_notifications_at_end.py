"""Notifications asked for windows after the input's last one do not run, as documented."""

from __future__ import annotations

from gyreflow.api import Environment, ProcessFunction, SizeTumblingWindow


class AskLater(ProcessFunction):
    def process(self, record, ctx):
        ctx.notify_at(ctx.window + 5 if record == "a" else ctx.window)

    def on_notify(self, window, ctx):
        ctx.emit((ctx.key, window))


def test_requests_past_the_last_window_never_run_and_the_others_run_once():
    pipeline = Environment.local(progress=False).pipeline("late-notifications")

    @pipeline.task
    def job(ctx):
        (ctx.source(list("abcabcab"), SizeTumblingWindow(2), parallelism=1).key_by()
         .process(AskLater()).collect("out"))

    by_window = pipeline.execute()["job"].by_window("out")
    assert {w: sorted(v) for w, v in by_window.items()} == {
        1: [("b", 1)], 2: [("c", 2)], 3: [("b", 3), ("c", 3)], 4: [("b", 4)]}
