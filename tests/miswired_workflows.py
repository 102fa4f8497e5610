"""A workflow module whose template is badly wired, for the CLI's start-up refusals.

The template runs an operation type no handler is given for and chains to a workflow that is
not registered: compiling it works, the start-up check (check_workflows) names both.
"""

from laneway.engine import Operation, OperationRegistry, Stage, Template, compile_template

miswired = compile_template(
    Template(
        type="miswired",
        stages=[Stage(name="only", operations=[Operation(type="unhandled")])],
        next_workflow="nowhere",
    ),
    OperationRegistry(),
)
