"""Child Python processes for the tests that race several processes on one store."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The checkout's root, put on the children's PYTHONPATH so they import this cas_journal."""


def run_children(script: str, count: int, *args: str) -> list[subprocess.CompletedProcess[bytes]]:
    """Start ``count`` Python children running ``script`` at once; wait for all."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(script), *args, str(i)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(count)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results
