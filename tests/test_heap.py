"""The start-up heap freeze: once its services are built, a process freezes what start-up
made (unless Settings.gc_freeze is off), and only the first time.

Each case runs in a fresh interpreter: this test process's own heap was frozen by whichever
test opened services first."""

import asyncio
import json
import sys

from laneway import Settings

SCRIPT = """
import asyncio, gc, json, sys
from laneway import Settings, open_services
from laneway.heap import freeze_startup_heap

async def main():
    settings = Settings(database_url=sys.argv[1], gc_freeze=sys.argv[2] == "1")
    before = gc.get_freeze_count()
    async with open_services(settings):
        frozen = gc.get_freeze_count()
    async with open_services(settings):
        again = gc.get_freeze_count()
    print(json.dumps({"before": before, "frozen": frozen, "again": again,
                      "later_call_froze": freeze_startup_heap()}))

asyncio.run(main())
"""


async def _freeze_counts(database_url: str, *, freeze: bool) -> dict[str, object]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SCRIPT,
        database_url,
        "1" if freeze else "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    answer: dict[str, object] = json.loads(out.decode().strip().splitlines()[-1])
    return answer


def test_the_freeze_is_on_unless_turned_off() -> None:
    assert Settings().gc_freeze is True
    assert Settings.from_env({}).gc_freeze is True
    assert Settings.from_env({"LANEWAY_GC_FREEZE": "0"}).gc_freeze is False


async def test_open_services_freezes_the_start_up_heap_once(database_url: str) -> None:
    counts = await _freeze_counts(database_url, freeze=True)
    assert counts["before"] == 0
    frozen = counts["frozen"]
    assert isinstance(frozen, int)
    assert frozen > 10_000  # modules, the registry, the pools: start-up's objects
    again = counts["again"]
    assert isinstance(again, int)
    # The second services froze nothing more (frozen objects that refcounting frees leave the
    # count, so it may fall; a second freeze would have added that services' objects).
    assert again <= frozen
    assert counts["later_call_froze"] is False


async def test_gc_freeze_off_leaves_the_collector_alone(database_url: str) -> None:
    counts = await _freeze_counts(database_url, freeze=False)
    assert counts == {"before": 0, "frozen": 0, "again": 0, "later_call_froze": True}
