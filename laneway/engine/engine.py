"""Engine: the Python API of Laneway — enqueue, cancel, resume, retry, signal, queues, run.

Owns workflow semantics at the edges: validating input, choosing queue and attempts, turning
an action into the store call that performs it. An enqueue's input is checked in requests.py;
the claim loop is claim_loop.py's; the step loop is runner.py's; schedules are
schedule_calls.py's. Usable as a plain library, with no GraphQL.
"""

import asyncio
import dataclasses
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from uuid import UUID

from laneway.config import MAX_OWNER_ID_LENGTH
from laneway.engine import faults, tracing
from laneway.engine.bulk_calls import BulkCalls
from laneway.engine.claim_loop import ClaimLoop
from laneway.engine.handler_map import Workflow
from laneway.engine.locks import EntityLocks
from laneway.engine.observer import EngineObserver, NoObserver
from laneway.engine.page_calls import MAX_LIST_LIMIT, PageCalls
from laneway.engine.payloads import encode_json, json_size
from laneway.engine.preflight import DeployCalls
from laneway.engine.queue_calls import QueueCalls
from laneway.engine.registry import WorkflowRegistry
from laneway.engine.requests import EnqueueRequest as EnqueueRequest
from laneway.engine.requests import (
    check_signal,
    child_key,
    new_instance,
    new_instance_ids,
    planned_fire,
)
from laneway.engine.run_calls import RunCalls
from laneway.engine.runner_tools import EngineCalls
from laneway.engine.schedule_calls import ScheduleCalls
from laneway.engine.waits import validate_input
from laneway.errors import ConflictError, InvalidInputError, NotFoundError
from laneway.model import (
    EnqueueResult,
    EventRecord,
    InstanceRecord,
    JSONValue,
    NewInstance,
    OperationRecord,
    SignalResult,
    Status,
    Transition,
    WaitingReason,
)
from laneway.store import Store
from laneway.store.instances import keyless
from laneway.store.leases import DEFAULT_MAX_RECOVERIES

logger = logging.getLogger(__name__)

MAX_BATCH = 10_000  # instances per enqueue_many


# How long a stopping process lets steps in flight finish before it hands them back. Below
# the 10 s a container runtime usually waits between SIGTERM and SIGKILL.
DEFAULT_SHUTDOWN_GRACE_SECONDS = 8.0
# Finished instances (with their events and operations) are kept this long, then pruned.
DEFAULT_RETENTION_SECONDS = 7 * 86_400.0


def default_owner_id() -> str:
    """host:pid:random, the host name shortened so that it fits LANEWAY_OWNER_ID's limit (a
    long pod name would otherwise be cut in application_name; pid and random keep it unique)."""
    unique = f":{os.getpid()}:{uuid.uuid4().hex[:8]}"
    return socket.gethostname()[: MAX_OWNER_ID_LENGTH - len(unique)] + unique


class Engine(RunCalls, ScheduleCalls, QueueCalls, PageCalls, BulkCalls, DeployCalls):
    """Laneway's engine: one per process, sharing the database with any number of others."""

    def __init__(
        self,
        store: Store,
        registry: WorkflowRegistry | None = None,
        *,
        owner_id: str | None = None,
        lease_seconds: float = 30.0,
        poll_interval_seconds: float = 2.0,
        concurrency: int = 100,
        max_recoveries: int = DEFAULT_MAX_RECOVERIES,
        shutdown_grace_seconds: float = DEFAULT_SHUTDOWN_GRACE_SECONDS,
        retention_seconds: float = DEFAULT_RETENTION_SECONDS,
        role: str = "worker",
        observer: EngineObserver | None = None,
        tracing: bool = True,
    ) -> None:
        faults.check()  # a malformed LANEWAY_FAULTS: stop here, not run without its faults
        if lease_seconds <= 0 or poll_interval_seconds <= 0 or concurrency < 1:
            raise InvalidInputError("lease, poll interval and concurrency must be positive")
        if max_recoveries < 0 or shutdown_grace_seconds < 0 or retention_seconds < 0:
            raise InvalidInputError(
                "max_recoveries, shutdown grace and retention must not be negative"
            )
        self.store = store
        self.registry = registry if registry is not None else WorkflowRegistry()
        self.owner_id = owner_id or default_owner_id()
        self.locks = EntityLocks(store)
        # Told of claims, steps and outcomes (laneway/metrics.py counts them); none: nobody.
        self.observer: EngineObserver = observer if observer is not None else NoObserver()
        # OpenTelemetry spans of its enqueues, claims, steps and operations (Settings.tracing;
        # they are made only with the otel extra installed, see tracing.py).
        self.tracing = tracing
        self._started = False
        self._ready = False
        self._before_run: list[Callable[[], Awaitable[object]]] = []
        self.claim_loop = ClaimLoop(
            store,
            self.registry,
            owner_id=self.owner_id,
            lease_seconds=lease_seconds,
            poll_interval_seconds=poll_interval_seconds,
            concurrency=concurrency,
            retention_seconds=retention_seconds,
            max_recoveries=max_recoveries,
            shutdown_grace_seconds=shutdown_grace_seconds,
            # The newest version here, which is the newest live: a process whose newest is
            # older than a live peer's leaves the fire to that peer (due_work.py).
            plan_schedule=lambda due, now: planned_fire(
                self.registry.find(due.workflow_name), due, now
            ),
            on_terminal=self._after_terminal,
            engine_calls=EngineCalls(enqueue_child=self._enqueue_child, signal=self._signal),
            role=role,
            observer=self.observer,
            tracing=tracing,
        )

    def before_run(self, step: Callable[[], Awaitable[object]]) -> None:
        """Await `step` at the start of every `run` (open_services: the event hub's LISTEN, so
        other processes' enqueues and cancels reach the loop at once)."""
        self._before_run.append(step)

    # -- definitions -----------------------------------------------------------------------------

    def register(self, workflow: Workflow) -> None:
        """Make a workflow runnable (and enqueueable) in this process."""
        self.registry.register(workflow)

    def workflows(self) -> list[Workflow]:
        """Every registered workflow, each version of it (newest first)."""
        return list(self.registry)

    def _workflow(self, name: str, version: str | None = None) -> Workflow:
        try:
            return self.registry.get(name, version)
        except NotFoundError as exc:
            raise InvalidInputError(str(exc)) from None

    # -- instances -------------------------------------------------------------------------------

    def _checked(self, request: EnqueueRequest, instance_id: UUID | None = None) -> NewInstance:
        return new_instance(self._workflow(request.name, request.version), request, instance_id)

    async def enqueue(
        self,
        name: str,
        params: JSONValue = None,
        *,
        queue: str | None = None,
        priority: int = 0,
        delay_ms: float = 0.0,
        idempotency_key: str | None = None,
        singleton_key: str | None = None,
        parent_id: UUID | None = None,
        concurrency_key: str | None = None,
        version: str | None = None,
    ) -> EnqueueResult:
        """Create an instance of workflow `name`, or return the one its keys already name.

        It runs on `version` of the workflow, or else on the newest version registered here.

        Higher `priority` runs first; `delay_ms` holds it back on the database clock. A
        second enqueue with the same `idempotency_key` returns the first instance; with a
        `singleton_key`, at most one instance per (workflow, key) is not yet terminal. A
        `concurrency_key` (a tenant, say) puts it under its queue's caps per key, and keys
        take turns for the queue's slots.

        Raises:
            InvalidInputError: unknown workflow or version, params rejected, a bad key, delay
                or queue.
        """
        new = self._checked(
            EnqueueRequest(
                name=name,
                params=params,
                queue=queue,
                priority=priority,
                delay_ms=delay_ms,
                idempotency_key=idempotency_key,
                singleton_key=singleton_key,
                parent_id=parent_id,
                concurrency_key=concurrency_key,
                version=version,
            )
        )
        attributes = {"laneway.workflow": new.name, "laneway.queue": new.queue}
        with tracing.enqueue_span("laneway.enqueue", attributes, on=self.tracing) as traced:
            # Its steps' spans, in whatever process runs them, are children of this one.
            new = dataclasses.replace(new, trace_context=traced) if traced else new
            result = await self.store.enqueue(new)
            if traced:  # the id is the row's: an idempotent enqueue's may be an older instance
                tracing.annotate(
                    {
                        "laneway.instance_id": str(result.instance_id),
                        "laneway.created": result.created,
                    }
                )
        self.claim_loop.wake()
        if new.delay_ms > 0:
            self.claim_loop.wake_in(new.delay_ms / 1000.0)
        return result

    async def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[EnqueueResult]:
        """Enqueue many instances in one transaction, or none if any request is invalid.

        Results come in the order of `requests`, each as `enqueue` would give it; keys hold
        per request (a request naming an instance that exists, or one earlier in the batch,
        returns it, not created).

        Raises:
            InvalidInputError: any request is invalid (then nothing is written); the message
                starts with its index, `requests[3]: ...`.
        """
        if len(requests) > MAX_BATCH:
            raise InvalidInputError(f"at most {MAX_BATCH} instances per batch")
        count = {"laneway.count": len(requests)}
        with tracing.enqueue_span("laneway.enqueue_many", count, on=self.tracing) as traced:
            # Checked as the store reads them: a large batch is copied in a chunk at a time
            # while the next is checked; a request that fails its check writes nothing.
            results = await self.store.enqueue_checked(
                self._checked_all(requests, traced),
                size=len(requests),
                keyless=all(keyless(request) for request in requests),
            )
        self.claim_loop.wake()
        delays = [float(request.delay_ms) for request in requests if request.delay_ms]
        if delays:
            self.claim_loop.wake_in(min(delays) / 1000.0)
        return results

    def _checked_all(
        self, requests: Sequence[EnqueueRequest], trace: str | None
    ) -> Iterator[NewInstance]:
        """`requests` checked one by one, in order; an invalid one raises InvalidInputError
        naming its index (`requests[3]: ...`)."""
        for index, (request, instance_id) in enumerate(
            zip(requests, new_instance_ids(len(requests)), strict=True)
        ):
            try:
                new = self._checked(request, instance_id)
            except InvalidInputError as exc:
                exc.args = (f"requests[{index}]: {exc}",)  # the same error, and which request
                raise
            # Its steps' spans, in whatever process runs them, are children of the batch's.
            yield dataclasses.replace(new, trace_context=trace) if trace else new

    async def get(self, instance_id: UUID) -> InstanceRecord | None:
        return await self.store.get_instance(instance_id)

    async def waiting_reason(self, instance_id: UUID) -> WaitingReason | None:
        """Why a pending or paused instance is not running (None: it runs, ended or is unknown),
        decided by the claim's own predicates. store.waiting_reasons does a page at once."""
        return (await self.store.waiting_reasons([instance_id])).get(instance_id)

    async def cancel(self, instance_id: UUID) -> InstanceRecord:
        """Cancel an instance; a running handler is stopped wherever it runs.

        Cancelling a terminal instance is a no-op that returns it.

        Raises:
            NotFoundError: no such instance.
        """
        record, changed = await self.store.cancel_instance(instance_id)
        if changed:
            self.observer.transitioned(Transition.of(record))
            if faults.ARMED:
                await faults.hit("cancel_transition")
            self.claim_loop.stop_run(instance_id, reason="cancelled")
            await self._run_hook(record)
        return record

    async def resume(self, instance_id: UUID, input: JSONValue = None) -> InstanceRecord:
        """Put a paused instance back to pending, with the reviewer's `input` if given.

        The input must match the checkpoint's input schema, if it has one, and fit its
        `max_input_bytes` (a template's checkpoint: the room left in the context). It reaches
        the workflow as the params of the action after the pause (a handler map), or in the
        context under the checkpoint's label (a template).

        Raises:
            NotFoundError: no such instance.
            ConflictError: it is not paused, or its checkpoint expired (then the expiry
                decides, though no engine has woken the instance yet).
            InvalidInputError: the input is not JSON within the params limits or the
                checkpoint's max_input_bytes, or does not match the schema
                (InputRejectedError, naming the failing paths); the instance stays paused.
        """
        checkpoint, input_schema, max_bytes = await self.store.pause_of(instance_id)
        validate_input(input_schema, input, label=checkpoint)
        input_json = None if input is None else encode_json(input, what="input")
        size = 0 if input_json is None else json_size(input_json)
        if max_bytes is not None and size > max_bytes:
            raise InvalidInputError(
                f"input is {size} bytes encoded; checkpoint {checkpoint!r} takes at"
                f" most {max_bytes}"
            )
        record = await self.store.resume_instance(instance_id, input_json, checkpoint)
        if record is None:  # resumed, expired or paused elsewhere since it was read
            await self.store.pause_of(instance_id)  # says which, unless it paused elsewhere
            raise ConflictError(
                instance_id, Status.PAUSED, "resume", reason="it was resumed and paused again"
            )
        self.claim_loop.wake()
        return record

    async def signal(
        self,
        instance_id: UUID,
        name: str,
        payload: JSONValue = None,
        *,
        idempotency_key: str | None = None,
    ) -> SignalResult:
        """Send the signal `name` to an instance: a wait for it goes on with `payload` as its
        params; with no wait for it yet, the signal is kept for the next wait of its name
        (signals of one name are taken oldest first, each once). A repeated `idempotency_key`
        (per instance) sends nothing: the result names the first signal, accepted False.

        Raises:
            NotFoundError: no such instance.
            ConflictError: the instance has ended.
            InvalidInputError: a bad name or key, or a payload that is not JSON within the
                params limits.
        """
        check_signal(name, idempotency_key)
        result = await self.store.send_signal(
            signal_id=uuid.uuid4(),
            instance_id=instance_id,
            name=name,
            payload_json=encode_json(payload, what="payload"),
            idempotency_key=idempotency_key,
        )
        if result.instance.status == Status.PENDING:
            self.claim_loop.wake()
        return result

    async def retry(self, instance_id: UUID) -> InstanceRecord:
        """Run a failed instance again from its last checkpoint, with fresh attempts.

        Raises:
            NotFoundError: no such instance.
            ConflictError: it is not failed, or it has a singleton key that another unfinished
                instance holds now.
        """
        record = await self.store.retry_instance(instance_id)
        if record is None:
            current = await self._require(instance_id)
            held = current.status == Status.FAILED  # failed, yet not retried: its key is held
            reason = (
                f"another unfinished instance of {current.name} holds its singleton key"
                f" {current.singleton_key!r}"
                if held
                else None
            )
            raise ConflictError(instance_id, current.status, "retry", reason=reason)
        self.claim_loop.wake()
        return record

    async def _enqueue_child(
        self, parent_id: UUID, name: str, params: JSONValue, key: str | None
    ) -> UUID:
        # One per parent, workflow and key: a parent re-run after a crash finds the same child.
        idempotency_key = child_key(parent_id, name, key)
        result = await self.enqueue(
            name, params, parent_id=parent_id, idempotency_key=idempotency_key
        )
        return result.instance_id

    async def _signal(
        self, instance_id: UUID, name: str, payload: JSONValue, idempotency_key: str | None
    ) -> bool:
        # A handler's signal (RunnerTools.signal): sent as any other, True when accepted.
        result = await self.signal(instance_id, name, payload, idempotency_key=idempotency_key)
        return result.accepted

    async def operations(self, instance_id: UUID) -> list[OperationRecord]:
        """The recorded operation outcomes of an instance (templates), in finishing order."""
        return await self.store.operations(instance_id)

    async def _require(self, instance_id: UUID) -> InstanceRecord:
        record = await self.store.get_instance(instance_id)
        if record is None:
            raise NotFoundError(f"no instance {instance_id}")
        return record

    async def events(
        self, instance_id: UUID | None = None, *, after_event_id: int = 0, limit: int = 100
    ) -> list[EventRecord]:
        """Events in commit order, after `after_event_id`, optionally of one instance.

        Raises:
            InvalidInputError: limit outside 1..500.
        """
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidInputError(f"limit must be between 1 and {MAX_LIST_LIMIT}")
        if instance_id is None:
            return await self.store.events_after(after_event_id, limit)
        return await self.store.instance_events_after(instance_id, after_event_id, limit)

    async def wait(self, instance_id: UUID, *, timeout: float = 30.0) -> InstanceRecord:
        """Wait until the instance is terminal (or paused) and return it.

        Raises:
            NotFoundError: no such instance.
            TimeoutError: it did not finish within `timeout` seconds; the message says where
                it is (status, attempt) and its last error, if any (a handler's bug in a
                test that ticked once is pending a retry, with that bug as its error).
        """
        delay = 0.005
        record: InstanceRecord | None = None
        try:
            async with asyncio.timeout(timeout):
                while True:
                    record = await self._require(instance_id)
                    if record.is_terminal or record.status == Status.PAUSED:
                        return record
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 0.2)
        except TimeoutError:
            if record is None:
                raise
            where = f"instance {instance_id} is still {record.status} after {timeout:g} s"
            where += f" (attempt {record.attempts} of {record.max_attempts})"
            if record.last_error:
                where += f"; its last error: {record.last_error}"
            raise TimeoutError(where) from None

    async def _after_terminal(self, transition: Transition) -> None:
        if not self.registry.has_terminal_hook(transition.name):
            return
        record = await self.store.get_instance(transition.instance_id)
        if record is not None:
            await self._run_hook(record)

    async def _run_hook(self, record: InstanceRecord) -> None:
        workflow = self.registry.find(record.name, record.version)
        if workflow is None or workflow.on_terminal is None:
            return
        try:
            await workflow.on_terminal(record)
        except Exception:
            logger.exception("terminal hook failed", extra={"instance_id": str(record.instance_id)})
