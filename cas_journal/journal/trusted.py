"""Models from stored data, built without a second full validation.

What the journal reads back was validated when it was written and is hash-verified on
every read, so pydantic's full validation of every field on every cold read is waste
(it was most of the cost of reading a path). ``Constructor`` builds a model from a plain
dict (parsed JSON) directly: it checks each present field's Python type against a plan
derived once from the model's annotations (str, int, bool, enums, optional nested models,
lists of str, str-to-str maps, an exact str for a union with str, plain after-validators
run as pydantic runs them), converts enums and nested models, and fills in defaults.
What a build does depends mostly on the data's *shape* (its field names and the trusted
ones), so a builder is made once per shape and reused: it sets the fields in field order
(as pydantic lays them out), converts the fields whose plan is more than a type check,
converts a str, bool or int field only if its value is not exactly of that type, and sets
up the instance, with nothing looked up per instance that the shape already fixed.
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
from pydantic_core import PydanticUndefined

M = TypeVar("M", bound=BaseModel)
SHARED_FIELD_SETS = 256
"""Distinct sets of field names a constructor of a frozen model shares between the
instances it builds, at most (beyond that, each instance gets its own set)."""
_set = object.__setattr__
_NOTHING: dict[str, Any] = {}
"""No trusted fields (never changed)."""
_INSTANCE_SLOTS = (
    "__dict__",
    "__pydantic_fields_set__",
    "__pydantic_extra__",
    "__pydantic_private__",
)
"""What a model instance holds besides its class, set in this order on a new instance."""
Convert = Callable[[Any], Any]
Setter = Callable[[Any, Any], None]


def _setattr_of(name: str) -> Setter:
    """``object.__setattr__`` of ``name`` as a function of ``(instance, value)``."""

    def set_attribute(instance: Any, value: Any) -> None:
        _set(instance, name, value)

    return set_attribute


def _slot_setters(model: type) -> tuple[Setter, Setter, Setter, Setter]:
    """The ``__set__`` of the descriptors that ``object.__setattr__`` uses for each of
    ``_INSTANCE_SLOTS`` on instances of ``model`` (found in its MRO as it finds them):
    called directly, a set costs 40% fewer instructions than ``object.__setattr__``,
    which unpacks its arguments from a tuple and checks the call first (callgrind; an
    instance is made for every entry and message of a path read). Falls back to
    ``object.__setattr__`` for a name whose descriptor is not a plain slot or dict one."""
    setters: list[Setter] = []
    for name in _INSTANCE_SLOTS:
        descriptor = next(
            (klass.__dict__[name] for klass in model.__mro__ if name in klass.__dict__), None
        )
        if isinstance(descriptor, types.MemberDescriptorType | types.GetSetDescriptorType):
            setters.append(descriptor.__set__)
        else:  # (pydantic models have them all)
            setters.append(_setattr_of(name))
    return setters[0], setters[1], setters[2], setters[3]


Builder = Callable[[dict[str, Any], dict[str, Any]], Any]
"""``build(data, trusted)``: a model from data of one shape (see ``Constructor``)."""


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


def _optional_model(constructor: Constructor[Any]) -> Convert:
    """``_optional(constructor)`` with two calls less (a message in every entry): the
    builder of a shape seen before is called directly."""
    with_fields, shapes = constructor.with_fields, constructor._shapes

    def optional_model(value: Any) -> Any:
        if value is None:
            return None
        if type(value) is dict:  # ``with_fields`` inline for a shape seen before
            build = shapes.get((*value, 0))
            if build is not None:
                return build(value, _NOTHING)
        return with_fields(value, _NOTHING)

    return optional_model


def _str_or(convert: Convert) -> Convert:
    def str_or(value: Any) -> Any:
        return value if type(value) is str else convert(value)

    str_or.str_or_fallback = convert  # type: ignore[attr-defined]  # for ``_after``
    return str_or


def _after(convert: Convert, validators: list[Callable[[Any], Any]]) -> Convert:
    """``convert``, then each after-validator in turn (what pydantic does with them)."""
    if len(validators) == 1:  # one call less per value (a message's content)
        validator = validators[0]
        fallback = getattr(convert, "str_or_fallback", None)
        if fallback is not None:  # ``_str_or`` inline: an exact str is taken as it is

            def str_or_after(value: Any) -> Any:
                return validator(value if type(value) is str else fallback(value))

            return str_or_after

        def after_one(value: Any) -> Any:
            return validator(convert(value))

        return after_one

    def after(value: Any) -> Any:
        value = convert(value)
        for validator in validators:
            value = validator(value)
        return value

    return after


def _enum(kind: type[enum.Enum]) -> Convert:
    """The member of ``kind`` with a given value (what calling the enum gives, without
    the cost of the enum machinery for a str value that names a member)."""
    members: dict[Any, Any] = dict(kind._value2member_map_)

    def convert(value: Any) -> Any:
        member = members.get(value) if type(value) is str else None
        return member if member is not None else kind(value)

    return convert


def _plan(annotation: Any) -> Convert:
    """How to take a JSON value into a field of this annotation."""
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(members) == 1 and len(typing.get_args(annotation)) == 2:
            inner = members[0]
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return _optional_model(Constructor(inner))
            return _optional(_plan(inner))
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
        return _enum(annotation)
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return Constructor(annotation)
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)
    return adapter.validate_python


class Constructor(Generic[M]):
    """Builds ``model`` instances from plain dicts (see the module docstring).

    For a model without aliases, required fields or private attributes lacking a plain
    default it sets the instance's fields (and private attributes) directly (what
    ``model_construct`` does, without its per-field alias handling); otherwise it calls
    ``model_construct``. A present str, bool or int field whose value has exactly that
    type is taken as it is, without a call per field (this runs once per entry of every
    path read from the store).
    """

    def __init__(self, model: type[M]) -> None:
        self.model = model
        self.plans: dict[str, Convert] | None = None  # built on first use (models may nest)
        self._exact: dict[str, Any] = {}
        fields = model.model_fields
        private = model.__private_attributes__
        self._direct = all(
            attribute.default_factory is None and attribute.default is not PydanticUndefined
            for attribute in private.values()
        ) and all(
            field.alias is None and field.validation_alias is None and not field.is_required()
            for field in fields.values()
        )
        self._private: dict[str, Any] | None = (
            {name: attribute.default for name, attribute in private.items()} if private else None
        )
        """The private attributes a new instance starts with (None: the model has none)."""
        # a frozen model never adds to its set of fields set (pydantic copies it for a
        # model_copy), so instances that set the same fields can share one: fewer objects
        # for the cyclic garbage collector to walk after a long path is read
        self._field_sets: dict[tuple[str, ...], set[str]] | None = (
            {} if self._direct and model.model_config.get("frozen") else None
        )
        self._setters = _slot_setters(model)
        """How a new instance's ``_INSTANCE_SLOTS`` are set (``_slot_setters``)."""
        self._shapes: dict[tuple[Any, ...], Builder] = {}
        """How a direct build is done for data of one shape (``_shape_builder``), by shape."""
        # what a direct build starts from (model_construct fills in defaults itself):
        # every field in field order, as pydantic lays out an instance's fields (its
        # repr follows them); a field with a factory holds None until the factory runs
        self._defaults = {
            name: field.default if field.default_factory is None else None
            for name, field in fields.items()
            if self._direct
        }
        self._factories = {
            name: field.default_factory
            for name, field in fields.items()
            if field.default_factory is not None and self._direct
        }

    def _private_of(self, model: M | None) -> dict[str, Any] | None:
        """The private attributes of a new instance: a copy of those of ``model`` (the
        instance it copies), else their defaults; None when the model has none."""
        if self._private is None:
            return None
        return dict((model.__pydantic_private__ if model is not None else None) or self._private)

    def _plans(self) -> dict[str, Convert]:
        if self.plans is None:
            plans = {
                name: _plan(
                    Annotated[field.annotation, *field.metadata]
                    if field.metadata
                    else field.annotation
                )
                for name, field in self.model.model_fields.items()
            }
            self._exact = {
                name: field.annotation
                for name, field in self.model.model_fields.items()
                if field.annotation in (str, bool, int) and not field.metadata
            }
            self.plans = plans
        return self.plans

    def _fields_set(self, names: tuple[str, ...]) -> set[str]:
        """The set of ``names``: one shared by the instances that set the same fields,
        for a frozen model (see ``SHARED_FIELD_SETS``)."""
        shared = self._field_sets
        if shared is None:
            return set(names)
        found = shared.get(names)
        if found is None:
            found = set(names)
            if len(shared) < SHARED_FIELD_SETS:
                shared[names] = found
        return found

    def _shape_builder(
        self, data: dict[str, Any], trusted: dict[str, Any], shape: tuple[Any, ...]
    ) -> Builder:
        """The builder of every data of the same shape as ``data`` (and ``trusted``): its
        field names in order and the trusted names (``with_fields``). It copies the
        defaults, sets the fields, converts those whose field is not a plain str, bool or
        int and those of such a field whose value is not exactly of its type, calls the
        factories of the missing fields and sets up the instance (sharing one set of
        fields set, for a frozen model), with everything that does not depend on the
        values looked up once. ValueError for a field the model lacks. The first
        ``SHARED_FIELD_SETS`` shapes are kept."""
        plans = self.plans if self.plans is not None else self._plans()
        exact = self._exact.get
        converts: list[tuple[str, Convert]] = []
        checks: list[tuple[str, type, Convert]] = []
        for name in data:
            plan = plans.get(name)
            if plan is None:
                raise ValueError(f"unknown field {name!r} of {self.model.__name__}")
            kind = exact(name)
            if kind is None:
                converts.append((name, plan))
            else:  # taken as it is when exactly of its type (most are)
                checks.append((name, kind, plan))
        factories = tuple(
            (name, factory) for name, factory in self._factories.items() if name not in data
        )
        names = (*data, *trusted)
        shared = self._fields_set(names) if self._field_sets is not None else None
        defaults = self._defaults
        model_type = self.model
        new = model_type.__new__
        private = self._private
        converting = tuple(converts)
        checking = tuple(checks)
        set_dict, set_fields_set, set_extra, set_private = self._setters

        def build(data: dict[str, Any], trusted: dict[str, Any]) -> Any:
            fields = defaults | data  # the operators: no argument parsing, as update has
            for name, convert in converting:
                fields[name] = convert(fields[name])
            for name, kind, convert in checking:
                value = fields[name]
                if type(value) is not kind:
                    fields[name] = convert(value)
            for name, factory in factories:
                fields[name] = factory()  # type: ignore[call-arg]
            fields |= trusted
            model = new(model_type)
            set_dict(model, fields)
            set_fields_set(model, set(names) if shared is None else shared)
            set_extra(model, None)
            set_private(model, None if private is None else dict(private))
            return model

        if len(self._shapes) < SHARED_FIELD_SETS:
            self._shapes[shape] = build
        return build

    def _fields(self, data: Any) -> dict[str, Any]:
        """Every field of a model holding ``data`` (defaults for the missing ones, in
        field order when every field has a plain default)."""
        if type(data) is not dict:
            raise ValueError(f"expected an object for {self.model.__name__}")
        plans = self._plans()
        exact = self._exact.get
        fields = self._defaults.copy()
        fields.update(data)
        for name, value in data.items():
            if exact(name) is not type(value):
                plan = plans.get(name)
                if plan is None:
                    raise ValueError(f"unknown field {name!r} of {self.model.__name__}")
                fields[name] = plan(value)
        for name, factory in self._factories.items():
            if name not in data:
                fields[name] = factory()  # type: ignore[call-arg]
        return fields

    def _build(self, fields: dict[str, Any], fields_set: set[str]) -> M:
        if not self._direct:
            return self.model.model_construct(_fields_set=fields_set, **fields)
        model = self.model.__new__(self.model)
        _set(model, "__dict__", fields)
        _set(model, "__pydantic_fields_set__", fields_set)
        _set(model, "__pydantic_extra__", None)
        _set(model, "__pydantic_private__", self._private_of(None))
        return model

    def __call__(self, data: Any) -> M:
        """The model holding ``data``'s fields (missing ones at their defaults)."""
        return self.with_fields(data, _NOTHING)

    def replaced(self, model: M, trusted: dict[str, Any]) -> M:
        """A copy of ``model`` (built by this constructor) with ``trusted`` fields set as
        they are: a shallow copy, as ``model_copy(update=...)`` makes, without its cost."""
        if not self._direct:
            return model.model_copy(update=trusted)
        fields = {**model.__dict__, **trusted}
        fields_set = model.__pydantic_fields_set__
        if not fields_set.issuperset(trusted):
            fields_set = fields_set | trusted.keys()
        if self._field_sets is None or self._private is not None:
            return self._copy(model, fields, fields_set)
        copy = self.model.__new__(self.model)  # ``_copy`` inline: once per appended entry
        _set(copy, "__dict__", fields)
        _set(copy, "__pydantic_fields_set__", fields_set)
        _set(copy, "__pydantic_extra__", None)
        _set(copy, "__pydantic_private__", None)
        return copy

    def with_field(self, model: M, name: str, value: Any) -> M:
        """``replaced(model, {name: value})`` for one field (an entry as seen from
        another thread: one per shared entry of every fork's path, so kept short)."""
        if self._field_sets is None:  # not a frozen model set up directly
            return self.replaced(model, {name: value})
        fields = model.__dict__.copy()
        fields[name] = value
        fields_set = model.__pydantic_fields_set__
        if name not in fields_set:
            fields_set = fields_set | {name}
        copy = self.model.__new__(self.model)  # ``_copy`` inline: this is the hot one
        _set(copy, "__dict__", fields)
        _set(copy, "__pydantic_fields_set__", fields_set)
        _set(copy, "__pydantic_extra__", None)
        _set(copy, "__pydantic_private__", self._private_of(model))
        return copy

    def field_copier(self, name: str) -> Callable[[M, Any], M]:
        """``with_field(model, name, value)`` as a function of ``(model, value)`` with
        everything that does not depend on them looked up once (a path read copies
        every shared entry of a fork's history with this)."""
        if self._field_sets is None or self._private is not None:
            return lambda model, value: self.with_field(model, name, value)
        model_type = self.model
        new = model_type.__new__
        added = {name}
        set_dict, set_fields_set, set_extra, set_private = self._setters

        def copy_with(model: M, value: Any) -> M:
            fields = model.__dict__.copy()
            fields[name] = value
            fields_set = model.__pydantic_fields_set__
            if name not in fields_set:
                fields_set = fields_set | added
            copy = new(model_type)
            set_dict(copy, fields)
            set_fields_set(copy, fields_set)
            set_extra(copy, None)
            set_private(copy, None)
            return copy

        return copy_with

    def _copy(self, model: M, fields: dict[str, Any], fields_set: set[str]) -> M:
        """A copy of ``model`` holding ``fields`` (and a copy of its private attributes).
        Its set of fields set is ``fields_set`` itself only for a frozen model, which never
        changes it (see ``_fields_set``); any other gets its own."""
        copy = self.model.__new__(self.model)
        _set(copy, "__dict__", fields)
        _set(
            copy,
            "__pydantic_fields_set__",
            fields_set if self._field_sets is not None else set(fields_set),
        )
        _set(copy, "__pydantic_extra__", None)
        _set(copy, "__pydantic_private__", self._private_of(model))
        return copy

    def with_fields(self, data: Any, trusted: dict[str, Any]) -> M:
        """Like calling it on ``data``, plus ``trusted`` fields taken as they are (values
        the caller built itself: oids, an aware UTC time). Runs once per entry of every
        path read from the store (and once per message in it): the shape of the data
        picks a builder made for it (``_shape_builder``)."""
        if not self._direct or type(data) is not dict:
            fields = self._fields(data)
            fields.update(trusted)
            return self._build(fields, self._fields_set((*data, *trusted)))
        shape = (*data, *trusted, len(trusted))  # (the count tells where trusted begin)
        build = self._shapes.get(shape)
        if build is None:
            build = self._shape_builder(data, trusted, shape)
        built: M = build(data, trusted)
        return built
