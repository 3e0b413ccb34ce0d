"""Canonical JSON and timestamps: the frozen wire format every structured object uses.

JSON, UTF-8, keys sorted by code point, no insignificant whitespace, no NaN or infinity.
Timestamps are UTC with exactly six fractional digits and a ``Z`` suffix.

The reference encoding is the standard library's ``json`` with fixed settings. When
orjson is installed (the ``fast`` extra) it encodes and parses instead wherever its
output is the same, which is every value built only of str, int, bool, None, lists,
tuples and str-keyed dicts: floats (whose text differs: ``1e16`` against ``1e+16``) and
any other type go to the reference encoder, and so does anything orjson refuses (ints
beyond 64 bits, lone surrogates, deep nesting), so the reference decides what is
refused. Parsing falls back to ``json`` when orjson refuses the text or returns a
float, because orjson reads an integer beyond 64 bits as a float. The test suite
compares both paths on random values.
"""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

from ..errors import InvalidInputError

_ENCODER = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
)


_fast: ModuleType | bool | None = None
"""orjson once looked up (imported on first use: the core import stays light), False if
it is not installed."""


def _fast_json() -> ModuleType | None:
    global _fast
    if _fast is None:
        try:
            import orjson  # optional: the "fast" extra
        except ImportError:
            _fast = False
        else:
            _fast = orjson
    return _fast if isinstance(_fast, ModuleType) else None


_PLAIN_SCALARS = frozenset({str, int, bool, type(None)})


def is_plain(value: Any) -> bool:
    """True if ``value`` holds only str, int, bool, None, lists, tuples and str-keyed
    dicts: the values on which orjson writes exactly the reference encoding."""
    kind = type(value)
    if kind in _PLAIN_SCALARS:
        return True
    pending = [value]
    while pending:
        current = pending.pop()
        kind = type(current)
        if kind is dict:
            for key, item in current.items():
                if type(key) is not str:
                    return False
                if type(item) not in _PLAIN_SCALARS:
                    pending.append(item)
        elif kind is list or kind is tuple:
            for item in current:
                if type(item) not in _PLAIN_SCALARS:
                    pending.append(item)
        elif kind not in _PLAIN_SCALARS:
            return False
    return True


def reference_json(value: Any) -> bytes:
    """The reference canonical encoding (standard library ``json``); InvalidInputError
    if the value is not JSON-compatible."""
    try:
        return _ENCODER.encode(value).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            "text is not valid Unicode (lone surrogate); it cannot be stored as UTF-8"
        ) from exc
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"value is not JSON-compatible: {exc}") from exc


def canonical_json(value: Any) -> bytes:
    """Encode a JSON-compatible value canonically; raise InvalidInputError if it is not one."""
    fast = _fast_json()
    if fast is not None and is_plain(value):
        try:
            encoded: bytes = fast.dumps(value, option=fast.OPT_SORT_KEYS)
            return encoded
        except TypeError:  # orjson.JSONEncodeError
            pass  # an int beyond 64 bits, a lone surrogate, deep nesting: the reference decides
    return reference_json(value)


def canonical_json_of_plain(value: Any) -> bytes:
    """``canonical_json`` of a value the caller has already walked and found plain: only
    str, int within 64 bits, bool, None, lists, tuples and str-keyed dicts, no float (the
    walk ``canonical_json`` makes to check that is skipped)."""
    fast = _fast_json()
    if fast is not None:
        try:
            encoded: bytes = fast.dumps(value, option=fast.OPT_SORT_KEYS)
            return encoded
        except TypeError:  # a lone surrogate, deep nesting: the reference decides
            pass
    return reference_json(value)


def _has_float(value: Any) -> bool:
    """True if a parsed JSON value holds a float (runs once per parse: a tight loop)."""
    kind = type(value)
    if kind is float:
        return True
    if kind is not dict and kind is not list:
        return False
    pending = [value]
    pop, push = pending.pop, pending.append
    while pending:
        current = pop()
        for item in current.values() if type(current) is dict else current:
            kind = type(item)
            if kind is str:  # most leaves of a message: one test, then the next item
                continue
            if kind is float:
                return True
            if kind is dict or kind is list:
                push(item)
    return False


def parse_json(data: bytes | str, long_ints: bool = True) -> Any:
    """Parse JSON; raise ValueError on anything malformed (RecursionError if absurdly
    deep). The result is what the standard library's ``json.loads`` gives.

    ``long_ints=False`` promises that the text holds no integer beyond 64 bits (the
    caller knows it, e.g. from when it encoded the text), which spares a scan.
    """
    # (``_fast_json`` is called only until orjson is found: a parse runs per payload read)
    fast = _fast if isinstance(_fast, ModuleType) else _fast_json()
    if fast is not None:
        try:
            value = fast.loads(data)
        except ValueError:  # orjson.JSONDecodeError
            pass  # the standard parser decides (it accepts a few things orjson does not)
        else:
            if not long_ints or not _has_float(value):
                return value
    return json.loads(data)


_DIGIT_MARKS = bytes(48 if 48 <= byte <= 57 else 32 for byte in range(256))
"""Maps every digit to ``0`` and every other byte to a space (for ``bytes.translate``)."""
_LONG_INTEGER_DIGITS = b"0" * 19
"""Nineteen digits in a row: the text may hold an integer beyond 64 bits (2**63 has 19
digits; any integer below 10**18 has fewer)."""


def parse_json_exact(data: bytes) -> Any:
    """``parse_json(data)`` for a text of unknown origin (what ``json.loads`` gives), with
    the scan of the parsed value for floats (how a long integer read by orjson shows)
    replaced by checks at C speed:

    * the text is orjson's own canonical writing of what orjson read from it (what the
      journal writes for messages without floats): then the standard parser reads the
      same, since orjson's writing reads back exactly and a long integer read as a float
      would have been written as a float, not as the text's digits;
    * else, the text holds no 19 digits in a row, so no integer beyond 64 bits (a search
      of the text with every digit mapped to one byte; a regular expression took ten
      times longer);
    * else the standard parser reads it.
    """
    fast = _fast if isinstance(_fast, ModuleType) else _fast_json()  # (see ``parse_json``)
    if fast is not None:
        try:
            value = fast.loads(data)
        except ValueError:  # orjson.JSONDecodeError: the standard parser decides
            pass
        else:
            try:
                if fast.dumps(value, option=fast.OPT_SORT_KEYS) == data:
                    return value
            except TypeError:  # orjson.JSONEncodeError (nested too deeply to write)
                pass
            if _LONG_INTEGER_DIGITS not in data.translate(_DIGIT_MARKS):
                return value
    return json.loads(data)


def ensure_utc(moment: datetime) -> datetime:
    """Return the same instant as an aware UTC datetime; naive datetimes are refused."""
    if moment.tzinfo is UTC:
        return moment
    if moment.tzinfo is None or moment.tzinfo.utcoffset(moment) is None:
        raise InvalidInputError(
            f"datetime {moment!r} has no timezone; pass an aware datetime (e.g. UTC)"
        )
    try:
        return moment.astimezone(UTC)
    except OverflowError as exc:
        raise InvalidInputError(f"datetime {moment!r} is out of range in UTC") from exc


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND_TEXTS: dict[int, str] = {}
"""``YYYY-MM-DDTHH:MM:SS.`` by whole seconds since the epoch, of instants ``format_time``
wrote lately (at most ``SECOND_TEXTS`` of them)."""
SECOND_TEXTS = 4096
_THREE_DIGITS = [f"{number:03d}" for number in range(1000)]


def format_time(moment: datetime) -> str:
    """The canonical text of an instant: ``2026-01-02T03:04:05.000006Z``.

    ``isoformat`` costs about 12,000 instructions (it writes through printf; once per
    appended entry): the text of the whole second is written once and kept, and the
    microseconds are looked up by thousands. ``reference_time_text`` is the reference
    (a property test compares the two); a subclass of datetime goes there."""
    if moment.tzinfo is not UTC:
        moment = ensure_utc(moment)
    if type(moment) is not datetime:
        return reference_time_text(moment)
    delta = moment - _EPOCH  # (the same tzinfo: no offsets looked at)
    second = delta.days * 86400 + delta.seconds
    prefix = _SECOND_TEXTS.get(second)
    if prefix is None:  # a second not seen lately: its one isoformat call gives the text
        text = moment.isoformat()
        if len(_SECOND_TEXTS) >= SECOND_TEXTS:
            _SECOND_TEXTS.clear()
        _SECOND_TEXTS[second] = text[:19] + "."  # the date and the time to the second
        return text[:-6] + "Z" if moment.microsecond else text[:-6] + ".000000Z"
    micros = delta.microseconds
    return f"{prefix}{_THREE_DIGITS[micros // 1000]}{_THREE_DIGITS[micros % 1000]}Z"


def reference_time_text(moment: datetime) -> str:
    """``format_time`` of an aware UTC datetime, through ``isoformat``: it pads the year
    to four digits and writes the micros unless they are zero (its timespec argument
    would always write them, at a third more cost); the UTC offset it appends is always
    "+00:00" here."""
    if moment.microsecond:
        return moment.isoformat()[:-6] + "Z"
    return moment.isoformat()[:-6] + ".000000Z"


@functools.lru_cache(maxsize=8192)
def _parse_time(text: str) -> datetime:
    if len(text) != 27 or not text.endswith("Z"):
        raise ValueError(f"not a canonical timestamp: {text!r}")
    if text[4] != "-" or text[10] != "T" or text[19] != "." or not text[20:26].isdigit():
        raise ValueError(f"not a canonical timestamp: {text!r}")
    return datetime.fromisoformat(text)  # "Z": tzinfo is UTC itself


def parse_time(text: str) -> datetime:
    """Parse a canonical timestamp back into an aware UTC datetime (ValueError if malformed).

    Recently parsed texts are remembered (a node's time is checked when it is read and
    turned into a datetime when its entry is built; datetimes are immutable)."""
    if not isinstance(text, str):
        raise ValueError(f"not a canonical timestamp: {text!r}")
    return _parse_time(text)


def is_canonical_time(value: object) -> bool:
    """True if ``value`` is a canonical timestamp (see ``parse_time``)."""
    try:
        parse_time(value)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return False
    return True


def utc_now() -> datetime:
    """The current instant, aware and in UTC."""
    return datetime.now(UTC)
