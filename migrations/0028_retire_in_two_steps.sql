-- Retiring an event partition no longer holds the event log's lock while the partition's files
-- are unlinked (issue #22: "no long lock").
--
-- laneway.retire_event_partition() (0022) detached and dropped a past partition in one
-- transaction. The detach takes the partitioned parent's ACCESS EXCLUSIVE lock (DETACH
-- CONCURRENTLY is refused while a default partition exists), and it was held until the commit
-- of the drop, which unlinks the partition's files: on a slow disk ~0.3 s for a day of
-- 1,000,000 events, during which every append of an event waited (the retention bench saw an
-- append wait 116 ms). Now the function only detaches; the engine drops what was detached in a
-- transaction of its own with laneway.drop_detached_event_partitions(), which takes no lock on
-- the parent and also drops a detached partition a crash left between the two.

CREATE OR REPLACE FUNCTION laneway.retire_event_partition(p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET lock_timeout = '500ms'
AS $$
DECLARE
    live boolean;
BEGIN
    IF NOT EXISTS (SELECT 1
                     FROM laneway.event_partitions() AS p
                    WHERE p.name = p_name
                      AND p.upper <= now() - interval '1 hour') THEN
        RETURN false;
    END IF;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM laneway.%I AS e'
                   ' JOIN laneway.instances AS i ON i.instance_id = e.instance_id)', p_name)
       INTO live;
    IF live THEN
        RETURN false;
    END IF;
    EXECUTE format('ALTER TABLE laneway.events DETACH PARTITION laneway.%I', p_name);
    RETURN true;
END;
$$;

-- laneway.drop_detached_event_partitions() (0028): drop every event partition that was detached
-- (a table named as laneway.add_event_partition names them that is no partition any more:
-- retire_event_partition's, or one a crash left between its detach and this drop); returns
-- their names. Only the detached tables are locked.
CREATE OR REPLACE FUNCTION laneway.drop_detached_event_partitions()
RETURNS SETOF text
LANGUAGE plpgsql
SET lock_timeout = '500ms'
AS $$
DECLARE
    part text;
BEGIN
    FOR part IN
        SELECT c.relname::text
          FROM pg_class AS c
         WHERE c.relnamespace = 'laneway'::regnamespace
           AND c.relkind = 'r'
           AND NOT c.relispartition
           AND c.relname ~ '^events_[0-9]{8}t[0-9]{6}$'
         ORDER BY c.relname
    LOOP
        EXECUTE format('DROP TABLE laneway.%I', part);
        RETURN NEXT part;
    END LOOP;
END;
$$;
