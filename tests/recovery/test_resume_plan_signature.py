"""The plan signature a checkpoint records: it goes through the job meta's bytes and back as it was
(and a meta without one reads back with none), it is the same in every process whatever Python's
string hashing, and it differs exactly where a resume must be refused: window sizes and key
functions, not parallelism or functions a user may fix between runs.

Oracles: the plans are built twice from the same description, the expected differences written out
by hand from the sizes Hypothesis draws."""

from __future__ import annotations

import os
import subprocess
import sys

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api import CollectionSource, Environment, SizeTumblingWindow
from gyreflow.api.language.pipeline import PipelineTask
from gyreflow.runtime.plan_signature import plan_difference, plan_signature
from gyreflow.state.shared.sealing import Seal
from gyreflow.state.shared.snapshot import JobMeta, dumps, encode_value, meta_context

PROPERTY = settings(max_examples=40, deadline=None)
SIZES = st.integers(1, 10_000)


def signature_of(window: int, parallelism: int = 1, key=None, step=None) -> dict:
    """The signature of a word count over ``window`` lines with ``parallelism`` counting tasks."""

    def count(ctx):
        words = (ctx.source(CollectionSource(["a b", "b c"]), SizeTumblingWindow(window))
                 .with_name("lines").flat_map(step or str.split).with_name("split"))
        counts = (words.key_by(key) if key is not None else words.key_by()).count()
        counts.with_name("count").with_parallelism(parallelism).collect("out")

    config = Environment.local().config
    return plan_signature(PipelineTask("count", count).build(config))


@PROPERTY
@given(before=SIZES, now=SIZES, parallelism=st.integers(1, 8))
def test_only_the_window_size_is_named_and_parallelism_is_left_out(before, now, parallelism):
    difference = plan_difference(signature_of(before), signature_of(now, parallelism))
    if before == now:
        assert difference is None
    else:
        assert difference == (f"source 'lines': window SizeTumblingWindow({now}), checkpoint has "
                              f"SizeTumblingWindow({before})")


def test_key_functions_are_compared_and_other_functions_are_not():
    base = signature_of(10)
    assert plan_difference(base, signature_of(10, step=lambda line: line.split())) is None
    assert plan_difference(base, signature_of(10, key=str.lower)) == (
        "operator 'count': key function str.lower, checkpoint has gyreflow.plan.operators.identity")
    first = signature_of(10, key=lambda word: word)
    again = signature_of(10, key=lambda word: word)  # the same code: another function object
    other = signature_of(10, key=lambda word: word.strip())
    assert plan_difference(first, again) is None
    difference = plan_difference(first, other)
    assert difference.startswith("operator 'count': key function ")
    assert " has other code or values (digest " in difference
    # After a change of Python's version, key functions are known by name alone.
    assert plan_difference({**first, "python": "2.7"}, other) is None


@PROPERTY
@given(window=SIZES, job=st.text(min_size=1, max_size=20), last=st.integers(0, 10**6))
def test_the_signature_goes_through_the_meta_and_back(window, job, last):
    meta = JobMeta(job, "0123456789abcdef", last, (last,), {"count": 2, "source:lines": 1}, {},
                   signature_of(window))
    seal = Seal(b"k" * 32)
    assert JobMeta.from_bytes(meta.to_bytes(), "meta") == meta
    assert JobMeta.from_bytes(meta.to_bytes(seal), "meta", seal, job) == meta
    # A meta written before signatures were recorded: no such field, read back with none.
    fields = attrs.asdict(meta, recurse=False)
    del fields["plan"]
    old = encode_value(dumps(fields), seal, meta_context(job))
    assert JobMeta.from_bytes(old, "meta", seal, job) == attrs.evolve(meta, plan={})


PRINT_SIGNATURE = """
import sys
sys.path.insert(0, {tests!r})
from test_resume_plan_signature import signature_of
col = "x"
print(signature_of(7, key=lambda word: (word[:1], col) if word in {{"a", "b", "c"}} else word))
"""


def test_the_signature_is_the_same_in_every_process():
    code = PRINT_SIGNATURE.format(tests=os.path.dirname(__file__))
    printed = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=120, check=True)
        printed.add(done.stdout)
    assert len(printed) == 1, printed
    assert "key function" in printed.pop()
