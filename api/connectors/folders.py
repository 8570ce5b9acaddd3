"""Whether a folder can be made and written: asked where a sink, a dead-letter folder or a result
file is declared, before any data moves, not where its first write would fail hours later."""

from __future__ import annotations

import os


def folder_problem(folder: str) -> str | None:
    """Why ``folder`` cannot be made (with its missing parents) and written by this user, as the
    end of a sentence naming it, or None when it can: the nearest existing folder on its path must
    be a folder, not a file or a symbolic link to nothing, with write permission."""
    # lexists: a symbolic link to nothing stops the walk, where exists would pass it for a folder
    # still to be made, and creating it would fail at the first write.
    existing = os.path.abspath(folder)
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.exists(existing):
        return (f"cannot be created: {existing!r} is a symbolic link to "
                f"{os.readlink(existing)!r}, which does not exist")
    if not os.path.isdir(existing):
        return f"cannot be created: {existing!r} is a file"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot be written: no write permission on {existing!r}"
    return None
