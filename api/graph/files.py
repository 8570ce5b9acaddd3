"""Graph files in the Graphalytics text format: read and check vertex and edge files, write results.

A vertex file holds one integer vertex id per line; an edge file one ``src dst [weight]`` edge per
line. Every problem is reported with the file name and line number before any computation starts:

>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> path = os.path.join(folder, "g.e")
>>> with open(path, "w") as f:
...     _ = f.write("1 2 0.5\\n2 x\\n")
>>> try:
...     read_edges(path, {1, 2})
... except GraphFileError as exc:
...     print(str(exc).replace(folder + os.sep, ""))
g.e:2: vertex id 'x' is not an integer
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Iterable, Iterator

UNREACHABLE = 9223372036854775807


class GraphFileError(ValueError):
    """A vertex or edge file that cannot be read: names the file and the line."""

    def __init__(self, path: str | os.PathLike, line: int | None, problem: str) -> None:
        self.path = os.fspath(path)
        self.line = line
        self.problem = problem
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {problem}")


def _lines(path: str | os.PathLike) -> Iterator[tuple[int, list[str]]]:
    """The non-blank lines of ``path`` as ``(line number, columns)``."""
    try:
        handle = open(path, encoding="utf-8")
    except OSError as exc:
        raise GraphFileError(path, None, f"cannot read the file ({exc.strerror})") from None
    with handle:
        try:
            for number, line in enumerate(handle, start=1):
                columns = line.split()
                if columns:
                    yield number, columns
        except UnicodeDecodeError:
            raise GraphFileError(path, None, "is not a UTF-8 text file") from None


def _vertex_id(text: str, path, number: int) -> int:
    try:
        return int(text)
    except ValueError:
        raise GraphFileError(path, number, f"vertex id {text!r} is not an integer") from None


def _numbers(path: str | os.PathLike, columns: int, dtype):
    """The file as a numpy array of ``columns`` columns, or None when it is not that plain (the line
    by line reader then finds and names the problem)."""
    import numpy as np

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an empty file is a warning: let the line reader judge
            array = np.loadtxt(path, dtype=dtype, ndmin=2, comments=None, encoding="utf-8")
    except (ValueError, OSError, UnicodeDecodeError, UserWarning):
        return None
    if array.shape[1] != columns:
        return None
    return array


def read_vertices(path: str | os.PathLike) -> list[int]:
    """The vertex ids of a vertex file, in file order; a repeated id is an error."""
    import numpy as np

    array = _numbers(path, 1, np.int64)  # numpy parses a large file many times faster
    if array is not None and len(np.unique(array[:, 0])) == len(array):
        return array[:, 0].tolist()
    return _read_vertex_lines(path)


def read_vertex_ids(path: str | os.PathLike):
    """``read_vertices`` as a numpy int64 array."""
    import numpy as np

    array = _numbers(path, 1, np.int64)
    if array is not None and len(np.unique(array[:, 0])) == len(array):
        return array[:, 0].copy()
    return np.array(_read_vertex_lines(path), dtype=np.int64)


def _read_vertex_lines(path: str | os.PathLike) -> list[int]:
    vertices: list[int] = []
    first_line: dict[int, int] = {}
    for number, columns in _lines(path):
        if len(columns) != 1:
            msg = f"expected one vertex id, found {len(columns)} columns"
            raise GraphFileError(path, number, msg)
        vertex = _vertex_id(columns[0], path, number)
        if vertex in first_line:
            msg = f"vertex {vertex} is listed twice (first on line {first_line[vertex]})"
            raise GraphFileError(path, number, msg)
        first_line[vertex] = number
        vertices.append(vertex)
    return vertices


def read_edges(path: str | os.PathLike, vertices: set | dict, *, weighted: bool = False,
               vertices_path: str | os.PathLike | None = None) -> list[tuple]:
    """The edges of an edge file as ``(src, dst)`` pairs, or ``(src, dst, weight)`` when
    ``weighted`` (then the weight column is required). Both endpoints must be in ``vertices``."""
    import numpy as np

    try:
        known = np.fromiter(vertices, dtype=np.int64, count=len(vertices))
    except (TypeError, ValueError, OverflowError):
        known = np.zeros(0, np.int64)  # ids numpy cannot hold: the line reader checks them
    fast = _edges_with_numpy(path, known, weighted)
    if fast is not None:
        src, dst, weights = fast
        if weights is None:
            return list(zip(src.tolist(), dst.tolist(), strict=True))
        return list(zip(src.tolist(), dst.tolist(), weights.tolist(), strict=True))
    return _read_edge_lines(path, vertices, weighted, vertices_path)


def read_edge_arrays(path: str | os.PathLike, vertex_ids, *, weighted: bool = False,
                     vertices_path: str | os.PathLike | None = None) -> tuple:
    """``read_edges`` as numpy arrays ``(src, dst, weights)`` (weights None unless ``weighted``);
    ``vertex_ids`` is an int64 array."""
    import numpy as np

    fast = _edges_with_numpy(path, vertex_ids, weighted)
    if fast is not None:
        return fast
    edges = _read_edge_lines(path, set(vertex_ids.tolist()), weighted, vertices_path)
    src = np.array([e[0] for e in edges], dtype=np.int64)
    dst = np.array([e[1] for e in edges], dtype=np.int64)
    return src, dst, (np.array([e[2] for e in edges], dtype=float) if weighted else None)


def _read_edge_lines(path, vertices, weighted: bool, vertices_path) -> list[tuple]:
    edges: list[tuple] = []
    append = edges.append
    origin = f" of {os.fspath(vertices_path)}" if vertices_path is not None else ""
    for number, columns in _lines(path):
        count = len(columns)
        if count < 2 or count > 3:
            msg = f"expected 'src dst [weight]', found {count} column{'s' if count != 1 else ''}"
            raise GraphFileError(path, number, msg)
        src = _vertex_id(columns[0], path, number)
        dst = _vertex_id(columns[1], path, number)
        for vertex in (src, dst):
            if vertex not in vertices:
                raise GraphFileError(path, number, f"vertex {vertex} is not in the vertex file{origin}")
        if count < 3 and weighted:
            raise GraphFileError(path, number, "missing the weight column ('src dst weight')")
        if count == 3:  # a weight, where given, is checked whatever reads it: the file is one format
            try:
                weight = float(columns[2])
            except ValueError:
                raise GraphFileError(path, number, f"weight {columns[2]!r} is not a number") from None
            if math.isnan(weight):
                raise GraphFileError(path, number, "weight is NaN")
        append((src, dst, weight) if weighted else (src, dst))
    return edges


def _edges_with_numpy(path, known, weighted: bool) -> tuple | None:
    """``(src, dst, weights)`` parsed by numpy (``known``: the vertex ids, an int64 array), or None
    when the file needs the line by line reader (a problem to name, or anything numpy reads
    differently)."""
    import numpy as np

    if not weighted:
        array = _numbers(path, 2, np.int64)
        if array is None:  # perhaps a weight column that this reader checks and leaves out
            weighted_edges = _edges_with_numpy(path, known, True)
            return None if weighted_edges is None else (*weighted_edges[:2], None)
        src, dst = array[:, 0], array[:, 1]
        weights = None
    else:
        row = np.dtype([("src", np.int64), ("dst", np.int64), ("weight", np.float64)])
        array = _numbers(path, 1, row)
        if array is None:
            return None
        array = array[:, 0]
        src, dst, weights = array["src"], array["dst"], array["weight"]
        if np.isnan(weights).any():
            return None
    if len(known) == 0 or not np.isin(src, known).all() or not np.isin(dst, known).all():
        return None
    return src.copy(), dst.copy(), (None if weights is None else weights.copy())


def format_integer(value: object) -> str:
    """An integer result (BFS hops, WCC and CDLP labels)."""
    return str(int(value))


def format_float(value: object) -> str:
    """A float result: shortest round-trip decimal, ``infinity`` for an infinite value."""
    value = float(value)
    if math.isinf(value):
        return "infinity" if value > 0 else "-infinity"
    return repr(value)


FORMATS: dict[str, Callable[[object], str]] = {
    "bfs": format_integer,
    "wcc": format_integer,
    "cdlp": format_integer,
    "pr": format_float,
    "lcc": format_float,
    "sssp": format_float,
}


def write_results(path: str | os.PathLike, vertices: Iterable, values: dict,
                  formatter: Callable[[object], str]) -> int:
    """Write ``vertex value`` lines in the order of ``vertices``; returns the number written.

    Written to a temporary file first and renamed, so a failed run leaves no partial output.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    partial = os.path.join(folder, f".{os.path.basename(path)}.partial")
    count = 0
    with open(partial, "w", encoding="utf-8") as handle:
        lines = []
        for vertex in vertices:
            lines.append(f"{vertex} {formatter(values[vertex])}\n")
            count += 1
            if len(lines) >= 65536:
                handle.writelines(lines)
                lines.clear()
        handle.writelines(lines)
    os.replace(partial, path)
    return count
