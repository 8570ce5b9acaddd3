"""Private locations: state and logs in directories only their owner can read or change.

A directory gyreflow keeps state in is created 0700 (whatever the umask) and refused when it, or any
directory above it, belongs to another user (root excepted) or can be written by others without the
sticky bit: whoever can change a directory above the state can swap the state for their own.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading

from gyreflow.state.shared.errors import BackendUnavailableError


class UnsafeLocationError(BackendUnavailableError):
    """A state or log location another user can read or change; the message says which and why."""


def ensure_private_dir(path: str, what: str = "state location") -> str:
    """Create ``path`` (and missing parents) mode 0700, tighten it to 0700 if it is ours, and check
    every directory above it; returns the absolute path."""
    path = os.path.abspath(path)
    missing = []
    probe = path
    while not os.path.lexists(probe):
        missing.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    _check_ancestors(probe, what, path)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass
        os.chmod(directory, 0o700, follow_symlinks=False)  # the umask may have taken bits away
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        info = os.stat(path)  # a link the user made to their own directory is theirs to make
    if not stat.S_ISDIR(info.st_mode):
        msg = f"{what} {path} is not a directory"
        raise UnsafeLocationError(msg)
    euid = os.geteuid()
    if info.st_uid != euid:
        msg = (f"{what} {path} belongs to another user (uid {info.st_uid}); gyreflow keeps state only "
               "in directories of its own user: choose another state.path")
        raise UnsafeLocationError(msg)
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o700)
    return path


def _check_ancestors(existing: str, what: str, path: str) -> None:
    """Every directory from ``existing`` up to the root: ours or root's, and not writable by others
    unless sticky (as /tmp is)."""
    euid = os.geteuid()
    current = os.path.realpath(existing)
    while True:
        info = os.stat(current)
        owner_ok = info.st_uid in (0, euid)
        shared = info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX
        group_shared = (info.st_mode & stat.S_IWGRP and not info.st_mode & stat.S_ISVTX
                        and info.st_uid != euid)
        if not owner_ok or shared or group_shared:
            why = (f"belongs to another user (uid {info.st_uid})" if not owner_ok
                   else "can be written by other users")
            msg = (f"{what} {path} is not private: the directory {current} {why}, so another user "
                   "could replace the state; choose another state.path")
            raise UnsafeLocationError(msg)
        parent = os.path.dirname(current)
        if parent == current:
            return
        current = parent


_umask_lock = threading.Lock()


@contextlib.contextmanager
def private_umask():
    """Create files and directories 0600/0700 inside the block (the umask is process-wide: the
    block is short and serialised)."""
    with _umask_lock:
        previous = os.umask(0o077)
        try:
            yield
        finally:
            os.umask(previous)


_held = 0
_user_umask: int | None = None


def hold_private_umask() -> None:
    """Keep the process umask at 077 until ``release_private_umask``: RocksDB creates files from its
    own threads (new tables, logs) at any time while a database is open. Calls nest."""
    global _held, _user_umask
    with _umask_lock:
        if _held == 0:
            _user_umask = os.umask(0o077)
        _held += 1


def release_private_umask() -> None:
    """End one ``hold_private_umask``; the last one gives the process its umask back."""
    global _held, _user_umask
    with _umask_lock:
        if _held == 0:
            return
        _held -= 1
        if _held == 0 and _user_umask is not None:
            os.umask(_user_umask)
            _user_umask = None


def user_umask() -> int:
    """The umask the user runs with (not the private one held while state is open): what output
    files are created with."""
    with _umask_lock:
        if _user_umask is not None:
            return _user_umask
        current = os.umask(0o077)
        os.umask(current)
        return current


def private_file(path: str, flags: int = os.O_WRONLY | os.O_CREAT | os.O_APPEND) -> int:
    """Open ``path`` 0600 without following a symbolic link; refuse a file of another user."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or not stat.S_ISREG(info.st_mode):
        os.close(fd)
        msg = f"{path} belongs to another user or is not a regular file"
        raise UnsafeLocationError(msg)
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.fchmod(fd, 0o600)
    return fd
