"""The package's `__all__` covers what typed code embedding the Engine has to name.

Every Laneway type a public Engine method takes or returns (inside generics and unions too),
every type a field of the records it returns holds (`record.status` is compared with
`Status`), and every Laneway exception its docstrings say it raises is exported, so a user
never has to import from a module the package does not promise.
"""

import dataclasses
import inspect
import re
import typing
from collections.abc import Iterator

import laneway
from laneway import Engine, errors, model


def laneway_classes(annotation: object) -> Iterator[type]:
    """The classes defined in Laneway that an annotation names, at any depth."""
    if isinstance(annotation, list | tuple):  # Callable's argument list
        for item in annotation:
            yield from laneway_classes(item)
        return
    origin = typing.get_origin(annotation)
    for candidate in (annotation, origin):
        if isinstance(candidate, type) and candidate.__module__.startswith("laneway"):
            yield candidate
    for argument in typing.get_args(annotation):
        yield from laneway_classes(argument)


def public_methods() -> list[tuple[str, object]]:
    return [
        (name, member)
        for name, member in inspect.getmembers(Engine, callable)
        if not name.startswith("_")
    ]


def types_of_the_engine_api() -> dict[type, str]:
    """Each Laneway class the Engine's public methods name, with where it was met."""
    found: dict[type, str] = {}
    for name, method in public_methods():
        for annotation in typing.get_type_hints(method).values():
            for cls in laneway_classes(annotation):
                found.setdefault(cls, f"Engine.{name}")
    # The records it hands back are read field by field: their fields' types count too.
    todo = list(found)
    while todo:
        record = todo.pop()
        if record.__module__ != model.__name__ or not dataclasses.is_dataclass(record):
            continue
        for annotation in typing.get_type_hints(record).values():
            for cls in laneway_classes(annotation):
                if cls not in found:
                    found[cls] = f"a field of {record.__name__}"
                    todo.append(cls)
    return found


def test_every_type_the_engine_api_names_is_exported() -> None:
    found = types_of_the_engine_api()
    assert model.InstanceRecord in found  # the walk reaches return types
    assert model.Status in found  # and the fields of the records returned
    missing = {
        cls.__name__: where for cls, where in found.items() if cls.__name__ not in laneway.__all__
    }
    assert not missing, f"used by the Engine API but not in laneway.__all__: {missing}"
    for cls in found:
        assert getattr(laneway, cls.__name__) is cls, f"laneway.{cls.__name__} is another class"


def test_every_error_the_engine_documents_is_exported() -> None:
    documented: dict[str, str] = {}
    for name, method in public_methods():
        for raised in re.findall(r"^\s*(\w+Error)\b:", inspect.getdoc(method) or "", re.M):
            documented.setdefault(raised, f"Engine.{name}")
    assert "NotFoundError" in documented  # the docstrings are read
    ours = {name: where for name, where in documented.items() if hasattr(errors, name)}
    missing = {name: where for name, where in ours.items() if name not in laneway.__all__}
    assert not missing, f"raised by the Engine API but not in laneway.__all__: {missing}"


def test_all_is_sorted() -> None:
    assert laneway.__all__ == sorted(laneway.__all__)
