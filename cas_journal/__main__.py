"""``python -m cas_journal``: the ``cas-journal`` command line."""

from .cli.app import main

main()
