"""Fixtures of the connector tests: a new database on the test PostgreSQL server."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from _recovery_jobs import _create_database

from gyreflow.state.stores.sql_urls import engine_url


@pytest.fixture
def postgres_database(postgres_url):
    """``(url, engine)`` of a new database on the test server, dropped afterwards."""
    url, drop = _create_database(postgres_url)
    engine = sa.create_engine(engine_url(url))
    yield url, engine
    engine.dispose()
    drop()
