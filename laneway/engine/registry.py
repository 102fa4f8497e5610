"""WorkflowRegistry: the workflows this process can run, by name and version.

Owns registration, loading the modules named in LANEWAY_WORKFLOWS, and which version is the
newest: several versions of one workflow may be registered side by side, so instances in
flight finish on the code they started with while new ones start on the newest. Knows nothing
of how instances run.
"""

import importlib
import os
import re
import sysconfig
import traceback
from collections.abc import Iterable, Iterator
from pathlib import Path

from laneway.engine.handler_map import Workflow
from laneway.errors import InvalidInputError, NotFoundError


def version_order(version: str) -> tuple[tuple[int, int, str], ...]:
    """The sort key that makes the newest version the greatest: runs of digits compare as
    numbers and the rest as text, so "2" < "10", "1.9" < "1.10", "2026-01-05" < "2026-02-01";
    a version that extends another ("1.1" of "1") is newer."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part)
        for part in re.findall(r"\d+|\D+", version)
    )


def run_key(name: str, version: str) -> str:
    """How a claim and the workers registry name what a process runs: 'name@version' (neither
    a workflow name nor a version has an '@': laneway/engine/names.py)."""
    return f"{name}@{version}"


class WorkflowRegistry:
    """Workflows by name, each in one or more versions; a (name, version) is registered once."""

    def __init__(self, workflows: Iterable[Workflow] = ()) -> None:
        self._workflows: dict[str, dict[str, Workflow]] = {}
        self._newest: dict[str, Workflow] = {}  # kept at registration: enqueues ask per call
        for workflow in workflows:
            self.register(workflow)

    @classmethod
    def from_modules(cls, modules: Iterable[str]) -> "WorkflowRegistry":
        """Import each module and register every Workflow defined at its top level.

        Raises:
            InvalidInputError: a module cannot be imported, or raised while it was imported;
                the message is one line, naming the module and the error (and for an error
                the module's code raised, the file and line). Or two different workflows
                have one name and version (one object found in several modules is one).
        """
        registry = cls()
        for module_name in modules:
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                if is_missing(exc, module_name):
                    raise InvalidInputError(
                        f"cannot import workflow module {module_name!r}: {exc}"
                    ) from exc
                raise InvalidInputError(  # found, but its own imports failed
                    f"workflow module {module_name!r} failed while importing: {error_line(exc)}"
                ) from exc
            except Exception as exc:  # the module's own code failed (SyntaxError, NameError, ...)
                raise InvalidInputError(
                    f"workflow module {module_name!r} failed while importing: {error_line(exc)}"
                ) from exc
            for value in vars(module).values():
                if isinstance(value, Workflow):
                    try:
                        registry.register(value)
                    except InvalidInputError as exc:
                        raise InvalidInputError(f"workflow module {module_name!r}: {exc}") from None
        return registry

    def register(self, workflow: Workflow) -> None:
        """Add a workflow version; re-registering the same object is a no-op.

        Raises:
            InvalidInputError: another workflow already has this name and version.
        """
        versions = self._workflows.setdefault(workflow.name, {})
        existing = versions.get(workflow.version)
        if existing is not None and existing is not workflow:
            raise InvalidInputError(
                f"a different workflow named {workflow.name!r} is registered"
                f" with version {workflow.version!r}"
            )
        versions[workflow.version] = workflow
        self._newest[workflow.name] = versions[self.versions(workflow.name)[0]]

    def get(self, name: str, version: str | None = None) -> Workflow:
        """The workflow called `name` in `version`, or its newest version here.

        Raises:
            NotFoundError: no workflow has that name here, or not in that version (the message
                lists the versions there are).
        """
        if version is None:
            newest = self._newest.get(name)
            if newest is None:
                raise NotFoundError(f"unknown workflow {name!r}")
            return newest
        versions = self._workflows.get(name)
        if not versions:
            raise NotFoundError(f"unknown workflow {name!r}")
        found = versions.get(version)
        if found is None:
            raise NotFoundError(
                f"workflow {name!r} has no version {version!r} here"
                f" (registered: {', '.join(self.versions(name))})"
            )
        return found

    def find(self, name: str, version: str | None = None) -> Workflow | None:
        """`get`, or None where it would raise."""
        try:
            return self.get(name, version)
        except NotFoundError:
            return None

    def versions(self, name: str) -> list[str]:
        """The versions of `name` registered here, newest first (none: [])."""
        return sorted(self._workflows.get(name, {}), key=version_order, reverse=True)

    def has_terminal_hook(self, name: str) -> bool:
        """Whether any version of `name` here has an on_terminal hook (asked as each instance
        ends: no sorting of versions)."""
        return any(w.on_terminal is not None for w in self._workflows.get(name, {}).values())

    def names(self) -> list[str]:
        return sorted(self._workflows)

    def runs(self) -> list[str]:
        """Every (name, version) registered here, as run keys ('name@version'): what this
        process claims."""
        return sorted(run_key(w.name, w.version) for w in self)

    def outdated_by(self, runs: Iterable[tuple[str, str]]) -> set[str]:
        """The workflows registered here of which `runs` ((name, version) pairs: what other
        live processes run) hold a version newer than the newest here. A due schedule of one
        of them is left for such a process to fire (due_work.py), so that every fire starts
        the newest version the deployment runs."""
        outdated: set[str] = set()
        for name, version in runs:
            newest = self._newest.get(name)
            if newest is not None and version_order(version) > version_order(newest.version):
                outdated.add(name)
        return outdated

    def newest(self) -> list[Workflow]:
        """The newest version of each workflow, by name: what an enqueue without a version
        starts."""
        return [self.get(name) for name in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._workflows

    def __iter__(self) -> Iterator[Workflow]:
        """Every version of every workflow, by name, newest version first."""
        for name in self.names():
            for version in self.versions(name):
                yield self._workflows[name][version]

    def __len__(self) -> int:
        """How many workflows (names) are registered."""
        return len(self._workflows)


def is_missing(exc: ImportError, module_name: str) -> bool:
    """Whether importing `module_name` failed because it (or a package it is in) is not
    there, rather than because its own code imports what is not (ModuleNotFoundError.name
    says which module was not found)."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    return missing is not None and (module_name == missing or module_name.startswith(f"{missing}."))


_PACKAGE_FOLDER = str(Path(__file__).resolve().parent.parent) + os.sep
# Where the standard library and installed packages live: a frame there is a library's.
_LIBRARY_FOLDERS = tuple(
    {
        os.path.join(sysconfig.get_paths()[key], "")
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
    }
)


def error_line(exc: Exception) -> str:
    """`Type: message (file, line N)`: where an import (or a user's factory) failed, for a
    person to fix it: the innermost frame of the user's own code (a Workflow that Laneway
    refuses is the user's line that made it, not the check in Laneway that refused it; an
    exception a library raised is the user's line that called it, `json.loads` at module level
    the module's line, not json's); else the innermost outside Laneway (a user's module that is
    itself an installed package)."""
    where = ""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" ({exc.filename}, line {exc.lineno})"
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        # Not Laneway's, nor generated code's (a dataclass's __init__, "<string>")
        theirs = [f for f in frames if not f.filename.startswith((_PACKAGE_FOLDER, "<"))]
        own = [f for f in theirs if not f.filename.startswith(_LIBRARY_FOLDERS)]
        if frame := (own or theirs or frames)[-1:]:
            where = f" ({frame[0].filename}, line {frame[0].lineno})"
    message = str(exc.msg if isinstance(exc, SyntaxError) else exc).splitlines()
    return f"{type(exc).__name__}: {message[0] if message else ''}{where}"
