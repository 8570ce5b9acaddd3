"""Sensor readings: each window's high per sensor, and each sensor's running mean (docs/tutorial.md)."""

import argparse

from gyreflow.api import AggregateFunction, Environment, FileSink, FileSource, SizeTumblingWindow


def parse(line: str) -> tuple[str, float]:
    """``kitchen,21.5`` -> ``("kitchen", 21.5)``."""
    sensor, celsius = line.split(",")
    return sensor, float(celsius)


class Mean(AggregateFunction):
    """The mean of every reading so far: (sum, count) is keyed state, kept across windows."""

    def init(self):
        return (0.0, 0)

    def add(self, acc, reading):
        return (acc[0] + reading[1], acc[1] + 1)

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])

    def result(self, acc):
        return round(acc[0] / acc[1], 2)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--input", default="examples/data/readings.csv", help="sensor,celsius lines")
    parser.add_argument("--output", default="out/readings", help="folder for the window files")
    parser.add_argument("--window", type=int, default=10, help="readings per window")
    args = parser.parse_args(argv)

    pipeline = Environment.from_config().pipeline("readings")

    @pipeline.task
    def readings(ctx):
        # One source task: a window is --window consecutive lines, whatever the parallelism.
        lines = ctx.source(FileSource(args.input), SizeTumblingWindow(args.window), name="lines",
                           parallelism=1)
        by_sensor = lines.map(parse).with_name("parse").key_by(lambda reading: reading[0])
        highs = by_sensor.window().max(lambda reading: reading[1]).with_name("highs")
        means = by_sensor.aggregate(Mean()).with_name("means")
        highs.sink(FileSink(f"{args.output}/highs"))
        means.sink(FileSink(f"{args.output}/means"))

    pipeline.execute()


if __name__ == "__main__":
    main()
