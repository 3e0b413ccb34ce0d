"""The session manifest: what a thread needs, beyond its entries, to write its file back.

Every imported session gets one extra entry (type ``custom``, hanging under the
session's leaf, not on the thread's path) whose metadata ``transcript.manifest`` holds
this JSON object:

* ``format``, ``version`` (1), ``session`` (the session key), ``path`` (where the file
  sat under the imported directory), ``records`` (how many records the file holds);
* ``tips``: the entries at the ends of the session's branches: the session's entries are
  those these reach;
* ``order``: the file order of the records as runs ``[start, length]`` of indices into
  the session's entries sorted by (created_at, depth, id): one run for a file written in
  time order, a few for one whose branches interleave;
* ``headers``: ``[position, text]`` of records kept verbatim here instead of as entries;
* ``defaults`` and ``overrides``: values of top-level keys that copies of a record
  change (a session id, a timestamp rewritten on a fork). An entry stores the record
  with those keys' values replaced by null in its text (``"sessionId":null``, once) and
  lists them in ``transcript.placeholders``; the manifest gives each key's most common
  value and, as runs of positions, the exceptions, and export puts them back by text.
  ``overrides`` of other keys replace stored values on records shared with another
  session (the record is re-encoded: such lines were checked to be compact JSON);
* the byte layout: ``bom``, ``eol``, ``final_newline``, ``blank`` (``[line, text]``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import InvalidInputError
from .source import compact_json

MANIFEST_KEY = "transcript.manifest"
"""Entry metadata key of a session manifest."""
RECORD_KEY = "transcript.record"
"""Entry metadata key of the record (compact JSON, placeholders set to null)."""
TEXT_KEY = "transcript.text"
"""Entry metadata key of a line kept verbatim (one that is not compact JSON)."""
PLACEHOLDERS_KEY = "transcript.placeholders"
"""Entry metadata key listing (comma-separated) the keys the manifest fills in."""
MANIFEST_VERSION = 1


def placeholder(key: str) -> str:
    """How a placeholder key stands in a stored record: ``"key":null``, which occurs
    exactly once in the stored text (the importer checks it)."""
    return f"{compact_json(key)}:null"


def to_runs(values: Iterable[int]) -> list[list[int]]:
    """Integers as runs of consecutive ascending values: [3,4,5,9] -> [[3,3],[9,1]]."""
    runs: list[list[int]] = []
    for value in values:
        if runs and runs[-1][0] + runs[-1][1] == value:
            runs[-1][1] += 1
        else:
            runs.append([value, 1])
    return runs


def from_runs(runs: Any, limit: int) -> Iterator[int]:
    """The integers of ``to_runs`` output; InvalidInputError if malformed or over ``limit``."""
    if not isinstance(runs, list):
        raise InvalidInputError("manifest runs are not a list")
    total = 0
    for run in runs:
        if (
            not isinstance(run, list)
            or len(run) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in run)
        ):
            raise InvalidInputError("manifest run is not [start, length]")
        total += run[1]
        if total > limit:
            raise InvalidInputError("manifest runs cover more records than the session has")
        yield from range(run[0], run[0] + run[1])
