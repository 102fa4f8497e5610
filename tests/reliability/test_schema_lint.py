"""Schema lint: the migrated `laneway` schema, read back from pg_catalog.

Keys that cannot run out, times that carry their zone, the unique indexes that decide races
(idempotency, singleton, operation slots; a cron fire is deduplicated by its idempotency key),
and autovacuum settings on the tables every instance rewrites several times (on each partition
of a partitioned one: its parent holds no storage, nor storage options).
"""

import asyncpg
import pytest

HOT_TABLES = ("instances", "events")
MAX_VACUUM_SCALE_FACTOR = 0.02

COLUMNS = """
SELECT c.relname AS table_name, a.attname AS column_name,
       format_type(a.atttypid, a.atttypmod) AS type,
       a.attidentity <> '' AS is_identity,
       COALESCE(pg_get_expr(d.adbin, d.adrelid) LIKE 'nextval(%', false) AS is_serial
  FROM pg_attribute AS a
  JOIN pg_class AS c ON c.oid = a.attrelid
  JOIN pg_namespace AS n ON n.oid = c.relnamespace
  LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE n.nspname = 'laneway'
   AND c.relkind IN ('r', 'p')
   AND a.attnum > 0
   AND NOT a.attisdropped
 ORDER BY 1, 2
"""

SEQUENCES = """
SELECT c.relname AS sequence_name, format_type(s.seqtypid, NULL) AS type
  FROM pg_sequence AS s
  JOIN pg_class AS c ON c.oid = s.seqrelid
  JOIN pg_namespace AS n ON n.oid = c.relnamespace
 WHERE n.nspname = 'laneway'
"""

KEY_COLUMNS = """
SELECT c.relname AS table_name, k.conname, a.attname AS column_name,
       format_type(a.atttypid, a.atttypmod) AS type
  FROM pg_constraint AS k
  JOIN pg_class AS c ON c.oid = k.conrelid
  JOIN pg_namespace AS n ON n.oid = c.relnamespace
  JOIN pg_attribute AS a ON a.attrelid = k.conrelid AND a.attnum = ANY(k.conkey)
 WHERE n.nspname = 'laneway'
   AND k.contype IN ('p', 'f')
"""

UNIQUE_INDEXES = """
SELECT t.relname AS table_name, ix.relname AS index_name,
       ARRAY(SELECT a.attname
               FROM unnest(i.indkey) WITH ORDINALITY AS k (attnum, position)
               JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
              ORDER BY k.position)::text[] AS columns,
       pg_get_expr(i.indpred, i.indrelid) AS predicate
  FROM pg_index AS i
  JOIN pg_class AS t ON t.oid = i.indrelid
  JOIN pg_class AS ix ON ix.oid = i.indexrelid
  JOIN pg_namespace AS n ON n.oid = t.relnamespace
 WHERE n.nspname = 'laneway'
   AND i.indisunique
   AND i.indisvalid
"""

# The tables that store each of $1's rows: the table itself, or a partitioned one's partitions.
RELOPTIONS = """
SELECT t.relname AS table_name, c.relname AS storage_name,
       COALESCE(c.reloptions, '{}') AS options
  FROM pg_class AS t
  JOIN pg_namespace AS n ON n.oid = t.relnamespace
  JOIN pg_class AS c
    ON (t.relkind = 'r' AND c.oid = t.oid)
    OR (t.relkind = 'p' AND c.oid IN (SELECT i.inhrelid FROM pg_inherits AS i
                                       WHERE i.inhparent = t.oid))
 WHERE n.nspname = 'laneway'
   AND t.relname = ANY($1::text[])
"""


async def test_no_key_or_sequence_can_run_out_when_schema_is_migrated(
    admin: asyncpg.Connection,
) -> None:
    columns = await admin.fetch(COLUMNS)
    generated = [
        f"{r['table_name']}.{r['column_name']} {r['type']}"
        for r in columns
        if (r["is_identity"] or r["is_serial"]) and r["type"] != "bigint"
    ]
    sequences = [
        f"{r['sequence_name']} {r['type']}"
        for r in await admin.fetch(SEQUENCES)
        if r["type"] != "bigint"
    ]
    narrow_keys = [
        f"{r['table_name']}.{r['column_name']} ({r['conname']}) {r['type']}"
        for r in await admin.fetch(KEY_COLUMNS)
        if r["type"] in ("smallint", "integer")
    ]

    assert any(r["is_identity"] for r in columns), "the lint sees no identity column at all"
    assert generated == []
    assert sequences == []
    assert narrow_keys == []


async def test_every_time_column_carries_its_zone_when_schema_is_migrated(
    admin: asyncpg.Connection,
) -> None:
    columns = await admin.fetch(COLUMNS)
    zoneless = [
        f"{r['table_name']}.{r['column_name']}"
        for r in columns
        if r["type"].startswith("timestamp") and "with time zone" not in r["type"]
    ]

    assert sum(r["type"] == "timestamp with time zone" for r in columns) >= 10
    assert zoneless == []


@pytest.mark.parametrize(
    ("table", "columns", "predicate_mentions"),
    [
        pytest.param(
            "instances", ["idempotency_key"], "idempotency_key IS NOT NULL", id="idempotency"
        ),
        pytest.param("instances", ["name", "singleton_key"], "status", id="singleton"),
        pytest.param("operations", ["instance_id", "stage", "position"], None, id="operation-slot"),
        pytest.param("schedules", ["name"], None, id="schedule"),
    ],
)
async def test_unique_index_decides_races_when_schema_is_migrated(
    admin: asyncpg.Connection, table: str, columns: list[str], predicate_mentions: str | None
) -> None:
    indexes = [
        r
        for r in await admin.fetch(UNIQUE_INDEXES)
        if r["table_name"] == table and list(r["columns"]) == columns
    ]

    assert len(indexes) == 1, indexes
    predicate = indexes[0]["predicate"]
    if predicate_mentions is None:
        assert predicate is None
    else:
        assert predicate is not None
        assert predicate_mentions in predicate


async def test_hot_tables_vacuum_early_when_schema_is_migrated(admin: asyncpg.Connection) -> None:
    rows = await admin.fetch(RELOPTIONS, list(HOT_TABLES))
    options = {
        r["storage_name"]: dict(option.split("=", 1) for option in r["options"]) for r in rows
    }

    assert sorted({r["table_name"] for r in rows}) == sorted(HOT_TABLES)
    assert len(options) > len(HOT_TABLES)  # the events' partitions are each read
    for table, table_options in options.items():
        factor = table_options.get("autovacuum_vacuum_scale_factor")
        assert factor is not None, f"{table} keeps the default scale factor (0.2)"
        assert float(factor) <= MAX_VACUUM_SCALE_FACTOR, (table, factor)
