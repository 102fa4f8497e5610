"""`laneway preflight`: before a deploy, which instances in flight the new code could not run.

Owns reading the new code's workflows (the modules of --workflows, else LANEWAY_WORKFLOWS),
asking deployPreflight about them (of the database, or of a server with --url), and printing
the findings; the exit code gates a deploy step: 0 when nothing would be stranded, 1 when
something would.
"""

import argparse
import dataclasses
import sys

from laneway.cli import output
from laneway.cli.client import EXIT_FAILED, EXIT_OK, JSONObject
from laneway.cli.commands import open_client
from laneway.cli.output import Column, Listing
from laneway.config import Settings

PREFLIGHT = """query ($workflows: [WorkflowSpecInput!]!) {
  deployPreflight(workflows: $workflows) { name version reason detail count sampleIDs }
}"""


def new_code_settings(args: argparse.Namespace, settings: Settings) -> Settings:
    """`settings` with the new code's modules: those of --workflows when given (they replace
    LANEWAY_WORKFLOWS, which names the code running now, for the database mode's engine too).
    """
    if args.workflows is None:
        return settings
    modules = tuple(m.strip() for m in args.workflows.split(",") if m.strip())
    return dataclasses.replace(settings, workflow_modules=modules)


def new_code_specs(args: argparse.Namespace, settings: Settings) -> list[JSONObject]:
    """The WorkflowSpecInput of every workflow version in the new code's modules (`settings`
    as new_code_settings made it).

    Raises:
        InvalidInputError: a module cannot be imported.
        CommandError: the modules define no workflow (exit 2).
    """
    from laneway.cli.process import check_workflows
    from laneway.engine.preflight import specs_of

    named_by = "--workflows" if args.workflows is not None else "LANEWAY_WORKFLOWS"
    registry = check_workflows(settings, allow_none=False, named_by=named_by, allow_flag=None)
    return [
        {
            "name": spec.name,
            "version": spec.version,
            "actions": list(spec.actions),
            "stages": list(spec.stages) if spec.stages is not None else None,
        }
        for spec in specs_of(registry)
    ]


def checked_files(settings: Settings) -> str:
    """`module (file), …` of the new code's modules, as new_code_specs imported them."""
    return ", ".join(
        f"{name} ({getattr(sys.modules.get(name), '__file__', None) or 'no file'})"
        for name in settings.workflow_modules
    )


def findings_table(findings: list[JSONObject]) -> Listing:
    # The sample ids are the one column never left out (a folded id cannot be copied); the
    # count, the number a deploy gate is about, goes last of the others, the detail first.
    columns = [
        Column("workflow", drop=2),
        Column("version", drop=4),
        Column("reason", drop=3),
        Column("detail", drop=5),
        Column("count", drop=1, numeric=True),
        Column("some of them", whole=True),
    ]
    rows = [
        [
            *(finding[key] for key in ("name", "version", "reason", "detail")),
            str(finding["count"]),
            "\n".join(finding["sampleIDs"][:3]),
        ]
        for finding in findings
    ]
    return Listing("Instances in flight the new code could not run", columns, rows)


async def preflight(args: argparse.Namespace, settings: Settings) -> int:
    """Print what deploying the new code would strand; exit 1 when anything would."""
    settings = new_code_settings(args, settings)
    specs = new_code_specs(args, settings)
    async with open_client(args, settings) as client:
        findings: list[JSONObject] = (await client.execute(PREFLIGHT, workflows=specs))[
            "deployPreflight"
        ]
    if args.json:
        output.print_json(findings)
    else:
        console = output.console()
        # Which files were checked: run from the old code's folder, the old code would be (the
        # current folder comes first on the import path), and a person reading this sees it.
        console.print(f"The new code: {checked_files(settings)}.", markup=False)
        if findings:
            console.print(findings_table(findings))
        else:
            versions = ", ".join(f"{spec['name']}@{spec['version']}" for spec in specs)
            console.print(
                f"Safe to deploy: the new code ({versions}) runs every instance in flight."
            )
    return EXIT_FAILED if findings else EXIT_OK
