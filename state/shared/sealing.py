"""Authentication of stored state: HMAC-SHA256 tags under a per-job key, and where the keys live.

State is pickled, so whoever can change stored bytes could run code in the job that loads them. Every
value a store reads back (a state chunk or row with its key, a task record, the job meta) therefore
carries a tag computed with the job's key over the value and what identifies it (table, key group, key,
version), and is checked before anything is unpickled. A value whose tag is wrong was written by
someone without the key, or damaged: either way it is refused (``SnapshotCorruptedError``, exit 3).

The key of a job is, in order of preference:

- derived from ``state.secret`` (config, or ``GYREFLOW_STATE__SECRET``) and the job name: what a
  shared database (PostgreSQL) needs, since every machine of the job must hold the same key;
- else a random key in a file beside the state (``<job>.key``, mode 0600, in a 0700 directory),
  created by the first write of the job.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import stat
import threading

from gyreflow.state.shared.snapshot import BackendUnavailableError, SnapshotCorruptedError

TAG_SIZE = 16  # bytes of HMAC-SHA256 kept: 128 bits, not guessable by writing values


class Seal:
    """Tags and checks stored bytes under one job's key."""

    __slots__ = ("key",)

    def __init__(self, key: bytes) -> None:
        self.key = key

    def tag(self, *parts: bytes) -> bytes:
        """The tag of ``parts`` (identifying context first, then the stored bytes)."""
        return hmac.digest(self.key, b"".join(parts), "sha256")[:TAG_SIZE]

    def matches(self, tag: bytes, *parts: bytes) -> bool:
        """Whether ``tag`` is the tag of ``parts`` (in constant time)."""
        return hmac.compare_digest(tag, self.tag(*parts))


def key_from_secret(secret: str, job: str) -> bytes:
    """The key of ``job`` derived from a configured secret (different for every job)."""
    return hmac.digest(secret.encode(), b"gyreflow state key\0" + job.encode(), "sha256")


_KEY_BYTES = 32
_create_lock = threading.Lock()


def read_key_file(path: str) -> bytes | None:
    """The key stored at ``path`` (None if there is none); refuses a key another user can change."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        msg = f"the state key {path} cannot be read ({exc.strerror})"
        raise BackendUnavailableError(msg) from None
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid() or not stat.S_ISREG(info.st_mode):
            msg = f"the state key {path} belongs to another user or is not a regular file"
            raise SnapshotCorruptedError(msg)
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.fchmod(fd, 0o600)
        text = os.read(fd, 4 * _KEY_BYTES)
    finally:
        os.close(fd)
    try:
        key = bytes.fromhex(text.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != _KEY_BYTES:
        msg = (f"the state key {path} is damaged, so the job's state cannot be authenticated; "
               "restore the file from a backup, or start again with --fresh")
        raise SnapshotCorruptedError(msg)
    return key


def key_file(path: str, create: bool) -> bytes | None:
    """The key at ``path``; with ``create``, a new random one is written first if there is none.

    Creation is atomic (a private temporary file linked to ``path``): concurrent writers of one job
    all end up with the key of whichever linked first.
    """
    key = read_key_file(path)
    if key is not None or not create:
        return key
    temporary = f"{path}.{os.getpid()}-{threading.get_ident()}-{secrets.token_hex(4)}"
    with _create_lock:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, secrets.token_bytes(_KEY_BYTES).hex().encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(temporary)
    return read_key_file(path)


class Seals:
    """The seal of each job of one store: from the secret, or from key files."""

    def __init__(self, secret: str, key_path=None, location: str = "") -> None:
        """``key_path(job)`` is where a job's key file is; None when only a secret can do."""
        self.secret = secret
        self.key_path = key_path
        self.location = location
        self._seals: dict[str, Seal] = {}
        self._lock = threading.Lock()

    def of(self, job: str, create: bool = False) -> Seal:
        """The seal of ``job``; raises ``SnapshotCorruptedError`` when stored state has no key."""
        seal = self._seals.get(job)
        if seal is not None:
            return seal
        with self._lock:
            if self.secret:
                key = key_from_secret(self.secret, job)
            elif self.key_path is None:
                msg = (f"{self.location} is shared by every machine of a job: set state.secret "
                       "(or GYREFLOW_STATE__SECRET) so that its state can be authenticated")
                raise BackendUnavailableError(msg)
            else:
                path = self.key_path(job)
                key = key_file(path, create)
                if key is None:
                    msg = (f"the state key {path} is missing, so the stored state of job {job!r} "
                           "cannot be authenticated; restore the file from a backup, or start "
                           "again with --fresh")
                    raise SnapshotCorruptedError(msg)
            seal = self._seals[job] = Seal(key)
        return seal

    def drop(self, job: str) -> None:
        """Forget ``job``'s key (its state is gone): the next write of the job makes a new one."""
        with self._lock:
            self._seals.pop(job, None)
            if not self.secret and self.key_path is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.key_path(job))
