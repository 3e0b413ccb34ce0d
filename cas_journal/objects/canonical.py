"""Canonical JSON and timestamps: the frozen wire format every structured object uses.

JSON, UTF-8, keys sorted by code point, no insignificant whitespace, no NaN or infinity.
Timestamps are UTC with exactly six fractional digits and a ``Z`` suffix.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from ..errors import InvalidInputError

_ENCODER = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
)


def canonical_json(value: Any) -> bytes:
    """Encode a JSON-compatible value canonically; raise InvalidInputError if it is not one."""
    try:
        return _ENCODER.encode(value).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            "text is not valid Unicode (lone surrogate); it cannot be stored as UTF-8"
        ) from exc
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"value is not JSON-compatible: {exc}") from exc


def parse_json(data: bytes) -> Any:
    """Parse JSON bytes; raise ValueError on anything malformed."""
    return json.loads(data)


def ensure_utc(moment: datetime) -> datetime:
    """Return the same instant as an aware UTC datetime; naive datetimes are refused."""
    if moment.tzinfo is None or moment.tzinfo.utcoffset(moment) is None:
        raise InvalidInputError(
            f"datetime {moment!r} has no timezone; pass an aware datetime (e.g. UTC)"
        )
    try:
        return moment.astimezone(UTC)
    except OverflowError as exc:
        raise InvalidInputError(f"datetime {moment!r} is out of range in UTC") from exc


def format_time(moment: datetime) -> str:
    """The canonical text of an instant: ``2026-01-02T03:04:05.000006Z``."""
    if moment.tzinfo is not UTC:
        moment = ensure_utc(moment)
    # isoformat pads the year to four digits and, with timespec, always writes micros;
    # the UTC offset it appends is always "+00:00" here
    return moment.isoformat(timespec="microseconds")[:-6] + "Z"


def parse_time(text: str) -> datetime:
    """Parse a canonical timestamp back into an aware UTC datetime (ValueError if malformed)."""
    if not isinstance(text, str) or len(text) != 27 or not text.endswith("Z"):
        raise ValueError(f"not a canonical timestamp: {text!r}")
    if text[4] != "-" or text[10] != "T" or text[19] != "." or not text[20:26].isdigit():
        raise ValueError(f"not a canonical timestamp: {text!r}")
    return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)


def utc_now() -> datetime:
    """The current instant, aware and in UTC."""
    return datetime.now(UTC)
