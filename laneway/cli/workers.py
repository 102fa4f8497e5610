"""`laneway workers`: the live processes that run an engine on the database.

Owns the workers document and its table: each process's owner id, role, host and pid, how
many instances it runs of how many it may, the workflow versions it has, and when it started
and was last seen (a process that stops heartbeating drops out after two missed heartbeats).
"""

import argparse

from laneway.cli import output
from laneway.cli.client import JSONObject
from laneway.cli.commands import print_listing
from laneway.cli.output import Column, Listing
from laneway.config import Settings

WORKERS = """{ workers {
  ownerID role host pid workflows versions { name version } running concurrency startedAt
  lastSeenAt
} }"""


def workers_table(workers: list[JSONObject]) -> Listing:
    columns = [
        Column("owner", whole=True),
        Column("role", drop=3),
        Column("running", drop=1),
        Column("versions", drop=4),
        Column("host", drop=5),
        Column("pid", drop=6, numeric=True),
        Column("started", drop=7),
        Column("last seen", drop=2),
    ]
    rows = [
        [
            worker["ownerID"],
            worker["role"],
            f"{worker['running']} of {worker['concurrency']}",
            ", ".join(f"{v['name']}@{v['version']}" for v in worker["versions"]) or "-",
            worker["host"],
            str(worker["pid"]),
            output.relative(worker["startedAt"]),
            output.relative(worker["lastSeenAt"]),
        ]
        for worker in workers
    ]
    return Listing("Live workers", columns, rows)


async def workers(args: argparse.Namespace, settings: Settings) -> int:
    """List the live processes that run an engine, as a table or JSON."""
    where = "the server's database" if args.url else "the database"
    empty = f"No process runs an engine on {where} now."
    return await print_listing(args, settings, WORKERS, "workers", workers_table, empty)
