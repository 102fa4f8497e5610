"""GraphQL types of workflow versions and deploys: the (name, version) pairs a worker runs, and
the deploy preflight (the spec of the code about to be deployed, and the findings).

Owns those types and the deployPreflight resolver; the check itself is the engine's
(laneway/engine/preflight.py).
"""

from typing import Annotated, Any, Self

import strawberry
from strawberry import UNSET
from strawberry.types import Info

from laneway.api.graphql.arguments import given
from laneway.api.graphql.context import laneway_of
from laneway.engine.preflight import PreflightFinding as Finding
from laneway.engine.preflight import WorkflowSpec


@strawberry.type(description="One version of one workflow, as a process registered it.")
class WorkflowVersion:
    name: str = strawberry.field(description="The workflow's name.")
    version: str = strawberry.field(description="The version.")


@strawberry.input(description="One workflow version of the code about to be deployed.")
class WorkflowSpecInput:
    name: str = strawberry.field(description="The workflow's name.")
    version: str = strawberry.field(description="The version the code registers.")
    actions: list[str] = strawberry.field(
        description=(
            "Its action names: a handler map's handlers; a template's stages. At most 1000."
        )
    )
    # not `= null` in the SDL: the contract (#21) has none
    stages: list[str] | None = strawberry.field(
        default=UNSET, description="A template's stages, at most 1000; left out for a handler map."
    )


@strawberry.type(
    description=(
        "Instances in flight of one workflow version that the new code could not run, for one "
        "reason."
    )
)
class PreflightFinding:
    name: str = strawberry.field(description="The workflow's name.")
    version: str = strawberry.field(description="The version the instances run on.")
    reason: str = strawberry.field(
        description=(
            "VERSION_GONE (no spec has their version), ACTION_MISSING (their next action is not"
            " in the spec's actions) or STAGE_MISSING (a template's next stage is not in its "
            "stages)."
        )
    )
    detail: str = strawberry.field(
        description="Which version, action or stage is missing, in words."
    )
    count: int = strawberry.field(description="How many instances in flight this finding covers.")
    sample_ids: list[strawberry.ID] = strawberry.field(
        name="sampleIDs", description="Up to ten of their ids, newest first."
    )

    @classmethod
    def from_finding(cls, finding: Finding) -> Self:
        return cls(
            name=finding.name,
            version=finding.version,
            reason=finding.reason,
            detail=finding.detail,
            count=finding.count,
            sample_ids=[strawberry.ID(i) for i in finding.sample_ids],
        )


async def resolve_deploy_preflight(
    info: Info[Any, Any],
    workflows: Annotated[
        list[WorkflowSpecInput],
        strawberry.argument(
            description="Every workflow version the code about to be deployed registers, at "
            "most 1000 (BAD_USER_INPUT beyond)."
        ),
    ],
) -> list[PreflightFinding]:
    """What the code described by `workflows` could not run of the instances in flight, per
    workflow version and reason, with counts and up to ten of the newest ids each; empty when
    deploying it strands nothing."""
    specs = [
        WorkflowSpec(
            name=spec.name,
            version=spec.version,
            actions=tuple(spec.actions),
            stages=tuple(stages) if (stages := given(spec.stages)) is not None else None,
        )
        for spec in workflows
    ]
    findings = await laneway_of(info.context).services.engine.preflight(specs)
    return [PreflightFinding.from_finding(finding) for finding in findings]
