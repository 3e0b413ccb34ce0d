"""Sections of bench/RESULTS.md that the feature benchmarks own.

The main run (``python -m bench --scale full``) renders RESULTS.md from its own results;
each feature benchmark (search, retention, encryption, ...) publishes one section of its
own, between two marker lines, and re-running it replaces only that section. The main
report keeps every published section when it renders the file again.
"""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
_SECTION = re.compile(r"<!-- section:([a-z0-9-]+) -->\n.*?<!-- end:\1 -->\n", re.S)


def published(text: str) -> list[str]:
    """Every published section of a RESULTS.md text, markers included, in order."""
    return [found.group(0) for found in _SECTION.finditer(text)]


def publish(name: str, markdown: str, path: Path = RESULTS) -> Path:
    """Put ``markdown`` into ``path`` as the section ``name``: in place of the section
    of that name if there is one, else at the end."""
    if not re.fullmatch(r"[a-z0-9-]+", name):
        raise ValueError(f"section names are lowercase letters, digits and '-': {name!r}")
    block = f"<!-- section:{name} -->\n{markdown.rstrip()}\n<!-- end:{name} -->\n"
    text = path.read_text() if path.exists() else ""
    pattern = re.compile(rf"<!-- section:{name} -->\n.*?<!-- end:{name} -->\n", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + block
    path.write_text(text)
    return path
