"""Keyed join: orders joined with customer records per window, then running revenue per city.

Two text sources, each cut into windows of ``--window`` lines:

- orders, one ``order_id,customer_id,amount`` per line (amount with two decimals, e.g. ``12.50``);
- customers, one ``customer_id,name,city`` per line: a stream of customer profile records.

Both are parsed with ``map`` and keyed by customer id; a per-window ``join`` pairs every order with
every customer record of the same customer in the same window, giving ``(city, amount)``. A keyed
``reduce`` (declared associative: a sum) then keeps the total amount per city across windows. One
JSON-lines file per window, with a line ``{"window": w, "city": "...", "total": "1234.50"}`` for
every city that had a joined order in window ``w``, its total over windows ``1..w``. Amounts are
summed in integer cents, so totals do not depend on the order records arrive in.

Without ``--orders``/``--customers`` the script uses ``examples/data/keyed_join/orders.csv`` and
``customers.csv``, generating them first (fixed seed, so always the same data) when missing::

    python -m gyreflow run examples/keyed_join.py -- --output out/keyed-join --window 500
"""

from __future__ import annotations

import argparse
import json
import os
import random
from decimal import Decimal
from operator import itemgetter
from pathlib import Path

from gyreflow.api import Environment, FileSink, FileSource, SizeTumblingWindow

DATA = Path(__file__).parent / "data" / "keyed_join"
DEFAULT_ORDERS = DATA / "orders.csv"
DEFAULT_CUSTOMERS = DATA / "customers.csv"
CITIES = ("Oslo", "Rome", "Lima", "Pune", "Kyiv", "Accra", "Quito", "Hanoi", "Perth", "Bern",
          "Cork", "Nice")
FIRST_NAMES = ("Ada", "Bo", "Cy", "Dee", "Eli", "Fay", "Gus", "Hal", "Ivy", "Jo", "Kai", "Liv")


def generate(orders: str | os.PathLike, customers: str | os.PathLike, n_orders: int = 12_000,
             n_customer_records: int = 12_000, n_customers: int = 400, seed: int = 7) -> None:
    """Write deterministic input files (same arguments, same bytes)."""
    rng = random.Random(seed)
    home = {f"c{i:04d}": rng.choice(CITIES) for i in range(n_customers)}
    ids = sorted(home)
    order_lines = []
    for number in range(1, n_orders + 1):
        cents = rng.randint(100, 50_000)
        order_lines.append(f"o{number:07d},{rng.choice(ids)},{cents // 100}.{cents % 100:02d}\n")
    customer_lines = []
    for _ in range(n_customer_records):
        customer = rng.choice(ids)
        if rng.random() < 0.05:  # customers move now and then
            home[customer] = rng.choice(CITIES)
        customer_lines.append(f"{customer},{rng.choice(FIRST_NAMES)},{home[customer]}\n")
    for path, lines in ((orders, order_lines), (customers, customer_lines)):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        partial.write_text("".join(lines), encoding="utf-8")
        os.replace(partial, path)  # never a half-written input, even with concurrent runs


def parse_order(line: str) -> tuple[str, str, int]:
    """``order_id,customer_id,amount`` -> ``(order_id, customer_id, cents)``."""
    order_id, customer_id, amount = line.split(",")
    return order_id, customer_id, int(Decimal(amount) * 100)


def parse_customer(line: str) -> tuple[str, str, str]:
    """``customer_id,name,city`` -> ``(customer_id, name, city)``."""
    customer_id, name, city = line.split(",")
    return customer_id, name, city


def city_amount(order: tuple[str, str, int], customer: tuple[str, str, str]) -> tuple[str, int]:
    """A joined pair -> ``(city, cents)``."""
    return customer[2], order[2]


def add_amounts(a: tuple[str, int], b: tuple[str, int]) -> tuple[str, int]:
    """Reduce function: the running total of a city."""
    return a[0], a[1] + b[1]


def format_total(window: int, record: tuple[str, int]) -> str:
    """One output line: the window, a city joined in it and its total over windows 1..window."""
    city, cents = record
    total = f"{cents // 100}.{cents % 100:02d}"
    return json.dumps({"window": window, "city": city, "total": total}, ensure_ascii=False)


def build(pipeline, orders_path: str, customers_path: str, window: int, output: str,
          parallelism: int | None = None):
    """Add the keyed join task to ``pipeline``; ``parallelism`` is for the join and the totals."""

    @pipeline.task(name="keyed_join")
    def keyed_join(ctx):
        orders = (
            # One source task each: window w joins the w-th ``window`` lines of both files,
            # whatever the configured parallelism (each task would cut its own byte range).
            ctx.source(FileSource(orders_path), SizeTumblingWindow(window), parallelism=1)
            .with_name("orders")
            .map(parse_order).with_name("parse-orders")
            .key_by(itemgetter(1))
        )
        customers = (
            ctx.source(FileSource(customers_path), SizeTumblingWindow(window), parallelism=1)
            .with_name("customers")
            .map(parse_customer).with_name("parse-customers")
            .key_by(itemgetter(0))
        )
        joined = orders.join(customers, city_amount).with_name("join")
        # A sum is associative: where records cross between processes (worker processes, Spark),
        # each join task folds its window's amounts per city before they go to the city's task.
        totals = (joined.key_by(itemgetter(0)).reduce(add_amounts, associative=True)
                  .with_name("totals"))
        if parallelism is not None:
            joined.with_parallelism(parallelism)
            totals.with_parallelism(parallelism)
        totals.sink(FileSink(output, format=format_total)).with_name("files")

    return pipeline


def main(argv: list[str] | None = None):
    """Parse arguments, generate the default data if needed and run the join."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--orders", default=None,
                        help=f"orders file, order_id,customer_id,amount (default {DEFAULT_ORDERS})")
    parser.add_argument("--customers", default=None,
                        help=f"customers file, customer_id,name,city (default {DEFAULT_CUSTOMERS})")
    parser.add_argument("--window", type=int, default=1000, help="lines per window of each source")
    parser.add_argument("--output", default="out/keyed-join", help="directory for window files")
    parser.add_argument("--parallelism", type=int, default=None,
                        help="tasks for the join and the totals")
    parser.add_argument("--config", default=None, help="TOML config file")
    args = parser.parse_args(argv)
    orders, customers = args.orders, args.customers
    if orders is None or customers is None:
        if not (DEFAULT_ORDERS.is_file() and DEFAULT_CUSTOMERS.is_file()):
            generate(DEFAULT_ORDERS, DEFAULT_CUSTOMERS)
        orders = orders or str(DEFAULT_ORDERS)
        customers = customers or str(DEFAULT_CUSTOMERS)
    env = Environment.from_config(args.config)
    pipeline = build(env.pipeline("keyed-join"), orders, customers, args.window, args.output,
                     args.parallelism)
    return pipeline.execute()


if __name__ == "__main__":
    main()
