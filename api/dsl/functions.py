"""GeaFlow's built-in scalar, aggregate and table functions, by lower-case name, as Python callables."""

from __future__ import annotations

import datetime as _dt
import decimal
import functools
import json
import math
import random
import re
import statistics
import zlib

import gyreflow.api.dsl.java_math as jm
from gyreflow.api.dsl.errors import QueryError
from gyreflow.api.dsl.rows import java_string, to_timestamp


def _nulls(fn):
    """``fn`` returning NULL when any argument is NULL (SQL's strict functions)."""
    def strict(*args):
        if any(a is None for a in args):
            return None
        return fn(*args)
    return strict


def _trunc(x, scale=None):
    if isinstance(x, float) and not math.isfinite(x):
        return x  # NaN and the infinities stay
    if scale is None:
        return float(math.trunc(x)) if isinstance(x, float) else x
    factor = 10 ** scale
    return math.trunc(x * factor) / factor


def _cbrt(x):
    x = float(x)
    if not math.isfinite(x):
        return x  # Math.cbrt: NaN and the infinities stay
    root = abs(x) ** (1.0 / 3.0)
    rounded = round(root)
    if rounded ** 3 == abs(x):  # an exact cube: its exact root (27 ** (1 / 3) is 3.0000000000000004)
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


_MASK = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix_k1(k1: int) -> int:
    return (_rotl((k1 * 0xCC9E2D51) & _MASK, 15) * 0x1B873593) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    return (_rotl(h1 ^ k1, 13) * 5 + 0xE6546B64) & _MASK


def _binary_string_hash(data: bytes, seed: int = 42) -> int:
    """The hash code of GeaFlow's ``BinaryString`` (its strings at run time): Murmur3 over the UTF-8
    bytes, four at a time little-endian, then each remaining byte alone (signed), seed 42."""
    h1, aligned = seed, len(data) - len(data) % 4
    for i in range(0, aligned, 4):
        h1 = _mix_h1(h1, _mix_k1(int.from_bytes(data[i:i + 4], "little")))
    for byte in data[aligned:]:
        h1 = _mix_h1(h1, _mix_k1((byte - 256 if byte > 127 else byte) & _MASK))
    h1 ^= len(data)
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    return h1


def _java_hash(value) -> int:
    """GeaFlow's ``HASH``: the absolute value of the Java hash code of a value (a string's is its
    ``BinaryString``'s, a number's ``Long.hashCode``, a boolean's ``Boolean.hashCode``)."""
    if isinstance(value, bool):
        result = 1231 if value else 1237
    elif isinstance(value, int):
        wide = value & 0xFFFFFFFFFFFFFFFF
        result = (wide ^ (wide >> 32)) & _MASK
    else:
        result = _binary_string_hash(str(value).encode("utf-8"))
    signed = result - (1 << 32) if result >= 1 << 31 else result
    return signed if signed == -(1 << 31) else abs(signed)  # Math.abs(Integer.MIN_VALUE) stays


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
    """GeaFlow's SUBSTR: ``start`` counts from 1, from the end when negative; 0 is the first
    character, as 1 is."""
    begin = start - 1 if start > 0 else max(len(text) + start, 0) if start < 0 else 0
    return text[begin:] if length is None else text[begin:begin + length]


def _instr(text, target, start=1):
    """INSTR(text, target) and POSITION(target IN text): where ``target`` first starts in ``text``,
    from 1; 0 when it does not."""
    return text.find(target, max(start - 1, 0)) + 1


# enough digits for any double's exact decimal value at any scale ROUND is asked for
_ROUNDING = decimal.Context(prec=1200, Emin=-9999, Emax=9999)


def _round(value, scale=0):
    """ROUND half away from zero, as Calcite's and DuckDB's: ROUND(2.5) is 3.0, ROUND(-2.25, 1) is
    -2.3. A double is rounded as its shortest decimal text reads (ROUND(2.675, 2) is 2.68, not the
    2.67 its binary value would give); an integer stays an integer."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return value
    exact = decimal.Decimal(repr(value)) if isinstance(value, float) else decimal.Decimal(value)
    if exact.as_tuple().exponent >= -scale:
        return value  # no digit beyond the scale: nothing to round
    rounded = exact.quantize(decimal.Decimal(1).scaleb(-scale), decimal.ROUND_HALF_UP, _ROUNDING)
    return float(rounded) if isinstance(value, float) else int(rounded)


def _ends(vertex, edge, attribute: str):
    if vertex is None or edge is None:
        return None
    return getattr(vertex, "id", vertex) == getattr(edge, attribute, None)


def _split_ex(text, separator, index):
    """GeaFlow's SPLIT_EX: the ``index``-th piece of ``text`` split on ``separator`` (NULL if none)."""
    parts = text.split(separator)
    return parts[index] if 0 <= index < len(parts) else None


def _split_index(text, separator, index):
    """Flink's SPLIT_INDEX: the ``index``-th piece (from 0) of ``text`` split on the whole ``separator``,
    empty pieces kept (Commons Lang's ``splitByWholeSeparatorPreserveAllTokens``); NULL if none."""
    if text == "" or index < 0:
        return None
    parts = text.split(separator) if separator else text.split()
    return parts[index] if index < len(parts) else None


def _regexp_extract(text, pattern, index=0):
    """Flink's REGEXP_EXTRACT: group ``index`` of the first match of ``pattern`` in ``text`` (Java's
    ``Matcher.find``); NULL when nothing matches, the group took no part, or there is no such group."""
    try:
        found = _regex(pattern).search(text)
    except re.error:
        return None
    if found is None or not 0 <= index <= (found.re.groups or 0):
        return None
    return found.group(index)


@functools.lru_cache(maxsize=64)
def _regex(pattern: str) -> re.Pattern:
    return re.compile(pattern)


# Java's SimpleDateFormat letters DATE_FORMAT reads, longest first, as strftime prints them (SSS: None,
# the milliseconds, which strftime has no code for)
_DATE_LETTERS = [("yyyy", "%Y"), ("yy", "%y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"), ("mm", "%M"),
                 ("ss", "%S"), ("SSS", None)]


@functools.lru_cache(maxsize=64)
def _date_pattern(pattern: str) -> tuple:
    """A SimpleDateFormat pattern (``yyyy-MM-dd HH:mm:ss.SSS``, text in ``'...'``) as strftime pieces."""
    out, i = [], 0
    while i < len(pattern):
        if pattern[i] == "'":
            end = pattern.find("'", i + 1)
            end = len(pattern) if end < 0 else end
            out.append(pattern[i + 1:end].replace("%", "%%") or "'")
            i = end + 1
            continue
        for letters, code in _DATE_LETTERS:
            if pattern.startswith(letters, i):
                out.append(code)
                i += len(letters)
                break
        else:
            if pattern[i].isalpha():
                raise QueryError(f"DATE_FORMAT: the pattern letter {pattern[i]!r} is not one gyreflow "
                                 "reads (yyyy, yy, MM, dd, HH, mm, ss, SSS)")
            out.append(pattern[i].replace("%", "%%"))
            i += 1
    return tuple(out)


def _date_format(value, pattern="yyyy-MM-dd HH:mm:ss"):
    """Flink's DATE_FORMAT: a timestamp (or its text) printed with a SimpleDateFormat pattern."""
    moment = value if isinstance(value, _dt.datetime) else to_timestamp(value)
    own = {None: f"{moment.microsecond // 1000:03d}", "%Y": f"{moment.year:04d}"}  # Java pads years
    return moment.strftime("".join(own.get(p, p) for p in _date_pattern(pattern)))


def _count_char(text, character):
    """Nexmark's ``CountChar``: how many bytes of ``text`` (UTF-8) are the first byte of ``character``;
    0 for a NULL text."""
    if text is None:
        return 0
    return text.encode("utf-8").count(character.encode("utf-8")[:1])


# GeaFlow's IS_DECIMAL: what Java's Double.parseDouble reads (blanks around it trimmed; hex floats left out)
_JAVA_BLANKS = "".join(map(chr, range(33)))  # String.trim: every character up to ' '
_DECIMAL = re.compile(r"[-+]?(NaN|Infinity|(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?[fFdD]?)")


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
    # doubles as Java's Math computes them: NaN outside a function's domain (SQRT(-1), ASIN(2)),
    # infinities at poles and on overflow (LN(0), POWER(0, -1), EXP(1000)), never an error
    "abs": _nulls(abs), "ceil": _nulls(jm.rounded(math.ceil)), "floor": _nulls(jm.rounded(math.floor)),
    "ln": _nulls(jm.java_log), "log10": _nulls(jm.java_log10),
    # sqlglot reads LOG10(x) as LOG(10, x): the base first
    "log": _nulls(lambda a, b=None: jm.java_log(a) if b is None else jm.java_log_base(a, b)),
    "exp": _nulls(jm.java_exp), "sin": _nulls(jm.java_sin), "cos": _nulls(jm.java_cos),
    "tan": _nulls(jm.java_tan), "cot": _nulls(jm.java_cot), "asin": _nulls(jm.java_asin),
    "acos": _nulls(jm.java_acos), "atan": _nulls(math.atan), "sign": _nulls(jm.java_signum),
    "degrees": _nulls(math.degrees), "radians": _nulls(math.radians),
    "power": _nulls(jm.java_pow), "pow": _nulls(jm.java_pow),
    "sqrt": _nulls(jm.java_sqrt), "cbrt": _nulls(_cbrt), "trunc": _nulls(_trunc),
    "round": _nulls(_round), "atan2": _nulls(math.atan2), "pi": lambda: math.pi,
    "rand": lambda seed=None: random.Random(seed).random(),
    "rand_integer": lambda *a: random.Random(a[0] if len(a) > 1 else None).randrange(a[-1] or 1),
    "lower": _nulls(str.lower), "upper": _nulls(str.upper),
    "character_length": _nulls(len), "char_length": _nulls(len), "length": _nulls(len),
    "concat": _concat, "concat_ws": lambda sep, *a: sep.join(java_string(x) for x in a if x is not None),
    "substring": _nulls(_substring), "substr": _nulls(_substring),
    "trim": _nulls(str.strip), "ltrim": _nulls(str.lstrip), "rtrim": _nulls(str.rstrip),
    "replace": _nulls(lambda s, a, b: s.replace(a, b)),
    "reverse": _nulls(lambda s: s[::-1]),
    # sqlglot reads INSTR(s, t), POSITION(t IN s) and LOCATE(t, s) as one node, STR_POSITION(s, t)
    "instr": _nulls(_instr), "str_position": _nulls(_instr),
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
    "split_ex": _nulls(_split_ex), "split_index": _nulls(_split_index),
    "regexp_extract": _nulls(_regexp_extract), "date_format": _nulls(_date_format),
    "is_decimal": lambda s: s is not None and _DECIMAL.fullmatch(str(s).strip(_JAVA_BLANKS)) is not None,
    "like": _nulls(_like),
    "_count_char": _count_char,  # by CREATE FUNCTION ... AS 'com.github.nexmark.flink.udf.CountChar'
}

CONSTANTS = {"pi": math.pi, "e": math.e}


def _total(values: list):
    """The exact sum, rounded once, of doubles (Java adds in an order of its own); ints as they are.
    A sum past the largest double is an infinity, and Infinity plus -Infinity NaN, as Java's."""
    if not any(isinstance(v, float) for v in values):
        return sum(values)
    try:
        return math.fsum(values)
    except (OverflowError, ValueError):
        return sum(map(float, values))


def _sum(values):
    """GeaFlow's SUM starts from 0: a group without a non-NULL value sums to 0."""
    values = [v for v in values if v is not None]
    return _total(values) if values else 0


def _avg(values):
    values = [v for v in values if v is not None]
    return _total(values) / len(values) if values else None


def _double_order(value):
    """A sort key of Java's ``Double.compareTo``: NaN above every other value, equal to itself."""
    return (1, 0.0) if value != value else (0, value)


def _extreme(fn):
    """MIN or MAX (``fn``) of the non-NULL values, NaN the largest double (Java's ``compareTo``)."""
    def pick(values):
        values = [v for v in values if v is not None]
        if not values:
            return None
        found = fn(values)
        if type(found) is float or type(found) is int:
            total = sum(values)  # NaN when a value is (Python's min and max skip it or stop at it)
            if total != total:
                return fn(values, key=_double_order)
        return found
    return pick


def _stddev_pop(values):
    values = [float(v) for v in values if v is not None]
    return statistics.pstdev(values) if values else None


def _var_samp(values):
    """The sample variance (divided by n - 1); NULL for fewer than two values, as SQL's."""
    values = [float(v) for v in values if v is not None]
    return statistics.variance(values) if len(values) > 1 else None


def _percentile(values, percent):
    """GeaFlow's ``PERCENTILE(x, p)``: Commons Math's ``StatUtils.percentile``, ``p`` in (0, 100]
    (``0.9`` is the 0.9th percentile, not the 90th): position p * (n + 1) / 100 among the sorted
    values, the first below 1, the last from n, else between its two neighbours."""
    if not 0 < percent <= 100:
        raise QueryError(f"PERCENTILE: the percent must be in (0, 100], got {percent}")
    values = sorted(float(v) for v in values if v is not None)
    if not values:
        return None
    position = percent * (len(values) + 1) / 100
    if position < 1:
        return values[0]
    if position >= len(values):
        return values[-1]
    low = math.floor(position)
    return values[low - 1] + (position - low) * (values[low] - values[low - 1])


AGGREGATE = {
    "count": lambda values: sum(1 for v in values if v is not None),
    "sum": _sum, "avg": _avg, "max": _extreme(max), "min": _extreme(min),
    # GeaFlow's STDDEV_SAMP divides by n (what its expected files hold), not by n - 1.
    "stddev_samp": _stddev_pop, "stddev": _stddev_pop,
    "stddev_pop": _stddev_pop,
    # sqlglot reads VAR_SAMP(x) as VARIANCE(x)
    "var_samp": _var_samp, "variance": _var_samp,
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
    "com.github.nexmark.flink.udf.CountChar": ("scalar", "_count_char"),  # Nexmark q14's
    "org.apache.geaflow.dsl.udf.table.udtf.Split": ("table", _split),
    "org.apache.geaflow.dsl.runtime.query.udtf.SplitMap": ("table", _split_map),
    "org.apache.geaflow.dsl.runtime.query.udtf.Split2": ("table", _split2),
    "org.apache.geaflow.dsl.runtime.query.udf.TestEdgeIteratorUdf": ("algorithm", "edge_iterator_test"),
}
# ``MyCount(name, id)`` of the test sources: the sum of ids, plus 10000 per row named jim.
def _my_count(pairs):
    return sum(10000 * (str(name).lower() == "jim") + number for name, number in pairs)


AGGREGATE["mycount"] = _my_count  # called with (name, id) pairs
