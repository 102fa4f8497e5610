"""The statements of the migration runner, and the database clock.

See laneway/store/queries/__init__.py for how statements are written.
"""

from laneway.store.queries.workers import LIVE

# ---------------------------------------------------------------------------------------------
# migrations

# $1 advisory lock key
LOCK_MIGRATIONS = "SELECT pg_advisory_lock($1)"

# $1 advisory lock key
UNLOCK_MIGRATIONS = "SELECT pg_advisory_unlock($1)"

CREATE_MIGRATIONS_TABLE = """
CREATE SCHEMA IF NOT EXISTS laneway;
CREATE TABLE IF NOT EXISTS laneway.schema_migrations (
    name       text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""

# Whether the table of applied migrations exists, asked without DDL: a start with nothing
# pending must not need CREATE on the database (CREATE SCHEMA IF NOT EXISTS checks it anyway).
MIGRATIONS_TABLE_EXISTS = """
SELECT to_regclass('laneway.schema_migrations') IS NOT NULL
"""

WORKERS_TABLE_EXISTS = """
SELECT to_regclass('laneway.workers') IS NOT NULL
"""

# How many engines are live (laneway.workers, 0012): while migrations are pending, they are of
# an older release (serve and worker migrate as they start).
LIVE_ENGINES = f"""
SELECT count(*)
  FROM laneway.workers AS w
 WHERE {LIVE}
"""

APPLIED_MIGRATIONS = """
SELECT name
  FROM laneway.schema_migrations
 ORDER BY name
"""

# $1 migration name
RECORD_MIGRATION = """
INSERT INTO laneway.schema_migrations (name)
VALUES ($1)
"""

SCHEMA_VERSION = """
SELECT max(name)
  FROM laneway.schema_migrations
"""

# ---------------------------------------------------------------------------------------------
# clock

DB_NOW = "SELECT now()"
# "on" in a session that cannot write: a standby, or default_transaction_read_only.
READ_ONLY = "SELECT current_setting('transaction_read_only')"
