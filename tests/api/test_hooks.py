"""LeanExtensionsRunner (laneway/api/graphql/hooks.py) behaves as Strawberry's runner does.

Each scenario runs the same generator hooks twice: under GeneratorHooks, and under what
Strawberry builds (`contextlib.contextmanager` wrappers in an ExitStack); the calls the hooks
see and the exception that leaves must be the same.
"""

import contextlib
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from typing import Any

import pytest
from strawberry.extensions import SchemaExtension
from strawberry.extensions.context import ValidationContextManager

from laneway.api.graphql.hooks import NO_HOOKS, GeneratorHooks, LeanExtensionsRunner
from laneway.api.graphql.schema import schema

Hook = Callable[[], Generator[None, None, None]]


class BodyError(Exception):
    pass


class ExitError(Exception):
    pass


def recording(name: str, log: list[str], *, suppress: bool = False, fail: bool = False) -> Hook:
    def hook() -> Generator[None, None, None]:
        log.append(f"enter {name}")
        try:
            yield
        except BodyError as exc:
            log.append(f"{name} saw {type(exc).__name__}")
            if not suppress:
                raise
        finally:
            log.append(f"leave {name}")
        if fail:
            raise ExitError(name)

    return hook


def run(hooks: Callable[[list[str]], list[Hook]], body_fails: bool, lean: bool) -> list[str]:
    log: list[str] = []
    built = hooks(log)
    manager: contextlib.AbstractContextManager[object]
    if lean:
        manager = GeneratorHooks(built)
    else:
        stack = contextlib.ExitStack()
        for hook in built:
            stack.enter_context(contextlib.contextmanager(hook)())
        manager = stack
    try:
        with manager:
            log.append("body")
            if body_fails:
                raise BodyError
    except Exception as exc:
        context = type(exc.__context__).__name__ if exc.__context__ else None
        log.append(f"raised {type(exc).__name__} (context {context})")
    return log


SCENARIOS: dict[str, Callable[[list[str]], list[Hook]]] = {
    "two plain hooks": lambda log: [recording("a", log), recording("b", log)],
    "inner suppresses": lambda log: [recording("a", log), recording("b", log, suppress=True)],
    "outer suppresses": lambda log: [recording("a", log, suppress=True), recording("b", log)],
    "inner raises on leaving": lambda log: [recording("a", log), recording("b", log, fail=True)],
    "both raise on leaving": lambda log: [
        recording("a", log, fail=True),
        recording("b", log, fail=True),
    ],
}


@pytest.mark.parametrize("body_fails", [False, True])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_generator_hooks_enter_and_leave_as_an_exit_stack_does(
    scenario: str, body_fails: bool
) -> None:
    hooks = SCENARIOS[scenario]
    expected = run(hooks, body_fails, lean=False)
    assert run(hooks, body_fails, lean=True) == expected
    assert "body" in expected


def test_a_hook_that_fails_to_enter_unwinds_the_hooks_entered_before_it() -> None:
    log: list[str] = []

    def broken() -> Generator[None, None, None]:
        if not log[-1].startswith("body"):  # always: the body never runs
            raise ExitError("no")
        yield  # pragma: no cover

    with pytest.raises(ExitError), GeneratorHooks([recording("a", log), broken]):
        log.append("body")  # pragma: no cover
    assert log == ["enter a", "leave a"]


class Plain(SchemaExtension):
    def on_validate(self) -> Iterator[None]:
        yield


class AsyncHook(SchemaExtension):
    async def on_validate(self) -> AsyncIterator[None]:
        yield


def test_steps_without_hooks_cost_nothing_and_other_kinds_of_hooks_keep_strawberrys() -> None:
    runner = LeanExtensionsRunner(execution_context=None, extensions=[Plain()])  # type: ignore[arg-type]
    assert runner.operation() is NO_HOOKS
    assert isinstance(runner.validation(), GeneratorHooks)
    mixed = LeanExtensionsRunner(
        execution_context=None,  # type: ignore[arg-type]
        extensions=[Plain(), AsyncHook()],
    )
    assert isinstance(mixed.validation(), ValidationContextManager)


async def test_laneway_schema_runs_its_hooks_with_the_lean_runner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runners: list[object] = []
    original = schema.create_extensions_runner

    def spy(*args: Any, **kwargs: Any) -> Any:
        made = original(*args, **kwargs)
        runners.append(made)
        return made

    monkeypatch.setattr(schema, "create_extensions_runner", spy)
    result = await schema.execute("{ __typename }")
    refused = await schema.execute("{ " + "a: __typename " * 40 + "}")
    assert result.data == {"__typename": "Query"}
    assert refused.errors
    assert "aliases" in refused.errors[0].message.lower()
    assert len(runners) == 2
    assert all(isinstance(r, LeanExtensionsRunner) for r in runners)
