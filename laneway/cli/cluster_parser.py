"""The subcommands about what instances run on, rather than about instances: the queues (their
counts, history and caps), the schedules and the live workers; and their options.

Owns the words of their --help and usage errors, as parser.py does for the others (which calls
`add_cluster_commands`); the commands themselves are queues.py, schedules.py and workers.py.
"""

from laneway.cli.arguments import json_value, number, whole_number
from laneway.cli.subcommands import DATABASE, JSON_SOURCES, UNUSABLE, Subcommands, lazy

SCHEDULE_MISSING = "no schedule of that name, or the server or database cannot be used"


def add_cluster_commands(commands: Subcommands) -> None:
    """Add queues, queue-history, configure-queue, pause-queue, resume-queue, workers and the
    schedule subcommands."""
    add, server, as_json = commands.add, commands.server, commands.as_json

    add(
        "queues",
        "list the queues: caps, paused, instances per status",
        DATABASE,
        "Example:\n  laneway queues --json",
        run=lazy("queues", "queues"),
        parents=[server, as_json],
        exits=UNUSABLE,
    )

    p = add(
        "queue-history",
        "show queue NAME's last minutes: attempts started, completed, failed, retried, pending",
        "One row a minute, oldest first, zeros for a minute with nothing (a running engine rolls"
        " each minute up a few seconds after it ends). --json prints the GraphQL fields of"
        " QueueSample (`at`: the minute's start, ms since the epoch).",
        DATABASE,
        "Examples:\n  laneway queue-history default\n"
        "  laneway queue-history default --minutes 1440 --json --url http://127.0.0.1:8000",
        run=lazy("queues", "queue_history"),
        parents=[server, as_json],
        exits={1: "no queue of that name, or the server or database cannot be used"},
    )
    p.add_argument("name", metavar="NAME", help="the queue's name")
    p.add_argument(
        "--minutes", metavar="N", type=whole_number, help="how many minutes, 1 to 1440 (60)"
    )

    p = add(
        "configure-queue",
        "set queue NAME's caps (creating the queue) and print it as `queues --json` does",
        "Every cap is set at once: one not given is no cap (a rate left out removes the rate"
        " the queue had). Set by an operator, the caps are kept over the code's defaults.",
        DATABASE,
        "Example:\n  laneway configure-queue emails --concurrency 5 --rate-per-minute 120",
        run=lazy("queues", "configure_queue"),
        parents=[server],
        exits=UNUSABLE,
    )
    p.add_argument("name", metavar="NAME", help="the queue's name")
    p.add_argument(
        "--concurrency",
        metavar="N",
        type=whole_number,
        required=True,
        help="at most this many instances of it running at once",
    )
    p.add_argument(
        "--rate-per-minute",
        metavar="R",
        type=number,
        help="at most R starts a minute (0.0001 to 1000000000)",
    )
    p.add_argument(
        "--key-concurrency", metavar="N", type=whole_number, help="at most N running per key"
    )
    p.add_argument(
        "--key-rate-per-minute",
        metavar="R",
        type=number,
        help="at most R starts a minute per key (0.0001 to 1000000000)",
    )

    for verb, summary, about, example in (
        (
            "pause",
            "pause queue NAME: none of its instances starts until resume-queue",
            "For an incident: instances already running finish; pending ones, and those"
            " enqueued meanwhile, wait (waiting reason QUEUE_PAUSED) in every process. A queue"
            " there is not yet is created paused. Pausing a paused queue changes nothing, and"
            " neither configure-queue nor a deploy's queue settings resume it.",
            "Examples:\n  laneway pause-queue emails\n"
            "  laneway pause-queue emails --json --url http://127.0.0.1:8000",
        ),
        (
            "resume",
            "resume queue NAME: its pending instances start once due, within its caps",
            "Idle workers are woken at once, not at their next poll. Resuming a queue that is"
            " not paused changes nothing.",
            "Example:\n  laneway resume-queue emails --url http://127.0.0.1:8000",
        ),
    ):
        p = add(
            f"{verb}-queue",
            summary,
            about,
            "Without --json it says what the queue holds; --json prints the queue as"
            " `queues --json` lists it.",
            DATABASE,
            example,
            run=lazy("queues", f"{verb}_queue"),
            parents=[server, as_json],
            exits=UNUSABLE,
        )
        p.add_argument("name", metavar="NAME", help="the queue's name")

    add(
        "workers",
        "list the live processes that run an engine: role, host, load, versions, last seen",
        "A process shows from its start, and drops out after two missed heartbeats.",
        DATABASE,
        "Example:\n  laneway workers --url http://127.0.0.1:8000",
        run=lazy("workers", "workers"),
        parents=[server, as_json],
        exits=UNUSABLE,
    )

    add(
        "schedules",
        "list the schedules: workflow, interval or cron, enabled, next fire, params",
        DATABASE,
        "Example:\n  laneway schedules --json",
        run=lazy("schedules", "schedules"),
        parents=[server, as_json],
        exits=UNUSABLE,
    )

    p = add(
        "create-schedule",
        "create (or replace) schedule NAME, which enqueues WORKFLOW at every fire, and print it",
        "Give --every (an interval: 30s, 5m, 1h30m, 1d, in all whole seconds from 1s to 366d,"
        " counted from the Unix epoch in UTC: 1d fires at 00:00 UTC) or --cron (five fields, or"
        " @hourly, @daily, @weekly, @monthly, @yearly; in --timezone)."
        " The params are checked by the workflow's validator now, as an enqueue's are."
        " Replacing a schedule leaves it enabled or disabled as it was, and one with the same"
        " timing (--every, or --cron and --timezone) keeps its next fire (a catch-up too).",
        DATABASE,
        # Workflows of the user's own (app/examples.py is the repository's, not the wheel's).
        "Examples:\n  laneway create-schedule nightly build-report --cron '0 3 * * *'"
        " --timezone Europe/Paris\n"
        "  laneway create-schedule hourly-sync sync --every 1h --params '{\"full\": false}'",
        run=lazy("schedules", "create_schedule"),
        parents=[server],
        exits=UNUSABLE,
    )
    p.add_argument("name", metavar="NAME", help="the schedule's name")
    p.add_argument("workflow", metavar="WORKFLOW", help="the workflow it enqueues")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument(
        "--every",
        metavar="INTERVAL",
        help="fire every INTERVAL (30s, 5m, 1h30m; units d h m s ms; whole seconds, 1s to 366d)",
    )
    when.add_argument(
        "--cron",
        metavar="EXPR",
        help="fire on the cron expression EXPR (five fields, or @hourly, @daily, @weekly,"
        " @monthly, @yearly)",
    )
    p.add_argument(
        "--timezone",
        metavar="TZ",
        help="the cron's IANA timezone (default: UTC; --every: UTC only)",
    )
    p.add_argument(
        "--params",
        metavar="JSON",
        type=json_value,
        help=f"the params of each instance it enqueues (default: null); {JSON_SOURCES}",
    )

    for verb, summary in (
        ("enable", "enable schedule NAME (it fires at its next time, not for those it missed)"),
        ("disable", "disable schedule NAME: it fires no more until it is enabled"),
    ):
        p = add(
            f"{verb}-schedule",
            f"{summary}; print it",
            DATABASE,
            f"Example:\n  laneway {verb}-schedule nightly",
            run=lazy("schedules", f"{verb}_schedule"),
            parents=[server],
            exits={1: SCHEDULE_MISSING},
        )
        p.add_argument("name", metavar="NAME", help="the schedule's name")

    p = add(
        "delete-schedule",
        'delete schedule NAME and print {"name", "deleted"}',
        DATABASE,
        "Example:\n  laneway delete-schedule nightly --url http://127.0.0.1:8000",
        run=lazy("schedules", "delete_schedule"),
        parents=[server],
        exits={1: SCHEDULE_MISSING},
    )
    p.add_argument("name", metavar="NAME", help="the schedule's name")
