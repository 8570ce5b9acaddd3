"""Nexmark-style event-time queries: gyreflow against plain-Python loops and PySpark DataFrames.

Q-hot: bids per auction in sliding windows (10 s every 5 s), the busiest auction per window.
Q-max: the highest bid per tumbling window (10 s).
Also the per-window count against the cumulative count (processing windows), to show per-window
aggregation keeps the batched data path.

Bids arrive in time order, up to ``--disorder`` seconds late (within the allowed delay), so no bid
is late and the three engines compute the same answer, which is checked before a time counts.
"""

from __future__ import annotations

import argparse
import math
import random
from collections import Counter, defaultdict

from _common import (
    DEFAULT_SEED,
    command_line,
    format_rate,
    format_ratio,
    format_seconds,
    interleaved_best_of,
    machine_line,
    print_table,
    update_docs_section,
)

from gyreflow.api import Environment, SizeTumblingWindow, Sliding, Tumbling

SIZE, SLIDE, TUMBLE = 10.0, 5.0, 10.0
SPARK_MASTER = "local[2]"


def make_bids(count: int, disorder: float, seed: int = DEFAULT_SEED) -> list[tuple]:
    """``(ts, auction, price)`` bids: 1,000 auctions (Zipf-like), 20 bids per second."""
    rng = random.Random(seed)
    auctions = list(range(1000))
    weights = [1 / (rank + 1) for rank in range(len(auctions))]
    picks = rng.choices(auctions, weights=weights, k=count)
    return [(round(i / 20 - rng.random() * disorder, 3), picks[i], rng.randrange(1, 10_000))
            for i in range(count)]


# --- Nexmark's three streams, as nexmark-flink's generator makes them -------------------------------

FIRST_ID = 1000
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
START_MS = 1_704_153_570_000  # 2024-01-01 23:59:30 UTC: the events cross a day


def _word(rng: random.Random, size: int) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(size))


def _url(rng: random.Random) -> str:
    return f"https://www.nexmark.com/{_word(rng, 5)}/{_word(rng, 5)}/{_word(rng, 5)}/item.htm?query=1"


def make_events(count: int, seed: int = DEFAULT_SEED, step_ms: int = 20) -> tuple[list, list, list]:
    """``(persons, auctions, bids)`` of ``count`` events ``step_ms`` apart, in time order, in the
    proportions of Nexmark's generator (of 50 events: 1 person, 3 auctions, 46 bids), with its
    columns (times in epoch milliseconds; text without commas, for text tables):

    - person ``(id, name, emailAddress, creditCard, city, state, dateTime, extra)``
    - auction ``(id, itemName, description, initialBid, reserve, dateTime, expires, seller,
      category, extra)``, open 2-20 s
    - bid ``(auction, bidder, price, channel, url, dateTime, extra)``: mostly for the latest auctions
      and by the latest people; half on a hot channel (Google, Facebook, Baidu, Apple, each with a
      URL of its own), half on ``channel-N`` whose URL mostly ends in ``&channel_id=N``; prices
      log-uniform from 1 to 10,000,000, all different (so the top bids of an auction are one list).
    """
    rng = random.Random(seed)
    hot_urls = [_url(rng) for _ in HOT_CHANNELS]
    persons: list = []
    auctions: list = []
    bids: list = []
    prices: set = set()
    names = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"]
    cities = ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle"]
    for i in range(count):
        now = START_MS + i * step_ms
        kind = i % 50
        if kind == 0 or not persons:
            pid = FIRST_ID + len(persons)
            email = f"{_word(rng, 6)}@{_word(rng, 4)}.com"
            persons.append((pid, f"{rng.choice(names)} {rng.choice(names)}", email,
                            " ".join(str(rng.randrange(1000, 10000)) for _ in range(4)), rng.choice(cities),
                            rng.choice(["AZ", "CA", "ID", "OR", "WA", "WY"]), now, _word(rng, 3)))
        elif kind <= 3 or not auctions:
            seller = persons[-1][0] if rng.random() < 0.5 else rng.choice(persons)[0]
            initial = rng.randrange(1, 1000)
            expires = now + rng.randrange(2_000, 20_000)
            auctions.append((FIRST_ID + len(auctions), _word(rng, 8), _word(rng, 12), initial,
                             initial + rng.randrange(1, 1000), now, expires, seller,
                             10 + rng.randrange(5), _word(rng, 3)))
        else:
            auction = auctions[-1 - min(rng.randrange(4), len(auctions) - 1)][0] if rng.random() < 0.9 \
                else rng.choice(auctions)[0]
            bidder = persons[-1][0] if rng.random() < 0.5 else rng.choice(persons)[0]
            price = round(10 ** (rng.random() * 7))
            while price in prices:
                price += 1
            prices.add(price)
            if rng.random() < 0.5:
                at = rng.randrange(len(HOT_CHANNELS))
                channel, url = HOT_CHANNELS[at], hot_urls[at]
            else:
                number = rng.randrange(10_000)
                channel, url = f"channel-{number}", _url(rng)
                if rng.random() < 0.9:
                    url += f"&channel_id={number}"
            bids.append((auction, bidder, price, channel, url, now, _word(rng, 3)))
    return persons, auctions, bids


# --- plain Python --------------------------------------------------------------------------------


def loop_hot(bids):
    counts: dict = defaultdict(Counter)
    for ts, auction, _ in bids:
        last = math.floor(ts / SLIDE)
        for k in range(last - int(SIZE / SLIDE) + 1, last + 1):
            counts[(k * SLIDE, k * SLIDE + SIZE)][auction] += 1
    return {window: max(c.values()) for window, c in counts.items()}


def loop_max(bids):
    best: dict = {}
    for ts, _, price in bids:
        start = math.floor(ts / TUMBLE) * TUMBLE
        if price > best.get(start, -1):
            best[start] = price
    return best


# --- gyreflow ------------------------------------------------------------------------------------


def gyreflow_hot(bids, disorder):
    pipeline = Environment.local(progress=False).pipeline("hot")

    @pipeline.task
    def hot(ctx):
        (ctx.source(bids, SizeTumblingWindow(20_000))
         .with_timestamps(lambda b: b[0], max_delay=disorder)
         .key_by(lambda b: b[1]).window(Sliding(SIZE, SLIDE)).count()
         .key_by(lambda r: (r.start, r.end)).window().max(lambda r: r.value)
         .collect())

    return dict(pipeline.execute()["hot"].output("collect"))


def gyreflow_max(bids, disorder):
    pipeline = Environment.local(progress=False).pipeline("max")

    @pipeline.task
    def highest(ctx):
        (ctx.source(bids, SizeTumblingWindow(20_000))
         .with_timestamps(lambda b: b[0], max_delay=disorder)
         .key_by(lambda b: 0).window(Tumbling(TUMBLE)).max(lambda b: b[2]).collect())

    return {r.start: r.value for r in pipeline.execute()["highest"].output("collect")}


def gyreflow_counts(words, per_window: bool):
    pipeline = Environment.local(progress=False).pipeline("count")

    @pipeline.task
    def count(ctx):
        keyed = ctx.source(words, SizeTumblingWindow(100_000)).key_by()
        (keyed.window().count() if per_window else keyed.count()).collect()

    return len(pipeline.execute()["count"].output("collect"))


# --- PySpark DataFrames ---------------------------------------------------------------------------


def spark_session():
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master(SPARK_MASTER).appName("nexmark-benchmark")
            .config("spark.ui.enabled", "false").getOrCreate())


def spark_frame(spark, bids):
    from pyspark.sql import functions as F  # noqa: N812 - the name PySpark documents

    frame = spark.createDataFrame(bids, "ts double, auction long, price long")
    return frame.withColumn("time", F.timestamp_seconds("ts")).cache()


def spark_hot(frame):
    from pyspark.sql import functions as F  # noqa: N812

    per_auction = frame.groupBy(F.window("time", f"{int(SIZE)} seconds", f"{int(SLIDE)} seconds")
                                .alias("w"), "auction").count()
    rows = per_auction.groupBy("w").agg(F.max("count").alias("top")).select(
        F.unix_micros(F.col("w.start")).alias("s"), F.unix_micros(F.col("w.end")).alias("e"),
        "top").collect()
    return {(r["s"] / 1e6, r["e"] / 1e6): r["top"] for r in rows}


def spark_max(frame):
    from pyspark.sql import functions as F  # noqa: N812

    rows = frame.groupBy(F.window("time", f"{int(TUMBLE)} seconds").alias("w")).agg(
        F.max("price").alias("best")).select(F.unix_micros(F.col("w.start")).alias("s"),
                                             "best").collect()
    return {r["s"] / 1e6: r["best"] for r in rows}


# --- the run ---------------------------------------------------------------------------------------


def checker(expected):
    def check(result):
        if result != expected:
            missing = sorted(set(expected.items()) ^ set(result.items()))[:3]
            msg = f"result differs from the plain loop's, e.g. {missing}"
            raise AssertionError(msg)

    return check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bids", type=int, default=200_000)
    parser.add_argument("--disorder", type=float, default=2.0, help="seconds bids may be late")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    bids = make_bids(args.bids, args.disorder)
    words = [str(b[1]) for b in bids]
    cases, checks = {}, {}
    hot, best = loop_hot(bids), loop_max(bids)
    cases["Q-hot plain loop"] = lambda: loop_hot(bids)
    cases["Q-hot gyreflow"] = lambda: gyreflow_hot(bids, args.disorder)
    cases["Q-max plain loop"] = lambda: loop_max(bids)
    cases["Q-max gyreflow"] = lambda: gyreflow_max(bids, args.disorder)
    checks.update({"Q-hot gyreflow": checker(hot), "Q-max gyreflow": checker(best)})
    if not args.no_spark:
        frame = spark_frame(spark_session(), bids)
        frame.count()  # cached before timing
        cases["Q-hot PySpark DataFrame"] = lambda: spark_hot(frame)
        cases["Q-max PySpark DataFrame"] = lambda: spark_max(frame)
        checks.update({"Q-hot PySpark DataFrame": checker(hot),
                       "Q-max PySpark DataFrame": checker(best)})
    cases["count: cumulative key_by().count()"] = lambda: gyreflow_counts(words, False)
    cases["count: per window key_by().window().count()"] = lambda: gyreflow_counts(words, True)
    timings = interleaved_best_of(cases, args.repeat, check=checks)
    rows = []
    for name, timing in timings.items():
        query = name.split(" ")[0]
        reference = timings.get(f"{query} plain loop")
        if name.startswith("count:"):
            reference = timings["count: cumulative key_by().count()"]
        ratio = reference.best / timing.best if reference else 1.0
        rows.append([name, format_seconds(timing.best), format_rate(args.bids / timing.best),
                     format_ratio(ratio)])
    columns = ["query and engine", "seconds", "bids/s", "vs reference"]
    markdown = print_table(f"Nexmark-style queries, {args.bids:,} bids", columns, rows)
    if args.write_docs:
        note = (f"{args.bids:,} bids over {args.bids / 20:,.0f} s of event time, 1,000 auctions, "
                f"up to {args.disorder} s out of order (the allowed delay). Reference: the plain "
                "loop for the queries, the cumulative count for the per-window count. "
                f"Best of {args.repeat}; {machine_line()}.\n\n`{command_line()}`")
        update_docs_section("nexmark", "## Nexmark-style event-time queries\n\n" + markdown +
                            "\n\n" + note)


if __name__ == "__main__":
    main()
