"""Versions of a dynamic graph: every window is a version; a graph operator that reads past versions
keeps, per vertex, its graph entry as it was before each retained window changed it.

The history is keyed state (``NAME:history``: vertex id -> ``[(window, entry before it or None)]``),
snapshotted and restored with the graph, and trimmed every window to the retained versions, so its
cost per window follows the vertices the window touched. ``VersionView`` reads a version through it:
a vertex's entry at version ``v`` is the image recorded by the first window after ``v`` that
changed it, else its current entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from gyreflow.plan.operators import COMPLETED
from gyreflow.runtime.errors import DataError, RecordError


def copy_entry(entry: list | None) -> list | None:
    """A graph entry that later changes of the current one leave alone."""
    if entry is None:
        return None
    return [entry[0], list(entry[1]), None if entry[2] is None else list(entry[2]),
            None if entry[3] is None else list(entry[3]), None if entry[4] is None else list(entry[4])]


class VersionView:
    """The graph entries (see ``operator``) of version ``version``, read-only."""

    __slots__ = ("graph", "history", "version")

    def __init__(self, graph: dict, history: dict, version: int) -> None:
        self.graph = graph
        self.history = history
        self.version = version

    def get(self, vid, default=None):
        images = self.history.get(vid)
        if images:
            for window, image in images:
                if window > self.version:
                    return default if image is None else image
        return self.graph.get(vid, default)

    def __getitem__(self, vid):
        entry = self.get(vid)
        if entry is None:
            raise KeyError(vid)
        return entry

    def __contains__(self, vid) -> bool:
        return self.get(vid) is not None

    def items(self) -> Iterator[tuple]:
        get = self.get
        for vid in self.graph:
            entry = get(vid)
            if entry is not None:
                yield vid, entry
        graph = self.graph
        for vid in self.history:
            if vid not in graph:
                entry = get(vid)
                if entry is not None:
                    yield vid, entry

    def keys(self) -> Iterator:
        return (vid for vid, _ in self.items())

    def __len__(self) -> int:
        return sum(1 for _ in self.items())


class History:
    """Records the entries a window is about to change and trims what no retained version needs.

    ``copy`` takes the image of an entry that the window may change in place (per-vertex entries);
    the array operator's chunks are replaced, never changed, so their image is the chunk itself.
    """

    def __init__(self, retained: int, copy: Callable[[Any], Any] = copy_entry) -> None:
        self.retained = retained
        self.copy = copy
        self.index: dict[int, set] | None = None  # window -> keys with an image of it

    def reset(self) -> None:
        """The history table was replaced (a restore): the index is built again when next used."""
        self.index = None

    def remember(self, table, graph: dict, window: int, vertices) -> None:
        """Record, once per window, the entries of ``vertices`` before ``window`` changes them."""
        data = table.data
        index = self._index(data)
        recorded = index.setdefault(window, set())
        for vid in vertices:
            if vid in recorded:
                continue
            recorded.add(vid)
            images = data.get(vid)
            image = (window, self.copy(graph.get(vid)))
            if images is None:
                table.put(vid, [image])  # not a plain write: this window's trim may have deleted it
            else:
                images.append(image)
        table.mark_changed(recorded)

    def trim(self, table, window: int) -> None:
        """Drop the images no retained version reads: version ``window - retained`` is the oldest
        kept, and it reads images of later windows only."""
        oldest = window - self.retained
        data = table.data
        index = self._index(data)
        for old in [w for w in index if w <= oldest]:
            for vid in index.pop(old):
                images = data.get(vid)
                if images is None:
                    continue
                kept = [image for image in images if image[0] > oldest]
                if kept:
                    data[vid] = kept
                    table.mark_changed((vid,))
                else:
                    table.delete(vid)

    def oldest(self, window: int) -> int:
        """The oldest version readable in ``window``."""
        return max(0, window - self.retained)

    def resolve(self, operator: str, spec, window: int, record) -> int:
        """The version a start message or a snapshot names (``spec``: a window id, None for the
        current one, ``COMPLETED`` for the one before) in ``window``, checked against the retained
        ones; a bad one fails ``record`` of ``operator``."""
        version = window if spec is None else window - 1 if spec == COMPLETED else spec
        oldest = self.oldest(window)
        if not isinstance(version, int) or isinstance(version, bool):
            msg = f"a version is a window id (int), None (the latest) or 'completed', not {spec!r}"
            raise RecordError(operator, record, TypeError(msg))
        if not oldest <= version <= window:
            # The input asked for it: a request for a version the graph keeps, or more versions
            # kept from the start, go on (``gyreflow run`` exit 5, not a user function's fault).
            keep = (f"; to read it, keep at least {window - version} with "
                    f"GraphView(retained_versions=...) or graph.retained_versions and run again "
                    f"with --fresh" if version < oldest else "")
            msg = (f"operator {operator!r}: {_asked(record)} version {version}, which is not "
                   f"readable in window {window}: the graph keeps versions {oldest}..{window} "
                   f"(retained_versions={self.retained}){keep}")
            raise DataError(msg, window)
        return version

    def _index(self, data: dict) -> dict[int, set]:
        if self.index is None:
            index: dict[int, set] = {}
            for vid, images in data.items():
                for window, _ in images:
                    index.setdefault(window, set()).add(vid)
            self.index = index
        return self.index


def _asked(record) -> str:
    """Who asked for a version, for messages: a request (shortened) or a snapshot."""
    if type(record) is tuple and record and record[0] == "snapshot":
        return "a snapshot asks for"
    shown = repr(record)
    return f"request {shown[:80] + '...' if len(shown) > 80 else shown} asks for"
