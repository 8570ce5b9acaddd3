"""The logged table of graph chunks resumed from an earlier version, in the same key-group layout or
a new one (a rescale, a rebalance), then snapshotted on: every version it writes after the resume
reads back as the chunks the task held, so a second resume finds the graph it left."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_logged_table import MP, VersionedDict, plain_graph, same_chunks, window_records, windows

from gyreflow.runtime.dataflow.graph import changelog
from gyreflow.runtime.dataflow.graph.chunks import add_window_input
from gyreflow.runtime.dataflow.graph.removals import apply_changes
from gyreflow.state.keys import logged
from gyreflow.state.keys.keyed import KeyedStateStore


@settings(max_examples=80, deadline=None)
@given(windows, st.integers(1, 4), st.data())
def test_versions_written_after_a_resume_read_back_as_held_whatever_the_layout(changes, level,
                                                                               data):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(logged, "LEVEL", level)  # slots fill and merge within a few windows
        patch.setattr(logged, "LEVEL2", 2)
        table = changelog.chunk_table(KeyedStateStore(MP), "g:chunks")
        store = VersionedDict()
        held: dict[int, dict] = {}
        version = 0
        for window in changes:
            records = window_records(window)
            if any(kind == "cut" for kind, *_ in window):
                apply_changes(table.data, records, MP, False, range(MP), table.record)
            else:
                add_window_input(table.data, records, MP, False, range(MP), table.record)
            version += 1
            written, removed = table.take_changes()
            store.write(version, written, removed)
            held[version] = {k: list(v) for k, v in table.data.items()}
            if data.draw(st.booleans(), label="resume now"):
                # A crash, then --resume from a retained version: the later versions are dropped,
                # and the task goes on from what it read back (in a new layout: written whole).
                version = data.draw(st.integers(1, version), label="resumed version")
                store.versions = [v for v in store.versions if v[0] <= version]
                held = {v: chunks for v, chunks in held.items() if v <= version}
                table = changelog.chunk_table(KeyedStateStore(MP), "g:chunks")
                table.data = store.read(version)
                table.after_restore(relaid=data.draw(st.booleans(), label="relaid"))
                assert same_chunks(table.data, held[version])
        for at, chunks in held.items():
            restored = changelog.chunk_table(KeyedStateStore(MP), "g:chunks")
            restored.data = store.read(at)
            restored.after_restore(relaid=False)
            assert same_chunks(restored.data, chunks), f"version {at}"
            assert plain_graph(restored.data) == plain_graph(chunks)
