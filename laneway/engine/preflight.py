"""The deploy preflight: which instances in flight the code about to be deployed could not
run, before it is deployed.

Owns the spec of a workflow's code (name, version, action names and, for a template, its
stages), the specs of a registry (the new code's, loaded from its modules), and the findings:
an unfinished instance whose (name, version) no spec has (VERSION_GONE: nobody would run it
any more), or whose next action is missing from its version's spec (ACTION_MISSING: the
renamed-handler accident; STAGE_MISSING for a template's stage). The store counts what is in
flight (store/deploys.py); no other I/O.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from laneway.engine.handler_map import Workflow
from laneway.engine.names import check_name, check_version
from laneway.engine.registry import WorkflowRegistry, version_order
from laneway.errors import InvalidInputError
from laneway.model import InFlight
from laneway.store import Store

PreflightReason = Literal["VERSION_GONE", "ACTION_MISSING", "STAGE_MISSING"]
SAMPLE_SIZE = 10  # ids per finding
MAX_SPECS = 1000  # workflow versions per preflight
MAX_ACTIONS = 1000  # actions (or stages) per spec


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowSpec:
    """What the new code of one workflow version can run: its action names, and for a template
    its stage names (a template's actions are its stages)."""

    name: str
    version: str
    actions: tuple[str, ...]
    stages: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        check_name(self.name, "workflow name")
        if self.stages is not None and not self.stages:
            # A template has at least one stage: no stages is a handler map's spec (what
            # `workflows { stages }` answers for one), judged by its actions.
            object.__setattr__(self, "stages", None)
        object.__setattr__(self, "version", check_version(self.version, "version"))
        for what, names in (("actions", self.actions), ("stages", self.stages or ())):
            if len(names) > MAX_ACTIONS:
                raise InvalidInputError(f"{self.name!r}: at most {MAX_ACTIONS} {what}")
            for name in names:
                check_name(name, f"{what[:-1]} name")

    @classmethod
    def of(cls, workflow: Workflow) -> "WorkflowSpec":
        """The spec of a workflow version's code."""
        return cls(
            name=workflow.name,
            version=workflow.version,
            actions=tuple(sorted(workflow.handlers)),
            stages=tuple(workflow.stages) if workflow.kind == "template" else None,
        )

    def missing(self, action: str) -> PreflightReason | None:
        """Why this code could not run `action` next (None: it can)."""
        if self.stages is not None:
            return None if action in self.stages else "STAGE_MISSING"
        return None if action in self.actions else "ACTION_MISSING"


@dataclass(frozen=True, slots=True, kw_only=True)
class PreflightFinding:
    """Instances in flight that the new code could not run, of one workflow version and one
    reason; `detail` names the missing version or action, for a person."""

    name: str
    version: str
    reason: PreflightReason
    detail: str
    count: int
    sample_ids: tuple[str, ...]


def specs_of(registry: WorkflowRegistry) -> list[WorkflowSpec]:
    """The specs of every workflow version in `registry` (the code about to be deployed)."""
    return [WorkflowSpec.of(workflow) for workflow in registry]


def _by_version(specs: Sequence[WorkflowSpec]) -> dict[tuple[str, str], WorkflowSpec]:
    if len(specs) > MAX_SPECS:
        raise InvalidInputError(f"at most {MAX_SPECS} workflow versions per preflight")
    found: dict[tuple[str, str], WorkflowSpec] = {}
    for spec in specs:
        if (spec.name, spec.version) in found:
            raise InvalidInputError(
                f"workflow {spec.name!r} version {spec.version!r} is listed twice"
            )
        found[spec.name, spec.version] = spec
    return found


def judge(
    specs: Sequence[WorkflowSpec], in_flight: Iterable[InFlight]
) -> list[tuple[InFlight, PreflightReason, str]]:
    """What the new code (`specs`) could not run of what is in flight: each group of
    instances with its reason and detail, VERSION_GONE for a whole (name, version) (its
    actions then go unjudged: nobody would run them at all)."""
    by_version = _by_version(specs)
    versions: dict[str, list[str]] = {}
    for name, version in by_version:
        versions.setdefault(name, []).append(version)
    findings: list[tuple[InFlight, PreflightReason, str]] = []
    for group in in_flight:
        found = by_version.get((group.name, group.version))
        if group.action is None:
            if found is None:
                findings.append((group, "VERSION_GONE", _gone(group, versions)))
            continue
        reason = found.missing(group.action) if found is not None else None
        if reason is not None:
            findings.append((group, reason, group.action))
    return findings


def _gone(group: InFlight, versions: dict[str, list[str]]) -> str:
    others = sorted(versions.get(group.name, []), key=version_order, reverse=True)
    if not others:
        return f"workflow {group.name!r} is not in the new code"
    return (
        f"version {group.version!r} is not in the new code"
        f" (it has {', '.join(repr(v) for v in others)})"
    )


class DeployCalls:
    """The preflight, on the Engine's store and registry."""

    store: Store
    registry: WorkflowRegistry

    async def preflight(
        self, specs: Sequence[WorkflowSpec] | None = None
    ) -> list[PreflightFinding]:
        """The instances in flight that the code of `specs` could not run (None: the code
        registered in this process), per workflow version and reason, with counts and the
        newest ids; empty when the deploy strands nothing.

        Raises:
            InvalidInputError: a spec is repeated, or there are too many.
        """
        specs = specs_of(self.registry) if specs is None else specs
        judged = judge(specs, await self.store.in_flight())
        findings = []
        for group, reason, detail in judged:
            action = None if reason == "VERSION_GONE" else group.action
            sample = await self.store.in_flight_sample(
                group.name, group.version, action, SAMPLE_SIZE
            )
            findings.append(
                PreflightFinding(
                    name=group.name,
                    version=group.version,
                    reason=reason,
                    detail=detail,
                    count=group.instances,
                    sample_ids=tuple(str(instance_id) for instance_id in sample),
                )
            )
        return findings
