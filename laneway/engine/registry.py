"""WorkflowRegistry: the workflows this process can run, by name.

Owns registration and loading the modules named in LANEWAY_WORKFLOWS. Knows nothing of how
instances run.
"""

import importlib
import traceback
from collections.abc import Iterable, Iterator

from laneway.engine.handler_map import Workflow
from laneway.errors import InvalidInputError, NotFoundError


class WorkflowRegistry:
    """Workflows by name; a name is registered once."""

    def __init__(self, workflows: Iterable[Workflow] = ()) -> None:
        self._workflows: dict[str, Workflow] = {}
        for workflow in workflows:
            self.register(workflow)

    @classmethod
    def from_modules(cls, modules: Iterable[str]) -> "WorkflowRegistry":
        """Import each module and register every Workflow defined at its top level.

        Raises:
            InvalidInputError: a module cannot be imported, or raised while it was imported;
                the message is one line, naming the module and the error (and for an error
                the module's code raised, the file and line).
        """
        registry = cls()
        for module_name in modules:
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                raise InvalidInputError(
                    f"cannot import workflow module {module_name!r}: {exc}"
                ) from exc
            except Exception as exc:  # the module's own code failed (SyntaxError, NameError, ...)
                raise InvalidInputError(
                    f"workflow module {module_name!r} failed while importing: {_one_line(exc)}"
                ) from exc
            for value in vars(module).values():
                if isinstance(value, Workflow) and value.name not in registry:
                    registry.register(value)
        return registry

    def register(self, workflow: Workflow) -> None:
        """Add a workflow; re-registering the same object is a no-op.

        Raises:
            InvalidInputError: another workflow already has this name.
        """
        existing = self._workflows.get(workflow.name)
        if existing is not None and existing is not workflow:
            raise InvalidInputError(f"a different workflow named {workflow.name!r} is registered")
        self._workflows[workflow.name] = workflow

    def get(self, name: str) -> Workflow:
        """The workflow called `name`.

        Raises:
            NotFoundError: no workflow has that name here.
        """
        try:
            return self._workflows[name]
        except KeyError:
            raise NotFoundError(f"unknown workflow {name!r}") from None

    def find(self, name: str) -> Workflow | None:
        return self._workflows.get(name)

    def names(self) -> list[str]:
        return sorted(self._workflows)

    def __contains__(self, name: object) -> bool:
        return name in self._workflows

    def __iter__(self) -> Iterator[Workflow]:
        return iter(sorted(self._workflows.values(), key=lambda w: w.name))

    def __len__(self) -> int:
        return len(self._workflows)


def _one_line(exc: Exception) -> str:
    """`Type: message (file, line N)`: where the import failed, for a person to fix it."""
    where = ""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" ({exc.filename}, line {exc.lineno})"
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        if frames:
            where = f" ({frames[-1].filename}, line {frames[-1].lineno})"
    message = str(exc.msg if isinstance(exc, SyntaxError) else exc).splitlines()
    return f"{type(exc).__name__}: {message[0] if message else ''}{where}"
