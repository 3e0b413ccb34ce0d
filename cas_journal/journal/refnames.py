"""Names of the journal's refs: threads, their listing index, leases, checkpoint runs.

Pure string functions with no model imports, so that code which only needs ref names
(listing, maintenance, the command line) does not load the pydantic models.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ..names import validate_id

THREAD_PREFIX = "threads/"
INDEX_PREFIX = "threadindex/"
LEASE_PREFIX = "leases/"
CHECKPOINT_PREFIX = "checkpoints/"
_INVERT = 10**19 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
"""(Made once: building a timedelta at every ``index_key`` costs more than the rest of it.)"""


def thread_ref(thread_id: str) -> str:
    """The ref name of a thread (validating the id)."""
    return THREAD_PREFIX + validate_id(thread_id, "thread id")


def checkpoint_ref(run_id: str) -> str:
    """The ref name of a checkpoint run (validating the id)."""
    return CHECKPOINT_PREFIX + validate_id(run_id, "run id")


def index_key(created_at: datetime, thread_id: str) -> str:
    """The listing ref of a thread: newest created_at first, then id ascending."""
    micros = (created_at - _EPOCH) // _MICROSECOND
    return f"{INDEX_PREFIX}{_INVERT - micros:020d}/{thread_id}"


def thread_id_from_index(name: str) -> str:
    """The thread id of a listing ref."""
    return name[len(INDEX_PREFIX) + 21 :]
