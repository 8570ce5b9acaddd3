"""The errors every state module may raise, a store that cannot be reached and stored state that
fails its check, kept apart so that the low-level helpers (private locations, locks, the chunk
framing) raise them without importing the snapshot contract."""

from __future__ import annotations


class BackendUnavailableError(RuntimeError):
    """The configured backend cannot be opened (path not writable, database unreachable)."""


class SnapshotCorruptedError(RuntimeError):
    """A stored snapshot failed its checksum or is truncated; the message says where."""
