"""Run the cas-journal command line from a checkout: ``python cli.py ...``."""

from cas_journal.cli.app import main

if __name__ == "__main__":
    main()
