"""Operator parameters: set mid-run with ``gyreflow control``, and read by functions from config."""

from __future__ import annotations

import json

import pytest
from _control_jobs import WINDOWS, Job, job_args, quiet_oracle, stopped_after_then_resumed
from test_notifications import QUIET, read_alerts

from gyreflow.api import ProcessFunction, SizeTumblingWindow

pytestmark = pytest.mark.processes


@pytest.mark.parametrize("environment", ["local", "spark"])
def test_a_parameter_set_mid_run_equals_stop_and_resume_with_it(words, workdir, environment):
    path, lines = words
    out = workdir / "out"
    job = Job(workdir, environment, job_args(path, out, pace=0.004))
    job.wait_published(4)
    answer = job.answer("set", "quiet", "quiet", "5")
    boundary = answer["window"]
    assert job.wait() == 0, job.output()
    assert 4 < boundary < WINDOWS - 5, f"the command landed at window {boundary}: pace the job"
    expected = quiet_oracle(lines, lambda w: 5 if w >= boundary else QUIET)
    assert expected != quiet_oracle(lines, lambda w: QUIET)  # the change shows in the output
    assert read_alerts(out) == expected
    if environment == "spark":
        return  # the stop-and-resume equivalence is the driver's, the same code on both hosts
    again = stopped_after_then_resumed(
        workdir, environment, path, boundary, job_args(path, out),
        GYREFLOW_CONTROL__PARAMETERS=json.dumps({"quiet.quiet": 5}))
    assert read_alerts(again) == expected


class Limit(ProcessFunction):
    def process(self, record, ctx):
        if record >= ctx.parameter("limit", 100):
            ctx.emit(record)


def test_functions_read_their_operator_parameters_from_config(make_env):
    numbers = list(range(20))
    env = make_env(2, **{"control.parameters": {"scale.factor": 3, "limit.limit": 30}})
    pipeline = env.pipeline("parameters")

    @pipeline.task
    def scaled(ctx):
        (ctx.source(numbers, SizeTumblingWindow(5)).with_parallelism(1)
         .map_with_context(lambda r, c: r * c.parameter("factor", 1)).with_name("scale")
         .key_by().process(Limit()).with_name("limit").collect())

    got = sorted(pipeline.execute()["scaled"].output("collect"))
    assert got == [n * 3 for n in numbers if n * 3 >= 30]
