"""Fused operator chains (runtime/dataflow/fusion.py): consecutive map/filter/flat_map operators run as
one comprehension and give what a plain loop gives, keep exact per-operator record counts, and a
failing function in a fused chain still names its operator, window and record."""

from __future__ import annotations

from collections import Counter

import pytest

from gyreflow.api import SizeTumblingWindow
from gyreflow.runtime.dataflow.fusion import FusedOperator, fuse
from gyreflow.runtime.dataflow.operators import (
    CountOperator,
    FilterOperator,
    FlatMapOperator,
    MapOperator,
)
from gyreflow.runtime.errors import RecordError, UserFunctionError

LINES = ["a b c", "b c", "", "d a a", "x y", "c"] * 3
SIZE = 4


def run(env, build):
    pipeline = env.pipeline("fused")
    pipeline.task(build, name="job")
    return pipeline.execute()["job"]


def words_of(line):
    return line.split()


def pair(word):
    return (word, len(word) + ord(word[0]))


def keep(kv):
    return kv[0] != "d"


def shout(kv):
    return (kv[0].upper(), kv[1])


def test_chains_are_split_into_runs_with_at_most_one_resizing_operator():
    ops = [FlatMapOperator("f", words_of), MapOperator("m", pair), FilterOperator("k", keep),
           MapOperator("s", shout), CountOperator("c", lambda r: r), MapOperator("alone", str)]
    steps = fuse(ops)
    assert [type(s).__name__ for s in steps] == ["FusedOperator", "FusedOperator", "CountOperator",
                                                 "MapOperator"]
    assert [[op.name for op in s.operators] for s in steps[:2]] == [["f", "m"], ["k", "s"]]


def test_a_fused_chain_equals_a_plain_loop_with_exact_metrics(make_env):
    result = run(make_env(1, **{"runtime.batch_size": 3}),
                 lambda ctx: ctx.source(LINES, SizeTumblingWindow(SIZE))
                 .flat_map(words_of).with_name("split").map(pair).with_name("pair")
                 .filter(keep).with_name("keep").map(shout).with_name("shout").collect("out"))
    for window, first in enumerate(range(0, len(LINES), SIZE), start=1):
        lines = LINES[first:first + SIZE]
        words = [w for line in lines for w in line.split()]
        pairs = [pair(w) for w in words]
        kept = [p for p in pairs if keep(p)]
        assert result.by_window("out")[window] == [shout(p) for p in kept]
        metrics = result.windows[window - 1].operators
        counts = {name: (m.records_in, m.records_out) for name, m in metrics.items()}
        assert counts["split"] == (len(lines), len(words))
        assert counts["pair"] == (len(words), len(words))
        assert counts["keep"] == (len(pairs), len(kept))
        assert counts["shout"] == (len(kept), len(kept))


def test_the_lambda_word_count_equals_a_counter(make_env):
    result = run(make_env(2, **{"runtime.batch_size": 5}),
                 lambda ctx: ctx.source(LINES, SizeTumblingWindow(SIZE)).flat_map(str.split)
                 .map(lambda w: (w, 1)).key_by(lambda kv: kv[0])
                 .reduce(lambda a, b: (a[0], a[1] + b[1])).collect("counts"))
    finals = dict(result.output("counts"))  # the last emitted total of each word
    assert finals == Counter(w for line in LINES for w in line.split())


def test_a_failing_function_inside_a_fused_chain_is_named(make_env):
    def fragile(kv):
        if kv[0] == "x":
            raise ValueError("no x")
        return kv

    with pytest.raises(UserFunctionError) as info:
        run(make_env(1), lambda ctx: ctx.source(LINES, SizeTumblingWindow(SIZE))
            .flat_map(words_of).map(pair).map(fragile).with_name("fragile").collect("out"))
    error = info.value
    assert error.operator == "fragile"
    assert error.record == pair("x")
    assert error.window == 2  # "x y" is line 5: the second window of four lines


def test_a_fused_step_restores_the_operators_after_a_replay():
    ops = [MapOperator("a", lambda x: 10 // x), MapOperator("b", lambda x: x + 1)]
    (step,) = fuse(ops)
    assert isinstance(step, FusedOperator)
    out = []
    step.out = out.extend
    step.process([1, 2, 5])
    with pytest.raises(RecordError) as info:
        step.process([1, 0])
    assert (info.value.operator, info.value.record) == ("a", 0)
    assert out == [11, 6, 3]
    assert [(op.records_in, op.records_out) for op in ops] == [(3, 3), (3, 3)]
