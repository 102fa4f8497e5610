"""`laneway cancel|retry|resume --filter KEY=VALUE ...`: a bulk action on what a filter selects.

Owns the --filter words (name, queue, status (repeatable), key, version, parent (an instance
id), created-after, created-before as ISO times), the dry run that always comes first and
shows the count, the confirmation: --yes, or a yes typed at a terminal; anywhere else it stops
with exit 2, and what Ctrl-C means at each step (exit 130: nothing changed yet, or some may
have). Both modes send the same mutation (cancelWorkflows, retryWorkflows, resumeWorkflows),
so the database mode and --url go through the engine's one bulk path.
"""

import argparse
import asyncio
import os
import sys
from collections.abc import Collection
from datetime import UTC, datetime

from laneway.cli import output
from laneway.cli.client import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    REFUSED_CODES,
    CommandError,
    JSONObject,
    UnreachableError,
)
from laneway.cli.commands import instance_id, open_client
from laneway.cli.option_words import option_words
from laneway.config import Settings

FIELDS = {"cancel": "cancelWorkflows", "retry": "retryWorkflows", "resume": "resumeWorkflows"}
VERBS = {"cancel": "cancel", "retry": "retry", "resume": "resume (without input)"}
# --filter's keys and the InstanceFilter fields they set (status: one of `statuses`).
FILTER_FIELDS = {
    "name": "name",
    "queue": "queue",
    "status": "statuses",
    "key": "concurrencyKey",
    "version": "version",
    "parent": "parentID",
    "created-after": "createdAfter",
    "created-before": "createdBefore",
}


# What the user typed for each field of the filter, for the API's refusals (option_words.py).
FILTER_OPTIONS = {f"filter.{field}": f"--filter {key}=" for key, field in FILTER_FIELDS.items()}


def document(action: str) -> str:
    return f"""mutation ($filter: InstanceFilter!, $dryRun: Boolean) {{
  bulk: {FIELDS[action]}(filter: $filter, dryRun: $dryRun) {{ matched changed sampleIDs }}
}}"""


def iso_ms(text: str, key: str) -> float:
    """An ISO 8601 time (UTC when it names no offset) in ms since the Unix epoch.

    Raises:
        CommandError: not an ISO time (exit 2).
    """
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(
            f"--filter {key}= must be an ISO time such as 2026-01-31T12:00:00Z, not {text!r}",
            EXIT_USAGE,
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp() * 1000.0


def parse_filter(pairs: list[str], keys: Collection[str] = tuple(FILTER_FIELDS)) -> JSONObject:
    """The InstanceFilter input of --filter KEY=VALUE pairs, of the `keys` a command takes.

    Raises:
        CommandError: an unknown key, no `=`, an empty value, a key given twice (but status),
            a time that is not ISO or a parent that is not an instance id (exit 2).
    """
    where: JSONObject = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        field = FILTER_FIELDS.get(key) if key in keys else None
        if not equals or field is None:
            raise CommandError(
                f"--filter takes KEY=VALUE with KEY one of {', '.join(keys)}, not {pair!r}",
                EXIT_USAGE,
            )
        if not value:  # matches nothing: `key=$KEY` with KEY unset, most likely
            raise CommandError(f"--filter {key}= needs a value", EXIT_USAGE)
        if key == "status":
            where.setdefault(field, []).append(value)
            continue
        if field in where:
            raise CommandError(f"--filter {key}= is given twice", EXIT_USAGE)
        if key.startswith("created-"):
            where[field] = iso_ms(value, key)
        else:
            where[field] = instance_id(value, "--filter parent=") if key == "parent" else value
    return where


def _instances(count: int) -> str:
    return "1 instance" if count == 1 else f"{count} instances"


async def _confirmed(action: str, matched: int) -> bool:
    """Ask at the terminal; False for anything but y or yes.

    Raises:
        CommandError: Ctrl-C instead of an answer (exit 130; nothing was changed).
    """
    sys.stderr.write(f"{VERBS[action].capitalize()} {_instances(matched)}? [y/N] ")
    sys.stderr.flush()
    try:
        answer = await _typed_line(sys.stdin.fileno())
    except asyncio.CancelledError:
        sys.stderr.write("\n")  # the question left the cursor on its line
        raise CommandError("interrupted: nothing was changed", EXIT_INTERRUPTED) from None
    return answer.strip().lower() in ("y", "yes")


async def _typed_line(fd: int) -> str:
    """One line read from `fd` (a terminal) on the event loop, so that Ctrl-C (the runner
    cancels this task) ends the wait at once: a thread blocked in readline() would hold the
    process until Enter. Reads stop at a line break or the end of the input."""
    loop = asyncio.get_running_loop()
    readable = asyncio.Event()
    loop.add_reader(fd, readable.set)
    line = b""
    try:
        while not line.endswith(b"\n"):
            await readable.wait()
            readable.clear()
            try:
                chunk = os.read(fd, 1024)
            except OSError:  # a terminal that went away (EIO): no answer
                break
            if not chunk:
                break
            line += chunk
    finally:
        loop.remove_reader(fd)
    return line.decode(errors="replace")


async def run(args: argparse.Namespace, settings: Settings, action: str) -> int:
    """Dry run first; then, with --yes or a yes at the terminal, the real run. Prints the
    result `{"matched", "changed", "sampleIDs"}` (the dry run's, with --dry-run)."""
    if getattr(args, "instance_id", None):
        raise CommandError("give either an instance ID or --filter, not both", EXIT_USAGE)
    if getattr(args, "input", None) is not None:
        raise CommandError("a bulk resume takes no --input: resume each one alone", EXIT_USAGE)
    where = parse_filter(args.filter)
    async with open_client(args, settings) as client, option_words(FILTER_OPTIONS):
        dry: JSONObject = (await client.execute(document(action), filter=where, dryRun=True))[
            "bulk"
        ]
        if args.dry_run or dry["matched"] == 0:
            output.print_json(dry)
            return EXIT_OK
        if not args.yes:
            if not sys.stdin.isatty():
                one = dry["matched"] == 1
                raise CommandError(
                    f"{_instances(dry['matched'])} {'matches' if one else 'match'}; pass --yes"
                    f" to {VERBS[action]} {'it' if one else 'them'} (or --dry-run to only"
                    f" count {'it' if one else 'them'})",
                    EXIT_USAGE,
                )
            if not await _confirmed(action, dry["matched"]):
                raise CommandError("nothing was changed", EXIT_USAGE)
        try:
            # Over --url the whole action is one request: it may take longer than a read
            # timeout. The count above changes nothing, and waits as any request does.
            answer = await client.execute_long_running(document(action), filter=where)
            done: JSONObject = answer["bulk"]
        except asyncio.CancelledError:
            # Ctrl-C: the batches committed so far stay changed, and the count is lost with the
            # call. A repeat changes each instance at most once, so it finishes the rest.
            raise CommandError(
                f"interrupted: {'the' if dry['matched'] == 1 else 'some of the'}"
                f" {_instances(dry['matched'])} may have changed;"
                " run the same command again to finish (or add --dry-run to count what is left)",
                EXIT_INTERRUPTED,
            ) from None
        except CommandError as exc:
            if isinstance(exc, UnreachableError) or exc.code in REFUSED_CODES:
                raise  # refused before it ran: nothing changed
            # Stopped at the server's deadline (with how far it got, or cut off without a
            # word), or its answer lost: the same as above.
            how_far = (
                ": run the same"
                if exc.changed is not None
                else f"; the {action} may have been done in part: run the same"
            )
            raise CommandError(
                f"{str(exc).rstrip('.')}{how_far} command again to finish it (it changes each"
                " instance at most once)",
                exc.exit_code,
                code=exc.code,
            ) from None
    output.print_json(done)
    return EXIT_OK
