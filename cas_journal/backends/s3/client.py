"""The boto3 side of the S3 backend: client creation, error mapping, and a small bucket API.

boto3 is imported here, lazily, so ``import cas_journal`` never needs it. Every call goes
through ``S3Bucket``, which turns botocore failures into cas-journal errors with one-line
messages: a lost condition (412 PreconditionFailed, 409 ConditionalRequestConflict, or
404 for an ``If-Match`` on a vanished key) becomes ``PreconditionLost`` for the caller to
handle; anything else becomes ``StorageError``. Throttling and 5xx answers are retried by
botocore itself (``standard`` retry mode: exponential backoff with jitter, 1 s base for
throttling such as ``SlowDown``, 50 ms for 5xx and connection errors).
"""

from __future__ import annotations

import contextlib
import email.utils
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, TypeVar

from ...errors import StorageError

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_MAX_ATTEMPTS = 6
"""Attempts per request (the first plus five retries) unless AWS_MAX_ATTEMPTS says otherwise."""
DEFAULT_WORKERS = 16
"""Threads used for parallel HEADs, uploads and reflog reads."""
INSTALL_HINT = "the S3 backend needs boto3: pip install 'cas-journal[s3]'"

_LOADER: Any = None
_LOADER_LOCK = threading.Lock()

_NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound"})
_LOST = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})
_DENIED = frozenset(
    {
        "AccessDenied",
        "403",
        "Forbidden",
        "AllAccessDisabled",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
    }
)


class AccessDenied(StorageError):
    """The credentials may not do this (403 and friends)."""


class PreconditionLost(Exception):
    """A conditional write was refused: the key no longer is what the condition expected."""

    def __init__(self, code: str, retried: bool) -> None:
        self.code = code
        self.retried = retried
        """True if botocore sent the request more than once: an earlier attempt may have
        succeeded before the answer got lost, so the refusal may be our own write."""
        super().__init__(code)


def _botocore() -> Any:
    try:
        import botocore.exceptions
    except ImportError as exc:  # pragma: no cover - exercised by a test that hides boto3
        raise StorageError(INSTALL_HINT) from exc
    return botocore


def make_client(
    endpoint_url: str | None, region_name: str | None, pool_size: int, **client_options: Any
) -> Any:
    """A boto3 S3 client with retries and a connection pool sized for our worker threads.

    Credentials, region and endpoint fall back to boto3's usual sources (arguments, then
    ``AWS_*`` environment variables such as ``AWS_ENDPOINT_URL``, then config files).
    A ``config`` in ``client_options`` is merged over ours.
    """
    try:
        import boto3
        import botocore.session
        from botocore.config import Config
    except ImportError as exc:
        raise StorageError(INSTALL_HINT) from exc
    settings: dict[str, Any] = {"max_pool_connections": pool_size}
    if "AWS_RETRY_MODE" not in os.environ and "AWS_MAX_ATTEMPTS" not in os.environ:
        settings["retries"] = {"mode": "standard", "total_max_attempts": DEFAULT_MAX_ATTEMPTS}
    config = Config(**settings)
    user_config = client_options.pop("config", None)
    if user_config is not None:
        config = config.merge(user_config)
    with translate_errors("creating the S3 client", ""):
        # a fresh botocore session per client (credentials and AWS_* settings are read
        # now), sharing one loader so the S3 service model is parsed once per process
        core = botocore.session.get_session()
        core.register_component("data_loader", _shared_loader(core))
        session = boto3.session.Session(botocore_session=core)
        return session.client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region_name,
            config=config,
            **client_options,
        )


def _shared_loader(core: Any) -> Any:
    global _LOADER
    with _LOADER_LOCK:
        if _LOADER is None:
            _LOADER = core.get_component("data_loader")
        return _LOADER


def error_code(exc: BaseException) -> str:
    """The S3 error code of a botocore ClientError ("" for other exceptions)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return ""
    code = response.get("Error", {}).get("Code")
    if code:
        return str(code)
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return str(status or "")


def _retried(exc: BaseException) -> bool:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return False
    return int(response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0) > 0


def _one_line(text: object) -> str:
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line[:200]


def _urllib3_errors() -> type[Exception]:
    import urllib3.exceptions  # botocore's HTTP layer: present wherever botocore is

    error: type[Exception] = urllib3.exceptions.HTTPError
    return error


@contextlib.contextmanager
def translate_errors(what: str, bucket: str) -> Iterator[None]:
    """Turn botocore exceptions into StorageError with a one-line message."""
    botocore = _botocore()
    try:
        yield
    except botocore.exceptions.ClientError as exc:
        code = error_code(exc)
        if code == "NoSuchBucket":
            reason = f"bucket {bucket!r} does not exist"
        elif code in _DENIED:
            raise AccessDenied(f"{what} failed: access denied ({code})") from exc
        else:
            message = exc.response.get("Error", {}).get("Message") or ""
            reason = f"{code}: {_one_line(message)}" if message else code or _one_line(exc)
        raise StorageError(f"{what} failed: {reason}") from exc
    except botocore.exceptions.NoCredentialsError as exc:
        raise StorageError(f"{what} failed: no AWS credentials found") from exc
    except botocore.exceptions.EndpointConnectionError as exc:
        raise StorageError(f"{what} failed: {_one_line(exc)}") from exc
    except botocore.exceptions.BotoCoreError as exc:
        raise StorageError(f"{what} failed: {_one_line(exc)}") from exc
    except _urllib3_errors() as exc:
        # botocore reads the body of an error answer (and of every answer that is not a
        # stream, e.g. a listing) without wrapping a connection dropped meanwhile
        raise StorageError(f"{what} failed: connection broken: {_one_line(exc)}") from exc


@dataclass(frozen=True)
class Listed:
    """One key of a listing: its size, when it was last written (unix seconds, server
    clock) and its ETag."""

    key: str
    size: int
    modified: float = 0.0
    etag: str = ""


@dataclass(frozen=True)
class Fetched:
    """A key's body, ETag and the server's clock when it answered (unix seconds)."""

    body: bytes
    etag: str
    server_time: float


class RequestStats:
    """Requests sent by one bucket handle, by S3 operation, and the bytes they moved.

    Counted at the HTTP layer (botocore's ``before-send`` event), so retries count;
    ``bytes_received`` counts response bodies read by this module. Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_operation: Counter[str] = Counter()
        self.bytes_sent = 0
        self.bytes_received = 0

    @property
    def total(self) -> int:
        """Requests sent so far."""
        with self._lock:
            return sum(self.by_operation.values())

    def snapshot(self) -> dict[str, int]:
        """A copy of the counters: one per operation plus ``bytes_sent`` and
        ``bytes_received``."""
        with self._lock:
            return {
                **self.by_operation,
                "bytes_sent": self.bytes_sent,
                "bytes_received": self.bytes_received,
            }

    def sent(self, operation: str, body_size: int) -> None:
        """Record one request."""
        with self._lock:
            self.by_operation[operation] += 1
            self.bytes_sent += body_size

    def received(self, size: int) -> None:
        """Record response body bytes."""
        with self._lock:
            self.bytes_received += size


def _body_size(body: Any) -> int:
    if body is None:
        return 0
    if isinstance(body, bytes | bytearray | memoryview):
        return len(body)
    seek, tell = getattr(body, "seek", None), getattr(body, "tell", None)
    if callable(seek) and callable(tell):  # a stream botocore made of the bytes given
        try:
            here = int(tell())
            seek(0, 2)
            end = int(tell())
            seek(here)
            return end - here
        except (OSError, ValueError, TypeError):
            return 0
    try:
        return len(body)
    except TypeError:
        return 0


def server_time(response: dict[str, Any]) -> float:
    """The server's clock from a response's Date header (now, if it has none)."""
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}) or {}
    text = headers.get("date")
    if text:
        try:
            return email.utils.parsedate_to_datetime(str(text)).timestamp()
        except (TypeError, ValueError):
            pass
    return time.time()


class S3Bucket:
    """The handful of S3 calls the backend makes, on one bucket, with errors translated.

    One boto3 client (thread-safe) and one thread pool are shared by every caller.
    """

    def __init__(self, client: Any, bucket: str, workers: int = DEFAULT_WORKERS) -> None:
        self.client = client
        self.bucket = bucket
        self.workers = workers
        self.stats = RequestStats()
        self._pool: ThreadPoolExecutor | None = None
        self._upload_pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._botocore = _botocore()
        events = getattr(getattr(client, "meta", None), "events", None)
        if events is not None:
            events.register("before-send.s3.*", self._count_request)

    def _count_request(self, **kwargs: Any) -> None:
        operation = str(kwargs.get("event_name", "")).rsplit(".", 1)[-1]
        request = kwargs.get("request")
        self.stats.sent(operation, _body_size(getattr(request, "body", None)))

    def errors(self, what: str) -> contextlib.AbstractContextManager[None]:
        """Context manager translating botocore errors for an operation on this bucket."""
        return translate_errors(what, self.bucket)

    def get(self, key: str, what: str, limit: int | None = None) -> tuple[bytes, str] | None:
        """``(body, etag)`` of a key, or None if absent; StorageError if longer than limit."""
        found = self.fetch(key, what, limit)
        return None if found is None else (found.body, found.etag)

    def fetch(self, key: str, what: str, limit: int | None = None) -> Fetched | None:
        """A key's body, ETag and the server's time, or None if absent (see ``get``)."""
        with self.errors(what):
            try:
                response = self.client.get_object(Bucket=self.bucket, Key=key)
            except self._botocore.exceptions.ClientError as exc:
                if error_code(exc) in _NOT_FOUND:
                    return None
                raise
            body = response["Body"]
            try:
                size = int(response.get("ContentLength", 0) or 0)
                if limit is not None and size > limit:
                    raise OversizedBody(size)
                data: bytes = body.read() if limit is None else body.read(limit + 1)
            finally:
                body.close()
            if limit is not None and len(data) > limit:
                raise OversizedBody(len(data))
            self.stats.received(len(data))
            return Fetched(data, str(response.get("ETag", "")), server_time(response))

    def get_range(self, key: str, start: int, length: int, what: str) -> bytes | None:
        """``length`` bytes of a key from ``start`` (fewer at its end), or None if the key
        is absent. One ranged GET."""
        if length <= 0:
            return b""
        with self.errors(what):
            try:
                response = self.client.get_object(
                    Bucket=self.bucket, Key=key, Range=f"bytes={start}-{start + length - 1}"
                )
            except self._botocore.exceptions.ClientError as exc:
                code = error_code(exc)
                if code in _NOT_FOUND:
                    return None
                if code in ("InvalidRange", "416"):
                    return b""
                raise
            body = response["Body"]
            try:
                data: bytes = body.read(length + 1)
            finally:
                body.close()
            self.stats.received(len(data))
            return data[:length]

    def exists(self, key: str, what: str) -> bool:
        """True if the key exists (a HEAD request)."""
        with self.errors(what):
            try:
                self.client.head_object(Bucket=self.bucket, Key=key)
            except self._botocore.exceptions.ClientError as exc:
                if error_code(exc) in _NOT_FOUND:
                    return False
                raise
            return True

    def stat(self, key: str, what: str) -> tuple[int, int] | None:
        """``(size, last modified in unix seconds)`` of a key, or None if absent."""
        with self.errors(what):
            try:
                response = self.client.head_object(Bucket=self.bucket, Key=key)
            except self._botocore.exceptions.ClientError as exc:
                if error_code(exc) in _NOT_FOUND:
                    return None
                raise
            modified = response.get("LastModified")
            when = int(modified.timestamp()) if modified is not None else 0
            return int(response.get("ContentLength", 0) or 0), when

    def put(
        self,
        key: str,
        body: bytes,
        what: str,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        """Write a key, optionally only if it holds ``if_match`` / does not exist; return
        the new ETag. Raises PreconditionLost if the condition does not hold."""
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "Body": body}
        if if_match is not None:
            args["IfMatch"] = if_match
        if if_none_match:
            args["IfNoneMatch"] = "*"
        conditional = if_match is not None or if_none_match
        with self.errors(what):
            try:
                response = self.client.put_object(**args)
            except self._botocore.exceptions.ClientError as exc:
                code = error_code(exc)
                if conditional and (code in _LOST or (if_match and code in _NOT_FOUND)):
                    raise PreconditionLost(code, _retried(exc)) from exc
                raise
            return str(response.get("ETag", ""))

    def delete(self, key: str, what: str, *, if_match: str | None = None) -> None:
        """Remove a key (no error if absent). With ``if_match``, only if it still holds
        that ETag: PreconditionLost otherwise (servers that honour conditional deletes:
        see ``S3Store.conditional_deletes``)."""
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if if_match is not None:
            args["IfMatch"] = if_match
        with self.errors(what):
            try:
                self.client.delete_object(**args)
            except self._botocore.exceptions.ClientError as exc:
                code = error_code(exc)
                if if_match is not None and (code in _LOST or code in _NOT_FOUND):
                    raise PreconditionLost(code, _retried(exc)) from exc
                raise

    def abort_uploads(self, prefix: str, older_than: float) -> int:
        """Abort multipart uploads under ``prefix`` started before ``older_than`` (unix
        seconds): parts of killed writers, which S3 keeps (and bills) until aborted."""
        aborted = 0
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        while True:
            with self.errors("listing multipart uploads"):
                response = self.client.list_multipart_uploads(**args)
            for upload in response.get("Uploads") or []:
                started = upload.get("Initiated")
                if started is not None and started.timestamp() >= older_than:
                    continue
                with (
                    self.errors("aborting a multipart upload"),
                    contextlib.suppress(self._botocore.exceptions.ClientError),
                ):
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                    aborted += 1
            if not response.get("IsTruncated"):
                return aborted
            args["KeyMarker"] = response.get("NextKeyMarker")
            args["UploadIdMarker"] = response.get("NextUploadIdMarker")

    def upload(self, key: str, parts: Iterable[bytes], what: str) -> int:
        """Store the concatenation of ``parts`` under ``key``: one PutObject when it is
        small, else a multipart upload whose parts go out on the worker threads as they
        come (at most ``workers`` parts in flight). Returns the bytes written."""
        return MultipartWriter(self, key, what).write_all(parts)

    def delete_many(self, keys: Iterable[str], what: str) -> None:
        """Remove keys, up to 1,000 per request; raise StorageError if any was refused."""
        batch: list[str] = []
        for key in keys:
            batch.append(key)
            if len(batch) == 1000:
                self._delete_batch(batch, what)
                batch = []
        if batch:
            self._delete_batch(batch, what)

    def _delete_batch(self, keys: list[str], what: str) -> None:
        with self.errors(what):
            response = self.client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": key} for key in keys], "Quiet": True},
            )
        errors = response.get("Errors") or []
        if errors:
            first = errors[0]
            raise StorageError(
                f"{what} failed: {len(errors)} key(s) not deleted, first {first.get('Key')!r}: "
                f"{first.get('Code')}"
            )

    def list_keys(
        self, prefix: str, what: str, start_after: str | None = None, page_size: int = 1000
    ) -> Iterator[Listed]:
        """Every key under ``prefix`` (after ``start_after``), in key order, page by page."""
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": page_size}
        if start_after is not None:
            args["StartAfter"] = start_after
        while True:
            with self.errors(what):
                response = self.client.list_objects_v2(**args)
            for item in response.get("Contents") or []:
                modified = item.get("LastModified")
                yield Listed(
                    str(item["Key"]),
                    int(item.get("Size", 0)),
                    modified.timestamp() if modified is not None else 0.0,
                    str(item.get("ETag", "")),
                )
            token = response.get("NextContinuationToken")
            if not response.get("IsTruncated") or not token:
                return
            args["ContinuationToken"] = token

    def list_dirs(self, prefix: str, what: str) -> Iterator[str]:
        """The distinct ``<prefix>.../`` "directories" right below ``prefix``, in key order."""
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "Delimiter": "/"}
        while True:
            with self.errors(what):
                response = self.client.list_objects_v2(**args)
            for item in response.get("CommonPrefixes") or []:
                yield str(item["Prefix"])
            token = response.get("NextContinuationToken")
            if not response.get("IsTruncated") or not token:
                return
            args["ContinuationToken"] = token

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``[fn(item) ...]`` run on the worker threads, in order; the first error is raised."""
        work = list(items)
        if len(work) <= 1:
            return [fn(item) for item in work]
        return list(self._executor().map(fn, work))

    def upload_executor(self) -> ThreadPoolExecutor:
        """Threads for multipart parts, apart from ``map``'s (a task running on those may
        stream an upload and wait for its parts)."""
        with self._pool_lock:
            if self._upload_pool is None:
                self._upload_pool = ThreadPoolExecutor(
                    PARTS_IN_FLIGHT * 2, thread_name_prefix="cas-journal-s3-upload"
                )
            return self._upload_pool

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="cas-journal-s3")
            return self._pool

    def close(self) -> None:
        """Stop the worker threads."""
        with self._pool_lock:
            pools = [self._pool, self._upload_pool]
            self._pool = self._upload_pool = None
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=True)


PART_SIZE = 8 * 1024 * 1024
"""Bytes per part of a multipart upload (S3 needs at least 5 MiB for all but the last)."""
PARTS_IN_FLIGHT = 4
"""Parts of one upload being sent at once; what is buffered is bounded by this."""


class MultipartWriter:
    """Streams one key's body to S3: buffered up to ``PART_SIZE``, then sent as parts of a
    multipart upload, ``PARTS_IN_FLIGHT`` at a time, on the bucket's upload threads.

    A body that never reaches ``PART_SIZE`` is one plain PutObject. Nothing is visible
    under the key before ``finish`` returns; ``abort`` (or an error in ``finish``)
    cancels the upload, so a killed writer leaves at most an incomplete multipart upload
    that the bucket's lifecycle rule (or ``S3Store.abort_stale_uploads``) removes.
    """

    def __init__(self, bucket: S3Bucket, key: str, what: str) -> None:
        self.bucket = bucket
        self.key = key
        self.what = what
        self.size = 0
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._parts: list[tuple[int, Future[str]]] = []

    def write(self, data: bytes) -> None:
        """Append ``data`` to the body."""
        self._buffer += data
        self.size += len(data)
        while len(self._buffer) >= PART_SIZE:
            part = bytes(self._buffer[:PART_SIZE])
            del self._buffer[:PART_SIZE]
            self._send_part(part)

    def _send_part(self, part: bytes) -> None:
        client, name = self.bucket.client, self.bucket.bucket
        if self._upload_id is None:
            with self.bucket.errors(self.what):
                created = client.create_multipart_upload(Bucket=name, Key=self.key)
            self._upload_id = str(created["UploadId"])
        upload_id = self._upload_id
        number = len(self._parts) + 1

        def send() -> str:
            with self.bucket.errors(self.what):
                answer = client.upload_part(
                    Bucket=name, Key=self.key, UploadId=upload_id, PartNumber=number, Body=part
                )
            return str(answer["ETag"])

        in_flight = [future for _, future in self._parts if not future.done()]
        if len(in_flight) >= PARTS_IN_FLIGHT:
            wait(in_flight, return_when=FIRST_COMPLETED)
        self._parts.append((number, self.bucket.upload_executor().submit(send)))

    def finish(self) -> int:
        """Make the body visible under the key; returns its size."""
        try:
            if self._upload_id is None:
                self.bucket.put(self.key, bytes(self._buffer), self.what)
                return self.size
            if self._buffer:
                self._send_part(bytes(self._buffer))
                self._buffer.clear()
            parts = [{"PartNumber": n, "ETag": future.result()} for n, future in self._parts]
            with self.bucket.errors(self.what):
                self.bucket.client.complete_multipart_upload(
                    Bucket=self.bucket.bucket,
                    Key=self.key,
                    UploadId=self._upload_id,
                    MultipartUpload={"Parts": parts},
                )
            return self.size
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Cancel the upload (best effort); nothing becomes visible."""
        upload_id, self._upload_id = self._upload_id, None
        for _, future in self._parts:
            future.cancel()
        if upload_id is None:
            return
        with contextlib.suppress(Exception):
            wait([future for _, future in self._parts])
            self.bucket.client.abort_multipart_upload(
                Bucket=self.bucket.bucket, Key=self.key, UploadId=upload_id
            )

    def write_all(self, parts: Iterable[bytes]) -> int:
        """Write every part, then ``finish``."""
        try:
            for part in parts:
                self.write(part)
        except BaseException:
            self.abort()
            raise
        return self.finish()


class OversizedBody(Exception):
    """A stored body is longer than the caller's limit (raised before reading it all)."""

    def __init__(self, size: int) -> None:
        self.size = size
        super().__init__(f"{size} bytes")
