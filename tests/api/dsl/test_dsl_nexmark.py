"""Nexmark queries in nexmark-flink's SQL over the events of the benchmarks' generators
(``benchmarks/nexmark.py``), each against a plain-Python loop over the same events: q0 (pass-through),
q1 (currency conversion) and q2 (a filter) over ``make_bids``; over the persons, auctions and bids of
``make_events``: joins (q3, q4, q20, q23), q11's group window (SESSION), q14's CREATE FUNCTION,
window table functions under joins (q5, q7, q8), top rows per group (q6, q9, q18, q19), DATE_FORMAT
and FILTER (q10, q15, q16, q17), REGEXP_EXTRACT (q21) and SPLIT_INDEX (q22)."""

from __future__ import annotations

import datetime as dt
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from gyreflow.api import Environment

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from nexmark import make_bids, make_events  # the benchmarks' generator (benchmarks/ is no package)

EPOCH = dt.datetime(1970, 1, 1)
PERSONS, AUCTIONS, BIDS = make_events(1500, seed=11, step_ms=40)  # 60 s, over midnight
TABLES = {
    "person": ("id bigint, name varchar, emailAddress varchar, creditCard varchar, city varchar, "
               "state varchar, `dateTime` timestamp, extra varchar", PERSONS),
    "auction": ("id bigint, itemName varchar, description varchar, initialBid bigint, reserve bigint, "
                "`dateTime` timestamp, expires timestamp, seller bigint, category bigint, extra varchar",
                AUCTIONS),
    "bid": ("auction bigint, bidder bigint, price bigint, channel varchar, url varchar, "
            "`dateTime` timestamp, extra varchar", BIDS),
}


def at(ms: int) -> dt.datetime:
    return EPOCH + dt.timedelta(milliseconds=ms)


def day(ms: int) -> str:
    return at(ms).strftime("%Y-%m-%d")


def minute(ms: int) -> str:
    return at(ms).strftime("%H:%M")


def run(tmp_path, query: str, statement: int = 5) -> list:
    script = "SET gyreflow.dsl.time.zone = 'UTC';\n"
    for name, (columns, rows) in TABLES.items():
        path = tmp_path / f"{name}.txt"
        path.write_text("".join(",".join(map(str, row)) + "\n" for row in rows), encoding="utf-8")
        script += (f"CREATE TABLE {name} ({columns}) WITH (type='file', "
                   f"geaflow.dsl.file.path='{path}');\n")
    return Environment.local(2, progress=False).sql(script + query + ";\n").output(f"rows-{statement}")


def windows(ms: int, size: int, slide: int) -> list[int]:
    """The starts (ms) of the windows of ``size`` every ``slide`` that hold time ``ms``."""
    last = ms // slide * slide
    return [s for s in range(last - size + slide, last + 1, slide) if s <= ms < s + size]


# --- the queries, as nexmark-flink writes them (INSERT INTO a blackhole table left out) -------------

Q5 = """SELECT AuctionBids.auction, AuctionBids.num
 FROM (
   SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime
     FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
     GROUP BY auction, window_start, window_end
 ) AS AuctionBids
 JOIN (
   SELECT max(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime
   FROM (
     SELECT count(*) AS num, window_start AS starttime, window_end AS endtime
     FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
     GROUP BY auction, window_start, window_end
     ) AS CountBids
   GROUP BY CountBids.starttime, CountBids.endtime
 ) AS MaxBids
 ON AuctionBids.starttime = MaxBids.starttime AND
    AuctionBids.endtime = MaxBids.endtime AND
    AuctionBids.num >= MaxBids.maxn"""


def loop_q5():
    counts: Counter = Counter()
    for auction, *_, ms, _ in BIDS:
        for start in windows(ms, 10_000, 2_000):
            counts[(start, auction)] += 1
    most: dict = defaultdict(int)
    for (start, _), n in counts.items():
        most[start] = max(most[start], n)
    return [(auction, n) for (start, auction), n in counts.items() if n >= most[start]]


Q7 = """SELECT B.auction, B.price, B.bidder, B.`dateTime`, B.extra
from bid B
JOIN (
  SELECT MAX(price) AS maxprice, window_end as `dateTime`
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY window_start, window_end
) B1
ON B.price = B1.maxprice
WHERE B.`dateTime` BETWEEN B1.`dateTime`  - INTERVAL '10' SECOND AND B1.`dateTime`"""


def loop_q7():
    best: dict = {}
    for _, _, price, _, _, ms, _ in BIDS:
        end = ms // 10_000 * 10_000 + 10_000
        best[end] = max(best.get(end, price), price)
    return [(a, p, b, at(ms), x) for a, b, p, _, _, ms, x in BIDS for end, top in best.items()
            if p == top and end - 10_000 <= ms <= end]


Q8 = """SELECT P.id, P.name, P.starttime
FROM (
  SELECT id, name, window_start AS starttime, window_end AS endtime
  FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY id, name, window_start, window_end
) P
JOIN (
  SELECT seller, window_start AS starttime, window_end AS endtime
  FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY seller, window_start, window_end
) A
ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime"""


def loop_q8():
    people = {(p[0], p[1], p[6] // 10_000) for p in PERSONS}
    sellers = {(a[7], a[5] // 10_000) for a in AUCTIONS}
    return [(pid, name, at(w * 10_000)) for pid, name, w in people if (pid, w) in sellers]


def winning_bids(order):
    """Per auction, its bids within its open time, the first by ``order`` (a key of a bid)."""
    found = {}
    for a in AUCTIONS:
        inside = [b for b in BIDS if b[0] == a[0] and a[5] <= b[5] <= a[6]]
        if inside:
            found[a] = min(inside, key=order)
    return found


# q6 as nexmark-flink writes it filters rownum in the SELECT that defines it (Flink cannot run q6
# either); here the filter is a SELECT around it, and the inner columns are named without A. / B.
Q6 = """SELECT Q.seller, AVG(Q.price) OVER
        (PARTITION BY Q.seller ORDER BY Q.`dateTime` ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)
FROM (SELECT * FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY id, seller ORDER BY price DESC) AS rownum
    FROM (SELECT A.id, A.seller, B.price, B.`dateTime`
        FROM auction AS A, bid AS B
        WHERE A.id = B.auction and B.`dateTime` between A.`dateTime` and A.expires))
    WHERE rownum <= 1
) AS Q"""


def loop_q6():
    per_seller = defaultdict(list)
    for auction, bid in winning_bids(lambda b: -b[2]).items():
        per_seller[auction[7]].append((bid[5], bid[2]))
    rows = []
    for seller, wins in per_seller.items():
        prices = [price for _, price in sorted(wins)]
        rows += [(seller, sum(prices[max(0, i - 10):i + 1]) / len(prices[max(0, i - 10):i + 1]))
                 for i in range(len(prices))]
    return rows


Q9 = """SELECT
    id, itemName, description, initialBid, reserve, `dateTime`, expires, seller, category, extra,
    auction, bidder, price, bid_dateTime, bid_extra
FROM (
   SELECT A.*, B.auction, B.bidder, B.price, B.`dateTime` AS bid_dateTime, B.extra AS bid_extra,
     ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.`dateTime` ASC) AS rownum
   FROM auction A, bid B
   WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires
)
WHERE rownum <= 1"""


def loop_q9():
    return [(*a[:5], at(a[5]), at(a[6]), *a[7:], b[0], b[1], b[2], at(b[5]), b[6])
            for a, b in winning_bids(lambda b: (-b[2], b[5])).items()]


Q10 = """SELECT auction, bidder, price, `dateTime`, extra, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd'),
DATE_FORMAT(`dateTime`, 'HH:mm')
FROM bid"""


def loop_q10():
    return [(a, b, p, at(ms), x, day(ms), minute(ms)) for a, b, p, _, _, ms, x in BIDS]


RANKS = """
     count(*) AS total_bids,
     count(*) filter (where price < 10000) AS rank1_bids,
     count(*) filter (where price >= 10000 and price < 1000000) AS rank2_bids,
     count(*) filter (where price >= 1000000) AS rank3_bids,"""
DISTINCTS = """
     count(distinct bidder) AS total_bidders,
     count(distinct bidder) filter (where price < 10000) AS rank1_bidders,
     count(distinct bidder) filter (where price >= 10000 and price < 1000000) AS rank2_bidders,
     count(distinct bidder) filter (where price >= 1000000) AS rank3_bidders,
     count(distinct auction) AS total_auctions,
     count(distinct auction) filter (where price < 10000) AS rank1_auctions,
     count(distinct auction) filter (where price >= 10000 and price < 1000000) AS rank2_auctions,
     count(distinct auction) filter (where price >= 1000000) AS rank3_auctions"""
Q15 = (f"SELECT DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') as `day`,{RANKS}{DISTINCTS}\nFROM bid\n"
       "GROUP BY DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')")
Q16 = (f"SELECT channel, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') as `day`, "
       f"max(DATE_FORMAT(`dateTime`, 'HH:mm')) as `minute`,{RANKS}{DISTINCTS}\nFROM bid\n"
       "GROUP BY channel, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')")
Q17 = (f"SELECT auction, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') as `day`,{RANKS}\n"
       "     min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price, "
       "sum(price) AS sum_price\nFROM bid\nGROUP BY auction, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')")
TIERS = [lambda p: True, lambda p: p < 10_000, lambda p: 10_000 <= p < 1_000_000, lambda p: p >= 1_000_000]


def groups_of(key):
    found = defaultdict(list)
    for bid in BIDS:
        found[key(bid)].append(bid)
    return found


def ranks(bids, distinct: bool) -> tuple:
    counts = tuple(sum(1 for b in bids if tier(b[2])) for tier in TIERS)
    if not distinct:
        return counts
    return counts + tuple(len({b[column] for b in bids if tier(b[2])}) for column in (1, 0)
                          for tier in TIERS)


def loop_q15():
    return [(d, *ranks(bids, True)) for d, bids in groups_of(lambda b: day(b[5])).items()]


def loop_q16():
    return [(channel, d, max(minute(b[5]) for b in bids), *ranks(bids, True))
            for (channel, d), bids in groups_of(lambda b: (b[3], day(b[5]))).items()]


def loop_q17():
    # AVG of a bigint is a double here (Flink's is a BIGINT): docs/dsl.md, differences
    return [(auction, d, *ranks(bids, False), min(b[2] for b in bids), max(b[2] for b in bids),
             sum(b[2] for b in bids) / len(bids), sum(b[2] for b in bids))
            for (auction, d), bids in groups_of(lambda b: (b[0], day(b[5]))).items()]


Q18 = """SELECT auction, bidder, price, channel, url, `dateTime`, extra
 FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY `dateTime` DESC) AS rank_number
       FROM bid)
 WHERE rank_number <= 1"""


def loop_q18():
    latest = {}
    for bid in BIDS:  # in time order: the last one stays
        latest[(bid[1], bid[0])] = bid
    return [(*b[:5], at(b[5]), b[6]) for b in latest.values()]


Q19 = """SELECT * FROM
(SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number FROM bid)
WHERE rank_number <= 10"""


def loop_q19():
    rows = []
    for bids in groups_of(lambda b: b[0]).values():
        top = sorted(bids, key=lambda b: -b[2])[:10]
        rows += [(*b[:5], at(b[5]), b[6], rank) for rank, b in enumerate(top, 1)]
    return rows


Q21 = """SELECT
    auction, bidder, price, channel,
    CASE
        WHEN lower(channel) = 'apple' THEN '0'
        WHEN lower(channel) = 'google' THEN '1'
        WHEN lower(channel) = 'facebook' THEN '2'
        WHEN lower(channel) = 'baidu' THEN '3'
        ELSE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2)
        END
    AS channel_id FROM bid
    where REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) is not null or
          lower(channel) in ('apple', 'google', 'facebook', 'baidu')"""


def loop_q21():
    hot = {"apple": "0", "google": "1", "facebook": "2", "baidu": "3"}
    rows = []
    for a, b, p, channel, url, _, _ in BIDS:
        found = re.search(r"(&|^)channel_id=([^&]*)", url)
        if channel.lower() in hot or found:
            rows.append((a, b, p, channel, hot.get(channel.lower(), found and found.group(2))))
    return rows


Q22 = """SELECT
    auction, bidder, price, channel,
    SPLIT_INDEX(url, '/', 3) as dir1,
    SPLIT_INDEX(url, '/', 4) as dir2,
    SPLIT_INDEX(url, '/', 5) as dir3 FROM bid"""


def loop_q22():
    return [(a, b, p, channel, *url.split("/")[3:6]) for a, b, p, channel, url, _, _ in BIDS]


Q3 = """SELECT
    P.name, P.city, P.state, A.id
FROM
    auction AS A INNER JOIN person AS P on A.seller = P.id
WHERE
    A.category = 10 and (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')"""


def loop_q3():
    people = {p[0]: p for p in PERSONS}
    return [(people[a[7]][1], people[a[7]][4], people[a[7]][5], a[0]) for a in AUCTIONS
            if a[8] == 10 and people[a[7]][5] in ("OR", "ID", "CA")]


Q4 = """SELECT
    Q.category,
    AVG(Q.final)
FROM (
    SELECT MAX(B.price) AS final, A.category
    FROM auction A, bid B
    WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires
    GROUP BY A.id, A.category
) Q
GROUP BY Q.category"""


def loop_q4():
    finals = defaultdict(list)
    for auction, bid in winning_bids(lambda b: -b[2]).items():
        finals[auction[8]].append(bid[2])
    return [(category, sum(prices) / len(prices)) for category, prices in finals.items()]


Q14 = """CREATE FUNCTION count_char AS 'com.github.nexmark.flink.udf.CountChar';
SELECT
    auction,
    bidder,
    0.908 * price as price,
    CASE
        WHEN HOUR(`dateTime`) >= 8 AND HOUR(`dateTime`) <= 18 THEN 'dayTime'
        WHEN HOUR(`dateTime`) <= 6 OR HOUR(`dateTime`) >= 20 THEN 'nightTime'
        ELSE 'otherTime'
    END AS bidTimeType,
    `dateTime`,
    extra,
    count_char(extra, 'c') AS c_counts
FROM bid
WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000"""


def loop_q14():
    def kind(hour):
        return "dayTime" if 8 <= hour <= 18 else "nightTime" if hour <= 6 or hour >= 20 else "otherTime"
    return [(a, b, 0.908 * p, kind(at(ms).hour), at(ms), x, x.count("c"))
            for a, b, p, _, _, ms, x in BIDS if 1_000_000 < 0.908 * p < 50_000_000]


Q20 = """SELECT
    auction, bidder, price, channel, url, B.`dateTime`, B.extra,
    itemName, description, initialBid, reserve, A.`dateTime`, expires, seller, category, A.extra
FROM
    bid AS B INNER JOIN auction AS A on B.auction = A.id
WHERE A.category = 10"""


def loop_q20():
    auctions = {a[0]: a for a in AUCTIONS}
    return [(*b[:5], at(b[5]), b[6], *a[1:5], at(a[5]), at(a[6]), *a[7:])
            for b in BIDS if (a := auctions[b[0]])[8] == 10]


Q23 = """SELECT bidder, price, channel, url, B.extra AS bid_extra,
       P.id AS person_id, name, emailAddress, creditCard, city, state, P.extra AS person_extra,
       itemName, description, initialBid, reserve, A.dateTime AS auction_dateTime, expires, seller,
       category, A.extra AS auction_extra
FROM bid B
         JOIN
     person P ON P.id = B.bidder
         JOIN
     auction A ON A.seller = B.bidder"""


def loop_q23():
    return [(b[1], b[2], b[3], b[4], b[6], *p[:6], p[7], *a[1:5], at(a[5]), at(a[6]), a[7], a[8], a[9])
            for b in BIDS for p in PERSONS if p[0] == b[1] for a in AUCTIONS if a[7] == b[1]]


Q11 = """SELECT
    B.bidder,
    count(*) as bid_count,
    SESSION_START(B.`dateTime`, INTERVAL '10' SECOND) as starttime,
    SESSION_END(B.`dateTime`, INTERVAL '10' SECOND) as endtime
FROM bid B
GROUP BY B.bidder, SESSION(B.`dateTime`, INTERVAL '10' SECOND)"""


def loop_q11():
    # in time order, so nothing is late; a bid within the gap of the session's last (its end
    # included) joins it
    sessions = defaultdict(list)  # bidder -> [first, last, count]
    for _, bidder, _, _, _, ms, _ in BIDS:
        own = sessions[bidder]
        if own and ms <= own[-1][1] + 10_000:
            own[-1][1], own[-1][2] = ms, own[-1][2] + 1
        else:
            own.append([ms, ms, 1])
    return [(bidder, n, at(first), at(last + 10_000)) for bidder, own in sessions.items()
            for first, last, n in own]


def normal(rows) -> Counter:
    """Rows with doubles to 12 significant digits (averages add in different orders)."""
    return Counter(tuple(float(f"{v:.12g}") if isinstance(v, float) else v for v in row) for row in rows)


QUERIES = {"q3": (Q3, loop_q3), "q4": (Q4, loop_q4), "q11": (Q11, loop_q11), "q14": (Q14, loop_q14),
           "q20": (Q20, loop_q20),
           "q23": (Q23, loop_q23), "q5": (Q5, loop_q5), "q6": (Q6, loop_q6), "q7": (Q7, loop_q7),
           "q8": (Q8, loop_q8),
           "q9": (Q9, loop_q9), "q10": (Q10, loop_q10), "q15": (Q15, loop_q15), "q16": (Q16, loop_q16),
           "q17": (Q17, loop_q17), "q18": (Q18, loop_q18), "q19": (Q19, loop_q19), "q21": (Q21, loop_q21),
           "q22": (Q22, loop_q22)}


@pytest.mark.parametrize("name", list(QUERIES))
def test_nexmark_query_against_a_loop(tmp_path, name):
    query, loop = QUERIES[name]
    want = loop()
    assert want
    assert normal(run(tmp_path, query, query.count(";") + 5)) == normal(want)


SIMPLE_BIDS = make_bids(600, 2.0, seed=7)  # (seconds, auction, price), up to 2 s out of order


def at_seconds(seconds: float) -> dt.datetime:
    return EPOCH + dt.timedelta(milliseconds=round(seconds * 1000))


@pytest.mark.parametrize(("query", "loop"), [
    ("SELECT auction, price, datetime FROM bid", lambda: [(a, p, at_seconds(t)) for t, a, p in SIMPLE_BIDS]),
    ("SELECT auction, 0.908 * price AS price, datetime FROM bid",
     lambda: [(a, 0.908 * p, at_seconds(t)) for t, a, p in SIMPLE_BIDS]),
    ("SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0",
     lambda: [(a, p) for _, a, p in SIMPLE_BIDS if a % 123 == 0]),
], ids=["q0", "q1", "q2"])
def test_nexmark_q0_q1_q2_against_loops(tmp_path, query, loop):
    lines = "".join(f"{a},{p},{round(t * 1000)}\n" for t, a, p in SIMPLE_BIDS)
    (tmp_path / "bids.txt").write_text(lines, encoding="utf-8")
    script = ("SET gyreflow.dsl.time.zone = 'UTC';\n"
              "CREATE TABLE bid (auction bigint, price bigint, datetime timestamp) WITH (type='file', "
              f"geaflow.dsl.file.path='{tmp_path / 'bids.txt'}', geaflow.dsl.window.size = 100);\n"
              f"{query};\n")
    got = Environment.local(2, progress=False).sql(script).output("rows-3")
    want = loop()
    assert want and Counter(got) == Counter(want)


def test_a_session_call_in_a_string_is_left_as_written(tmp_path):
    rows = run(tmp_path, "SELECT B.bidder, 'session (', SESSION_START(B.`dateTime`, INTERVAL '10' SECOND) "
                         "FROM bid B GROUP BY B.bidder, SESSION(B.`dateTime`, INTERVAL '10' SECOND)")
    assert {r[1] for r in rows} == {"session ("}
    assert Counter((r[0], r[2]) for r in rows) == Counter((b, s) for b, _, s, _ in loop_q11())
