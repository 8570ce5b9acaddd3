"""Java's arithmetic for SQL values: integer ranges, division, remainder, and Math's functions of doubles."""

from __future__ import annotations

import math

from gyreflow.api.dsl.errors import QueryError

# The integer types' ranges as Java holds them (GeaFlow's Byte, Short, Integer, Long).
_BITS = {"tinyint": 8, "smallint": 16, "int": 32, "integer": 32, "bigint": 64, "long": 64}
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
BIGINT_MIN, BIGINT_MAX = -(1 << 63), (1 << 63) - 1


def integer_range(kind: str) -> tuple[int, int]:
    """``(lowest, highest)`` value of an integer type by its lower-case name (``int``: 32 bits).

    >>> integer_range("int")
    (-2147483648, 2147483647)
    """
    bits = _BITS[kind]
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def overflow(text: str, kind: str, value: int) -> str:
    """What is wrong when ``text`` (``2147483647 + 1``) gives ``value``, outside ``kind`` (int,
    bigint): gyreflow refuses it where Java would wrap around.

    >>> overflow("2147483647 + 1", "int", 2147483648)
    'INT overflow: 2147483647 + 1 is 2147483648, outside -2147483648 to 2147483647'
    """
    low, high = integer_range(kind)
    return f"{kind.upper()} overflow: {text} is {value}, outside {low} to {high}"


def java_div(a, b):
    """``a / b`` as Java divides: integers towards zero (by zero: an error), doubles by IEEE 754
    (``1.0 / -0.0`` is -Infinity, ``0.0 / 0`` NaN).

    >>> java_div(-7, 2), java_div(1.0, -0.0), java_div(-1, 0.0)
    (-3, -inf, -inf)
    """
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise QueryError("division by zero")
        q = a // b  # Python's rounds down, Java's towards zero
        return q + 1 if q < 0 and q * b != a else q
    if b:
        return a / b
    if a != a or not a:  # NaN / 0, 0 / 0
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def java_mod(a, b):
    """``a % b`` as Java computes it: the sign of ``a``; integers by zero an error, doubles by zero,
    and an infinite dividend, NaN.

    >>> java_mod(-7, 2), java_mod(2.5, 0), java_mod(2.5, math.inf)
    (-1, nan, 2.5)
    """
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise QueryError("division by zero")
        r = a % b  # Python's takes the divisor's sign, Java's the dividend's
        return r - b if r and (r < 0) != (a < 0) else r
    if not b or a != a or b != b or math.isinf(a):
        return math.nan
    return math.fmod(a, b)


def _odd_integer(y: float) -> bool:
    return math.isfinite(y) and y == math.floor(y) and math.fmod(y, 2) != 0


def java_pow(x, y) -> float:
    """``Math.pow(x, y)``: C's pow except that a NaN exponent gives NaN and ``(+-1) ** +-Infinity``
    NaN; a pole or an overflow gives an infinity, a negative base with a fractional exponent NaN.

    >>> java_pow(0, -1), java_pow(-8, 1 / 3), java_pow(-0.0, -3)
    (inf, nan, -inf)
    """
    x, y = float(x), float(y)
    if y != y:
        return math.nan
    if y == 0:
        return 1.0
    if math.isinf(y) and abs(x) == 1:
        return math.nan
    try:
        return math.pow(x, y)
    except OverflowError:
        return -math.inf if x < 0 and _odd_integer(y) else math.inf
    except ValueError:
        if x == 0:  # a pole: 0 to a negative power
            return -math.inf if math.copysign(1.0, x) < 0 and _odd_integer(y) else math.inf
        return math.nan  # a negative base, a fractional exponent


def _domain(fn):
    """``fn`` of a double as Java's Math gives it: NaN outside its domain (``sqrt(-1)``, ``asin(2)``,
    ``sin(Infinity)``), an infinity where it overflows (``exp(1000)``)."""
    def java(x):
        try:
            return fn(x)
        except ValueError:
            return math.nan
        except OverflowError:
            return math.inf
    java.__doc__ = f"Math.{fn.__name__} of a double, as Java's."
    return java


def java_log(x) -> float:
    """``Math.log``: -Infinity at 0, NaN below it."""
    x = float(x)
    if x == 0:
        return -math.inf
    return math.log(x) if x > 0 else (x if x != x else math.nan)


def java_log10(x) -> float:
    """``Math.log10``: -Infinity at 0, NaN below it."""
    x = float(x)
    if x == 0:
        return -math.inf
    return math.log10(x) if x > 0 else (x if x != x else math.nan)


def java_log_base(base, x) -> float:
    """``LOG(base, x)``: ``ln(x) / ln(base)`` in doubles (``LOG(1, 8)`` is Infinity, not an error)."""
    return java_div(java_log(x), java_log(base))


def java_cot(x) -> float:
    """``1.0 / Math.tan(x)``, as Calcite's COT: Infinity at 0."""
    return java_div(1.0, java_tan(x))


def java_signum(x) -> float:
    """``Math.signum``: -1.0, 0.0 or 1.0, and NaN for NaN."""
    if x != x:
        return math.nan
    return float((x > 0) - (x < 0))


def rounded(fn):
    """CEIL or FLOOR (``fn``): a double stays a double, NaN and the infinities stay as they are."""
    def java(x):
        if isinstance(x, float):
            return float(fn(x)) if math.isfinite(x) else x
        return x
    return java


java_sqrt = _domain(math.sqrt)
java_exp = _domain(math.exp)
java_sin, java_cos, java_tan = _domain(math.sin), _domain(math.cos), _domain(math.tan)
java_asin, java_acos = _domain(math.asin), _domain(math.acos)
