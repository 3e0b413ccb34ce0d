"""Open a store from a location string: a directory path, ``memory://`` or ``s3://...``.

The options are typed (``StoreOptions``): a type checker catches a misspelt option, and
at run time an unknown option, or one that does not apply to the location, is an
InvalidInputError naming the options that do.
"""

from __future__ import annotations

import os
from typing import Any, TypedDict, Unpack

from ..errors import InvalidInputError
from .base import Store


class StoreOptions(TypedDict, total=False):
    """Options of ``open_store`` and ``Journal.open``."""

    durable: bool
    """A commit survives power loss once acknowledged (default True); False: it survives
    a killed process, not power loss."""
    max_object_size: int
    """The largest object body accepted and read back, in bytes (default 64 MiB)."""
    create: bool
    """Create the store if it does not exist (default True)."""
    read_only: bool
    """Local stores only: open an existing store for reading; nothing is created, upgraded
    or written, and a write raises StorageError (default False). A store of an older
    format that must be upgraded first raises StoreUpgradeRequired."""
    endpoint_url: str | None
    """S3 only: the endpoint of an S3-compatible server (MinIO, R2, a local moto)."""
    region_name: str | None
    """S3 only: the bucket's region."""
    aws_access_key_id: str
    """S3 only: credentials (default: boto3's usual sources, e.g. ``AWS_*`` variables)."""
    aws_secret_access_key: str
    """S3 only: credentials."""
    aws_session_token: str
    """S3 only: credentials."""
    config: Any
    """S3 only: a ``botocore.config.Config`` merged over the store's own."""
    verify: bool | str
    """S3 only: TLS verification (False, or a CA bundle path)."""
    use_ssl: bool
    """S3 only: use TLS."""


LOCAL_OPTIONS = frozenset({"durable", "max_object_size", "create", "read_only"})
"""The options a local (directory) store takes."""
S3_OPTIONS = frozenset(StoreOptions.__annotations__) - {"read_only"}
"""The options an S3-compatible store takes."""


def check_options(options: dict[str, Any], allowed: frozenset[str], where: str) -> None:
    """InvalidInputError naming the valid options if ``options`` holds any other."""
    unknown = sorted(set(options) - allowed)
    if unknown:
        known = ", ".join(sorted(allowed)) or "none"
        which = "option" if len(unknown) == 1 else "options"
        raise InvalidInputError(
            f"unknown {which} {', '.join(unknown)} for {where}; valid options: {known}"
        )


def open_store(location: str | os.PathLike[str], **options: Unpack[StoreOptions]) -> Store:
    """Open (creating unless ``create=False``) the store at ``location``."""
    text = os.fspath(location)
    if text.startswith("memory://"):
        check_options(dict(options), frozenset(), "a memory store")
        from .memory import MemoryStore

        return MemoryStore()
    if text.startswith("s3://"):
        check_options(dict(options), S3_OPTIONS, "an S3 store")
        from .s3 import S3Store  # optional extra: boto3 is imported only here

        store: Store = S3Store.from_url(text, **options)
        return store
    if "://" in text:
        raise InvalidInputError(f"unsupported store location {text!r}")
    check_options(dict(options), LOCAL_OPTIONS, "a local store")
    from .local import LocalStore  # each backend is imported only when it is used

    return LocalStore(text, **options)  # type: ignore[misc]
