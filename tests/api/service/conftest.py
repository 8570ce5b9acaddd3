"""Fixtures of the ``gyreflow control`` tests: the input words, and a working directory per test."""

from __future__ import annotations

from pathlib import Path

import pytest
from _control_jobs import LINES
from _recovery_data import write_lines
from test_notifications import make_lines


@pytest.fixture(scope="module")
def words(tmp_path_factory) -> tuple[Path, list[str]]:
    lines = make_lines(LINES, seed=5)
    return write_lines(tmp_path_factory.mktemp("control") / "words.txt", lines), lines


@pytest.fixture
def workdir(tmp_path) -> Path:
    (tmp_path / "stopped").mkdir()
    return tmp_path
