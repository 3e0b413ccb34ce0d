"""Small file-system helpers: atomic writes, directory fsync, and clear storage errors."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

from ...errors import StorageError

_FRIENDLY = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EIO: "input/output error",
}


@contextlib.contextmanager
def storage_errors(what: str) -> Iterator[None]:
    """Turn OSErrors other than not-found into StorageError with a one-line message."""
    try:
        yield
    except (FileNotFoundError, FileExistsError):
        raise
    except OSError as exc:
        reason = _FRIENDLY.get(exc.errno or 0, exc.strerror or str(exc))
        raise StorageError(f"{what} failed: {reason}") from exc


StrPath = str | os.PathLike[str]


def temp_name(directory: StrPath, hint: str = "") -> str:
    """A fresh hidden temp-file path inside ``directory`` (never a valid object/ref name)."""
    return f"{os.fspath(directory)}{os.sep}.tmp-{hint}{os.urandom(8).hex()}"


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def fsync_dir(directory: StrPath) -> None:
    """Make renames and unlinks inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_new_file(path: StrPath, data: bytes, durable: bool, mode: int = 0o444) -> None:
    """Create ``path`` exclusively and fill it; on failure remove the partial file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        write_all(fd, data)
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)
