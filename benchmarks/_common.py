"""Shared benchmark helpers: inputs, best-of-N timing, tables and docs/benchmarks.md sections."""

from __future__ import annotations

import gc
import os
import platform
import random
import re
import string
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
DOCS_PATH = ROOT / "docs" / "benchmarks.md"
DEFAULT_SEED = 20240601

DOCS_INTRO = """\
# Benchmarks

The scripts in `benchmarks/` time gyreflow against a plain-Python reference loop and against
other engines (PySpark RDDs on `local[2]`, Bytewax) on the *same* deterministic, in-memory input.
Every engine's result is checked against the reference before its time counts.

How the numbers are taken:

- Wall-clock time (`time.perf_counter`) of the job itself: input generation, result checks and
  engine start-up (e.g. the SparkSession) are outside the timed region; start-up costs are
  reported in a note under the table.
- Each repetition runs every engine once, interleaved (the order rotates per repetition), and
  the table shows each engine's best of K repetitions. The machine is shared and noisy, so the
  best run is the most stable estimate of what the engine can do.
- Each section records the machine it ran on (CPU count, Python and library versions). The
  numbers checked in here come from a shared 2-core Linux VM, so expect a 10-30% spread between
  reruns; compare engines within one section rather than across sections.

Rerun a script and refresh its section of this file with `--write-docs`:

| script | command |
| --- | --- |
| word count | `python benchmarks/wordcount.py --write-docs` |
| snapshots and recovery | `python benchmarks/snapshots.py --write-docs` |
| Spark | `python benchmarks/spark.py --write-docs` |
| graphs | `python benchmarks/graph.py --write-docs` |
| soak (constant cost per window) | `python benchmarks/soak.py --write-docs` |
| Nexmark-style event-time queries | `python benchmarks/nexmark.py --write-docs` |

Every script accepts `--repeat K` (best of K, default 3); see `--help` for the rest
(`--no-spark` and `--no-bytewax` skip the slower comparison engines).
"""


# ---------------------------------------------------------------------------------------------
# Machine description


def package_version(name: str) -> str:
    """The installed version of distribution ``name``, or ``"not installed"``."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_line() -> str:
    """One line describing where the benchmark ran: CPUs, OS, Python and engine versions."""
    python = f"{platform.python_implementation()} {platform.python_version()}"
    versions = ", ".join(f"{name} {package_version(name)}"
                         for name in ("gyreflow", "pyspark", "bytewax"))
    return (f"{os.cpu_count()} CPUs, {platform.system()} {platform.machine()}, "
            f"{python}, {versions}")


# ---------------------------------------------------------------------------------------------
# Deterministic inputs


def vocabulary(size: int, seed: int = DEFAULT_SEED) -> list[str]:
    """``size`` distinct lowercase words of 3 to 10 letters, the same for the same seed."""
    rng = random.Random(seed)
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        word = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 10)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def word_lines(n_words: int, *, vocabulary_size: int = 1000, words_per_line: int = 10,
               seed: int = DEFAULT_SEED, zipf: float = 1.0) -> list[str]:
    """``n_words`` words drawn from a vocabulary with Zipf(``zipf``) frequencies, joined by single
    spaces into lines of ``words_per_line`` words (the last line may be shorter).

    >>> word_lines(25, vocabulary_size=5, words_per_line=10) == word_lines(25, vocabulary_size=5)
    True
    >>> [len(line.split()) for line in word_lines(25, vocabulary_size=5)]
    [10, 10, 5]
    """
    if n_words < 0 or vocabulary_size < 1 or words_per_line < 1:
        msg = "n_words must be >= 0, vocabulary_size and words_per_line >= 1"
        raise ValueError(msg)
    vocab = vocabulary(vocabulary_size, seed)
    weights = [1.0 / rank**zipf for rank in range(1, vocabulary_size + 1)]
    words = random.Random(seed + 1).choices(vocab, weights=weights, k=n_words)
    return [" ".join(words[i:i + words_per_line]) for i in range(0, n_words, words_per_line)]


# ---------------------------------------------------------------------------------------------
# Timing


def time_call(fn: Callable[[], object]) -> tuple[float, object]:
    """Run ``fn()`` once after a full garbage collection; return (seconds, its result)."""
    gc.collect()
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


@dataclass
class Timing:
    """Every measured run of one case, in seconds."""

    name: str
    runs: list[float] = field(default_factory=list)

    @property
    def best(self) -> float:
        """The fastest run (best of N)."""
        return min(self.runs)


def best_of(fn: Callable[[], object], repeat: int, name: str = "case",
            check: Callable[[object], None] | None = None) -> Timing:
    """Time ``fn()`` ``repeat`` times, calling ``check(result)`` (untimed) after each run."""
    return interleaved_best_of({name: fn}, repeat, check={name: check} if check else None)[name]


def interleaved_best_of(cases: dict[str, Callable[[], object]], repeat: int, *,
                        check: dict[str, Callable[[object], None]] | None = None,
                        rotate: bool = True,
                        on_run: Callable[[int, str, float], None] | None = None,
                        ) -> dict[str, Timing]:
    """Time every case once per repetition, interleaved, ``repeat`` times; best-of-N per case.

    Interleaving spreads a noisy neighbour's bursts over all cases instead of one; with
    ``rotate`` the order also shifts by one case per repetition. ``check[name](result)`` runs
    outside the timed region after every run and should raise on a wrong result.
    ``on_run(repetition, name, seconds)`` is called after each run (for progress output).
    """
    if repeat < 1:
        msg = f"repeat must be >= 1, got {repeat}"
        raise ValueError(msg)
    names = list(cases)
    timings = {name: Timing(name) for name in names}
    checks = check or {}
    for rep in range(repeat):
        shift = rep % len(names) if rotate and names else 0
        for name in names[shift:] + names[:shift]:
            seconds, result = time_call(cases[name])
            if checks.get(name) is not None:
                checks[name](result)
            del result
            timings[name].runs.append(seconds)
            if on_run is not None:
                on_run(rep + 1, name, seconds)
    return timings


# ---------------------------------------------------------------------------------------------
# Formatting and tables


def format_seconds(seconds: float) -> str:
    """``0.0123`` -> ``"0.012"``, ``12.3`` -> ``"12.30"``."""
    return f"{seconds:.3f}" if seconds < 10 else f"{seconds:.2f}"


def format_rate(per_second: float) -> str:
    """A rate with a k/M suffix: ``3_210_000`` -> ``"3.21 M"``."""
    for threshold, suffix in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if per_second >= threshold:
            return f"{per_second / threshold:.2f}{suffix}"
    return f"{per_second:.0f}"


def format_ratio(ratio: float) -> str:
    """``0.4123`` -> ``"0.41x"``."""
    return f"{ratio:.2f}x"


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[object]], *,
                justify: Sequence[str] | None = None, console: Console | None = None) -> str:
    """Print a rich table and return the same table as GitHub Markdown.

    ``justify`` gives each column's alignment (``"left"``, ``"right"`` or ``"center"``); by
    default the first column is left-aligned and the others right-aligned.
    """
    rows = [[str(cell) for cell in row] for row in rows]
    if justify is None:
        justify = ["left"] + ["right"] * (len(columns) - 1)
    table = Table(title=title)
    for name, align in zip(columns, justify, strict=True):
        table.add_column(name, justify=align)
    for row in rows:
        table.add_row(*row)
    (console or Console()).print(table)
    return markdown_table(columns, rows, justify=justify)


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[object]], *,
                   justify: Sequence[str] | None = None) -> str:
    """A GitHub Markdown table.

    >>> print(markdown_table(["engine", "s"], [["a", "1.0"]]))
    | engine | s |
    | :--- | ---: |
    | a | 1.0 |
    """
    if justify is None:
        justify = ["left"] + ["right"] * (len(columns) - 1)
    rule = {"left": ":---", "right": "---:", "center": ":---:"}

    def line(cells: Iterable[object]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    lines = [line(columns), "| " + " | ".join(rule[a] for a in justify) + " |"]
    lines.extend(line(row) for row in rows)
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# docs/benchmarks.md


def update_docs_section(name: str, content: str, path: str | os.PathLike = DOCS_PATH,
                        intro: str = DOCS_INTRO) -> Path:
    """Write ``content`` between ``<!-- BEGIN name -->`` and ``<!-- END name -->`` in ``path``.

    The section replaces an existing one of the same name or is appended at the end; a missing
    file is created starting with ``intro``. Returns the path written.
    """
    if not re.fullmatch(r"[\w.-]+", name):
        msg = f"section name must be letters, digits, '_', '.' or '-', got {name!r}"
        raise ValueError(msg)
    path = Path(path)
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    block = f"{begin}\n{content.strip()}\n{end}"
    text = path.read_text(encoding="utf-8") if path.exists() else intro
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def command_line() -> str:
    """The command that ran this script, relative to the repository root when possible."""
    script = Path(sys.argv[0]).resolve()
    try:
        script_name = str(script.relative_to(ROOT))
    except ValueError:
        script_name = sys.argv[0]
    return " ".join(["python", script_name, *sys.argv[1:]])


class CountMismatchError(Exception):
    """An engine's word counts differ from the Counter oracle."""


def check_counts(engine: str, got: dict[str, int], expected: dict[str, int]) -> None:
    """Raise CountMismatchError describing how ``got`` differs from ``expected``."""
    if got == expected:
        return
    missing = sorted(expected.keys() - got.keys())
    extra = sorted(got.keys() - expected.keys())
    wrong = sorted(w for w in expected.keys() & got.keys() if got[w] != expected[w])
    parts = [f"{engine}: word counts differ from the Counter oracle"]
    if missing:
        parts.append(f"{len(missing)} words missing, e.g. {missing[:5]}")
    if extra:
        parts.append(f"{len(extra)} unexpected words, e.g. {extra[:5]}")
    if wrong:
        examples = ", ".join(f"{w!r}: {got[w]} != {expected[w]}" for w in wrong[:5])
        parts.append(f"{len(wrong)} wrong counts, e.g. {examples}")
    raise CountMismatchError("; ".join(parts))
