"""The ``cas-journal`` command line: thin click commands over the journal and maintenance.

``main()`` is the console-script entry point (``python cli.py`` in a checkout runs the
same). Every command and its --json schema are described in docs/cli.md.
"""

from __future__ import annotations

from . import checkpoints, demo, maintenance, objects, remote, threads, transfer
from .app import cli
from .tree import tree

for _module in (threads, objects, checkpoints, maintenance, remote, transfer, demo):
    for _command in _module.COMMANDS:
        cli.add_command(_command)
cli.add_command(tree)


def main() -> None:
    """Run the command line (exits the process)."""
    cli.main(prog_name="cas-journal")


__all__ = ["cli", "main"]
