"""A template's pause at a checkpoint, as its state keeps it between two stages (pure, no I/O).

Owns what a checkpoint's pause leaves in a template's state (the label the next stage merges a
reviewer's input under, and a random token), and how a stage's run tells retryWorkflow's run of
the stage that paused (after its checkpoint expired: pause again) from the run after a resume.
Whether to pause: template.step_after_stage. Running stages: stage_run.py.
"""

import uuid

from laneway.model import JSONValue

_PAUSED_AT = "paused_at"
"""In a paused template's state: the checkpoint's label, under which the next stage merges a
reviewer's input into the context."""

_PAUSE_TOKEN = "pause_token"
"""In a paused template's state: what a retry of the pause's stage brings as its params (a
random token; a reviewer's input, which the stage run after a resume brings, never has it)."""

_RETRY = "retry_of_pause"


def retry_params(state: JSONValue) -> JSONValue:
    """The params of the stage that paused, when retryWorkflow re-runs it after the pause
    expired and failed the instance: they ask it to pause again (take_pause)."""
    return {_RETRY: state.get(_PAUSE_TOKEN) if isinstance(state, dict) else None}


def mark_paused(state: dict[str, JSONValue], label: str) -> None:
    """Leave a pause at checkpoint `label` in the state its step checkpoints."""
    state[_PAUSED_AT] = label  # the next stage merges the resume's input
    state[_PAUSE_TOKEN] = uuid.uuid4().hex


def take_pause(
    state: dict[str, JSONValue], params: JSONValue, *, index: int, stage_count: int
) -> tuple[JSONValue, bool]:
    """Take a pause's marks out of the state of stage `index`'s run with `params`: the label it
    paused at (None: it did not pause), and whether this run is retryWorkflow's of the stage
    that paused (and is done), not a run after a resume (the next stage, or the last again,
    with the reviewer's input). A pause from before tokens is known by a stage before the last
    being done already."""
    paused_at = state.pop(_PAUSED_AT, None)
    token = state.pop(_PAUSE_TOKEN, None)
    if paused_at is None:
        return None, False
    if token is not None:
        return paused_at, isinstance(params, dict) and params.get(_RETRY) == token
    done = state.get("stages_done")
    done = done if isinstance(done, int) else 0
    return paused_at, index < min(done, stage_count - 1)
