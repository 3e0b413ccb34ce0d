"""The S3 store: opening (or creating) a store under a bucket prefix, and its FORMAT key.

Opening reads ``<prefix>/FORMAT`` ("cas-journal <version>") and refuses newer versions,
like the local store. Format 2 differs from format 1 only in what it may hold: objects of
kind ``segment``, which format-1 code does not know. Opening a format-1 store upgrades it:
its FORMAT is rewritten with ``If-Match`` the ETag just read (nothing else changes), so
of two upgraders one wins and the other finds format 2; with read-only credentials the
rewrite is refused and the store is read as it is (a format-1 store holds no new kind).

Creating refuses a prefix that already holds other keys, and writes FORMAT with
``If-None-Match: *`` so two processes creating one store agree. Then, unless
``check_conditional_writes=False``, two conditional writes to FORMAT that must fail
(``If-None-Match: *`` and a wrong ``If-Match``) prove the server enforces conditions: a
server that silently ignores them would turn every ref compare-and-swap into a blind
overwrite, so such a server is refused with a clear error. With read-only credentials
the check is skipped (nothing can be overwritten anyway).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from ...errors import InvalidInputError, StorageError, StoreFormatError
from ...objects import DEFAULT_MAX_OBJECT_SIZE, ObjectCodec
from ..base import Capabilities, Store, parse_format_record
from .client import (
    DEFAULT_WORKERS,
    AccessDenied,
    OversizedBody,
    PreconditionLost,
    S3Bucket,
    make_client,
)
from .copies import S3StoredCopies
from .keys import Layout
from .objects import S3ObjectStore
from .refs import S3RefStore

FORMAT_NAME = "cas-journal"
FORMAT_VERSION = 2
"""The bucket format this code writes: format 2 may hold objects of kind ``segment``."""
_WRONG_ETAG = '"00000000000000000000000000000000"'


def parse_s3_url(url: str) -> tuple[str, str]:
    """``("bucket", "prefix")`` from ``s3://bucket/prefix``; InvalidInputError if malformed."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
        raise InvalidInputError(f"expected s3://bucket/prefix, got {url!r}")
    return parts.netloc, parts.path.strip("/")


class S3Store(Store):
    """A store in an S3-compatible bucket (AWS S3, MinIO, R2, ...), under a key prefix.

    Objects live in packs listed by a manifest plus loose keys (``objects``); pack, gc
    and fsck work through ``stored_copies``, and gc deletes in two phases (condemned
    packs, see ``backends.condemned``) so it is safe while other clients write.

    ``client`` may be a ready boto3 S3 client; otherwise one is made from
    ``endpoint_url``, ``region_name`` and ``client_options`` (passed to
    ``boto3.client``), falling back to the standard ``AWS_*`` environment variables.
    ``durable`` is accepted for symmetry: an acknowledged S3 PUT is already durable.
    """

    capabilities = Capabilities(object_times=True, stored_copies=True, condemns_packs=True)
    format_version: int
    """The store's format once open: ``FORMAT_VERSION``, or format 1 read as it is with
    credentials that may not upgrade it."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any = None,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        durable: bool = True,
        max_object_size: int = DEFAULT_MAX_OBJECT_SIZE,
        create: bool = True,
        workers: int = DEFAULT_WORKERS,
        check_conditional_writes: bool = True,
        **client_options: Any,
    ) -> None:
        if not bucket:
            raise InvalidInputError("an S3 store needs a bucket name")
        self.layout = Layout(prefix)
        self.durable = durable
        self.url = f"s3://{bucket}/{self.layout.prefix}" if self.layout.prefix else f"s3://{bucket}"
        self._owns_client = client is None
        if client is None:
            client = make_client(endpoint_url, region_name, workers + 4, **client_options)
        self.bucket = S3Bucket(client, bucket, workers)
        try:
            self._open(create)
            if check_conditional_writes:
                self._check_conditional_writes()
        except BaseException:
            self.close()
            raise
        codec = ObjectCodec(max_object_size=max_object_size)
        self.objects: S3ObjectStore = S3ObjectStore(self.bucket, self.layout, codec)
        self.refs: S3RefStore = S3RefStore(self.bucket, self.layout)
        self.stored_copies: S3StoredCopies = S3StoredCopies(self.objects)

    @classmethod
    def from_url(
        cls,
        url: str,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        durable: bool = True,
        max_object_size: int = DEFAULT_MAX_OBJECT_SIZE,
        create: bool = True,
        **client_options: Any,
    ) -> S3Store:
        """Open (creating unless ``create=False``) the store at ``s3://bucket/prefix``."""
        bucket, prefix = parse_s3_url(url)
        return cls(
            bucket,
            prefix,
            endpoint_url=endpoint_url,
            region_name=region_name,
            durable=durable,
            max_object_size=max_object_size,
            create=create,
            **client_options,
        )

    def _format_text(self) -> bytes:
        return f"{FORMAT_NAME} {FORMAT_VERSION}\n".encode()

    def _read_format(self) -> tuple[int, str] | None:
        """``(version, etag)`` of the FORMAT key, or None if there is none."""
        try:
            found = self.bucket.get(self.layout.format_key, f"opening store {self.url}", 256)
        except OversizedBody:
            raise StoreFormatError(f"{self.url} has an unreadable FORMAT key") from None
        if found is None:
            return None
        version = parse_format_record(found[0])
        if version is None:
            raise StoreFormatError(f"{self.url} has an unreadable FORMAT key: {found[0][:60]!r}")
        return version, found[1]

    def _refuse_newer(self, version: int) -> None:
        if version > FORMAT_VERSION:
            raise StoreFormatError(
                f"store {self.url} has format {version}; this cas-journal reads up to "
                f"{FORMAT_VERSION}. Upgrade cas-journal to open it."
            )

    def _upgrade(self, version: int, etag: str) -> int:
        """Rewrite an older FORMAT (``If-Match`` its ETag); the version found afterwards.
        Losing to another upgrader is fine; read-only credentials keep the old version."""
        try:
            self.bucket.put(
                self.layout.format_key,
                self._format_text(),
                f"upgrading store {self.url} to format {FORMAT_VERSION}",
                if_match=etag,
            )
            return FORMAT_VERSION
        except AccessDenied:
            return version  # read-only credentials: read it as it is
        except PreconditionLost:
            pass  # changed since we read it (another upgrader): read it again
        found = self._read_format()
        if found is None:
            raise StoreFormatError(f"{self.url} lost its FORMAT key while being upgraded")
        self._refuse_newer(found[0])
        return found[0]

    def _open(self, create: bool) -> None:
        found = self._read_format()
        if found is None:
            if not create:
                raise StoreFormatError(
                    f"no cas-journal store at {self.url} (create one with 'cas-journal init')"
                )
            if any(self.bucket.list_keys(self.layout.base, f"opening store {self.url}", None, 1)):
                raise StoreFormatError(f"{self.url} is not empty and holds no cas-journal store")
            try:
                self.bucket.put(
                    self.layout.format_key,
                    self._format_text(),
                    f"creating store {self.url}",
                    if_none_match=True,
                )
                self.format_version = FORMAT_VERSION
                return
            except PreconditionLost:  # another process created it first
                found = self._read_format()
                if found is None:
                    raise StoreFormatError(
                        f"{self.url} lost its FORMAT key while created"
                    ) from None
        version, etag = found
        self._refuse_newer(version)
        if version < FORMAT_VERSION:
            version = self._upgrade(version, etag)
        self.format_version = version

    def _check_conditional_writes(self) -> None:
        key, what = self.layout.format_key, f"checking conditional writes on {self.url}"
        probes = (("If-None-Match", None, True), ("If-Match", _WRONG_ETAG, False))
        for header, if_match, if_none_match in probes:
            try:
                self.bucket.put(
                    key, self._format_text(), what, if_match=if_match, if_none_match=if_none_match
                )
            except PreconditionLost:
                continue
            except AccessDenied:
                return  # read-only credentials: no ref can be written, blind or not
            raise StorageError(
                f"{self.url}: the server ignored an {header} condition on PutObject; refs "
                "need conditional writes (AWS S3 since 2024, MinIO, R2 ...)"
            )

    def close(self) -> None:
        """Stop worker threads and close the client's connections."""
        self.bucket.close()
        if self._owns_client:
            closer = getattr(self.bucket.client, "close", None)
            if callable(closer):
                closer()
