"""The S3 store: opening (or creating) a store under a bucket prefix, and its FORMAT key.

Opening reads ``<prefix>/FORMAT`` ("cas-journal <version>") and refuses newer versions,
like the local store. Creating refuses a prefix that already holds other keys, and writes
FORMAT with ``If-None-Match: *`` so two processes creating one store agree. Then, unless
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
FORMAT_VERSION = 1
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

    def _read_format(self) -> int | None:
        try:
            found = self.bucket.get(self.layout.format_key, f"opening store {self.url}", 256)
        except OversizedBody:
            raise StoreFormatError(f"{self.url} has an unreadable FORMAT key") from None
        if found is None:
            return None
        version = parse_format_record(found[0])
        if version is None:
            raise StoreFormatError(f"{self.url} has an unreadable FORMAT key: {found[0][:60]!r}")
        return version

    def _open(self, create: bool) -> None:
        version = self._read_format()
        if version is None:
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
                version = FORMAT_VERSION
            except PreconditionLost:  # another process created it first
                version = self._read_format()
        if version is not None and version > FORMAT_VERSION:
            raise StoreFormatError(
                f"store {self.url} has format {version}; this cas-journal reads up to "
                f"{FORMAT_VERSION}. Upgrade cas-journal to open it."
            )

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
