"""record_builders.builder: a frozen record built without its constructor is the same record,
and a class the builder cannot build as its constructor would is refused (pure, no I/O)."""

import asyncio
import dataclasses
import inspect
import uuid
from dataclasses import dataclass, field

import pytest

from laneway.engine.record_builders import builder
from laneway.engine.template import OperationContext, OperationResult, completed, failed
from laneway.model import OperationRecord
from laneway.writes import CheckpointWrite, CompleteWrite, OperationOutcome

_ID = uuid.UUID(int=7)


def _record(**changes: object) -> dict[str, object]:
    values: dict[str, object] = {
        "operation_id": _ID,
        "instance_id": uuid.UUID(int=8),
        "stage": "review",
        "position": 1001,
        "type": "check",
        "status": "failed",
        "attempts": 3,
        "error": "no",
        "data": None,
        "metadata": {"reason": "x"},
        "started_at": None,
        "finished_at": None,
    }
    return {**values, **changes}


@pytest.mark.parametrize("changes", [{}, {"fix_cycle": 2}, {"data": {"a": [1]}}])
def test_built_record_equals_the_constructed_one_when_built_from_the_same_arguments(
    changes: dict[str, object],
) -> None:
    values = _record(**changes)
    built = builder(OperationRecord)(**values)  # type: ignore[arg-type]
    made = OperationRecord(**values)  # type: ignore[arg-type]
    assert type(built) is OperationRecord
    assert built == made
    assert repr(built) == repr(made)
    assert dataclasses.asdict(built) == dataclasses.asdict(made)


def test_built_record_is_frozen_when_built() -> None:
    built = builder(OperationRecord)(**_record())  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.stage = "other"  # type: ignore[misc]


def test_builder_takes_the_constructors_arguments_when_made() -> None:
    for cls in (
        OperationRecord,
        OperationContext,
        OperationOutcome,
        CheckpointWrite,
        CompleteWrite,
    ):
        built = inspect.signature(builder(cls))
        made = inspect.signature(cls)
        assert [(p.name, p.kind, repr(p.default)) for p in built.parameters.values()] == [
            (p.name, p.kind, repr(p.default)) for p in made.parameters.values()
        ]


async def test_default_factory_runs_per_record_when_its_field_is_not_given() -> None:
    make = builder(OperationContext)
    values: dict[str, object] = {
        "instance_id": _ID,
        "operation_id": _ID,
        "operation_type": "t",
        "stage": "s",
        "attempt": 1,
        "max_attempts": 1,
        "context": {},
        "initial_context": {},
        "workflow_type": "w",
    }
    first, second = make(**values), make(**values)  # type: ignore[arg-type]
    assert isinstance(first.cancelled, asyncio.Event)
    assert first.cancelled is not second.cancelled
    given = asyncio.Event()
    assert make(**values, cancelled=given).cancelled is given  # type: ignore[arg-type]


def test_missing_or_unknown_argument_is_refused_when_building() -> None:
    make = builder(OperationRecord)
    values = _record()
    del values["stage"]
    with pytest.raises(TypeError):
        make(**values)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        make(**_record(), colour="red")  # type: ignore[call-arg, arg-type]


def test_completed_and_failed_equal_their_constructors_when_built() -> None:
    assert completed() == OperationResult(status="completed")
    assert completed({"a": 1}, metadata=[2]) == OperationResult(
        status="completed", data={"a": 1}, metadata=[2]
    )
    assert failed("no", {"m": 1}) == OperationResult(
        status="failed", reason="no", metadata={"m": 1}
    )
    assert completed().data is not completed().data
    assert failed("no").data == {}


@dataclass(frozen=True, slots=True, kw_only=True)
class _Checked:
    value: int

    def __post_init__(self) -> None:
        if self.value < 0:
            raise ValueError("negative")


@dataclass(slots=True, kw_only=True)
class _Mutable:
    value: int


@dataclass(frozen=True, kw_only=True)
class _Unslotted:
    value: int


@dataclass(frozen=True, slots=True)
class _Positional:
    value: int


@dataclass(frozen=True, slots=True, kw_only=True)
class _Hidden:
    value: int
    _cache: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class _NotInit:
    value: int
    seen: list[int] = field(default_factory=list, init=False)


@pytest.mark.parametrize("cls", [_Checked, _Mutable, _Unslotted, _Positional, _Hidden, _NotInit])
def test_builder_refuses_a_class_it_cannot_build_as_its_constructor_does(cls: type) -> None:
    with pytest.raises(TypeError):
        builder(cls)


def test_unchecked_builder_leaves_post_init_out_when_asked() -> None:
    assert builder(_Checked, checked=False)(value=-1).value == -1


def test_built_step_writes_equal_their_constructors_when_built() -> None:
    common = {"instance_id": uuid.uuid4(), "attempt": 2, "epoch": 3, "state_json": "{}"}
    checkpoint = {**common, "next_action": "two", "next_params_json": "null", "stage": "s"}
    completion = {**common, "result_json": '{"a": 1}', "message": "done"}
    assert builder(CheckpointWrite)(**checkpoint) == CheckpointWrite(**checkpoint)  # type: ignore[arg-type]
    assert builder(CompleteWrite)(**completion) == CompleteWrite(**completion)  # type: ignore[arg-type]
