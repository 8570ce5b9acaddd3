"""Allow ``python -m gyreflow`` as a synonym of the ``gyreflow`` command."""

from gyreflow.api.cli.commands import main

main(prog_name="gyreflow")
