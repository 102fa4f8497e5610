"""`laneway instances`: a page of instances, newest first, chosen by --filter.

Owns the page's document (workflowInstancesConnection: a keyset page, so any page costs what
the first does and new instances never shift the one a person is on), which of bulk.py's
--filter words a page takes, and the table: an instance per row, and under it how to ask for
the next page (--after, the page's endCursor). The fields of each instance are a summary;
`laneway status ID` shows the rest.
"""

import argparse

from laneway.cli import output
from laneway.cli.bulk import FILTER_FIELDS, parse_filter
from laneway.cli.client import EXIT_OK, EXIT_USAGE, CommandError, JSONObject
from laneway.cli.commands import open_client
from laneway.cli.option_words import flags, option_words
from laneway.cli.output import Column, Listing
from laneway.config import Settings

NODE_FIELDS = """
  instanceID name queue status attempts lastError createdAt updatedAt priority runAfter
  stage progress message concurrencyKey version parentID
"""
PAGE = f"""query ($first: Int, $after: String, $name: String, $queue: String,
          $statuses: [String!], $concurrencyKey: String, $version: String, $parentID: ID) {{
  workflowInstancesConnection(first: $first, after: $after, name: $name, queue: $queue,
                              statuses: $statuses, concurrencyKey: $concurrencyKey,
                              version: $version, parentID: $parentID) {{
    edges {{ cursor node {{ {NODE_FIELDS} }} }}
    pageInfo {{ hasNextPage endCursor }}
  }}
}}"""
# The --filter words a page takes: the connection has no creation-time bounds.
PAGE_FILTERS = ("name", "queue", "statuses", "concurrencyKey", "version", "parentID")
PAGE_KEYS = tuple(key for key, field in FILTER_FIELDS.items() if field in PAGE_FILTERS)
# What the user typed for each argument of PAGE, for the API's refusals (option_words.py).
PAGE_OPTIONS = {
    **flags("first", "after"),
    **{field: f"--filter {key}=" for key, field in FILTER_FIELDS.items() if field in PAGE_FILTERS},
}


def page_filter(pairs: list[str] | None) -> JSONObject:
    """The connection's filter arguments of --filter KEY=VALUE pairs (bulk.py's words).

    Raises:
        CommandError: a word the page does not take, or bulk.parse_filter's refusals (exit 2).
    """
    for pair in pairs or []:
        word = pair.partition("=")[0]
        if word in FILTER_FIELDS and word not in PAGE_KEYS:  # a bulk action's, not a page's
            raise CommandError(
                f"--filter {word}= is for cancel, retry and resume; a page of instances is"
                f" chosen by {', '.join(PAGE_KEYS[:-1])} and {PAGE_KEYS[-1]}",
                EXIT_USAGE,
            )
    return parse_filter(pairs or [], PAGE_KEYS)


def instances_table(nodes: list[JSONObject]) -> Listing:
    # The id is the one column never left out: a folded id cannot be copied. The status goes
    # last of the others, the message first.
    columns = [
        Column("instance", whole=True),
        Column("workflow", drop=2),
        Column("status", drop=1),
        Column("queue", drop=5),
        Column("attempts", drop=6, numeric=True),
        Column("created", drop=3),
        Column("message", drop=7),
        Column("last error", drop=4),
    ]
    rows = [
        [
            node["instanceID"],
            node["name"],
            output.literal(node["status"], output.STATUS_STYLES.get(node["status"], "")),
            node["queue"],
            str(node["attempts"]),
            output.relative(node["createdAt"]),
            node.get("message") or "-",
            node.get("lastError") or "-",
        ]
        for node in nodes
    ]
    return Listing("Instances, newest first", columns, rows)


async def instances(args: argparse.Namespace, settings: Settings) -> int:
    """Print one page of instances, as a table (and how to get the next) or JSON."""
    where = page_filter(args.filter)
    async with open_client(args, settings) as client, option_words(PAGE_OPTIONS):
        data = await client.execute(PAGE, first=args.first, after=args.after, **where)
    page: JSONObject = data["workflowInstancesConnection"]
    if args.json:
        output.print_json(page)
        return EXIT_OK
    out = output.console()
    nodes = [edge["node"] for edge in page["edges"]]
    if not nodes:
        out.print("No instances match." if args.after is None else "No more instances.")
        return EXIT_OK
    out.print(instances_table(nodes))
    if page["pageInfo"]["hasNextPage"]:
        # Never folded, as the ids are not: it is copied (soft_wrap: the terminal wraps it).
        out.print(
            output.literal(f"Next page: the same with --after {page['pageInfo']['endCursor']}"),
            soft_wrap=True,
        )
    return EXIT_OK
