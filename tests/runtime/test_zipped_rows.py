"""Rows zipped from columns: the same rows as ``zip``, and the cycle collector left as it was."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gyreflow.runtime.dataflow.columns.zipped import zipped_rows

values = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(), st.none(),
                   st.lists(st.integers(), max_size=3))


@given(st.integers(0, 3).flatmap(lambda width: st.lists(
    st.tuples(*[values] * width), max_size=40)))
def test_the_rows_are_zips_rows(rows):
    columns = [list(column) for column in zip(*rows, strict=True)]
    if not columns:
        assert zipped_rows() == []
        return
    assert zipped_rows(*columns) == [tuple(row) for row in rows]


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_left_as_it_was_even_when_the_columns_differ_in_length(enabled):
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        assert zipped_rows([1, 2], ["a", "b"]) == [(1, "a"), (2, "b")]
        assert gc.isenabled() is enabled
        with pytest.raises(ValueError, match="shorter"):
            zipped_rows([1, 2], ["a"])
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
