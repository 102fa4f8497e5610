"""The package's `__all__` covers what typed code embedding the Engine has to name.

Every Laneway type a public Engine method (or one of `engine.locks`) takes or returns (inside
generics and unions too), every type a field of the records it returns holds (`record.status`
is compared with `Status`), every type a field of an exported definition holds (a Template's
QueueSettings), the handler utilities, and every Laneway exception their docstrings say they
raise is exported, so a user never has to import from a module the package does not promise.
"""

import dataclasses
import inspect
import re
import typing
from collections.abc import Iterator

import laneway
from laneway import Engine, model, testing
from laneway.engine import decorators
from laneway.engine.locks import EntityLocks

# The classes of the Engine's public attributes: `engine.locks` is an EntityLocks.
ENGINE_PARTS: dict[type, str] = {Engine: "Engine", EntityLocks: "Engine.locks"}
HANDLER_UTILITIES = ("compose", "with_error_boundary", "with_retry", "with_timeout")
# The definitions a template is built from: the Engine runs them, a user builds them.
DEFINITIONS: tuple[type, ...] = (
    laneway.Template,
    laneway.Stage,
    laneway.Operation,
    laneway.Checkpoint,
    laneway.RetryPolicy,
)


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
        (f"{owner}.{name}", member)
        for cls, owner in ENGINE_PARTS.items()
        for name, member in inspect.getmembers(cls, callable)
        if not name.startswith("_")
    ]


def types_of_the_engine_api() -> dict[type, str]:
    """Each Laneway class the Engine's public methods name, with where it was met."""
    found: dict[type, str] = {}
    for name, method in public_methods():
        for annotation in typing.get_type_hints(method).values():
            for cls in laneway_classes(annotation):
                found.setdefault(cls, name)
    for cls, owner in ENGINE_PARTS.items():  # a user annotates `locks: EntityLocks` too
        found.setdefault(cls, owner)
    # The records it hands back are read field by field, and the definitions it is given are
    # built field by field: their fields' types count too.
    for definition in DEFINITIONS:
        found.setdefault(definition, "a definition the Engine runs")
    todo = list(found)
    while todo:
        record = todo.pop()
        if not dataclasses.is_dataclass(record) or not (
            record.__module__ == model.__name__ or record in DEFINITIONS
        ):
            continue
        for annotation in typing.get_type_hints(record).values():
            for cls in laneway_classes(annotation):
                # A Protocol (a validator's model, a handler's tools) is met, never named.
                if cls not in found and not getattr(cls, "_is_protocol", False):
                    found[cls] = f"a field of {record.__name__}"
                    todo.append(cls)
    return found


def test_every_type_the_engine_api_names_is_exported() -> None:
    found = types_of_the_engine_api()
    assert model.InstanceRecord in found  # the walk reaches return types
    assert model.Status in found  # and the fields of the records returned
    assert EntityLocks in found  # engine.locks is a part of the Engine API
    missing = {
        cls.__name__: where for cls, where in found.items() if cls.__name__ not in laneway.__all__
    }
    assert not missing, f"used by the Engine API but not in laneway.__all__: {missing}"
    for cls in found:
        assert getattr(laneway, cls.__name__) is cls, f"laneway.{cls.__name__} is another class"


def test_every_error_the_engine_documents_is_exported() -> None:
    documented: dict[str, str] = {}
    utilities = [(f"laneway.{name}", getattr(decorators, name)) for name in HANDLER_UTILITIES]
    # laneway.testing's helpers too: run_handler raises NotAwaitableError, which a user's
    # pytest.raises names.
    helpers = [
        (f"laneway.testing.{name}", helper)
        for name, helper in vars(testing).items()
        if not name.startswith("_")
        and inspect.isfunction(helper)
        and helper.__module__ == testing.__name__
    ]
    # And what a program that embeds it calls first: open_services and migrate.
    entries = [(f"laneway.{f.__name__}", f) for f in (laneway.open_services, laneway.migrate)]
    for name, method in [*public_methods(), *utilities, *helpers, *entries]:
        text = inspect.getdoc(method) or ""
        for raised in re.findall(r"^\s*(\w+Error)\b:|raises? (\w+Error)\b", text, re.M):
            documented.setdefault(next(n for n in raised if n), name)
    assert "NotFoundError" in documented  # the docstrings are read
    assert "LockUnavailableError" in documented  # engine.locks's too
    assert "HandlerTimeoutError" in documented  # and the handler utilities'
    assert "NotAwaitableError" in documented  # and laneway.testing's
    assert "MigrationFailedError" in documented  # and open_services's and migrate's
    ours = {
        name: where
        for name, where in documented.items()
        if any(cls.__name__ == name for cls in laneway_errors())
    }
    missing = {name: where for name, where in ours.items() if name not in laneway.__all__}
    assert not missing, f"raised by the Engine API but not in laneway.__all__: {missing}"


def laneway_errors() -> Iterator[type[BaseException]]:
    """Every exception class Laneway defines, whatever module defines it."""
    todo: list[type[BaseException]] = [BaseException]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("laneway"):
            yield cls


def test_the_handler_utilities_are_exported() -> None:
    for name in HANDLER_UTILITIES:
        assert name in laneway.__all__
        assert getattr(laneway, name) is getattr(decorators, name)


def test_all_is_sorted() -> None:
    assert laneway.__all__ == sorted(laneway.__all__)
