"""``gyreflow run --allow-changed-plan``: resume a job whose plan changed since its checkpoint."""

from __future__ import annotations

import functools

import click


def allow_changed_plan_option(command):
    """Give the ``run`` command ``--allow-changed-plan`` (with ``--resume`` only): its pipelines
    resume although their plan differs from the checkpoint's, as Flink's
    ``--allowNonRestoredState`` does; the stored state is read as it is."""

    @click.option("--allow-changed-plan", is_flag=True,
                  help="With --resume: resume even though the plan changed since the checkpoint "
                       "(operators, windows, key functions); the stored state is read as it is.")
    @functools.wraps(command)
    def run_allowing(*args, allow_changed_plan: bool, **kwargs):
        from gyreflow.runtime.checkpoint import allowing_changed_plan

        if allow_changed_plan and not kwargs.get("resume"):  # exit 2 with the usage
            raise click.UsageError("--allow-changed-plan needs --resume")
        with allowing_changed_plan(allow_changed_plan):
            return command(*args, **kwargs)

    return run_allowing
