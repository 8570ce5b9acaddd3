"""``positions.inserted`` against a plain list's ``insert``: every dtype, repeated and end points."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.runtime.dataflow.graph.positions import inserted

_KINDS = {
    "int": (st.integers(-2**63, 2**63 - 1), np.int64),
    "float": (st.floats(allow_nan=False), np.float64),
    "object": (st.one_of(st.text(max_size=3), st.integers(), st.none()), object),
}


@settings(max_examples=150, deadline=None)
@given(data=st.data(), base=st.sampled_from(sorted(_KINDS)), extra=st.sampled_from(sorted(_KINDS)))
def test_items_land_before_their_points_in_order_as_list_inserts_put_them(data, base, extra):
    values, dtype = _KINDS[base]
    rows = data.draw(st.lists(values, max_size=40))
    item_values, item_dtype = _KINDS[extra]
    at = data.draw(st.lists(st.integers(0, len(rows)), max_size=20))
    items = data.draw(st.lists(item_values, min_size=len(at), max_size=len(at)))
    points = sorted(at)
    array = np.array(rows, dtype=dtype)
    out = inserted(array, np.array(points, dtype=np.int64), np.array(items, dtype=item_dtype))
    expected = list(array.tolist())
    for offset, (point, item) in enumerate(zip(points, items, strict=True)):
        expected.insert(point + offset, item)  # each before the row that was at ``point``
    if not points:
        assert out is array
        return
    if object in (array.dtype, np.dtype(item_dtype)):
        assert out.dtype == object
        assert out.tolist() == expected
    else:
        assert out.dtype == np.result_type(array.dtype, np.dtype(item_dtype))
        assert out.tolist() == np.array(expected, dtype=out.dtype).tolist()
