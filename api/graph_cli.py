"""``gyreflow graph``: run a library graph algorithm on vertex and edge files."""

from __future__ import annotations

import click


@click.command()
def graph() -> None:
    """Run a graph algorithm (bfs, pr, wcc, cdlp, lcc, sssp) on vertex and edge files."""
    raise click.ClickException("not available yet")
