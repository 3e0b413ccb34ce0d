"""Layer 4, maintenance: pack, gc, fsck and stats, operating on backends."""

from .checker import fsck
from .collector import gc
from .packer import pack
from .reports import FsckReport, GcReport, PackReport, Problem, Progress, StatsReport
from .statistics import stats
from .sync import SyncReport, sync

__all__ = [
    "FsckReport",
    "GcReport",
    "PackReport",
    "Problem",
    "Progress",
    "StatsReport",
    "SyncReport",
    "fsck",
    "gc",
    "pack",
    "stats",
    "sync",
]
