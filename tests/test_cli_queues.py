"""`laneway configure-queue`, `queue-history`, `pause-queue` and `resume-queue` on the database
and through a server.

configure-queue sets every cap at once and prints the queue as `queues --json` does;
queue-history prints one row a minute, oldest first; pause-queue and resume-queue say what the
queue holds, or print it as `queues --json` does. Exit codes: 0 ok, 1 an unknown queue's
history, 2 a bad cap, number of minutes or queue name.
"""

import json
import time
from datetime import datetime

from app.examples import hello
from laneway.events import EventHub
from laneway.model import Status
from laneway.store import Store
from tests.api.test_queue_history_api import _past_activity
from tests.cli_ways import both_ways, ways
from tests.engine.helpers import make_engine, until_status
from tests.engine.test_queue_pause import claims_begun, idle_since


@both_ways
async def test_configure_queue_sets_every_cap_and_queues_shows_them(
    way: str, database_url: str
) -> None:
    async with ways(way, database_url) as laneway:
        code, out, err = await laneway(
            "configure-queue", "emails", "--concurrency", "3", "--rate-per-minute", "120",
            "--key-concurrency", "1", "--key-rate-per-minute", "2.5",
        )  # fmt: skip
        assert code == 0, err
        configured = json.loads(out)
        assert {k: configured[k] for k in configured if k != "counts"} == {
            "name": "emails",
            "concurrency": 3,
            "ratePerMinute": 120.0,
            "keyConcurrency": 1,
            "keyRatePerMinute": 2.5,
            "paused": False,
            "settingsSource": "operator",
        }
        code, out, err = await laneway("queues", "--json")
        assert code == 0, err
        assert configured in json.loads(out)
        code, out, err = await laneway("queues")
        assert code == 0, err
        assert any(
            line.split()[:5] == ["emails", "3,", "120/min;", "per", "key"]
            for line in out.splitlines()
        ), out
        # A cap left out is no cap: the rates go.
        code, out, err = await laneway("configure-queue", "emails", "--concurrency", "4")
        assert code == 0, err
        assert json.loads(out)["ratePerMinute"] is None
        assert json.loads(out)["keyConcurrency"] is None
        for args, says in (
            (["--concurrency", "0"], "laneway: --concurrency must be at least 1 and at most"),
            (["--concurrency", "1", "--key-rate-per-minute", "0"], "--key-rate-per-minute must"),
            # An outside audit: a rate this near 0 was taken and then failed every claim round.
            (
                ["--concurrency", "1", "--rate-per-minute", "5e-324"],
                "laneway: --rate-per-minute must be at least 0.0001 and at most 1000000000",
            ),
            (
                ["--concurrency", "1", "--key-rate-per-minute", "1e-310"],
                "laneway: --key-rate-per-minute must be at least 0.0001 and at most 1000000000",
            ),
            (["--concurrency", "1", "--rate-per-minute", "1e308"], "--rate-per-minute must be"),
            (["--concurrency", "two"], "argument --concurrency: must be a whole number"),
            (["--concurrency", "1", "--rate-per-minute", "nan"], "must be a finite number"),
            ([], "the following arguments are required: --concurrency"),
        ):
            code, _, err = await laneway("configure-queue", "emails", *args)
            assert code == 2, err
            assert says in err, err


@both_ways
async def test_queue_history_shows_a_row_a_minute_oldest_first(
    way: str, database_url: str, store: Store
) -> None:
    enqueued = await make_engine(store, hello).enqueue("hello", {"name": "h"})
    # Two starts, a retry and a completion three minutes ago, rolled up.
    minute = await _past_activity(database_url, str(enqueued.instance_id))
    async with ways(way, database_url) as laneway:
        code, out, err = await laneway("queue-history", "hello", "--minutes", "5", "--json")
        assert code == 0, err
        samples = json.loads(out)
        assert [s["at"] for s in samples] == sorted(s["at"] for s in samples)
        busy = {s["at"]: s for s in samples}[minute.timestamp() * 1000]
        assert (busy["started"], busy["retried"], busy["completed"]) == (2, 1, 1)
        code, out, err = await laneway("queue-history", "hello", "--minutes", "5")
        assert code == 0, err
        rows = [line.split() for line in out.splitlines() if line.strip()]
        assert rows[1] == ["minute", "started", "completed", "failed", "retried", "pending"], out
        # The minutes are labelled with their date when they span two days (near midnight)
        days = {datetime.fromtimestamp(s["at"] / 1000).astimezone().date() for s in samples}
        label = f"{minute.astimezone():%m-%d %H:%M}"[0 if len(days) > 1 else 6 :].split()
        row = next(r for r in rows if r[: len(label)] == label)
        assert row[len(label) : len(label) + 4] == ["2", "1", "0", "1"], out
        assert len(rows) == 3 + 5  # title, header, rule, five minutes
        code, _, err = await laneway("queue-history", "no-such-queue")
        assert code == 1
        assert "no-such-queue" in err
        code, _, err = await laneway("queue-history", "hello", "--minutes", "0")
        assert code == 2, err
        assert err.startswith("laneway: --minutes must be at least 1"), err


@both_ways
async def test_pause_and_resume_queue_say_what_the_queue_holds_or_print_it(
    way: str, database_url: str, store: Store
) -> None:
    engine = make_engine(store, hello)
    await engine.enqueue("hello", {"name": "waits"}, queue="emails")
    # Not due for ten minutes: a resume does not start it now, and the line must not say so.
    await engine.enqueue("hello", {"name": "later"}, queue="emails", delay_ms=600_000)
    async with ways(way, database_url) as laneway:
        for _ in range(2):  # a second pause changes nothing
            code, out, err = await laneway("pause-queue", "emails")
            assert code == 0, err
            assert out == (
                "Queue emails is paused (running: 0, they finish; pending: 2, they wait for"
                " resume-queue).\n"
            )
        code, out, err = await laneway("pause-queue", "emails", "--json")
        assert code == 0, err
        paused = json.loads(out)
        assert (paused["name"], paused["paused"], paused["counts"]["pending"]) == (
            "emails",
            True,
            2,
        )
        code, out, err = await laneway("queues", "--json")
        assert code == 0, err
        assert paused in json.loads(out)
        code, out, err = await laneway("queues")
        assert code == 0, err
        assert any(line.split()[:3] == ["emails", "100;", "paused"] for line in out.splitlines())

        code, out, err = await laneway("resume-queue", "emails", "--json")
        assert code == 0, err
        assert json.loads(out) == {**paused, "paused": False}
        code, out, err = await laneway("resume-queue", "emails")
        assert code == 0, err
        assert out == (
            "Queue emails is not paused (pending: 2, each starts once due, within its caps).\n"
        )

        for name, says in (
            ("has space", "laneway: queue name must be 1-64 letters, digits or _ . : -"),
            ("x" * 65, "laneway: NAME must be at most 64 characters"),
        ):
            for command in ("pause-queue", "resume-queue"):
                code, out, err = await laneway(command, name)
                assert (code, out) == (2, ""), err
                assert err.startswith(says), err
        assert not {"has space", "x" * 65} & {q.name for q in await store.queues()}


@both_ways
async def test_resume_queue_starts_an_idle_workers_instance_before_its_next_poll(
    way: str, database_url: str, store: Store
) -> None:
    worker = make_engine(store, hello, owner_id="idle-worker", poll_interval_seconds=30.0)
    claims = claims_begun(store)
    async with ways(way, database_url) as laneway:
        code, _, err = await laneway("pause-queue", "hello")
        assert code == 0, err
        hub = EventHub.open(database_url, store, on_notification=worker.notify)
        async with hub, worker.running():
            before = time.monotonic()
            enqueued = await worker.enqueue("hello", {"name": "soon"})
            await idle_since(claims, before)
            began = time.monotonic()
            code, _, err = await laneway("resume-queue", "hello")
            assert code == 0, err
            await until_status(store, enqueued.instance_id, Status.COMPLETED, timeout=15)
            assert time.monotonic() - began < 10.0
