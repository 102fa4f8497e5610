"""Keyset pages benchmark: what a deep page of instances costs against the first.

Run with `.venv/bin/python bench/pages.py [--markdown]` (or `make bench-pages`). It uses
DATABASE_URL when set, else a throwaway embedded PostgreSQL with its default (durable)
settings, and a fresh database. Not part of `make test`.

`--instances` (1,000,000) instances are seeded by one INSERT ... SELECT generate_series: ten
workflow names in turn (so a name filter matches 100,000), one creation time per two rows (a
batch's rows share theirs), statuses mixed; then VACUUM ANALYZE. Timed through the engine, as
the API calls it (summaries, 50 a page): `Engine.page_instances` for page 1 and for page 1,000
(reached by following endCursor from page 1), and, for contrast, `Engine.list_instances` with
offset 0 and with offset 49,950 (the same rows as keyset page 1,000); each with no filter and
with a name filter. The cases take turns, `--calls` (50) timed calls each after `--warmup` (5);
the table has the median and p95 in milliseconds, and page 1,000 over page 1.
"""

import argparse
import asyncio
import functools
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncpg
from tables import print_rows

from laneway.engine.engine import Engine
from laneway.engine.registry import WorkflowRegistry
from laneway.model import InstanceFilter
from laneway.store import open_store
from laneway.store.databases import create_database, drop_database, throwaway_server

FIRST = 50
DEEP_PAGE = 1_000
NAMES = 10
FILTERED_NAME = "bench_w3"

# $1 the number of rows, $2 the number of names
SEED = """
INSERT INTO laneway.instances (instance_id, name, queue, status, params, created_at, updated_at,
                               finished_at)
SELECT gen_random_uuid(), 'bench_w' || (g % $2), 'bench',
       (ARRAY['completed', 'completed', 'completed', 'failed', 'cancelled'])[1 + g % 5],
       jsonb_build_object('n', g),
       now() - interval '1 day' - (g / 2) * interval '1 millisecond', now(), now()
  FROM generate_series(1, $1::int) AS g
"""


@dataclass(frozen=True)
class Case:
    label: str
    call: Callable[[], Awaitable[object]]


async def seed(url: str, instances: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        started = time.perf_counter()
        await conn.execute(SEED, instances, NAMES)
        await conn.execute("VACUUM ANALYZE laneway.instances")
        print(f"  seeded {instances:,} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    finally:
        await conn.close()


async def deep_cursor(engine: Engine, where: InstanceFilter) -> str:
    """The cursor after page DEEP_PAGE - 1, by following endCursor from the first page."""
    after: str | None = None
    for _ in range(DEEP_PAGE - 1):
        page = await engine.page_instances(where, first=FIRST, after=after)
        assert page.has_next, "too few instances for the deep page"
        after = page.end_cursor
    assert after is not None
    return after


async def cases(engine: Engine) -> list[Case]:
    found: list[Case] = []
    for label, where in (
        ("no filter", InstanceFilter()),
        ("name", InstanceFilter(name=FILTERED_NAME)),
    ):
        cursor = await deep_cursor(engine, where)
        deep_keyset = await engine.page_instances(where, first=FIRST, after=cursor)
        deep_offset = await engine.list_instances(
            where, limit=FIRST, offset=(DEEP_PAGE - 1) * FIRST, summaries=True
        )
        # The two deep pages are the same rows: the keyset walk lands where the offset does.
        assert [r.instance_id for r in deep_keyset.records] == [r.instance_id for r in deep_offset]

        deep = (DEEP_PAGE - 1) * FIRST
        keyset = functools.partial(engine.page_instances, where, first=FIRST)
        offset = functools.partial(engine.list_instances, where, limit=FIRST, summaries=True)
        found += [
            Case(f"keyset, {label}, page 1", keyset),
            Case(f"keyset, {label}, page {DEEP_PAGE:,}", functools.partial(keyset, after=cursor)),
            Case(f"offset, {label}, page 1", functools.partial(offset, offset=0)),
            Case(f"offset, {label}, page {DEEP_PAGE:,}", functools.partial(offset, offset=deep)),
        ]
    return found


async def measure(url: str, args: argparse.Namespace) -> dict[str, list[float]]:
    async with open_store(url) as store:
        engine = Engine(store, WorkflowRegistry([]))
        timed = await cases(engine)
        samples: dict[str, list[float]] = {case.label: [] for case in timed}
        for number in range(args.warmup + args.calls):
            for case in timed:
                started = time.perf_counter()
                await case.call()
                elapsed_ms = (time.perf_counter() - started) * 1000
                if number >= args.warmup:
                    samples[case.label].append(elapsed_ms)
    return samples


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) > 1 else values[0]


def print_table(samples: dict[str, list[float]], markdown: bool) -> None:
    header = ["page", "median ms", "p95 ms", f"page {DEEP_PAGE:,} / page 1"]
    lines = []
    for label, values in samples.items():
        ratio = ""
        if f"page {DEEP_PAGE:,}" in label:
            first = statistics.median(samples[label.replace(f"page {DEEP_PAGE:,}", "page 1")])
            ratio = f"{statistics.median(values) / first:.1f}×"
        lines.append([label, f"{statistics.median(values):.2f}", f"{p95(values):.2f}", ratio])
    print_rows(header, lines, markdown)


async def main(args: argparse.Namespace) -> int:
    given = args.database_url or os.environ.get("DATABASE_URL")
    # Durable settings as a server has them: honest figures, not a tuned throwaway.
    with throwaway_server(given, tune=False) as server_url:
        admin = await asyncpg.connect(server_url)
        version = await admin.fetchval("SHOW server_version")
        await admin.close()
        print(
            f"PostgreSQL {version}, {os.cpu_count()} cores; {args.instances:,} instances,"
            f" {FIRST} a page, {args.calls} timed calls per figure ({args.warmup} warm-up)",
            file=sys.stderr,
        )
        name = f"bench_pages_{os.getpid()}"
        url = await create_database(server_url, name, migrate=True)
        try:
            await seed(url, args.instances)
            samples = await measure(url, args)
        finally:
            await drop_database(server_url, name)
    print_table(samples, args.markdown)
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instances", type=int, default=1_000_000, help="seeded instances")
    parser.add_argument("--calls", type=int, default=50, help="timed calls per figure")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls first")
    parser.add_argument("--database-url")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args(argv)
    if args.instances < DEEP_PAGE * FIRST * NAMES or args.calls < 1 or args.warmup < 0:
        parser.error(f"--instances must be at least {DEEP_PAGE * FIRST * NAMES:,}, --calls >= 1")
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
