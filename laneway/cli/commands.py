"""The subcommands that read or act on one instance, or list the workflows; and `open_client`.

Owns what each of enqueue, cancel, resume, retry, signal, status, workflows and watch asks and
prints (cancel, resume and retry with --filter are bulk.py's; the page of instances, the
queues, schedules and workers have modules of their own), and `print_listing`, how every list
is printed. Each opens a Client: the server's GraphQL API with --url, the database without;
the GraphQL documents and error codes are the same either way (client.py).
"""

import argparse
import asyncio
import contextlib
import math
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TYPE_CHECKING
from uuid import UUID

from laneway.cli import output
from laneway.cli.client import (
    CANCEL,
    ENQUEUE,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    LAST_EVENT,
    PROGRESS,
    RESUME,
    RETRY,
    SIGNAL,
    STATUS,
    WORKFLOWS,
    Client,
    CommandError,
    JSONObject,
)
from laneway.cli.option_words import flags, option_words
from laneway.cli.output_thread import OutputThread, output_thread
from laneway.config import Settings
from laneway.engine.stop_signals import stop_signals

if TYPE_CHECKING:
    from rich.progress import Progress


@contextlib.asynccontextmanager
async def open_client(args: argparse.Namespace, settings: Settings) -> AsyncIterator[Client]:
    """The server's API when --url is given, else the database of `settings`. An empty --url
    (`--url "$SERVER"` with SERVER unset) is a server's, refused by base_url: taken for no
    --url, it acted on another system, the database."""
    if args.url is not None:
        from laneway.cli.remote import open_remote

        async with open_remote(args.url, args.token) as remote:
            yield remote
        return
    if args.token:
        raise CommandError("--token is for a server: give its --url too", EXIT_USAGE)
    from laneway.cli.local import open_local

    async with open_local(settings) as local:
        yield local


def instance_id(text: str, given_as: str | None = None) -> str:
    """An instance id as given on the command line (an operand, or as `given_as`, such as
    `--filter parent=`), checked.

    Raises:
        CommandError: it is not a UUID (exit 2).
    """
    try:
        return str(UUID(text))
    except ValueError:
        said = f"{given_as} is not an instance id" if given_as else "not an instance id"
        raise CommandError(f"{said}: {text!r}", EXIT_USAGE) from None


async def enqueue(args: argparse.Namespace, settings: Settings) -> int:
    """Enqueue one instance and print `{"instanceID", "created"}`."""
    options = {
        "name": "NAME",
        **flags("params", "queue", "priority", "delayMs", "idempotencyKey", "singletonKey"),
        **flags("concurrencyKey", "version"),
    }
    async with open_client(args, settings) as client, option_words(options):
        client.check_workflow(args.name)
        data = await client.execute(
            ENQUEUE,
            name=args.name,
            params=args.params,
            queue=args.queue,
            priority=args.priority,
            delayMs=args.delay_ms,
            idempotencyKey=args.idempotency_key,
            singletonKey=args.singleton_key,
            concurrencyKey=args.concurrency_key,
            version=args.version,
        )
    output.print_json(data["enqueueWorkflow"])
    return EXIT_OK


async def _action(
    args: argparse.Namespace, settings: Settings, document: str, **extra: object
) -> int:
    if args.filter is not None:  # laneway cancel|retry|resume --filter ...
        from laneway.cli import bulk

        return await bulk.run(args, settings, args.command)
    if args.instance_id is None:
        raise CommandError(f"{args.command} needs an instance ID or --filter", EXIT_USAGE)
    if args.dry_run or args.yes:
        raise CommandError("--dry-run and --yes go with --filter", EXIT_USAGE)
    target = instance_id(args.instance_id)
    async with open_client(args, settings) as client, option_words(flags(*extra)):
        data = await client.execute(document, id=target, **extra)
    output.print_json(data["action"])
    return EXIT_OK


async def cancel(args: argparse.Namespace, settings: Settings) -> int:
    """Cancel an instance (a running handler is stopped) and print `{"instanceID", "status"}`."""
    return await _action(args, settings, CANCEL)


async def retry(args: argparse.Namespace, settings: Settings) -> int:
    """Run a failed instance again and print `{"instanceID", "status"}`."""
    return await _action(args, settings, RETRY)


async def resume(args: argparse.Namespace, settings: Settings) -> int:
    """Resume a paused instance, with `--input` for its checkpoint's input schema."""
    return await _action(args, settings, RESUME, input=args.input)


async def send_signal(args: argparse.Namespace, settings: Settings) -> int:
    """Send a signal and print `{"signalID", "accepted", "status"}`."""
    target = instance_id(args.instance_id)
    options = {"name": "NAME", **flags("payload", "idempotencyKey")}
    async with open_client(args, settings) as client, option_words(options):
        data = await client.execute(
            SIGNAL,
            id=target,
            name=args.name,
            payload=args.payload,
            idempotencyKey=args.idempotency_key,
        )
    sent = data["signalWorkflow"]
    output.print_json(
        {
            "signalID": sent["signalID"],
            "accepted": sent["accepted"],
            "status": sent["instance"]["status"],
        }
    )
    return EXIT_OK


async def _instance(client: Client, target: str) -> JSONObject:
    data = await client.execute(STATUS, id=target)
    shape: JSONObject | None = data["workflowInstance"]
    if shape is None:
        raise CommandError(f"no instance {target}", EXIT_FAILED)
    return shape


async def status(args: argparse.Namespace, settings: Settings) -> int:
    """Show one instance: a table, or with --json its GraphQL fields and waitingReason."""
    target = instance_id(args.instance_id)
    async with open_client(args, settings) as client:
        shape = await _instance(client, target)
    if args.json:
        output.print_json(shape)
    else:
        output.console().print(output.instance_table(shape))
    return EXIT_OK


async def workflows(args: argparse.Namespace, settings: Settings) -> int:
    """List the workflows, as a table or JSON."""
    where = "the server" if args.url else "LANEWAY_WORKFLOWS"
    empty = f"No workflows are registered in {where}."
    return await print_listing(
        args, settings, WORKFLOWS, "workflows", output.workflows_table, empty
    )


async def print_listing(
    args: argparse.Namespace,
    settings: Settings,
    document: str,
    field: str,
    table: Callable[[list[JSONObject]], object],
    empty: str | None,
    **variables: object,
) -> int:
    """Print the list `field` of one query's answer: JSON with --json, else a table (or
    `empty` for none)."""
    async with open_client(args, settings) as client:
        listed: list[JSONObject] = (await client.execute(document, **variables))[field]
    if args.json:
        output.print_json(listed)
    elif not listed and empty is not None:
        output.console().print(empty)
    else:
        output.console().print(table(listed))
    return EXIT_OK


async def watch(args: argparse.Namespace, settings: Settings) -> int:
    """Follow events: of one instance from its start until it ends (exit 0 when it completed,
    1 otherwise: the instance's actual end, not a failure a retry superseded), or of every
    instance until Ctrl-C."""
    target = instance_id(args.instance) if args.instance else None
    after = str(args.after) if args.after is not None else None
    task = asyncio.current_task()
    assert task is not None
    began: int | None = None
    async with open_client(args, settings) as client:
        if target is not None:
            began = await _last_event(client, target)  # an unknown id fails now, not never
        try:
            # Printed from a thread: a reader that pauses (a pager, a full pipe) must not
            # stall the loop, which keeps the connection alive (the websocket's keepalive).
            with stop_signals(task.cancel, task.cancel):
                async with output_thread(sys.stdout) as stdout:
                    if target is None:
                        await _follow_all(client, after, stdout, as_json=args.json)
                        return EXIT_OK
                    ended = await _follow_instance(
                        client, target, after or "0", began, stdout, as_json=args.json
                    )
        except asyncio.CancelledError:
            task.uncancel()
            return EXIT_OK
    return EXIT_OK if ended == "completed" else EXIT_FAILED


async def _follow_all(
    client: Client, after: str | None, stdout: OutputThread, *, as_json: bool
) -> None:
    out = output.console(stdout.file)
    async with client.follow(None, after) as events:
        async for event in events:
            if as_json:
                output.print_json(event, stdout.file)
            else:
                out.print(output.event_line(event))
            await stdout.room()


async def _last_event(client: Client, target: str) -> int | None:
    """The id of the instance's newest event now (None: it has none).

    Raises:
        CommandError: there is no such instance (exit 1).
    """
    data = await client.execute(LAST_EVENT, id=target)
    shape: JSONObject | None = data["workflowInstance"]
    if shape is None:
        raise CommandError(f"no instance {target}", EXIT_FAILED)
    events: list[JSONObject] = shape["events"]
    return _event_number(events[-1]) if events else None


def _event_number(event: JSONObject) -> int:
    """The event's id as the number it is (ids grow in commit order)."""
    try:
        return int(event["eventID"])
    except (TypeError, ValueError):
        raise CommandError(f"not an event id: {event['eventID']!r}") from None


async def _ends(client: Client, target: str, event: JSONObject, began: int | None) -> bool:
    """Whether `event` is the instance's end: a terminal event that no later event of the
    instance superseded. A failed instance that a retry ran again has its `failed` in the
    history, and the end that came after; the instance's newest event is read when a
    terminal one arrives, so a retry that lands while the watch replays is seen too. A
    server's rate limit refusing that read leaves `began`, the newest when the watch began."""
    if event["type"] not in output.TERMINAL:
        return False
    try:
        newest = await _last_event(client, target)
    except CommandError as exc:
        if exc.code != "RATE_LIMITED":
            raise
        newest = began
    return newest is None or _event_number(event) >= newest


async def _follow_instance(
    client: Client,
    target: str,
    after: str,
    began: int | None,
    stdout: OutputThread,
    *,
    as_json: bool,
) -> str:
    """Print the instance's events until its end (`_ends`, with `began` the id of its newest
    event when the watch began); return its terminal status."""
    if as_json:
        async with client.follow(target, after) as events:
            async for event in events:
                output.print_json(event, stdout.file)
                if await _ends(client, target, event, began):
                    return str(event["type"])
                await stdout.room()
        raise CommandError(f"the event stream of {target} ended early")
    out = output.console(stdout.file)
    with output.progress_bar(out) as bar:
        shown = _InstanceBar(client, target, bar)
        async with (
            client.follow(target, after) as events,
            contextlib.aclosing(_with_idle_ticks(events, shown.wait)) as ticks,
        ):
            async for tick in ticks:
                if tick is None:  # the time to ask again has come, with no event
                    await shown.ask()
                    continue
                bar.console.print(output.event_line(tick, with_instance=False))
                if await _ends(client, target, tick, began):
                    await shown.end(tick)
                    return str(tick["type"])
                await shown.changed(tick)
                await stdout.room()
    raise CommandError(f"the event stream of {target} ended early")


PROGRESS_EVERY_SECONDS = 1.0
"""How often `watch --instance` asks for the instance's progress and message at most."""


class _InstanceBar:
    """The bar of `watch --instance`: the instance's progress and message, asked of the client
    after its events, at most once every PROGRESS_EVERY_SECONDS (once per event was a query
    per event: a replay of a few dozen overran a server's rate limit, and the watch failed).
    An event within that second is shown by a later ask, when the second is over, even if no
    other event comes. A RATE_LIMITED answer is not the watch's failure: the bar waits for the
    answer's Retry-After and asks again."""

    def __init__(self, client: Client, target: str, bar: "Progress") -> None:
        self._client, self._target, self._bar = client, target, bar
        self._task = bar.add_task("waiting", total=1.0)
        self._status = "waiting"  # the last event's, shown while the instance has no message
        self._asked_at = -math.inf
        self._due: float | None = None  # when to ask next (monotonic); None: nothing new

    def wait(self) -> float | None:
        """Seconds until the next ask (None: none is due, until an event comes)."""
        return None if self._due is None else max(0.0, self._due - time.monotonic())

    async def changed(self, event: JSONObject) -> None:
        """An event came: ask now, or once this second is over."""
        self._status = event["status"]
        if self._due is None:
            self._due = self._asked_at + PROGRESS_EVERY_SECONDS
        if self._due <= time.monotonic():
            await self.ask()

    async def ask(self) -> None:
        """Ask for the progress and message and show them (or wait as a rate limit asks).

        Raises:
            CommandError: the client failed, other than RATE_LIMITED.
        """
        now = await self._now()
        if now is not None:
            self._show(now.get("progress"), now.get("message"))

    async def end(self, event: JSONObject) -> None:
        """The terminal event: the last progress and message (full when it completed)."""
        self._status = event["status"]
        now = await self._now() or {}
        self._show(1.0 if event["type"] == "completed" else now.get("progress"), now.get("message"))

    async def _now(self) -> JSONObject | None:
        try:
            data = await self._client.execute(PROGRESS, id=self._target)
        except CommandError as exc:
            if exc.code != "RATE_LIMITED":
                raise
            self._due = time.monotonic() + (exc.retry_after or PROGRESS_EVERY_SECONDS)
            return None
        self._asked_at, self._due = time.monotonic(), None
        now: JSONObject = data["workflowInstance"] or {}
        return now

    def _show(self, progress: float | None, message: str | None) -> None:
        description = output.visible(message or self._status)
        self._bar.update(self._task, completed=progress or 0.0, description=description)


async def _with_idle_ticks(
    items: AsyncIterator[JSONObject], wait: Callable[[], float | None]
) -> AsyncGenerator[JSONObject | None, None]:
    """The items of `items`, and a None whenever `wait()` seconds pass without one (None: no
    limit). The next item is awaited in a task of its own, which a tick leaves running: a
    cancelled __anext__ would end the stream."""
    upcoming = asyncio.ensure_future(anext(items))
    try:
        while True:
            done, _ = await asyncio.wait({upcoming}, timeout=wait())
            if not done:
                yield None
                continue
            try:
                item = upcoming.result()
            except StopAsyncIteration:
                return
            upcoming = asyncio.ensure_future(anext(items))
            yield item
    finally:
        upcoming.cancel()
        await asyncio.wait({upcoming})
        if not upcoming.cancelled():
            upcoming.exception()  # retrieved: the stream's end, or a failure said already
