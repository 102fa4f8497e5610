"""Template interpreter: compiles a Template into a Workflow with one action per stage.

Owns compiling (TemplateWorkflow, one handler per stage, the context as params) and the
start-up check of compiled templates, and is where the template API is imported from.
Running a stage (operations in sequence or in parallel, attempts, timeouts, conditions,
fix-verify cycles, one operation row per outcome, checkpoints) is stage_run.py's (where a
fix-verify loop stands: fix_cycles.py). Runs on
the ordinary runner: writes no SQL and adds no instance status. Definitions: template.py.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from laneway.engine.context_budget import ContextTooLargeError
from laneway.engine.fix_cycles import FIX_POSITION_BASE
from laneway.engine.handler_map import Handler, Workflow
from laneway.engine.stage_pauses import retry_params
from laneway.engine.stage_run import StageFailedError, stage_handler
from laneway.engine.template import (
    Checkpoint,
    Condition,
    Operation,
    OperationContext,
    OperationHandler,
    OperationRegistry,
    OperationResult,
    QueueSettings,
    Stage,
    Template,
    child_params,
    completed,
    failed,
    merge_context,
    operation_id_for,
    stage_message,
    stage_progress,
    step_after_stage,
)
from laneway.engine.template_wiring import check_templates, describe_problems, validate
from laneway.errors import InvalidInputError
from laneway.model import JSONValue

__all__ = [
    "FIX_POSITION_BASE",
    "Checkpoint",
    "Condition",
    "ContextTooLargeError",
    "Operation",
    "OperationContext",
    "OperationHandler",
    "OperationRegistry",
    "OperationResult",
    "QueueSettings",
    "Stage",
    "StageFailedError",
    "Template",
    "TemplateWorkflow",
    "check_templates",
    "check_workflows",
    "child_params",
    "compile_template",
    "completed",
    "describe_problems",
    "failed",
    "merge_context",
    "operation_id_for",
    "stage_message",
    "stage_progress",
    "step_after_stage",
    "templates_of",
    "validate",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class TemplateWorkflow(Workflow):
    """The runnable form of a template: one action per stage, named after the stage.

    Operations retry themselves (`max_attempts`); a critical operation that still fails
    ends the instance failed at once (StageFailedError is a PermanentFailure). Instance
    attempts (`retry`, RetryPolicy) cover lost workers: the next attempt re-runs only the
    operations of the stage whose outcome is not final yet (a completed row is, and so is a
    non-critical operation's failure). `retry()` of a failed instance does the same.
    """

    template: Template
    operations: Mapping[str, OperationHandler]

    @property
    def kind(self) -> str:
        return "template"

    @property
    def stages(self) -> list[str]:
        return self.template.stage_names

    def retry_params(self, action: str, params: JSONValue, state: JSONValue) -> JSONValue:
        """A stage's checkpoint that expired pauses again when retried (stage_pauses.py)."""
        return retry_params(state)

    def validate_params(self, params: JSONValue) -> JSONValue:
        """Run the template's validator; the result is the initial context, a JSON object.

        Raises:
            InvalidInputError: the validator rejected the params, or they are not an object.
        """
        value = Workflow.validate_params(self, params)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise InvalidInputError(f"params of template {self.name!r} must be a JSON object")
        return value


def compile_template(
    template: Template, operations: Mapping[str, OperationHandler]
) -> TemplateWorkflow:
    """The workflow that runs `template`, finding operation handlers in `operations`.

    Handlers are looked up when an operation runs, so `operations` (an OperationRegistry)
    may still grow; `check_templates` at start-up proves nothing is missing.
    """
    handlers: dict[str, Handler] = {
        stage.name: stage_handler(template, index, operations)
        for index, stage in enumerate(template.stages)
    }
    return TemplateWorkflow(
        name=template.type,
        handlers=handlers,
        initial=template.stages[0].name,
        queue=template.queue,
        retry=template.retry,
        validator=template.validator,
        description=template.description,
        version=str(template.version),
        template=template,
        operations=operations,
    )


def templates_of(workflows: Iterable[Workflow]) -> list[Template]:
    """The templates behind the compiled ones among `workflows` (e.g. a WorkflowRegistry)."""
    return [w.template for w in workflows if isinstance(w, TemplateWorkflow)]


def check_workflows(workflows: Iterable[Workflow]) -> None:
    """Start-up check of every compiled template among `workflows` (e.g. a registry):
    its operation handlers, checkpoints and next workflow, naming every problem at once.

    Raises:
        InvalidInputError: some template is badly wired; the message lists all problems.
    """
    listed = list(workflows)
    names = {workflow.name for workflow in listed}
    problems: list[str] = []
    for workflow in listed:
        if isinstance(workflow, TemplateWorkflow):
            problems += validate([workflow.template], workflow.operations, names)
    if problems:
        raise InvalidInputError(describe_problems(problems))
