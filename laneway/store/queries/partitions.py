"""The event log's time partitions: adding them ahead, retiring past ones, analysing the parent.

See laneway/store/queries/__init__.py for how statements are written; the DDL itself is in the
functions laneway.add_event_partition, laneway.retire_event_partition and
laneway.drop_detached_event_partitions (functions.sql).
"""

# $1 advisory lock key
# One engine at a time changes the partitions; the others skip their round (no waiting).
TRY_LOCK_PARTITIONS = """
SELECT pg_try_advisory_xact_lock($1)
"""

# The range partitions of laneway.events, oldest first: name, lower and upper bound.
EVENT_PARTITIONS = """
SELECT name, lower, upper
  FROM laneway.event_partitions()
"""

# $1 partition width in seconds, $2 how far ahead of now to cover, in seconds
# The ranges still to add so that partitions cover now to now + $2: the slots $1 wide, on a
# grid of $1 from midnight UTC, that no partition overlaps yet (a slot a partition of another
# width overlaps in part is left to the default partition).
MISSING_EVENT_PARTITIONS = """
WITH slots AS (
    SELECT s.lower, s.lower + $1::double precision * interval '1 second' AS upper
      FROM generate_series(date_bin($1::double precision * interval '1 second', now(),
                                    timestamptz '2000-01-01 00:00:00+00'),
                           now() + $2::double precision * interval '1 second',
                           $1::double precision * interval '1 second') AS s (lower)
)
SELECT s.lower, s.upper
  FROM slots AS s
 WHERE NOT EXISTS (SELECT 1
                     FROM laneway.event_partitions() AS p
                    WHERE p.lower < s.upper
                      AND p.upper > s.lower)
 ORDER BY s.lower
"""

# $1 lower bound, $2 upper bound; returns the new partition's name (NULL: one overlaps already)
ADD_EVENT_PARTITION = """
SELECT laneway.add_event_partition($1::timestamptz, $2::timestamptz)
"""

# $1 seconds: the partitions that ended longer ago than that, and over an hour ago (the
# function checks that hour again, and whether the partition's instances are all gone).
RETIRING_EVENT_PARTITIONS = """
SELECT name
  FROM laneway.event_partitions()
 WHERE upper <= now() - greatest($1::double precision, 3600) * interval '1 second'
"""

# $1 partition name; true when it was detached (laneway.retire_event_partition)
RETIRE_EVENT_PARTITION = """
SELECT laneway.retire_event_partition($1)
"""

# The names of the detached partitions dropped now (laneway.drop_detached_event_partitions): a
# transaction of its own, after the detach's has committed, so that no append waits for it.
DROP_DETACHED_EVENT_PARTITIONS = """
SELECT name FROM laneway.drop_detached_event_partitions() AS name
"""

# $1 seconds: whether the parent's statistics are older than that (or missing). Autovacuum
# analyses partitions but never a partitioned parent, whose statistics the planner uses for
# joins over the whole log.
EVENTS_STATISTICS_STALE = """
SELECT COALESCE(greatest(last_analyze, last_autoanalyze)
                  < now() - $1::double precision * interval '1 second', true)
  FROM pg_stat_user_tables
 WHERE relid = 'laneway.events'::regclass
"""

# ANALYZE_EVENTS reads a sample of every partition: more than the pool's statement timeout
# allows once the log is large.
ANALYZE_EVENTS_TIMEOUT = """
SET LOCAL statement_timeout = '10min'
"""

# PostgreSQL 15 has no ANALYZE ONLY (18 adds it): this samples the parent as a whole and
# re-analyses each partition too, a bounded sample per partition. As the schema's owner
# (laneway.analyze_events, 0031): any other role's ANALYZE would be skipped with a warning.
ANALYZE_EVENTS = """
SELECT laneway.analyze_events()
"""
