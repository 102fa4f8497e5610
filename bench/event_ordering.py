"""Benchmark: keeping an id-ordered event log safe for "resume after event X" readers.

Laneway appends workflow events to ``events(event_id bigint identity, ...)`` and readers
resume "after event X".  Identity/bigserial values are handed out when a row is inserted,
not when its transaction commits, so a reader polling ``event_id > cursor`` can see id 2
before id 1 commits, move its cursor past 1 and never deliver it.  This script compares:

  0  baseline: no ordering protection (unsafe; for reference only)
  A  ``SELECT pg_advisory_xact_lock(<const>)`` just before the event INSERT, so appends are
     serialised until commit; readers keep the plain ``event_id > $cursor`` query
  B  an ``xid xid8 NOT NULL DEFAULT pg_current_xact_id()`` column; readers only read rows
     with ``xid < pg_snapshot_xmin(pg_current_snapshot())`` ordered by (xid, event_id)

Each technique gets its own schema (bench_0, bench_a, bench_b) with a 10k-row ``instances``
table and an ``events`` table; the script creates and drops them.  It measures:

  1. write throughput: commits/s of the transaction
       BEGIN; UPDATE one instances row by primary key; [lock]; INSERT one event;
       SELECT pg_notify('bench_events', ...); COMMIT
     with 1, 4, 16 and 64 concurrent writer connections (asyncpg pool; a fixed number of
     transactions per run, split over the writers, each writer on its own instances), and
     a "batched" shape (50 instance updates + 50 events in one multi-row unnest() INSERT per
     transaction) reported as events/s;
  2. reader correctness: two writers commit in reverse order of their inserts (writer 1
     inserts, holds its commit for 200 ms; writer 2 inserts after it and commits at once);
     a reader polls right after writer 2's commit.  The baseline skips event 1, A and B
     must not.  A second scenario shows per-instance delivery order when a transaction
     that got its xid early waits on a row lock and then appends an event;
  3. reader cost: the id reader query (``event_id > $1 ORDER BY event_id LIMIT 500``) vs
     the xid8 horizon query on 200k events, median of 200 runs per round, for a reader that
     is catching up (500 rows returned) and one at the tail (nothing new).

Workloads are run in interleaved rounds (technique order rotated each round); the table
shows the median over rounds and the min–max.  Durability settings are whatever the
server has (printed at the top) unless ``--synchronous-commit`` sets them per session.
``--no-notify`` drops the pg_notify: a notifying transaction takes a cluster-wide lock at
commit (so queue entries appear in commit order), which already serialises commits and
hides part of what technique A costs.  The client shares the machine with the server, so
the load average is printed before and after: read the ratios, not the absolute figures,
on a busy box.

Run it with the project venv (defaults take about 2–3 minutes):

    .venv/bin/python bench/event_ordering.py                      # embedded pgserver
    .venv/bin/python bench/event_ordering.py --database-url postgresql://postgres@127.0.0.1/postgres
    DATABASE_URL=... .venv/bin/python bench/event_ordering.py --rounds 5 --synchronous-commit off

Without ``--database-url`` or DATABASE_URL it starts an embedded PostgreSQL with
``pgserver`` in ``.laneway/bench-pg`` (or ``--pgdata``), stopped again on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import warnings
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import asyncpg

if TYPE_CHECKING:
    from typing import TypeAlias

    from asyncpg.pool import PoolConnectionProxy
    from pgserver.postgres_server import PostgresServer

    Conn: TypeAlias = asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]
    Pool: TypeAlias = asyncpg.Pool[asyncpg.Record]

INSTANCES: Final = 10_000
BATCH: Final = 50
READER_EVENTS: Final = 200_000
READER_RUNS: Final = 200
READ_LIMIT: Final = 500
LOCK_KEY: Final = 7_401_215  # any constant shared by all event writers
HOLD_COMMIT_S: Final = 0.2  # the skip scenario: writer 1 commits 200 ms after inserting
WAIT_LIMIT_S: Final = 5.0  # bound on waiting for a scenario step (e.g. a row-lock wait)

# All statements are unqualified: every connection runs with search_path = its schema.
DDL: Final = """
CREATE TABLE instances (
    id uuid PRIMARY KEY,
    status text NOT NULL,
    version bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO instances (id, status)
    SELECT gen_random_uuid(), 'running' FROM generate_series(1, {instances});
CREATE TABLE events (
    event_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_id uuid NOT NULL,
    type text NOT NULL,
    status text NOT NULL,
    at timestamptz NOT NULL DEFAULT now(){xid_column}
);
{xid_index}
ANALYZE instances;
"""
XID_COLUMN: Final = ",\n    xid xid8 NOT NULL DEFAULT pg_current_xact_id()"
XID_INDEX: Final = "CREATE INDEX events_xid_event_id ON events (xid, event_id);"

UPDATE_ONE: Final = (
    "UPDATE instances SET status = $2, version = version + 1, updated_at = now() WHERE id = $1"
)
UPDATE_MANY: Final = (
    "UPDATE instances SET status = $2, version = version + 1, updated_at = now()"
    " WHERE id = ANY($1::uuid[])"
)
LOCK: Final = f"SELECT pg_advisory_xact_lock({LOCK_KEY})"
INSERT_ONE: Final = (
    "INSERT INTO events (instance_id, type, status) VALUES ($1, $2, $3) RETURNING event_id"
)
INSERT_MANY: Final = (
    "INSERT INTO events (instance_id, type, status)"
    " SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[])"
)
NOTIFY: Final = "SELECT pg_notify('bench_events', $1)"
TRUNCATE: Final = "TRUNCATE events RESTART IDENTITY"
READ_BY_ID: Final = (
    "SELECT event_id, instance_id, type, status, at FROM events"
    " WHERE event_id > $1 ORDER BY event_id LIMIT 500"
)
READ_BY_XID: Final = (
    "SELECT xid, event_id, instance_id, type, status, at FROM events"
    " WHERE (xid, event_id) > ($1::xid8, $2::bigint)"
    " AND xid < pg_snapshot_xmin(pg_current_snapshot())"
    " ORDER BY xid, event_id LIMIT 500"
)
FILL_ROWS_PER_TX: Final = 100
FILL: Final = (
    "INSERT INTO events (instance_id, type, status)"
    " SELECT gen_random_uuid(), 'step.completed', 'running' FROM generate_series(1, $1)"
)

# The n-th event (0-based) in reader order, as a (xid, event_id) cursor.
CURSOR_AT_ID: Final = "SELECT 0 AS x, event_id FROM events ORDER BY event_id OFFSET $1 LIMIT 1"
CURSOR_AT_XID: Final = (
    "SELECT xid::text::bigint AS x, event_id FROM events ORDER BY xid, event_id OFFSET $1 LIMIT 1"
)


@dataclass(frozen=True)
class Technique:
    key: str
    schema: str
    label: str
    lock: bool  # A: advisory xact lock before the event INSERT
    xid: bool  # B: xid8 column and horizon reader


TECHNIQUES: Final = (
    Technique("0", "bench_0", "0 baseline", lock=False, xid=False),
    Technique("A", "bench_a", "A advisory", lock=True, xid=False),
    Technique("B", "bench_b", "B xid8", lock=False, xid=True),
)


@dataclass(frozen=True)
class Workload:
    batched: bool
    writers: int
    transactions: int

    @property
    def label(self) -> str:
        shape = f"batched x{BATCH}" if self.batched else "single"
        return f"{shape}, {self.writers} writer{'s' if self.writers > 1 else ''}"

    @property
    def unit(self) -> str:
        return "events/s" if self.batched else "commits/s"


@dataclass(frozen=True)
class Config:
    dsn: str
    rounds: int
    transactions: int
    batch_transactions: int
    writers: tuple[int, ...]
    batch_writers: tuple[int, ...]
    synchronous_commit: str | None
    notify: bool


# --------------------------------------------------------------------------- connections


async def connect(cfg: Config, schema: str) -> asyncpg.Connection[asyncpg.Record]:
    conn = await asyncpg.connect(cfg.dsn, server_settings={"search_path": schema})
    if cfg.synchronous_commit is not None:
        await conn.execute(f"SET synchronous_commit = {cfg.synchronous_commit}")
    return conn


async def create_pool(cfg: Config, schema: str, size: int) -> Pool:
    async def setup(conn: PoolConnectionProxy[asyncpg.Record]) -> None:
        if cfg.synchronous_commit is not None:
            await conn.execute(f"SET synchronous_commit = {cfg.synchronous_commit}")

    return await asyncpg.create_pool(
        cfg.dsn,
        min_size=size,
        max_size=size,
        setup=setup,
        server_settings={"search_path": schema},
    )


# --------------------------------------------------------------------------- schema


async def create_schemas(cfg: Config) -> dict[str, list[Any]]:
    """Create each technique's schema; return its instance ids (sorted)."""
    ids: dict[str, list[Any]] = {}
    admin = await asyncpg.connect(cfg.dsn)
    try:
        for tech in TECHNIQUES:
            await admin.execute(f"DROP SCHEMA IF EXISTS {tech.schema} CASCADE")
            await admin.execute(f"CREATE SCHEMA {tech.schema}")
        for tech in TECHNIQUES:
            conn = await connect(cfg, tech.schema)
            try:
                await conn.execute(
                    DDL.format(
                        instances=INSTANCES,
                        xid_column=XID_COLUMN if tech.xid else "",
                        xid_index=XID_INDEX if tech.xid else "",
                    )
                )
                ids[tech.key] = [
                    r["id"] for r in await conn.fetch("SELECT id FROM instances ORDER BY id")
                ]
            finally:
                await conn.close()
    finally:
        await admin.close()
    return ids


async def drop_schemas(dsn: str) -> None:
    admin = await asyncpg.connect(dsn)
    try:
        for tech in TECHNIQUES:
            await admin.execute(f"DROP SCHEMA IF EXISTS {tech.schema} CASCADE")
    finally:
        await admin.close()


async def server_settings(cfg: Config) -> list[tuple[str, str]]:
    conn = await connect(cfg, "public")
    try:
        out: list[tuple[str, str]] = [("server", str(await conn.fetchval("SHOW server_version")))]
        for name in ("fsync", "wal_sync_method", "commit_delay", "max_connections"):
            out.append((name, str(await conn.fetchval(f"SHOW {name}"))))
        row = await conn.fetchrow(
            "SELECT reset_val, setting FROM pg_settings WHERE name = 'synchronous_commit'"
        )
        assert row is not None
        sc = f"{row['reset_val']} on the server"
        if cfg.synchronous_commit is not None:
            sc += f"; this run: SET synchronous_commit = {row['setting']} per session"
        out.append(("synchronous_commit", sc))
        return out
    finally:
        await conn.close()


# --------------------------------------------------------------------------- writers


async def write_single(conn: Conn, tech: Technique, notify: bool, instance: Any) -> None:
    async with conn.transaction():
        await conn.execute(UPDATE_ONE, instance, "running")
        if tech.lock:
            await conn.execute(LOCK)
        event_id = await conn.fetchval(INSERT_ONE, instance, "step.completed", "running")
        if notify:
            await conn.execute(NOTIFY, f"{tech.schema}:{event_id}")


async def write_batch(conn: Conn, tech: Technique, notify: bool, instances: list[Any]) -> None:
    n = len(instances)
    async with conn.transaction():
        await conn.execute(UPDATE_MANY, instances, "running")
        if tech.lock:
            await conn.execute(LOCK)
        await conn.execute(INSERT_MANY, instances, ["step.completed"] * n, ["running"] * n)
        if notify:
            await conn.execute(NOTIFY, f"{tech.schema}:batch:{n}")


async def run_workload(
    cfg: Config, tech: Technique, work: Workload, instance_ids: list[Any]
) -> float:
    """One timed run; returns commits/s (single) or events/s (batched)."""
    pool = await create_pool(cfg, tech.schema, work.writers)
    try:
        async with pool.acquire() as conn:
            await conn.execute(TRUNCATE)
        conns = [await pool.acquire() for _ in range(work.writers)]
        try:
            per_writer = [
                work.transactions // work.writers
                + (1 if i < work.transactions % work.writers else 0)
                for i in range(work.writers)
            ]

            async def writer(i: int, count: int) -> None:
                conn = conns[i]
                mine = instance_ids[i :: work.writers]  # disjoint: no row-lock waits
                for n in range(count):
                    if work.batched:
                        start = (n * BATCH) % len(mine)
                        chunk = (mine[start:] + mine[:start])[:BATCH]
                        await write_batch(conn, tech, cfg.notify, sorted(chunk))
                    else:
                        await write_single(conn, tech, cfg.notify, mine[n % len(mine)])

            # Untimed warm-up: one transaction per connection (prepares the statements).
            await asyncio.gather(*(writer(i, 1) for i in range(work.writers)))
            started = time.perf_counter()
            await asyncio.gather(*(writer(i, c) for i, c in enumerate(per_writer)))
            elapsed = time.perf_counter() - started
        finally:
            for conn in conns:
                await pool.release(conn)
    finally:
        await pool.close()
    done = work.transactions * (BATCH if work.batched else 1)
    return done / elapsed


# --------------------------------------------------------------------------- readers


Cursor = tuple[int, int]  # (xid, event_id); xid is 0 for the id reader


async def poll(conn: Conn, tech: Technique, cursor: Cursor) -> tuple[list[int], Cursor]:
    if tech.xid:
        rows = await conn.fetch(READ_BY_XID, cursor[0], cursor[1])
        if rows:
            cursor = (int(rows[-1]["xid"]), int(rows[-1]["event_id"]))
    else:
        rows = await conn.fetch(READ_BY_ID, cursor[1])
        if rows:
            cursor = (0, int(rows[-1]["event_id"]))
    return [int(r["event_id"]) for r in rows], cursor


async def wait_until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + WAIT_LIMIT_S
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        await asyncio.sleep(0.005)


@dataclass(frozen=True)
class SkipResult:
    first_poll: list[int]
    delivered: list[int]
    missed: list[int]


async def skip_check(cfg: Config, tech: Technique, ids: list[Any]) -> SkipResult:
    """Writer 1 inserts first but commits 200 ms later; writer 2 inserts after it and
    commits at once; the reader polls as soon as writer 2's commit has returned."""
    w1, w2, reader = [await connect(cfg, tech.schema) for _ in range(3)]
    try:
        await reader.execute(TRUNCATE)
        inserted = asyncio.Event()

        async def writer1() -> None:
            async with w1.transaction():
                await w1.execute(UPDATE_ONE, ids[0], "running")
                if tech.lock:
                    await w1.execute(LOCK)
                await w1.fetchval(INSERT_ONE, ids[0], "step.completed", "running")
                inserted.set()
                await asyncio.sleep(HOLD_COMMIT_S)  # the scenario: a slow commit

        async def writer2_then_poll() -> tuple[list[int], Cursor]:
            await inserted.wait()
            async with w2.transaction():
                await w2.execute(UPDATE_ONE, ids[1], "running")
                if tech.lock:
                    await w2.execute(LOCK)
                await w2.fetchval(INSERT_ONE, ids[1], "step.completed", "running")
            return await poll(reader, tech, (0, 0))

        task1 = asyncio.create_task(writer1())
        first, cursor = await asyncio.wait_for(writer2_then_poll(), WAIT_LIMIT_S)
        await asyncio.wait_for(task1, WAIT_LIMIT_S)
        rest, cursor = await poll(reader, tech, cursor)
        stored = [int(r["event_id"]) for r in await reader.fetch("SELECT event_id FROM events")]
        delivered = first + rest
        return SkipResult(first, delivered, sorted(set(stored) - set(delivered)))
    finally:
        for conn in (w1, w2, reader):
            await conn.close()


async def order_check(cfg: Config, tech: Technique, ids: list[Any]) -> list[str]:
    """Per-instance delivery order when a transaction that got its xid early waits on a
    row lock: T1 writes instance P (gets xid1); T2 writes instance X (xid2 > xid1); T1 then
    updates X and blocks; T2 appends an event for X and commits; T1 appends its event for
    X and commits.  Commit (and causal) order for X is T2, T1.  Returns the event types
    for X in the order a reader delivers them."""
    p, x = ids[2], ids[3]
    t1, t2, reader = [await connect(cfg, tech.schema) for _ in range(3)]
    try:
        await reader.execute(TRUNCATE)
        tx1, tx2 = t1.transaction(), t2.transaction()
        await tx1.start()
        await tx2.start()
        await t1.execute(UPDATE_ONE, p, "running")
        await t2.execute(UPDATE_ONE, x, "running")

        async def t1_rest() -> None:
            await t1.execute(UPDATE_ONE, x, "running")  # waits for T2's row lock
            if tech.lock:
                await t1.execute(LOCK)
            await t1.fetchval(INSERT_ONE, x, "from-T1", "running")
            await tx1.commit()

        async def t1_waits() -> bool:
            state = await reader.fetchval(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1",
                t1.get_server_pid(),
            )
            return bool(state == "Lock")

        task1 = asyncio.create_task(t1_rest())
        try:
            await wait_until(t1_waits, "T1 to wait for the row lock")
            if tech.lock:
                await t2.execute(LOCK)
            await t2.fetchval(INSERT_ONE, x, "from-T2", "running")
            await tx2.commit()
            await asyncio.wait_for(task1, WAIT_LIMIT_S)
        finally:
            task1.cancel()  # no-op when done; closing the connections rolls back
        delivered: list[int] = []
        cursor: Cursor = (0, 0)
        for _ in range(10):  # bounded: there are two events
            batch, cursor = await poll(reader, tech, cursor)
            delivered += batch
            if len(delivered) >= 2:
                break
        types = {
            int(r["event_id"]): str(r["type"])
            for r in await reader.fetch("SELECT event_id, type FROM events")
        }
        return [types[e] for e in delivered]
    finally:
        for conn in (t1, t2, reader):
            await conn.close()


async def fill_reader_table(cfg: Config, tech: Technique) -> tuple[int, int, int, int]:
    """200k events in transactions of 100 (so B sees many xids); return the cursor of the
    middle row (catch-up reader) and of the last row (tail reader) as (xid, id) pairs."""
    conn = await connect(cfg, tech.schema)
    try:
        await conn.execute(TRUNCATE)
        for _ in range(READER_EVENTS // FILL_ROWS_PER_TX):
            async with conn.transaction():
                await conn.execute("SET LOCAL synchronous_commit = off")
                await conn.execute(FILL, FILL_ROWS_PER_TX)
        await conn.execute("VACUUM ANALYZE events")
        mid = await conn.fetchrow(
            CURSOR_AT_XID if tech.xid else CURSOR_AT_ID, READER_EVENTS // 2 - 1
        )
        last = await conn.fetchrow(CURSOR_AT_XID if tech.xid else CURSOR_AT_ID, READER_EVENTS - 1)
        assert mid is not None
        assert last is not None
        return int(mid["x"]), int(mid["event_id"]), int(last["x"]), int(last["event_id"])
    finally:
        await conn.close()


async def plan_of(conn: Conn, query: str, *args: object) -> str:
    rows = await conn.fetch(f"EXPLAIN (COSTS OFF) {query}", *args)
    nodes = [str(r[0]).strip().removeprefix("->  ") for r in rows]
    return " / ".join(n for n in nodes if not n.startswith(("Filter", "Index Cond", "Sort Key")))


async def reader_cost(cfg: Config) -> tuple[dict[str, list[float]], dict[str, str], int]:
    """Per-round medians (ms) of each reader query; queries are interleaved."""
    tech_a = next(t for t in TECHNIQUES if t.key == "A")
    tech_b = next(t for t in TECHNIQUES if t.key == "B")
    _, mid_a, _, last_a = await fill_reader_table(cfg, tech_a)
    mid_xb, mid_b, last_xb, last_b = await fill_reader_table(cfg, tech_b)
    ca, cb = await connect(cfg, tech_a.schema), await connect(cfg, tech_b.schema)
    try:
        cases: dict[str, tuple[Conn, str, tuple[int, ...]]] = {
            "id query, catching up (500 rows)": (ca, READ_BY_ID, (mid_a,)),
            "xid8 query, catching up (500 rows)": (cb, READ_BY_XID, (mid_xb, mid_b)),
            "id query, at the tail (0 rows)": (ca, READ_BY_ID, (last_a,)),
            "xid8 query, at the tail (0 rows)": (cb, READ_BY_XID, (last_xb, last_b)),
        }
        plans = {name: await plan_of(c, q, *a) for name, (c, q, a) in cases.items()}
        rowcounts = {name: len(await c.fetch(q, *a)) for name, (c, q, a) in cases.items()}
        rows_mid = rowcounts["xid8 query, catching up (500 rows)"]
        medians: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(cfg.rounds):
            samples: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(READER_RUNS):
                for name, (c, q, a) in cases.items():
                    started = time.perf_counter()
                    await c.fetch(q, *a)
                    samples[name].append((time.perf_counter() - started) * 1000)
            for name, values in samples.items():
                medians[name].append(statistics.median(values))
        return medians, plans, rows_mid
    finally:
        await ca.close()
        await cb.close()


# --------------------------------------------------------------------------- output


def load() -> str:
    """CPU count and load average: other work on the box makes the figures noisy."""
    one, five, _ = os.getloadavg()
    return f"{os.cpu_count()} CPUs, load average {one:.1f} (1 min) {five:.1f} (5 min)"


def fmt(values: Sequence[float], digits: int = 0) -> str:
    med = statistics.median(values)
    return f"{med:,.{digits}f} ({min(values):,.{digits}f}–{max(values):,.{digits}f})"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    print()


# --------------------------------------------------------------------------- main flow


async def bench(cfg: Config) -> None:
    print("Laneway event-ordering benchmark")
    for name, value in await server_settings(cfg):
        print(f"  {name}: {value}")
    print(
        f"  rounds: {cfg.rounds}; {cfg.transactions} single / {cfg.batch_transactions} batched"
        f" transactions per run; pg_notify {'on' if cfg.notify else 'off'}"
    )
    print(f"  this machine: {load()}")
    print()
    started = time.monotonic()
    ids = await create_schemas(cfg)
    try:
        # 2. correctness first: it is quick and tells whether the figures mean anything.
        print("Reader correctness (writer 1 inserts first, commits 200 ms after writer 2)")
        rows: list[list[str]] = []
        for tech in TECHNIQUES:
            skip = await skip_check(cfg, tech, ids[tech.key])
            order = await order_check(cfg, tech, ids[tech.key])
            rows.append(
                [
                    tech.label,
                    str(skip.first_poll),
                    str(skip.delivered),
                    f"skips {skip.missed}" if skip.missed else "no skip",
                    " then ".join(order),
                    "commit order" if order == ["from-T2", "from-T1"] else "NOT commit order",
                ]
            )
        print_table(
            [
                "technique",
                "1st poll",
                "delivered",
                "result",
                "instance X delivered",
                "per-instance order",
            ],
            rows,
        )

        # 1. throughput, interleaved rounds.
        workloads = [Workload(False, w, cfg.transactions) for w in cfg.writers] + [
            Workload(True, w, cfg.batch_transactions) for w in cfg.batch_writers
        ]
        results: dict[tuple[Workload, str], list[float]] = {}
        for r in range(cfg.rounds):
            rotated = TECHNIQUES[r % 3 :] + TECHNIQUES[: r % 3]
            for work in workloads:
                for tech in rotated:
                    rate = await run_workload(cfg, tech, work, ids[tech.key])
                    results.setdefault((work, tech.key), []).append(rate)
            print(f"  round {r + 1}/{cfg.rounds} done ({time.monotonic() - started:.0f} s)")
        print()
        print("Write throughput: median (min–max) over rounds")
        rows = []
        for work in workloads:
            base = statistics.median(results[(work, "0")])
            row = [work.label, work.unit]
            row += [fmt(results[(work, t.key)]) for t in TECHNIQUES]
            row += [f"{statistics.median(results[(work, k)]) / base:.2f}" for k in ("A", "B")]
            rows.append(row)
        print_table(["workload", "unit", *(t.label for t in TECHNIQUES), "A/0", "B/0"], rows)

        # 3. reader cost.
        medians, plans, rows_mid = await reader_cost(cfg)
        print(
            f"Reader query on {READER_EVENTS:,} events: ms, median of {READER_RUNS} runs"
            " per round, median (min–max) over rounds"
        )
        print_table(
            ["query", "ms", "plan"],
            [[name, fmt(v, 3), plans[name]] for name, v in medians.items()],
        )
        if rows_mid != READ_LIMIT:
            print(f"  note: the xid8 catch-up query returned {rows_mid} rows, not {READ_LIMIT}")
        print(f"total {time.monotonic() - started:.0f} s; this machine now: {load()}")
    finally:
        await drop_schemas(cfg.dsn)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL"))
    parser.add_argument(
        "--pgdata",
        type=Path,
        default=Path(__file__).resolve().parent.parent / ".laneway" / "bench-pg",
        help="data directory of the embedded server (when no database URL is given)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--transactions", type=int, default=3000, help="per single-shape run")
    parser.add_argument("--batch-transactions", type=int, default=600, help="per batched run")
    parser.add_argument("--writers", default="1,4,16,64", help="single-shape concurrency")
    parser.add_argument("--batch-writers", default="1,4,16,64", help="batched concurrency")
    parser.add_argument("--synchronous-commit", choices=["on", "off"], default=None)
    parser.add_argument(
        "--notify",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="pg_notify in every transaction (default on)",
    )
    return parser.parse_args(argv)


def writers_list(text: str) -> tuple[int, ...]:
    values = tuple(int(v) for v in text.split(",") if v.strip())
    if not values or min(values) < 1:
        raise SystemExit(f"bad writer list: {text!r}")
    return values


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.rounds < 1 or args.transactions < 1 or args.batch_transactions < 1:
        raise SystemExit("--rounds and the transaction counts must be positive")
    server: PostgresServer | None = None
    dsn: str | None = args.database_url
    if not dsn:
        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            from pgserver.postgres_server import get_server  # only for the embedded server

        args.pgdata.mkdir(parents=True, exist_ok=True)
        server = get_server(args.pgdata, cleanup_mode="stop")
        dsn = server.get_uri()
        print(f"embedded PostgreSQL in {args.pgdata}")
    batch_writers = writers_list(args.batch_writers)
    if max(batch_writers) > INSTANCES // BATCH:
        raise SystemExit(f"batched runs need at most {INSTANCES // BATCH} writers")
    cfg = Config(
        dsn=dsn,
        rounds=args.rounds,
        transactions=args.transactions,
        batch_transactions=args.batch_transactions,
        writers=writers_list(args.writers),
        batch_writers=batch_writers,
        synchronous_commit=args.synchronous_commit,
        notify=args.notify,
    )
    try:
        asyncio.run(bench(cfg))
    finally:
        if server is not None:
            server.cleanup()


if __name__ == "__main__":
    main()
