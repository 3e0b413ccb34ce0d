"""Open a store from a location string: a directory path, ``memory://`` or ``s3://...``."""

from __future__ import annotations

import os
from typing import Any

from ..errors import InvalidInputError
from .base import Store
from .local import LocalStore
from .memory import MemoryStore


def open_store(location: str | os.PathLike[str], **options: Any) -> Store:
    """Open (creating if needed) the store at ``location``.

    Options: ``durable`` (local, default True), ``max_object_size``, ``create`` (local);
    S3 locations take the options of the S3 backend.
    """
    text = os.fspath(location)
    if text.startswith("memory://"):
        return MemoryStore()
    if text.startswith("s3://"):
        from .s3 import S3Store  # optional extra: boto3 is imported only here

        store: Store = S3Store.from_url(text, **options)
        return store
    if "://" in text:
        raise InvalidInputError(f"unsupported store location {text!r}")
    return LocalStore(text, **options)
