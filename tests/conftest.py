"""Shared fixtures: every pipeline test runs in every environment through ``make_env``."""

from __future__ import annotations

import pytest

from gyreflow.api import Environment

ENVIRONMENTS = ["local"]


@pytest.fixture(params=ENVIRONMENTS)
def environment_type(request) -> str:
    """The environment a pipeline test runs in (each test runs once per environment)."""
    return request.param


@pytest.fixture
def make_env(environment_type, tmp_path):
    """Build an environment of the current type: ``make_env(parallelism=2, **{"runtime.batch_size": 3})``."""

    def make(parallelism: int = 1, **config) -> Environment:
        overrides = {
            "environment.type": environment_type,
            "environment.parallelism": parallelism,
            "progress.enabled": False,
            "state.path": str(tmp_path / "state"),
        }
        overrides.update(config)
        return Environment.from_config(None, overrides)

    return make
