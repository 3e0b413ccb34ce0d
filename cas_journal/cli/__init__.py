"""The ``cas-journal`` command line: thin click commands over the journal and maintenance.

``main()`` is the console-script entry point (``python -m cas_journal`` and, in a
checkout, ``python cli.py`` run the same). ``cas-journal --help`` lists the commands and
``cas-journal COMMAND --help`` describes each. Importing this package imports click and
nothing heavy: each command's module is imported when that command runs.
"""

from __future__ import annotations

import gc

# Importing click and the command table allocates many objects and no garbage cycles:
# the collector is paused meanwhile (as ``main`` pauses it while a command starts).
_collecting = gc.isenabled()
gc.disable()
try:
    from .app import cli, main
finally:
    if _collecting:
        gc.enable()

__all__ = ["cli", "main"]
