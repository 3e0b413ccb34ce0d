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
    unreadable_reachable_objects: int = 0
    """Reachable objects (or refs) that are missing or damaged: fsck names them."""
    kept_for_damage: bool = False
    """True when nothing was deleted because a reachable structured object (or a ref)
    could not be read, so what it references is unknown (repair it first:
    ``fsck --repair-from REPLICA``)."""
    temp_files_removed: int = 0
    """Temp files left by killed writers, older than the grace period (local stores)."""
    condemned_objects: int = 0
    """Garbage moved into a condemned pack, deleted by a gc one grace period later
    (stores that delete in two phases: S3)."""
    tombstones_removed: int = 0
    """Markers of refs deleted longer ago than the reflog expiry (S3)."""
    seconds: float = 0.0


class Problem(BaseModel):
    """One thing fsck found wrong: what (an oid, a ref, a pack) and how."""

    subject: str
    message: str


class RepairReport(BaseModel):
    """What ``repair`` (``fsck --repair-from``) did."""

    damaged: list[str] = Field(default_factory=list)
    """Objects that had no intact copy here."""
    missing: list[str] = Field(default_factory=list)
    """Objects referenced here but absent."""
    restored: list[str] = Field(default_factory=list)
    """Objects fetched from the replica and stored again (their dependencies included)."""
    still_lost: list[str] = Field(default_factory=list)
    """Damaged or missing objects the replica could not provide intact."""
    repacked: bool = False
    """True if damaged packed copies were dropped by repacking."""
    packs_set_aside: list[str] = Field(default_factory=list)
    """Packs that could not be read, moved out of the store once nothing needed them."""


class FsckReport(BaseModel):
    """The outcome of ``fsck``: ok is False if any problem was found."""

    ok: bool = True
    quick: bool = False
    objects_checked: int = 0
    refs_checked: int = 0
    reflog_entries_checked: int = 0
    packs_checked: int = 0
    problems: list[Problem] = Field(default_factory=list)
    repair: RepairReport | None = None
    """What ``repair_from`` restored before the check (None without it)."""
