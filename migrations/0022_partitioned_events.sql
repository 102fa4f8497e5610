-- Time-partitioned event history (issue #22): laneway.events becomes a table partitioned by
-- range of `at`, so that retention drops whole partitions instead of deleting events row by
-- row (the vacuum-heavy path on a table of tens of millions of events).
--
-- One partition per UTC day (laneway/store/partitions.py says why a day). The engine's upkeep
-- adds them two days ahead and retires the past ones no instance that still exists has events
-- in; laneway.events_default takes any event no partition covers, so an append never fails,
-- and retention deletes the events there row by row. The key becomes (event_id, at): a
-- partitioned table's unique keys must hold its partition key. event_id stays one identity,
-- drawn under the append lock, so ids stay unique and in commit order across partitions (the
-- resume cursor and per-instance replay read the parent, ordered by id).
--
-- The conversion copies every event into the new table, under the migration's lock: the old
-- table is renamed away, the new one takes its name, indexes, identity (continuing from the
-- old sequence), privileges and triggers, and the old table goes. The functions that append
-- and read events name laneway.events and are unchanged.

LOCK TABLE laneway.events IN ACCESS EXCLUSIVE MODE;

ALTER TABLE laneway.events RENAME TO events_unpartitioned;
ALTER INDEX laneway.events_pkey RENAME TO events_unpartitioned_pkey;
ALTER INDEX laneway.events_instance RENAME TO events_unpartitioned_instance;
ALTER SEQUENCE laneway.events_event_id_seq RENAME TO events_unpartitioned_event_id_seq;

CREATE TABLE laneway.events (
    event_id          bigint GENERATED ALWAYS AS IDENTITY,
    instance_id       uuid NOT NULL,
    name              text NOT NULL,
    type              text NOT NULL,
    status            text NOT NULL,
    at                timestamptz NOT NULL DEFAULT now(),
    attempt           integer,
    error             text,
    stage             text,
    checkpoint        text,
    signal            text,
    PRIMARY KEY (event_id, at)
) PARTITION BY RANGE (at);

CREATE INDEX events_instance ON laneway.events (instance_id, event_id);

-- A partitioned parent holds no storage options: each partition carries the hot-table vacuum
-- settings (0003) itself.
CREATE TABLE laneway.events_default PARTITION OF laneway.events DEFAULT
    WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02);

-- laneway.event_partitions(): the range partitions of laneway.events and their bounds, oldest
-- first (the default partition has none and is not listed). The bounds are read back from the
-- catalog, the one place that cannot disagree with what PostgreSQL routes by.
CREATE OR REPLACE FUNCTION laneway.event_partitions()
RETURNS TABLE (name text, lower timestamptz, upper timestamptz)
LANGUAGE sql
STABLE
AS $$
SELECT c.relname::text, b.bound[1]::timestamptz, b.bound[2]::timestamptz
  FROM pg_inherits AS i
  JOIN pg_class AS c ON c.oid = i.inhrelid
 CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                 'FROM \(''([^'']+)''\) TO \(''([^'']+)''\)')
       AS b (bound)
 WHERE i.inhparent = 'laneway.events'::regclass
   AND b.bound IS NOT NULL
 ORDER BY 2
$$;

-- laneway.add_event_partition(): a partition of laneway.events for [p_from, p_to), named by
-- its lower bound in UTC; returns its name, or NULL when a partition overlaps that range
-- already (another engine added it). It is built as a table of its own and attached,
-- which locks the parent only against other DDL (SHARE UPDATE EXCLUSIVE), never against
-- appends or reads. Events the default partition took for that range move into it first
-- (attaching checks that the default holds none); that check locks the default partition
-- for a moment, hence the short lock_timeout: the upkeep tries again at its next round.
CREATE OR REPLACE FUNCTION laneway.add_event_partition(p_from timestamptz, p_to timestamptz)
RETURNS text
LANGUAGE plpgsql
SET lock_timeout = '500ms'
AS $$
DECLARE
    part text := 'events_' || to_char(p_from AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MISS');
BEGIN
    IF EXISTS (SELECT 1
                 FROM laneway.event_partitions() AS p
                WHERE p.lower < p_to
                  AND p.upper > p_from) THEN
        RETURN NULL;
    END IF;
    EXECUTE format('CREATE TABLE laneway.%I (LIKE laneway.events INCLUDING DEFAULTS'
                   ' INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION)'
                   ' WITH (autovacuum_vacuum_scale_factor = 0.01,'
                   ' autovacuum_analyze_scale_factor = 0.02)', part);
    EXECUTE format('WITH moved AS (DELETE FROM laneway.events_default'
                   ' WHERE at >= $1 AND at < $2 RETURNING *)'
                   ' INSERT INTO laneway.%I SELECT * FROM moved', part)
      USING p_from, p_to;
    EXECUTE format('ALTER TABLE laneway.events ATTACH PARTITION laneway.%I'
                   ' FOR VALUES FROM (%L) TO (%L)', part, p_from, p_to);
    RETURN part;
END;
$$;

-- laneway.retire_event_partition(): detach and drop the partition p_name if it ended over an
-- hour ago (no append can still be landing in it) and no instance that still exists has an
-- event in it; returns whether it went. The check reads the partition before any strong lock
-- is taken. DETACH ... CONCURRENTLY is refused while a default partition exists, so the
-- detach takes the parent's ACCESS EXCLUSIVE lock, held only for the detach and the drop
-- (catalog work, no row is touched) and waited for at most lock_timeout.
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
    EXECUTE format('DROP TABLE laneway.%I', p_name);
    RETURN true;
END;
$$;

-- A partition for every UTC day the old table has events on, and for today and the next two
-- days (the upkeep keeps that lead from here on).
SELECT laneway.add_event_partition(d.day, d.day + interval '1 day')
  FROM (SELECT date_bin(interval '1 day', e.at, timestamptz '2000-01-01 00:00:00+00') AS day
          FROM laneway.events_unpartitioned AS e
        UNION
        SELECT date_bin(interval '1 day', now(), timestamptz '2000-01-01 00:00:00+00')
               + n * interval '1 day'
          FROM generate_series(0, 2) AS n) AS d
 ORDER BY d.day;

INSERT INTO laneway.events
       (event_id, instance_id, name, type, status, at, attempt, error, stage, checkpoint, signal)
OVERRIDING SYSTEM VALUE
SELECT event_id, instance_id, name, type, status, at, attempt, error, stage, checkpoint, signal
  FROM laneway.events_unpartitioned;

-- The identity goes on from where the old one stopped (ids of deleted events included), and
-- whatever privileges and triggers a deployment gave the old table, the new one gets.
DO $$
DECLARE
    old_seq record;
    grant_row record;
    trigger_row record;
BEGIN
    SELECT last_value, is_called INTO old_seq FROM laneway.events_unpartitioned_event_id_seq;
    PERFORM setval(pg_get_serial_sequence('laneway.events', 'event_id'),
                   old_seq.last_value, old_seq.is_called);
    FOR grant_row IN
        SELECT a.privilege_type, a.is_grantable,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                    ELSE quote_ident(pg_get_userbyid(a.grantee)) END AS grantee
          FROM pg_class AS c, aclexplode(c.relacl) AS a
         WHERE c.oid = 'laneway.events_unpartitioned'::regclass
           AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON laneway.events TO %s%s', grant_row.privilege_type,
                       grant_row.grantee,
                       CASE WHEN grant_row.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
    FOR trigger_row IN
        SELECT pg_get_triggerdef(t.oid) AS definition
          FROM pg_trigger AS t
         WHERE t.tgrelid = 'laneway.events_unpartitioned'::regclass
           AND NOT t.tgisinternal
    LOOP
        EXECUTE replace(trigger_row.definition,
                        ' ON ' || 'laneway.events_unpartitioned'::regclass::text || ' ',
                        ' ON laneway.events ');
    END LOOP;
END;
$$;

DROP TABLE laneway.events_unpartitioned;

ANALYZE laneway.events;
