"""The start-up check of templates' wiring against one process's handlers and workflows.

Owns the problems listed together at start-up: an operation type with no handler, a next
workflow not registered, two templates of one type, a checkpoint after a stage its template
lacks. Pure; the rest of a template's shape is refused when it is built (template.py).
"""

from collections.abc import Collection, Iterable, Sequence

from laneway.engine.template import Template
from laneway.errors import InvalidInputError


def validate(
    templates: Iterable[Template],
    operation_handlers: Collection[str],
    registered_workflow_names: Collection[str],
) -> list[str]:
    """Every wiring problem of these templates, in a stable order; empty when all is well.

    Checks that each operation type has a handler, each checkpoint follows a real stage,
    each `next_workflow` is registered, and no two templates share a type.
    """
    problems: list[str] = []
    seen: set[str] = set()
    for template in templates:
        where = f"template {template.type!r}"
        if template.type in seen:
            problems.append(f"{where} is defined twice")
        seen.add(template.type)
        for stage in template.stages:
            for operation in (*stage.operations, *stage.fix_operations):
                if operation.type not in operation_handlers:
                    problems.append(
                        f"{where}, stage {stage.name!r}: no handler for operation type "
                        f"{operation.type!r}"
                    )
        stage_names = set(template.stage_names)
        for checkpoint in template.checkpoints:
            if checkpoint.after_stage not in stage_names:
                problems.append(
                    f"{where}: checkpoint {checkpoint.label!r} follows unknown stage "
                    f"{checkpoint.after_stage!r}"
                )
        if template.next_workflow is not None and (
            template.next_workflow not in registered_workflow_names
        ):
            problems.append(f"{where}: next_workflow {template.next_workflow!r} is not registered")
    return problems


def check_templates(
    templates: Iterable[Template],
    operation_handlers: Collection[str],
    registered_workflow_names: Collection[str],
) -> None:
    """Refuse to start with badly wired templates, naming every problem at once.

    Raises:
        InvalidInputError: `validate` found problems; the message lists all of them.
    """
    problems = validate(templates, operation_handlers, registered_workflow_names)
    if problems:
        raise InvalidInputError(describe_problems(problems))


def describe_problems(problems: Sequence[str]) -> str:
    """One message naming every problem, one per line."""
    listed = "\n".join(f"  - {problem}" for problem in problems)
    return f"{len(problems)} template problem(s):\n{listed}"
