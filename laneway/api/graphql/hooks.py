"""LeanExtensionsRunner: the schema extensions' hooks of one operation, entered without waste.

Owns how Laneway's schema runs its extensions' lifecycle hooks (on_operation, on_parse,
on_validate, on_execute). Strawberry's runner builds, for each of the four steps of every
operation, an ExitStack and a `contextlib.contextmanager` wrapper per hook (functools.wraps
included), even for a step no extension hooks into: about a sixth of a trivial query's server
CPU. Here a step without hooks is a shared no-op, and hooks that are plain generator
functions (all of Laneway's, and most extensions') are driven directly, with the semantics of
`contextlib.contextmanager` under an ExitStack: entered in order, left in reverse, an
exception thrown into each, a hook may suppress it or raise another. A step with any other
kind of hook (async generators, plain callables) is left to Strawberry's own context manager.
Streamed results (on_stream_result) keep Strawberry's. Which hooks an extension has is looked
up once per extension class.
"""

import inspect
from collections.abc import Callable, Generator
from types import TracebackType
from typing import Any

from strawberry.extensions import SchemaExtension
from strawberry.extensions.context import (
    ExecutingContextManager,
    ExtensionContextManagerBase,
    OperationContextManager,
    ParsingContextManager,
    ValidationContextManager,
)
from strawberry.extensions.runner import SchemaExtensionsRunner

Hook = Callable[[], Generator[None, None, None]]


class _NoHooks:
    """A step no extension hooks into: nothing to enter, nothing to leave."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        return None

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc_info: object) -> None:
        return None


NO_HOOKS = _NoHooks()


class GeneratorHooks:
    """One step's generator hooks, each entered as `contextlib.contextmanager` enters it,
    together as an ExitStack holds them."""

    __slots__ = ("_hooks", "_running")

    def __init__(self, hooks: list[Hook]) -> None:
        self._hooks = hooks
        self._running: list[Generator[None, None, None]] = []

    def __enter__(self) -> None:
        for hook in self._hooks:
            generator = hook()
            try:
                next(generator)
            except StopIteration:
                error = RuntimeError("generator didn't yield")
                self._leave(RuntimeError, error, None)  # the hooks entered so far, unwound
                raise error from None
            except BaseException as error:
                self._leave(type(error), error, error.__traceback__)
                raise
            self._running.append(generator)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        return self._leave(exc_type, exc, traceback)

    async def __aenter__(self) -> None:
        self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        return self.__exit__(exc_type, exc, traceback)

    def _leave(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        """Leave every entered hook, the last first; True when the exception was suppressed.

        Raises:
            BaseException: an exception a hook raised while leaving (the last one wins).
        """
        pending = exc if exc_type is not None else None
        if pending is not None and exc is None:
            pending = exc_type()  # type: ignore[misc]
        raised = False  # `pending` was raised by a hook, not given to us
        running, self._running = self._running, []
        while running:
            generator = running.pop()
            try:
                if pending is None:
                    next(generator)
                else:
                    generator.throw(pending)
            except StopIteration:
                pending, raised = None, False  # finished; a thrown exception is suppressed
                continue
            except BaseException as error:
                if error is not pending:
                    error.__context__ = pending
                    pending, raised = error, True
                continue
            after = "" if pending is None else " after throw()"
            unstopped = RuntimeError(f"generator didn't stop{after}")
            unstopped.__context__ = pending
            pending, raised = unstopped, True
        if pending is None:
            return exc_type is not None
        if raised or pending is not exc:
            raise pending
        return False


def _is_plain_hook(extension_type: type[SchemaExtension], name: str) -> bool | None:
    """True for a generator hook, False for another kind, None for no hook at all."""
    hook = getattr(extension_type, name)
    if hook is getattr(SchemaExtension, name):
        return None
    return inspect.isgeneratorfunction(hook)


_STEPS: dict[str, type[ExtensionContextManagerBase]] = {
    "on_operation": OperationContextManager,
    "on_parse": ParsingContextManager,
    "on_validate": ValidationContextManager,
    "on_execute": ExecutingContextManager,
}
_KINDS: dict[tuple[type[SchemaExtension], str], bool | None] = {}


class LeanExtensionsRunner(SchemaExtensionsRunner):
    """Strawberry's runner with the four steps of an operation entered by GeneratorHooks."""

    def operation(self) -> Any:
        return self._step("on_operation")

    def parsing(self) -> Any:
        return self._step("on_parse")

    def validation(self) -> Any:
        return self._step("on_validate")

    def executing(self) -> Any:
        return self._step("on_execute")

    def _step(self, name: str) -> Any:
        hooks: list[Hook] = []
        for extension in self.extensions:
            key = (type(extension), name)
            kind = _KINDS[key] if key in _KINDS else _remember(key)
            if kind is None:
                continue
            if not kind:
                return _STEPS[name](self.extensions)  # Strawberry's, for hooks of other kinds
            hooks.append(getattr(extension, name))
        return GeneratorHooks(hooks) if hooks else NO_HOOKS


def _remember(key: tuple[type[SchemaExtension], str]) -> bool | None:
    kind = _is_plain_hook(*key)
    _KINDS[key] = kind
    return kind
