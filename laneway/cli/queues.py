"""`laneway queues`, `queue-history` and `configure-queue`: the queues, a queue's last minutes,
and setting a queue's caps.

Owns their documents (queues, queueHistory, configureQueue), what each prints, and the table
of a queue's history (the table of the queues is output.py's). configure-queue sets every cap
at once, as configureQueue does: one left out is no cap.
"""

import argparse
from datetime import datetime

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
