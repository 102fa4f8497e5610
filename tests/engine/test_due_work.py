"""What the claim loop's maintenance logs of the instances it wakes or recovers: a final failure
no handler raised (a wait's timeout, an expired checkpoint, a lost worker) is the same ERROR
`instance failed` line as a handler's, so one alert rule sees every failed instance. Found by an
outside audit: the first two were counted by the metrics but never logged, and a lost worker's
final failure was the WARNING of a recovery that goes on, with no error."""

import logging

import pytest

from laneway.engine import Done, HandlerContext, Pause, WaitForSignal, Workflow
from laneway.model import JSONValue, Status
from laneway.store import Store
from tests.engine.helpers import eventually, make_engine
from tests.workflows import noop

WAIT_SECONDS = 0.05


async def _wait_for_a_signal(ctx: HandlerContext, params: JSONValue) -> WaitForSignal:
    return WaitForSignal("never", WAIT_SECONDS, "done")  # no on_timeout: the timeout fails it


async def _pause_until_it_expires(ctx: HandlerContext, params: JSONValue) -> Pause:
    return Pause("decide", "done", timeout_seconds=WAIT_SECONDS)  # no on_expiry: it fails


async def _done(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done()


signal_waiter = Workflow(
    "signal_waiter", handlers={"park": _wait_for_a_signal, "done": _done}, initial="park"
)
expiring = Workflow(
    "expiring", handlers={"park": _pause_until_it_expires, "done": _done}, initial="park"
)


def _failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "instance failed"]


@pytest.mark.parametrize(
    ("workflow", "error"),
    [
        (signal_waiter, "SignalTimeout: timed out after 0.05 s waiting for signal 'never'"),
        (expiring, "CheckpointExpired: checkpoint 'decide' expired after 0.05 s"),
    ],
    ids=["signal timeout", "checkpoint expiry"],
)
async def test_an_instance_failed_by_its_wake_time_is_logged_as_a_final_failure(
    store: Store, caplog: pytest.LogCaptureFixture, workflow: Workflow, error: str
) -> None:
    engine = make_engine(store, workflow)
    instance_id = (await engine.enqueue(workflow.name)).instance_id
    await engine.tick()  # parks it, with a wake time

    async def status_after_a_round() -> Status | None:
        await engine.tick()  # its maintenance wakes the instance once the time came
        record = await engine.get(instance_id)
        return None if record is None else record.status

    with caplog.at_level(logging.INFO):
        await eventually(status_after_a_round, lambda status: status == Status.FAILED)
    [logged] = _failures(caplog)
    assert logged.levelno == logging.ERROR
    # The runner's line, on the runner's logger, with its fields: one rule catches both.
    assert logged.name == "laneway.engine.runner"
    fields = logged.__dict__
    assert (fields["instance_id"], fields["workflow"]) == (str(instance_id), workflow.name)
    assert (fields["attempt"], fields["error"]) == (1, error)
    assert "traceback" not in fields  # no code of the user's raised


@pytest.mark.parametrize(
    ("attempts", "max_recoveries", "level", "message", "error"),
    [
        (
            1,
            5,
            logging.WARNING,
            "lease expired, instance recovered",
            "WorkerLost: lease expired during attempt 1",
        ),
        (
            3,
            5,
            logging.ERROR,
            "instance failed",
            "WorkerLost: lease expired during attempt 3 (3 of 3 of its step)",
        ),
        (
            1,
            0,
            logging.ERROR,
            "instance failed",
            "DeadLettered: its worker was lost 1 time (recovery cap 0), last during attempt 1",
        ),
    ],
    ids=["retried", "out of attempts", "dead-lettered"],
)
async def test_a_lost_worker_is_logged_with_its_error_and_at_error_when_the_instance_fails(
    store: Store,
    caplog: pytest.LogCaptureFixture,
    attempts: int,
    max_recoveries: int,
    level: int,
    message: str,
    error: str,
) -> None:
    engine = make_engine(store, noop, max_recoveries=max_recoveries)
    instance_id = (await engine.enqueue("noop")).instance_id
    async with store.connection() as conn:  # a worker claimed it, then vanished
        await conn.execute(
            "UPDATE laneway.instances SET status = 'running', owner_id = 'gone', attempts = $1,"
            " max_attempts = 3, lease_expires_at = now() - interval '1 second'",
            attempts,
        )
    with caplog.at_level(logging.INFO):
        await engine.claim_loop.maintain()
    said = {"lease expired, instance recovered", "instance failed"}
    [logged] = [r for r in caplog.records if r.getMessage() in said]
    assert (logged.levelno, logged.getMessage()) == (level, message)
    fields = logged.__dict__
    assert (fields["instance_id"], fields["error"]) == (str(instance_id), error)
    if level == logging.ERROR:  # the runner's line and fields, as a handler's final failure
        assert logged.name == "laneway.engine.runner"
        assert (fields["workflow"], fields["attempt"]) == ("noop", attempts)
        assert "traceback" not in fields
