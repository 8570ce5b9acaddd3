"""Running a command as someone a folder of mode 555 refuses, also when the tests run as root."""

from __future__ import annotations

import os
import shutil

import pytest


def without_write_permission() -> tuple[str, ...]:
    """A command prefix under which a folder of mode 555 cannot be written: none for a user,
    ``setpriv`` dropping the capabilities that let root override file modes for root (a test is
    skipped, saying why, only where root has no ``setpriv``)."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("root overrides file modes and setpriv is missing to drop that capability")
    return ("setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner")
