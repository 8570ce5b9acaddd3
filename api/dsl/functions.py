"""GeaFlow's built-in scalar, aggregate and table functions, by lower-case name, as Python callables."""

from __future__ import annotations

import datetime as _dt
import json
import math
import random
import statistics
import zlib

from gyreflow.api.dsl.rows import java_string, to_timestamp


def _nulls(fn):
    """``fn`` returning NULL when any argument is NULL (SQL's strict functions)."""
    def strict(*args):
        if any(a is None for a in args):
            return None
        return fn(*args)
    return strict


def _sign(x):
    return float((x > 0) - (x < 0))


def _trunc(x, scale=None):
    if scale is None:
        return float(math.trunc(x)) if isinstance(x, float) else x
    factor = 10 ** scale
    return math.trunc(x * factor) / factor


def _cbrt(x):
    x = float(x)
    root = abs(x) ** (1.0 / 3.0)
    rounded = round(root)
    if abs(rounded ** 3 - abs(x)) < 1e-9 * max(1.0, abs(x)):
        root = float(rounded)
    return math.copysign(root, x)


def _date(value) -> _dt.date:
    if isinstance(value, _dt.datetime):
        return value.date()
    if isinstance(value, _dt.date):
        return value
    return _dt.date.fromisoformat(str(value).strip()[:10])


def _json_path(text, path):
    try:
        node = json.loads(text)
    except ValueError:
        return None
    for part in path.lstrip("$").replace("]", "").split("."):
        if not part:
            continue
        name, *indexes = part.split("[")
        if name:
            if not isinstance(node, dict) or name not in node:
                return None
            node = node[name]
        for index in indexes:
            if not isinstance(node, list) or int(index) >= len(node):
                return None
            node = node[int(index)]
    if isinstance(node, (dict, list)):
        return json.dumps(node, separators=(",", ":"))
    return java_string(node) if not isinstance(node, str) else node


def _java_hash(text) -> int:
    """``String.hashCode`` (or ``Long.hashCode``/``Integer.hashCode`` of a number)."""
    if isinstance(text, bool):
        return 1231 if text else 1237
    if isinstance(text, int):
        value = text & 0xFFFFFFFFFFFFFFFF
        result = (value ^ (value >> 32)) & 0xFFFFFFFF
    else:
        result = 0
        for unit in str(text).encode("utf-16-be").hex(" ", 2).split():
            result = (31 * result + int(unit, 16)) & 0xFFFFFFFF
    return result - (1 << 32) if result >= 1 << 31 else result


def _like(value, pattern, escape="\\"):
    import re

    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == escape and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return re.fullmatch("".join(out), value, re.S) is not None


def _concat(*args):
    if any(a is None for a in args):
        return None
    return "".join(java_string(a) for a in args)


def _substring(text, start, length=None):
    begin = start - 1 if start > 0 else max(len(text) + start, 0)
    return text[begin:] if length is None else text[begin:begin + length]


def _ends(vertex, edge, attribute: str):
    if vertex is None or edge is None:
        return None
    return getattr(vertex, "id", vertex) == getattr(edge, attribute, None)


SCALAR = {
    # graph elements: GeaFlow's IS_SOURCE_OF(vertex, edge) and the like, and LABEL(element)
    "is_source_of": lambda v, e: _ends(v, e, "src"),
    "is_destination_of": lambda v, e: _ends(v, e, "dst"),
    "is_not_source_of": lambda v, e: None if (r := _ends(v, e, "src")) is None else not r,
    "is_not_destination_of": lambda v, e: None if (r := _ends(v, e, "dst")) is None else not r,
    "label": lambda element: getattr(element, "label", None),
    "id": lambda element: getattr(element, "id", None),
    "direction": lambda edge: getattr(edge, "direction", None),
    "srcid": lambda edge: getattr(edge, "src", None),
    "targetid": lambda edge: getattr(edge, "dst", None),
    "abs": _nulls(abs), "ceil": _nulls(lambda x: float(math.ceil(x)) if isinstance(x, float) else x),
    "floor": _nulls(lambda x: float(math.floor(x)) if isinstance(x, float) else x),
    "ln": _nulls(lambda x: math.log(x)), "log10": _nulls(lambda x: math.log10(x)),
    # sqlglot reads LOG10(x) as LOG(10, x): the base first
    "log": _nulls(lambda a, b=None: math.log(a) if b is None else math.log(b, a)),
    "exp": _nulls(lambda x: math.exp(x)), "sin": _nulls(math.sin), "cos": _nulls(math.cos),
    "tan": _nulls(math.tan), "cot": _nulls(lambda x: 1.0 / math.tan(x)), "asin": _nulls(math.asin),
    "acos": _nulls(math.acos), "atan": _nulls(math.atan), "sign": _nulls(_sign),
    "degrees": _nulls(math.degrees), "radians": _nulls(math.radians),
    "power": _nulls(lambda x, y: float(x) ** y), "pow": _nulls(lambda x, y: float(x) ** y),
    "sqrt": _nulls(lambda x: math.sqrt(x)), "cbrt": _nulls(_cbrt), "trunc": _nulls(_trunc),
    "round": _nulls(lambda x, n=0: round(x, n) if isinstance(x, float) else x),
    "rand": lambda seed=None: random.Random(seed).random(),
    "rand_integer": lambda *a: random.Random(a[0] if len(a) > 1 else None).randrange(a[-1] or 1),
    "lower": _nulls(str.lower), "upper": _nulls(str.upper),
    "character_length": _nulls(len), "char_length": _nulls(len), "length": _nulls(len),
    "concat": _concat, "concat_ws": lambda sep, *a: sep.join(java_string(x) for x in a if x is not None),
    "substring": _nulls(_substring), "substr": _nulls(_substring),
    "trim": _nulls(str.strip), "ltrim": _nulls(str.lstrip), "rtrim": _nulls(str.rstrip),
    "replace": _nulls(lambda s, a, b: s.replace(a, b)),
    "reverse": _nulls(lambda s: s[::-1]),
    "instr": _nulls(lambda s, t: s.find(t) + 1),
    "hash": _nulls(_java_hash),
    "_year": _nulls(lambda millis: to_timestamp(millis).year),
    "crc32": _nulls(lambda s: zlib.crc32(str(s).encode())),
    "if": lambda c, a, b: a if c else b,
    "coalesce": lambda *a: next((x for x in a if x is not None), None),
    "isnull": lambda x: x is None,
    "quarter": _nulls(lambda d: (_date(d).month - 1) // 3 + 1),
    "day_of_year": _nulls(lambda d: _date(d).timetuple().tm_yday),
    "dayofyear": _nulls(lambda d: _date(d).timetuple().tm_yday),
    "year": _nulls(lambda d: _date(d).year), "month": _nulls(lambda d: _date(d).month),
    "day": _nulls(lambda d: _date(d).day), "dayofmonth": _nulls(lambda d: _date(d).day),
    "hour": _nulls(lambda d: to_timestamp(d).hour), "minute": _nulls(lambda d: to_timestamp(d).minute),
    "second": _nulls(lambda d: to_timestamp(d).second),
    "get_json_object": _nulls(_json_path),
    "like": _nulls(_like),
}

CONSTANTS = {"pi": math.pi, "e": math.e}


def _total(values: list):
    """The exact sum, rounded once, of doubles (Java adds in an order of its own); ints as they are."""
    return math.fsum(values) if any(isinstance(v, float) for v in values) else sum(values)


def _sum(values):
    """GeaFlow's SUM starts from 0: a group without a non-NULL value sums to 0."""
    values = [v for v in values if v is not None]
    return _total(values) if values else 0


def _avg(values):
    values = [v for v in values if v is not None]
    return _total(values) / len(values) if values else None


def _extreme(fn):
    def pick(values):
        values = [v for v in values if v is not None]
        return fn(values) if values else None
    return pick


def _stddev_pop(values):
    values = [float(v) for v in values if v is not None]
    return statistics.pstdev(values) if values else None


def _percentile(values, fraction):
    """Hive's ``percentile``: linear interpolation between the closest ranks."""
    values = sorted(float(v) for v in values if v is not None)
    if not values:
        return None
    position = (len(values) - 1) * fraction
    low = math.floor(position)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (position - low)


AGGREGATE = {
    "count": lambda values: sum(1 for v in values if v is not None),
    "sum": _sum, "avg": _avg, "max": _extreme(max), "min": _extreme(min),
    # GeaFlow's STDDEV_SAMP divides by n (what its expected files hold), not by n - 1.
    "stddev_samp": _stddev_pop, "stddev": _stddev_pop,
    "stddev_pop": _stddev_pop,
    "var_samp": lambda vs: statistics.variance([float(v) for v in vs if v is not None]),
    "collect_list": lambda vs: [v for v in vs if v is not None],
}
# Aggregates with one constant argument after the values.
AGGREGATE_WITH_PARAMETER = {"percentile": _percentile}


def _tokens(text, separator):
    """Commons Lang's ``StringUtils.split``: the parts between separator characters, empty ones dropped."""
    import re

    if text is None:
        return []
    return [part for part in re.split("[" + re.escape(separator) + "]", text) if part]


def _split(text, separator=","):
    """GeaFlow's ``Split``: a row per part (empty parts kept)."""
    if text is None:
        return []
    return [(part,) for part in text.split(separator)]


def _split_map(text, separator=","):
    """The test sources' ``SplitMap``: one row, the first part."""
    parts = _tokens(text, separator or ",")
    return [(parts[0],)] if parts else []


def _split2(text, separator=",", line_separator="\n"):
    """The test sources' ``Split2``: a row per line, its parts as the columns."""
    return [tuple(_tokens(line, separator)) for line in _tokens(text, line_separator)]


TABLE = {"split": _split, "udtf_split": _split}

# ``CREATE FUNCTION name AS 'java.Class'``: the Java classes whose behaviour gyreflow has.
JAVA_CLASSES = {
    "org.apache.geaflow.dsl.udf.table.agg.Count": ("aggregate", "count"),
    "org.apache.geaflow.dsl.runtime.query.udf.MyCount": ("aggregate", "mycount"),
    "org.apache.geaflow.dsl.udf.table.string.Concat": ("scalar", "concat"),
    "org.apache.geaflow.dsl.udf.table.udtf.Split": ("table", _split),
    "org.apache.geaflow.dsl.runtime.query.udtf.SplitMap": ("table", _split_map),
    "org.apache.geaflow.dsl.runtime.query.udtf.Split2": ("table", _split2),
}
# ``MyCount(name, id)`` of the test sources: the sum of ids, plus 10000 per row named jim.
def _my_count(pairs):
    return sum(10000 * (str(name).lower() == "jim") + number for name, number in pairs)


AGGREGATE["mycount"] = _my_count  # called with (name, id) pairs
