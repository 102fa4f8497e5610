"""`laneway queues`, `queue-history`, `configure-queue`, `pause-queue` and `resume-queue`: the
queues, a queue's last minutes, setting a queue's caps, and pausing and resuming it.

Owns their documents (queues, queueHistory, configureQueue, pauseQueue, resumeQueue), what
each prints, and the table of a queue's history (the table of the queues is output.py's).
configure-queue sets every cap at once, as configureQueue does: one left out is no cap.
"""

import argparse
from datetime import datetime

from rich.text import Text

from laneway.cli import output
from laneway.cli.client import EXIT_OK, QUEUE_FIELDS, QUEUES, JSONObject
from laneway.cli.commands import open_client, print_listing
from laneway.cli.option_words import flags, option_words
from laneway.cli.output import Column, Listing
from laneway.config import Settings

QUEUE_HISTORY = """query ($name: String!, $minutes: Int) {
  queueHistory(name: $name, minutes: $minutes) { at started completed failed retried pending }
}"""
CONFIGURE_QUEUE = f"""mutation ($name: String!, $concurrency: Int!, $ratePerMinute: Float,
                   $keyConcurrency: Int, $keyRatePerMinute: Float) {{
  configureQueue(name: $name, concurrency: $concurrency, ratePerMinute: $ratePerMinute,
                 keyConcurrency: $keyConcurrency, keyRatePerMinute: $keyRatePerMinute) {{
    {QUEUE_FIELDS}
  }}
}}"""

PAUSE_QUEUE = f"mutation ($name: String!) {{ queue: pauseQueue(name: $name) {{ {QUEUE_FIELDS} }} }}"
RESUME_QUEUE = f"""mutation ($name: String!) {{
  queue: resumeQueue(name: $name) {{ {QUEUE_FIELDS} }}
}}"""


async def queues(args: argparse.Namespace, settings: Settings) -> int:
    """List the queues with their caps and counts per status, as a table or JSON."""
    return await print_listing(args, settings, QUEUES, "queues", output.queues_table, None)


def history_table(name: str, samples: list[JSONObject]) -> Listing:
    """A queue's minutes, oldest first: when each began (local time; with the date when they
    span more than one day), and what happened in it."""
    moments = [datetime.fromtimestamp(sample["at"] / 1000).astimezone() for sample in samples]
    layout = "%H:%M" if len({moment.date() for moment in moments}) <= 1 else "%m-%d %H:%M"
    columns = [
        Column("minute"),
        Column("started", drop=1, numeric=True),
        Column("completed", drop=2, numeric=True),
        Column("failed", drop=1, numeric=True),
        Column("retried", drop=4, numeric=True),
        Column("pending", drop=3, numeric=True),
    ]
    keys = ("started", "completed", "failed", "retried", "pending")
    rows = [
        [moment.strftime(layout), *(str(sample[key]) for key in keys)]
        for moment, sample in zip(moments, samples, strict=True)
    ]
    return Listing(output.literal(f"Queue {name}, one row a minute"), columns, rows)


async def queue_history(args: argparse.Namespace, settings: Settings) -> int:
    """Print a queue's last minutes, one row a minute, as a table or JSON."""
    async with option_words({"name": "NAME", **flags("minutes")}):
        return await print_listing(
            args,
            settings,
            QUEUE_HISTORY,
            "queueHistory",
            lambda samples: history_table(args.name, samples),
            None,
            name=args.name,
            minutes=args.minutes,
        )


async def configure_queue(args: argparse.Namespace, settings: Settings) -> int:
    """Set a queue's caps (creating the queue if needed) and print it as `queues --json` does."""
    options = {
        "name": "NAME",
        **flags("concurrency", "ratePerMinute", "keyConcurrency", "keyRatePerMinute"),
    }
    async with open_client(args, settings) as client, option_words(options):
        data = await client.execute(
            CONFIGURE_QUEUE,
            name=args.name,
            concurrency=args.concurrency,
            ratePerMinute=args.rate_per_minute,
            keyConcurrency=args.key_concurrency,
            keyRatePerMinute=args.key_rate_per_minute,
        )
    output.print_json(data["configureQueue"])
    return EXIT_OK


def pause_line(queue: JSONObject) -> Text:
    """What a pause or resume left the queue as, for a person, with the instances it holds."""
    name, counts = queue["name"], queue["counts"]
    if queue["paused"]:
        said = (
            f"Queue {name} is paused (running: {counts['running']}, they finish; pending:"
            f" {counts['pending']}, they wait for resume-queue)."
        )
    else:
        # `pending` counts the delayed and those backing off before a retry too: a resume
        # starts none of them before it is due.
        said = (
            f"Queue {name} is not paused (pending: {counts['pending']}, each starts once due,"
            " within its caps)."
        )
    return output.literal(said)


async def _set_paused(args: argparse.Namespace, settings: Settings, document: str) -> int:
    async with open_client(args, settings) as client, option_words({"name": "NAME"}):
        queue: JSONObject = (await client.execute(document, name=args.name))["queue"]
    if args.json:
        output.print_json(queue)
    else:
        output.console().print(pause_line(queue), soft_wrap=True)  # one line, however long
    return EXIT_OK


async def pause_queue(args: argparse.Namespace, settings: Settings) -> int:
    """Pause a queue (creating it if needed) and say so, or print it as `queues --json` does."""
    return await _set_paused(args, settings, PAUSE_QUEUE)


async def resume_queue(args: argparse.Namespace, settings: Settings) -> int:
    """Resume a queue (creating it if needed) and say so, or print it as `queues --json` does."""
    return await _set_paused(args, settings, RESUME_QUEUE)
