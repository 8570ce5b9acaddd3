"""What the monitoring port costs: a streaming word count with and without ``--ui``, in one run.

With the port on, the job's monitor counts every window and a scraper thread reads ``/metrics`` and
``/api/job`` four times a second (the open page reads ``/api/job`` once a second, Prometheus
typically ``/metrics`` every 15 s). Cases run interleaved, best of N, on
the local environment (where per-window costs show most: a window costs about a millisecond) and
optionally on Spark. The target: under 2% of throughput. Every run's counts are checked against
``collections.Counter``. ``python benchmarks/ui.py --words 200000 --repeat 3`` is a quick run.
"""

from __future__ import annotations

import argparse
import threading
import urllib.request
from collections import Counter

from _common import (
    command_line,
    format_rate,
    format_seconds,
    interleaved_best_of,
    machine_line,
    print_table,
    update_docs_section,
    word_lines,
)

from gyreflow.api import Environment, SizeTumblingWindow
from gyreflow.api.service.ui_server import RunUi

TARGET = 0.02  # at most 2% slower with the port on


def word_count(env, lines: list[str], window: int, monitor=None) -> dict:
    pipeline = env.pipeline("ui-benchmark")

    @pipeline.task
    def count(ctx):
        ctx.source(lines, SizeTumblingWindow(window)).flat_map(str.split).key_by().count().collect("n")

    result = pipeline.execute(fresh=True, listener=monitor)["count"]
    totals: dict = {}
    for word, n in result.output("n"):
        totals[word] = max(totals.get(word, 0), n)
    return totals


class Scraper:
    """Reads /metrics and /api/job every ``interval`` seconds while a run goes on."""

    def __init__(self, url: str, interval: float = 0.25) -> None:
        self.url, self.interval = url, interval
        self.stopped = threading.Event()
        self.scrapes = 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            for path in ("metrics", "api/job"):
                with urllib.request.urlopen(self.url + path, timeout=5) as response:
                    response.read()
            self.scrapes += 1

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()


def direct_costs() -> tuple[float, float]:
    """Microseconds the monitor spends per window (four operators), milliseconds per scrape of
    both endpoints: what the end-to-end ratio should show, without the machine's noise."""
    import json
    import time

    from prometheus_client import generate_latest

    from gyreflow.api.service.monitor import JobMonitor
    from gyreflow.runtime.metrics import WindowMetrics
    from gyreflow.scheduler.events import OperatorMetrics

    monitor = JobMonitor()
    window = WindowMetrics("p/t", 1, 1, 0.002, {f"op-{i}": OperatorMetrics(100, 100) for i in range(4)},
                           ("op-0",))
    started = time.perf_counter()
    for _ in range(100_000):
        monitor.on_window(window)
    per_window = (time.perf_counter() - started) / 100_000 * 1e6
    started = time.perf_counter()
    for _ in range(200):
        generate_latest(monitor.registry)
        json.dumps(monitor.snapshot())
    per_scrape = (time.perf_counter() - started) / 200 * 1e3
    return per_window, per_scrape


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=1_000_000)
    parser.add_argument("--window", type=int, default=200, help="lines per window (10 words a line)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--spark", action="store_true",
                        help="also measure on Spark (local[2]); use bigger windows there")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    lines = word_lines(args.words)
    expected = Counter(word for line in lines for word in line.split())
    environments = {"local": Environment.local(progress=False, config={"state.backend": "memory"})}
    if args.spark:
        environments["spark"] = Environment.from_config(None, {
            "environment.type": "spark", "spark.master": "local[2]", "progress.enabled": False,
            "state.backend": "memory"})

    def check(totals: dict) -> None:
        if totals != expected:
            msg = "the word counts differ from collections.Counter"
            raise AssertionError(msg)

    rows, worst, scrapes = [], 0.0, {}
    windows = -(-len(lines) // args.window)
    for name, env in environments.items():
        ui = RunUi.open("127.0.0.1:0")
        scraper = Scraper(ui.server.url)
        cases = {"off": lambda env=env: word_count(env, lines, args.window),
                 "on": lambda env=env, m=ui.monitor: word_count(env, lines, args.window, m)}
        try:
            timings = interleaved_best_of(cases, args.repeat, check=dict.fromkeys(cases, check))
        finally:
            scraper.stop()
            ui.close()
        off, on = timings["off"].best, timings["on"].best
        cost = on / off - 1
        worst = max(worst, cost)
        for case, seconds in (("off", off), ("on", on)):
            rows.append([name, case, format_seconds(seconds), format_rate(args.words / seconds),
                         f"{seconds / windows * 1000:.3f}",
                         "" if case == "off" else f"{cost * 100:+.1f}%"])
        scrapes[name] = scraper.scrapes
    title = (f"Word count, {args.words:,} words in {windows:,} windows of {args.window} lines, "
             f"best of {args.repeat}")
    markdown = print_table(title, ["environment", "--ui", "seconds", "words/s", "ms per window",
                                   "cost"], rows)
    per_window, per_scrape = direct_costs()
    verdict = (f"Measured directly: the monitor spends {per_window:.1f} µs per window and a scrape of "
               f"both endpoints {per_scrape:.2f} ms, i.e. "
               f"{(per_window * 1e-6 * windows + per_scrape * 1e-3 * 4 * off) / off * 100:.2f}% of "
               f"the local run at four scrapes a second.  \n"
               f"Scrapes of /metrics and /api/job during the runs: "
               f"{', '.join(f'{n} {c}' for n, c in scrapes.items())}.  \n"
               f"Target: the port costs under {TARGET:.0%} of throughput: worst {worst * 100:+.1f}% "
               f"-> {'met' if worst < TARGET else 'NOT met'}")
    print(verdict)
    if args.write_docs:
        update_docs_section("ui", "\n\n".join([
            "## The monitoring port",
            "A streaming word count with and without `--ui` (the job's monitor counting every window "
            "and a scraper reading `/metrics` and `/api/job`, as Prometheus and the open "
            "page do, four times a second), interleaved in one run; every run's counts checked against "
            "`collections.Counter`.",
            f"Run with `{command_line()}`.  \n{machine_line()}",
            f"### {title}", markdown, verdict]))


if __name__ == "__main__":
    main()
