"""What the claim loop's maintenance logs of the instances it ends: a final failure no handler
raised (a wait's timeout, an expired checkpoint) is the same ERROR `instance failed` line as a
handler's, so one alert rule sees every failed instance. Found by an outside audit: such
failures were counted by the metrics but never logged."""

import logging

import pytest

from laneway.engine import Done, HandlerContext, Pause, WaitForSignal, Workflow
from laneway.model import JSONValue, Status
from laneway.store import Store
from tests.engine.helpers import eventually, make_engine

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
