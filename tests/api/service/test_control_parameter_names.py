"""``control.parameters`` naming an operator a pipeline does not have: warned before any data moves,
naming the operator and the pipeline's operators; a right name runs without a word."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from _cli_runs import run_module

from gyreflow.api import SizeTumblingWindow
from gyreflow.api.service.control import ControlParameterWarning

QUIET_WORDS = Path(__file__).resolve().parents[3] / "examples" / "quiet_words.py"


def scaled(make_env, parameters: dict):
    env = make_env(1, **{"control.parameters": parameters})
    pipeline = env.pipeline("parameters")

    @pipeline.task
    def scale(ctx):
        (ctx.source(list(range(6)), SizeTumblingWindow(3))
         .map_with_context(lambda r, c: r * c.parameter("factor", 1)).with_name("scale")
         .collect())

    return pipeline


def test_a_misspelt_operator_is_warned_with_the_operators_of_the_pipeline(make_env):
    pipeline = scaled(make_env, {"sacle.factor": 3})
    with pytest.warns(ControlParameterWarning) as caught:
        got = pipeline.execute()["scale"].output("collect")
    assert sorted(got) == list(range(6))  # the parameter did nothing
    [warning] = [w for w in caught if w.category is ControlParameterWarning]
    message = str(warning.message)
    assert "'sacle'" in message and "'parameters'" in message and "scale" in message


def test_an_operator_the_pipeline_has_is_not_warned(make_env):
    pipeline = scaled(make_env, {"scale.factor": 3})
    with warnings.catch_warnings():
        warnings.simplefilter("error", ControlParameterWarning)
        got = pipeline.execute()["scale"].output("collect")
    assert sorted(got) == [n * 3 for n in range(6)]


@pytest.mark.processes
def test_the_command_line_warns_in_one_line_before_the_job_runs(tmp_path):
    config = tmp_path / "typo.toml"
    config.write_text('[control]\nparameters = { "quite.quiet" = 5 }\n', encoding="utf-8")
    lines = tmp_path / "lines.txt"
    lines.write_text("a b\nb c\n" * 20, encoding="utf-8")
    done = run_module(["run", "--env", "local", "-q", "--config", str(config), str(QUIET_WORDS),
                       "--", "--input", str(lines), "--output", str(tmp_path / "out")])
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    [line] = [line for line in done.stderr.splitlines() if "ControlParameterWarning" in line]
    assert "operator 'quite'" in line and "quiet" in line.split("its operators:")[1]
