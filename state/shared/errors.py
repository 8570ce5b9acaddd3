"""The error every state module may raise when a store cannot be reached, kept apart so that the
low-level helpers (private locations, locks) raise it without importing the snapshot framing."""

from __future__ import annotations


class BackendUnavailableError(RuntimeError):
    """The configured backend cannot be opened (path not writable, database unreachable)."""
