-- The event log's partition upkeep runs as the schema's owner, whatever role calls it, so that
-- processes running as a least-privilege role (docs/deploying.md: USAGE, DML and EXECUTE, no
-- CREATE) keep the partitions too. Before, their engines failed at every round of it ("permission
-- denied for schema laneway") once the partitions the migration added ran out: events went to the
-- default partition, which retention empties row by row instead of dropping a day at once; and
-- their ANALYZE of the parent was skipped with a warning (only an owner may analyse a table).
--
-- The three functions that change the partitions become SECURITY DEFINER, with a search_path of
-- pg_catalog only (they name every Laneway object with its schema), and laneway.analyze_events()
-- is new, for the ANALYZE. What they may do is bounded by their own checks: a partition is added
-- only where none overlaps, retired only an hour past its end with no live instance's event in
-- it, and only tables named as partitions are dropped once detached. EXECUTE on them is taken from
-- PUBLIC (PostgreSQL's default for a new function), so only the roles granted it may call them.
-- laneway/store/sql/functions.sql has their full text.

ALTER FUNCTION laneway.add_event_partition(timestamptz, timestamptz)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION laneway.retire_event_partition(text)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION laneway.drop_detached_event_partitions()
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

-- laneway.analyze_events(): ANALYZE the partitioned event log (the parent as a whole, and each
-- partition, a bounded sample each; PostgreSQL 15 has no ANALYZE ONLY). Autovacuum never
-- analyses a partitioned parent, whose statistics the planner uses for joins over the whole log.
CREATE FUNCTION laneway.analyze_events()
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    ANALYZE laneway.events;
END;
$$;

REVOKE EXECUTE ON FUNCTION laneway.add_event_partition(timestamptz, timestamptz) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION laneway.retire_event_partition(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION laneway.drop_detached_event_partitions() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION laneway.analyze_events() FROM PUBLIC;
