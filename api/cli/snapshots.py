"""``gyreflow snapshots``: the jobs with stored state, their last completed window, retained
versions and sizes."""

from __future__ import annotations

import click

from gyreflow.api.cli.errors import fail as _fail


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True,
              help="Print the jobs as JSON (job, last_completed, retained, parts in bytes).")
def snapshots(config_path: str | None, as_json: bool) -> None:
    """List the jobs with stored state: last completed window, retained versions, sizes.

    Job names are printed whole, whatever the terminal's width: they are what gyreflow query JOB
    and gyreflow run --resume need.
    """
    from rich.console import Console

    from gyreflow.api.config.loading import Config, ConfigError
    from gyreflow.state.backends import backend_from_config
    from gyreflow.state.shared.snapshot import BackendUnavailableError, SnapshotCorruptedError

    try:
        backend = backend_from_config(Config.load(config_path))
        store = backend.open_store()
    except (ConfigError, BackendUnavailableError) as exc:
        _fail(Console(stderr=True), str(exc), 2)
    try:
        jobs = []
        for job in store.jobs():
            try:
                meta = store.read_meta(job)
                parts = dict(sorted(store.sizes(job).items()))
            except SnapshotCorruptedError as exc:
                jobs.append({"job": job, "corrupted": str(exc)})
                continue
            jobs.append({"job": job, "last_completed": meta.last_completed,
                         "retained": list(meta.retained), "parts": parts})
    finally:
        store.close()
    if as_json:
        import json

        click.echo(json.dumps({"backend": backend.describe(), "jobs": jobs}, indent=2))
        return
    _print_snapshots(backend.describe(), jobs)


def _print_snapshots(backend: str, jobs: list[dict]) -> None:
    """The jobs as a table whose job column is never cut (the console widens to hold it)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    console.print(f"backend: {backend}", markup=False, highlight=False, soft_wrap=True)
    if not jobs:
        console.print("no job has stored state", markup=False)
        return
    longest = max(len(job["job"]) for job in jobs)
    table = Table()
    table.add_column("job", no_wrap=True, min_width=longest)
    for column in ("last completed", "retained", "state"):
        table.add_column(column, overflow="fold")
    table.add_column("bytes", no_wrap=True, justify="right")
    for job in jobs:
        if "corrupted" in job:
            table.add_row(escape(job["job"]), "corrupted", "", escape(job["corrupted"]), "")
            continue
        first = True
        for part, size in job["parts"].items():
            table.add_row(escape(job["job"]) if first else "",
                          str(job["last_completed"]) if first else "",
                          ", ".join(map(str, job["retained"])) if first else "",
                          escape(part), f"{size:,}")
            first = False
    parts = max((len(part) for job in jobs for part in job.get("parts", {})), default=10)
    needed = longest + parts + 50  # the job and state columns whole, the others and the borders
    if console.width < needed:
        console = Console(width=needed)
    console.print(table)
