"""Which frames of a traceback are the user's own code, and tracebacks with only those frames.

gyreflow's own frames (its packages), and those of what runs a script or a task (click, runpy,
PySpark's worker), are left out of what a user is shown about a mistake in their code.
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import os
import sys
import traceback

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_INTERNAL_DIRS = tuple(os.path.join(_ROOT, part) + os.sep
                       for part in ("api", "plan", "scheduler", "runtime", "state", "gyreflow"))
_INTERNAL_FILES = ("<frozen runpy>", "<fused chain>")
_LIBRARY_PACKAGES = ("click", "pyspark", "py4j", "cloudpickle")


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    """The standard library's and site-packages' directories (asked of sysconfig, imported here:
    only a traceback being shown needs them)."""
    import sysconfig

    return tuple({os.path.abspath(path) + os.sep for name in ("stdlib", "platstdlib", "purelib",
                                                              "platlib")
                  if (path := sysconfig.get_paths().get(name))})


def machinery_frame(filename: str) -> bool:
    """Whether a frame of ``filename`` belongs to what runs a script or a task (click, runpy,
    PySpark's worker), neither gyreflow's nor the user's."""
    if filename in _INTERNAL_FILES or filename.startswith("<attrs generated"):
        return True
    for base in _library_dirs():
        if filename.startswith(base):
            top = filename[len(base):].split(os.sep, 1)[0]
            return top in _LIBRARY_PACKAGES or top == "runpy.py"
    return False


def internal_frame(filename: str) -> bool:
    """Whether a frame of ``filename`` is gyreflow's own or its machinery's, not the user's."""
    return filename.startswith(_INTERNAL_DIRS) or machinery_frame(filename)


def _library_frame(filename: str) -> bool:
    return filename.startswith(_library_dirs()) or filename.startswith("<frozen ")


def user_frames(tb) -> list[traceback.FrameSummary]:
    """The frames of ``tb`` that are not gyreflow's, from the first frame of the user's own code
    (the standard library frames gyreflow called before it are left out too)."""
    frames = [frame for frame in traceback.extract_tb(tb) if not internal_frame(frame.filename)]
    for index, frame in enumerate(frames):
        if not _library_frame(frame.filename):
            return frames[index:]
    return []


def user_traceback(error: BaseException) -> str:
    """``error``'s traceback as text with the user's frames only; an exception gyreflow raised
    while handling another (its own bookkeeping) is left out of the chain.

    Empty frames leave just the exception's line (a flat_map that returned None, say).
    """
    shown = traceback.TracebackException.from_exception(error)
    links = [(shown, error)]
    while links:
        link, exc = links.pop()
        link.stack = traceback.StackSummary.from_list(user_frames(exc.__traceback__))
        for attribute in ("__cause__", "__context__"):
            chained = getattr(link, attribute)
            original = getattr(exc, attribute)
            if chained is None or original is None:
                continue
            if user_frames(original.__traceback__):
                links.append((chained, original))
            else:
                setattr(link, attribute, None)
    return "".join(shown.format())


def user_frames_text(error: BaseException) -> str:
    """The user's own frames of ``error``'s traceback as text (``File ..., line N, in f`` and the
    line's source), without a heading or the exception's line."""
    return "".join(traceback.StackSummary.from_list(user_frames(error.__traceback__)).format())


def fault_traceback(error: BaseException) -> str:
    """``error``'s whole traceback as text for a report of a fault of gyreflow, without the frames
    of what ran the script (click, runpy, gyreflow's command line)."""
    cli = os.path.join(_ROOT, "api", "cli") + os.sep
    shown = traceback.TracebackException.from_exception(error)
    links = [shown]
    while links:
        link = links.pop()
        link.stack = traceback.StackSummary.from_list(
            [frame for frame in link.stack
             if not machinery_frame(frame.filename) and not frame.filename.startswith(cli)])
        links.extend(chained for chained in (link.__cause__, link.__context__) if chained)
    return "".join(shown.format())


def user_location(error: BaseException) -> tuple[str, int] | None:
    """The file and line of the innermost frame of the user's own code in ``error``'s traceback
    (for a SyntaxError, the line that does not parse), or None."""
    if isinstance(error, SyntaxError) and error.filename and error.lineno:
        return error.filename, error.lineno
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not internal_frame(f.filename) and not _library_frame(f.filename)]
    if not frames:
        return None
    return frames[-1].filename, frames[-1].lineno or 0


def raised_inside_gyreflow(error: BaseException) -> str | None:
    """Where ``error`` was raised if gyreflow's own code raised it: ``"api"`` when every frame after
    the user's last one is in gyreflow's public layer (an argument or a name the user's call got
    wrong), ``"core"`` when it came from deeper; None when the user's code (or a library it called
    itself) raised it."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames or not frames[-1].filename.startswith(_INTERNAL_DIRS):
        return None
    trailing = []
    for frame in reversed(frames):
        if not internal_frame(frame.filename) and not _library_frame(frame.filename):
            break
        trailing.append(frame.filename)
    api = os.path.join(_ROOT, "api") + os.sep
    if all(name.startswith(api) or not name.startswith(_INTERNAL_DIRS) for name in trailing):
        return "api"
    return "core"


def exception_line(error: BaseException) -> str:
    """``Type: message`` as Python prints it when the exception ends a program, hints included
    (``Did you mean: 'map'?``, which the traceback module of Python 3.11 leaves out), then its
    notes.

    A message of several lines keeps every line, the type and the first line first; blank lines
    and surrounding spaces are dropped. A SyntaxError's location (file, source line, caret) is
    left out: its caller shows that with the script's frames.

    >>> exception_line(KeyError("x"))
    "KeyError: 'x'"
    >>> print(exception_line(RuntimeError("config missing:\\nset FOO in the environment")))
    RuntimeError: config missing:
    set FOO in the environment
    """
    own = traceback.format_exception_only(error)
    lines = _with_hint(error, "".join(own).split("\n")[:-1])
    if isinstance(error, SyntaxError):  # the location lines come first, each indented
        lines = list(itertools.dropwhile(lambda line: line[:1].isspace(), lines))
    kept = [part.strip() for part in "\n".join(lines).splitlines() if part.strip()]
    return "\n".join(kept) or own[-1].strip()


def _with_hint(error: BaseException, lines: list[str]) -> list[str]:
    """``lines`` (the exception's own, as the traceback module writes them) with the hint Python's
    own display adds to the message; ``lines`` unchanged if that display differs otherwise."""
    shown = io.StringIO()
    with contextlib.redirect_stderr(shown):
        sys.__excepthook__(type(error), error, None)
    # The display ends with the exception's own lines; before them come the traceback and any
    # chained exceptions.
    printed = shown.getvalue().split("\n")[:-1]
    tail = printed[len(printed) - len(lines):] if len(printed) >= len(lines) else []
    if len(tail) == len(lines) and all(
            seen.startswith(written) for seen, written in zip(tail, lines, strict=True)):
        return tail
    return lines
