"""What maintenance operations report (pydantic models: ``model_dump(mode="json")``)."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

Progress = Callable[[str, int, int | None], None]
"""Called as ``progress(label, done, total)`` during long work; total may be None."""


class PackReport(BaseModel):
    """The outcome of ``pack``."""

    objects: int = 0
    """Objects in the new pack (the pack dictionary included)."""
    loose_objects_packed: int = 0
    packs_merged: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    dictionary_bytes: int = 0
    damaged_objects_left: int = 0
    """Objects with no intact copy: left where they were (fsck reports them)."""
    seconds: float = 0.0


class GcReport(BaseModel):
    """The outcome of ``gc`` (with ``dry_run``, what it would do)."""

    dry_run: bool = False
    reachable_objects: int = 0
    unreachable_objects: int = 0
    deleted_objects: int = 0
    deleted_bytes: int = 0
    kept_young_objects: int = 0
    """Unreachable objects younger than the grace period (a writer may be linking them)."""
    reflog_entries_expired: int = 0
    packs_rewritten: int = 0
    """Packs removed after their live objects were written to a new pack."""
    packs_removed: int = 0
    """Packs removed (those rewritten, and those that held nothing live)."""
    temp_files_removed: int = 0
    """Temp files left by killed writers, older than the grace period (local stores)."""
    seconds: float = 0.0


class Problem(BaseModel):
    """One thing fsck found wrong: what (an oid, a ref, a pack) and how."""

    subject: str
    message: str


class FsckReport(BaseModel):
    """The outcome of ``fsck``: ok is False if any problem was found."""

    ok: bool = True
    quick: bool = False
    objects_checked: int = 0
    refs_checked: int = 0
    reflog_entries_checked: int = 0
    packs_checked: int = 0
    problems: list[Problem] = Field(default_factory=list)
