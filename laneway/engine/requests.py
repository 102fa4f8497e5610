"""Enqueue requests: what a caller asks for, checked and turned into the row the store inserts.

Owns the limits of an enqueue's input (key length, delay, priority), the instance ids
(time-ordered), and the NewInstance records of an enqueue and of a schedule's fire.
"""

import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from laneway.engine.handler_map import Workflow, check_name
from laneway.engine.payloads import encode_json, text_storable
from laneway.engine.schedules import fire_key, parse_recurrence
from laneway.errors import InvalidInputError
from laneway.model import JSONValue, NewInstance, ScheduleRecord

MAX_KEY_CHARS = 255
# A child's key (enqueue_child): its idempotency key `chain:<parent id>:<name>#<key>` stays
# within MAX_KEY_CHARS for any workflow name (6 + 36 + 1 + 64 + 1 + 128 = 236).
MAX_CHILD_KEY_CHARS = 128
MAX_DELAY_MS = 366 * 24 * 3600 * 1000.0
PRIORITY_RANGE = (-1_000_000, 1_000_000)
MAX_CONCURRENCY = 1_000_000  # a queue's or a key's cap
# A queue's or a key's starts per minute. The claim and the waiting reasons compute in double
# precision (rate / 60 tokens a second, (1 - tokens) * 60 / rate seconds to the next token):
# a rate near the smallest double underflows the first (failing every claim round, of every
# queue) and overflows the second. From one start about every 6.9 days to 10^9 a minute, no
# step comes near either edge, and a slower rate is a paused queue in all but name.
MIN_RATE_PER_MINUTE = 0.0001
MAX_RATE_PER_MINUTE = 1e9


def new_instance_id() -> UUID:
    """A UUIDv7-style id: time-ordered, so new rows land at the right edge of the index."""
    return next(new_instance_ids(1))


def new_instance_ids(count: int) -> Iterator[UUID]:
    """`count` ids as new_instance_id makes them (this millisecond's, each with 74 random
    bits), their randomness drawn at once: one read of the system's CSPRNG for a batch, not
    one per id (1.3 us of the ~19 us of Python a batch enqueue spends per row)."""
    stamp = (time.time_ns() // 1_000_000 & _MILLIS) << 80 | _UUID7_SET
    noise = os.urandom(10 * count)
    for offset in range(0, 10 * count, 10):
        yield uuid_from_int(stamp | int.from_bytes(noise[offset : offset + 10]) & _UUID7_RANDOM)


def uuid_from_int(value: int) -> UUID:
    """UUID(int=value) for a value known to be a 128-bit id, without the constructor's checks
    and conversions (a sixth of the cost of one id)."""
    made: UUID = _new_uuid(UUID)
    _set_uuid_int(made, value)
    _set_uuid_is_safe(made, _SAFE_UNKNOWN)
    return made


_MILLIS = 2**48 - 1
# Of the 80 bits after the time: the version's 4 (7) and the variant's 2 (RFC 4122) are set.
_UUID7_RANDOM = 2**80 - 1 & ~(0xF << 76) & ~(0x3 << 62)
_UUID7_SET = (0x7 << 76) | (0x2 << 62)
_new_uuid = object.__new__
# UUID's slots, set through their descriptors; and its enum member, looked up once (an Enum
# member read from its class costs ~1 us on 3.11, more than the rest of the id).
_set_uuid_int = UUID.__dict__["int"].__set__
_set_uuid_is_safe = UUID.__dict__["is_safe"].__set__
_SAFE_UNKNOWN = uuid.SafeUUID.unknown


@dataclass(frozen=True, slots=True, kw_only=True)
class EnqueueRequest:
    """One instance to enqueue, for `Engine.enqueue_many`."""

    name: str
    params: JSONValue = None
    queue: str | None = None
    priority: int = 0
    delay_ms: float = 0.0
    idempotency_key: str | None = None
    singleton_key: str | None = None
    parent_id: UUID | None = None
    concurrency_key: str | None = None
    version: str | None = None  # None: the newest version registered in the enqueuing process


def check_key(value: str | None, what: str, *, limit: int = MAX_KEY_CHARS) -> str | None:
    """`value` if it is a usable idempotency, singleton, concurrency or child key, of at most
    `limit` characters (None stays None)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, not {type(value).__name__}")
    if not 1 <= len(value) <= limit:
        raise InvalidInputError(f"{what} must be 1-{limit} characters")
    if not text_storable(value):
        raise InvalidInputError(f"{what} must not contain NUL or lone surrogate characters")
    return value


def check_signal(name: str, idempotency_key: str | None) -> None:
    """Refuse a signal's bad name or idempotency key (Engine.signal, and FakeTools as it)."""
    check_name(name, "signal name")
    check_key(idempotency_key, "idempotencyKey")


def child_key(parent_id: UUID, name: str, key: str | None) -> str:
    """The idempotency key of the child of `parent_id` of workflow `name` and `key`: one child
    per (parent, workflow, key), so a parent re-run after a crash finds the same child.

    With no key, `chain:<parent id>:<name>`, the key of every child before keys existed (an
    instance in flight across an upgrade finds its child). With one, `...<name>#<key>`: a
    name may hold `:` but never `#`, so no (name, key) pair spells another's key.

    Raises:
        InvalidInputError: a key that is not 1-MAX_CHILD_KEY_CHARS characters, or holds NUL
            or a lone surrogate.
    """
    check_key(key, "child key", limit=MAX_CHILD_KEY_CHARS)
    base = f"chain:{parent_id}:{name}"
    return base if key is None else f"{base}#{key}"


def check_cap(value: object, what: str) -> None:
    """Refuses a cap (a concurrency) that is not an integer from 1 to MAX_CONCURRENCY."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONCURRENCY:
        raise InvalidInputError(f"{what} must be an integer from 1 to {MAX_CONCURRENCY}")


def check_rate(value: float | None, what: str) -> None:
    """Refuses a rate per minute outside MIN_RATE_PER_MINUTE..MAX_RATE_PER_MINUTE (None: no
    limit), in the words of the API's input guard, which holds the same bounds."""
    if value is not None and not MIN_RATE_PER_MINUTE <= value <= MAX_RATE_PER_MINUTE:  # and NaN
        raise InvalidInputError(
            f"{what} must be at least {MIN_RATE_PER_MINUTE:g} and at most"
            f" {MAX_RATE_PER_MINUTE:.0f} (or null for no limit)"
        )


def new_instance(
    workflow: Workflow, request: EnqueueRequest, instance_id: UUID | None = None
) -> NewInstance:
    """The validated row of `request` for `workflow`: queue, priority, delay, params and keys;
    its id `instance_id` (one of a batch's new_instance_ids), else a new one.

    Raises:
        InvalidInputError: a bad queue name, priority, delay, params or key.
    """
    queue = (
        check_name(request.queue, "queue name")
        if request.queue is not None
        else workflow.queue_name
    )
    if isinstance(request.priority, bool) or not isinstance(request.priority, int):
        raise InvalidInputError("priority must be an integer")
    if not PRIORITY_RANGE[0] <= request.priority <= PRIORITY_RANGE[1]:
        raise InvalidInputError(f"priority must be within {PRIORITY_RANGE}")
    delay_ms = float(request.delay_ms or 0.0)
    if not 0.0 <= delay_ms <= MAX_DELAY_MS:  # also refuses NaN
        raise InvalidInputError(f"delayMs must be between 0 and {MAX_DELAY_MS:.0f}")
    params = workflow.validate_params(request.params)
    return NewInstance(
        instance_id=new_instance_id() if instance_id is None else instance_id,
        name=workflow.name,
        queue=queue,
        priority=request.priority,
        max_attempts=workflow.retry.max_attempts,
        delay_ms=delay_ms,
        params_json=encode_json(params, what="params"),
        first_action=workflow.initial,
        idempotency_key=check_key(request.idempotency_key, "idempotencyKey"),
        singleton_key=check_key(request.singleton_key, "singletonKey"),
        parent_id=request.parent_id,
        concurrency_key=check_key(request.concurrency_key, "concurrencyKey"),
        version=workflow.version,
    )


def scheduled_instance(workflow: Workflow, schedule: ScheduleRecord) -> NewInstance:
    """The instance a schedule's due occurrence enqueues, keyed by that occurrence."""
    return NewInstance(
        instance_id=new_instance_id(),
        name=workflow.name,
        queue=workflow.queue_name,
        priority=0,
        max_attempts=workflow.retry.max_attempts,
        delay_ms=0.0,
        params_json=encode_json(schedule.params, what="params"),
        first_action=workflow.initial,
        idempotency_key=fire_key(schedule.name, schedule.next_run_at),
        version=workflow.version,
    )


def planned_fire(
    workflow: Workflow | None, schedule: ScheduleRecord, now: datetime
) -> tuple[NewInstance | None, datetime]:
    """The instance a due schedule of `workflow` enqueues (None: the workflow is not here), and
    its next fire after `now` (a backlog of missed fires collapses to one)."""
    if workflow is None:
        return None, schedule.next_run_at
    recurrence = parse_recurrence(
        every=schedule.every, cron=schedule.cron, timezone=schedule.timezone
    )
    next_run_at = recurrence.next_fire_after(max(now, schedule.next_run_at))
    return scheduled_instance(workflow, schedule), next_run_at
