"""Builders of frozen records at half the cost of their constructors, for the records made for
every step (its checkpoint or completion write) and every template operation (its context,
result, row and outcome).

A frozen dataclass's __init__ sets each field with object.__setattr__, which looks the name up
in the class and checks that no setter is bypassed, for every field of every record: about
2,000 CPU instructions a field, 25,000 for an operation's row. A builder makes the same record
(same class, fields, equality, hash; still frozen) by setting each slot through its own
descriptor, from the same keyword arguments. Records built anywhere else use their constructor.
"""

import dataclasses
import types
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class _Factory:
    """The default of an argument whose field has a default factory (shown as dataclasses
    shows it)."""

    def __repr__(self) -> str:
        return "<factory>"


_NOT_GIVEN = _Factory()


def builder(cls: Callable[P, T], *, checked: bool = True) -> Callable[P, T]:
    """A function that builds `cls` (a frozen, slotted, keyword-only dataclass) from its
    constructor's arguments, defaults and default factories included.

    `checked=False` leaves out the class's __post_init__: only for a caller that builds only
    what it would accept (without it, a class that has one is refused).

    Raises:
        TypeError: `cls` is not such a dataclass, or has a __post_init__ and `checked`.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if not isinstance(cls, type) or params is None or not params.frozen:
        raise TypeError(f"{cls!r} is not a frozen dataclass")
    if "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} has no slots")
    if checked and hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} checks its fields in __post_init__")
    fields = [field for field in dataclasses.fields(cls) if field.init]
    if len(fields) != len(dataclasses.fields(cls)) or not all(f.kw_only for f in fields):
        raise TypeError(f"{cls.__name__} has a field that is not a keyword-only argument")
    if any(field.name.startswith("_") for field in fields):
        raise TypeError(f"{cls.__name__} has a field whose name the builder may use")
    namespace: dict[str, object] = {"_new": object.__new__, "_cls": cls, "_not_given": _NOT_GIVEN}
    arguments: list[str] = []
    lines = ["    _record = _new(_cls)"]
    for number, field in enumerate(fields):
        namespace[f"_set_{number}"] = _slot(cls, field.name).__set__
        if field.default is not dataclasses.MISSING:
            namespace[f"_default_{number}"] = field.default
            arguments.append(f"{field.name}=_default_{number}")
        elif field.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{number}"] = field.default_factory
            arguments.append(f"{field.name}=_not_given")
            lines.append(f"    if {field.name} is _not_given:")
            lines.append(f"        {field.name} = _factory_{number}()")
        else:
            arguments.append(field.name)
        lines.append(f"    _set_{number}(_record, {field.name})")
    lines.append("    return _record")
    # Made of field names only, as dataclasses makes __init__.
    exec(f"def build(*, {', '.join(arguments)}):\n" + "\n".join(lines), namespace)
    built: Callable[P, T] = namespace["build"]  # type: ignore[assignment]
    built.__qualname__ = f"builder({cls.__qualname__})"
    return built


def _slot(cls: type, name: str) -> types.MemberDescriptorType:
    for klass in cls.__mro__:
        found = klass.__dict__.get(name)
        if isinstance(found, types.MemberDescriptorType):
            return found
    raise TypeError(f"{cls.__name__}.{name} is not a slot")
