"""``python -m cas_journal.cli``: the same as ``cas-journal``."""

from .app import main

main()
