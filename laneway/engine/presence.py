"""Presence: one claim loop's heartbeat, its row in the live workers registry, and the
leases its runs hold, from their renewal to their hand-back at a stop.

Owns the heartbeat task (renew, then beat, every third of the lease), the registry row
(refused at start when another live process holds its owner id: check_owner; written at
start and at every heartbeat, removed at a clean stop; the statement also reads
whether a newer release migrated the database meanwhile, the store's `newer_release`, which
the process's API reads too), which runs lose their lease, and the drain and hand-back of a
stopping process. Does not claim or run anything (claim_loop.py) and writes no SQL (store).
"""

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Mapping
from uuid import UUID

from laneway.engine import faults
from laneway.engine.registry import WorkflowRegistry
from laneway.engine.runner import Run
from laneway.errors import DatabaseNewerError, OwnerIdInUseError, described
from laneway.store import Store

logger = logging.getLogger(__name__)
LEASE_LOST = "lease lost"  # the reason a run is stopped when its lease is gone

UNREGISTER_TIMEOUT_SECONDS = 2.0  # longest a stopping engine waits to remove its workers row
HAND_BACK_BATCH_SECONDS = 0.2
"""How long a stopping engine waits for the runs it cancelled (after the shutdown grace) to
stop before it releases the leases of those that did, in one call: a handler stops at its next
await once cancelled, and its runner unwinds in a few turns of the loop. One still running
then keeps its lease, renewed, and has it released when it stops, so it delays no other."""


def heartbeat_seconds(lease_seconds: float) -> float:
    """How often a process renews its leases and beats: a third of the lease (at least 50 ms)."""
    return max(lease_seconds / 3.0, 0.05)


def held_by_another(host: str, pid: int) -> bool:
    """Whether the live workers row of this process's owner id, last written by `host` and
    `pid`, is another process's: one of another host, or one of this host whose pid is alive
    and not ours. A restart with a fixed owner id (a StatefulSet pod, a systemd unit) finds
    its dead predecessor's row still live for up to three heartbeats, and must start: same
    host, and a pid that is ours (in a container pid 1 is common: the predecessor had it too,
    or this is a row an engine of this process left) or no longer exists. A dead predecessor's
    pid taken meanwhile by an unrelated process refuses until the row ages out (two
    heartbeats at most): rare, and the refusal names that pid."""
    if host != socket.gethostname():
        return True
    return pid != os.getpid() and process_exists(pid)


def process_exists(pid: int) -> bool:
    """Whether a process `pid` exists on this host (signal 0 checks without sending)."""
    if pid <= 0:  # 0 and -1 would signal a process group, or every process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, as another user's
    except OSError:
        return False
    return True


class Presence:
    """The heartbeat of one claim loop, over the runs it holds (`runs`, the loop's own map)."""

    def __init__(
        self,
        store: Store,
        registry: WorkflowRegistry,
        runs: Mapping[UUID, Run],
        stop_run: Callable[[UUID, str], object],
        schema_replaced: Callable[[DatabaseNewerError], object],
        *,
        owner_id: str,
        role: str,
        lease_seconds: float,
        concurrency: int,
    ) -> None:
        self._store = store
        self._registry = registry
        self._runs = runs
        self._stop_run = stop_run  # (instance id, why): a lease is gone, or the process stops
        self._schema_replaced = schema_replaced  # a newer release migrated the database
        self._handed_back: dict[UUID, int] = {}  # stopped early while draining (Run.handed_back)
        # Set by skip_drain (a second stop signal): the stop's waits end now, not at their limit.
        self.hurried = asyncio.Event()
        self._owner_id = owner_id
        self._role = role
        self._lease_seconds = lease_seconds
        self._concurrency = concurrency
        self._heartbeat_seconds = heartbeat_seconds(lease_seconds)

    async def heartbeat(self, halted: asyncio.Event) -> None:
        """Renew and beat every heartbeat_seconds until `halted`."""
        while not halted.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._heartbeat_seconds):
                    await halted.wait()
            try:
                await self.renew()
            except Exception as exc:
                logger.warning("lease renewal failed", extra={"error": described(exc)})
            await self.beat()

    async def check_owner(self) -> None:
        """Refuse to start when another live process holds this owner id (held_by_another),
        before the first beat would take its row over. One read, best effort: two processes
        that start with one id in the same instant may both pass (neither row is written
        yet), and a failed read is only logged, as a failed beat is.

        Raises:
            OwnerIdInUseError: another live process holds it.
        """
        try:
            found = await self._store.live_worker(self._owner_id)
        except Exception as exc:
            logger.warning("owner id check failed", extra={"error": described(exc)})
            return
        if found is None:
            return
        holder, seen_seconds_ago = found
        if held_by_another(holder.host, holder.pid):
            raise OwnerIdInUseError(
                self._owner_id,
                host=holder.host,
                pid=holder.pid,
                seen_seconds_ago=seen_seconds_ago,
            )

    async def beat(self) -> None:
        """Write this process's row in the workers registry: one statement per heartbeat, which
        also deletes the rows of processes that stopped heartbeating. A failure is only logged:
        the row ages out, and the next heartbeat writes it again. A newest migration this
        installation does not ship means a newer release migrated the database under this
        process (its statements may be gone or changed): the claim loop is told."""
        try:
            await self._store.heartbeat_worker(
                owner_id=self._owner_id,
                role=self._role,
                host=socket.gethostname(),
                pid=os.getpid(),
                workflows=self._registry.names(),
                versions=self._registry.runs(),
                running=len(self._runs),
                concurrency=self._concurrency,
                heartbeat_seconds=self._heartbeat_seconds,
            )
        except Exception as exc:
            logger.warning("worker heartbeat failed", extra={"error": described(exc)})
            return
        newer = self._store.newer_release
        if newer is not None:
            self._schema_replaced(newer)

    async def unregister(self) -> None:
        """Remove the registry row, bounded: a stop does not wait on a database that is gone
        (the row ages out instead)."""
        try:
            async with asyncio.timeout(UNREGISTER_TIMEOUT_SECONDS):
                await self._store.remove_worker(self._owner_id)
        except Exception as exc:
            logger.warning("worker removal at shutdown failed", extra={"error": repr(exc)})

    async def renew(self) -> None:
        """Renew every lease held here; stop the runs whose lease is gone."""
        leases = self.leases()
        if not leases:
            return
        held = await self._store.renew_leases(self._owner_id, leases, self._lease_seconds)
        for instance_id in leases:
            run = self._runs.get(instance_id)
            # A run that settled while the renewal was in flight gave its lease up itself; one
            # whose write is in flight learns from the write whether it still held it.
            if instance_id not in held and run is not None and not (run.settled or run.writing):
                self._stop_run(instance_id, LEASE_LOST)

    def leases(self) -> dict[UUID, int]:
        """The lease epoch of every instance running here."""
        return {instance_id: run.record.lease_epoch for instance_id, run in self._runs.items()}

    async def drain(self, grace_seconds: float) -> None:
        """Let each run finish the step it is in; it stops at its next checkpoint (or ends),
        or sooner: a template's sequential stage stops between two operations (its handler
        sees `draining`). One that stops so has its lease released as it stops, not when the
        drain ends: another process resumes it at once, not after the slowest step here.

        A step still running after the grace period is interrupted by the hand-back; without
        the wait, nearly every step in flight would run again in another process.
        """
        runs = list(self._runs.values())
        for run in runs:
            run.draining.set()
        tasks = {run.task: run for run in runs if run.task is not None}
        if tasks and grace_seconds > 0:
            logger.info("draining", extra={"runs": len(tasks), "grace_s": grace_seconds})
            await self._wait(tasks, grace_seconds)
        for run in runs:
            if run.handed_back:  # its release failed, or it stopped as the drain ended
                self._handed_back[run.record.instance_id] = run.record.lease_epoch

    def skip_drain(self) -> None:
        """End the stop's drain now (or skip it, for a stop not begun yet): the steps in
        flight are cancelled and handed back at once, not at the end of the grace."""
        if not self.hurried.is_set():
            logger.warning("stopping without waiting for the steps in flight")
            self.hurried.set()

    async def _wait(self, tasks: dict["asyncio.Task[None]", Run], seconds: float) -> None:
        """Until every task has ended, `seconds` have passed or skip_drain was called; the
        runs that stopped early (Run.handed_back) are released as they end (those that end
        together, in one statement)."""
        if self.hurried.is_set():
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        hurried = asyncio.ensure_future(self.hurried.wait())
        pending = set(tasks)
        try:
            while pending and not hurried.done() and (left := deadline - loop.time()) > 0:
                done, _ = await asyncio.wait(
                    {*pending, hurried}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                pending -= done
                stopped = [run for task, run in tasks.items() if task in done and run.handed_back]
                leases = {run.record.instance_id: run.record.lease_epoch for run in stopped}
                if leases and await self._release(leases):
                    for run in stopped:
                        run.handed_back = False
        finally:
            hurried.cancel()

    async def stop(self, grace_seconds: float) -> None:
        """Drain, then hand back (also when the drain was cut short): returns once every run
        here has stopped and its lease is released. The heartbeat must run until then."""
        try:
            await self.drain(grace_seconds)
        finally:
            await self.hand_back()

    async def hand_back(self) -> None:
        """Stop every run still here and release its lease (and those handed back while
        draining), so that another process resumes them from their last checkpoint now.

        A lease is released only once its run has stopped: a handler that unwinds after its
        cancel (cleanup, a shielded call), or goes on as if none had come, would otherwise
        still run here while another process runs the same instance, past its queue's cap.
        The runs that stop at their cancel are released together, within
        HAND_BACK_BATCH_SECONDS; one still running then keeps its lease, renewed by the
        heartbeat, which goes on until this returns, and has it released when it stops: the
        process cannot end before its runs anyway (the claim loop's task group waits for
        them), and a process killed meanwhile loses the lease as a lost worker does.
        """
        waiting: dict[asyncio.Task[None], tuple[UUID, int]] = {}
        for instance_id, run in list(self._runs.items()):
            self._stop_run(instance_id, "shutdown")
            if run.task is not None:
                waiting[run.task] = (instance_id, run.record.lease_epoch)
        leases, self._handed_back = self._handed_back, {}
        pending = set(waiting)
        if pending:
            done, pending = await asyncio.wait(pending, timeout=HAND_BACK_BATCH_SECONDS)
            leases.update(waiting[task] for task in done)
        await self._release(leases)
        if pending:
            logger.warning(
                "runs still running after their cancel: their leases are kept until they stop",
                extra={"instance_ids": sorted(str(waiting[task][0]) for task in pending)},
            )
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            await self._release(dict(waiting[task] for task in done))

    async def _release(self, leases: dict[UUID, int]) -> bool:
        """Release `leases` (a run that ended here on its own gave its lease up already: the
        release is fenced, and changes nothing for it); False: it failed (logged)."""
        if not leases:
            return True
        try:
            if faults.ARMED:
                await faults.hit("before_release")
            await self._store.release(self._owner_id, leases)
        except Exception as exc:
            logger.warning("release at shutdown failed", extra={"error": described(exc)})
            return False
        return True
