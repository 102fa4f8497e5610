"""`laneway schedules`, `create-schedule`, `enable-schedule`, `disable-schedule` and
`delete-schedule` on the database and through a server.

Each action prints the schedule as `schedules --json` lists it (a delete: {name, deleted}).
Exit codes: 0 ok, 1 no schedule of that name, 2 a bad interval, cron, workflow or params.
"""

import json
from pathlib import Path

from tests.cli_ways import both_ways, ways


@both_ways
async def test_schedules_are_created_listed_disabled_enabled_and_deleted(
    way: str, database_url: str, tmp_path: Path
) -> None:
    params = tmp_path / "params.json"
    params.write_text('{"name": "Nightly"}')
    async with ways(way, database_url) as laneway:
        code, out, err = await laneway("schedules")
        assert (code, out) == (0, "No schedules.\n"), err
        code, out, err = await laneway(
            "create-schedule", "nightly", "hello", "--cron", "0 3 * * *",
            "--timezone", "Europe/Paris", "--params", f"@{params}",
        )  # fmt: skip
        assert code == 0, err
        nightly = json.loads(out)
        assert {k: v for k, v in nightly.items() if k != "nextRun"} == {
            "name": "nightly",
            "workflowName": "hello",
            "every": None,
            "cron": "0 3 * * *",
            "timezone": "Europe/Paris",
            "enabled": True,
            "params": {"name": "Nightly"},
        }
        code, out, err = await laneway(
            "create-schedule", "ping", "hello", "--every", "5m", "--params", "-",
            stdin=b'{"name": "Ping"}',
        )  # fmt: skip
        assert code == 0, err
        ping = json.loads(out)
        code, out, err = await laneway("schedules", "--json")
        assert code == 0, err
        assert sorted(json.loads(out), key=lambda s: s["name"]) == [nightly, ping]
        code, out, err = await laneway("schedules")
        assert code == 0, err
        lines = out.splitlines()
        assert lines[2].split() == [
            "schedule",
            "workflow",
            "when",
            "enabled",
            "next",
            "fire",
            "params",
        ]
        assert any(line.split()[:5] == ["ping", "hello", "every", "5m", "yes"] for line in lines)
        assert any("0 3 * * * (Europe/Paris)" in line for line in lines), out

        code, out, err = await laneway("disable-schedule", "ping")
        assert code == 0, err
        assert (json.loads(out)["enabled"], json.loads(out)["nextRun"]) == (False, None)
        code, out, err = await laneway("enable-schedule", "ping")
        assert code == 0, err
        assert json.loads(out)["enabled"] is True
        assert isinstance(json.loads(out)["nextRun"], float)
        code, out, err = await laneway("delete-schedule", "ping")
        assert code == 0, err
        assert json.loads(out) == {"name": "ping", "deleted": True}
        # One wording for a schedule there is not, whichever command met it.
        for command in ("delete-schedule", "enable-schedule", "disable-schedule"):
            code, out, err = await laneway(command, "ping")
            assert (code, out, err) == (1, "", "laneway: no schedule named 'ping'\n"), command


@both_ways
async def test_create_schedule_refuses_what_cannot_be_scheduled(
    way: str, database_url: str
) -> None:
    async with ways(way, database_url) as laneway:
        for args, says in (
            (["x", "nope", "--every", "5m"], "unknown workflow 'nope'"),
            (["x", "hello", "--every", "often"], "invalid interval"),
            (["x", "hello", "--cron", "61 * * * *"], "cron"),
            (["x", "hello", "--every", "5m", "--params", '{"name": ""}'], "params rejected"),
            (["x", "hello"], "one of the arguments --every --cron is required"),
            (["x", "hello", "--every", "1m", "--cron", "* * * * *"], "not allowed with"),
            (
                ["x", "hello", "--every", "1d", "--timezone", "Europe/Berlin"],
                "an interval is counted from the Unix epoch in UTC",
            ),
        ):
            code, _, err = await laneway("create-schedule", *args)
            assert code == 2, err
            assert says in err, err
        code, out, _ = await laneway("schedules", "--json")
        assert json.loads(out) == []
