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
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
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


@dataclass(frozen=True)
class Listed:
    """One key of a listing and its size."""

    key: str
    size: int


class S3Bucket:
    """The handful of S3 calls the backend makes, on one bucket, with errors translated.

    One boto3 client (thread-safe) and one thread pool are shared by every caller.
    """

    def __init__(self, client: Any, bucket: str, workers: int = DEFAULT_WORKERS) -> None:
        self.client = client
        self.bucket = bucket
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._botocore = _botocore()

    def errors(self, what: str) -> contextlib.AbstractContextManager[None]:
        """Context manager translating botocore errors for an operation on this bucket."""
        return translate_errors(what, self.bucket)

    def get(self, key: str, what: str, limit: int | None = None) -> tuple[bytes, str] | None:
        """``(body, etag)`` of a key, or None if absent; StorageError if longer than limit."""
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
            return data, str(response.get("ETag", ""))

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

    def delete(self, key: str, what: str) -> None:
        """Remove a key (no error if absent)."""
        with self.errors(what):
            self.client.delete_object(Bucket=self.bucket, Key=key)

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
                yield Listed(str(item["Key"]), int(item.get("Size", 0)))
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

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="cas-journal-s3")
            return self._pool

    def close(self) -> None:
        """Stop the worker threads."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


class OversizedBody(Exception):
    """A stored body is longer than the caller's limit (raised before reading it all)."""

    def __init__(self, size: int) -> None:
        self.size = size
        super().__init__(f"{size} bytes")
