"""The staged window files of the file sinks: the folders they are made in, the summary each
carries (window, records, bytes, CRC-32) and its check, and their publishing by a rename."""

from __future__ import annotations

import contextlib
import json
import os
import zlib

from gyreflow.state.shared.private import user_umask
from gyreflow.state.shared.snapshot import SnapshotCorruptedError


def publish_as(staged: str, final: str) -> None:
    """Publish the staged file ``staged`` as ``final`` (a rename), with no summary left over."""
    os.replace(staged, final)
    with contextlib.suppress(OSError):  # published output carries no attribute of gyreflow's
        os.removexattr(final, SUMMARY_ATTRIBUTE)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(staged + ".sum")


def one_complete(paths: list[str], window: int) -> str:
    """Of a window's staged files of one part (a Spark task that ran again, after its executor was
    lost, stages the window anew under a run of its own), the first one that checks against its
    summary; the others (a copy, or what a lost attempt left half-written) are removed."""
    chosen = None
    for path in sorted(paths):
        if chosen is None:
            try:
                verify_staged(path, window)
            except SnapshotCorruptedError:
                pass
            else:
                chosen = path
                continue
        for doomed in (path, path + ".sum"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(doomed)
    if chosen is None:
        msg = f"FileSink: no staged copy of window {window} is complete: {', '.join(sorted(paths))}"
        raise SnapshotCorruptedError(msg)
    return chosen


def remove_if_empty(staging: str) -> None:
    """Remove the staging folder when no window is in flight (a writer staging one creates it
    again), so that a finished job leaves only its published files."""
    with contextlib.suppress(OSError):
        os.rmdir(staging)


SUMMARY_ATTRIBUTE = "user.gyreflow.summary"  # a staged file's window, records, bytes and CRC-32


def read_summary(path: str) -> str:
    """A staged file's summary: its extended attribute, else the ``.sum`` file beside it (written
    where the file system has no attributes, and by earlier versions). FileNotFoundError when it
    has neither."""
    try:
        return os.getxattr(path, SUMMARY_ATTRIBUTE).decode()
    except (OSError, AttributeError):
        pass
    with open(path + ".sum", encoding="utf-8") as handle:
        return handle.read()


def verify_staged(path: str, window: int) -> None:
    """Check a staged file against the summary written with it when it was staged."""
    problem = None
    try:
        summary = json.loads(read_summary(path))
        if isinstance(summary, list):  # the attribute's form
            summary = dict(zip(("window", "records", "bytes", "crc32"), summary, strict=True))
        with open(path, "rb") as handle:
            data = handle.read()
        if (summary.get("window") != window or summary.get("bytes") != len(data)
                or summary.get("crc32") != zlib.crc32(data)):
            problem = "does not match its summary (size or CRC-32)"
    except FileNotFoundError:
        problem = "has no summary"
    except (OSError, ValueError, AttributeError) as exc:
        problem = f"has an unreadable summary ({exc})"
    if problem is not None:
        msg = (f"FileSink: the staged output of completed window {window} ({path}) {problem}: it "
               "was damaged; restore it, or recompute with --from-window or --fresh")
        raise SnapshotCorruptedError(msg)


def make_dirs(path: str) -> None:
    """Create ``path`` and its missing parents with the user's umask (not the private one held
    while state is open)."""
    missing = []
    probe = os.path.abspath(path)
    while not os.path.isdir(probe):
        missing.append(probe)
        probe = os.path.dirname(probe)
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory)
            os.chmod(directory, 0o777 & ~user_umask())
