"""`laneway schedules`, `create-schedule`, `enable-schedule`, `disable-schedule` and
`delete-schedule`: the recurring enqueues.

Owns their documents (schedules, createSchedule, setScheduleEnabled, deleteSchedule), the
table of the schedules, and what each action prints: the schedule as `schedules --json` shows
it, or for a delete `{"name", "deleted"}`. A schedule there is not is one error, exit 1, for
enable, disable and delete alike.
"""

import argparse

from laneway.cli import output
from laneway.cli.client import EXIT_FAILED, EXIT_OK, CommandError, JSONObject
from laneway.cli.commands import open_client, print_listing
from laneway.cli.option_words import flags, option_words
from laneway.cli.output import Column, Listing
from laneway.config import Settings

SCHEDULE_FIELDS = "name workflowName every cron timezone enabled nextRun params"
SCHEDULES = f"{{ schedules {{ {SCHEDULE_FIELDS} }} }}"
CREATE_SCHEDULE = f"""mutation ($name: String!, $workflowName: String!, $params: JSON,
                   $every: String, $cron: String, $timezone: String) {{
  schedule: createSchedule(name: $name, workflowName: $workflowName, params: $params,
                           every: $every, cron: $cron, timezone: $timezone) {{
    {SCHEDULE_FIELDS}
  }}
}}"""
SET_SCHEDULE_ENABLED = f"""mutation ($name: String!, $enabled: Boolean!) {{
  schedule: setScheduleEnabled(name: $name, enabled: $enabled) {{ {SCHEDULE_FIELDS} }}
}}"""
DELETE_SCHEDULE = "mutation ($name: String!) { deleted: deleteSchedule(name: $name) }"
# What the user typed for each argument of these mutations, for the API's refusals.
OPTIONS = {
    "name": "NAME",
    "workflowName": "WORKFLOW",
    **flags("params", "every", "cron", "timezone"),
}


def _recurrence(schedule: JSONObject) -> str:
    if schedule["every"] is not None:
        return f"every {schedule['every']}"
    return f"{schedule['cron']} ({schedule['timezone']})"


def schedules_table(schedules: list[JSONObject]) -> Listing:
    columns = [
        Column("schedule"),
        Column("workflow", drop=1),
        Column("when", drop=2),
        Column("enabled", drop=3),
        Column("next fire", drop=4),
        Column("params", drop=5),
    ]
    rows = [
        [
            schedule["name"],
            schedule["workflowName"],
            _recurrence(schedule),
            "yes" if schedule["enabled"] else "no",
            output.human_time(schedule["nextRun"]),
            output.json_text(schedule["params"]),
        ]
        for schedule in schedules
    ]
    return Listing("Schedules", columns, rows)


async def schedules(args: argparse.Namespace, settings: Settings) -> int:
    """List the schedules, as a table or JSON."""
    empty = "No schedules."
    return await print_listing(args, settings, SCHEDULES, "schedules", schedules_table, empty)


async def create_schedule(args: argparse.Namespace, settings: Settings) -> int:
    """Create (or replace) a schedule and print it."""
    async with open_client(args, settings) as client, option_words(OPTIONS):
        client.check_workflow(args.workflow)
        data = await client.execute(
            CREATE_SCHEDULE,
            name=args.name,
            workflowName=args.workflow,
            params=args.params,
            every=args.every,
            cron=args.cron,
            timezone=args.timezone,
        )
    output.print_json(data["schedule"])
    return EXIT_OK


def _missing(name: str) -> CommandError:
    """The one error of enable, disable and delete for a name no schedule has (exit 1). A
    missing schedule is an enable's NOT_FOUND but a delete's `false`: said here, both read
    alike, whatever words the API's NOT_FOUND has."""
    return CommandError(f"no schedule named {name!r}", EXIT_FAILED, code="NOT_FOUND")


async def _set_enabled(args: argparse.Namespace, settings: Settings, enabled: bool) -> int:
    try:
        async with open_client(args, settings) as client, option_words(OPTIONS):
            data = await client.execute(SET_SCHEDULE_ENABLED, name=args.name, enabled=enabled)
    except CommandError as exc:
        if exc.code == "NOT_FOUND":
            raise _missing(args.name) from None
        raise
    output.print_json(data["schedule"])
    return EXIT_OK


async def enable_schedule(args: argparse.Namespace, settings: Settings) -> int:
    """Enable a schedule (it fires next at its next time, not for the ones it missed)."""
    return await _set_enabled(args, settings, True)


async def disable_schedule(args: argparse.Namespace, settings: Settings) -> int:
    """Disable a schedule: it fires no more until it is enabled."""
    return await _set_enabled(args, settings, False)


async def delete_schedule(args: argparse.Namespace, settings: Settings) -> int:
    """Delete a schedule and print `{"name", "deleted"}`.

    Raises:
        CommandError: there is no schedule of that name (exit 1).
    """
    async with open_client(args, settings) as client, option_words(OPTIONS):
        deleted = (await client.execute(DELETE_SCHEDULE, name=args.name))["deleted"]
    if not deleted:
        raise _missing(args.name)
    output.print_json({"name": args.name, "deleted": True})
    return EXIT_OK
