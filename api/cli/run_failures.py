"""How ``gyreflow run`` ends a run whose script failed, whose engine failed, or that ran no pipeline."""

from __future__ import annotations

import sys

from gyreflow.api.cli.errors import fail, fail_script


class NoPipelineRanError(Exception):
    """The script ended by itself (no exception, no ``sys.exit``) without running any pipeline: it
    built none, or never called ``execute()`` on the pipelines it built."""

    def __init__(self, script: str, never_executed: list[str]) -> None:
        self.script = script
        self.never_executed = never_executed
        if never_executed:
            listed = ", ".join(repr(name) for name in never_executed)
            what = (f"pipeline {listed} {'has' if len(never_executed) == 1 else 'have'} tasks but "
                    f"{'was' if len(never_executed) == 1 else 'were'} never executed")
            self.hint = "Call pipeline.execute() where the script should run it."
        else:
            what = "it built no pipeline with tasks, or never called execute() on one"
            self.hint = ("A script runs a pipeline where it calls pipeline.execute(): build one with "
                         "env.pipeline(NAME) and @pipeline.task, then call its execute().")
        super().__init__(f"{script} ran no pipeline: {what}")


def check_a_pipeline_ran(script: str, ran: list, never_executed: list[str]) -> None:
    """After the script ended by itself: refuse (``NoPipelineRanError``) a script that ran no pipeline
    (``ran``: the tasks ``gyreflow run`` saw run), as a Flink job without a sink is refused; warn of
    the pipelines left unexecuted beside those that ran."""
    if not ran:
        raise NoPipelineRanError(script, never_executed)
    if never_executed:
        from gyreflow.api.language.pipeline import not_executed_warning

        sys.stderr.write(not_executed_warning(never_executed) + "\n")


def kept(backend: str | None, what: str) -> str:
    """The hint after a failure: completed windows are kept and ``what`` resumes them, or (the
    memory backend) nothing is kept."""
    from gyreflow.runtime.stop import resume_advice

    if backend == "memory":
        advice = resume_advice(backend)
        return advice[0].upper() + advice[1:] + "."
    return f"Completed windows are kept: {what}."


def fail_other(console, error: Exception, backend: str | None = None) -> None:
    """A script that ran no pipeline (exit 1, as ``gyreflow explain`` of it), Spark that did not
    start (exit 2, nothing ran), a worker process that died once the restart strategy gave up
    (exit 6, one line: a signal or the machine, not a bug) and a task that failed outside user
    functions (exit 6, a fault of gyreflow or its host: one line, then its traceback for a report);
    the user's own source or sink that raised exits 1, as a user function does; anything else the
    script raised is told by ``fail_script``."""
    from gyreflow.runtime.dataflow.task_runner import TaskError, UserCodeError
    from gyreflow.runtime.spark.session import SparkStartError
    from gyreflow.runtime.user_code import fault_traceback
    from gyreflow.runtime.workers.wire import WorkerLostError

    if isinstance(error, NoPipelineRanError):
        fail(console, str(error), 1, hint=error.hint)
    if isinstance(error, SparkStartError):
        fail(console, str(error), 2)
    if isinstance(error, WorkerLostError):  # a signal, the OOM killer, a lost executor: no bug
        fail(console, str(error), 6,
             hint=kept(backend, "run again with --resume (restart.attempts sets how many "
                                "times a run starts its workers again by itself)"))
    if isinstance(error, UserCodeError):  # the user's source or sink: as a user function
        traceback_text = error.original_traceback
        fail(console, str(error), 1,
             hint=kept(backend, "fix the code and run again with --resume"),
             detail=(f"Original traceback:\n{traceback_text}"
                     if traceback_text.startswith("Traceback") else None))
    if isinstance(error, TaskError):
        fail(console, str(error), 6,
             hint=kept(backend, "run again with --resume; if it fails again, report it "
                                "with the traceback below"),
             detail=fault_traceback(error))
    fail_script(console, error)
