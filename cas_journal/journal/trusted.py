"""Models from stored data, built without a second full validation.

What the journal reads back was validated when it was written and is hash-verified on
every read, so pydantic's full validation of every field on every cold read is waste
(it was most of the cost of reading a path). ``Constructor`` builds a model from a plain
dict (parsed JSON) directly: it checks each present field's Python type against a plan
derived once from the model's annotations (str, int, bool, enums, optional nested models,
lists of str, str-to-str maps, an exact str for a union with str, plain after-validators
run as pydantic runs them), converts enums and nested models, and fills in defaults.
A field whose annotation it has no plan for is validated by pydantic (a TypeAdapter), so
nothing unknown slips through unchecked. Any mismatch is a ValueError; callers turn it
into CorruptObject naming the object.
"""

from __future__ import annotations

import enum
import inspect
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Generic, TypeVar

from pydantic import AfterValidator, BaseModel, TypeAdapter

M = TypeVar("M", bound=BaseModel)
_set = object.__setattr__
Convert = Callable[[Any], Any]


def _check(kind: type) -> Convert:
    def convert(value: Any) -> Any:
        if type(value) is not kind:
            raise ValueError(f"expected {kind.__name__}, got {type(value).__name__}")
        return value

    return convert


def _int(value: Any) -> Any:
    if type(value) is not int:
        raise ValueError(f"expected int, got {type(value).__name__}")
    return value


def _str_list(value: Any) -> Any:
    if type(value) is not list or not all(type(item) is str for item in value):
        raise ValueError("expected a list of strings")
    return value


def _str_map(value: Any) -> Any:
    if type(value) is not dict or not all(type(item) is str for item in value.values()):
        raise ValueError("expected a map of strings")
    return value


def _optional(convert: Convert) -> Convert:
    def optional(value: Any) -> Any:
        return None if value is None else convert(value)

    return optional


def _str_or(convert: Convert) -> Convert:
    def str_or(value: Any) -> Any:
        return value if type(value) is str else convert(value)

    return str_or


def _after(convert: Convert, validators: list[Callable[[Any], Any]]) -> Convert:
    """``convert``, then each after-validator in turn (what pydantic does with them)."""

    def after(value: Any) -> Any:
        value = convert(value)
        for validator in validators:
            value = validator(value)
        return value

    return after


def _plan(annotation: Any) -> Convert:
    """How to take a JSON value into a field of this annotation."""
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(members) == 1 and len(typing.get_args(annotation)) == 2:
            return _optional(_plan(members[0]))
        if str in members:  # an exact str is a str member (pydantic's smart union too)
            return _str_or(TypeAdapter(annotation).validate_python)
    elif origin is typing.Annotated:
        inner, *metadata = typing.get_args(annotation)
        if metadata and all(
            isinstance(item, AfterValidator) and len(inspect.signature(item.func).parameters) == 1
            for item in metadata
        ):
            return _after(_plan(inner), [item.func for item in metadata])
        # other validators attached: let pydantic run them
    elif origin is list and typing.get_args(annotation) == (str,):
        return _str_list
    elif origin is dict and typing.get_args(annotation) == (str, str):
        return _str_map
    elif annotation in (str, bool):
        return _check(annotation)
    elif annotation is int:
        return _int
    elif isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return annotation
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return Constructor(annotation)
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)
    return adapter.validate_python


class Constructor(Generic[M]):
    """Builds ``model`` instances from plain dicts (see the module docstring).

    For a model without private attributes, aliases or required fields it sets the
    instance's fields directly (what ``model_construct`` does, without its per-field
    alias handling); otherwise it calls ``model_construct``.
    """

    def __init__(self, model: type[M]) -> None:
        self.model = model
        self.plans: dict[str, Convert] | None = None  # built on first use (models may nest)
        fields = model.model_fields
        self._direct = not model.__private_attributes__ and all(
            field.alias is None and field.validation_alias is None and not field.is_required()
            for field in fields.values()
        )
        self._defaults = {
            name: field.default for name, field in fields.items() if field.default_factory is None
        }
        self._factories = {
            name: field.default_factory
            for name, field in fields.items()
            if field.default_factory is not None
        }

    def _plans(self) -> dict[str, Convert]:
        if self.plans is None:
            self.plans = {
                name: _plan(
                    Annotated[field.annotation, *field.metadata]
                    if field.metadata
                    else field.annotation
                )
                for name, field in self.model.model_fields.items()
            }
        return self.plans

    def _values(self, data: Any) -> dict[str, Any]:
        if type(data) is not dict:
            raise ValueError(f"expected an object for {self.model.__name__}")
        plans = self._plans()
        values: dict[str, Any] = {}
        for name, value in data.items():
            plan = plans.get(name)
            if plan is None:
                raise ValueError(f"unknown field {name!r} of {self.model.__name__}")
            values[name] = plan(value)
        return values

    def _build(self, values: dict[str, Any], fields_set: set[str]) -> M:
        if not self._direct:
            return self.model.model_construct(_fields_set=fields_set, **values)
        fields = dict(self._defaults)
        for name, factory in self._factories.items():
            if name not in values:
                fields[name] = factory()  # type: ignore[call-arg]
        fields.update(values)
        model = self.model.__new__(self.model)
        _set(model, "__dict__", fields)
        _set(model, "__pydantic_fields_set__", fields_set)
        _set(model, "__pydantic_extra__", None)
        _set(model, "__pydantic_private__", None)
        return model

    def __call__(self, data: Any) -> M:
        """The model holding ``data``'s fields (missing ones at their defaults)."""
        values = self._values(data)
        return self._build(values, set(values))

    def replaced(self, model: M, trusted: dict[str, Any]) -> M:
        """A copy of ``model`` (built by this constructor) with ``trusted`` fields set as
        they are: a shallow copy, as ``model_copy(update=...)`` makes, without its cost."""
        if not self._direct:
            return model.model_copy(update=trusted)
        fields = {**model.__dict__, **trusted}
        copy = self.model.__new__(self.model)
        fields_set = model.__pydantic_fields_set__
        if not fields_set.issuperset(trusted):
            fields_set = fields_set | set(trusted)
        _set(copy, "__dict__", fields)
        _set(copy, "__pydantic_fields_set__", fields_set)
        _set(copy, "__pydantic_extra__", None)
        _set(copy, "__pydantic_private__", None)
        return copy

    def with_fields(self, data: Any, trusted: dict[str, Any]) -> M:
        """Like calling it on ``data``, plus ``trusted`` fields taken as they are (values
        the caller built itself: oids, an aware UTC time)."""
        values = self._values(data)
        fields_set = set(values)
        values.update(trusted)
        fields_set.update(trusted)
        return self._build(values, fields_set)
