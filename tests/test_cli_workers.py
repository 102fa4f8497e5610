"""`laneway workers` on the database and through a server: the live processes that run an
engine, from the registry each one's heartbeat keeps."""

import json

from app.examples import hello
from laneway.store import Store
from tests.cli_ways import both_ways, ways
from tests.engine.helpers import make_engine


@both_ways
async def test_workers_lists_the_processes_running_an_engine(
    way: str, database_url: str, store: Store
) -> None:
    async with ways(way, database_url) as laneway:
        code, out, err = await laneway("workers")
        assert code == 0, err
        assert out.startswith("No process runs an engine on "), out
        engine = make_engine(store, hello, poll_interval_seconds=0.05)
        async with engine.running():
            code, out, err = await laneway("workers", "--json")
            assert code == 0, err
            (worker,) = json.loads(out)
            assert worker["versions"] == [{"name": "hello", "version": "1"}]
            assert worker["running"] == 0
            code, out, err = await laneway("workers")
            assert code == 0, err
        rows = [line.split() for line in out.splitlines() if line.strip()]
        assert rows[1][:4] == ["owner", "role", "running", "versions"], out
        assert rows[3][0] == worker["ownerID"], out
        assert " ".join(rows[3][2:6]) == f"0 of {worker['concurrency']} hello@1", out
