"""The test-only `chaos` schema: the side-effect ledger, the audit trigger, and reading a history.

Owns three things the harness installs next to Laneway's tables (never in migrations):

- `chaos.ledger`: one row per handler execution, written by the chaos workflows on their own
  autocommit connection (so a row survives whatever happens to the engine's transaction):
  instance, step, attempt, owner, clock_timestamp().
- `chaos.audit` and a trigger on `laneway.instances`: one row per UPDATE with the old and new
  status, owner, lease epoch and lease expiry, the writer's application_name and role timeouts,
  and clock_timestamp(). Columns added by later migrations are read through to_jsonb, so the
  trigger works on any schema version that has the columns it needs.
- `read_history`: everything the checker needs, read back as plain records.
"""

import asyncio
import json
import os
from dataclasses import dataclass, fields
from datetime import datetime
from uuid import UUID

import asyncpg
from asyncpg.pool import PoolConnectionProxy

SCHEMA = """
CREATE SCHEMA IF NOT EXISTS chaos;

CREATE TABLE IF NOT EXISTS chaos.ledger (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_id  uuid NOT NULL,
    step         text NOT NULL,
    attempt      integer NOT NULL,
    owner_id     text NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE IF NOT EXISTS chaos.audit (
    id                    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_id           uuid NOT NULL,
    old_status            text NOT NULL,
    new_status            text NOT NULL,
    old_owner             text,
    new_owner             text,
    old_epoch             bigint,
    new_epoch             bigint,
    old_lease_expires_at  timestamptz,
    new_lease_expires_at  timestamptz,
    old_renewed_at        timestamptz,
    new_renewed_at        timestamptz,
    recoveries            integer,
    last_error            text,
    application_name      text NOT NULL,
    timeouts              text NOT NULL,
    at                    timestamptz NOT NULL
);

CREATE OR REPLACE FUNCTION chaos.audit_instance() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    o jsonb := to_jsonb(OLD) - 'state' - 'params' - 'next_params' - 'result';
    n jsonb := to_jsonb(NEW) - 'state' - 'params' - 'next_params' - 'result';
BEGIN
    INSERT INTO chaos.audit (
        instance_id, old_status, new_status, old_owner, new_owner, old_epoch, new_epoch,
        old_lease_expires_at, new_lease_expires_at, old_renewed_at, new_renewed_at,
        recoveries, last_error, application_name, timeouts, at)
    VALUES (
        NEW.instance_id, OLD.status, NEW.status, OLD.owner_id, NEW.owner_id,
        (o ->> 'lease_epoch')::bigint, (n ->> 'lease_epoch')::bigint,
        OLD.lease_expires_at, NEW.lease_expires_at,
        (o ->> 'lease_renewed_at')::timestamptz, (n ->> 'lease_renewed_at')::timestamptz,
        (n ->> 'recoveries')::integer, NEW.last_error,
        current_setting('application_name'),
        current_setting('statement_timeout') || '/' || current_setting('lock_timeout') || '/'
            || current_setting('idle_in_transaction_session_timeout'),
        clock_timestamp());
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS chaos_audit ON laneway.instances;
CREATE TRIGGER chaos_audit AFTER UPDATE ON laneway.instances
    FOR EACH ROW EXECUTE FUNCTION chaos.audit_instance();

-- The retention sweep deletes finished instances with their events: keep what the checker
-- and the subscriber comparison need of them, so a pruned instance is not counted as lost.
CREATE TABLE IF NOT EXISTS chaos.pruned_instances (
    instance_id      uuid PRIMARY KEY,
    name             text NOT NULL,
    status           text NOT NULL,
    params           text,
    result           text,
    last_error       text,
    idempotency_key  text
);

CREATE TABLE IF NOT EXISTS chaos.pruned_events (
    event_id     bigint PRIMARY KEY,
    instance_id  uuid NOT NULL,
    name         text NOT NULL,
    type         text NOT NULL,
    at           timestamptz NOT NULL
);

CREATE OR REPLACE FUNCTION chaos.keep_pruned_instance() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos.pruned_instances (
        instance_id, name, status, params, result, last_error, idempotency_key)
    VALUES (OLD.instance_id, OLD.name, OLD.status, OLD.params::text, OLD.result::text,
            OLD.last_error, OLD.idempotency_key);
    RETURN OLD;
END
$$;

CREATE OR REPLACE FUNCTION chaos.keep_pruned_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos.pruned_events (event_id, instance_id, name, type, at)
    VALUES (OLD.event_id, OLD.instance_id, OLD.name, OLD.type, OLD.at);
    RETURN OLD;
END
$$;

DROP TRIGGER IF EXISTS chaos_pruned ON laneway.instances;
CREATE TRIGGER chaos_pruned BEFORE DELETE ON laneway.instances
    FOR EACH ROW EXECUTE FUNCTION chaos.keep_pruned_instance();

DROP TRIGGER IF EXISTS chaos_pruned ON laneway.events;
CREATE TRIGGER chaos_pruned BEFORE DELETE ON laneway.events
    FOR EACH ROW EXECUTE FUNCTION chaos.keep_pruned_event();
"""

# Every event, the pruned ones included.
ALL_EVENTS = """
SELECT event_id, instance_id, name, type, at FROM laneway.events
UNION ALL
SELECT event_id, instance_id, name, type, at FROM chaos.pruned_events
"""

INSERT_LEDGER = (
    "INSERT INTO chaos.ledger (instance_id, step, attempt, owner_id) VALUES ($1, $2, $3, $4)"
)

TERMINAL = ("completed", "failed", "cancelled")

Conn = asyncpg.Connection | PoolConnectionProxy  # a plain or a pooled connection


async def install(conn: Conn) -> None:
    """Create the chaos schema, ledger, audit table and trigger (idempotent)."""
    await conn.execute(SCHEMA)


class LedgerWriter:
    """The ledger side of a worker process: a small autocommit pool, opened on first use.

    The URL is LANEWAY_CHAOS_LEDGER_URL (the database directly, never through a test proxy:
    a side effect happens in the world even while the worker's own link is cut).
    """

    def __init__(self) -> None:
        self._pool: asyncpg.Pool | None = None
        self._lock = asyncio.Lock()

    async def record(self, instance_id: UUID, step: str, attempt: int) -> None:
        pool = await self._open()
        owner = os.environ.get("LANEWAY_OWNER_ID", "unknown")
        await pool.execute(INSERT_LEDGER, instance_id, step, attempt, owner)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def _open(self) -> asyncpg.Pool:
        async with self._lock:
            if self._pool is None:
                url = os.environ.get("LANEWAY_CHAOS_LEDGER_URL") or os.environ["DATABASE_URL"]
                owner = os.environ.get("LANEWAY_OWNER_ID", "unknown")
                self._pool = await asyncpg.create_pool(
                    url,
                    min_size=1,
                    max_size=4,
                    server_settings={"application_name": f"chaos-ledger-{owner}"[:63]},
                )
            return self._pool


# -- reading a history back --------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditRow:
    instance_id: UUID
    old_status: str
    new_status: str
    old_owner: str | None
    new_owner: str | None
    old_epoch: int | None
    new_epoch: int | None
    old_lease_expires_at: datetime | None
    new_lease_expires_at: datetime | None
    recoveries: int | None
    last_error: str | None
    application_name: str
    timeouts: str
    at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerRow:
    instance_id: UUID
    step: str
    attempt: int
    owner_id: str
    at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class FinalInstance:
    instance_id: UUID
    name: str
    status: str
    params: object
    result: object
    last_error: str | None
    terminal_events: int
    checkpoint_events: int  # checkpoint and paused events: one per step boundary passed


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredHistory:
    instances: dict[UUID, FinalInstance]
    audit: list[AuditRow]
    ledger: list[LedgerRow]


async def read_history(conn: Conn) -> StoredHistory:
    """Read every instance (with its count of terminal events), audit row and ledger row;
    instances the retention sweep deleted are read from what the chaos triggers kept."""
    rows = await conn.fetch(
        f"""
        WITH everyone AS (
            SELECT instance_id, name, status, params::text AS params, result::text AS result,
                   last_error
              FROM laneway.instances
            UNION ALL
            SELECT instance_id, name, status, params, result, last_error
              FROM chaos.pruned_instances
        ),
        counts AS (
            SELECT instance_id,
                   count(*) FILTER (WHERE type = ANY($1::text[])) AS terminal,
                   count(*) FILTER (WHERE type IN ('checkpoint', 'paused')) AS checkpoints
              FROM ({ALL_EVENTS}) AS e
             GROUP BY instance_id
        )
        SELECT i.*, coalesce(c.terminal, 0) AS terminal,
               coalesce(c.checkpoints, 0) AS checkpoints
          FROM everyone AS i
          LEFT JOIN counts AS c USING (instance_id)
        """,  # noqa: S608 (ALL_EVENTS is a constant of this module)
        list(TERMINAL),
    )
    instances = {
        row["instance_id"]: FinalInstance(
            instance_id=row["instance_id"],
            name=row["name"],
            status=row["status"],
            params=_json(row["params"]),
            result=_json(row["result"]),
            last_error=row["last_error"],
            terminal_events=row["terminal"],
            checkpoint_events=row["checkpoints"],
        )
        for row in rows
    }
    audit = [
        AuditRow(**{f.name: row[f.name] for f in fields(AuditRow)})
        for row in await conn.fetch("SELECT * FROM chaos.audit ORDER BY at, id")
    ]
    ledger = [
        LedgerRow(**{f.name: row[f.name] for f in fields(LedgerRow)})
        for row in await conn.fetch("SELECT * FROM chaos.ledger ORDER BY at, id")
    ]
    return StoredHistory(instances=instances, audit=audit, ledger=ledger)


def _json(text: str | None) -> object:
    return None if text is None else json.loads(text)
