"""Inputs and plain-Python oracles of the crash recovery tests: a word count and a keyed join."""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from pathlib import Path

# Small windows: what a crash test checks (which window a crash lands in, what is staged, committed
# and published) does not grow with a window's size, and the crash recovery tests run a few hundred
# jobs.
WC_LINES = 5_950  # 30 windows of 200 lines, the last one short (150 lines)
WC_WINDOW = 200
WC_WINDOWS = 30
JOIN_ORDERS = 3_600  # 12 windows of orders
JOIN_CUSTOMERS = 3_750  # 13 windows of customer records: window 13 joins nothing (empty file)
JOIN_WINDOW = 300
JOIN_WINDOWS = 13


def make_word_lines(count: int, seed: int = 20240601) -> list[str]:
    """Deterministic text: 400 words (one not ASCII), some blank and whitespace-only lines."""
    rng = random.Random(seed)
    vocabulary = [f"w{i:03d}" for i in range(399)] + ["café"]
    lines = []
    for _ in range(count):
        roll = rng.random()
        if roll < 0.03:
            lines.append("")
        elif roll < 0.04:
            lines.append("   ")
        else:
            lines.append(" ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 7))))
    return lines


def word_count_oracle(lines: list[str], window: int) -> dict[int, dict[str, int]]:
    """For each window: every word in its lines with its count over windows 1..w."""
    totals: Counter = Counter()
    expected = {}
    for number, start in enumerate(range(0, len(lines), window), start=1):
        words = [word for line in lines[start:start + window] for word in line.split()]
        totals.update(words)
        expected[number] = {word: totals[word] for word in set(words)}
    return expected


def parse_word_count(files: dict[str, list[str]]) -> dict[int, dict[str, int]]:
    windows = {}
    for name, lines in files.items():
        window = int(name.removeprefix("window-").removesuffix(".jsonl"))
        counts: dict[str, int] = {}
        for line in lines:
            record = json.loads(line)
            assert set(record) == {"window", "word", "count"}, line
            assert record["window"] == window, line
            assert record["word"] not in counts, f"{record['word']!r} twice in {name}"
            counts[record["word"]] = record["count"]
        windows[window] = counts
    return windows


def make_join_lines(orders: int, customer_records: int,
                    seed: int = 99) -> tuple[list[str], list[str]]:
    """Orders ``order_id,customer_id,amount`` and customer records ``customer_id,name,city``."""
    rng = random.Random(seed)
    cities = ["Oslo", "Rome", "Lima", "Pune", "Kyiv", "Accra", "Quito", "Hanoi", "Perth", "Zürich"]
    customers = [f"c{i:03d}" for i in range(300)]
    home = {c: rng.choice(cities) for c in customers}
    order_lines = []
    for number in range(orders):
        cents = rng.randint(1, 99_999)
        amount = f"{cents // 100}.{cents % 100:02d}"
        order_lines.append(f"o{number:06d},{rng.choice(customers)},{amount}")
    customer_lines = []
    for _ in range(customer_records):
        customer = rng.choice(customers)
        if rng.random() < 0.1:
            home[customer] = rng.choice(cities)
        customer_lines.append(f"{customer},{rng.choice(['Ann', 'Bo', 'Cy'])},{home[customer]}")
    return order_lines, customer_lines


def join_oracle(order_lines: list[str], customer_lines: list[str],
                window: int) -> dict[int, dict[str, int]]:
    """Per window: join orders and customer records of the window on customer id; the running
    total (cents) per city over windows 1..w, for the cities joined in window w."""
    count = max(-(-len(order_lines) // window), -(-len(customer_lines) // window))
    totals: dict[str, int] = {}
    expected = {}
    for number in range(1, count + 1):
        lo, hi = (number - 1) * window, number * window
        cities_of: dict[str, list[str]] = defaultdict(list)
        for line in customer_lines[lo:hi]:
            customer, _name, city = line.split(",")
            cities_of[customer].append(city)
        touched = set()
        for line in order_lines[lo:hi]:
            _order, customer, amount = line.split(",")
            euros, cents = amount.split(".")
            for city in cities_of.get(customer, ()):
                totals[city] = totals.get(city, 0) + int(euros) * 100 + int(cents)
                touched.add(city)
        expected[number] = {city: totals[city] for city in touched}
    return expected


def parse_join(files: dict[str, list[str]]) -> dict[int, dict[str, int]]:
    windows = {}
    for name, lines in files.items():
        window = int(name.removeprefix("window-").removesuffix(".jsonl"))
        totals: dict[str, int] = {}
        for line in lines:
            record = json.loads(line)
            assert set(record) == {"window", "city", "total"}, line
            assert record["window"] == window, line
            assert record["city"] not in totals, f"{record['city']!r} twice in {name}"
            euros, cents = record["total"].split(".")
            totals[record["city"]] = int(euros) * 100 + int(cents)
        windows[window] = totals
    return windows


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path
