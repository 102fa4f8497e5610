"""A template that declares its queue's settings, built as each deploy of it would declare them
(tests/engine/test_queue_settings.py, tests/api/test_queue_settings_api.py)."""

from laneway.engine.template_interpreter import (
    Operation,
    OperationContext,
    OperationRegistry,
    OperationResult,
    QueueSettings,
    Stage,
    Template,
    TemplateWorkflow,
    compile_template,
    completed,
)


async def _touch(ctx: OperationContext) -> OperationResult:
    return completed({})


def billing(concurrency: int, rate_per_minute: float | None = None) -> TemplateWorkflow:
    """The same template as two deploys of it would declare it, with these queue settings."""
    template = Template(
        type="billing",
        queue="billing",
        stages=[Stage(name="work", operations=[Operation(type="touch")])],
        queue_settings=QueueSettings(concurrency=concurrency, rate_per_minute=rate_per_minute),
    )
    return compile_template(template, OperationRegistry({"touch": _touch}))
