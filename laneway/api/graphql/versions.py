"""GraphQL types of workflow versions and deploys: the (name, version) pairs a worker runs, and
the deploy preflight (the spec of the code about to be deployed, and the findings).

Owns those types and the deployPreflight resolver; the check itself is the engine's
(laneway/engine/preflight.py).
"""

from typing import Any, Self

import strawberry
from strawberry import UNSET
from strawberry.types import Info

from laneway.api.graphql.arguments import given
from laneway.api.graphql.context import laneway_of
from laneway.engine.preflight import PreflightFinding as Finding
from laneway.engine.preflight import WorkflowSpec


@strawberry.type
class WorkflowVersion:
    """One version of one workflow, as a process registered it."""

    name: str
    version: str


@strawberry.input
class WorkflowSpecInput:
    """One workflow version of the code about to be deployed: its action names (a handler
    map's handlers; a template's are its stages) and, for a template, its stages."""

    name: str
    version: str
    actions: list[str]
    stages: list[str] | None = UNSET  # not `= null` in the SDL: the contract (#21) has none


@strawberry.type
class PreflightFinding:
    """Instances in flight that the new code could not run. `reason`: VERSION_GONE (no spec
    has their version), ACTION_MISSING (their next action is not in the spec's actions) or
    STAGE_MISSING (a template's next stage is not in its stages); `detail` says which."""

    name: str
    version: str
    reason: str
    detail: str
    count: int
    sample_ids: list[strawberry.ID] = strawberry.field(name="sampleIDs")

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
    info: Info[Any, Any], workflows: list[WorkflowSpecInput]
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
