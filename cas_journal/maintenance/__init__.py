"""Layer 4, maintenance: pack, gc, fsck and stats, operating on backends."""

from .checker import fsck
from .collector import gc
from .packer import pack
from .repair import repair
from .reports import FsckReport, GcReport, PackReport, Problem, Progress, RepairReport
from .statistics import StatsReport, stats
from .sync import SyncReport, sync
from .transfer import ImportReport, MalformedExport, export_thread, import_jsonl

__all__ = [
    "FsckReport",
    "GcReport",
    "ImportReport",
    "MalformedExport",
    "PackReport",
    "Problem",
    "Progress",
    "RepairReport",
    "StatsReport",
    "SyncReport",
    "export_thread",
    "fsck",
    "gc",
    "import_jsonl",
    "pack",
    "repair",
    "stats",
    "sync",
]
