"""A strict structural check of plain values against an SDK's own TypedDict types.

pydantic validates ``Iterable[...]`` fields lazily and its serializer turns nested
errors into warnings, so it would pass malformed content blocks. This walks the value
against the type hints instead: every required key present, no key the TypedDict does
not declare, literals equal, unions matched by at least one member, iterables checked
element by element.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any, Literal, NotRequired, Required, Union

import typing_extensions


class Mismatch(AssertionError):
    """The value does not have the type."""


def _is_typed_dict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def check(value: Any, tp: Any, where: str = "value") -> None:
    """Raise Mismatch (naming the place) unless ``value`` has type ``tp``."""
    origin = typing.get_origin(tp)
    if tp is Any or tp is object:
        return
    if isinstance(tp, typing.TypeAliasType if hasattr(typing, "TypeAliasType") else ()):
        return check(value, tp.__value__, where)
    if origin in (Required, NotRequired, typing_extensions.Required, typing_extensions.NotRequired):
        return check(value, typing.get_args(tp)[0], where)
    if origin is typing.Annotated:
        return check(value, typing.get_args(tp)[0], where)
    if origin in (Union, types.UnionType):
        errors = []
        for option in typing.get_args(tp):
            try:
                check(value, option, where)
                return
            except Mismatch as exc:
                errors.append(str(exc))
        raise Mismatch(f"{where}: matches no member of {tp}: {errors[:4]}")
    if origin in (Literal, typing_extensions.Literal):
        if value not in typing.get_args(tp):
            raise Mismatch(f"{where}: {value!r} is not one of {typing.get_args(tp)}")
        return
    if tp is type(None):
        if value is not None:
            raise Mismatch(f"{where}: expected None")
        return
    if _is_typed_dict(tp):
        if not isinstance(value, dict):
            raise Mismatch(f"{where}: expected a {tp.__name__} dict, got {type(value).__name__}")
        hints = typing.get_type_hints(tp, include_extras=True)
        missing = set(tp.__required_keys__) - set(value)
        extra = set(value) - set(hints)
        if missing or extra:
            raise Mismatch(
                f"{where}: {tp.__name__} missing {missing or '{}'}, extra {extra or '{}'}"
            )
        for key, item in value.items():
            check(item, hints[key], f"{where}.{key}")
        return
    if origin in (list, collections.abc.Iterable, collections.abc.Sequence, typing.Iterable):
        if not isinstance(value, list):
            raise Mismatch(f"{where}: expected a list, got {type(value).__name__}")
        (item_type,) = typing.get_args(tp) or (Any,)
        for i, item in enumerate(value):
            check(item, item_type, f"{where}[{i}]")
        return
    if origin in (dict, collections.abc.Mapping):
        if not isinstance(value, dict):
            raise Mismatch(f"{where}: expected a dict")
        key_type, item_type = typing.get_args(tp) or (Any, Any)
        for key, item in value.items():
            check(key, key_type, f"{where} key")
            check(item, item_type, f"{where}[{key!r}]")
        return
    if tp is float:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise Mismatch(f"{where}: expected a number")
        return
    if isinstance(tp, type):
        if tp in (int, str) and isinstance(value, bool):
            raise Mismatch(f"{where}: expected {tp.__name__}, got bool")
        if not isinstance(value, tp):
            raise Mismatch(f"{where}: expected {tp.__name__}, got {type(value).__name__}")
        return
    raise Mismatch(f"{where}: cannot check against {tp!r}")
