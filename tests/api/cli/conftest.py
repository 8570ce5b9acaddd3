"""Fixtures of the ``gyreflow`` command tests that run the word count example on every environment."""

from __future__ import annotations

import os

import pytest
from _environments import environment_variables


@pytest.fixture
def no_gyreflow_variables(monkeypatch):
    """GYREFLOW_* variables of the calling shell must not change what these tests expect."""
    for name in list(os.environ):
        if name.startswith("GYREFLOW_"):
            monkeypatch.delenv(name)


@pytest.fixture
def every_environment(environment_type, no_gyreflow_variables, monkeypatch):
    """Every CLI test runs the example on each environment (in process and in subprocesses); after
    the shell's GYREFLOW_* variables are gone, or the environment would fall back to the default."""
    for name, value in environment_variables(environment_type).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GYREFLOW_SPARK__MASTER", "local[2]")
